"""Allot settings: everything comes from the environment (see docs/configuration.md).

With nothing set, Allot runs on SQLite with an embedded (SQLite-backed) Celery broker, so
``make demo`` needs no server. Production sets DATABASE_URL, REDIS_URL, SECRET_KEY,
ALLOWED_HOSTS and DEBUG=0.
"""

import datetime as dt
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from budgets.rolemap import parse_role_map
from core.env import env_bool, env_int, env_list, env_str
from core.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("ALLOT_VAR_DIR", str(BASE_DIR / "var")))

# Off unless asked for: `make demo` sets DEBUG=1; a forgotten variable must not mean a public
# development key signing sessions.
DEBUG = env_bool("DEBUG", default=False)
_DEV_KEY = "allot-insecure-development-key-never-use-in-production-0123456789"
# Unset with DEBUG off, the key stays empty: what signs refuses to start (the web, the workers
# and beat: portal/secret.py), and Django refuses any other use of an empty key. A command that
# serves nothing and stores no session (simulate, migrate) needs none.
SECRET_KEY = env_str("SECRET_KEY", _DEV_KEY if DEBUG else "")
if not DEBUG and SECRET_KEY == _DEV_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY must be set to a secret value when DEBUG is off (DEBUG=1 for development)"
    )
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_htmx",
    "template_partials",
    "treebeard",
    "portal",
    "budgets",
    "exceptions",
    "scheduling",
    "whatif",
]

MIDDLEWARE = [
    # Outermost, so it sees what the middleware below write after the view; see the class.
    "portal.middleware.LockedDatabaseIs503",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "exceptions.notifications.badge",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's SQLite backend, with a process's writers queueing for the write lock in turn
    # instead of racing SQLite's busy handler (see core/sqlite/base.py).
    DATABASES["default"]["ENGINE"] = "core.sqlite"
    # Several processes (web, worker, beat) share the demo database: wait for locks.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        # WAL lets the web read while the worker writes; IMMEDIATE takes the write lock at
        # BEGIN so two writers queue instead of failing on a lock upgrade.
        "init_command": "PRAGMA journal_mode=WAL;",
        "transaction_mode": "IMMEDIATE",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "portal" / "static"]

# --- Security (checked by `manage.py check --deploy` when DEBUG is off) -------------------
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
X_FRAME_OPTIONS = "DENY"

# --- REST API --------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 200,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Allot API",
    "DESCRIPTION": "GPU budgets, fair-share jobs and exceptions.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

