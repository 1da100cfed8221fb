"""The htmx pages through the test client: request forms, the inbox's in-place decision, the
history page, the report."""

import datetime as dt

from django.utils import timezone

from exceptions.models import ExceptionRequest


def test_a_researcher_requests_protection_from_the_form(client, researcher, job):
    client.force_login(researcher)
    page = client.get(f"/exceptions/new/protection/{job.pk}/")
    assert page.status_code == 200 and b"Request longer protection" in page.content
    response = client.post(
        f"/exceptions/new/protection/{job.pk}/", {"hours": "12", "justification": "deadline"}
    )
    request = ExceptionRequest.objects.get()
    assert response.status_code == 302 and response.url == f"/exceptions/{request.pk}/"
    assert (request.kind, request.hours, request.job_id) == ("extended_protection", 12, job.pk)


def test_the_form_shows_the_services_message_beside_the_field(client, researcher, job):
    client.force_login(researcher)
    response = client.post(
        f"/exceptions/new/protection/{job.pk}/", {"hours": "500", "justification": "deadline"}
    )
    assert response.status_code == 400
    assert b'data-field="hours"' in response.content and b"at most 72 h" in response.content
    assert not ExceptionRequest.objects.exists()


def test_someone_elses_job_cannot_be_protected_from_the_page(client, manager, job):
    client.force_login(manager)
    assert client.get(f"/exceptions/new/protection/{job.pk}/").status_code == 403


def test_top_up_and_reservation_forms_file_requests(client, researcher, budget_tree, cluster):
    client.force_login(researcher)
    client.post(
        f"/exceptions/new/topup/{budget_tree.olmo.pk}/",
        {"gpu_hours": "300", "justification": "rebuttal"},
    )
    start = timezone.localtime(timezone.now() + dt.timedelta(hours=2)).replace(tzinfo=None)
    client.post(
        "/exceptions/new/reservation/jupiter/",
        {
            "gpus": "16",
            "start": start.isoformat(timespec="minutes"),
            "end": (start + dt.timedelta(hours=6)).isoformat(timespec="minutes"),
            "justification": "big run",
        },
    )
    kinds = sorted(ExceptionRequest.objects.values_list("kind", flat=True))
    assert kinds == ["budget_topup", "reservation"]
    assert client.get(f"/exceptions/new/topup/{budget_tree.vision.pk}/").status_code == 404


def test_the_inbox_approves_in_place_with_htmx(client, manager, topup, budget_tree):
    request = topup(gpu_hours=100)
    client.force_login(manager)
    inbox = client.get("/exceptions/")
    assert f'id="exception-{request.pk}"'.encode() in inbox.content
    row = client.post(
        f"/exceptions/{request.pk}/decide/", {"decision": "approve"}, HTTP_HX_REQUEST="true"
    )
    assert row.status_code == 200
    assert b"<html" not in row.content and b"Active" in row.content
    request.refresh_from_db()
    assert request.state == "active"


def test_rejecting_in_the_inbox_without_a_reason_says_so_in_place(client, manager, topup):
    request = topup()
    client.force_login(manager)
    row = client.post(
        f"/exceptions/{request.pk}/decide/", {"decision": "reject"}, HTTP_HX_REQUEST="true"
    )
    assert b"Say why the request is rejected" in row.content
    done = client.post(
        f"/exceptions/{request.pk}/decide/", {"decision": "reject", "reason": "later"}
    )
    assert done.status_code == 302
    request.refresh_from_db()
    assert (request.state, request.decision_reason) == ("rejected", "later")


def test_the_history_page_lists_every_step(client, researcher, manager, topup):
    request = topup(gpu_hours=100)
    client.force_login(manager)
    client.post(f"/exceptions/{request.pk}/decide/", {"decision": "approve"})
    client.force_login(researcher)
    page = client.get(f"/exceptions/{request.pk}/").content.decode()
    for step in ("submitted", "approved", "active", "effect", "3000.00 → 3100.00"):
        assert step in page


def test_the_requester_withdraws_from_the_history_page(client, researcher, topup):
    request = topup()
    client.force_login(researcher)
    assert b"Withdraw" in client.get(f"/exceptions/{request.pk}/").content
    client.post(f"/exceptions/{request.pk}/withdraw/")
    request.refresh_from_db()
    assert request.state == "withdrawn"


def test_the_report_counts_per_program_per_month(client, leader, manager, topup, protection):
    topup(gpu_hours=100)
    granted = topup(gpu_hours=200)
    from exceptions import services

    services.approve_exception(manager, granted.pk)
    protection()
    client.force_login(leader)
    page = client.get("/exceptions/report/")
    from exceptions.access import visible_requests
    from exceptions.report import monthly_by_program

    [row] = monthly_by_program(visible_requests(leader))
    assert (row["program"], row["total"], row["granted"], row["pending"]) == ("nlp", 3, 1, 2)
    assert row["by_kind"] == {"budget_topup": 2, "extended_protection": 1}
    assert row["topup_gpu_hours"] == 200
    assert b"nlp" in page.content and page.status_code == 200
