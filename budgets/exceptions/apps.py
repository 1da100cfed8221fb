from django.apps import AppConfig


class ExceptionsConfig(AppConfig):
    """Its own app inside the budgets package so its migrations never collide with budgets'."""

    name = "budgets.exceptions"
    label = "exceptions"
    verbose_name = "Exceptions"
