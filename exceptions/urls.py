from django.urls import path

from exceptions.views import inbox, report, requests

urlpatterns = [
    path("exceptions/", inbox.inbox, name="exception-inbox"),
    path("exceptions/report/", report.report, name="exception-report"),
    path("exceptions/notifications/read/", inbox.mark_read, name="exception-notifications-read"),
    path(
        "exceptions/new/protection/<int:job_id>/",
        requests.new_protection,
        name="exception-new-protection",
    ),
    path("exceptions/new/topup/<int:node_id>/", requests.new_topup, name="exception-new-topup"),
    path(
        "exceptions/new/reservation/<str:cluster>/",
        requests.new_reservation,
        name="exception-new-reservation",
    ),
    path("exceptions/<int:pk>/", requests.detail, name="exception-detail"),
    path("exceptions/<int:pk>/decide/", inbox.decide, name="exception-decide"),
    path("exceptions/<int:pk>/withdraw/", requests.withdraw, name="exception-withdraw"),
]
