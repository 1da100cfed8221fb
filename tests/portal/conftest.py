import pytest


@pytest.fixture(autouse=True)
def demo_runs_in_debug(request, settings):
    """seed_demo refuses to run with DEBUG off, and Django's test runner turns DEBUG off: the
    demo's own tests run as `make demo` does, with DEBUG on."""
    if request.module.__name__.endswith("test_seed_demo"):
        settings.DEBUG = True
