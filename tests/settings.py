"""Settings for the test suite: SQLite by default, PostgreSQL with SCHEDULINATOR_TEST_DB=postgres.

Subprocesses started by the tests (real run_scheduler processes) get the test database's name
and the test's Redis key prefix through the environment, so they see what the test sees.
"""

import hashlib
import importlib.util
import json
import os
import tempfile

import django

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"
REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "django_rq",  # its rqworker command, for the RQ dispatcher's tests
    # Django's tasks framework (the backport before Django 6) with a database backend and its
    # db_worker, for the tasks dispatcher's tests.
    *(["django_tasks"] if django.VERSION < (6, 0) else []),
    "django_tasks_db",
    # Its tables, for the import from django-celery-beat (tests/test_import.py); not in the
    # run on Django 6, which it does not support yet.
    *(["django_celery_beat"] if importlib.util.find_spec("django_celery_beat") else []),
    "django_schedulinator",
    "tests",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DB_VENDOR = os.environ.get("SCHEDULINATOR_TEST_DB", "sqlite")
# Two checkouts (a CI clone beside a working tree) may run their suites at once against the
# same PostgreSQL server: each test process's database is named for its checkout too.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
CHECKOUT = hashlib.sha256(os.path.dirname(os.path.abspath(__file__)).encode()).hexdigest()[:8]
# Set for subprocesses: the database the parent test run created.
DB_NAME = os.environ.get("SCHEDULINATOR_TEST_DB_NAME")

if DB_VENDOR == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": DB_NAME or os.environ.get("PGDATABASE", "test"),
            "USER": os.environ.get("PGUSER", "postgres"),
            "PASSWORD": os.environ.get("PGPASSWORD", ""),
            "HOST": os.environ.get("PGHOST", "127.0.0.1"),
            "PORT": os.environ.get("PGPORT", "5432"),
            "TEST": {"NAME": f"test_schedulinator_{CHECKOUT}_{XDIST_WORKER}"},
            # Lets a test find (and terminate) the backends of the schedulers it started.
            "OPTIONS": {"application_name": os.environ.get("SCHEDULINATOR_TEST_APP_NAME", "tests")},
        }
    }
elif DB_VENDOR == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DB_NAME or os.path.join(tempfile.gettempdir(), "schedulinator-dev.sqlite3"),
            # A file, not :memory:, so that subprocesses share it; WAL and IMMEDIATE
            # transactions let several scheduler processes write without deadlocks.
            "TEST": {
                "NAME": os.path.join(
                    tempfile.gettempdir(), f"schedulinator-test-{os.getpid()}.sqlite3"
                )
            },
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
else:
    raise RuntimeError(f"SCHEDULINATOR_TEST_DB must be sqlite or postgres, not {DB_VENDOR!r}")

# A second connection to the same database, for tests of a read-replica router
# (tests/support/routers.py): like a real replica, it cannot see another connection's uncommitted
# writes. A mirror: no test database of its own.
DATABASES["replica"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}

REDIS_URL = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
    }
}

# RQ (tests/test_dispatch_rq.py): a queue of each test process's own in the shared Redis (the
# rqworker subprocess computes the same name: it inherits PYTEST_XDIST_WORKER), and one on a
# port where nothing listens. The chaos test points its schedulers' Redis at a server of its
# own that it flushes and stops, and keeps the broker where it was (BROKER_URL).
TEST_QUEUE = f"schedtest-{CHECKOUT}-{XDIST_WORKER}"  # RQ and Celery
RQ_TEST_QUEUE = TEST_QUEUE
# A queue no worker listens to (tests/test_alerts_processes.py: runs whose end never comes).
RQ_STALLED_QUEUE = f"{TEST_QUEUE}-stalled"
RQ_QUEUES = {
    RQ_TEST_QUEUE: {"URL": os.environ.get("SCHEDULINATOR_TEST_BROKER_URL", REDIS_URL)},
    RQ_STALLED_QUEUE: {"URL": REDIS_URL},
    "down": {"URL": "redis://127.0.0.1:1/0", "SOCKET_CONNECT_TIMEOUT": 1},
}