# --- Accounts and input safety (throttling, tokens, passwords, limits) -----------------------
INSTALLED_APPS += ["knox", "axes", "drf_spectacular_sidecar"]
# axes last: it must see the request after authentication (docs: "AxesMiddleware last").
MIDDLEWARE += [
    "portal.middleware.refuse_nul_bytes",
    "axes.middleware.AxesMiddleware",
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked-out username/address first
    # ALLOT_PASSWORD_LOGIN=0 stops password checks here, whichever door asked (portal/sso).
    "portal.sso.backends.PasswordLoginSwitch",
    "django.contrib.auth.backends.ModelBackend",
    "portal.sso.backends.OIDCBackend",  # answers only the single sign-on callback
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    # Not a check: Django calls password_changed() on every validator when a password
    # changes, which is where a user's API tokens are revoked.
    {"NAME": "portal.tokens.RevokeTokensOnPasswordChange"},
]
# Failed logins, through /login/, /admin/ and /api/v1/auth/token/ alike, counted per
# username and address: after AXES_FAILURE_LIMIT failures that pair gets 429 for the cool-off.
AXES_FAILURE_LIMIT = env_int("ALLOT_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env_int("ALLOT_LOGIN_COOLOFF_MIN", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "portal.tokens.lockout_response"
# API tokens (django-rest-knox): stored as SHA-512 digests, expire, can be revoked.
REST_KNOX = {
    "TOKEN_TTL": dt.timedelta(hours=env_int("ALLOT_API_TOKEN_TTL_H", 30 * 24)),
    "AUTH_HEADER_PREFIX": "Token",
}
REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"] = [
    "portal.tokens.TokenAuthentication",
    "rest_framework.authentication.SessionAuthentication",
]
REST_FRAMEWORK["DEFAULT_PAGINATION_CLASS"] = "portal.api.Pagination"
# JSON nested past a few levels or holding a lone surrogate is a 400 before any view runs.
REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"] = [
    "portal.parsers.SafeJSONParser",
    "rest_framework.parsers.FormParser",
    "rest_framework.parsers.MultiPartParser",
]
# Token minting is also rate-limited per client address, failed or not.
REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] = {
    "token": env_str("ALLOT_TOKEN_RATE", "30/min"),
}
SPECTACULAR_SETTINGS |= {
    "SWAGGER_UI_DIST": "SIDECAR",  # served from our static files, no CDN
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
}
# Trust X-Forwarded-Proto only when a proxy in front sets it (and strips it from clients).
ALLOT_BEHIND_PROXY = env_bool("ALLOT_BEHIND_PROXY", default=False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if ALLOT_BEHIND_PROXY else None
# The client's address for login throttling: the socket's, or behind the one proxy, the
# address that proxy appended to X-Forwarded-For (never one a client wrote itself).
AXES_CLIENT_IP_CALLABLE = "portal.tokens.client_address"
# DRF's own reading (any throttle not keyed by client_address): None would trust a client's
# X-Forwarded-For whole; 0 takes the socket's peer.
REST_FRAMEWORK["NUM_PROXIES"] = 1 if ALLOT_BEHIND_PROXY else 0
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # no form or API body of Allot's needs more

# --- Celery -------------------------------------------------------------------------------------
# Redis in production and CI. With no REDIS_URL, an embedded broker that needs no server: kombu's
# SQLAlchemy transport on a SQLite file under var/. A message is one row written in one
# transaction, so a consumer sees it whole or not at all (kombu's filesystem transport let the
# worker read a file still being written and die on a JSONDecodeError); a consumer claims a row
# under SQLite's BEGIN IMMEDIATE, so two never get the same message. The 30 s busy timeout lets
# a burst of publishers queue for SQLite's single writer instead of failing with "locked".
REDIS_URL = env_str("REDIS_URL", "")
BROKER_DB = VAR_DIR / "broker.sqlite3"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or f"sqla+sqlite:///{BROKER_DB}")
CELERY_BROKER_TRANSPORT_OPTIONS = {}
if CELERY_BROKER_URL == f"sqla+sqlite:///{BROKER_DB}":
    import sqlite3

    def _broker_connection(path=str(BROKER_DB)):
        # WAL: publishers (web) and the consumer (worker) do not block each other's reads, and
        # commits skip the per-commit fsync of the rollback journal (5× the throughput here).
        connection = sqlite3.connect(path, timeout=30, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    VAR_DIR.mkdir(parents=True, exist_ok=True)  # SQLite creates the file, not its folder
    CELERY_BROKER_TRANSPORT_OPTIONS = {"creator": _broker_connection}
CELERY_TASK_DEFAULT_QUEUE = env_str("ALLOT_CELERY_QUEUE", "celery")
# What-if previews replay weeks of jobs (seconds to minutes of CPU each): on a queue of their
# own, consumed by a worker of their own, so a burst of them never delays a scheduling pass.
ALLOT_WHATIF_QUEUE = env_str("ALLOT_WHATIF_QUEUE", "whatif")
CELERY_TASK_ROUTES = {"whatif.tasks.run_preview": {"queue": ALLOT_WHATIF_QUEUE}}
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = TIME_ZONE


# --- Allot ---------------------------------------------------------------------------------------
ALLOT_BUDGET_PERIOD = env_str("ALLOT_BUDGET_PERIOD", "quarter")  # "month" or "quarter"
if ALLOT_BUDGET_PERIOD not in {"month", "quarter"}:
    raise ImproperlyConfigured("ALLOT_BUDGET_PERIOD must be 'month' or 'quarter'")
ALLOT_FAIRSHARE_WINDOW_DAYS = env_int("ALLOT_FAIRSHARE_WINDOW_DAYS", 7)
ALLOT_MAX_MIN_RUNTIME_S = env_int("ALLOT_MAX_MIN_RUNTIME_S", 8 * 3600)
# Jobs never run as the service account the worker uses on the clusters (nor as whoever this
# process runs as), root, or a uid below ALLOT_MIN_JOB_UID (scheduling.job_accounts).
ALLOT_SERVICE_USER = env_str("ALLOT_SERVICE_USER", "allot")
ALLOT_MIN_JOB_UID = env_int("ALLOT_MIN_JOB_UID", 1000)
ALLOT_REQUIRE_SERVICES = env_bool("ALLOT_REQUIRE_SERVICES", default=False)
ALLOT_DISCOVERY_TIMEOUT_S = env_int(
    "ALLOT_DISCOVERY_TIMEOUT_S", 120
)  # admin's discovery, in a worker
ALLOT_BASE_URL = env_str("ALLOT_BASE_URL", "http://127.0.0.1:8000")  # links in e-mails
ALLOT_MAX_GRANT_GPU_HOURS = env_int("ALLOT_MAX_GRANT_GPU_HOURS", 100_000_000)
# What-if previews (docs/whatif.md): the replay's pass interval, and how often the records are
# read again (a preview within this many seconds of the last read, with the same grants,
# replays that workload, so asking twice hits the cache)
ALLOT_WHATIF_PASS_INTERVAL_S = env_int("ALLOT_WHATIF_PASS_INTERVAL_S", 300)
# from this many jobs, the proposed replay runs in a second process beside the current one
ALLOT_WHATIF_PARALLEL_JOBS = env_int("ALLOT_WHATIF_PARALLEL_JOBS", 2000)
ALLOT_WHATIF_SNAPSHOT_S = env_int("ALLOT_WHATIF_SNAPSHOT_S", 300)
# previews one user may have queued or running at once; one more is refused (429)
ALLOT_WHATIF_MAX_PER_USER = env_int("ALLOT_WHATIF_MAX_PER_USER", 2)
if ALLOT_WHATIF_MAX_PER_USER < 1:
    raise ImproperlyConfigured("ALLOT_WHATIF_MAX_PER_USER must be at least 1")
# Exceptions workflow (see docs/exceptions.md)
ALLOT_EXCEPTION_MAX_PROTECTION_H = env_int("ALLOT_EXCEPTION_MAX_PROTECTION_H", 72)
ALLOT_EXCEPTION_PROTECTION_VALID_H = env_int("ALLOT_EXCEPTION_PROTECTION_VALID_H", 168)
ALLOT_EXCEPTION_MAX_RESERVATION_H = env_int("ALLOT_EXCEPTION_MAX_RESERVATION_H", 168)
ALLOT_EXCEPTION_SECOND_APPROVAL_GPU_HOURS = env_int(
    "ALLOT_EXCEPTION_SECOND_APPROVAL_GPU_HOURS", 1000
)
ALLOT_EXCEPTION_SECOND_APPROVAL_HOURS = env_int("ALLOT_EXCEPTION_SECOND_APPROVAL_HOURS", 24)
ALLOT_EXCEPTION_ESCALATE_AFTER_H = env_int("ALLOT_EXCEPTION_ESCALATE_AFTER_H", 24)

# Operations (docs/operations.md): /metrics is open on loopback and, from
# elsewhere, behind this bearer token (or ALLOT_METRICS_TOKEN_FILE); its answer is kept this
# many seconds. /healthz calls a pass or a sync stale after ALLOT_HEALTH_STALE_S.
ALLOT_METRICS_TOKEN = env_str("ALLOT_METRICS_TOKEN", "")
ALLOT_METRICS_CACHE_S = env_int("ALLOT_METRICS_CACHE_S", 15)
ALLOT_HEALTH_STALE_S = env_int("ALLOT_HEALTH_STALE_S", 300)
# The preemption cost model behind the work lost to preemption on /operations and /metrics
# (scheduling/preemption_cost.py): how often jobs checkpoint, and what a restart costs.
ALLOT_CHECKPOINT_INTERVAL_S = env_int("ALLOT_CHECKPOINT_INTERVAL_S", 1800)
ALLOT_RESTART_OVERHEAD_S = env_int("ALLOT_RESTART_OVERHEAD_S", 300)
# The periodic ledger check (scheduling/ledger_check.py): every ALLOT_LEDGER_CHECK_INTERVAL_S,
# the attempts started in the last ALLOT_LEDGER_CHECK_WINDOW_S compared with the backend's
# record, for /operations and /metrics. A difference stays in view until it leaves the window.
ALLOT_LEDGER_CHECK_INTERVAL_S = env_int("ALLOT_LEDGER_CHECK_INTERVAL_S", 3600)
ALLOT_LEDGER_CHECK_WINDOW_S = env_int("ALLOT_LEDGER_CHECK_WINDOW_S", 86400)
# GPU telemetry (scheduling/telemetry.py): a Prometheus-compatible query API holding the DCGM
# exporter's DCGM_FI_DEV_GPU_UTIL; empty turns it off. A job under ALLOT_IDLE_UTILIZATION (a
# fraction) for ALLOT_IDLE_AFTER_S is idle: flagged, counted as wasted, its owner told.
ALLOT_GPU_TELEMETRY_URL = env_str("ALLOT_GPU_TELEMETRY_URL", "")
ALLOT_GPU_TELEMETRY_TIMEOUT_S = env_int("ALLOT_GPU_TELEMETRY_TIMEOUT_S", 10)

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "allot@localhost")

