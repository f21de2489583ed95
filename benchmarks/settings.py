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
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("BENCH_PG_NAME", "schedulinator_bench"),
        "USER": os.environ.get("BENCH_PG_USER", "postgres"),
        "HOST": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("BENCH_PG_PORT", "5432"),
    }
}
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    }
}
SCHEDULINATOR = {"KEY_PREFIX": os.environ.get("BENCH_KEY_PREFIX", "schedulinator-bench")}
