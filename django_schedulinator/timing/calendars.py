"""The timeline on a calendar of excluded days (holidays): the plain timeline's moments on
an excluded day are **skipped** (recorded once a span, at the first occurrence in it, with
the reason "calendar"), or **moved** to the same local time on the next business day (not
excluded, not a weekend day of the calendar). A moved occurrence that lands on one that is
there anyway fires once.

The days are ``days.DayCalendar``'s; the moments those of ``plain``.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta

from django_schedulinator.timing.cron import cron_expressions, cron_walls
from django_schedulinator.timing.days import DayCalendar, ExcludedSpan
from django_schedulinator.timing.instants import (
    ONE_DAY,
    ONE_MS,
    ONE_SECOND,
    get_zone,
    local_midnight,
    truncate_ms,
)
from django_schedulinator.timing.moments import (
    CAL_MOVED,
    CAL_SKIPPED,
    Moment,
    earlier,
    later,
    touched,
)
from django_schedulinator.timing.plain import (
    TimingSpec,
    grid_key,
    plain_following,
    plain_preceding,
)
from django_schedulinator.timing.vocabulary import DayRule, DstFold, DstGap, Kind
from django_schedulinator.timing.walks import (
    MAX_WALL_STEPS,
    OFFSET_SPAN,
    cron_next,
    cron_prev,
    moments_of_wall,
)

# How far an occurrence is moved at most: past a month of days off, it is skipped instead.
MAX_MOVE_DAYS = 31
# A moved occurrence is later than its own by at most this (days, and a DST change).
MOVE_REACH = timedelta(days=MAX_MOVE_DAYS + 1)


def calendar_following(
    timing: TimingSpec, after: datetime, anchor: datetime, include_skipped: bool
) -> Moment | None:
    """``spec.following`` with a calendar. Skipping: the plain timeline's moments in an excluded
    span are passed over, and with ``include_skipped`` the span's first one is a marker
    (only when the walk comes to it from before: one marker a span, at one instant, so the
    ledger records the day once). Moving: ``_moved_following``."""
    calendar = timing.calendar
    assert calendar is not None
    if calendar.move:
        return _moved_following(timing, after, anchor, include_skipped)
    while (moment := plain_following(timing, after, anchor, include_skipped)) is not None:
        span = calendar.span_at(moment.at)
        if span is None:
            return moment
        if include_skipped:  # a marker at the span's first moment
            first = moment
            if after >= span.start:
                first = plain_following(timing, span.start - ONE_MS, anchor, True) or moment
            if first.at == moment.at:
                return excluded_marker(moment, span)
        after = span.end - ONE_MS  # the rest of the span is skipped with it
    return None


def calendar_preceding(
    timing: TimingSpec, before: datetime, anchor: datetime, include_skipped: bool
) -> Moment | None:
    """The mirror image of ``calendar_following``: going back into an excluded span, its
    marker is its first moment."""
    calendar = timing.calendar
    assert calendar is not None
    if calendar.move:
        return _moved_preceding(timing, before, anchor, include_skipped)
    while (moment := plain_preceding(timing, before, anchor, include_skipped)) is not None:
        span = calendar.span_at(moment.at)
        if span is None:
            return moment
        if include_skipped:
            first = plain_following(timing, span.start - ONE_MS, anchor, True) or moment
            return excluded_marker(first, span)
        before = span.start
    return None


def _moved_following(
    timing: TimingSpec, after: datetime, anchor: datetime, include_skipped: bool
) -> Moment | None:
    """The first of: the plain timeline's first moment after ``after`` on no excluded day,
    and the moved moments after it (each lands later than its own, within MOVE_REACH)."""
    calendar = timing.calendar
    assert calendar is not None
    best = None
    cursor = after
    while (moment := plain_following(timing, cursor, anchor, include_skipped)) is not None:
        run_end = calendar.run_end_at(moment.at)
        if run_end is None:
            best = moment
            break
        cursor = run_end - ONE_MS  # past the whole run of excluded days at once
    grid = grid_key(timing, anchor)
    for span in calendar.spans_after(after - MOVE_REACH):
        if best is not None and span.start >= best.at:
            break  # what moves from here lands after it
        moved = _first_moved(timing, span, grid, after, include_skipped, forward=True)
        if moved is not None and (best is None or earlier(moved, best)):
            best = moved
    return best


def _first_moved(
    timing: TimingSpec,
    span: ExcludedSpan,
    grid: datetime,
    bound: datetime,
    include_skipped: bool,
    *,
    forward: bool,
) -> Moment | None:
    """Of what ``span``'s moments become (moved, or the span's marker), the first after
    ``bound`` going forward, or the first before it going backward. When every moment of
    the span moves by the same number of days (``moves_by_whole_days``), only the moments
    around ``bound`` are looked at; otherwise the span's whole list (``_moved_from``)."""
    floor = decided_through(timing, span)
    if moves_by_whole_days(timing):
        days = business_day_after(timing.calendar, span.start, timing.timezone)
        if days is not None and _every_day(timing) and timing.end_at is None:
            # A cron that matches the same wall times every day lands each moved moment on
            # one of the business day's own: that moment is the occurrence (fired once).
            return None
        if days is None:  # nothing moves: the span is its marker alone
            if not include_skipped:
                return None
            marker = plain_following(timing, span.start - ONE_MS, grid, True)
            if marker is None or marker.at >= span.end or (floor and marker.at <= floor):
                return None
            beyond = marker.at > bound if forward else marker.at < bound
            return excluded_marker(marker, span) if beyond else None
        if timing.kind == Kind.CRON and timing.end_at is None:
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