# LOG_FORMAT=json: one JSON object a line, for web, workers and beat alike (core/logs.py).
LOGGING = logging_config(env_str("LOG_FORMAT", "text"), env_str("LOG_LEVEL", "INFO"))

# --- Single sign-on (OpenID Connect, mozilla-django-oidc; portal/sso) --------------------------
# Off unless ALLOT_OIDC_ISSUER is set. The issuer's endpoints are read from its discovery
# document on first use, not here, so Allot starts while the identity provider is down.
ALLOT_OIDC_ISSUER = env_str("ALLOT_OIDC_ISSUER", "").rstrip("/")
ALLOT_OIDC_CLIENT_ID = env_str("ALLOT_OIDC_CLIENT_ID", "")
ALLOT_OIDC_CLIENT_SECRET = env_str("ALLOT_OIDC_CLIENT_SECRET", "")  # or _FILE
if ALLOT_OIDC_ISSUER and not (ALLOT_OIDC_CLIENT_ID and ALLOT_OIDC_CLIENT_SECRET):
    raise ImproperlyConfigured(
        "ALLOT_OIDC_ISSUER needs ALLOT_OIDC_CLIENT_ID and ALLOT_OIDC_CLIENT_SECRET (or _FILE)"
    )
ALLOT_OIDC_PROVIDER_NAME = env_str("ALLOT_OIDC_PROVIDER_NAME", "single sign-on")
ALLOT_OIDC_SCOPES = env_str("ALLOT_OIDC_SCOPES", "openid email profile")
ALLOT_OIDC_SIGN_ALGO = env_str("ALLOT_OIDC_SIGN_ALGO", "RS256")
ALLOT_OIDC_TIMEOUT_S = env_int("ALLOT_OIDC_TIMEOUT_S", 5)  # every call to the provider
ALLOT_OIDC_DISCOVERY_TTL_S = env_int("ALLOT_OIDC_DISCOVERY_TTL_S", 3600)
ALLOT_OIDC_USERNAME_CLAIM = env_str("ALLOT_OIDC_USERNAME_CLAIM", "preferred_username")
# Users are keyed by (issuer, subject). With 1, a first sign-in whose username claim names an
# existing ordinary account (never staff or superuser) links it; else only `manage.py sso_link`.
ALLOT_OIDC_LINK_EXISTING = env_bool("ALLOT_OIDC_LINK_EXISTING", default=False)
ALLOT_OIDC_GROUPS_CLAIM = env_str("ALLOT_OIDC_GROUPS_CLAIM", "groups")
ALLOT_OIDC_ROLE_MAP = parse_role_map(env_str("ALLOT_OIDC_ROLE_MAP", ""))
# The POSIX account jobs run as (ARCHITECTURE.md, "Identity on the clusters"), from claims.
ALLOT_OIDC_POSIX_CLAIM = env_str("ALLOT_OIDC_POSIX_CLAIM", "")
ALLOT_OIDC_UID_CLAIM = env_str("ALLOT_OIDC_UID_CLAIM", "")
ALLOT_OIDC_GID_CLAIM = env_str("ALLOT_OIDC_GID_CLAIM", "")
ALLOT_PASSWORD_LOGIN = env_bool("ALLOT_PASSWORD_LOGIN", default=True)
if not ALLOT_PASSWORD_LOGIN and not ALLOT_OIDC_ISSUER:
    raise ImproperlyConfigured("ALLOT_PASSWORD_LOGIN=0 needs single sign-on (ALLOT_OIDC_ISSUER)")
