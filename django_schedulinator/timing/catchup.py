"""Catch-up: what fires when a scheduler comes to a schedule late (``plan_due``). The
latest due occurrence (the default), none that are more than the grace late (``skip``), or
all within a window, capped (``all``). Each occurrence that does not fire is returned as a
``Skip`` with its reason, for the ledger.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain, islice
from typing import NamedTuple

from django_schedulinator.timing.calendars import calendar_note
from django_schedulinator.timing.describe import dst_note
from django_schedulinator.timing.instants import ONE_MS
from django_schedulinator.timing.jitter import stored_due_at, with_due_times
from django_schedulinator.timing.moments import CAL_SKIPPED, Moment
from django_schedulinator.timing.spec import (
    Timing,
    following,
    has_calendar,
    moment_at,
    occurrences,
    occurrences_before,
)
from django_schedulinator.timing.vocabulary import CatchUpMode, DstGap, Kind, SkipReason


@dataclass(frozen=True, slots=True)
class CatchUp:
    """The catch-up policy in force for one schedule (its own, or the settings')."""

    mode: str = CatchUpMode.LATEST
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
    marks = (timing.kind == Kind.CRON and timing.dst_gap == DstGap.SKIP) or has_calendar(timing)
    if marks and moment_at(timing, nominal).skipped:
        return None  # a skip to record
    after = following(timing, nominal, nominal, include_skipped=marks)
    if after is not None and after.at <= now:
        return None  # more than one moment is due: catch-up decides, skips are recorded
    late = now - (due_at or nominal)
    if catch_up.mode == CatchUpMode.SKIP and late > catch_up.grace:
        return None
    if catch_up.mode == CatchUpMode.ALL and late > catch_up.window:
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
    for moment, due_at in with_due_times(timing, schedule_id, moments, first_due):
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
    if catch_up.mode == CatchUpMode.SKIP:
        fire = [(m, d) for m, d in occurred if now - d <= catch_up.grace]
    elif catch_up.mode == CatchUpMode.ALL:
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
        return Skip(moment.at, SkipReason.CALENDAR, calendar_note(moment))
    if moment.skipped:
        return Skip(moment.at, SkipReason.DST, dst_note(timing, moment))
    late_text = _duration(late)
    if timing.kind == Kind.ONCE:
        return Skip(
            moment.at,
            SkipReason.EXPIRED,
            f"The one-off was {late_text} late, more than catch-up '{catch_up.mode}' allows.",
        )
    if catch_up.mode == CatchUpMode.LATEST:
        why = "catch-up 'latest' fired only the most recent due occurrence"
    elif catch_up.mode == CatchUpMode.SKIP:
        why = f"catch-up 'skip' fires nothing later than {_duration(catch_up.grace)}"
    else:
        why = (
            f"catch-up 'all' fires the last {catch_up.max_runs} within {_duration(catch_up.window)}"
        )
    return Skip(moment.at, SkipReason.MISSED, f"Claimed {late_text} late; {why}.")


def _duration(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
