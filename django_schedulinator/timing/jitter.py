"""Jitter: an occurrence's delay, a fraction of the schedule's ``jitter`` derived from its
idempotency key (so every re-dispatch sees the same delay), always less than the gap to the
next occurrence. The delayed instant is the occurrence's *due time*; its *nominal time*
(its identity, its key) does not move.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime, timedelta

from django_schedulinator.timing.instants import LAST_INSTANT, ONE_MS, to_ms
from django_schedulinator.timing.moments import Moment
from django_schedulinator.timing.spec import Timing, moment_at, occurrences


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


def with_due_times(
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
