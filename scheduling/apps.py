from pathlib import Path

from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    # Named, because on the compiled engine (scheduling/engine/sim/compiled.py) the package
    # spans the build and this folder: its commands, templates and static files are here.
    path = str(Path(__file__).resolve().parent)
