from django.apps import AppConfig


class ExceptionsConfig(AppConfig):
    """The approval workflow: it acts on budgets and on jobs, so it sits above both."""

    name = "exceptions"
    label = "exceptions"
    verbose_name = "Exceptions"
