"""A few open exception requests for the demo, so approvers' inboxes are not empty.

Idempotent: nothing is filed if any request exists. Runs after the clusters are seeded.
"""

import datetime as dt

from django.contrib.auth import get_user_model
from django.utils import timezone

from budgets.models import BudgetNode
from exceptions import services
from exceptions.models import ExceptionRequest


def seed() -> str:
    olmo = BudgetNode.objects.filter(slug_path="nlp/olmo", archived=False).first()
    if ExceptionRequest.objects.exists() or olmo is None:
        return "Exceptions: already seeded" if olmo else "Exceptions: none (nlp/olmo is gone)"
    users = get_user_model().objects
    researcher = users.get(username="researcher")
    lead = users.filter(budget_roles__role="project_lead", budget_roles__node__slug_path="nlp/olmo")
    asker = lead.first() or researcher
    start = timezone.now().replace(minute=0, second=0, microsecond=0) + dt.timedelta(days=2)
    services.request_exception(
        asker,
        "budget_topup",
        node=olmo.pk,
        gpu_hours=500,
        justification="The 70B ablation needs 500 more GPU-hours before the paper deadline.",
    )
    services.request_exception(
        researcher,
        "reservation",
        cluster="jupiter",
        gpus=256,
        start=start,
        end=start + dt.timedelta(hours=12),
        node=olmo.pk,
        justification="A 256-GPU pretraining run needs the nodes cleared at once.",
    )
    return "Exceptions: a top-up and a reservation waiting for approval"
