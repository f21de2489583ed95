"""When does a schedule fire: every rule lives in this module, and nothing here touches the
database or Redis, so each rule can be read and tested on its own.

Instants are timezone-aware UTC datetimes truncated to whole milliseconds, the unit of the
Redis index's scores, so the row and the index always compare equal.

The rules, in the order a reader meets them:

- **Cron** expressions (5 fields, an optional leading seconds field, or an ``@`` alias) are
  matched against the *local wall clock* of the schedule's IANA zone with cronsim, and each
  matching wall time is turned into a UTC instant by the schedule's DST policy:

  - a wall time that does not exist (clocks spring forward) is **shifted** forward by the
    length of the gap (02:30 becomes 03:30 when 02:00 jumps to 03:00), or **skipped**;
  - a wall time that occurs twice (clocks fall back) fires at the **first** instant, the
    **second**, or **both**.

  The defaults, shift and first, are what PEP 495's ``fold=0`` gives (and what Temporal
  calls "compatible"). Two wall times that land on one instant fire once.

  When both the day of the month and the day of the week are restricted (neither starts
  with ``*``), the **day rule** decides: ``either`` field may match (cron's own rule, the
  default: ``1-7 * 1`` is every Monday and every day from the 1st to the 7th), or ``both``
  must (Celery's crontab: the first Monday of the month). When either field starts with
  ``*``, a day matches both under either rule.
- **Intervals** are exact durations on a grid: ``anchor + k * interval``. The anchor is
  ``anchor_at``, else ``start_at``, else the schedule's own previous nominal time, so a late
  run never makes the grid drift.
- **One-offs** have one occurrence, ``run_at``.
- **The window**: no occurrence before ``start_at`` or after ``end_at`` (cron and interval),
  both read to the millisecond like every instant: a start of ``...:24.701808`` is an
  occurrence at ``...:24.701`` when the timing has one there.
- **Jitter** delays an occurrence by a fraction of ``jitter`` derived from its idempotency
  key (so every re-dispatch sees the same delay), always less than the gap to the next
  occurrence. The delayed instant is the occurrence's *due time*; its *nominal time* (its
  identity, its key) does not move.
- **Calendars** of excluded days (holidays) take occurrences out of the timeline: each
  excluded day is a span of UTC time (the day in its calendar's zone), and an occurrence
  in one is **skipped** (recorded once a span, at the first occurrence in it, with the
  reason "calendar"), or **moved** to the same local time on the next business day (not
  excluded, not a weekend day of the calendar). A moved occurrence that lands on one that
  is there anyway fires once.
- **Catch-up** (``plan_due``) decides which due occurrences fire when a scheduler comes to
  a schedule late: the latest one (default), none that are more than the grace late
  (``skip``), or all within a window, capped (``all``). Each occurrence that does not fire
  is returned as a ``Skip`` with its reason, for the ledger.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from itertools import chain, islice
from typing import NamedTuple, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from django_schedulinator.errors import TimingError

CRON = "cron"
INTERVAL = "interval"
ONCE = "once"

# What to do with a local time that does not exist (the clocks spring forward over it).
GAP_SHIFT = "shift"
GAP_SKIP = "skip"
# What to do with a local time that occurs twice (the clocks fall back over it).
FOLD_FIRST = "first"
FOLD_SECOND = "second"
FOLD_BOTH = "both"
# Which days a cron matches when both day fields are restricted.
DAYS_EITHER = "either"  # the day of the month or the day of the week (cron's rule)
DAYS_BOTH = "both"  # the day of the month and the day of the week (Celery's)
DAY_RULE_TEXT = {
    DAYS_EITHER: "on days that match either day field",
    DAYS_BOTH: "on days that match both day fields",
}

# Catch-up: which of several due occurrences fire when a schedule is claimed late.
CATCH_UP_SKIP = "skip"
CATCH_UP_LATEST = "latest"
CATCH_UP_ALL = "all"

# Why an occurrence did not fire (stored on its skipped Run).
MISSED = "missed"  # the catch-up policy passed it over
EXPIRED = "expired"  # a one-off that was too late for the catch-up policy
DST_SKIPPED = "dst"  # its local time does not exist and the DST policy skips it
OVERLAP = "overlap"  # the previous run was still running
PAUSED = "paused"  # the schedule was paused at the time
REPLACED = "replaced"  # a "run now" took its place
CALENDAR = "calendar"  # its day is excluded by one of the schedule's calendars

# How a daylight-saving change touched an occurrence (Moment.dst).
DST_SHIFT = "shifted"  # the local time did not exist; moved forward by the gap
DST_SKIP = "skipped"  # the local time did not exist; not an occurrence (a marker)
DST_FIRST = "first"  # the first of two instants with this local time
DST_SECOND = "second"  # the second of two instants with this local time

# How a calendar of excluded days touched an occurrence (Moment.calendar).
CAL_SKIPPED = "skipped"  # on an excluded day: not an occurrence (a marker, one a span)
CAL_MOVED = "moved"  # moved from an excluded day to the next business day
# What a schedule does with an occurrence on an excluded day.
CALENDAR_SKIP = "skip"
CALENDAR_MOVE = "next_business_day"
# How far an occurrence is moved at most: past a month of days off, it is skipped instead.
MAX_MOVE_DAYS = 31
ONE_DAY = timedelta(days=1)
# A moved occurrence is later than its own by at most this (days, and a DST change).
MOVE_REACH = timedelta(days=MAX_MOVE_DAYS + 1)

CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_CRON_LENGTH = 200  # one expression
# Several expressions in one schedule ("0 9 * * 1-5; 0 12 * * 6"): the schedule fires
# their union. Separated by ";" or written on lines of their own.
CRON_SEPARATORS = re.compile(r"[;\n]")
MAX_CRON_EXPRESSIONS = 10
MAX_CRON_TEXT_LENGTH = 1000  # the field that holds them
MIN_INTERVAL = timedelta(seconds=1)
MAX_JITTER = timedelta(days=1)
ONE_MS = timedelta(milliseconds=1)
ONE_SECOND = timedelta(seconds=1)  # cron's smallest step
# Offsets are sampled this far around an instant to bound the local times that can map
# near it: further apart than any two transitions of a real zone.
OFFSET_SPAN = timedelta(hours=26)
# Wall times looked at for one occurrence before giving up: a day of seconds, which covers
# the longest gap in tzdata (Pacific/Apia skipped 30 December 2011) for a per-second cron.
MAX_WALL_STEPS = 100_000
# Looking for an occurrence (not a skipped-time marker), a walk passes over skipped local
# times in a row only as far as one clock change holds them (tzdata's longest gap is a
# day). A longer run spans two changes with nothing but skipped times between them: a cron
# such as "30 2 * 3 0L" in Europe/Berlin under dst_gap "skip" (the last Sunday of March at
# 02:30, in the very hour that does not exist) has no occurrence, and the walk says so
# (None) instead of walking to the year 9999. Only an expression that matches nothing but
# skipped times for years and then, after the zone's rules change, a time that exists, is
# cut short by it.
MAX_SKIPPED_SPAN = OFFSET_SPAN

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# -- instants ------------------------------------------------------------------------------


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


# -- parsing -------------------------------------------------------------------------------


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


def cron_expressions(text: str) -> tuple[str, ...]:
    """The expressions of a schedule's cron field, each normalized and once, in the order
    written: one, or several separated by ``;`` (or on lines of their own), whose union the
    schedule fires. TimingError says what is wrong, naming the expression."""
    if not isinstance(text, str):
        raise TimingError("Enter a cron expression as text.")
    return _cron_expressions(text)


@functools.lru_cache(maxsize=4096)
def _cron_expressions(text: str) -> tuple[str, ...]:
    parts = [part.strip() for part in CRON_SEPARATORS.split(text) if part.strip()]
    if len(parts) <= 1:
        return (_normalize_cron(parts[0] if parts else ""),)
    if len(text) > MAX_CRON_TEXT_LENGTH:
        raise TimingError(f"The cron expressions have at most {MAX_CRON_TEXT_LENGTH} characters.")
    if len(parts) > MAX_CRON_EXPRESSIONS:
        raise TimingError(
            f"A schedule has at most {MAX_CRON_EXPRESSIONS} cron expressions; this has "
            f"{len(parts)}."
        )
    found: dict[str, None] = {}
    for number, part in enumerate(parts, 1):
        try:
            found[_normalize_cron(part)] = None
        except TimingError as exc:
            raise TimingError(f"Expression {number} of {len(parts)}: {exc}") from None
    return tuple(found)


def both_days_restricted(expr: str) -> bool:
    """Whether neither day field of a normalized expression starts with ``*``: only then
    does the day rule change which days match."""
    fields = expr.split(" ")
    return not (fields[-3].startswith("*") or fields[-1].startswith("*"))


@functools.lru_cache(maxsize=1024)
def _check_matches_both(expr: str) -> None:
    """TimingError when no day matches both day fields (``0 0 30 2 1``: no 30 February)."""
    try:
        next(_walls(expr, datetime(2000, 1, 1), DAYS_BOTH))
    except StopIteration:
        raise TimingError(
            f"The cron expression {expr!r} never matches a date when both day fields must match."
        ) from None


def cron_field_values(text: str, position: int) -> frozenset[int] | None:
    """The numbers cron reads in one field of a 5-field expression (``position`` 0 is the
    minute, 4 the day of the week, Sunday 0), or None: not a valid field, or one that says
    more than numbers (``L``, ``W``, ``#``)."""
    if not text or text != "".join(text.split()):  # one field: no spaces
        return None
    fields = ["*"] * 5
    fields[position] = text
    try:
        walls = CronSim(" ".join(fields), datetime(2000, 1, 1))
    except CronSimError:
        return None
    values = (walls.minutes, walls.hours, walls.days, walls.months, walls.weekdays)[position]
    if not all(isinstance(v, int) and v >= 0 for v in values):
        return None
    return frozenset(v % 7 if position == 4 else v for v in values if isinstance(v, int))


def _walls(expr: str, start: datetime, day_rule: str, *, reverse: bool = False) -> CronSim:
    """cronsim's walk over the wall times ``expr`` matches from ``start`` on.

    cronsim (like Debian cron) requires both day fields to match when either starts with
    ``*``, and either otherwise; it has no argument for the rule, but its matcher reads it
    from ``day_and``, which its constructor sets: under ``both`` it is set for every
    expression, so that cronsim's own matching (``L``, ``W``, ``#``) decides each day.
    """
    walls = CronSim(expr, start, reverse=reverse)
    if day_rule == DAYS_BOTH:
        if not isinstance(getattr(walls, "day_and", None), bool):  # never fire on wrong days
            raise TimingError("The installed cronsim has no day_and: the day rule 'both' needs it.")
        walls.day_and = True
    return walls


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


# -- the timing of a schedule --------------------------------------------------------------


class TimingFields(Protocol):
    """What ``Timing.of`` reads of a schedule's row."""

    kind: str
    cron: str
    interval: timedelta | None
    run_at: datetime | None
    timezone: str
    start_at: datetime | None
    end_at: datetime | None
    anchor_at: datetime | None
    dst_gap: str
    dst_fold: str
    jitter: timedelta | None
    day_rule: str
    decided_moves: object


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
    anchor_at: datetime | None = None  # intervals: the grid is anchor_at + k * interval
    dst_gap: str = GAP_SHIFT
    dst_fold: str = FOLD_FIRST
    jitter: timedelta | None = None  # the largest delay added to an occurrence
    day_rule: str = DAYS_EITHER  # cron: which days match when both day fields are restricted
    calendar: DayCalendar | None = None  # the excluded days of the schedule's calendars
    # Moves already decided: (first, last) moments of the plain timeline, on days now
    # excluded, that ran or landed before a change of the excluded days (``replan_calendar``):
    # none of them moves anywhere any more.
    decided: tuple[tuple[datetime, datetime], ...] = ()

    @classmethod
    def of(cls, fields: TimingFields, calendar: DayCalendar | None = None) -> Timing:
        """The timing of a schedule's row (a ``Schedule``, or a row a query read with its
        fields), with its calendars' excluded days (``calendar``) and, when it has them, the
        moves a change of those days decided (its ``decided_moves``)."""
        return cls(
            kind=fields.kind,
            cron=fields.cron,
            interval=fields.interval,
            run_at=fields.run_at,
            timezone=fields.timezone,
            start_at=fields.start_at,
            end_at=fields.end_at,
            anchor_at=fields.anchor_at,
            dst_gap=fields.dst_gap,
            dst_fold=fields.dst_fold,
            jitter=fields.jitter,
            day_rule=fields.day_rule,
            calendar=calendar,
            decided=decided_moves(fields.decided_moves) if calendar is not None else (),
        )

    def validate(self) -> dict[str, str]:
        """Field name -> message for every problem; empty when the timing can be evaluated."""
        errors: dict[str, str] = {}
        try:
            get_zone(self.timezone)
        except TimingError as exc:
            errors["timezone"] = str(exc)
        zone = None if "timezone" in errors else get_zone(self.timezone)
        for name in ("run_at", "start_at", "end_at", "anchor_at"):
            value = getattr(self, name)
            # A naive (or unparsed) value cannot be compared with the UTC instants used here.
            if value is not None and not (
                isinstance(value, datetime) and value.utcoffset() is not None
            ):
                errors[name] = "Enter a date and time with a time zone."
                continue
            try:  # shown in local time: it must have one (the end of 9999 east of UTC)
                if value is not None and zone is not None:
                    value.astimezone(zone)
            except OverflowError:
                errors[name] = (
                    f"This time is too late: it has no local time in {self.timezone} "
                    "(past the year 9999)."
                )
        if self.dst_gap not in (GAP_SHIFT, GAP_SKIP):
            errors["dst_gap"] = f"Unknown policy {self.dst_gap!r}; use shift or skip."
        if self.dst_fold not in (FOLD_FIRST, FOLD_SECOND, FOLD_BOTH):
            errors["dst_fold"] = f"Unknown policy {self.dst_fold!r}; use first, second or both."
        if self.day_rule not in (DAYS_EITHER, DAYS_BOTH):
            errors["day_rule"] = f"Unknown day rule {self.day_rule!r}; use either or both."
        if self.jitter is not None:
            if not isinstance(self.jitter, timedelta):
                errors["jitter"] = "Enter the jitter as a duration, for example 00:05:00."
            elif not timedelta(0) <= self.jitter <= MAX_JITTER:
                errors["jitter"] = f"The jitter must be between 0 and {MAX_JITTER}."
        if self.kind == CRON:
            try:
                for expr in cron_expressions(self.cron):
                    if self.day_rule == DAYS_BOTH:
                        _check_matches_both(expr)
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
        if self.anchor_at is not None and self.kind != INTERVAL and "anchor_at" not in errors:
            errors["anchor_at"] = "An anchor applies to interval schedules only."
        window_ok = not {"start_at", "end_at"} & errors.keys()
        if window_ok and self.start_at and self.end_at and self.end_at <= self.start_at:
            errors["end_at"] = "The end must be later than the start."
        if not errors:
            now = datetime.now(UTC)
            try:
                # Without an end, a cron or interval always has a next run, unless it would
                # fall past datetime.max (the year 9999), where nothing can be stored.
                if first_run_at(self, now) is None and self.end_at is None and self.kind != ONCE:
                    raise OverflowError
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


@dataclass(frozen=True, slots=True)
class Moment:
    """One point of a schedule's timeline.

    ``at`` is the nominal UTC instant. A ``skipped`` moment is not an occurrence: it marks a
    local time the DST policy skips, at the instant a shift would have given it, so that the
    skip can be recorded when the schedule passes it.
    """

    at: datetime
    dst: str = ""  # DST_SHIFT, DST_SKIP, DST_FIRST, DST_SECOND, or "" when untouched
    wall: datetime | None = None  # the local wall time a cron matched (naive)
    calendar: str = ""  # CAL_SKIPPED, CAL_MOVED, or "" when no excluded day touched it
    excluded: str = ""  # the excluded day(s) it was on, as ExcludedSpan.label says them

    @property
    def skipped(self) -> bool:
        return self.dst == DST_SKIP or self.calendar == CAL_SKIPPED


# -- occurrences ---------------------------------------------------------------------------


def occurrences(
    timing: Timing,
    after: datetime,
    *,
    anchor: datetime | None = None,
    include_skipped: bool = False,
) -> Iterator[Moment]:
    """The schedule's moments strictly after ``after``, in increasing order.

    Finite for a one-off and for a schedule with an end; ``anchor`` is the interval grid's
    anchor when the timing names none (the schedule's current nominal time). Skipped local
    times are included as markers with ``include_skipped``.
    """
    anchor = anchor if anchor is not None else after
    while (moment := following(timing, after, anchor, include_skipped)) is not None:
        yield moment
        after = moment.at


def following(
    timing: Timing, after: datetime, anchor: datetime, include_skipped: bool = False
) -> Moment | None:
    """The schedule's first moment strictly after ``after``, or None (finished, or, without
    ``include_skipped``, nothing but skipped local times for longer than MAX_SKIPPED_SPAN).

    The step of ``occurrences``, callable on its own in the claim's hot path. With a
    calendar of excluded days, the plain timeline's moments on them are skipped (one marker
    a stretch) or moved (``_calendar_following``).
    """
    if timing.calendar is not None and timing.calendar.spans:
        return _calendar_following(timing, after, anchor, include_skipped)
    return _plain_following(timing, after, anchor, include_skipped)


def _plain_following(
    timing: Timing, after: datetime, anchor: datetime, include_skipped: bool = False
) -> Moment | None:
    """``following`` without the calendar."""
    if timing.kind == ONCE:
        if timing.run_at is not None and truncate_ms(timing.run_at) > after:
            return Moment(truncate_ms(timing.run_at))
        return None
    start = _start(timing)
    if start is not None and after < start:
        after = start - ONE_MS
    end = timing.end_at
    try:
        if timing.kind == INTERVAL:
            # Whole milliseconds, like every instant here: after truncation, each point is
            # still strictly after ``after``.
            step = _interval_ms(timing)
            base = to_ms(_anchor(timing, anchor))
            at = from_ms(base + step * ((to_ms(after) - base) // step + 1))
            return Moment(at) if end is None or at <= end else None
        exprs = cron_expressions(timing.cron)
        first_skipped: datetime | None = None
        while True:
            moment = _crons_next(
                exprs, timing.timezone, timing.dst_gap, timing.dst_fold, timing.day_rule, after
            )
            if end is not None and moment.at > end:
                return None
            if include_skipped or not moment.skipped:
                return moment
            first_skipped = first_skipped or moment.at
            if moment.at - first_skipped > MAX_SKIPPED_SPAN:
                return None  # only skipped times across more than one clock change
            after = moment.at
    except OverflowError:  # past the year 9999: nothing can follow
        return None


def occurrences_before(
    timing: Timing,
    before: datetime,
    *,
    anchor: datetime | None = None,
    include_skipped: bool = False,
) -> Iterator[Moment]:
    """The schedule's moments strictly before ``before``, latest first, back to its start."""
    anchor = anchor if anchor is not None else before
    while (moment := preceding(timing, before, anchor, include_skipped)) is not None:
        yield moment
        before = moment.at


def preceding(
    timing: Timing, before: datetime, anchor: datetime, include_skipped: bool = False
) -> Moment | None:
    """The schedule's last moment strictly before ``before``, or None (before its start, or
    nothing but skipped local times for longer than MAX_SKIPPED_SPAN).

    The mirror image of ``following``."""
    if timing.calendar is not None and timing.calendar.spans:
        return _calendar_preceding(timing, before, anchor, include_skipped)
    return _plain_preceding(timing, before, anchor, include_skipped)


def _plain_preceding(
    timing: Timing, before: datetime, anchor: datetime, include_skipped: bool = False
) -> Moment | None:
    """``preceding`` without the calendar."""
    if timing.kind == ONCE:
        if timing.run_at is not None and truncate_ms(timing.run_at) < before:
            return Moment(truncate_ms(timing.run_at))
        return None
    if timing.end_at is not None and before > timing.end_at:
        before = truncate_ms(timing.end_at) + ONE_MS
    start = _start(timing)
    try:
        if timing.kind == INTERVAL:
            step = _interval_ms(timing)
            base = to_ms(_anchor(timing, anchor))
            # The last grid point strictly before ``before`` (rounded up to a millisecond).
            at = from_ms(base - step * ((base - to_ms(ceil_ms(before))) // step + 1))
            return Moment(at) if start is None or at >= start else None
        exprs = cron_expressions(timing.cron)
        last_skipped: datetime | None = None
        while True:
            moment = _crons_prev(
                exprs, timing.timezone, timing.dst_gap, timing.dst_fold, timing.day_rule, before
            )
            if start is not None and moment.at < start:
                return None
            if include_skipped or not moment.skipped:
                return moment
            last_skipped = last_skipped or moment.at
            if last_skipped - moment.at > MAX_SKIPPED_SPAN:
                return None  # only skipped times across more than one clock change
            before = moment.at
    except OverflowError:
        return None


def first_run_at(timing: Timing, now: datetime) -> datetime | None:
    """The first moment of a new (or re-enabled, or re-timed) schedule, seen at ``now``.

    A one-off's is its ``run_at``. An interval without an anchor starts one interval after
    ``now`` (or at a future ``start_at``); with one, at the first grid point from then on. A
    cron starts at its first match after ``now`` (or from a future ``start_at`` on). The
    moment may be a skipped local time: the scheduler records the skip when it gets there.
    """
    if timing.kind == ONCE:
        return truncate_ms(timing.run_at) if timing.run_at else None
    # A start later than now, even within now's millisecond, is where the schedule starts.
    start = _start(timing) if timing.start_at is not None and timing.start_at > now else None
    if timing.kind == INTERVAL and timing.anchor_at is None and timing.start_at is None:
        return _within_end(timing, ceil_ms(now) + timedelta(milliseconds=_interval_ms(timing)))
    if timing.kind == INTERVAL and start is None:
        # Anchored: the first grid point at or after now.
        after = ceil_ms(now) - ONE_MS
    else:
        after = now if start is None else start - ONE_MS
    moment = next(occurrences(timing, after, include_skipped=True), None)
    return moment.at if moment else None


def moment_at(timing: Timing, at: datetime) -> Moment:
    """What the schedule has at ``at``: a skipped-local-time or excluded-day marker, or a
    plain moment. A next run on an excluded day is a marker wherever in the day it lies
    (a re-plan puts one there when a day is excluded after it began): on an excluded day,
    nothing fires."""
    if _has_calendar(timing):
        assert timing.calendar is not None
        span = timing.calendar.span_at(at)
        if span is not None:
            return _excluded(Moment(at), span)
    if (timing.kind == CRON and timing.dst_gap == GAP_SKIP) or _has_calendar(timing):
        found = following(timing, at - ONE_MS, at, include_skipped=True)
        if found is not None and found.at == at:
            return found
    return Moment(at)


def _has_calendar(timing: Timing) -> bool:
    return timing.calendar is not None and bool(timing.calendar.spans)


def is_moment(timing: Timing, at: datetime, anchor: datetime) -> bool:
    """Whether ``at`` is one of the schedule's moments (an occurrence, or a skipped local
    time, which the ledger records at its instant): its key is that moment's own. ``anchor``
    is the interval grid's anchor when the timing names none."""
    found = following(timing, at - ONE_MS, anchor, include_skipped=True)
    return found is not None and found.at == at


def _start(timing: Timing) -> datetime | None:
    """The start of the window at the precision of every instant here: its whole
    millisecond. A start of 12:00:24.701808 is the occurrence at 12:00:24.701 (the grid an
    interval's start anchors is there), not a start that falls just after it."""
    return truncate_ms(timing.start_at) if timing.start_at is not None else None


def _within_end(timing: Timing, candidate: datetime) -> datetime | None:
    """The candidate, or None once it passes the end: the schedule is finished."""
    if timing.end_at is not None and candidate > timing.end_at:
        return None
    return candidate


def _interval_ms(timing: Timing) -> int:
    """The interval in whole milliseconds (a sub-millisecond part is dropped)."""
    if timing.interval is None or timing.interval < MIN_INTERVAL:
        raise TimingError(f"Invalid interval {timing.interval!r}.")
    return timing.interval // ONE_MS


def _anchor(timing: Timing, fallback: datetime) -> datetime:
    return timing.anchor_at or timing.start_at or fallback


# -- calendars of excluded days -----------------------------------------------------------


class ExcludedSpan(NamedTuple):
    """Excluded time: one day of a calendar, in its zone, as UTC instants (days of several
    calendars that overlap are one span)."""

    start: datetime  # inclusive
    end: datetime  # exclusive
    label: str  # "Christmas Day, 2026-12-25 (calendar uk)", joined by "; " when merged


@dataclass(frozen=True, slots=True)
class DayCalendar:
    """The excluded days of a schedule's calendars, and what the schedule does with an
    occurrence on one. Built by ``DayCalendar.of``; nothing here reads the database."""

    spans: tuple[ExcludedSpan, ...] = ()  # ascending, none overlapping
    move: bool = False  # move such an occurrence to the next business day (else skip it)
    # (zone, ISO weekdays): the days no occurrence is moved to, read in each calendar's zone.
    weekends: tuple[tuple[str, frozenset[int]], ...] = ()
    names: tuple[str, ...] = ()  # the calendars', for descriptions
    # The zones its days and weekends are read in: when a schedule's is the only one, every
    # moment of an excluded day moves by the same number of days (``_moves_by_whole_days``).
    zones: frozenset[str] = frozenset()
    _starts: tuple[datetime, ...] = field(default=(), init=False, repr=False, compare=False)
    # For each span, the end of the run of spans it starts that follow one another without
    # a gap (a closure of many days): ``next_business`` jumps it in one step.
    _run_ends: tuple[datetime, ...] = field(default=(), init=False, repr=False, compare=False)
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", tuple(span.start for span in self.spans))
        ends: list[datetime] = []
        for span, following_span in zip(
            reversed(self.spans), chain([None], reversed(self.spans)), strict=False
        ):
            touching = following_span is not None and following_span.start <= span.end
            ends.append(ends[-1] if touching else span.end)
        object.__setattr__(self, "_run_ends", tuple(reversed(ends)))
        # Hashed once: a timing that has one is a cache key (``_moved_from``).
        object.__setattr__(self, "_hash", hash((self.spans, self.move, self.weekends)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def of(
        cls,
        days: Iterable[tuple[str, date, str]],
        *,
        move: bool = False,
        weekends: Iterable[tuple[str, Iterable[int]]] = (),
        names: Iterable[str] = (),
    ) -> DayCalendar:
        """From (zone, day, label) triples: each day is its span in its zone, from its
        local midnight to the next (a midnight that does not exist is read as PEP 495's
        ``fold=0`` reads it: the instant the clocks jump)."""
        listed = list(days)
        week = tuple((zone, frozenset(wd)) for zone, wd in weekends)
        zones = {zone for zone, _day, _label in listed} | {zone for zone, _wd in week}
        raw = sorted(
            ExcludedSpan(_local_midnight(day, zone), _local_midnight(day + ONE_DAY, zone), label)
            for zone, day, label in listed
        )
        spans: list[ExcludedSpan] = []
        for span in raw:
            if spans and span.start < spans[-1].end:  # overlapping: one span
                last = spans[-1]
                spans[-1] = ExcludedSpan(
                    last.start, max(last.end, span.end), f"{last.label}; {span.label}"
                )
            else:
                spans.append(span)
        return cls(tuple(spans), move, week, tuple(names), frozenset(zones))

    def span_at(self, at: datetime) -> ExcludedSpan | None:
        """The excluded span ``at`` falls in, or None."""
        i = bisect.bisect_right(self._starts, at) - 1
        if i >= 0 and at < self.spans[i].end:
            return self.spans[i]
        return None

    def is_business(self, at: datetime) -> bool:
        """Whether an occurrence can be moved to ``at``: not excluded, and on no calendar's
        weekend."""
        if self.span_at(at) is not None:
            return False
        return not any(
            at.astimezone(get_zone(zone)).isoweekday() in days for zone, days in self.weekends
        )

    def run_end_at(self, at: datetime) -> datetime | None:
        """The end of the run of excluded days ``at`` falls in, or None (not excluded)."""
        i = bisect.bisect_right(self._starts, at) - 1
        if i >= 0 and at < self.spans[i].end:
            return self._run_ends[i]
        return None

    def next_business(self, at: datetime, limit: datetime) -> datetime | None:
        """The first instant from ``at`` on that an occurrence can be moved to (no span
        holds it, no calendar's weekend), or None before ``limit``. A run of excluded days
        is one step, a weekend day one more: about one step per stretch, not per day."""
        while at < limit:
            i = bisect.bisect_right(self._starts, at) - 1
            if i >= 0 and at < self._run_ends[i]:
                at = self._run_ends[i]
                continue
            weekend_end = self._weekend_end(at)
            if weekend_end is None:
                return at
            at = weekend_end
        return None

    def _weekend_end(self, at: datetime) -> datetime | None:
        """The next local midnight of a calendar whose weekend ``at`` falls on, or None."""
        for zone_name, days in self.weekends:
            local = at.astimezone(get_zone(zone_name))
            if local.isoweekday() in days:
                return _local_midnight(local.date() + ONE_DAY, zone_name)
        return None

    def spans_after(self, at: datetime) -> Iterator[ExcludedSpan]:
        """The spans that end after ``at``, ascending."""
        i = max(bisect.bisect_right(self._starts, at) - 1, 0)
        return (span for span in self.spans[i:] if span.end > at)

    def spans_before(self, at: datetime) -> Iterator[ExcludedSpan]:
        """The spans that start before ``at``, latest first."""
        return reversed(self.spans[: bisect.bisect_left(self._starts, at)])


def _local_midnight(day: date, zone_name: str) -> datetime:
    return datetime.combine(day, time(0), tzinfo=get_zone(zone_name)).astimezone(UTC)


def _calendar_following(
    timing: Timing, after: datetime, anchor: datetime, include_skipped: bool
) -> Moment | None:
    """``following`` with a calendar. Skipping: the plain timeline's moments in an excluded
    span are passed over, and with ``include_skipped`` the span's first one is a marker
    (only when the walk comes to it from before: one marker a span, at one instant, so the
    ledger records the day once). Moving: ``_moved_following``."""
    calendar = timing.calendar
    assert calendar is not None
    if calendar.move:
        return _moved_following(timing, after, anchor, include_skipped)
    while (moment := _plain_following(timing, after, anchor, include_skipped)) is not None:
        span = calendar.span_at(moment.at)
        if span is None:
            return moment
        if include_skipped:  # a marker at the span's first moment
            first = moment
            if after >= span.start:
                first = _plain_following(timing, span.start - ONE_MS, anchor, True) or moment
            if first.at == moment.at:
                return _excluded(moment, span)
        after = span.end - ONE_MS  # the rest of the span is skipped with it
    return None


def _calendar_preceding(
    timing: Timing, before: datetime, anchor: datetime, include_skipped: bool
) -> Moment | None:
    """The mirror image of ``_calendar_following``: going back into an excluded span, its
    marker is its first moment."""
    calendar = timing.calendar
    assert calendar is not None
    if calendar.move:
        return _moved_preceding(timing, before, anchor, include_skipped)
    while (moment := _plain_preceding(timing, before, anchor, include_skipped)) is not None:
        span = calendar.span_at(moment.at)
        if span is None:
            return moment
        if include_skipped:
            first = _plain_following(timing, span.start - ONE_MS, anchor, True) or moment
            return _excluded(first, span)
        before = span.start
    return None


def _moved_following(
    timing: Timing, after: datetime, anchor: datetime, include_skipped: bool
) -> Moment | None:
    """The first of: the plain timeline's first moment after ``after`` on no excluded day,
    and the moved moments after it (each lands later than its own, within MOVE_REACH)."""
    calendar = timing.calendar
    assert calendar is not None
    best = None
    cursor = after
    while (moment := _plain_following(timing, cursor, anchor, include_skipped)) is not None:
        run_end = calendar.run_end_at(moment.at)
        if run_end is None:
            best = moment
            break
        cursor = run_end - ONE_MS  # past the whole run of excluded days at once
    grid = _grid_key(timing, anchor)
    for span in calendar.spans_after(after - MOVE_REACH):
        if best is not None and span.start >= best.at:
            break  # what moves from here lands after it
        moved = _first_moved(timing, span, grid, after, include_skipped, forward=True)
        if moved is not None and (best is None or _earlier(moved, best)):
            best = moved
    return best


def _first_moved(
    timing: Timing,
    span: ExcludedSpan,
    grid: datetime,
    bound: datetime,
    include_skipped: bool,
    *,
    forward: bool,
) -> Moment | None:
    """Of what ``span``'s moments become (moved, or the span's marker), the first after
    ``bound`` going forward, or the first before it going backward. When every moment of
    the span moves by the same number of days (``_moves_by_whole_days``), only the moments
    around ``bound`` are looked at; otherwise the span's whole list (``_moved_from``)."""
    floor = _decided_through(timing, span)
    if _moves_by_whole_days(timing):
        days = _business_day_after(timing.calendar, span.start, timing.timezone)
        if days is not None and _every_day(timing) and timing.end_at is None:
            # A cron that matches the same wall times every day lands each moved moment on
            # one of the business day's own: that moment is the occurrence (fired once).
            return None
        if days is None:  # nothing moves: the span is its marker alone
            if not include_skipped:
                return None
            marker = _plain_following(timing, span.start - ONE_MS, grid, True)
            if marker is None or marker.at >= span.end or (floor and marker.at <= floor):
                return None
            beyond = marker.at > bound if forward else marker.at < bound
            return _excluded(marker, span) if beyond else None
        if timing.kind == CRON and timing.end_at is None:
            return _moved_by_cron(timing, span, days, bound, floor, forward=forward)
        placed, found = _shifted(
            timing, span, grid, days, bound, floor, include_skipped, forward=forward
        )
        if placed:
            return found
    moved, instants, origins = _moved_from(timing, span, grid)
    # The moved moments are sorted by instant: the first past ``bound`` is found by bisection.
    if forward:
        i = bisect.bisect_right(instants, bound)
        candidates: Iterable[int] = range(i, len(moved))
    else:
        i = bisect.bisect_left(instants, bound)
        candidates = range(i - 1, -1, -1)
    for j in candidates:
        if (include_skipped or not moved[j].skipped) and (floor is None or origins[j] > floor):
            return moved[j]
    return None


def decided_moves(stored: object) -> tuple[tuple[datetime, datetime], ...]:
    """``Timing.decided`` from a schedule's ``decided_moves`` ([[first, last] epoch ms]);
    what cannot be read is left out (a row a bulk path wrote)."""
    if not isinstance(stored, list):
        return ()
    return tuple(
        (from_ms(pair[0]), from_ms(pair[1]))
        for pair in stored
        if isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)
    )


def stored_moves(decided: Iterable[tuple[datetime, datetime]]) -> list[list[int]]:
    """A schedule's ``decided_moves`` from ``Timing.decided``."""
    return [[to_ms(first), to_ms(last)] for first, last in decided]


def _decided_through(timing: Timing, span: ExcludedSpan) -> datetime | None:
    """The last moment of ``span`` whose move was decided before a change of the days (it
    ran, or landed before the mark): those up to it move nowhere. None: none was."""
    through = [last for first, last in timing.decided if span.start <= first < span.end]
    return max(through) if through else None


def _moved_by_cron(
    timing: Timing,
    span: ExcludedSpan,
    days: int,
    bound: datetime,
    floor: datetime | None,
    *,
    forward: bool,
) -> Moment | None:
    """``_first_moved`` for a cron whose excluded days move by ``days`` whole days: a cron
    matches the same times of day on every day its day fields match, so what a day's
    moments become is those times on the day they move to, if the day matched. A cron walk
    on that day finds the first of them past ``bound``: a step or two a day, however many
    moments a day has. The moments up to ``floor`` (decided) land nowhere."""
    zone_name = timing.timezone
    zone = get_zone(zone_name)
    day = span.start.astimezone(zone).date()
    target = day + timedelta(days=days)
    start, end = _local_midnight(target, zone_name), _local_midnight(target + ONE_DAY, zone_name)
    lowest = start - ONE_MS  # the landings of decided moments are passed over
    floor_wall = None
    if floor is not None:
        floor_wall = floor.astimezone(zone).replace(tzinfo=None) + timedelta(days=days)
        lowest = max(m.at for m in _moments_of_wall(floor_wall, zone, GAP_SHIFT, FOLD_BOTH))
    best: Moment | None = None
    for expr in cron_expressions(timing.cron):
        if not _matches_day(expr, timing.day_rule, day):
            continue
        every_day = _every_day_expr(expr)
        if forward:
            found = _cron_next(every_day, zone_name, timing.dst_gap, timing.dst_fold,
                               DAYS_EITHER, max(bound, lowest))  # fmt: skip
            if found.at >= end:
                continue
        else:
            found = _cron_prev(every_day, zone_name, timing.dst_gap, timing.dst_fold,
                               DAYS_EITHER, min(bound, end))  # fmt: skip
            if found.at < start or found.at <= lowest:
                continue
        moved = Moment(found.at, found.dst, found.wall, CAL_MOVED, span.label)
        if best is None or (_earlier(moved, best) if forward else _later(moved, best)):
            best = moved
    return best


@functools.lru_cache(maxsize=8192)
def _matches_day(expr: str, day_rule: str, day: date) -> bool:
    """Whether a cron expression matches a wall time on ``day`` (under the day rule)."""
    try:
        first = next(_walls(expr, datetime.combine(day, time(0)) - ONE_SECOND, day_rule))
    except StopIteration:
        return False
    return first.date() == day


@functools.lru_cache(maxsize=1024)
def _every_day_expr(expr: str) -> str:
    """The expression with its day, month and weekday fields made ``*``: its times of day
    on every day."""
    fields = expr.split(" ")
    return " ".join([*fields[:-3], "*", "*", "*"])


def _moves_by_whole_days(timing: Timing) -> bool:
    """Whether every moment of an excluded day moves by the same number of days: the
    schedule's zone is the only one its calendars read days in (a span is then a whole
    local day of its own, and a day is a business day or not as a whole), and its DST
    policy skips no local time (a skipped time stays a marker on the excluded day)."""
    calendar = timing.calendar
    assert calendar is not None
    return calendar.zones == {timing.timezone} and not (
        timing.kind == CRON and timing.dst_gap == GAP_SKIP
    )


def _every_day(timing: Timing) -> bool:
    """Whether the timing is a cron whose day, month and weekday fields are all ``*``: it
    matches the same wall times on every day."""
    if timing.kind != CRON:
        return False
    return all(expr.split(" ")[-3:] == ["*", "*", "*"] for expr in cron_expressions(timing.cron))


@functools.lru_cache(maxsize=4096)
def _business_day_after(calendar: DayCalendar, start: datetime, zone_name: str) -> int | None:
    """How many days after the local day that starts at ``start`` the next business day
    comes (within MAX_MOVE_DAYS), or None."""
    day = start.astimezone(get_zone(zone_name)).date()
    found = calendar.next_business(
        _local_midnight(day + ONE_DAY, zone_name),
        _local_midnight(day + timedelta(days=MAX_MOVE_DAYS + 1), zone_name),
    )
    if found is None:
        return None
    return (found.astimezone(get_zone(zone_name)).date() - day).days


def _shifted(
    timing: Timing,
    span: ExcludedSpan,
    grid: datetime,
    days: int,
    bound: datetime,
    floor: datetime | None,
    include_skipped: bool,
    *,
    forward: bool,
) -> tuple[bool, Moment | None]:
    """``_first_moved`` for a span whose moments all move ``days`` days
    (``_moves_by_whole_days``): walk its moments from the one whose landing is near
    ``bound``. Whether it could tell, and the moment: it cannot when one cannot move (it
    would land past the schedule's end), as the span's marker is at the first of those,
    which takes the whole list (``_moved_from``) to place."""
    zone = get_zone(timing.timezone)
    shift = timedelta(days=days)
    lowest = span.start - ONE_MS if floor is None else max(floor, span.start - ONE_MS)
    if forward:
        start = max(lowest, bound - shift - OFFSET_SPAN)
        moment = _plain_following(timing, start, grid, True)
    else:
        start = min(span.end, bound - shift + OFFSET_SPAN + ONE_MS)
        moment = _plain_preceding(timing, start, grid, True)
    while moment is not None and lowest < moment.at < span.end:
        wall = moment.wall or moment.at.astimezone(zone).replace(tzinfo=None)
        landed = _moments_of_wall(wall + shift, zone, timing.dst_gap, timing.dst_fold)
        if timing.end_at is not None and landed[0].at > timing.end_at:
            return False, None
        for m in landed if forward else reversed(landed):
            beyond = m.at > bound if forward else m.at < bound
            if beyond and (include_skipped or not m.skipped):
                return True, Moment(truncate_ms(m.at), m.dst, m.wall, CAL_MOVED, span.label)
        if forward:
            moment = _plain_following(timing, moment.at, grid, True)
        else:
            moment = _plain_preceding(timing, moment.at, grid, True)
    return True, None


def _moved_preceding(
    timing: Timing, before: datetime, anchor: datetime, include_skipped: bool
) -> Moment | None:
    """The mirror image of ``_moved_following``."""
    calendar = timing.calendar
    assert calendar is not None
    best = None
    cursor = before
    while (moment := _plain_preceding(timing, cursor, anchor, include_skipped)) is not None:
        span = calendar.span_at(moment.at)
        if span is None:
            best = moment
            break
        cursor = span.start
    grid = _grid_key(timing, anchor)
    for span in calendar.spans_before(before):
        if best is not None and span.end + MOVE_REACH < best.at:
            break  # what moves from here lands before it
        moved = _first_moved(timing, span, grid, before, include_skipped, forward=False)
        if moved is not None and (best is None or _later(moved, best)):
            best = moved
    return best


def _grid_key(timing: Timing, anchor: datetime) -> datetime:
    """What of ``anchor`` the plain timeline depends on: an interval's grid (the same
    points from any anchor on it), nothing for a cron or a one-off."""
    if timing.kind != INTERVAL:
        return EPOCH
    step = _interval_ms(timing)
    return from_ms(to_ms(_anchor(timing, anchor)) % step)


@functools.lru_cache(maxsize=256)
def _moved_from(
    timing: Timing, span: ExcludedSpan, anchor: datetime
) -> tuple[tuple[Moment, ...], tuple[datetime, ...], tuple[datetime, ...]]:
    """Where the plain moments in ``span`` go, by instant: each moved one where it lands,
    and one marker for those that cannot move, at the first of them (a day is recorded
    once). A span with no business day within reach is that marker alone, found without
    walking its moments (a closure of months costs a step a day, not a step a moment)."""
    first = _plain_following(timing, span.start - ONE_MS, anchor, True)
    if first is None or first.at >= span.end:
        return (), (), ()
    calendar = timing.calendar
    assert calendar is not None
    # A moved moment lands at its local time a whole number of days later: none can land
    # before a day after the span's start (less a DST change), nor after MOVE_REACH.
    reach = span.end + MOVE_REACH
    if calendar.next_business(span.start + ONE_DAY - OFFSET_SPAN, reach) is None:
        return (_excluded(first, span),), (first.at,), (first.at,)
    found: list[tuple[Moment, datetime]] = []  # where each goes, and where from
    marker: Moment | None = None
    moment: Moment | None = first
    steps = 0
    while moment is not None and moment.at < span.end and steps <= MAX_WALL_STEPS:
        for landed in _moved(timing, moment, span):
            if landed.calendar == CAL_SKIPPED:  # cannot move
                if marker is not None:
                    continue
                marker = landed
            found.append((landed, moment.at))
        steps += 1
        moment = _plain_following(timing, moment.at, anchor, True)
    found.sort(key=lambda pair: (pair[0].at, _touched(pair[0])))
    return (
        tuple(m for m, _origin in found),
        tuple(m.at for m, _origin in found),
        tuple(origin for _m, origin in found),
    )


def _moved(timing: Timing, moment: Moment, span: ExcludedSpan) -> tuple[Moment, ...]:
    """Where an occurrence on an excluded day goes: its local time on the next business
    day, under the DST policy; skipped when there is none within MAX_MOVE_DAYS, or when
    it would land past the schedule's end. A skipped local time stays a marker."""
    if moment.skipped:
        return (moment,)
    calendar = timing.calendar
    assert calendar is not None
    zone = get_zone(timing.timezone)
    wall = moment.wall or moment.at.astimezone(zone).replace(tzinfo=None)
    # The days before the first business instant are passed over without a look.
    business = calendar.next_business(moment.at + ONE_DAY - OFFSET_SPAN, moment.at + MOVE_REACH)
    if business is None:
        return (_excluded(moment, span),)
    first_day = max(1, (business - moment.at - OFFSET_SPAN) // ONE_DAY)
    for days in range(first_day, MAX_MOVE_DAYS + 1):
        try:
            landed = _moments_of_wall(wall + timedelta(days=days), zone, timing.dst_gap,
                                      timing.dst_fold)  # fmt: skip
        except OverflowError:
            break
        if all(m.skipped or calendar.is_business(m.at) for m in landed):
            if timing.end_at is not None and landed[0].at > timing.end_at:
                break
            return tuple(
                Moment(truncate_ms(m.at), m.dst, m.wall, CAL_MOVED, span.label) for m in landed
            )
    return (_excluded(moment, span),)


def _excluded(moment: Moment, span: ExcludedSpan) -> Moment:
    return Moment(moment.at, moment.dst, moment.wall, CAL_SKIPPED, span.label)


def calendar_note(moment: Moment) -> str:
    """A sentence on how an excluded day touched ``moment``, or ""."""
    if moment.calendar == CAL_SKIPPED:
        return f"Excluded: {moment.excluded}. Nothing fires that day."
    if moment.calendar == CAL_MOVED:
        return f"Moved to the next business day from {moment.excluded}."
    return ""


# -- re-planning when a calendar's days change ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replan:
    """What a change of a schedule's excluded days does to it (``replan_calendar``)."""

    next_run_at: datetime | None
    # The schedule's decided moves from now on (``Timing.decided``).
    decided: tuple[tuple[datetime, datetime], ...] = ()
    # Moved occurrences that had not run and that the new days put at or before what the
    # schedule fired through: late now, for the catch-up policy (at most the most recent
    # ``LATE_RECORDED``; ``late_before``: earlier ones were passed over too).
    late: tuple[datetime, ...] = ()
    late_before: datetime | None = None
    # Moved occurrences that had not run and can no longer move: a day's first, recorded.
    excluded: tuple[Moment, ...] = ()


# The late occurrences a re-plan hands to the catch-up policy, the most recent ones: as
# many as a claim looks at (catch-up's largest batch and the skips it records).
LATE_RECORDED = 201


def replan_calendar(
    old: Timing, new: Timing, *, fired_through: datetime, now: datetime, anchor: datetime
) -> Replan:
    """Where a schedule goes when its excluded days change from ``old``'s to ``new``'s,
    having fired through ``fired_through`` (every moment of the old timeline up to it
    fired or was passed over). What it decided stays decided; what it did not follows the
    new days:

    - skipping: the next run is the new timeline's first moment after the mark. A day
      the old days excluded, whose marker the schedule passed, stays passed up to ``now``
      (its later moments run if the day is no longer excluded); a marker not yet claimed
      recorded nothing, so the day's moments after the mark are late. A day excluded after
      it began is marked from its next moment on (the claim records it once).
    - moving: an occurrence is known by where it comes from (its own local time on its own
      day). One that ran, or that landed at or before the mark, is ``decided``: it moves
      nowhere any more (the walk passes over it). One that was moved and had not run
      lands where the new days put it; if that is at or before the mark it is ``late``;
      if it can no longer move, it is ``excluded``.

    The work is a few steps per excluded day within MOVE_REACH before the mark (the only
    days a change can move occurrences across it), moment by moment only where the days
    are read in another zone than the schedule's."""
    if new.calendar is None or not new.calendar.move or old.calendar is None:
        return Replan(_skipping_next(old, new, fired_through, now, anchor))
    mark = fired_through
    start = mark - MOVE_REACH
    base = dataclasses.replace(new, calendar=None, decided=())
    decided: list[tuple[datetime, datetime]] = []
    for span in new.calendar.spans_after(start):
        if span.start > mark:
            break
        decided.extend(_decided_in(old, base, span, mark, anchor))
    planned = dataclasses.replace(new, decided=tuple(decided))
    late: list[datetime] = []
    late_before: datetime | None = None
    excluded: list[Moment] = []
    for span in old.calendar.spans_after(start):
        if span.start > mark:
            break
        found, before, cannot = _late_in(old, planned, base, span, mark, anchor)
        late.extend(found)
        late_before = max(filter(None, (late_before, before)), default=None)
        excluded.extend(cannot)
    # Never early: one the mark decided ahead of now (a run now that took the place of a
    # later occurrence) is passed over with it.
    late = sorted(at for at in late if at <= now)
    if len(late) > LATE_RECORDED:
        late_before = max(filter(None, (late_before, late[-LATE_RECORDED - 1])))
        late = late[-LATE_RECORDED:]
    found_next = following(planned, mark, anchor, include_skipped=True)
    return Replan(
        found_next.at if found_next is not None else None,
        tuple(decided),
        tuple(late),
        late_before,
        tuple(excluded),
    )


def _skipping_next(
    old: Timing, new: Timing, mark: datetime, now: datetime, anchor: datetime
) -> datetime | None:
    """``replan_calendar`` for a schedule that skips excluded days."""
    after = mark
    passed = old.calendar.span_at(mark) if old.calendar is not None else None
    if passed is not None and not passed.start <= anchor < passed.end:
        # Its marker was recorded (the schedule is past the day): passed over up to now.
        # A marker still pending (the scheduler behind) recorded nothing: what the day
        # holds after the mark is late, for the catch-up policy.
        after = max(mark, min(now, passed.end - ONE_MS))
    elif new.calendar is not None and (entered := new.calendar.span_at(mark)) is not None:
        # Excluded after it began: the day's next moment is its marker.
        inside = _plain_following(new, mark, anchor, True)
        if inside is not None and inside.at < entered.end:
            return inside.at
    found = following(new, after, anchor, include_skipped=True)
    return found.at if found is not None else None


def _decided_in(
    old: Timing, base: Timing, span: ExcludedSpan, mark: datetime, anchor: datetime
) -> list[tuple[datetime, datetime]]:
    """The runs of plain moments of ``span`` (a day the new days exclude), up to the mark,
    whose fate ``old`` decided: they ran (the old days did not exclude them), or landed at
    or before the mark, or could not move (the day's marker passed), or an earlier re-plan
    decided them. As (first, last) runs: one, from the day's start, where every moment of
    the day moved by the same number of days."""
    last = min(mark, span.end - ONE_MS)
    first = _plain_following(base, span.start - ONE_MS, anchor, True)
    if first is None or first.at > last:
        return []
    calendar = old.calendar
    assert calendar is not None
    old_span = calendar.span_at(first.at)
    if (
        _moves_by_whole_days(old)
        and old.end_at is None
        and (old_span is None or old_span.start == span.start)
    ):
        cut = last
        days = _business_day_after(calendar, span.start, old.timezone) if old_span else None
        if days is not None:  # moved: decided where it landed at or before the mark
            zone = get_zone(old.timezone)
            wall = mark.astimezone(zone).replace(tzinfo=None) - timedelta(days=days)
            cut = min(last, max(m.at for m in _moments_of_wall(wall, zone, GAP_SHIFT, FOLD_BOTH)))
        floor = _decided_through(old, span)
        through = _plain_preceding(base, cut + ONE_MS, anchor, True)
        ends = [at for at in (floor, through.at if through else None) if at is not None]
        top = max(ends, default=None)
        return [(span.start, top)] if top is not None and top >= first.at else []
    runs: list[tuple[datetime, datetime]] = []
    moment: Moment | None = first
    steps = 0
    extending = False  # the moment before was decided too: its run goes on
    while moment is not None and moment.at <= last and steps <= MAX_WALL_STEPS:
        known = any(a <= moment.at <= b for a, b in old.decided)
        if known or all(m.at <= mark for m in _landings(old, moment)):
            if extending:
                runs[-1] = (runs[-1][0], moment.at)
            else:
                runs.append((moment.at, moment.at))
            extending = True
        else:
            extending = False
        steps += 1
        moment = _plain_following(base, moment.at, anchor, True)
    return runs


def _late_in(
    old: Timing, new: Timing, base: Timing, span: ExcludedSpan, mark: datetime, anchor: datetime
) -> tuple[list[datetime], datetime | None, list[Moment]]:
    """The plain moments of ``span`` (a day the old days excluded) up to the mark that had
    not landed (moved past the mark under ``old``) and that land at or before it under
    ``new``: the most recent LATE_RECORDED, and where the earlier ones begin if there were
    more; and the day's first that can no longer move, if one cannot."""
    last = min(mark, span.end - ONE_MS)
    decided = _decided_in(old, base, span, mark, anchor)
    late: list[datetime] = []
    if _moves_by_whole_days(old) and old.end_at is None and len(decided) <= 1:
        cut = decided[0][1] if decided else span.start - ONE_MS  # the pending come after it
        assert new.calendar is not None
        top = last
        if new.calendar.span_at(span.start) is not None:  # still excluded: moved again
            days = _business_day_after(new.calendar, span.start, new.timezone)
            if days is None:
                pending = _plain_following(base, cut, anchor, True)
                if pending is None or pending.at > last:
                    return [], None, []
                return [], None, [_excluded(pending, span)]
            zone = get_zone(new.timezone)
            wall = mark.astimezone(zone).replace(tzinfo=None) - timedelta(days=days)
            top = min(last, min(m.at for m in _moments_of_wall(wall, zone, GAP_SHIFT, FOLD_BOTH)))
        moment = _plain_preceding(base, top + ONE_MS, anchor, True)
        while moment is not None and moment.at > cut:
            if len(late) >= LATE_RECORDED:
                return late, moment.at, []
            if not moment.skipped:
                late.extend(m.at for m in _landings(new, moment) if m.at <= mark)
            moment = _plain_preceding(base, moment.at, anchor, True)
        return late, None, []
    # Days read in another zone than the schedule's: moment by moment, going back.
    excluded: list[Moment] = []
    moment = _plain_preceding(base, last + ONE_MS, anchor, True)
    steps = 0
    while moment is not None and moment.at >= span.start and steps <= MAX_WALL_STEPS:
        steps += 1
        if not any(a <= moment.at <= b for a, b in decided):
            now_landed = _landings(new, moment)
            new_span = new.calendar.span_at(moment.at) if new.calendar else None
            if not now_landed and new_span is not None:
                excluded[:] = [_excluded(moment, new_span)]  # the day's first, going back
            elif now_landed and all(m.at <= mark for m in now_landed):
                if len(late) >= LATE_RECORDED:
                    return late, moment.at, excluded
                late.extend(m.at for m in now_landed)
        moment = _plain_preceding(base, moment.at, anchor, True)
    return late, None, excluded


def _landings(spec: Timing, origin: Moment) -> tuple[Moment, ...]:
    """Where the plain moment ``origin`` fires under ``spec``'s days: itself on a day they
    do not exclude, the moved moment(s) on one they do; none when it is skipped, cannot
    move, or is a local time the DST policy skips."""
    if origin.skipped:
        return ()
    calendar = spec.calendar
    span = calendar.span_at(origin.at) if calendar is not None else None
    if span is None:
        return (origin,)
    if not calendar or not calendar.move:
        return ()
    return tuple(m for m in _moved(spec, origin, span) if m.calendar == CAL_MOVED and not m.skipped)


# -- cron on the local wall clock ----------------------------------------------------------


def _offset(zone: tzinfo, at: datetime) -> timedelta | None:
    try:
        return at.astimezone(zone).utcoffset()
    except OverflowError:  # near datetime.min/max
        return None


def _near_change(zone: tzinfo, at: datetime, sign: int) -> timedelta | None:
    """The offset on the far side of a change within its own length of ``at`` (after it
    for ``sign`` 1, before it for -1), else None. A day away is further than any two
    changes of a real zone are apart, so one sample there finds the change's length."""
    here, far = _offset(zone, at), _offset(zone, at + sign * OFFSET_SPAN)
    if here is None or far is None or far == here:
        return None
    return _offset(zone, at + sign * (abs(here - far) + ONE_MS))


def _change_in(zone: tzinfo, start: datetime, end: datetime) -> datetime:
    """The first instant after ``start``, to the millisecond, whose offset is not
    ``start``'s, for a change known to lie in (``start``, ``end``]."""
    offset = _offset(zone, start)
    while end - start > ONE_MS:
        middle = start + (end - start) / 2
        if _offset(zone, middle) == offset:
            start = middle
        else:
            end = middle
    return end


def _fold_walls_start(zone: tzinfo, at: datetime, offset: timedelta, sign: int) -> datetime | None:
    """Where a walk of the wall times that map with ``offset`` begins when the clocks fall
    back within ``offset``'s reach of ``at`` (after it for ``sign`` 1, before it for -1), or
    None. Only from the change on (before it, going back) do wall times map with the
    offset of the other side; the ones between are those of the other walk again, which
    map to instants on the wrong side of ``at``: a per-second cron would walk up to an hour
    of them for each occurrence."""
    own = _offset(zone, at)
    if own is None or sign * (own - offset) <= timedelta(0):
        return None  # the offset in force, or a spring forward (its gap's walls count)
    if _near_change(zone, at, sign) != offset:
        return None
    reach = abs(own - offset) + ONE_MS
    if sign > 0:
        change = _change_in(zone, at, at + reach)
        return (change + offset - ONE_SECOND).replace(tzinfo=None)
    change = _change_in(zone, at - reach, at)
    return (change + offset + ONE_SECOND).replace(tzinfo=None)


def _offsets_around(zone: tzinfo, at: datetime) -> set[timedelta]:
    """The offsets a wall time can map with near ``at``: its own, and the other side of a
    change within its length (a gap's wall times map with the offset from before it)."""
    found = {_offset(zone, at), _near_change(zone, at, 1), _near_change(zone, at, -1)}
    return {o for o in found if o is not None}


def _moments_of_wall(wall: datetime, zone: tzinfo, gap: str, fold: str) -> tuple[Moment, ...]:
    """The instants the local wall time ``wall`` stands for under the DST policy."""
    first = wall.replace(tzinfo=zone)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return (Moment(first.astimezone(UTC), "", wall),)
    a, b = sorted((first.astimezone(UTC), second.astimezone(UTC)))
    if a.astimezone(zone).replace(tzinfo=None) == wall:
        # Both instants show this wall time: the clocks fell back over it.
        if fold == FOLD_FIRST:
            return (Moment(a, DST_FIRST, wall),)
        if fold == FOLD_SECOND:
            return (Moment(b, DST_SECOND, wall),)
        return (Moment(a, DST_FIRST, wall), Moment(b, DST_SECOND, wall))
    # Neither does: the clocks sprang forward over it. ``b`` is the wall time read with the
    # offset from before the change, which is the wall time moved forward by the gap.
    return (Moment(b, DST_SHIFT if gap == GAP_SHIFT else DST_SKIP, wall),)


def _touched(moment: Moment) -> tuple[bool, bool, bool]:
    # Two wall times on one instant fire once, as the one a DST change touched least: an
    # untouched time wins over a shifted one, and any occurrence over a skipped-time marker.
    return moment.skipped, bool(moment.dst), bool(moment.calendar)


def _earlier(a: Moment, b: Moment) -> bool:
    """``a`` comes first going forward (on one instant: the less touched one)."""
    return (a.at, _touched(a)) < (b.at, _touched(b))


def _later(a: Moment, b: Moment) -> bool:
    """``a`` comes first going backward (on one instant: still the less touched one)."""
    return a.at > b.at or (a.at == b.at and _touched(a) < _touched(b))


def _crons_next(
    exprs: tuple[str, ...], zone_name: str, gap: str, fold: str, day_rule: str, after: datetime
) -> Moment:
    """The first moment of any of ``exprs`` strictly after ``after``. An instant several
    of them give is one moment (the ledger has one run per instant): the one a DST policy
    touched least, as within one expression."""
    if len(exprs) == 1:
        return _cron_next(exprs[0], zone_name, gap, fold, day_rule, after)
    return _best(lambda e: _cron_next(e, zone_name, gap, fold, day_rule, after), exprs, _earlier)


def _crons_prev(
    exprs: tuple[str, ...], zone_name: str, gap: str, fold: str, day_rule: str, before: datetime
) -> Moment:
    """The last moment of any of ``exprs`` strictly before ``before`` (the mirror image of
    ``_crons_next``)."""
    if len(exprs) == 1:
        return _cron_prev(exprs[0], zone_name, gap, fold, day_rule, before)
    return _best(lambda e: _cron_prev(e, zone_name, gap, fold, day_rule, before), exprs, _later)


def _best(
    step: Callable[[str], Moment],
    exprs: tuple[str, ...],
    better: Callable[[Moment, Moment], bool],
) -> Moment:
    """The ``better`` of the moments ``step`` finds for the expressions that have one; the
    first one's error when none has (an expression past its last match leaves the others to
    go on)."""
    best: Moment | None = None
    error: Exception | None = None
    for expr in exprs:
        try:
            moment = step(expr)
        except (TimingError, OverflowError) as exc:
            error = error or exc
            continue
        if best is None or better(moment, best):
            best = moment
    if best is None:
        assert error is not None
        raise error
    return best


@functools.lru_cache(maxsize=8192)
def _cron_next(
    expr: str, zone_name: str, gap: str, fold: str, day_rule: str, after: datetime
) -> Moment:
    """The first moment strictly after ``after``.

    Memoized: schedules sharing an expression, zone and due time (the common bulk case)
    cost one evaluation. A wall time w maps to w minus an offset, so the wall times of the
    instants in (after, best) that map with offset o lie in (after + o, best + o): one short
    walk per offset in use near ``after`` and near the answer covers them all, and a dense
    cron never walks more than the stretch it looks at, even across a change.
    """
    zone = get_zone(zone_name)
    best: Moment | None = None
    tried: set[timedelta] = set()
    todo = _offsets_around(zone, after)
    while todo - tried:
        offset = min(todo - tried)
        tried.add(offset)
        start = (after + offset).replace(tzinfo=None)
        if (fold_start := _fold_walls_start(zone, after, offset, 1)) is not None:
            start = max(start, fold_start)
        walls = _walls(expr, start, day_rule)
        try:
            for _step, wall in zip(range(MAX_WALL_STEPS), walls, strict=False):
                for moment in _moments_of_wall(wall, zone, gap, fold):
                    if moment.at > after and (best is None or _earlier(moment, best)):
                        best = moment
                if best is not None and (best.at + offset).replace(tzinfo=None) <= wall:
                    break
        except StopIteration:  # cronsim looks ahead a bounded number of years
            pass
        if best is not None:
            todo |= _offsets_around(zone, best.at)
    if best is None:
        raise TimingError(f"The cron expression {expr!r} has no occurrence after {after}.")
    return _truncated(best)


@functools.lru_cache(maxsize=8192)
def _cron_prev(
    expr: str, zone_name: str, gap: str, fold: str, day_rule: str, before: datetime
) -> Moment:
    """The last moment strictly before ``before`` (the mirror image of ``_cron_next``)."""
    zone = get_zone(zone_name)
    best: Moment | None = None
    tried: set[timedelta] = set()
    todo = _offsets_around(zone, before - ONE_MS)
    while todo - tried:
        offset = max(todo - tried)
        tried.add(offset)
        start = (before + offset).replace(tzinfo=None)
        if (fold_start := _fold_walls_start(zone, before - ONE_MS, offset, -1)) is not None:
            start = min(start, fold_start)
        walls = _walls(expr, start, day_rule, reverse=True)
        try:
            for _step, wall in zip(range(MAX_WALL_STEPS), walls, strict=False):
                for moment in _moments_of_wall(wall, zone, gap, fold):
                    if moment.at < before and (best is None or _later(moment, best)):
                        best = moment
                if best is not None and (best.at + offset).replace(tzinfo=None) >= wall:
                    break
        except StopIteration:
            pass
        if best is not None:
            todo |= _offsets_around(zone, best.at)
    if best is None:
        raise TimingError(f"The cron expression {expr!r} has no occurrence before {before}.")
    return _truncated(best)


def _truncated(moment: Moment) -> Moment:
    return Moment(truncate_ms(moment.at), moment.dst, moment.wall)


# -- jitter --------------------------------------------------------------------------------


LAST_INSTANT = datetime.max.replace(tzinfo=UTC)


def jitter_delay(
    schedule_id: int, nominal: datetime, jitter: timedelta | None, gap: timedelta | None
) -> timedelta:
    """The delay of one occurrence: a fraction of ``jitter`` derived from its key.

    Deterministic, so a re-dispatch or a recomputation sees the same delay, and always less
    than ``gap`` (the time to the next occurrence), so an occurrence never fires at or after
    its successor's nominal time.
    """
    if not jitter or jitter <= timedelta(0):
        return timedelta(0)
    limit_ms = int(jitter / ONE_MS)
    if gap is not None:
        limit_ms = min(limit_ms, int(gap / ONE_MS) - 1)
    # Never past the last instant a datetime can hold (a one-off at the end of 9999).
    limit_ms = min(limit_ms, int((LAST_INSTANT - nominal) / ONE_MS))
    if limit_ms <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(f"{schedule_id}:{to_ms(nominal)}".encode(), digest_size=8).digest()
    return timedelta(milliseconds=int.from_bytes(digest, "big") % (limit_ms + 1))


def stored_due_at(
    nominal: datetime, due_at: datetime | None, jitter: timedelta | None
) -> datetime | None:
    """A row's stored ``due_at`` if it can belong to its ``next_run_at`` (``nominal``), else
    None: the due time is then unknown and recomputed from the jitter.

    A due time is the nominal time plus a delay below the jitter, so one that is earlier than
    the nominal time, or later than the jitter allows, was left by a write that moved
    ``next_run_at`` alone (a bulk path). Trusting it would fire early, or late.
    """
    if due_at is None or due_at < nominal or due_at - nominal > (jitter or timedelta(0)):
        return None  # (a difference, not nominal + jitter: that overflows near year 9999)
    return due_at


def due_time(
    timing: Timing, schedule_id: int, nominal: datetime, *, anchor: datetime | None = None
) -> datetime:
    """When the occurrence at ``nominal`` fires: its nominal time plus its jitter."""
    if not timing.jitter or moment_at(timing, nominal).skipped:
        return nominal  # a skipped local time fires nothing: it is due when it comes
    upcoming = next(occurrences(timing, nominal, anchor=anchor or nominal), None)
    gap = upcoming.at - nominal if upcoming else None
    return nominal + jitter_delay(schedule_id, nominal, timing.jitter, gap)


def _with_due_times(
    timing: Timing, schedule_id: int, moments: Iterator[Moment], first_due: datetime | None
) -> Iterator[tuple[Moment, datetime]]:
    """Each moment with its due time, in order; the first may bring its own (the row's
    ``due_at``). An occurrence's jitter is bounded by the next *occurrence*, as in
    ``due_time``; skipped-time markers are due at their instant."""
    if not timing.jitter:
        for n, moment in enumerate(moments):
            yield moment, first_due if n == 0 and first_due else moment.at
        return
    held: Moment | None = None  # the last occurrence, until its successor is known
    held_due = first_due
    markers: list[Moment] = []  # markers after it, yielded once it is
    for n, moment in enumerate(moments):
        if moment.skipped:
            if held is None:
                yield moment, moment.at
            else:
                markers.append(moment)
            continue
        if held is not None:
            yield held, held_due or _jittered(timing, schedule_id, held, moment)
            yield from ((m, m.at) for m in markers)
            markers.clear()
        held, held_due = moment, first_due if n == 0 else None
    if held is not None:
        yield held, held_due or _jittered(timing, schedule_id, held, None)
        yield from ((m, m.at) for m in markers)


def _jittered(
    timing: Timing, schedule_id: int, moment: Moment, successor: Moment | None
) -> datetime:
    gap = successor.at - moment.at if successor is not None else None
    return moment.at + jitter_delay(schedule_id, moment.at, timing.jitter, gap)


# -- catch-up: what fires when a schedule is claimed ----------------------------------------


@dataclass(frozen=True, slots=True)
class CatchUp:
    """The catch-up policy in force for one schedule (its own, or the settings')."""

    mode: str = CATCH_UP_LATEST
    window: timedelta = timedelta(hours=1)  # "all": missed occurrences older than this don't fire
    max_runs: int = 100  # "all" (and "skip"): at most this many fire in one go
    grace: timedelta = timedelta(minutes=1)  # later than this counts as missed


class Skip(NamedTuple):
    """An occurrence that did not fire, for the ledger."""

    at: datetime
    reason: str
    note: str


@dataclass(slots=True)
class DuePlan:
    """What a claim does with one due schedule."""

    fire: list[datetime] = field(default_factory=list)  # nominal times, ascending
    skips: list[Skip] = field(default_factory=list)  # ascending, at most the record limit
    next_run_at: datetime | None = None  # None: the schedule is finished
    due_at: datetime | None = None
    # The latest moment it decided (fired, buffered or skipped): what the schedule has fired
    # through once the claim commits.
    through: datetime | None = None


def plan_due(
    timing: Timing,
    catch_up: CatchUp,
    *,
    schedule_id: int,
    nominal: datetime,
    due_at: datetime | None,
    now: datetime,
    runs_left: int | None = None,
    skips_recorded: int = 100,
) -> DuePlan:
    """Decide what fires for a schedule whose occurrence at ``nominal`` is due at ``now``.

    Every occurrence due by ``now`` (at or after its due time) is looked at: the catch-up
    policy picks the ones that fire, and the others become skips ("missed", or "expired"
    for a one-off). Skipped local times passed on the way are skips too ("dst"). The
    schedule then moves to its first moment not yet due. ``runs_left`` (a maximum number
    of runs) caps what fires and finishes the schedule when it reaches zero.

    The work is bounded whatever the backlog: past ``catch_up.max_runs + skips_recorded``
    due moments, only the most recent ones are looked at, and the skip notes say so.
    """
    # Never trusted blindly: a due_at that cannot belong to ``nominal`` is recomputed.
    due_at = stored_due_at(nominal, due_at, timing.jitter)
    quick = _plan_one(timing, catch_up, nominal, due_at, now, runs_left)
    if quick is not None:
        return quick
    limit = catch_up.max_runs + skips_recorded + 1
    first = moment_at(timing, nominal)
    due, upcoming = _due_moments(timing, schedule_id, first, due_at, now, limit)
    truncated = None
    if len(due) > limit:
        # A long outage: jump to the most recent moments instead of walking them all.
        recent = list(
            islice(
                occurrences_before(timing, now + ONE_MS, anchor=nominal, include_skipped=True),
                limit,
            )
        )
        truncated = nominal
        due, upcoming = _due_moments(timing, schedule_id, recent[-1], None, now, None)

    occurred = [(m, d) for m, d in due if not m.skipped]
    fire = _pick(catch_up, occurred, now)
    if runs_left is not None:
        fire = fire[-runs_left:] if runs_left > 0 else []
    fired = {m.at for m, _d in fire}
    skips = [_skip(timing, catch_up, m, now - d) for m, d in due if m.at not in fired]
    if len(skips) > skips_recorded or truncated is not None:
        earliest = truncated or skips[0].at
        skips = skips[-skips_recorded:] if skips_recorded else []
        if skips:
            first_kept = skips[0]
            skips[0] = first_kept._replace(
                note=f"{first_kept.note} Earlier occurrences back to {earliest:%Y-%m-%d %H:%M:%S} "
                f"UTC were passed over too; only the most recent {skips_recorded} are recorded "
                f"(SCHEDULINATOR['MAX_SKIPS_RECORDED'])."
            )
    through = due[-1][0].at if due else None
    plan = DuePlan(fire=[m.at for m, _d in fire], skips=skips, through=through)
    finished = runs_left is not None and runs_left - len(fire) <= 0
    if upcoming is not None and not finished:
        plan.next_run_at, plan.due_at = upcoming[0].at, upcoming[1]
    return plan


def _plan_one(
    timing: Timing,
    catch_up: CatchUp,
    nominal: datetime,
    due_at: datetime | None,
    now: datetime,
    runs_left: int | None,
) -> DuePlan | None:
    """The plan of the common case, cheaply: one occurrence due, and it fires. None when the
    case is not that simple (jitter, a backlog, a skip to record). A timing that has
    markers (local times the DST policy skips, excluded days) takes this path when the due
    moment is an occurrence and no marker is due after it: the next run may be a marker."""
    if timing.jitter:
        return None
    if runs_left is not None and runs_left <= 0:
        return None
    marks = (timing.kind == CRON and timing.dst_gap == GAP_SKIP) or _has_calendar(timing)
    if marks and moment_at(timing, nominal).skipped:
        return None  # a skip to record
    after = following(timing, nominal, nominal, include_skipped=marks)
    if after is not None and after.at <= now:
        return None  # more than one moment is due: catch-up decides, skips are recorded
    late = now - (due_at or nominal)
    if catch_up.mode == CATCH_UP_SKIP and late > catch_up.grace:
        return None
    if catch_up.mode == CATCH_UP_ALL and late > catch_up.window:
        return None
    if after is None or runs_left == 1:
        return DuePlan(fire=[nominal], through=nominal)  # finished
    return DuePlan(fire=[nominal], next_run_at=after.at, due_at=after.at, through=nominal)


def _due_moments(
    timing: Timing,
    schedule_id: int,
    first: Moment,
    first_due: datetime | None,
    now: datetime,
    limit: int | None,
) -> tuple[list[tuple[Moment, datetime]], tuple[Moment, datetime] | None]:
    """The moments from ``first`` on that are due by ``now`` (more than ``limit`` means
    "too many"), and the first one that is not."""
    moments = chain([first], occurrences(timing, first.at, anchor=first.at, include_skipped=True))
    due: list[tuple[Moment, datetime]] = []
    for moment, due_at in _with_due_times(timing, schedule_id, moments, first_due):
        if due_at > now:
            return due, (moment, due_at)
        due.append((moment, due_at))
        if limit is not None and len(due) > limit:
            break
    return due, None


def _pick(
    catch_up: CatchUp, occurred: list[tuple[Moment, datetime]], now: datetime
) -> list[tuple[Moment, datetime]]:
    """The due occurrences that fire under the catch-up policy (ascending)."""
    if not occurred:
        return []
    if catch_up.mode == CATCH_UP_SKIP:
        fire = [(m, d) for m, d in occurred if now - d <= catch_up.grace]
    elif catch_up.mode == CATCH_UP_ALL:
        fire = [(m, d) for m, d in occurred if now - d <= catch_up.window]
    else:  # latest
        return occurred[-1:]
    return fire[-catch_up.max_runs :]


def late_to_fire(catch_up: CatchUp, late: Iterable[datetime], now: datetime) -> list[datetime]:
    """Of occurrences that are late at ``now`` (each due at its nominal time), those the
    catch-up policy fires, ascending."""
    occurred = [(Moment(at), at) for at in sorted(late)]
    return [moment.at for moment, _due in _pick(catch_up, occurred, now)]


def _skip(timing: Timing, catch_up: CatchUp, moment: Moment, late: timedelta) -> Skip:
    if moment.calendar == CAL_SKIPPED:
        return Skip(moment.at, CALENDAR, calendar_note(moment))
    if moment.skipped:
        return Skip(moment.at, DST_SKIPPED, dst_note(timing, moment))
    late_text = _duration(late)
    if timing.kind == ONCE:
        return Skip(
            moment.at,
            EXPIRED,
            f"The one-off was {late_text} late, more than catch-up {catch_up.mode!r} allows.",
        )
    if catch_up.mode == CATCH_UP_LATEST:
        why = "catch-up 'latest' fired only the most recent due occurrence"
    elif catch_up.mode == CATCH_UP_SKIP:
        why = f"catch-up 'skip' fires nothing later than {_duration(catch_up.grace)}"
    else:
        why = (
            f"catch-up 'all' fires the last {catch_up.max_runs} within {_duration(catch_up.window)}"
        )
    return Skip(moment.at, MISSED, f"Claimed {late_text} late; {why}.")


def _duration(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# -- what people read: previews, notes, descriptions ----------------------------------------


@dataclass(frozen=True, slots=True)
class PreviewItem:
    at: datetime  # nominal, UTC
    local: datetime  # the same instant in the schedule's zone
    due_at: datetime  # when it fires (nominal plus jitter)
    dst: str  # how a DST change touched it ("" when it did not)
    skipped: bool  # a local time the DST policy skips, or an excluded day: nothing fires
    note: str  # a sentence about the DST change or the excluded day, or ""
    calendar: str = ""  # CAL_SKIPPED, CAL_MOVED, or "" when no excluded day touched it


def preview(
    timing: Timing,
    *,
    start: datetime,
    count: int,
    schedule_id: int = 0,
) -> list[PreviewItem]:
    """The next ``count`` moments from ``start`` on (inclusive), DST changes flagged.

    Besides shifted, skipped and repeated local times, an occurrence whose UTC offset
    differs from the one before is flagged, because its local time or its UTC time moved.
    """
    zone = get_zone(timing.timezone)
    moments = occurrences(timing, start - ONE_MS, anchor=start, include_skipped=True)
    items: list[PreviewItem] = []
    previous_offset = None
    timed = _with_due_times(timing, schedule_id, moments, None)
    for moment, due in islice(timed, count):
        try:
            local = moment.at.astimezone(zone)
        except OverflowError:  # past the year 9999 in this zone: nothing more to show
            break
        note = " ".join(filter(None, (calendar_note(moment), dst_note(timing, moment))))
        dst = moment.dst
        offset = local.utcoffset()
        if not dst and previous_offset is not None and offset != previous_offset:
            dst = "offset"
            note = " ".join(
                filter(None, (note, f"The UTC offset is now {_offset_text(offset)} ({local:%Z})."))
            )
        previous_offset = offset
        items.append(PreviewItem(moment.at, local, due, dst, moment.skipped, note, moment.calendar))
    return items


def dst_note(timing: Timing, moment: Moment) -> str:
    """A sentence on how a DST change touched ``moment``, or ""."""
    if not moment.dst or moment.wall is None:
        return ""
    zone = get_zone(timing.timezone)
    wall = f"{moment.wall:%H:%M}" + (f":{moment.wall:%S}" if moment.wall.second else "")
    day = f"{moment.wall:%Y-%m-%d}"
    local = moment.at.astimezone(zone)
    if moment.dst in (DST_SHIFT, DST_SKIP):
        where = f"{wall} does not exist in {timing.timezone} on {day} (the clocks jump forward)"
        if moment.dst == DST_SHIFT:
            return f"{where}; it runs at {local:%H:%M} {local:%Z} instead."
        return f"{where}; skipped by the DST policy."
    which = "first" if moment.dst == DST_FIRST else "second"
    return (
        f"{wall} occurs twice in {timing.timezone} on {day} (the clocks go back); this is the "
        f"{which}, at {_offset_text(local.utcoffset())} ({local:%Z})."
    )


def _offset_text(offset: timedelta | None) -> str:
    minutes = int((offset or timedelta(0)).total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def describe(timing: Timing) -> str:
    """A sentence a person can read, e.g. "At 06:00, Monday through Friday (Europe/Berlin)".

    Cron expressions are described by cron-descriptor; an expression it cannot describe
    is shown as it is.
    """
    if timing.kind == CRON:
        try:
            exprs = cron_expressions(timing.cron)
        except TimingError:
            exprs = (timing.cron,)
        first, *others = [_describe_cron(expr, timing.day_rule) for expr in exprs]
        text = first + "".join(f"; and {other[:1].lower()}{other[1:]}" for other in others)
        return f"{text} ({timing.timezone}){_calendar_text(timing)}"
    if timing.kind == INTERVAL and isinstance(timing.interval, timedelta):
        text = f"Every {_interval_text(timing.interval)}"
        anchor = timing.anchor_at or timing.start_at
        if anchor is not None:
            text += f", counted from {anchor.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        return text + _calendar_text(timing)
    if timing.kind == ONCE and isinstance(timing.run_at, datetime):
        try:
            local = timing.run_at.astimezone(get_zone(timing.timezone))
        except OverflowError:  # a row saved before validate() refused such times
            return f"Once, at {timing.run_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        return f"Once, at {local:%Y-%m-%d %H:%M:%S %Z} ({timing.timezone})"
    return ""


def _calendar_text(timing: Timing) -> str:
    calendar = timing.calendar
    if calendar is None or not calendar.names:
        return ""
    names = ", ".join(calendar.names)
    if calendar.move:
        return f"; on a day excluded by {names}, moved to the next business day"
    return f"; not on days excluded by {names}"


@functools.lru_cache(maxsize=1024)
def _describe_cron(expr: str, day_rule: str = DAYS_EITHER) -> str:
    from cron_descriptor import DescriptionTypeEnum, ExpressionDescriptor, Options

    try:
        text = normalize_cron(expr)
        options = Options()
        options.use_24hour_time_format = True
        descriptor = ExpressionDescriptor(text, options)
        described = str(descriptor.get_description())
        if not both_days_restricted(text):
            return described
        # cron-descriptor 1.x reads both day fields as "and" (", only on Monday"), 2.x as
        # "or" (", or on Monday"): say the schedule's rule either way.
        weekdays = str(descriptor.get_description(DescriptionTypeEnum.DAYOFWEEK))
        if weekdays.startswith(", ") and weekdays in described:
            which = weekdays[2:].removeprefix("only ").removeprefix("or ")
            joined = f", but only {which}" if day_rule == DAYS_BOTH else f", or {which}"
            return described.replace(weekdays, joined, 1)
        return f"{described}, {DAY_RULE_TEXT[day_rule]}"  # a locale that words it otherwise
    except Exception:  # a description is a nicety: never an error
        return expr


def _interval_text(interval: timedelta) -> str:
    seconds = int(interval.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0 and seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}" if n != 1 else unit
    return f"{interval.total_seconds():g} seconds"
