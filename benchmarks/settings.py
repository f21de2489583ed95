"""Settings for the benchmarks: PostgreSQL database `schedulinator_bench`, Redis DB 0 under
its own key prefix. Override with BENCH_PG_*, BENCH_REDIS_URL and BENCH_KEY_PREFIX."""

import os

SECRET_KEY = "bench"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The change log's migration refers to the user model: auth (and its contenttypes) must be here.
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_schedulinator",
    "benchmarks",
]
# benchmarks/pictures.py renders the admin's pictures, which link to admin pages: it sets
# BENCH_ADMIN for the admin app and its URLs.
if os.environ.get("BENCH_ADMIN"):
    INSTALLED_APPS = ["django.contrib.admin", *INSTALLED_APPS]
    ROOT_URLCONF = "benchmarks.pictures"
    TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
# benchmarks/api.py serves the REST API (under gunicorn, and in process): BENCH_API sets DRF,
# its token authentication (a header a load generator can send; a password costs a hash per
# request) and the API's URLs; persistent connections, as a deployment keeps them.
BENCH_API = bool(os.environ.get("BENCH_API"))
if BENCH_API:
    INSTALLED_APPS = [
        *INSTALLED_APPS, "rest_framework", "rest_framework.authtoken", "django_filters"
    ]  # fmt: skip
    ROOT_URLCONF = "benchmarks.api"
    ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
    REST_FRAMEWORK = {
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"]
    }
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("BENCH_PG_NAME", "schedulinator_bench"),
        "USER": os.environ.get("BENCH_PG_USER", "postgres"),
        "HOST": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("BENCH_PG_PORT", "5432"),
    }
}
if BENCH_API:
    # benchmarks/api.py finds its server's backends by this name, to read their CPU time.
    DATABASES["default"]["OPTIONS"] = {"application_name": "schedulinator-bench-api"}
    DATABASES["default"]["CONN_MAX_AGE"] = 600
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    }
}
SCHEDULINATOR = {
    "KEY_PREFIX": os.environ.get("BENCH_KEY_PREFIX", "schedulinator-bench"),
    # A sharded index (docs/scaling.md): BENCH_INDEX_SHARDS=3 python -m benchmarks.run
    "INDEX_SHARDS": int(os.environ.get("BENCH_INDEX_SHARDS", "1")),
}
# benchmarks/dispatchers.py fires through every real dispatcher: BENCH_DISPATCH is its run's
# queue name (its key prefix), BENCH_WEBHOOK_URL its receiver. The tasks dispatcher enqueues
# on django-tasks-db's database backend, the one docs/dispatch.md sets up.
BENCH_DISPATCH = os.environ.get("BENCH_DISPATCH", "")
if BENCH_DISPATCH:
    INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    RQ_QUEUES = {BENCH_DISPATCH: {"URL": CACHES["default"]["LOCATION"]}}
    _DISPATCH = "django_schedulinator.dispatch"
    SCHEDULINATOR["DISPATCHERS"] = {
        "inline": {"BACKEND": f"{_DISPATCH}.inline.InlineDispatcher", "OPTIONS": {}},
        "celery-redis": {
            "BACKEND": f"{_DISPATCH}.celery.CeleryDispatcher",
            "OPTIONS": {"APP": "benchmarks.dispatch_targets.celery_redis"},
        },
        "celery-amqp": {
            "BACKEND": f"{_DISPATCH}.celery.CeleryDispatcher",
            "OPTIONS": {"APP": "benchmarks.dispatch_targets.celery_amqp"},
        },
        "rq": {"BACKEND": f"{_DISPATCH}.rq.RQDispatcher", "OPTIONS": {"QUEUE": BENCH_DISPATCH}},
        "tasks": {"BACKEND": f"{_DISPATCH}.tasks.TasksDispatcher", "OPTIONS": {}},
        "webhook": {
            "BACKEND": f"{_DISPATCH}.webhook.WebhookDispatcher",
            "OPTIONS": {
                "TARGETS": {
                    "bench": {
                        "URL": os.environ.get("BENCH_WEBHOOK_URL", "http://127.0.0.1:9/hook"),
                        "SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                    }
                }
            },
        },
    }
