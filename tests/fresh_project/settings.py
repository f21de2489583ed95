"""Settings of a fresh project (see __init__.py); the database is a file the test names."""

import os

SECRET_KEY = "fresh-project-tests-only"
USE_TZ = True
ALLOWED_HOSTS = ["testserver"]
ROOT_URLCONF = "tests.fresh_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_schedulinator",
    *os.environ.get("FRESH_PROJECT_EXTRA_APPS", "").split(),
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
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["FRESH_PROJECT_DB"]}
}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "schedulinator": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    },
}
SCHEDULINATOR = {"CACHE_ALIAS": "schedulinator", "KEY_PREFIX": os.environ["FRESH_PROJECT_PREFIX"]}
