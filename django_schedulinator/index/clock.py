"""The time every due decision takes: Redis ``TIME``, the clock the schedulers claim by.

Saving, pausing, resuming, run now, backfill and previews decide what is due "now". Taken
from the host clock, a web host whose clock runs ahead would record as passed (paused,
skipped) occurrences that the schedulers have not reached yet, and they would never fire. So
they ask Redis, as the claim does; only when Redis cannot be reached do they fall back to the
host clock, and say so (once per outage).

The read has a short timeout of its own, so a Redis that does not answer costs a web request
at most about ``TIMEOUT_SECONDS``, not the connection's own timeouts (five seconds each by
default in redis-py) or its retries.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_schedulinator import timing
from django_schedulinator.index.connection import get_redis

logger = logging.getLogger("django_schedulinator.clock")

# The longest a web request waits for Redis TIME, to connect and to read.
TIMEOUT_SECONDS = 0.5

_lock = threading.Lock()
_outage = False  # the last read fell back to the host clock: log again only once it is back
_quick: dict[int, tuple[Any, Any]] = {}  # id(pool) -> (pool, client with short timeouts)


def now() -> datetime:
    """Redis TIME as an aware UTC datetime; the host clock when Redis cannot be reached (a
    WARNING once per outage). To the microsecond, like ``timezone.now()``: a caller that
    passes ``timezone.now()`` as the end of a backfill on the Redis host is not refused
    for the part of a millisecond that ``DueIndex.now_ms()`` would drop."""
    return redis_or_host_time(_read_redis_time)


def _read_redis_time() -> datetime:
    seconds, micros = _quick_client(get_redis()).time()
    return timing.EPOCH + timedelta(seconds=int(seconds), microseconds=int(micros))


def redis_or_host_time(read: Callable[[], datetime]) -> datetime:
    """What ``read`` gets from Redis TIME; this host's clock when it fails, whatever the
    error (unreachable, misconfigured, a broken connection): Redis is then unavailable.
    Logged once per outage, at WARNING, and again at INFO when Redis answers."""
    global _outage
    try:
        at = read()
    except Exception as exc:
        with _lock:
            first, _outage = not _outage, True
        if first:
            logger.warning(
                "Could not read Redis TIME (%s: %s); using this host's clock until Redis "
                "answers again. A host clock that is off moves the times that saving, "
                "resuming, run now and backfill decide, and the leases of running tasks.",
                type(exc).__name__,
                exc,
            )
        return timezone.now()
    if _outage:
        with _lock:
            back, _outage = _outage, False
        if back:
            logger.info("Redis TIME answers again; due decisions use it again.")
    return at


def _quick_client(client: Any) -> Any:
    """A client of the same server whose connections time out after ``TIMEOUT_SECONDS``
    (or sooner, if the cache's own options say so), made once per connection pool."""
    import redis

    pool: Any = getattr(client, "connection_pool", None)
    # Sentinel, cluster and other pools cannot be copied like this: their own timeouts apply.
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        return client
    found = _quick.get(id(pool))
    if found is not None and found[0] is pool:
        return found[1]
    kwargs = {
        name: value
        for name, value in pool.connection_kwargs.items()
        # Bound to the original pool (redis-py's maintenance notifications): not copied.
        if not name.startswith(("maint_notifications_pool_handler", "orig_"))
    }
    for name in ("socket_timeout", "socket_connect_timeout"):
        configured = kwargs.get(name)
        kwargs[name] = TIMEOUT_SECONDS if configured is None else min(configured, TIMEOUT_SECONDS)
    quick = redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )
    with _lock:
        _quick[id(pool)] = (pool, quick)
    return quick
