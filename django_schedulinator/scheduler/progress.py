"""The recorder a dispatcher is handed with its batch (``dispatch.Progress``): it records
runs that started as running and outcomes as the dispatcher reports them, through the
scheduler's held runs (held.py), and tells the dispatcher when a stop's grace is over. It
holds the batch, the held runs and a stop flag: nothing else of the scheduler."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from django.db import connections
from django.utils import timezone

from django_schedulinator.dispatch import BaseDispatcher, Occurrence, Outcome, Progress
from django_schedulinator.models.spans import Span
from django_schedulinator.outcomes import Reported
from django_schedulinator.scheduler.transient import TRANSIENT_ERRORS

if TYPE_CHECKING:
    from django_schedulinator.scheduler.held import HeldRuns

logger = logging.getLogger("django_schedulinator.worker")


class BatchProgress(Progress):
    """The scheduler's side of one dispatched batch. Its leases are the LeaseKeeper's
    (leases.py), which reads and sets ``renewed``."""

    def __init__(
        self,
        held: HeldRuns,
        dispatcher: BaseDispatcher,
        occurrences: list[Occurrence],
        token: str,
        *,
        renewed: float,
        release: set[int],
        lease_seconds: float,
        stopped: Callable[[], bool],
    ) -> None:
        self.held = held
        self.dispatcher = dispatcher
        self.token = token
        self.release = release  # schedules whose buffered run waits for these runs
        self.lease_seconds = lease_seconds  # how long recording an outcome is retried
        self._stopped = stopped  # whether the stop's grace is over
        self.run_ids = [o.run_id for o in occurrences]
        self.schedule_of = {o.run_id: o.schedule_id for o in occurrences}
        # Their nominal times: every statement on the batch's runs is bounded by them.
        self.span = Span.of(o.scheduled_for for o in occurrences)
        self.renewed = renewed  # time.monotonic() of the last lease renewal
        self.dispatched_at = timezone.now()
        self.recorded: set[int] = set()
        self.marked_running: set[int] = set()

    def unrecorded(self) -> list[int]:
        """The runs of the batch whose outcome is not recorded yet (whose leases count)."""
        return [run_id for run_id in self.run_ids if run_id not in self.recorded]

    def stopped(self) -> bool:
        return self._stopped()

    def running(self, run_ids: Collection[int]) -> None:
        new = set(run_ids) - self.marked_running - self.recorded
        if not new:
            return
        try:
            self.held.mark_running(new, self.token, span=self.span)
            self.marked_running |= new
        except TRANSIENT_ERRORS as exc:
            connections.close_all()
            logger.warning("Could not record %d run(s) as running (%s).", len(new), exc)

    def finished(self, outcomes: Sequence[Outcome]) -> None:
        try:
            self.record(outcomes)
        except TRANSIENT_ERRORS as exc:
            # They are recorded with the rest of the batch when dispatch returns.
            connections.close_all()
            logger.warning("Could not record %d outcome(s) yet (%s).", len(outcomes), exc)

    def record(self, outcomes: Sequence[Outcome]) -> None:
        """Record ``outcomes`` now, in this thread: those a dispatcher reports as they end
        (``finished``); the lanes hand a dispatched batch to the recorder instead
        (recording.py)."""
        batch = self.to_record(outcomes)
        if batch is None:
            return
        ended = self.held.record([batch], self.dispatcher)
        if released := self.recorded_now(batch, ended):
            self.held.release_buffered(released)

    def to_record(self, outcomes: Sequence[Outcome]) -> Reported | None:
        """Those of ``outcomes`` still to record (of this batch, not recorded yet)."""
        new = [
            o for o in outcomes if o.run_id not in self.recorded and o.run_id in self.schedule_of
        ]
        if not new:
            return None
        return Reported(
            new, {o.run_id: self.schedule_of[o.run_id] for o in new}, self.dispatched_at, self.span
        )

    def recorded_now(self, batch: Reported, ended: set[int]) -> set[int]:
        """``batch`` was recorded (``ended``: schedules whose runs ended): its leases no
        longer count. Returns the schedules whose buffered run may go now."""
        self.recorded.update(o.run_id for o in batch.outcomes)
        # Their previous run is recorded: a buffered run of theirs may go now.
        return ended & self.release & set(batch.schedule_of.values())


def record_while_leased(
    held: HeldRuns, batches: Sequence[Reported], dispatcher: BaseDispatcher, seconds: float
) -> set[int]:
    """Record outcomes, retrying through a database blip for ``seconds`` (a lease): every
    outcome recorded before the lease ends is a second delivery avoided. Returns the
    schedules whose runs ended."""
    deadline = time.monotonic() + seconds
    attempt = 0
    while True:
        try:
            return held.record(batches, dispatcher)
        except TRANSIENT_ERRORS as exc:
            connections.close_all()
            attempt += 1
            if time.monotonic() >= deadline:
                raise
            if attempt == 1:
                logger.warning(
                    "Recording %d outcome(s) failed (%s); retrying while their lease lasts.",
                    sum(len(b.outcomes) for b in batches),
                    exc,
                )
            time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0))