def decided_through(timing: TimingSpec, span: ExcludedSpan) -> datetime | None:
    """The last moment of ``span`` whose move was decided before a change of the days (it
    ran, or landed before the mark): those up to it move nowhere. None: none was."""
    through = [last for first, last in timing.decided if span.start <= first < span.end]
    return max(through) if through else None


def _moved_by_cron(
    timing: TimingSpec,
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
    start, end = local_midnight(target, zone_name), local_midnight(target + ONE_DAY, zone_name)
    lowest = start - ONE_MS  # the landings of decided moments are passed over
    floor_wall = None
    if floor is not None:
        floor_wall = floor.astimezone(zone).replace(tzinfo=None) + timedelta(days=days)
        lowest = max(m.at for m in moments_of_wall(floor_wall, zone, DstGap.SHIFT, DstFold.BOTH))
    best: Moment | None = None
    for expr in cron_expressions(timing.cron):
        if not _matches_day(expr, timing.day_rule, day):
            continue
        every_day = _every_day_expr(expr)
        if forward:
            found = cron_next(every_day, zone_name, timing.dst_gap, timing.dst_fold,
                               DayRule.EITHER, max(bound, lowest))  # fmt: skip
            if found.at >= end:
                continue
        else:
            found = cron_prev(every_day, zone_name, timing.dst_gap, timing.dst_fold,
                               DayRule.EITHER, min(bound, end))  # fmt: skip
            if found.at < start or found.at <= lowest:
                continue
        moved = Moment(found.at, found.dst, found.wall, CAL_MOVED, span.label)
        if best is None or (earlier(moved, best) if forward else later(moved, best)):
            best = moved
    return best


@functools.lru_cache(maxsize=8192)
def _matches_day(expr: str, day_rule: str, day: date) -> bool:
    """Whether a cron expression matches a wall time on ``day`` (under the day rule)."""
    try:
        first = next(cron_walls(expr, datetime.combine(day, time(0)) - ONE_SECOND, day_rule))
    except StopIteration:
        return False
    return first.date() == day


@functools.lru_cache(maxsize=1024)
def _every_day_expr(expr: str) -> str:
    """The expression with its day, month and weekday fields made ``*``: its times of day
    on every day."""
    fields = expr.split(" ")
    return " ".join([*fields[:-3], "*", "*", "*"])


def moves_by_whole_days(timing: TimingSpec) -> bool:
    """Whether every moment of an excluded day moves by the same number of days: the
    schedule's zone is the only one its calendars read days in (a span is then a whole
    local day of its own, and a day is a business day or not as a whole), and its DST
    policy skips no local time (a skipped time stays a marker on the excluded day)."""
    calendar = timing.calendar
    assert calendar is not None
    return calendar.zones == {timing.timezone} and not (
        timing.kind == Kind.CRON and timing.dst_gap == DstGap.SKIP
    )


def _every_day(timing: TimingSpec) -> bool:
    """Whether the timing is a cron whose day, month and weekday fields are all ``*``: it
    matches the same wall times on every day."""
    if timing.kind != Kind.CRON:
        return False
    return all(expr.split(" ")[-3:] == ["*", "*", "*"] for expr in cron_expressions(timing.cron))


@functools.lru_cache(maxsize=4096)
def business_day_after(calendar: DayCalendar, start: datetime, zone_name: str) -> int | None:
    """How many days after the local day that starts at ``start`` the next business day
    comes (within MAX_MOVE_DAYS), or None."""
    day = start.astimezone(get_zone(zone_name)).date()
    found = calendar.next_business(
        local_midnight(day + ONE_DAY, zone_name),
        local_midnight(day + timedelta(days=MAX_MOVE_DAYS + 1), zone_name),
    )
    if found is None:
        return None
    return (found.astimezone(get_zone(zone_name)).date() - day).days


def _shifted(
    timing: TimingSpec,
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
    (``moves_by_whole_days``): walk its moments from the one whose landing is near
    ``bound``. Whether it could tell, and the moment: it cannot when one cannot move (it
    would land past the schedule's end), as the span's marker is at the first of those,
    which takes the whole list (``_moved_from``) to place."""
    zone = get_zone(timing.timezone)
    shift = timedelta(days=days)
    lowest = span.start - ONE_MS if floor is None else max(floor, span.start - ONE_MS)
    if forward:
        start = max(lowest, bound - shift - OFFSET_SPAN)
        moment = plain_following(timing, start, grid, True)
    else:
        start = min(span.end, bound - shift + OFFSET_SPAN + ONE_MS)
        moment = plain_preceding(timing, start, grid, True)
    while moment is not None and lowest < moment.at < span.end:
        wall = moment.wall or moment.at.astimezone(zone).replace(tzinfo=None)
        landed = moments_of_wall(wall + shift, zone, timing.dst_gap, timing.dst_fold)
        if timing.end_at is not None and landed[0].at > timing.end_at:
            return False, None
        for m in landed if forward else reversed(landed):
            beyond = m.at > bound if forward else m.at < bound
            if beyond and (include_skipped or not m.skipped):
                return True, Moment(truncate_ms(m.at), m.dst, m.wall, CAL_MOVED, span.label)
        if forward:
            moment = plain_following(timing, moment.at, grid, True)
        else:
            moment = plain_preceding(timing, moment.at, grid, True)
    return True, None


def _moved_preceding(
    timing: TimingSpec, before: datetime, anchor: datetime, include_skipped: bool
) -> Moment | None:
    """The mirror image of ``_moved_following``."""
    calendar = timing.calendar
    assert calendar is not None
    best = None
    cursor = before
    while (moment := plain_preceding(timing, cursor, anchor, include_skipped)) is not None:
        span = calendar.span_at(moment.at)
        if span is None:
            best = moment
            break
        cursor = span.start
    grid = grid_key(timing, anchor)
    for span in calendar.spans_before(before):
        if best is not None and span.end + MOVE_REACH < best.at:
            break  # what moves from here lands before it
        moved = _first_moved(timing, span, grid, before, include_skipped, forward=False)
        if moved is not None and (best is None or later(moved, best)):
            best = moved
    return best


@functools.lru_cache(maxsize=256)
def _moved_from(
    timing: TimingSpec, span: ExcludedSpan, anchor: datetime
) -> tuple[tuple[Moment, ...], tuple[datetime, ...], tuple[datetime, ...]]:
    """Where the plain moments in ``span`` go, by instant: each moved one where it lands,
    and one marker for those that cannot move, at the first of them (a day is recorded
    once). A span with no business day within reach is that marker alone, found without
    walking its moments (a closure of months costs a step a day, not a step a moment)."""
    first = plain_following(timing, span.start - ONE_MS, anchor, True)
    if first is None or first.at >= span.end:
        return (), (), ()
    calendar = timing.calendar
    assert calendar is not None
    # A moved moment lands at its local time a whole number of days later: none can land
    # before a day after the span's start (less a DST change), nor after MOVE_REACH.
    reach = span.end + MOVE_REACH
    if calendar.next_business(span.start + ONE_DAY - OFFSET_SPAN, reach) is None:
        return (excluded_marker(first, span),), (first.at,), (first.at,)
    found: list[tuple[Moment, datetime]] = []  # where each goes, and where from
    marker: Moment | None = None
    moment: Moment | None = first
    steps = 0
    while moment is not None and moment.at < span.end and steps <= MAX_WALL_STEPS:
        for landed in moved_moments(timing, moment, span):
            if landed.calendar == CAL_SKIPPED:  # cannot move
                if marker is not None:
                    continue
                marker = landed
            found.append((landed, moment.at))
        steps += 1
        moment = plain_following(timing, moment.at, anchor, True)
    found.sort(key=lambda pair: (pair[0].at, touched(pair[0])))
    return (
        tuple(m for m, _origin in found),
        tuple(m.at for m, _origin in found),
        tuple(origin for _m, origin in found),
    )


def moved_moments(timing: TimingSpec, moment: Moment, span: ExcludedSpan) -> tuple[Moment, ...]:
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
        return (excluded_marker(moment, span),)
    first_day = max(1, (business - moment.at - OFFSET_SPAN) // ONE_DAY)
    for days in range(first_day, MAX_MOVE_DAYS + 1):
        try:
            landed = moments_of_wall(wall + timedelta(days=days), zone, timing.dst_gap,
                                      timing.dst_fold)  # fmt: skip
        except OverflowError:
            break
        if all(m.skipped or calendar.is_business(m.at) for m in landed):
            if timing.end_at is not None and landed[0].at > timing.end_at:
                break
            return tuple(
                Moment(truncate_ms(m.at), m.dst, m.wall, CAL_MOVED, span.label) for m in landed
            )
    return (excluded_marker(moment, span),)


def excluded_marker(moment: Moment, span: ExcludedSpan) -> Moment:
    return Moment(moment.at, moment.dst, moment.wall, CAL_SKIPPED, span.label)


def calendar_note(moment: Moment) -> str:
    """A sentence on how an excluded day touched ``moment``, or ""."""
    if moment.calendar == CAL_SKIPPED:
        return f"Excluded: {moment.excluded}. Nothing fires that day."
    if moment.calendar == CAL_MOVED:
        return f"Moved to the next business day from {moment.excluded}."
    return ""
