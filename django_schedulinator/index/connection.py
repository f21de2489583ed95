"""The Redis client behind the due index: a django-redis cache alias's connection
(``CACHE_ALIAS``), or a client of the app's own (``REDIS``): one server, a Redis Cluster (from
one startup node, or several), or a master found through Redis Sentinel."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_schedulinator.conf import SETTING_NAME, RedisConfig, app_settings

_lock = threading.Lock()
# The client built from SCHEDULINATOR["REDIS"], with the configuration it was built from:
# one per process (redis-py clients are thread-safe and pool their connections), built
# again when the setting changes (override_settings).
_own: tuple[RedisConfig, Any] | None = None


def get_redis() -> Any:
    """The raw redis-py client holding the due index: ``SCHEDULINATOR['REDIS']``'s, or that
    of the cache named by ``SCHEDULINATOR['CACHE_ALIAS']``."""
    config = app_settings.REDIS
    if config is not None:
        return _own_client(config)
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


def describe() -> str:
    """Where the index's Redis is configured, for error messages and hints."""
    config = app_settings.REDIS
    if config is None:
        return f"the cache named by {SETTING_NAME}['CACHE_ALIAS'] ({app_settings.CACHE_ALIAS!r})"
    if config.sentinels:
        return f"the Sentinel service {config.service_name!r} of {SETTING_NAME}['REDIS']"
    kind = "the Redis Cluster" if config.cluster else "the Redis"
    return f"{kind} of {SETTING_NAME}['REDIS']"


def _own_client(config: RedisConfig) -> Any:
    global _own
    with _lock:
        if _own is not None and _own[0] == config:
            return _own[1]
        try:
            client = _build(config)
        except (TypeError, ValueError) as exc:  # a URL or an option redis-py refuses
            raise ImproperlyConfigured(
                f"{SETTING_NAME}['REDIS'] is refused by redis-py: {exc}"
            ) from exc
        except RedisClusterException as exc:
            # A cluster client asks its nodes for the slot map when it is built. No node
            # answering, or a map that does not cover every slot yet (a cluster forming or
            # failing over), is an outage, which the loop backs off from; not a bug.
            if "cluster mode is not enabled" in str(exc).lower():
                raise ImproperlyConfigured(
                    f"{SETTING_NAME}['REDIS'] has CLUSTER: True, and its node is no Redis "
                    f"Cluster node: {exc}"
                ) from exc
            cause = exc.__cause__
            why = cause if isinstance(cause, RedisConnectionError | RedisTimeoutError) else exc
            raise RedisConnectionError(
                f"No node of the Redis Cluster of {SETTING_NAME}['REDIS'] answers with a "
                f"map of every slot: {why}"
            ) from exc
        previous, _own = _own, (config, client)
    if previous is not None:
        _close(previous[1])
    return _own[1]


def _build(config: RedisConfig) -> Any:
    import redis

    options = dict(config.options)
    if config.sentinels:
        from redis.sentinel import Sentinel

        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(config.sentinels), sentinel_kwargs=dict(config.sentinel_options), **options
        )
        return sentinel.master_for(config.service_name)  # type: ignore[no-untyped-call]
    assert config.url is not None
    if config.cluster:
        from redis.cluster import ClusterNode, RedisCluster

        if config.startup_nodes:
            # The nodes the client may ask for the slot map, the URL's among them: one of
            # them down (the first, even) is no outage while another answers.
            nodes = config.startup_nodes
            options["startup_nodes"] = [ClusterNode(h, p) for h, p in nodes]  # type: ignore[no-untyped-call]
        return RedisCluster.from_url(config.url, **options)
    return redis.Redis.from_url(config.url, **options)


def _close(client: Any) -> None:
    with contextlib.suppress(Exception):  # a client being replaced: nothing to tell
        client.close()
