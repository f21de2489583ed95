"""The timing of a schedule (``Timing``: the fields that decide when it fires, with its
calendars' excluded days), its validation, and its timeline: the moments after an instant
(``following``, ``occurrences``), before one (``preceding``, ``occurrences_before``), and
the first of a new schedule (``first_run_at``).

The timeline is the plain one (``plain``), with the calendar's days taken off it
(``calendars``). A solar schedule is validated here too: its event, its place (latitude
-90 to 90, longitude -180 to 180) and its offset (``solar_errors``), and it must have an
event within a year (``solar.never_text`` says why it has none).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Protocol

from django_schedulinator.errors import TimingError
from django_schedulinator.timing.calendars import (
    calendar_following,
    calendar_preceding,
    excluded_marker,
)
from django_schedulinator.timing.cron import check_matches_both, cron_expressions
from django_schedulinator.timing.days import DayCalendar, decided_moves
from django_schedulinator.timing.instants import ONE_MS, ceil_ms, get_zone, truncate_ms
from django_schedulinator.timing.moments import Moment
from django_schedulinator.timing.plain import (
    MIN_INTERVAL,
    interval_ms,
    plain_following,
    plain_preceding,
    window_start,
)
from django_schedulinator.timing.solar import MAX_SOLAR_OFFSET, is_event, never_text
from django_schedulinator.timing.vocabulary import DayRule, DstFold, DstGap, Kind, SolarEvent

MAX_JITTER = timedelta(days=1)


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
    solar_event: str
    latitude: float | None
    longitude: float | None
    solar_offset: timedelta | None


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
    dst_gap: str = DstGap.SHIFT
    dst_fold: str = DstFold.FIRST
    jitter: timedelta | None = None  # the largest delay added to an occurrence
    day_rule: str = DayRule.EITHER  # cron: which days match when both day fields are restricted
    calendar: DayCalendar | None = None  # the excluded days of the schedule's calendars
    # Moves already decided: (first, last) moments of the plain timeline, on days now
    # excluded, that ran or landed before a change of the excluded days (``replan_calendar``):
    # none of them moves anywhere any more.
    decided: tuple[tuple[datetime, datetime], ...] = ()
    # Solar schedules: the event of the sun, the place, and the offset added to each event.
    solar_event: str = ""
    latitude: float | None = None
    longitude: float | None = None
    solar_offset: timedelta | None = None

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
            solar_event=fields.solar_event,
            latitude=fields.latitude,
            longitude=fields.longitude,
            solar_offset=fields.solar_offset,
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
        if self.dst_gap not in (DstGap.SHIFT, DstGap.SKIP):
            errors["dst_gap"] = f"Unknown policy {self.dst_gap!r}; use shift or skip."
        if self.dst_fold not in (DstFold.FIRST, DstFold.SECOND, DstFold.BOTH):
            errors["dst_fold"] = f"Unknown policy {self.dst_fold!r}; use first, second or both."
        if self.day_rule not in (DayRule.EITHER, DayRule.BOTH):
            errors["day_rule"] = f"Unknown day rule {self.day_rule!r}; use either or both."
        if self.jitter is not None:
            if not isinstance(self.jitter, timedelta):
                errors["jitter"] = "Enter the jitter as a duration, for example 00:05:00."
            elif not timedelta(0) <= self.jitter <= MAX_JITTER:
                errors["jitter"] = f"The jitter must be between 0 and {MAX_JITTER}."
        if self.kind == Kind.CRON:
            try:
                for expr in cron_expressions(self.cron):
                    if self.day_rule == DayRule.BOTH:
                        check_matches_both(expr)
            except TimingError as exc:
                errors["cron"] = str(exc)
        elif self.kind == Kind.INTERVAL:
            if self.interval is None:
                errors["interval"] = "An interval schedule needs an interval."
            elif not isinstance(self.interval, timedelta):
                errors["interval"] = "Enter the interval as a duration, for example 01:00:00."
            elif self.interval < MIN_INTERVAL:
                errors["interval"] = f"The interval must be at least {MIN_INTERVAL}."
        elif self.kind == Kind.ONCE:
            if self.run_at is None:
                errors["run_at"] = "A one-off schedule needs a time to run at."
        elif self.kind == Kind.SOLAR:
            errors.update(solar_errors(self))
        else:
            errors["kind"] = f"Unknown kind {self.kind!r}; use cron, interval, once or solar."
        if self.anchor_at is not None and self.kind != Kind.INTERVAL and "anchor_at" not in errors:
            errors["anchor_at"] = "An anchor applies to interval schedules only."
        window_ok = not {"start_at", "end_at"} & errors.keys()
        if window_ok and self.start_at and self.end_at and self.end_at <= self.start_at:
            errors["end_at"] = "The end must be later than the start."
        if not errors:
            now = datetime.now(UTC)
            try:
                # Without an end, a cron or interval always has a next run, unless it would
                # fall past datetime.max (the year 9999), where nothing can be stored.
                if (
                    first_run_at(self, now) is None
                    and self.end_at is None
                    and self.kind != Kind.ONCE
                ):
                    raise OverflowError
            except (OverflowError, TimingError):
                # Past datetime.max (the year 9999): nothing could ever be stored or indexed.
                if self.kind == Kind.INTERVAL:
                    errors["interval"] = (
                        "The interval is too long: its first run would fall after the year 9999."
                    )
                elif self.start_at is not None and self.start_at > now:
                    errors["start_at"] = "The start is too late: no occurrence can follow it."
                elif self.kind == Kind.SOLAR:
                    assert self.latitude is not None
                    assert self.longitude is not None
                    errors["solar_event"] = never_text(
                        self.solar_event, self.latitude, self.longitude, now
                    )
                else:
                    errors["cron"] = "The cron expression has no occurrence that can be computed."
        return errors


def solar_errors(timing: Timing) -> dict[str, str]:
    """What is wrong with a solar schedule's event, place and offset, by field."""
    errors: dict[str, str] = {}
    if not is_event(timing.solar_event):
        names = ", ".join(SolarEvent)
        errors["solar_event"] = (
            f"Unknown solar event {timing.solar_event!r}; use one of {names}."
            if timing.solar_event
            else f"A solar schedule needs an event: one of {names}."
        )
    for name, bound in (("latitude", 90), ("longitude", 180)):
        value = getattr(timing, name)
        if value is None:
            errors[name] = f"A solar schedule needs a {name}."
        elif isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            errors[name] = f"Enter the {name} as a number of degrees."
        elif not -bound <= value <= bound:  # NaN fails this too
            errors[name] = f"The {name} must be between -{bound} and {bound} degrees."
    offset = timing.solar_offset
    if offset is not None:
        if not isinstance(offset, timedelta):
            errors["solar_offset"] = "Enter the offset as a duration, for example -00:30:00."
        elif abs(offset) > MAX_SOLAR_OFFSET:
            errors["solar_offset"] = (
                f"The offset must be between -{MAX_SOLAR_OFFSET} and {MAX_SOLAR_OFFSET}."
            )
    return errors


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
    a stretch) or moved (``calendar_following``).
    """
    if timing.calendar is not None and timing.calendar.spans:
        return calendar_following(timing, after, anchor, include_skipped)
    return plain_following(timing, after, anchor, include_skipped)


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
        return calendar_preceding(timing, before, anchor, include_skipped)
    return plain_preceding(timing, before, anchor, include_skipped)


def first_run_at(timing: Timing, now: datetime) -> datetime | None:
    """The first moment of a new (or re-enabled, or re-timed) schedule, seen at ``now``.

    A one-off's is its ``run_at``. An interval without an anchor starts one interval after
    ``now`` (or at a future ``start_at``); with one, at the first grid point from then on. A
    cron starts at its first match after ``now`` (or from a future ``start_at`` on), and a
    solar schedule at its first event (plus its offset) after then. The
    moment may be a skipped local time: the scheduler records the skip when it gets there.
    """
    if timing.kind == Kind.ONCE:
        return truncate_ms(timing.run_at) if timing.run_at else None
    # A start later than now, even within now's millisecond, is where the schedule starts.
    start = window_start(timing) if timing.start_at is not None and timing.start_at > now else None
    if timing.kind == Kind.INTERVAL and timing.anchor_at is None and timing.start_at is None:
        return _within_end(timing, ceil_ms(now) + timedelta(milliseconds=interval_ms(timing)))
    if timing.kind == Kind.INTERVAL and start is None:
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
    if has_calendar(timing):
        assert timing.calendar is not None
        span = timing.calendar.span_at(at)
        if span is not None:
            return excluded_marker(Moment(at), span)
    if (timing.kind == Kind.CRON and timing.dst_gap == DstGap.SKIP) or has_calendar(timing):
        found = following(timing, at - ONE_MS, at, include_skipped=True)
        if found is not None and found.at == at:
            return found
    return Moment(at)


def has_calendar(timing: Timing) -> bool:
    return timing.calendar is not None and bool(timing.calendar.spans)


def is_moment(timing: Timing, at: datetime, anchor: datetime) -> bool:
    """Whether ``at`` is one of the schedule's moments (an occurrence, or a skipped local
    time, which the ledger records at its instant): its key is that moment's own. ``anchor``
    is the interval grid's anchor when the timing names none."""
    found = following(timing, at - ONE_MS, anchor, include_skipped=True)
    return found is not None and found.at == at


def _within_end(timing: Timing, candidate: datetime) -> datetime | None:
    """The candidate, or None once it passes the end: the schedule is finished."""
    if timing.end_at is not None and candidate > timing.end_at:
        return None
    return candidate
