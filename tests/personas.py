"""Personas used across the suite: a small organisation and the people in it.

budget_tree (grants for the current period, in GPU-hours):

    Org 10,000
    ├── nlp 6,000          manager: program manager      other programs hidden from them
    │   ├── olmo 3,000     researcher: member
    │   └── tulu 2,000
    └── vision 3,000       other_manager: program manager
        └── segmentation 1,000

leader has leadership on the root; cluster_admin has a cluster-wide role; outsider has none.
"""

from types import SimpleNamespace

import pytest

from budgets import services
from budgets.models import Role
from tests.budgets.factories import RoleFactory, UserFactory


@pytest.fixture
def budget_tree(db):
    root = services.create_root(None, "Allot Research", "org")
    services.set_grant(None, root, 10_000)
    nlp = services.create_node(None, root, "Language models", "nlp")
    services.set_grant(None, nlp, 6_000)
    olmo = services.create_node(None, nlp, "OLMo", "olmo")
    services.set_grant(None, olmo, 3_000)
    tulu = services.create_node(None, nlp, "Tülu", "tulu")
    services.set_grant(None, tulu, 2_000)
    vision = services.create_node(None, root, "Vision", "vision")
    services.set_grant(None, vision, 3_000)
    segmentation = services.create_node(None, vision, "Segmentation", "segmentation")
    services.set_grant(None, segmentation, 1_000)
    return SimpleNamespace(
        root=root, nlp=nlp, olmo=olmo, tulu=tulu, vision=vision, segmentation=segmentation
    )


def _person(username, role=None, node=None):
    user = UserFactory(username=username, first_name=username.replace("_", " ").title())
    if role:
        RoleFactory(user=user, role=role, node=node)
    return user


@pytest.fixture
def leader(budget_tree):
    return _person("leader", Role.Kind.LEADERSHIP, budget_tree.root)


@pytest.fixture
def manager(budget_tree):
    return _person("manager", Role.Kind.PROGRAM_MANAGER, budget_tree.nlp)


@pytest.fixture
def other_manager(budget_tree):
    return _person("other_manager", Role.Kind.PROGRAM_MANAGER, budget_tree.vision)


@pytest.fixture
def project_lead(budget_tree):
    return _person("project_lead", Role.Kind.PROJECT_LEAD, budget_tree.olmo)


@pytest.fixture
def researcher(budget_tree):
    return _person("researcher", Role.Kind.RESEARCHER, budget_tree.olmo)


@pytest.fixture
def outsider(budget_tree):
    return _person("outsider")


@pytest.fixture
def cluster_admin(budget_tree):
    return _person("cluster_admin", Role.Kind.CLUSTER_ADMIN)


@pytest.fixture
def personas(leader, manager, other_manager, project_lead, researcher, outsider, cluster_admin):
    return {
        "leader": leader,
        "manager": manager,
        "other_manager": other_manager,
        "project_lead": project_lead,
        "researcher": researcher,
        "outsider": outsider,
        "cluster_admin": cluster_admin,
    }
