"""Cron on the local wall clock: the moments a cron expression gives in a schedule's IANA
zone, across its daylight-saving changes.

Each wall time a cron matches (``cron.cron_walls``) is turned into a UTC instant by the
schedule's DST policy:

- a wall time that does not exist (clocks spring forward) is **shifted** forward by the
  length of the gap (02:30 becomes 03:30 when 02:00 jumps to 03:00), or **skipped**;
- a wall time that occurs twice (clocks fall back) fires at the **first** instant, the
  **second**, or **both**.

The defaults, shift and first, are what PEP 495's ``fold=0`` gives (and what Temporal
calls "compatible"). Two wall times that land on one instant fire once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo

from django_schedulinator.errors import TimingError
from django_schedulinator.timing.cron import cron_walls
from django_schedulinator.timing.instants import ONE_MS, ONE_SECOND, get_zone, truncate_ms
from django_schedulinator.timing.moments import (
    DST_FIRST,
    DST_SECOND,
    DST_SHIFT,
    DST_SKIP,
    Moment,
    earlier,
    later,
)
from django_schedulinator.timing.vocabulary import DstFold, DstGap

# Offsets are sampled this far around an instant to bound the local times that can map
# near it: further apart than any two transitions of a real zone.
OFFSET_SPAN = timedelta(hours=26)
# Wall times looked at for one occurrence before giving up: a day of seconds, which covers
# the longest gap in tzdata (Pacific/Apia skipped 30 December 2011) for a per-second cron.
MAX_WALL_STEPS = 100_000


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


def moments_of_wall(wall: datetime, zone: tzinfo, gap: str, fold: str) -> tuple[Moment, ...]:
    """The instants the local wall time ``wall`` stands for under the DST policy."""
    first = wall.replace(tzinfo=zone)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return (Moment(first.astimezone(UTC), "", wall),)
    a, b = sorted((first.astimezone(UTC), second.astimezone(UTC)))
    if a.astimezone(zone).replace(tzinfo=None) == wall:
        # Both instants show this wall time: the clocks fell back over it.
        if fold == DstFold.FIRST:
            return (Moment(a, DST_FIRST, wall),)
        if fold == DstFold.SECOND:
            return (Moment(b, DST_SECOND, wall),)
        return (Moment(a, DST_FIRST, wall), Moment(b, DST_SECOND, wall))
    # Neither does: the clocks sprang forward over it. ``b`` is the wall time read with the
    # offset from before the change, which is the wall time moved forward by the gap.
    return (Moment(b, DST_SHIFT if gap == DstGap.SHIFT else DST_SKIP, wall),)


def crons_next(
    exprs: tuple[str, ...], zone_name: str, gap: str, fold: str, day_rule: str, after: datetime
) -> Moment:
    """The first moment of any of ``exprs`` strictly after ``after``. An instant several
    of them give is one moment (the ledger has one run per instant): the one a DST policy
    touched least, as within one expression."""
    if len(exprs) == 1:
        return cron_next(exprs[0], zone_name, gap, fold, day_rule, after)
    return _best(lambda e: cron_next(e, zone_name, gap, fold, day_rule, after), exprs, earlier)


def crons_prev(
    exprs: tuple[str, ...], zone_name: str, gap: str, fold: str, day_rule: str, before: datetime
) -> Moment:
    """The last moment of any of ``exprs`` strictly before ``before`` (the mirror image of
    ``crons_next``)."""
    if len(exprs) == 1:
        return cron_prev(exprs[0], zone_name, gap, fold, day_rule, before)
    return _best(lambda e: cron_prev(e, zone_name, gap, fold, day_rule, before), exprs, later)


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
def cron_next(
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
        walls = cron_walls(expr, start, day_rule)
        try:
            for _step, wall in zip(range(MAX_WALL_STEPS), walls, strict=False):
                for moment in moments_of_wall(wall, zone, gap, fold):
                    if moment.at > after and (best is None or earlier(moment, best)):
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
def cron_prev(
    expr: str, zone_name: str, gap: str, fold: str, day_rule: str, before: datetime
) -> Moment:
    """The last moment strictly before ``before`` (the mirror image of ``cron_next``)."""
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
        walls = cron_walls(expr, start, day_rule, reverse=True)
        try:
            for _step, wall in zip(range(MAX_WALL_STEPS), walls, strict=False):
                for moment in moments_of_wall(wall, zone, gap, fold):
                    if moment.at < before and (best is None or later(moment, best)):
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
