"""Re-planning a schedule when the excluded days of its calendars change
(``replan_calendar``): what it decided stays decided, what it did not follows the new days.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta

from django_schedulinator.timing.calendars import (
    MOVE_REACH,
    business_day_after,
    decided_through,
    excluded_marker,
    moved_moments,
    moves_by_whole_days,
)
from django_schedulinator.timing.days import ExcludedSpan
from django_schedulinator.timing.instants import ONE_MS, get_zone
from django_schedulinator.timing.moments import CAL_MOVED, Moment
from django_schedulinator.timing.plain import plain_following, plain_preceding
from django_schedulinator.timing.spec import Timing, following
from django_schedulinator.timing.vocabulary import DstFold, DstGap
from django_schedulinator.timing.walks import MAX_WALL_STEPS, moments_of_wall


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
        inside = plain_following(new, mark, anchor, True)
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
    first = plain_following(base, span.start - ONE_MS, anchor, True)
    if first is None or first.at > last:
        return []
    calendar = old.calendar
    assert calendar is not None
    old_span = calendar.span_at(first.at)
    if (
        moves_by_whole_days(old)
        and old.end_at is None
        and (old_span is None or old_span.start == span.start)
    ):
        cut = last
        days = business_day_after(calendar, span.start, old.timezone) if old_span else None
        if days is not None:  # moved: decided where it landed at or before the mark
            zone = get_zone(old.timezone)
            wall = mark.astimezone(zone).replace(tzinfo=None) - timedelta(days=days)
            cut = min(
                last, max(m.at for m in moments_of_wall(wall, zone, DstGap.SHIFT, DstFold.BOTH))
            )
        floor = decided_through(old, span)
        through = plain_preceding(base, cut + ONE_MS, anchor, True)
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
        moment = plain_following(base, moment.at, anchor, True)
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
    if moves_by_whole_days(old) and old.end_at is None and len(decided) <= 1:
        cut = decided[0][1] if decided else span.start - ONE_MS  # the pending come after it
        assert new.calendar is not None
        top = last
        if new.calendar.span_at(span.start) is not None:  # still excluded: moved again
            days = business_day_after(new.calendar, span.start, new.timezone)
            if days is None:
                pending = plain_following(base, cut, anchor, True)
                if pending is None or pending.at > last:
                    return [], None, []
                return [], None, [excluded_marker(pending, span)]
            zone = get_zone(new.timezone)
            wall = mark.astimezone(zone).replace(tzinfo=None) - timedelta(days=days)
            top = min(
                last, min(m.at for m in moments_of_wall(wall, zone, DstGap.SHIFT, DstFold.BOTH))
            )
        moment = plain_preceding(base, top + ONE_MS, anchor, True)
        while moment is not None and moment.at > cut:
            if len(late) >= LATE_RECORDED:
                return late, moment.at, []
            if not moment.skipped:
                late.extend(m.at for m in _landings(new, moment) if m.at <= mark)
            moment = plain_preceding(base, moment.at, anchor, True)
        return late, None, []
    # Days read in another zone than the schedule's: moment by moment, going back.
    excluded: list[Moment] = []
    moment = plain_preceding(base, last + ONE_MS, anchor, True)
    steps = 0
    while moment is not None and moment.at >= span.start and steps <= MAX_WALL_STEPS:
        steps += 1
        if not any(a <= moment.at <= b for a, b in decided):
            now_landed = _landings(new, moment)
            new_span = new.calendar.span_at(moment.at) if new.calendar else None
            if not now_landed and new_span is not None:
                excluded[:] = [excluded_marker(moment, new_span)]  # the day's first, going back
            elif now_landed and all(m.at <= mark for m in now_landed):
                if len(late) >= LATE_RECORDED:
                    return late, moment.at, excluded
                late.extend(m.at for m in now_landed)
        moment = plain_preceding(base, moment.at, anchor, True)
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
    return tuple(
        m for m in moved_moments(spec, origin, span) if m.calendar == CAL_MOVED and not m.skipped
    )
