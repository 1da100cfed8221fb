from django.apps import AppConfig
from django.core import checks


class PortalConfig(AppConfig):
    name = "portal"

    def ready(self):
        from portal.secret import check_secret_key

        checks.register(check_secret_key, checks.Tags.security, deploy=True)
