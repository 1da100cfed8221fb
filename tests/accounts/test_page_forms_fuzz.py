"""Every page form, posted with odd values in every field, answers 4xx or a re-rendered form:
never a server error. (The API has schemathesis; the pages read forms, some of them raw.)"""

import pytest

from exceptions.models import ExceptionRequest

ODD = [
    "²",
    "٣",
    "alice\n",
    "\x00",
    "<script>",
    "../../etc/passwd",
    "9" * 5000,
    "99999999999999999999",
    "-1",
    "1e309",
    "NaN",
    "x" * 5000,
    " ",
    "0",
]


@pytest.fixture
def forms(budget_tree, researchers_job, jupiter, researcher):
    from exceptions import services

    topup = services.request_exception(
        researcher, "budget_topup", node=budget_tree.olmo.pk, gpu_hours="10", justification="x"
    )
    node = jupiter.nodes.first()
    olmo, job = budget_tree.olmo.pk, researchers_job.pk
    return [
        (f"/budgets/{olmo}/grant/", ["grant_gpu_hours", "version", "reason"]),
        ("/budgets/transfer/", ["source", "target", "gpu_hours", "reason"]),
        (f"/budgets/{olmo}/rename/", ["name", "slug", "reason"]),
        (f"/budgets/{olmo}/weight/", ["weight", "reason"]),
        (f"/budgets/{olmo}/children/", ["name", "slug", "grant_gpu_hours", "reason"]),
        (f"/budgets/{olmo}/move/", ["parent", "reason"]),
        ("/jobs/", ["name", "project", "cluster", "gpus", "min_runtime_hours", "command"]),
        (f"/exceptions/new/protection/{job}/", ["hours", "justification"]),
        (f"/exceptions/new/topup/{olmo}/", ["gpu_hours", "justification"]),
        ("/exceptions/new/reservation/jupiter/", ["gpus", "start", "end", "node"]),
        (f"/exceptions/{topup.pk}/decide/", ["decision", "reason"]),
        (f"/operations/nodes/{node.pk}/drain/", ["reason", "action"]),
        ("/budgets/preview/simulate/", ["weeks", "grant:nlp/olmo", "grant:nlp/tulu"]),
    ]


@pytest.mark.parametrize(
    "who", ["researcher", "project_lead", "manager", "leader", "cluster_admin", "outsider"]
)
def test_no_page_form_answers_a_server_error_on_odd_input(client, personas, forms, who):
    client.force_login(personas[who])
    failures = []
    for url, fields in forms:
        for value in ODD:
            data = dict.fromkeys(fields, value)
            response = client.post(url, data)
            if response.status_code >= 500:
                failures.append(f"{url} {value[:12]!r} → {response.status_code}")
    assert not failures, failures
    assert ExceptionRequest.objects.count() >= 1
