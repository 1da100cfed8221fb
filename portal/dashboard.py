"""What the home page shows each user. Apps contribute panels through `home_panels`."""

from django.utils.module_loading import import_string

# Each entry is a callable(user) -> dict | None: {"title", "template", "context"}.
PANEL_PROVIDERS = [
    "budgets.panels.home_panel",
    "scheduling.panels.home_panel",
]


def home_context(user) -> dict:
    panels = []
    for dotted in PANEL_PROVIDERS:
        try:
            provider = import_string(dotted)
        except ImportError:
            continue
        panel = provider(user)
        if panel:
            panels.append(panel)
    return {"panels": panels}
