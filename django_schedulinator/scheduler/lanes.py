"""The lanes of a running scheduler: one per dispatcher alias, each a queue of committed
batches and a thread that hands them to its dispatcher, then passes what they became to the
recorder (recording.py). A slow or failing dispatcher holds up only its own lane; the claim
loop and the other lanes go on.

A stop (``Lanes.stop``) gives each lane one lease to dispatch what it holds (the stop's
grace), then a hand-off in progress its dispatcher's own bound; what is left stays pending
and is taken over, with the same keys, once its lease expires.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from django.db import InterfaceError, OperationalError, connections

from django_schedulinator.dispatch import (
    DEFAULT_ALIAS,
    BaseDispatcher,
    Occurrence,
    Outcome,
    Progress,
    dispatchers,
)
from django_schedulinator.models.spans import Span
from django_schedulinator.operations.stage import Stage
from django_schedulinator.scheduler.counters import Counters
from django_schedulinator.scheduler.leases import Leased, LeaseKeeper
from django_schedulinator.scheduler.progress import BatchProgress
from django_schedulinator.scheduler.recording import OutcomeRecorder
from django_schedulinator.scheduler.transient import TRANSIENT_ERRORS
from django_schedulinator.statuses import OutcomeStatus

if TYPE_CHECKING:
    from django_schedulinator.operations.metrics import Metrics
    from django_schedulinator.scheduler.held import HeldRuns

logger = logging.getLogger("django_schedulinator.worker")

# Batches waiting for the dispatch thread: enough to keep both busy, little enough that a stop
# finishes quickly and a crash leaves few pending runs to take over.
DISPATCH_QUEUE_BATCHES = 2
# The longest a claim waits for a lane that is behind (more than DISPATCH_QUEUE_BATCHES
# waiting), and how many more batches a lane then holds before it counts as stuck and its
# runs are left to a take-over. A stop dispatches what a lane holds, within its grace.
LANE_WAIT_SECONDS = 1.0
LANE_BACKLOG_BATCHES = 8
# What a stop allows a lane, past its grace and its dispatcher's own bound on a hand-off in
# progress, to record the outcomes it has.
STOP_RECORD_SECONDS = 2.0


class Unavailable(BaseDispatcher):
    """Stands in for an alias that cannot be built (not configured, a missing extra, bad
    options): its runs fail with the reason, and the other aliases go on."""

    def __init__(self, alias: str, reason: str) -> None:
        super().__init__(alias)
        self.reason = reason

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        return [Outcome(o.run_id, OutcomeStatus.FAILED, self.reason) for o in occurrences]


def build_dispatcher(alias: str) -> BaseDispatcher:
    """The lane's own instance (not this thread's ``dispatchers[alias]``): its lane thread
    alone uses it, and it is closed with the lane, so a dispatcher need not be thread-safe."""
    try:
        return dispatchers.create_connection(alias)
    except ImproperlyConfigured as exc:
        logger.error("Runs of the dispatcher %r fail until this is fixed: %s", alias, exc)
        return Unavailable(alias, str(exc))


@dataclass(eq=False, slots=True)
class Lane:
    """One dispatcher alias in a running scheduler: its dispatcher, and the stage (a queue
    of the batches waiting for it, and the thread that hands them over) while running."""

    alias: str
    dispatcher: BaseDispatcher
    stage: Stage[Leased] | None = None
    # Runs a stop left for a take-over without handing them off (past its grace).
    not_started: int = 0
    # A stop stopped waiting for it: its thread closes its dispatcher when it ends.
    left: bool = False


class Lanes:
    """Every lane of one scheduler. While ``running``, each lane's thread dispatches batch N
    while the loop claims and advances batch N+1 and the recorder writes the outcomes of
    batch N-1 (the database and Python then overlap)."""

    def __init__(
        self,
        held: HeldRuns,
        counters: Counters,
        lease_seconds: float,
        dispatcher: BaseDispatcher | None = None,
    ) -> None:
        self.held = held
        self.counters = counters
        self.lease_seconds = lease_seconds
        # One dispatcher given (tests, benchmarks, embedding) serves every alias.
        self._one_dispatcher = dispatcher is not None
        self.dispatcher = dispatcher or build_dispatcher(DEFAULT_ALIAS)
        self._lanes: dict[str, Lane] = {DEFAULT_ALIAS: Lane(DEFAULT_ALIAS, self.dispatcher)}
        self.running = False
        self.leases = LeaseKeeper(held, lease_seconds)
        # Writes the outcomes of dispatched batches (recording.py): on its thread while
        # ``running``, and after a stop in the lane thread that hands them over.
        self.recorder = OutcomeRecorder(held, self.leases, lease_seconds)
        # When the loop ended: from then the lanes dispatch what they hold for one lease
        # (the stop's grace), then start no more hand-offs.
        self.stop_grace_ends: float | None = None
        # How long the claim waits for a lane that is behind (back-pressure, bounded).
        self._wait = min(LANE_WAIT_SECONDS, lease_seconds / 4)
        self.metrics: Metrics | None = None

    def start(self) -> None:
        """Start a thread per lane; from now on ``put`` queues batches for them."""
        self.running = True
        self.stop_grace_ends = None
        self.leases = LeaseKeeper(self.held, self.lease_seconds)  # a stop closes it
        self.recorder = OutcomeRecorder(self.held, self.leases, self.lease_seconds)
        self.recorder.start()
        for lane in self._lanes.values():
            self._start(lane)

    def put(self, leased: Leased) -> None:
        """Hand each part of a committed batch to its dispatcher's lane."""
        by_alias: dict[str, list[Occurrence]] = {}
        for o in leased.occurrences:
            by_alias.setdefault(DEFAULT_ALIAS if self._one_dispatcher else o.dispatcher, []).append(
                o
            )
        for alias, occurrences in by_alias.items():
            part = Leased(
                occurrences, leased.token, leased.leased_at, leased.release, counted=leased.counted
            )
            lane = self.lane(alias)
            if lane.stage is None:
                raise RuntimeError("The lanes are not running: start the loop (or step).")
            # A lane that is behind slows the claim down (back-pressure), for a second at
            # most; past that the batch waits in the lane all the same, up to its capacity.
            # Only a lane that stays stuck fills up: then the runs stay pending, and once
            # their lease expires a take-over (here or in another scheduler) dispatches them
            # with the same keys.
            lane.stage.wait_below(DISPATCH_QUEUE_BATCHES, self._wait)
            if not lane.stage.put(part, timeout=0):
                self.counters.add(Counters(lane_full=len(occurrences)))
                self._give_back_hand_offs(part)
                logger.warning(
                    "The dispatcher %r is stuck: %d run(s) wait for their lease to expire "
                    "and are dispatched then, with the same keys.",
                    alias,
                    len(occurrences),
                )

    def depths(self) -> dict[str, tuple[int, float | None]]:
        """Each lane's batches waiting for its dispatcher, and how long the oldest has waited
        (seconds, None when none waits). A snapshot, read from any thread."""
        now = time.monotonic()
        depths: dict[str, tuple[int, float | None]] = {}
        for alias, lane in list(self._lanes.items()):
            waiting = [leased for leased, _put in lane.stage.waiting()] if lane.stage else []
            oldest = min((b.leased_at for b in waiting), default=None)
            depths[alias] = (len(waiting), None if oldest is None else now - oldest)
        return depths

    def recorder_backlog(self) -> tuple[int, int, float | None]:
        """The recorder's backlog (``OutcomeRecorder.backlog``)."""
        return self.recorder.backlog()

    def drain(self) -> None:
        """Wait until every lane has dispatched what it holds, then until the recorder has
        written what they handed over."""
        for lane in list(self._lanes.values()):
            if lane.stage is not None:
                lane.stage.drain()
        self.recorder.drain()

    def lane(self, alias: str) -> Lane:
        lane = self._lanes.get(alias)
        if lane is None:
            lane = self._lanes[alias] = Lane(alias, build_dispatcher(alias))
            if self.running:
                self._start(lane)
        return lane

    def _start(self, lane: Lane) -> None:
        lane.not_started, lane.left = 0, False
        lane.stage = Stage(
            f"schedulinator-dispatch-{lane.alias}",
            lambda batches: self._dispatch_batches(lane, batches),
            capacity=DISPATCH_QUEUE_BATCHES + LANE_BACKLOG_BATCHES,
            on_error=self._not_dispatched,
            on_end=lambda: self._lane_ended(lane),
        )
        lane.stage.start()

    def close(self) -> None:
        """Close every dispatcher built or given (but those of lanes a stop left still
        dispatching: their threads close them when they end)."""
        for lane in self._lanes.values():
            if not lane.left:
                with contextlib.suppress(Exception):
                    lane.dispatcher.close()

    def past_stop_grace(self) -> bool:
        """Whether the lanes should start no more hand-offs: a stop's grace is over."""
        ends = self.stop_grace_ends
        return ends is not None and time.monotonic() >= ends

    def stop(self) -> None:
        """The end of the loop: each lane dispatches and records what it holds, for one lease
        at most (the stop's grace: past it, another scheduler would take those runs over
        anyway), then starts no more hand-offs. A hand-off in progress then has as long as
        its dispatcher bounds one (an inline task's timeout, a webhook request's deadline).
        A lane still busy after that is left to end on its own: its runs not recorded stay
        pending, their leases are no longer renewed, and once they expire a take-over
        dispatches them, with the same keys."""
        self.running = False
        self.stop_grace_ends = time.monotonic() + self.lease_seconds
        for lane in self._lanes.values():
            if lane.stage is None:
                continue
            bound = lane.dispatcher.hand_off_timeout or 0.0
            if lane.stage.stop(self.stop_grace_ends + bound + STOP_RECORD_SECONDS):
                lane.stage = None
                continue
            lane.left = True
            logger.warning(
                "Stopped without waiting longer for the dispatcher %r (a stop's grace is "
                "LEASE_SECONDS, %gs, and a hand-off in progress gets %gs more): the runs it "
                "has not recorded stay pending and are dispatched again, with the same "
                "keys, once their lease expires.",
                lane.alias,
                self.lease_seconds,
                bound,
            )
        # What the lanes handed over is recorded (within the grace, and a little more); a
        # lane a stop left behind records what it still hands over itself.
        self.recorder.stop(
            max(STOP_RECORD_SECONDS, self.stop_grace_ends + STOP_RECORD_SECONDS - time.monotonic())
        )
        self.leases.close()

    def _dispatch_batches(self, lane: Lane, batches: list[Leased]) -> None:
        """On the lane's thread: each batch to its dispatcher, unless the stop's grace is
        over (then it is left for a take-over)."""
        for leased in batches:
            if self.past_stop_grace():
                lane.not_started += len(leased.occurrences)
                self._give_back_hand_offs(leased)
                continue
            self.dispatch_now(lane, leased)

    def _not_dispatched(self, batches: list[Leased], exc: Exception) -> bool:
        """A batch failed to dispatch or record: its runs stay pending, and once their
        lease expires they are taken over and dispatched again with the same keys."""
        count = sum(len(leased.occurrences) for leased in batches)
        if isinstance(exc, TRANSIENT_ERRORS):
            logger.warning(
                "Could not dispatch or record %d run(s) (%s); they stay pending and are "
                "dispatched again, with the same keys, once their lease expires.",
                count,
                exc,
            )
        else:
            logger.exception("Dispatching or recording %d run(s) failed.", count)
        return True

    def _lane_ended(self, lane: Lane) -> None:
        """On the lane's thread, as it ends (however late after a stop)."""
        if lane.not_started:
            logger.warning(
                "Stopped before dispatching %d run(s) of the dispatcher %r (the stop's "
                "grace, LEASE_SECONDS, was over): they stay pending and are dispatched, "
                "with their keys, once their lease expires.",
                lane.not_started,
                lane.alias,
            )
        if lane.left:
            with contextlib.suppress(Exception):
                lane.dispatcher.close()

    def dispatch_now(self, lane: Lane, leased: Leased) -> None:
        """Dispatch one batch in this thread and record its outcomes."""
        occurrences, token = leased.occurrences, leased.token
        renew_every = self.lease_seconds / 3
        renewed = leased.leased_at
        if time.monotonic() - renewed >= renew_every:
            # The batch waited behind others: renew its leases first (a fresh batch skips
            # this: no lease of it can have expired yet).
            span = Span.of(o.scheduled_for for o in occurrences)
            self.held.renew_leases([o.run_id for o in occurrences], token, span=span)
            renewed = time.monotonic()
        # Leave out runs whose schedule was deleted or paused while the batch waited, and
        # runs another scheduler took over (it dispatches them: doing it here too would
        # deliver them twice).
        occurrences, cancelled = self._dispatchable(occurrences, token, leased.counted)
        if cancelled:  # several lanes, the loop and the commit stage count at once
            self.counters.add(Counters(cancelled=cancelled))
        if not occurrences:
            return
        progress = BatchProgress(
            self.held,
            lane.dispatcher,
            occurrences,
            token,
            renewed=renewed,
            release=leased.release,
            lease_seconds=self.lease_seconds,
            stopped=self.past_stop_grace,
        )
        if self.metrics is not None and leased.counted:  # a fresh claim's first hand-offs
            self.metrics.handing_off(lane.alias, occurrences)
        self.leases.hold(progress)
        try:
            try:
                outcomes = lane.dispatcher.dispatch(occurrences, progress)
            except Exception as exc:
                outcomes = self._broken_dispatch(lane, occurrences, exc)
        except BaseException:
            self.leases.let_go(progress)
            raise
        # Off this thread, which goes on to its next batch; the leases stay held until the
        # recorder has written the outcomes.
        self.recorder.put(progress, outcomes)
        for o in occurrences:
            logger.debug("Fired %s (%s) key=%s", o.schedule_name, o.task, o.key)

    def _broken_dispatch(
        self, lane: Lane, occurrences: list[Occurrence], exc: Exception
    ) -> list[Outcome]:
        """A dispatcher raised instead of returning outcomes (each hand-off is guarded, so
        this is a dispatcher's own defect, or its broker client's). What it reported stays
        recorded and is never sent again; the rest is retried with the error, after the
        backoff and up to MAX_ATTEMPTS, rather than left for take-over after take-over to
        send the whole batch again without end."""
        logger.error(
            "The dispatcher %r raised while dispatching %d run(s); those it did not report "
            "are retried after the backoff.",
            lane.alias,
            len(occurrences),
            exc_info=exc,
        )
        error = f"The dispatcher {lane.alias!r} failed: {type(exc).__name__}: {exc}"
        return [Outcome(o.run_id, OutcomeStatus.RETRY, error) for o in occurrences]

    def _give_back_hand_offs(self, leased: Leased) -> None:
        """A batch left for a take-over without being handed off: if its hand-offs were
        counted at the claim, they are given back (waiting uses up no attempts)."""
        if not leased.counted:
            return
        try:
            self.held.give_back_hand_offs(
                [o.run_id for o in leased.occurrences],
                leased.token,
                span=Span.of(o.scheduled_for for o in leased.occurrences),
            )
        except TRANSIENT_ERRORS as exc:
            connections.close_all()
            logger.warning(
                "Could not give back the hand-offs counted for %d run(s) left for a take-over "
                "(%s): each counts one attempt more than it was handed off.",
                len(leased.occurrences),
                exc,
            )

    def _dispatchable(
        self, occurrences: list[Occurrence], token: str, counted: bool = False
    ) -> tuple[list[Occurrence], int]:
        """The held runs' check before dispatch, through a database blip: this thread's
        connection may have been dropped (a failover, pg_terminate_backend) since its last
        batch. Still failing, the batch is dispatched unchecked, as committed: it must not
        wait a whole lease for a check that only narrows a window."""
        try:
            return self.held.dispatchable(occurrences, token, counted=counted)
        except (OperationalError, InterfaceError):
            connections.close_all()  # this thread's: reconnect
        try:
            return self.held.dispatchable(occurrences, token, counted=counted)
        except (OperationalError, InterfaceError) as exc:
            connections.close_all()
            logger.warning(
                "Could not check %d run(s) against their schedules before dispatch (%s); "
                "dispatching them as committed.",
                len(occurrences),
                exc,
            )
            return occurrences, 0
