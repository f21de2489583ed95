"""The leases of runs between their commit and their recorded outcome: a committed batch
waiting for its lane (``Leased``), and the thread that renews the leases of every batch
being dispatched (``LeaseKeeper``)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import connections

from django_schedulinator.dispatch import Occurrence
from django_schedulinator.operations.stage import stage_thread
from django_schedulinator.scheduler.transient import TRANSIENT_ERRORS

if TYPE_CHECKING:
    from django_schedulinator.scheduler.held import HeldRuns
    from django_schedulinator.scheduler.progress import BatchProgress

logger = logging.getLogger("django_schedulinator.worker")


@dataclass(slots=True)
class Leased:
    """Occurrences committed under one claim token, waiting to be dispatched."""

    occurrences: list[Occurrence]
    token: str
    leased_at: float  # time.monotonic() when the lease began (taken just before it began)
    # Schedules (overlap "buffer") whose buffered run is released once these are recorded.
    release: set[int] = field(default_factory=set)
    # Their hand-offs were counted when they were claimed (a fresh claim), not yet (a
    # take-over): a batch that waited instead gives its counts back. Said at every
    # construction: a wrong default would count each hand-off twice, or never.
    counted: bool = field(kw_only=True)


class LeaseKeeper:
    """Renews the leases of every batch being dispatched, every third of a lease, from one
    thread of its own (with its own database connection) that runs while there are any.
    No dispatcher has to remember to: one that blocks (a slow enqueue, a task run inside
    ``enqueue()``, a receiver that answers slowly, one hand-off longer than a lease) keeps
    its runs, and no other scheduler takes them over and sends them a second time."""

    def __init__(self, held: HeldRuns, lease_seconds: float) -> None:
        self.held = held
        self.every = lease_seconds / 3
        self._batches: set[BatchProgress] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def hold(self, batch: BatchProgress) -> None:
        """Keep the batch's leases from now until ``let_go`` (its outcomes recorded)."""
        with self._changed:
            if not self._closed:
                self._batches.add(batch)
                if self._thread is None:
                    self._thread = stage_thread("schedulinator-leases", self._run)

    def let_go(self, batch: BatchProgress) -> None:
        with self._changed:
            self._batches.discard(batch)
            self._changed.notify()

    def close(self) -> None:
        """Renew nothing more: a stop gave up on the batches still being dispatched, whose
        leases then run out, and another scheduler takes their runs over."""
        with self._changed:
            self._closed = True
            self._batches.clear()
            self._changed.notify()

    def _run(self) -> None:
        while due := self._wait_for_due():
            for batch in due:
                self._renew(batch)

    def _wait_for_due(self) -> list[BatchProgress]:
        """The batches whose leases are due for renewal, once some are; [] when no batch
        is left (the thread then ends: the next batch starts another)."""
        with self._changed:
            while self._batches:
                now = time.monotonic()
                due = [b for b in self._batches if now - b.renewed >= self.every]
                if due:
                    return due
                self._changed.wait(min(b.renewed for b in self._batches) + self.every - now)
            self._thread = None
            return []

    def _renew(self, batch: BatchProgress) -> None:
        batch.renewed = time.monotonic()
        run_ids = batch.unrecorded()
        try:
            self.held.renew_leases(run_ids, batch.token, span=batch.span)
        except TRANSIENT_ERRORS as exc:
            connections.close_all()
            logger.warning(
                "Could not extend the leases of %d run(s) being dispatched (%s); if they "
                "outlast their lease, another scheduler dispatches them again with the same "
                "keys.",
                len(run_ids),
                exc,
            )
        except Exception:  # the keeper must outlive anything: the next renewal may work
            logger.exception("Extending the leases of %d run(s) failed.", len(run_ids))