TASKS = {
    "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default", "reports"]},
    "immediate": {
        "BACKEND": (
            "django.tasks.backends.immediate.ImmediateBackend"
            if django.VERSION >= (6, 0)
            else "django_tasks.backends.immediate.ImmediateBackend"
        )
    },
    # Declares that it cannot order by priority (what a schedule asking for one is refused on).
    "nopriority": {"BACKEND": "tests.support.task_backends.NoPriorityBackend"},
}

SCHEDULINATOR = {
    # Tests never assume they own the Redis database: every key lives under this prefix,
    # which conftest.py replaces by a fresh one per test.
    "KEY_PREFIX": os.environ.get("SCHEDULINATOR_TEST_PREFIX", "schedulinator-tests"),
    "LEASE_SECONDS": float(os.environ.get("SCHEDULINATOR_TEST_LEASE", "30")),
    "MAX_SLEEP_SECONDS": 0.2,
    "RECONCILE_SECONDS": float(os.environ.get("SCHEDULINATOR_TEST_RECONCILE", "10")),
    "LOG_STATS_SECONDS": float(os.environ.get("SCHEDULINATOR_TEST_LOG_STATS", "60")),
    # Heartbeats and their staleness, for tests/test_heartbeat.py's real schedulers.
    "HEARTBEAT_SECONDS": float(os.environ.get("SCHEDULINATOR_TEST_HEARTBEAT", "5")),
    "PASS_STALE_SECONDS": float(os.environ.get("SCHEDULINATOR_TEST_PASS_STALE", "60")),
    "METRICS_CLUSTER_SECONDS": float(os.environ.get("SCHEDULINATOR_TEST_METRICS_CLUSTER", "5")),
}

if os.environ.get("SCHEDULINATOR_TEST_SCHEDULES"):
    # Schedules declared in the setting, for subprocesses of tests/test_declared.py.
    SCHEDULINATOR["SCHEDULES"] = json.loads(os.environ["SCHEDULINATOR_TEST_SCHEDULES"])

if os.environ.get("SCHEDULINATOR_TEST_RQ_DISPATCHER"):
    # The chaos test's run through a real broker (tests/test_chaos.py): its schedules name
    # this alias; ended jobs are kept long enough to drop any re-delivery within the run.
    SCHEDULINATOR["DISPATCHERS"] = {
        "rq": {
            "BACKEND": "django_schedulinator.dispatch.rq.RQDispatcher",
            "OPTIONS": {"QUEUE": RQ_TEST_QUEUE, "KEEP_SECONDS": 900},
        }
    }

if os.environ.get("SCHEDULINATOR_TEST_DISPATCHERS"):
    # The dispatchers of the test that starts these schedulers (tests/test_dispatch_leases.py).
    SCHEDULINATOR["DISPATCHERS"] = json.loads(os.environ["SCHEDULINATOR_TEST_DISPATCHERS"])

if os.environ.get("SCHEDULINATOR_TEST_NOTIFY"):
    # The notifier of the schedulers a test starts (tests/test_alerts_processes.py), and how
    # often they look for missed runs.
    SCHEDULINATOR["NOTIFY"] = json.loads(os.environ["SCHEDULINATOR_TEST_NOTIFY"])
    SCHEDULINATOR["MISSED_CHECK_SECONDS"] = float(os.environ["SCHEDULINATOR_TEST_MISSED_CHECK"])

if os.environ.get("SCHEDULINATOR_TEST_SENTRY_DSN"):
    # Sentry Crons check-ins from the run_scheduler of tests/test_sentry.py, set up as a project
    # sets Sentry up: initialised in its settings, with the SDK's default integrations.
    import sentry_sdk

    sentry_sdk.init(dsn=os.environ["SCHEDULINATOR_TEST_SENTRY_DSN"], environment="tests")
    SCHEDULINATOR["SENTRY_CRONS"] = True

if os.environ.get("SCHEDULINATOR_TEST_SETTINGS"):
    # More settings of the test that starts these schedulers (tests/test_retention.py).
    SCHEDULINATOR.update(json.loads(os.environ["SCHEDULINATOR_TEST_SETTINGS"]))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_schedulinator": {"handlers": ["console"], "level": "INFO"}},
}

# Django 6.1 sends mail through MAILERS (its default mailer is deprecated); the test runner
# swaps in its in-memory backend either way.
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
