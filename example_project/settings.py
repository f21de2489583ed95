"""Settings of the example project: what a user of django-schedulinator would write.

Needs no services: SQLite under ``.demo/``, and an embedded Valkey server (started by
manage.py) unless REDIS_URL points at a Redis or Valkey server. DEMO_DB=postgres switches the
database to the local PostgreSQL (PGDATABASE, default "test").
"""

import os
from pathlib import Path

import django

from example_project import embedded_redis

BASE_DIR = Path(__file__).resolve().parent.parent
# DEMO_DIR and DEMO_KEY_PREFIX let a test run the project on a database and Redis keys of
# its own (tests/test_browser.py).
DEMO_DIR = embedded_redis.DEMO_DIR
DEMO_DIR.mkdir(parents=True, exist_ok=True)

# A demo, never deployed: a fixed key and DEBUG are fine here.
SECRET_KEY = "django-insecure-schedulinator-demo-only"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # The admin's CSS and JS under `runserver`.
    "django.contrib.staticfiles",
    # The REST API (pip install "django-schedulinator[api]"), its filters and OpenAPI schema.
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "django_schedulinator",
    "example_project.demo",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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
STATIC_URL = "static/"
REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}
SPECTACULAR_SETTINGS = {"TITLE": "django-schedulinator demo API", "VERSION": "1"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"

if os.environ.get("DEMO_DB") == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("PGDATABASE", "test"),
            "USER": "postgres",
            "PASSWORD": os.environ.get("PGPASSWORD", ""),
            "HOST": "127.0.0.1",
            "PORT": os.environ.get("PGPORT", "5432"),
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DEMO_DIR / "db.sqlite3",
            # Several scheduler processes (and runserver) may share this file: WAL lets
            # readers run beside the writer, and IMMEDIATE transactions take the write lock
            # up front, so writers queue for up to `timeout` seconds instead of deadlocking.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }

# The due index lives in the django-redis cache named by SCHEDULINATOR["CACHE_ALIAS"].
REDIS_URL = embedded_redis.configured_url() or embedded_redis.url()
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
    }
}

SCHEDULINATOR = {
    # Keeps the demo's keys apart from anything else in a shared Redis database.
    "KEY_PREFIX": os.environ.get("DEMO_KEY_PREFIX", "schedulinator-demo"),
}

# The one setting that sends the demo's schedules through Django's tasks framework
# (django.tasks on Django 6, the django-tasks backport on 5.2) instead of running them in the
# scheduler: DEMO_DISPATCHER=tasks. The demo uses the framework's immediate backend, which
# runs each task as it is enqueued, so it needs no worker; a project names its own backend.
DEMO_DISPATCHER = os.environ.get("DEMO_DISPATCHER", "inline")
if DEMO_DISPATCHER == "tasks":
    if django.VERSION < (6, 0):
        INSTALLED_APPS.append("django_tasks")
    TASKS = {
        "default": {
            "BACKEND": (
                "django.tasks.backends.immediate.ImmediateBackend"
                if django.VERSION >= (6, 0)
                else "django_tasks.backends.immediate.ImmediateBackend"
            )
        }
    }
    SCHEDULINATOR["DISPATCHERS"] = {
        "default": {"BACKEND": "django_schedulinator.dispatch.tasks.TasksDispatcher"}
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "demo": {
            "format": "{asctime} {levelname:<7} {name}: {message}",
            "style": "{",
            "datefmt": "%H:%M:%S",
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "demo"}},
    "loggers": {
        "django_schedulinator": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "demo": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
