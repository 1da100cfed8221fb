from django.apps import AppConfig


class ExceptionsConfig(AppConfig):
    """The approval workflow: it acts on budgets and on jobs, so it sits above both."""

    name = "exceptions"
    label = "exceptions"
    verbose_name = "Exceptions"

    def ready(self):
        from scheduling.signals import job_idle

        job_idle.connect(notify_idle_job, dispatch_uid="exceptions.notify_idle_job")


def notify_idle_job(sender, job, message, at, **kwargs):
    """An idle job's owner finds the sentence in the inbox (its badge counts the unread);
    a notification there needs no request."""
    from exceptions.models import Notification

    Notification.objects.create(user=job.owner, event="idle job", message=message, created_at=at)
