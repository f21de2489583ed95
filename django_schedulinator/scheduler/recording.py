"""The recorder of a running scheduler: one thread that writes what the dispatchers returned,
off the hand-off path. A lane hands a dispatched batch's outcomes here and goes on to its
next batch at once; the recorder writes every batch that waited for it, of one dispatcher,
in one transaction (``outcomes.record``): one commit, one set of row locks and one read of
the streaks for many batches, where a lane used to pay them per batch before its next
hand-off.

Until a batch is recorded its runs stay leased to this scheduler: the lease keeper renews
them (``LeaseKeeper.hold``) and lets them go once they are written, or once writing them
failed for good (then their leases run out and a take-over dispatches them again, with the
same keys, as when a scheduler dies). The queue is bounded: a recorder that falls behind
(a slow database) holds the lanes back, and through them the claim.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django.db import connections

from django_schedulinator.operations.stage import Stage, oldest
from django_schedulinator.scheduler.progress import record_while_leased
from django_schedulinator.scheduler.transient import TRANSIENT_ERRORS

if TYPE_CHECKING:
    from django_schedulinator.dispatch import BaseDispatcher, Outcome
    from django_schedulinator.outcomes import Reported
    from django_schedulinator.scheduler.held import HeldRuns
    from django_schedulinator.scheduler.leases import LeaseKeeper
    from django_schedulinator.scheduler.progress import BatchProgress

logger = logging.getLogger("django_schedulinator.worker")

# Batches waiting to be recorded before a lane that hands over another waits for room.
RECORD_QUEUE_BATCHES = 64
# The most batches one transaction records (a few thousand outcomes at the batch size).
BATCHES_PER_WRITE = 16

Handed = tuple["BatchProgress", list["Outcome"]]


class OutcomeRecorder:
    def __init__(self, held: HeldRuns, leases: LeaseKeeper, lease_seconds: float) -> None:
        self.held = held
        self.leases = leases
        self.lease_seconds = lease_seconds
        self._stage: Stage[Handed] = Stage(
            "schedulinator-recorder",
            self._record_group,
            capacity=RECORD_QUEUE_BATCHES,
            take=BATCHES_PER_WRITE,
        )

    def start(self) -> None:
        self._stage.start()

    def put(self, progress: BatchProgress, outcomes: list[Outcome]) -> None:
        """Record ``outcomes`` of a dispatched batch whose leases ``self.leases`` holds,
        and let them go. Waits while the queue is full; once the recorder stopped, records
        them in this thread."""
        if not self._stage.put((progress, outcomes)):
            # A lane that a stop left dispatching ends here, after the recorder.
            self._record([(progress, outcomes)], progress.dispatcher)

    def drain(self) -> None:
        """Wait until what waits is written."""
        self._stage.drain()

    def depth(self) -> int:
        """Batches waiting to be recorded."""
        return len(self._stage.waiting())

    def backlog(self) -> tuple[int, int, float | None]:
        """What the lanes handed over and is not written yet (waiting, or being written):
        batches, their outcomes, and how long ago the oldest was handed over (seconds, None
        when nothing is left). A snapshot, read from any thread (heartbeats, metrics)."""
        handed = self._stage.handling() + self._stage.waiting()
        outcomes = sum(len(item[1]) for item, _put in handed)
        return len(handed), outcomes, oldest(handed)

    def stop(self, timeout: float) -> bool:
        """Record what waits (for ``timeout`` seconds at most), then end. Returns whether
        everything was recorded."""
        if self._stage.stop(time.monotonic() + timeout):
            return True
        logger.warning(
            "Stopped without waiting longer for the outcomes of %d batch(es) waiting to "
            "be recorded, and of the batches being written: their runs stay pending and "
            "are dispatched again, with the same keys, once their lease expires.",
            self.depth(),
        )
        return False

    def _record_group(self, group: list[Handed]) -> None:
        """Up to BATCHES_PER_WRITE batches that waited: one transaction per dispatcher."""
        by_dispatcher: dict[int, list[Handed]] = {}
        for item in group:
            by_dispatcher.setdefault(id(item[0].dispatcher), []).append(item)
        for items in by_dispatcher.values():
            self._record(items, items[0][0].dispatcher)

    def _record(self, items: list[Handed], dispatcher: BaseDispatcher) -> None:
        """One transaction for the batches of one dispatcher, through a database blip
        while their leases last; then their leases go."""
        batches: list[tuple[BatchProgress, Reported]] = []
        for progress, outcomes in items:
            if (batch := progress.to_record(outcomes)) is not None:
                batches.append((progress, batch))
        count = sum(len(b.outcomes) for _p, b in batches)
        try:
            if not batches:
                return
            ended = record_while_leased(
                self.held, [b for _p, b in batches], dispatcher, self.lease_seconds
            )
            released: set[int] = set()
            for progress, batch in batches:
                released |= progress.recorded_now(batch, ended)
            if released:
                self.held.release_buffered(released)
        except TRANSIENT_ERRORS as exc:
            logger.warning(
                "Could not record %d outcome(s) (%s); their runs stay pending and are "
                "dispatched again, with the same keys, once their lease expires.",
                count,
                exc,
            )
            connections.close_all()
        except Exception:
            logger.exception("Recording %d outcome(s) failed.", count)
            connections.close_all()
        finally:
            for progress, _outcomes in items:
                self.leases.let_go(progress)
