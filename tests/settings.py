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
