"""Pricing GPU types when a cluster is registered: ``register_cluster --price TYPE=FACTOR``
goes through the audited budget service, refuses bad input before writing anything, and says
which GPU types are still unpriced (their nodes drained) and how to price them."""

from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from budgets.models import AuditAction, AuditEntry, GpuType
from scheduling.models import Cluster, Node


@pytest.fixture
def register(tmp_path, settings):
    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)

    def register(*extra, gpu_type="gpu", nodes=2):
        call_command(
            "register_cluster",
            "mars",
            "--backend=simulated",
            f"--option=nodes={nodes}",
            f"--option=gpu_type={gpu_type}",
            f"--option=state_dir={tmp_path}",
            *extra,
        )

    return register


def test_a_price_given_at_registration_leaves_the_nodes_in_service_and_is_audited(
    budget_tree, register, capsys
):
    register("--price", "gpu=1.5")
    assert GpuType.objects.get(name="gpu").cost_factor == Decimal("1.500")
    assert not Node.objects.filter(cluster__name="mars", drained=True).exists()
    entry = AuditEntry.objects.get(action=AuditAction.SET_PRICE)
    assert (entry.node, entry.field, entry.old, entry.new) == (
        budget_tree.root,
        "cost_factor",
        "",
        "gpu (×1.500)",
    )
    assert "mars" in entry.reason
    captured = capsys.readouterr()
    assert "GPU type gpu: cost factor 1.500" in captured.out
    assert "no cost factor" not in captured.err


def test_registering_without_a_price_names_the_unpriced_type_its_drained_nodes_and_the_fix(
    budget_tree, register, capsys
):
    register()
    assert Node.objects.filter(cluster__name="mars", drained=True).count() == 2
    err = capsys.readouterr().err
    assert "GPU type 'gpu' has no cost factor" in err
    assert "mars-00, mars-01" in err and "stay drained until it is priced" in err
    assert "register_cluster mars --backend simulated" in err and "--price=gpu=FACTOR" in err
    register("--price", "gpu=1")  # the fix it printed: the drain lifts
    assert not Node.objects.filter(cluster__name="mars", drained=True).exists()


def test_repricing_audits_the_old_price_and_the_same_price_again_writes_nothing(
    budget_tree, register
):
    register("--price", "gpu=1")
    register("--price", "gpu=2.25")
    register("--price", "gpu=2.250")
    entries = list(AuditEntry.objects.filter(action=AuditAction.SET_PRICE).order_by("id"))
    assert [(e.old, e.new) for e in entries] == [
        ("", "gpu (×1.000)"),
        ("gpu (×1.000)", "gpu (×2.250)"),
    ]


@pytest.mark.parametrize(
    ("pair", "says"),
    [
        ("gpu=abc", "'abc' is not a number"),
        ("=1", "name the GPU type"),
        ("gpu=-1", "above 0"),
        ("gpu=0", "above 0"),
        ("gpu=nan", "finite"),
        ("gpu=1.0005", "three decimal places"),
        ("gpu=1000", "at most 999.999"),
        ("gpu", "expected TYPE=FACTOR"),
        ("x" * 41 + "=1", "at most 40 characters"),
    ],
)
def test_a_bad_price_is_refused_naming_the_option_and_nothing_is_written(
    budget_tree, register, pair, says
):
    audit_rows = AuditEntry.objects.count()
    with pytest.raises(CommandError, match="--price") as refused:
        register("--price", "H100=1", "--price", pair)
    assert says in str(refused.value)
    assert not Cluster.objects.exists()
    assert not GpuType.objects.exists()
    assert AuditEntry.objects.count() == audit_rows


def test_one_type_priced_twice_differently_is_refused(budget_tree, register):
    with pytest.raises(CommandError, match="--price 'gpu=2': gpu is priced twice"):
        register("--price", "gpu=1", "--price", "gpu=2")
    assert not GpuType.objects.exists()


@pytest.mark.django_db
def test_pricing_before_the_organisation_exists_is_refused_and_registers_nothing(register):
    with pytest.raises(CommandError, match="create its root first"):
        register("--price", "gpu=1")
    assert not Cluster.objects.exists() and not GpuType.objects.exists()


def test_a_price_set_in_the_admin_is_audited_like_one_set_at_registration(
    admin_client, budget_tree
):
    response = admin_client.post(
        "/admin/budgets/gputype/add/", {"name": "B200", "cost_factor": "2"}, follow=True
    )
    assert response.status_code == 200
    row = GpuType.objects.get(name="B200")
    response = admin_client.post(
        f"/admin/budgets/gputype/{row.pk}/change/",
        {"name": "renamed", "cost_factor": "2.5"},
        follow=True,
    )
    assert response.status_code == 200
    row.refresh_from_db()
    assert (row.name, row.cost_factor) == ("B200", Decimal("2.500"))  # the name stays
    entries = AuditEntry.objects.filter(action=AuditAction.SET_PRICE).order_by("id")
    assert [(e.actor.username, e.old, e.new) for e in entries] == [
        ("admin", "", "B200 (×2.000)"),
        ("admin", "B200 (×2.000)", "B200 (×2.500)"),
    ]


@pytest.mark.django_db
def test_the_admin_refuses_a_price_before_the_organisation_exists(admin_client):
    response = admin_client.post(
        "/admin/budgets/gputype/add/", {"name": "B200", "cost_factor": "2"}
    )
    assert "Create the organisation" in response.content.decode()
    assert not GpuType.objects.exists()
