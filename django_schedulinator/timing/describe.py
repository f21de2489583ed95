"""What people read of a timing: previews of its next moments, notes on how a DST change
or an excluded day touched one, and a sentence that describes it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice

from django_schedulinator.errors import TimingError
from django_schedulinator.timing.calendars import calendar_note
from django_schedulinator.timing.cron import both_days_restricted, cron_expressions, normalize_cron
from django_schedulinator.timing.instants import ONE_MS, get_zone
from django_schedulinator.timing.jitter import with_due_times
from django_schedulinator.timing.moments import DST_FIRST, DST_SHIFT, DST_SKIP, Moment
from django_schedulinator.timing.solar import describe_solar, gap_note
from django_schedulinator.timing.spec import Timing, occurrences
from django_schedulinator.timing.vocabulary import DayRule, Kind

DAY_RULE_TEXT: dict[str, str] = {
    DayRule.EITHER: "on days that match either day field",
    DayRule.BOTH: "on days that match both day fields",
}


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
    timed = with_due_times(timing, schedule_id, moments, None)
    for moment, due in islice(timed, count):
        try:
            local = moment.at.astimezone(zone)
        except OverflowError:  # past the year 9999 in this zone: nothing more to show
            break
        note = " ".join(
            filter(
                None, (calendar_note(moment), dst_note(timing, moment), solar_note(timing, moment))
            )
        )
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


def solar_note(timing: Timing, moment: Moment) -> str:
    """For a solar schedule, a sentence on the days without its event before ``moment``
    (the polar night, the midnight sun), or ""."""
    if timing.kind != Kind.SOLAR or timing.latitude is None or timing.longitude is None:
        return ""
    return gap_note(
        timing.solar_event, timing.latitude, timing.longitude, timing.solar_offset, moment.at
    )


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
    """A sentence a person can read, e.g. "At 06:00, Monday through Friday (Europe/Berlin)",
    "Sunset at 52.52, 13.40, +15 min".

    Cron expressions are described by cron-descriptor; an expression it cannot describe
    is shown as it is.
    """
    if timing.kind == Kind.CRON:
        try:
            exprs = cron_expressions(timing.cron)
        except TimingError:
            exprs = (timing.cron,)
        first, *others = [_describe_cron(expr, timing.day_rule) for expr in exprs]
        text = first + "".join(f"; and {other[:1].lower()}{other[1:]}" for other in others)
        return f"{text} ({timing.timezone}){_calendar_text(timing)}"
    if timing.kind == Kind.INTERVAL and isinstance(timing.interval, timedelta):
        text = f"Every {_interval_text(timing.interval)}"
        anchor = timing.anchor_at or timing.start_at
        if anchor is not None:
            text += f", counted from {anchor.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        return text + _calendar_text(timing)
    if timing.kind == Kind.SOLAR:
        text = describe_solar(
            timing.solar_event, timing.latitude, timing.longitude, timing.solar_offset
        )
        return text + _calendar_text(timing)
    if timing.kind == Kind.ONCE and isinstance(timing.run_at, datetime):
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
def _describe_cron(expr: str, day_rule: str = DayRule.EITHER) -> str:
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
            joined = f", but only {which}" if day_rule == DayRule.BOTH else f", or {which}"
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
    if interval == timedelta(seconds=1):
        return "second"  # "Every second", as "Every minute"
    return f"{interval.total_seconds():g} seconds"
