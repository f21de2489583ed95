"""When does a schedule fire next: every rule lives in this module.

Instants are timezone-aware UTC datetimes truncated to whole milliseconds, the unit of the Redis
index's scores, so the row and the index always compare equal. Cron expressions are evaluated in
the schedule's IANA zone with cronsim (strict parsing, documented DST handling) and converted
back to UTC.

Policy today: a due occurrence fires once at its nominal time and the schedule advances to its
first occurrence after *now*, so downtime never causes a burst of missed runs. Richer policies
(DST choices, catch-up windows) grow here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

CRON = "cron"
INTERVAL = "interval"
ONCE = "once"

CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_CRON_LENGTH = 200
MIN_INTERVAL = timedelta(seconds=1)


class TimingError(ValueError):
    """A schedule's timing cannot be evaluated (bad cron, zone or interval)."""


def to_ms(dt: datetime) -> int:
    """Epoch milliseconds of an aware datetime (exact in a Redis double until the year 2255)."""
    delta = dt - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def truncate_ms(dt: datetime) -> datetime:
    return dt.replace(microsecond=dt.microsecond - dt.microsecond % 1000)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def normalize_cron(expr: str) -> str:
    """The expression cronsim will evaluate, or TimingError saying what is wrong with it."""
    if not isinstance(expr, str):
        raise TimingError("Enter a cron expression as text.")
    return _normalize_cron(expr)


@functools.lru_cache(maxsize=4096)
def _normalize_cron(expr: str) -> str:
    text = " ".join(expr.split())
    if not text:
        raise TimingError("Enter a cron expression, for example '*/5 * * * *'.")
    if len(text) > MAX_CRON_LENGTH:
        raise TimingError(f"A cron expression has at most {MAX_CRON_LENGTH} characters.")
    if text.startswith("@"):
        try:
            return CRON_ALIASES[text.lower()]
        except KeyError:
            raise TimingError(
                f"Unknown cron alias {text!r}; use one of {', '.join(sorted(CRON_ALIASES))}."
            ) from None
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise TimingError(
            f"A cron expression has 5 fields (minute hour day month weekday) or 6 with a "
            f"leading seconds field; {text!r} has {len(fields)}."
        )
    try:
        next(CronSim(text, datetime(2000, 1, 1)))
    except CronSimError as exc:
        raise TimingError(f"Invalid cron expression {text!r}: {exc}.") from None
    except StopIteration:
        raise TimingError(f"The cron expression {text!r} never matches a date.") from None
    return text


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


@dataclass(frozen=True, slots=True)
class Timing:
    """The fields of a schedule that decide when it fires."""

    kind: str
    cron: str = ""
    interval: timedelta | None = None
    run_at: datetime | None = None
    timezone: str = "UTC"
    start_at: datetime | None = None  # no occurrence before it
    end_at: datetime | None = None  # no occurrence after it

    def validate(self) -> dict[str, str]:
        """Field name -> message for every problem; empty when the timing can be evaluated."""
        errors: dict[str, str] = {}
        try:
            get_zone(self.timezone)
        except TimingError as exc:
            errors["timezone"] = str(exc)
        for name in ("run_at", "start_at", "end_at"):
            value = getattr(self, name)
            # A naive (or unparsed) value cannot be compared with the UTC instants used here.
            if value is not None and not (
                isinstance(value, datetime) and value.utcoffset() is not None
            ):
                errors[name] = "Enter a date and time with a time zone."
        if self.kind == CRON:
            try:
                normalize_cron(self.cron)
            except TimingError as exc:
                errors["cron"] = str(exc)
        elif self.kind == INTERVAL:
            if self.interval is None:
                errors["interval"] = "An interval schedule needs an interval."
            elif not isinstance(self.interval, timedelta):
                errors["interval"] = "Enter the interval as a duration, for example 01:00:00."
            elif self.interval < MIN_INTERVAL:
                errors["interval"] = f"The interval must be at least {MIN_INTERVAL}."
        elif self.kind == ONCE:
            if self.run_at is None:
                errors["run_at"] = "A one-off schedule needs a time to run at."
        else:
            errors["kind"] = f"Unknown kind {self.kind!r}; use cron, interval or once."
        window_ok = not {"start_at", "end_at"} & errors.keys()
        if window_ok and self.start_at and self.end_at and self.end_at <= self.start_at:
            errors["end_at"] = "The end must be later than the start."
        if not errors:
            now = datetime.now(UTC)
            try:
                first_run_at(self, now)
            except (OverflowError, TimingError):
                # Past datetime.max (the year 9999): nothing could ever be stored or indexed.
                if self.kind == INTERVAL:
                    errors["interval"] = (
                        "The interval is too long: its first run would fall after the year 9999."
                    )
                elif self.start_at is not None and self.start_at > now:
                    errors["start_at"] = "The start is too late: no occurrence can follow it."
                else:
                    errors["cron"] = "The cron expression has no occurrence that can be computed."
        return errors


