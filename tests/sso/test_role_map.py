"""ALLOT_OIDC_ROLE_MAP: parsing, and the roles a sign-in grants and revokes, each audited."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from budgets.models import AuditEntry, Role, RoleKind
from budgets.rolemap import ROLE_KINDS, MappedRole, parse_role_map
from budgets.roles import sync_mapped_roles
from tests.budgets.factories import RoleFactory, UserFactory

pytestmark = pytest.mark.django_db

MAP = parse_role_map("gpu-leads=leadership:/, nlp-pm=program_manager:nlp, ops=cluster_admin")


def test_the_parser_knows_every_role_kind():
    assert set(ROLE_KINDS) == set(RoleKind.values)


def test_a_map_reads_group_role_and_scope():
    assert MAP == (
        MappedRole("gpu-leads", "leadership", ""),
        MappedRole("nlp-pm", "program_manager", "nlp"),
        MappedRole("ops", "cluster_admin", None),
    )
    assert parse_role_map("cn=x=researcher:nlp/olmo/") == (
        MappedRole("cn=x", "researcher", "nlp/olmo"),
    )


@pytest.mark.parametrize(
    "text", ["nlp-pm", "=leadership:/", "g=boss:/", "g=leadership", "g=cluster_admin:nlp"]
)
def test_a_malformed_map_stops_allot_naming_the_variable(text):
    with pytest.raises(ImproperlyConfigured, match="ALLOT_OIDC_ROLE_MAP"):
        parse_role_map(text)


def test_sign_in_grants_the_mapped_role_with_an_audit_row(budget_tree):
    alice = UserFactory(username="alice")
    entries = sync_mapped_roles(alice, ["nlp-pm", "other"], MAP)
    assert list(Role.objects.filter(user=alice).values_list("role", "node")) == [
        ("program_manager", budget_tree.nlp.pk)
    ]
    [entry] = entries
    assert (entry.action, entry.node, entry.actor, entry.field) == (
        "grant_role", budget_tree.nlp, None, "role"
    )  # fmt: skip
    assert (entry.old, entry.new) == ("", "program_manager for alice")
    assert "nlp-pm" in entry.reason and "single sign-on" in entry.reason


def test_the_same_groups_again_change_nothing(budget_tree):
    alice = UserFactory(username="alice")
    sync_mapped_roles(alice, ["nlp-pm"], MAP)
    assert sync_mapped_roles(alice, ["nlp-pm"], MAP) == []
    assert AuditEntry.objects.filter(field="role").count() == 1


def test_leaving_the_group_revokes_the_role_with_an_audit_row(budget_tree):
    alice = UserFactory(username="alice")
    sync_mapped_roles(alice, ["nlp-pm"], MAP)
    [entry] = sync_mapped_roles(alice, [], MAP)
    assert not Role.objects.filter(user=alice).exists()
    assert (entry.action, entry.node, entry.old, entry.new) == (
        "revoke_role", budget_tree.nlp, "program_manager for alice", ""
    )  # fmt: skip


def test_roles_the_map_does_not_name_are_left_alone(budget_tree):
    alice = UserFactory(username="alice")
    by_hand = RoleFactory(user=alice, role=Role.Kind.RESEARCHER, node=budget_tree.olmo)
    sync_mapped_roles(alice, [], MAP)
    assert list(Role.objects.filter(user=alice)) == [by_hand]


def test_cluster_admin_is_unscoped_and_audited_on_the_root(budget_tree):
    alice = UserFactory(username="alice")
    [grant] = sync_mapped_roles(alice, ["ops", "gpu-leads"], MAP[2:])
    assert Role.objects.get(user=alice).node is None
    assert grant.node == budget_tree.root


def test_leadership_on_slash_is_the_organisation(budget_tree):
    alice = UserFactory(username="alice")
    sync_mapped_roles(alice, ["gpu-leads"], MAP)
    assert Role.objects.get(user=alice).node == budget_tree.root


def test_a_scope_naming_no_node_is_skipped_not_fatal(budget_tree):
    alice = UserFactory(username="alice")
    mapping = parse_role_map("x=researcher:gone, nlp-pm=program_manager:nlp")
    sync_mapped_roles(alice, ["x", "nlp-pm"], mapping)
    assert list(Role.objects.filter(user=alice).values_list("role", flat=True)) == [
        "program_manager"
    ]
