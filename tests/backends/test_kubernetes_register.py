"""register_cluster with the Kubernetes backend, end to end against the fake API server."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from scheduling.discovery import rediscover
from scheduling.models import Cluster, Node
from tests.backends.k8s_fake import fake_api_fixture  # noqa: F401 - the fixture is used by name

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]


def test_registering_a_kubernetes_cluster_records_its_gpu_nodes_and_prints_them(fake_api):
    out = StringIO()

    call_command(
        "register_cluster",
        "k8s-lab",
        "--backend",
        "kubernetes",
        "--option",
        f"host={fake_api.url}",
        "--option",
        "namespace=allot",
        stdout=out,
    )

    nodes = {n.name: n for n in Node.objects.filter(cluster__name="k8s-lab")}
    assert sorted(nodes) == ["gpu-01", "gpu-02", "gpu-03"]
    assert (nodes["gpu-03"].gpus, nodes["gpu-03"].gpu_type) == (4, "NVIDIA-A100-SXM4-40GB")
    assert Cluster.objects.get(name="k8s-lab").options["host"] == fake_api.url
    assert "gpu-01: 8 x NVIDIA-H100-80GB-HBM3" in out.getvalue()
    assert "3 nodes, 20 GPUs" in out.getvalue()


def test_rediscovery_drains_a_node_that_lost_its_gpus_and_mirrors_a_cordon(fake_api):
    call_command(
        "register_cluster",
        "k8s-lab",
        "--backend",
        "kubernetes",
        "--option",
        f"host={fake_api.url}",
        stdout=StringIO(),
    )
    fake_api.nodes["gpu-02"]["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    fake_api.add_node("gpu-04", unschedulable=True)

    report = rediscover(Cluster.objects.get(name="k8s-lab"))

    assert report.vanished == ["gpu-02"]
    assert Node.objects.get(name="gpu-02").drained
    assert Node.objects.get(name="gpu-04").drained
