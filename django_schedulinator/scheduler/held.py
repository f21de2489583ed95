"""The runs a scheduler holds between their commit and their recorded outcome: what its
lanes, its recorder and its lease keeper do with them (``HeldRuns``): renew their leases,
check them before dispatch, count and give back hand-offs, mark them running, record their
outcomes, release the buffered runs that waited for them; and when the retries it recorded
are due (``PlannedRetries``), for the loop's take-over. The fire path that commits them is
``claiming.Claimer``'s.

Every write is conditional on the claim token that holds the runs: a run whose lease
expired and that another scheduler took over is left to it. Every statement by run id is
bounded by the runs' nominal times (``spans.Span``): the occurrences carry them, and the
callers pass the span of the runs they name.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django_schedulinator import outcomes, timing
from django_schedulinator.dispatch.base import BaseDispatcher, Occurrence
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run
from django_schedulinator.models.batches import PreparedQuery
from django_schedulinator.models.spans import Span
from django_schedulinator.outcomes import Reported
from django_schedulinator.scheduler.counters import Counters
from django_schedulinator.scheduler.now import LoopClock
from django_schedulinator.services import ledger
from django_schedulinator.statuses import OutcomeStatus

if TYPE_CHECKING:
    from django_schedulinator.operations.metrics import Metrics

logger = logging.getLogger("django_schedulinator.claiming")

# The runs of a batch that its claim still holds, with their trigger and whether their
# schedule is enabled: read before each dispatch, compiled once (batches.PreparedQuery),
# bounded by the batch's nominal times.
HELD = PreparedQuery(
    lambda ids, token, span: Run.objects.held_by(token, ids).within(span).order_by(),
    ("pk", "trigger", "schedule__enabled"),
    spanned=True,
)


class PlannedRetries:
    """When the retries this process recorded are due (Redis time, epoch ms), so that it
    takes them over then instead of at its next periodic take-over. Recorded by the thread
    that records outcomes (the recorder's, or a lane's), read by the loop. If this process
    dies, the periodic take-overs of the others send them."""

    # Retries due within the same tenth of a second share one take-over.
    GRAIN_MS = 100

    def __init__(self) -> None:
        self._due: list[int] = []  # a heap of the distinct moments in _planned
        self._planned: set[int] = set()
        self._lock = threading.Lock()

    def add(self, moments: Iterable[datetime]) -> None:
        with self._lock:
            for at in moments:
                # Rounded up: a take-over at that moment finds the run's lease ended.
                ms = -(-timing.to_ms(timing.ceil_ms(at)) // self.GRAIN_MS) * self.GRAIN_MS
                if ms not in self._planned:
                    self._planned.add(ms)
                    heapq.heappush(self._due, ms)

    def take_due(self, now_ms: int) -> bool:
        """Whether a retry is due at ``now_ms``; those due are forgotten (the take-over
        that follows sends them)."""
        with self._lock:
            due = False
            while self._due and self._due[0] <= now_ms:
                self._planned.discard(heapq.heappop(self._due))
                due = True
            return due

    def next_ms(self) -> int | None:
        with self._lock:
            return self._due[0] if self._due else None


class HeldRuns:
    def __init__(
        self, *, clock: LoopClock, lease_seconds: float, index: DueIndex, using: str
    ) -> None:
        self.clock = clock
        self.lease = timedelta(seconds=lease_seconds)
        self.index = index
        self.db = using
        self.retries = PlannedRetries()
        self.metrics: Metrics | None = None  # the worker's, while metrics are on
        # The scheduler's counters (Worker sets them): the runs it records as failed.
        self.counters: Counters | None = None

    def renew_leases(self, run_ids: Sequence[int], token: str, *, span: Span | None) -> set[int]:
        """Extend the leases of the runs that ``token`` still holds; their ids. ``span``:
        their nominal times (here and below: ``spans.Span``).

        Conditional on the token: a run whose lease expired and that another process took
        over (with a token of its own) is not renewed, and the caller must not dispatch it.
        Leases are on Redis TIME like the claims; while Redis is unreachable this host's
        clock stands in, so work already committed is still dispatched.
        """
        now = self.clock.now()
        return ledger.renew_leases(run_ids, token, until=now + self.lease, using=self.db, span=span)

    def dispatchable(
        self, occurrences: Sequence[Occurrence], token: str, *, counted: bool = False
    ) -> tuple[list[Occurrence], int]:
        """The occurrences still to dispatch, each with its hand-off counted, and how many
        were cancelled; one statement when all of them go.

        ``counted``: the batch's hand-offs were counted when it was claimed (its runs were
        inserted with their first attempt), so the usual case writes nothing here; a run of
        it that another process took over meanwhile gets its count back (that process
        counts its own hand-off).

        A committed batch may wait before its dispatch (in the dispatch queue, or behind a
        slow batch). Meanwhile its schedule may have been deleted, which deletes its runs
        (cascade), or paused: a scheduled run of a paused schedule is recorded as skipped
        ("paused") instead. Runs queued by hand (run now, backfill) still run while paused,
        as they would have been queued. Runs that another process took over are left to it.
        """
        if not occurrences:
            return [], 0
        ids = [o.run_id for o in occurrences]
        span = Span.of(o.scheduled_for for o in occurrences)
        # The usual case: every run is still held here and goes. Each occurrence's attempt
        # is already the count this makes (the lease kept anyone else from changing it).
        if not counted:
            # A take-over: counted now, and each occurrence says which hand-off it is as
            # the ledger has it now (a waiting batch may have given its count back since).
            handed_off = ledger.count_hand_offs(ids, token, using=self.db, span=span)
            attempts = ledger.attempts_held(ids, token, using=self.db, span=span)
            occurrences = [
                replace(o, attempt=attempts.get(o.run_id, o.attempt)) for o in occurrences
            ]
            if handed_off == len(ids):
                return occurrences, 0
        held = {
            pk: (trigger, enabled)
            for pk, trigger, enabled in HELD.rows(self.db, ids, token, span=span)
        }
        paused = [
            pk
            for pk, (trigger, enabled) in held.items()
            if not enabled and trigger == Run.Trigger.SCHEDULE
        ]
        ledger.cancel_paused(paused, token, using=self.db, span=span)
        missing = set(ids) - held.keys()
        deleted = set()
        if missing:  # rare: gone with their schedule, or taken over (those still exist)
            runs = Run.objects.using(self.db).within(span).filter(pk__in=sorted(missing))
            deleted = missing - set(runs.values_list("pk", flat=True))
        if paused or deleted:
            logger.info(
                "Not dispatching %d run(s) whose schedule was deleted (%d) or paused (%d) "
                "after they were claimed.",
                len(paused) + len(deleted),
                len(deleted),
                len(paused),
            )
        if len(missing) > len(deleted):
            if counted:  # never handed off from here: the process that took them counts
                ledger.give_back_hand_offs(sorted(missing - deleted), using=self.db, span=span)
            logger.warning(
                "%d run(s) were taken over by another scheduler while queued here; not "
                "dispatching them twice.",
                len(missing) - len(deleted),
            )
        wanted = held.keys() - set(paused)
        return [o for o in occurrences if o.run_id in wanted], len(paused) + len(deleted)

    def give_back_hand_offs(self, run_ids: Sequence[int], token: str, *, span: Span | None) -> None:
        """The runs of a claimed batch that will not be handed off from here after all (a
        stuck lane refused it, a stop gave up on it): their counted hand-off is given back,
        so that waiting never uses up attempts."""
        ledger.give_back_hand_offs(run_ids, claim_token=token, using=self.db, span=span)

    def mark_running(self, run_ids: Collection[int], token: str, *, span: Span | None) -> None:
        """Record that the dispatcher started these runs (those ``token`` still holds)."""
        ledger.mark_running(run_ids, token, using=self.db, span=span)

    # -- 4. record outcomes ---------------------------------------------------------------

    def record(self, batches: Sequence[Reported], dispatcher: BaseDispatcher) -> set[int]:
        """Store what ``dispatcher`` returned for these batches, in one transaction
        (``outcomes.record``): the ledger, each schedule's failures in a row and auto-pause.
        Plans a take-over for when each retry is due. Returns the schedules whose runs
        ended."""
        now = self.clock.now()
        recorded = outcomes.record(
            batches, dispatcher=dispatcher, now=now, using=self.db, index=self.index
        )
        self.retries.add(recorded.retry_at)  # after the commit: a take-over finds them
        failed = sum(o.status == OutcomeStatus.FAILED for o in recorded.ended)
        if failed and self.counters is not None:
            self.counters.add(Counters(failed=failed))
        schedule_of = {run_id: sid for b in batches for run_id, sid in b.schedule_of.items()}
        if self.metrics is not None:
            self.metrics.recorded(
                dispatcher.alias, [o for b in batches for o in b.outcomes], recorded.ended
            )
        return {schedule_of[o.run_id] for o in recorded.ended}

    # -- overlap "buffer" -----------------------------------------------------------------

    def release_buffered(self, schedule_ids: Collection[int] | None = None) -> int:
        """Queue the buffered runs of schedules with no run in progress (of ``schedule_ids``,
        or of all); the next claim dispatches them. Returns how many were released."""
        now = self.clock.now()
        return outcomes.release_buffered(
            None if schedule_ids is None else set(schedule_ids),
            now=now,
            using=self.db,
            index=self.index,
        )
