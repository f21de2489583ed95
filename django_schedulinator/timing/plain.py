"""A schedule's plain timeline: its moments before any calendar of excluded days takes
some off (``calendars``).

- **Intervals** are exact durations on a grid: ``anchor + k * interval``. The anchor is
  ``anchor_at``, else ``start_at``, else the schedule's own previous nominal time, so a late
  run never makes the grid drift.
- **One-offs** have one occurrence, ``run_at``.
- **Cron** expressions give the moments of their wall times in the schedule's zone
  (``walks``).
- **Solar** schedules: an event of the sun at a place, plus an offset (``solar``); days
  without the event (the polar night, the midnight sun) are passed over.
- **The window**: no occurrence before ``start_at`` or after ``end_at`` (cron and interval),
  both read to the millisecond like every instant: a start of ``...:24.701808`` is an
  occurrence at ``...:24.701`` when the timing has one there.

The walks here and in ``calendars`` read a timing's fields through ``TimingSpec``: the
timing itself (``spec.Timing``) is defined above them, since its validation walks its
timeline.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from django_schedulinator.errors import TimingError
from django_schedulinator.timing.cron import cron_expressions
from django_schedulinator.timing.days import DayCalendar
from django_schedulinator.timing.instants import EPOCH, ONE_MS, ceil_ms, from_ms, to_ms, truncate_ms
from django_schedulinator.timing.moments import Moment
from django_schedulinator.timing.solar import is_event, solar_next, solar_prev
from django_schedulinator.timing.vocabulary import Kind
from django_schedulinator.timing.walks import OFFSET_SPAN, crons_next, crons_prev

MIN_INTERVAL = timedelta(seconds=1)
# Looking for an occurrence (not a skipped-time marker), a walk passes over skipped local
# times in a row only as far as one clock change holds them (tzdata's longest gap is a
# day). A longer run spans two changes with nothing but skipped times between them: a cron
# such as "30 2 * 3 0L" in Europe/Berlin under dst_gap "skip" (the last Sunday of March at
# 02:30, in the very hour that does not exist) has no occurrence, and the walk says so
# (None) instead of walking to the year 9999. Only an expression that matches nothing but
# skipped times for years and then, after the zone's rules change, a time that exists, is
# cut short by it.
MAX_SKIPPED_SPAN = OFFSET_SPAN


class TimingSpec(Protocol):
    """What the walks read of a schedule's timing (``spec.Timing``: its fields). Hashable:
    the calendar walks keep what they found for a timing (``calendars._moved_from``)."""

    def __hash__(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def cron(self) -> str: ...
    @property
    def interval(self) -> timedelta | None: ...
    @property
    def run_at(self) -> datetime | None: ...
    @property
    def timezone(self) -> str: ...
    @property
    def start_at(self) -> datetime | None: ...
    @property
    def end_at(self) -> datetime | None: ...
    @property
    def anchor_at(self) -> datetime | None: ...
    @property
    def dst_gap(self) -> str: ...
    @property
    def dst_fold(self) -> str: ...
    @property
    def day_rule(self) -> str: ...
    @property
    def calendar(self) -> DayCalendar | None: ...
    @property
    def decided(self) -> tuple[tuple[datetime, datetime], ...]: ...
    @property
    def solar_event(self) -> str: ...
    @property
    def latitude(self) -> float | None: ...
    @property
    def longitude(self) -> float | None: ...
    @property
    def solar_offset(self) -> timedelta | None: ...


def plain_following(
    timing: TimingSpec, after: datetime, anchor: datetime, include_skipped: bool = False
) -> Moment | None:
    """``spec.following`` without the calendar."""
    if timing.kind == Kind.ONCE:
        if timing.run_at is not None and truncate_ms(timing.run_at) > after:
            return Moment(truncate_ms(timing.run_at))
        return None
    start = window_start(timing)
    if start is not None and after < start:
        after = start - ONE_MS
    end = timing.end_at
    try:
        if timing.kind == Kind.INTERVAL:
            # Whole milliseconds, like every instant here: after truncation, each point is
            # still strictly after ``after``.
            step = interval_ms(timing)
            base = to_ms(_anchor(timing, anchor))
            at = from_ms(base + step * ((to_ms(after) - base) // step + 1))
            return Moment(at) if end is None or at <= end else None
        if timing.kind == Kind.SOLAR:
            lat, lon = _place(timing)
            found = solar_next(timing.solar_event, lat, lon, timing.solar_offset, after)
            return Moment(found) if found is not None and (end is None or found <= end) else None
        exprs = cron_expressions(timing.cron)
        first_skipped: datetime | None = None
        while True:
            moment = crons_next(
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


def plain_preceding(
    timing: TimingSpec, before: datetime, anchor: datetime, include_skipped: bool = False
) -> Moment | None:
    """``spec.preceding`` without the calendar."""
    if timing.kind == Kind.ONCE:
        if timing.run_at is not None and truncate_ms(timing.run_at) < before:
            return Moment(truncate_ms(timing.run_at))
        return None
    if timing.end_at is not None and before > timing.end_at:
        before = truncate_ms(timing.end_at) + ONE_MS
    start = window_start(timing)
    try:
        if timing.kind == Kind.INTERVAL:
            step = interval_ms(timing)
            base = to_ms(_anchor(timing, anchor))
            # The last grid point strictly before ``before`` (rounded up to a millisecond).
            at = from_ms(base - step * ((base - to_ms(ceil_ms(before))) // step + 1))
            return Moment(at) if start is None or at >= start else None
        if timing.kind == Kind.SOLAR:
            lat, lon = _place(timing)
            found = solar_prev(timing.solar_event, lat, lon, timing.solar_offset, before)
            ok = found is not None and (start is None or found >= start)
            return Moment(found) if ok and found is not None else None
        exprs = cron_expressions(timing.cron)
        last_skipped: datetime | None = None
        while True:
            moment = crons_prev(
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


def _place(timing: TimingSpec) -> tuple[float, float]:
    """A solar schedule's latitude and longitude, or TimingError."""
    if timing.latitude is None or timing.longitude is None or not is_event(timing.solar_event):
        raise TimingError("A solar schedule needs an event, a latitude and a longitude.")
    return float(timing.latitude), float(timing.longitude)


def window_start(timing: TimingSpec) -> datetime | None:
    """The start of the window at the precision of every instant here: its whole
    millisecond. A start of 12:00:24.701808 is the occurrence at 12:00:24.701 (the grid an
    interval's start anchors is there), not a start that falls just after it."""
    return truncate_ms(timing.start_at) if timing.start_at is not None else None


def interval_ms(timing: TimingSpec) -> int:
    """The interval in whole milliseconds (a sub-millisecond part is dropped)."""
    if timing.interval is None or timing.interval < MIN_INTERVAL:
        raise TimingError(f"Invalid interval {timing.interval!r}.")
    return timing.interval // ONE_MS


def _anchor(timing: TimingSpec, fallback: datetime) -> datetime:
    return timing.anchor_at or timing.start_at or fallback


def grid_key(timing: TimingSpec, anchor: datetime) -> datetime:
    """What of ``anchor`` the plain timeline depends on: an interval's grid (the same
    points from any anchor on it), nothing for a cron or a one-off."""
    if timing.kind != Kind.INTERVAL:
        return EPOCH
    step = interval_ms(timing)
    return from_ms(to_ms(_anchor(timing, anchor)) % step)