def first_run_at(timing: Timing, now: datetime) -> datetime | None:
    """The first occurrence of a new (or re-enabled, or re-timed) schedule, seen at ``now``.

    A start in the future is the first occurrence of an interval, and the earliest a cron
    expression is matched from.
    """
    if timing.kind == ONCE:
        return truncate_ms(timing.run_at) if timing.run_at else None
    start = timing.start_at if timing.start_at is not None and timing.start_at > now else None
    if timing.kind == INTERVAL:
        first = start if start is not None else now + _interval(timing)
        return _within_end(timing, truncate_ms(first))
    if start is not None:
        # Matched from the millisecond before the start, so a match at the start counts.
        return _within_end(timing, _cron_after(timing, start - timedelta(milliseconds=1)))
    return _within_end(timing, _cron_after(timing, now))


def next_run_after(timing: Timing, nominal: datetime, now: datetime) -> datetime | None:
    """Where a schedule goes after firing its occurrence ``nominal`` at ``now``.

    The result is strictly later than both: missed occurrences between them are coalesced
    into the one that fired. Intervals stay anchored on the nominal times (no drift).
    """
    if timing.kind == ONCE:
        return None
    try:
        if timing.kind == INTERVAL:
            step = _interval(timing)
            steps = max(1, (now - nominal) // step + 1)
            return _within_end(timing, truncate_ms(nominal + step * steps))
        return _within_end(timing, _cron_after(timing, max(nominal, now)))
    except OverflowError:  # past the year 9999: nothing can follow, the schedule is finished
        return None


def _within_end(timing: Timing, candidate: datetime) -> datetime | None:
    """The candidate, or None once it passes the end: the schedule is finished."""
    if timing.end_at is not None and candidate > timing.end_at:
        return None
    return candidate


def _interval(timing: Timing) -> timedelta:
    if timing.interval is None or timing.interval < MIN_INTERVAL:
        raise TimingError(f"Invalid interval {timing.interval!r}.")
    return timing.interval


def _cron_after(timing: Timing, after: datetime) -> datetime:
    return _cron_next(normalize_cron(timing.cron), timing.timezone, after.astimezone(UTC))


@functools.lru_cache(maxsize=8192)
def _cron_next(expr: str, zone_name: str, after: datetime) -> datetime:
    # Memoized: schedules sharing an expression and a due time (the common bulk case) cost
    # one evaluation, which matters at thousands of occurrences per second.
    local = after.astimezone(get_zone(zone_name))
    # cronsim works on whole seconds; start from the second containing `after` so the
    # result is strictly later than `after` itself.
    start = local.replace(microsecond=0)
    try:
        return truncate_ms(next(CronSim(expr, start)).astimezone(UTC))
    except StopIteration:  # cronsim looks ahead a bounded number of years
        raise TimingError(
            f"The cron expression {expr!r} has no occurrence after {after}."
        ) from None
