"""Settings for the test suite: the application's own settings, plus what tests need.

DEBUG is off by default in Allot; the suite runs with the development defaults (no secret key
to provide, no HTTPS redirect for the test client). Django's test runner turns DEBUG itself off
while tests run, so only those defaults follow from it. Set in the environment (not only here)
so the subprocesses some tests start (a Celery worker, ``manage.py``) read the same.
"""

import os

os.environ.setdefault("DEBUG", "1")

from portal.settings import *  # noqa: E402,F403
from portal.settings import REST_FRAMEWORK  # noqa: E402

# Login throttling would lock out the personas of tests that log in many times; the
# throttling tests turn it back on (tests/accounts/test_throttling.py).
AXES_ENABLED = False
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"token": None}}

if DATABASES["default"]["ENGINE"] == "core.sqlite":  # noqa: F405
    import tempfile
    from pathlib import Path

    # A file, as the demo's, not Django's default in-memory test database: that one is shared
    # between threads through SQLite's shared cache, where a writer that meets another's lock
    # fails at once ("database table is locked") instead of waiting out the busy timeout, so a
    # test whose threads write could not show how the product behaves. One file per pytest
    # process: several runs may share a checkout. Its durability does not matter:
    # synchronous=OFF spares every commit its fsync.
    _options = DATABASES["default"]["OPTIONS"]  # noqa: F405
    _options["init_command"] = _options["init_command"] + "PRAGMA synchronous=OFF;"
    # tests/conftest.py removes what Django leaves of it.
    SQLITE_TEST_DATABASE = Path(tempfile.gettempdir()) / f"allot-test-{os.getpid()}.sqlite3"
    DATABASES["default"]["TEST"] = {"NAME": str(SQLITE_TEST_DATABASE)}  # noqa: F405
