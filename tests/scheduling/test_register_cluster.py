import pytest
from django.core.management import CommandError, call_command

from scheduling.models import Cluster, Node


@pytest.mark.django_db
def test_register_discovers_nodes_and_prints_the_total(tmp_path, capsys):
    call_command(
        "register_cluster",
        "mars",
        "--backend",
        "simulated",
        "--option",
        "nodes=3",
        "--option",
        "gpu_type=B200",
        "--option",
        f"state_dir={tmp_path}",
    )
    out = capsys.readouterr().out
    assert "mars-00: 8 x B200" in out
    assert "3 nodes, 24 GPUs" in out
    cluster = Cluster.objects.get(name="mars")
    assert cluster.gpu_type == "B200"
    assert list(cluster.nodes.values_list("name", flat=True)) == ["mars-00", "mars-01", "mars-02"]


@pytest.mark.django_db
def test_rediscovery_drains_a_node_that_disappeared(tmp_path, capsys):
    args = [
        "register_cluster",
        "mars",
        "--backend",
        "simulated",
        "--option",
        f"state_dir={tmp_path}",
    ]
    call_command(*args, "--option", "nodes=3")
    call_command(*args, "--option", "nodes=2")
    gone = Node.objects.get(name="mars-02")
    assert (gone.present, gone.drained) == (False, True)
    assert "mars-02: no longer reported; drained" in capsys.readouterr().out
    assert Node.objects.filter(cluster__name="mars").count() == 3


@pytest.mark.django_db
def test_bad_options_and_backends_are_refused_naming_the_field():
    with pytest.raises(CommandError, match="option"):
        call_command("register_cluster", "mars", "--backend", "simulated", "--option", "nodes")
    with pytest.raises(CommandError, match="backend"):
        call_command("register_cluster", "mars", "--backend", "simulated", "--option", "nodes=x")
    assert not Cluster.objects.exists()


@pytest.mark.django_db
def test_registering_in_the_admin_discovers_the_nodes(admin_client, tmp_path):
    response = admin_client.post(
        "/admin/scheduling/cluster/add/",
        {
            "name": "venus",
            "backend": "simulated",
            "interactive_pool_gpus": 8,
            "options": f'{{"nodes": "2", "gpu_type": "B300", "state_dir": "{tmp_path}"}}',
            "nodes-TOTAL_FORMS": 0,
            "nodes-INITIAL_FORMS": 0,
        },
        follow=True,
    )
    assert "enus: 2 nodes, 16 GPUs" in response.content.decode()  # the admin capitalises
    cluster = Cluster.objects.get(name="venus")
    assert cluster.gpu_type == "B300"
    assert cluster.nodes.count() == 2


@pytest.mark.django_db
def test_the_admin_refuses_a_cluster_whose_nodes_cannot_be_discovered(admin_client, tmp_path):
    response = admin_client.post(
        "/admin/scheduling/cluster/add/",
        {
            "name": "venus",
            "backend": "simulated",
            "interactive_pool_gpus": 8,
            "options": '{"nodes": "many"}',
            "nodes-TOTAL_FORMS": 0,
            "nodes-INITIAL_FORMS": 0,
        },
    )
    assert response.status_code == 200
    assert "cannot discover nodes" in response.content.decode()
    assert not Cluster.objects.exists()
