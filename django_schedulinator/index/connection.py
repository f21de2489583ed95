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

from django_schedulinator.conf import SETTING_NAME, RedisConfig, Setting, Settings, app_settings

REDIS_KEYS = ("URL", "CLUSTER", "SENTINELS", "SERVICE_NAME", "OPTIONS", "SENTINEL_OPTIONS")


def parse_redis(setting: Setting[RedisConfig | None], value: Any) -> RedisConfig | None:
    """SCHEDULINATOR["REDIS"]: one server, a cluster, or a Sentinel service; None: the
    cache alias's connection."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise setting.error(
            f"must be None or a dict with the keys {', '.join(REDIS_KEYS)}, got {value!r}"
        )
    setting.refuse_unknown_keys(value, REDIS_KEYS)
    for key in ("OPTIONS", "SENTINEL_OPTIONS"):
        if not isinstance(value.get(key, {}), dict):
            raise setting.error(f"[{key!r}] must be a dict of redis-py options, got {value[key]!r}")
    cluster = value.get("CLUSTER", False)
    if not isinstance(cluster, bool):
        raise setting.error(f"['CLUSTER'] must be True or False, got {cluster!r}")
    options, sentinel_options = value.get("OPTIONS", {}), value.get("SENTINEL_OPTIONS", {})
    if "SENTINELS" in value:
        sentinels = value["SENTINELS"]
        if (
            not isinstance(sentinels, list | tuple)
            or not sentinels
            or not all(
                isinstance(s, list | tuple)
                and len(s) == 2
                and isinstance(s[0], str)
                and isinstance(s[1], int)
                and not isinstance(s[1], bool)
                for s in sentinels
            )
        ):
            raise setting.error(
                f"['SENTINELS'] must be a non-empty list of [host, port] pairs, got {sentinels!r}"
            )
        service = value.get("SERVICE_NAME")
        if not isinstance(service, str) or not service:
            raise setting.error(
                f"['SERVICE_NAME'] must name the Sentinel service (its master's name) when "
                f"SENTINELS is given, got {service!r}"
            )
        if "URL" in value or cluster:
            raise setting.error("takes SENTINELS and SERVICE_NAME, or URL (and CLUSTER), not both")
        pairs = tuple((host, port) for host, port in sentinels)
        return RedisConfig(None, False, (), pairs, service, options, sentinel_options)
    if "SERVICE_NAME" in value:
        raise setting.error("['SERVICE_NAME'] goes with SENTINELS, not with URL")
    url = value.get("URL")
    if isinstance(url, list | tuple):
        first, others = _startup_nodes(setting, url, cluster)
        return RedisConfig(first, cluster, others, (), None, options, sentinel_options)
    if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
        raise setting.error(
            f"['URL'] must be a redis://, rediss:// or unix:// URL, or a list of a Redis "
            f"Cluster's node URLs (or give SENTINELS and SERVICE_NAME), got {url!r}"
        )
    return RedisConfig(url, cluster, (), (), None, options, sentinel_options)


def _startup_nodes(
    setting: Setting[Any], urls: list[Any] | tuple[Any, ...], cluster: bool
) -> tuple[str, tuple[tuple[str, int], ...]]:
    """A Redis Cluster's startup nodes, given as a list of URLs: the first URL (whose
    credentials and options the client takes), and the others' hosts and ports. Every URL
    must say the same but for its host and port."""
    from redis.connection import parse_url

    if not cluster:
        raise setting.error(
            "['URL'] is a list of startup nodes, which only a Redis Cluster takes (with "
            "CLUSTER: True); give one URL for a single server"
        )
    if not urls:
        raise setting.error("['URL'] must list at least one node's URL")
    nodes: list[tuple[str, int]] = []
    shared: dict[str, Any] | None = None
    for position, url in enumerate(urls):
        where = f"['URL'][{position}]"
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://")):
            raise setting.error(
                f"{where} must be a redis:// or rediss:// URL of a node, got {url!r}"
            )
        try:
            parsed = parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            raise setting.error(f"{where} cannot be read: {exc}") from None
        host, port = parsed.pop("host", None), parsed.pop("port", 6379)
        if not host:
            raise setting.error(f"{where} names no host, got {url!r}")
        if shared is None:
            shared = parsed
        elif parsed != shared:
            raise setting.error(
                f"{where} differs from ['URL'][0] in more than its host and port (the scheme, "
                f"the credentials or the options): the client connects to every node alike"
            )
        nodes.append((str(host), int(port)))
    return urls[0], tuple(nodes[1:])


Settings.REDIS.parsed_by(parse_redis)

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


class LazyClient:
    """A holder of the Redis client (``client``): the one given, or ``get_redis()``'s, taken
    on first use and not when the holder is built: a scheduler starts while Redis is away
    (a cluster client connects when it is built) and its loop waits the outage out."""

    def __init__(self, client: Any | None) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = get_redis()
        return self._client
