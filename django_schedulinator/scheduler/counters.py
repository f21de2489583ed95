"""What a scheduler's passes, lanes, recorder and chores did, counted (``Counters``): the
summary line logs them, the metrics read them, the tests assert on them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields

_ADDING = threading.Lock()


@dataclass(slots=True)
class Counters:
    """What the passes did; the worker logs them and tests read them."""

    claimed: int = 0
    fired: int = 0
    skipped: int = 0  # occurrences recorded as skipped (catch-up, overlap, DST)
    buffered: int = 0  # occurrences waiting for their schedule's previous run (overlap)
    queued: int = 0  # runs queued in SQL (run now, backfill, buffered) and dispatched
    repaired: int = 0  # stale entries re-indexed at the row's true time
    dropped: int = 0  # entries of deleted, disabled or finished rows
    lost_races: int = 0  # another process (or an edit) changed the row first
    busy: int = 0  # due rows another transaction held locked: retried shortly
    duplicates: int = 0  # occurrence already in the ledger
    invalid: int = 0  # rows whose timing cannot be evaluated
    leases_expired: int = 0  # in-flight entries returned to the due set
    redispatched: int = 0  # pending runs taken over after their lease expired
    retried: int = 0  # failed hand-offs handed off again once their back-off ended
    reconciled: int = 0  # entries healed by reconcile passes (lost sync writes)
    auto_paused: int = 0  # schedules paused after too many failures in a row
    # Committed runs not dispatched: their schedule was deleted or paused before dispatch.
    cancelled: int = 0
    # Runs left pending because their dispatcher's lane was stuck: a take-over sends them.
    lane_full: int = 0
    # Runs this process recorded as failed: the task raised (or timed out) where its
    # dispatcher ran it, or its hand-offs were given up on. Those a worker reports (Celery,
    # RQ, Django tasks) are recorded, and logged, where they ran.
    failed: int = 0
    # Occurrences with no successful run within their schedule's grace, raised by this
    # process's missed-run checks (alerts.py): each is counted once, by one scheduler.
    missed: int = 0
    pruned: int = 0  # runs deleted by retention (this process's prunes)

    def add(self, other: Counters) -> None:
        # The loop and the commit stage (pipeline.py) both add to a worker's counters.
        with _ADDING:
            for f in fields(self):
                # Zeros are left alone: the dispatch thread counts some fields itself.
                if value := getattr(other, f.name):
                    setattr(self, f.name, getattr(self, f.name) + value)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
