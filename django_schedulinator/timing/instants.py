"""Instants, and the zones that give them local times.

An instant is a timezone-aware UTC datetime truncated to a whole millisecond, the unit of
the Redis index's scores, so the row and the index always compare equal. A zone is an IANA
name read with ``zoneinfo`` (``get_zone``).
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django_schedulinator.errors import TimingError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MS = timedelta(milliseconds=1)
ONE_SECOND = timedelta(seconds=1)  # cron's smallest step
ONE_DAY = timedelta(days=1)
LAST_INSTANT = datetime.max.replace(tzinfo=UTC)


def to_ms(dt: datetime) -> int:
    """Epoch milliseconds of an aware datetime (exact in a Redis double until the year 2255)."""
    delta = dt - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def truncate_ms(dt: datetime) -> datetime:
    return dt.replace(microsecond=dt.microsecond - dt.microsecond % 1000)


def ceil_ms(dt: datetime) -> datetime:
    """The first whole millisecond at or after ``dt`` (a lower bound that stays a bound)."""
    truncated = truncate_ms(dt)
    return truncated if truncated == dt else truncated + ONE_MS


def get_zone(name: str) -> ZoneInfo:
    """The IANA zone called ``name``, or TimingError."""
    if not isinstance(name, str) or not name or len(name) > 64:
        raise TimingError(f"{name!r} is not an IANA time zone name such as 'Europe/Berlin'.")
    return _zone(name)


@functools.lru_cache(maxsize=512)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TimingError(
            f"Unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin' or 'UTC'."
        ) from None


def local_midnight(day: date, zone_name: str) -> datetime:
    """The instant ``day`` starts in the zone (a midnight that does not exist is read as
    PEP 495's ``fold=0`` reads it: the instant the clocks jump)."""
    return datetime.combine(day, time(0), tzinfo=get_zone(zone_name)).astimezone(UTC)
