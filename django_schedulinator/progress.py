"""The recorder a dispatcher is handed with its batch (``dispatch.Progress``): it records
runs that started as running and outcomes as the dispatcher reports them, through the
claimer, and tells the dispatcher when a stop's grace is over. It holds the batch, the
claimer and a stop flag: nothing else of the scheduler."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from django.db import connections
from django.utils import timezone

from .dispatch import BaseDispatcher, Occurrence, Outcome, Progress
from .transient import TRANSIENT_ERRORS

if TYPE_CHECKING:
    from .claiming import Claimer

logger = logging.getLogger("django_schedulinator.worker")


class BatchProgress(Progress):
    """The scheduler's side of one dispatched batch. Its leases are the LeaseKeeper's
    (leases.py), which reads and sets ``renewed``."""

    def __init__(
        self,
        claimer: Claimer,
        dispatcher: BaseDispatcher,
        occurrences: list[Occurrence],
        token: str,
        *,
        renewed: float,
        release: set[int],
        lease_seconds: float,
        stopped: Callable[[], bool],
    ) -> None:
        self.claimer = claimer
        self.dispatcher = dispatcher
        self.token = token
        self.release = release  # schedules whose buffered run waits for these runs
        self.lease_seconds = lease_seconds  # how long recording an outcome is retried
        self._stopped = stopped  # whether the stop's grace is over
        self.run_ids = [o.run_id for o in occurrences]
        self.schedule_of = {o.run_id: o.schedule_id for o in occurrences}
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
            self.claimer.mark_running(new, self.token)
            self.marked_running |= new
        except TRANSIENT_ERRORS as exc:
            connections.close_all()
            logger.warning("Could not record %d run(s) as running (%s).", len(new), exc)

    def finished(self, outcomes: Sequence[Outcome]) -> None:
        try:
            self.record(outcomes, retry=False)
        except TRANSIENT_ERRORS as exc:
            # They are recorded with the rest of the batch when dispatch returns.
            connections.close_all()
            logger.warning("Could not record %d outcome(s) yet (%s).", len(outcomes), exc)

    def record(self, outcomes: Sequence[Outcome], *, retry: bool) -> None:
        new = [
            o for o in outcomes if o.run_id not in self.recorded and o.run_id in self.schedule_of
        ]
        if not new:
            return
        if retry:
            ended = self._record_through_blips(new)
        else:
            ended = self.claimer.record(new, self.schedule_of, self.dispatched_at, self.dispatcher)
        self.recorded.update(o.run_id for o in new)
        ended &= self.release
        if ended:
            # Their previous run is recorded: a buffered run of theirs may go now.
            self.claimer.release_buffered(ended)

    def _record_through_blips(self, outcomes: list[Outcome]) -> set[int]:
        """Record outcomes, retrying through a database blip: every outcome recorded before
        the lease ends is a second delivery avoided. The schedules whose runs ended."""
        deadline = time.monotonic() + self.lease_seconds
        attempt = 0
        while True:
            try:
                return self.claimer.record(
                    outcomes, self.schedule_of, self.dispatched_at, self.dispatcher
                )
            except TRANSIENT_ERRORS as exc:
                connections.close_all()
                attempt += 1
                if time.monotonic() >= deadline:
                    raise
                if attempt == 1:
                    logger.warning(
                        "Recording %d outcome(s) failed (%s); retrying while their lease lasts.",
                        len(outcomes),
                        exc,
                    )
                time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0))
