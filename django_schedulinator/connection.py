"""The Redis client behind the due index, taken from a django-redis cache alias."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .conf import app_settings


def get_redis() -> Any:
    """The raw redis-py client of ``SCHEDULINATOR['CACHE_ALIAS']``."""
    from django.core.cache import InvalidCacheBackendError
    from django_redis import get_redis_connection

    alias = app_settings.CACHE_ALIAS
    try:
        return get_redis_connection(alias)
    except InvalidCacheBackendError:
        raise ImproperlyConfigured(
            f"SCHEDULINATOR['CACHE_ALIAS'] is {alias!r}, which is not in CACHES."
        ) from None
    except NotImplementedError:
        raise ImproperlyConfigured(
            f"SCHEDULINATOR['CACHE_ALIAS'] is {alias!r}, whose backend is not django-redis "
            "(set BACKEND to 'django_redis.cache.RedisCache')."
        ) from None