# mozilla-django-oidc's own settings; the endpoints come from discovery (portal/sso/backends.py).
OIDC_USE_PKCE = True
OIDC_TIMEOUT = ALLOT_OIDC_TIMEOUT_S
LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"

CELERY_BEAT_SCHEDULE = {
    "schedule-clusters": {
        "task": "scheduling.tasks.schedule_all",
        "schedule": env_int("ALLOT_PASS_INTERVAL_S", 5),
    },
    "sync-backends": {
        "task": "scheduling.tasks.sync_all",
        "schedule": env_int("ALLOT_SYNC_INTERVAL_S", 5),
    },
    "exceptions-housekeeping": {
        "task": "exceptions.tasks.housekeeping",
        "schedule": env_int("ALLOT_EXCEPTIONS_INTERVAL_S", 60),
    },
    "charge-usage": {
        "task": "scheduling.tasks.charge_usage",
        "schedule": env_int("ALLOT_CHARGE_INTERVAL_S", 60),
    },
    "check-ledger": {
        "task": "scheduling.tasks.check_ledger_all",
        "schedule": ALLOT_LEDGER_CHECK_INTERVAL_S,
    },
    "sweep-expired-tokens": {"task": "portal.tasks.sweep_expired_tokens", "schedule": 3600},
}
if ALLOT_GPU_TELEMETRY_URL:
    CELERY_BEAT_SCHEDULE["gpu-telemetry"] = {
        "task": "scheduling.tasks.read_gpu_telemetry",
        "schedule": env_int("ALLOT_GPU_TELEMETRY_INTERVAL_S", 60),
    }
if env_bool("ALLOT_DEMO_TRAFFIC", default=False):
    # The demo's researchers keep submitting, so its queues never run dry.
    CELERY_BEAT_SCHEDULE["demo-traffic"] = {
        "task": "scheduling.tasks.demo_traffic",
        "schedule": 60,
    }
