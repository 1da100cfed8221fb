"""The fake API server refuses what a real kube-apiserver refuses.

The adapter's tests are only worth something if the fake is strict, so its refusals are tested
here with raw HTTP requests, bypassing the client (which would catch some mistakes itself).
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request

import pytest

from tests.backends.k8s_fake import fake_api_fixture  # noqa: F401 - the fixture is used by name

pytestmark = pytest.mark.kubernetes

JOBS = "/apis/batch/v1/namespaces/allot-jobs/jobs"
VALID_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "allot-1-1-1", "labels": {"allot.dev/job-id": "1"}},
    "spec": {
        "suspend": True,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "job",
                        "image": "busybox",
                        "resources": {
                            "requests": {"nvidia.com/gpu": "2"},
                            "limits": {"nvidia.com/gpu": "2"},
                        },
                    }
                ],
            }
        },
    },
}


def call(fake, method, path, body=None, content_type="application/json"):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body))
    request = urllib.request.Request(
        fake.url + path,
        method=method,
        data=data and (data if isinstance(data, bytes) else data.encode()),
    )
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def job_with(change) -> dict:
    job = copy.deepcopy(VALID_JOB)
    change(job)
    return job


def container(job) -> dict:
    return job["spec"]["template"]["spec"]["containers"][0]


def test_a_valid_job_is_created_with_the_fields_the_server_fills_in(fake_api):
    code, job = call(fake_api, "POST", JOBS, VALID_JOB)

    assert code == 201
    assert job["metadata"]["uid"]
    assert job["metadata"]["namespace"] == "allot-jobs"
    assert job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"]


@pytest.mark.parametrize(
    ("change", "field", "text"),
    [
        (lambda j: j["metadata"].pop("name"), "metadata.name", "name or generateName"),
        (lambda j: j["metadata"].update(name="Allot_1"), "metadata.name", "RFC 1123"),
        (lambda j: j["metadata"].update(name="a" * 64), "metadata.name", "RFC 1123"),
        (
            lambda j: j["spec"]["template"]["spec"].update(containers=[]),
            "spec.template.spec.containers",
            "Required value",
        ),
        (
            lambda j: container(j)["resources"].update(
                limits={"nvidia.com/gpu": "1.5"}, requests={"nvidia.com/gpu": "1.5"}
            ),
            "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "integer",
        ),
        (
            lambda j: container(j)["resources"].update(
                limits={"nvidia.com/gpu": "two"}, requests={}
            ),
            "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "quantities",
        ),
        (
            lambda j: container(j)["resources"].pop("limits"),
            "spec.template.spec.containers[0].resources.limits",
            "Limit must be set",
        ),
        (
            lambda j: container(j)["resources"].update(limits={"gpu": "1"}, requests={}),
            "spec.template.spec.containers[0].resources.limits[gpu]",
            "fully qualified",
        ),
        (
            lambda j: j["spec"]["template"]["spec"].update(restartPolicy="Always"),
            "spec.template.spec.restartPolicy",
            "Never",
        ),
        (
            lambda j: j["metadata"]["labels"].update({"allot.dev/project": "nlp/olmo"}),
            "metadata.labels",
            "valid label",
        ),
        (
            lambda j: j["spec"]["template"]["spec"].update(
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": [],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            ),
            "spec.template.spec.affinity.nodeAffinity",
            "must be specified",
        ),
    ],
    ids=[
        "no-name",
        "bad-name",
        "long-name",
        "no-containers",
        "fractional-gpu",
        "garbage-gpu",
        "gpu-request-without-limit",
        "unqualified-resource",
        "restart-always",
        "slash-in-label-value",
        "empty-affinity-values",
    ],
)
def test_an_invalid_job_is_refused_with_422_naming_the_field(fake_api, change, field, text):
    code, status = call(fake_api, "POST", JOBS, job_with(change))

    assert code == 422
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Invalid", 422)
    causes = {c["field"]: c["message"] for c in status["details"]["causes"]}
    assert field in causes
    assert text in causes[field]
    assert fake_api.jobs == {}


def test_a_second_job_with_the_same_name_is_refused_with_409_already_exists(fake_api):
    call(fake_api, "POST", JOBS, VALID_JOB)

    code, status = call(fake_api, "POST", JOBS, VALID_JOB)

    assert (code, status["reason"]) == (409, "AlreadyExists")
    assert status["message"] == 'jobs.batch "allot-1-1-1" already exists'


def test_unknown_objects_are_404_not_found_status_objects(fake_api):
    for method, path in [
        ("GET", JOBS + "/nope"),
        ("DELETE", JOBS + "/nope"),
        ("GET", "/api/v1/nodes/nope"),
        ("GET", "/apis/batch/v1/cronjobs"),
    ]:
        code, status = call(fake_api, method, path)
        assert (code, status["kind"], status["reason"]) == (404, "Status", "NotFound")


def test_a_patch_needs_a_patch_content_type(fake_api):
    call(fake_api, "POST", JOBS, VALID_JOB)

    for content_type in ["text/plain", "application/json", None]:
        code, status = call(
            fake_api,
            "PATCH",
            JOBS + "/allot-1-1-1",
            {"spec": {"suspend": False}},
            content_type=content_type,
        )
        assert (code, status["reason"]) == (415, "UnsupportedMediaType")
    assert fake_api.job("allot-1-1-1")["spec"]["suspend"] is True


def test_a_create_in_an_unknown_format_is_refused_with_415(fake_api):
    code, status = call(fake_api, "POST", JOBS, VALID_JOB, content_type="text/plain")

    assert (code, status["reason"]) == (415, "UnsupportedMediaType")


def test_both_merge_patch_types_unsuspend_a_job_and_its_pods_appear(fake_api):
    fake_api.add_node("gpu-09")
    for n, content_type in enumerate(
        ["application/merge-patch+json", "application/strategic-merge-patch+json"]
    ):
        job = job_with(lambda j, n=n: j["metadata"].update(name=f"allot-1-1-{n}"))
        call(fake_api, "POST", JOBS, job)

        code, patched = call(
            fake_api,
            "PATCH",
            JOBS + f"/allot-1-1-{n}",
            {"spec": {"suspend": False}},
            content_type=content_type,
        )

        assert (code, patched["spec"]["suspend"]) == (200, False)
        assert len(fake_api.pods_of(f"allot-1-1-{n}")) == 1


def test_the_pod_template_of_a_running_job_is_immutable(fake_api):
    call(fake_api, "POST", JOBS, job_with(lambda j: j["spec"].update(suspend=False)))

    code, status = call(
        fake_api,
        "PATCH",
        JOBS + "/allot-1-1-1",
        {"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}},
        content_type="application/merge-patch+json",
    )

    assert code == 422
    assert "field is immutable" in status["message"]


def test_a_malformed_label_selector_is_a_400(fake_api):
    code, status = call(fake_api, "GET", JOBS + "?labelSelector=a%20in%20b")

    assert (code, status["reason"]) == (400, "BadRequest")


def test_label_selectors_filter_lists(fake_api):
    call(fake_api, "POST", JOBS, VALID_JOB)
    call(
        fake_api,
        "POST",
        JOBS,
        job_with(lambda j: j["metadata"].update(name="other", labels={"allot.dev/job-id": "2"})),
    )

    _, listing = call(fake_api, "GET", JOBS + "?labelSelector=allot.dev/job-id%3D2")
    _, negated = call(fake_api, "GET", JOBS + "?labelSelector=allot.dev/job-id%20notin%20(2)")

    assert [j["metadata"]["name"] for j in listing["items"]] == ["other"]
    assert [j["metadata"]["name"] for j in negated["items"]] == ["allot-1-1-1"]


def test_deleting_a_job_without_a_propagation_policy_orphans_its_pods(fake_api):
    """The API's legacy default for batch/v1 Jobs, and the reason the adapter always sends
    propagationPolicy=Background."""
    fake_api.add_node("gpu-09")
    call(fake_api, "POST", JOBS, job_with(lambda j: j["spec"].update(suspend=False)))

    code, status = call(fake_api, "DELETE", JOBS + "/allot-1-1-1")

    assert (code, status["status"]) == (200, "Success")
    (orphan,) = fake_api.pods.values()
    assert orphan["metadata"]["ownerReferences"] == []


def test_a_cordoned_node_gets_the_unschedulable_taint_and_no_new_pods(fake_api):
    fake_api.add_node("gpu-09")
    code, node = call(
        fake_api,
        "PATCH",
        "/api/v1/nodes/gpu-09",
        {"spec": {"unschedulable": True}},
        content_type="application/strategic-merge-patch+json",
    )
    pinned = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": ["gpu-09"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    call(
        fake_api,
        "POST",
        JOBS,
        job_with(
            lambda j: (
                j["spec"].update(suspend=False),
                j["spec"]["template"]["spec"].update(affinity=pinned),
            )
        ),
    )

    assert code == 200
    assert node["spec"]["taints"] == [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ]
    (pod,) = fake_api.pods_of("allot-1-1-1")
    assert pod["status"]["phase"] == "Pending"
    assert "nodeName" not in pod["spec"]


def test_a_node_patch_with_a_non_boolean_unschedulable_is_refused(fake_api):
    fake_api.add_node("gpu-09")

    code, status = call(
        fake_api,
        "PATCH",
        "/api/v1/nodes/gpu-09",
        {"spec": {"unschedulable": "yes"}},
        content_type="application/merge-patch+json",
    )

    assert (code, status["reason"]) == (422, "Invalid")
    assert "unschedulable" not in fake_api.nodes["gpu-09"]["spec"]


def test_outage_modes_answer_503_or_nothing(fake_api):
    fake_api.outage = "503"
    code, status = call(fake_api, "GET", "/version")
    assert (code, status["reason"]) == (503, "ServiceUnavailable")

    fake_api.outage = "drop"
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        call(fake_api, "GET", "/version")

    fake_api.outage = None
    assert call(fake_api, "GET", "/version")[0] == 200
