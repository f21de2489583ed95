"""The scheduler loop behind ``manage.py run_scheduler``.

Any number of workers may run on any number of hosts, with no leader: the claim script, the
conditional SQL advance and the ledger's unique constraint keep every occurrence to one
process. Between passes a worker sleeps until the earliest due entry, or a jittered maximum.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import random
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from django.utils import timezone
from redis import exceptions as redis_errors

from . import alerts, clock, notify, retention, timing
from .claiming import Claimer, Counters
from .clock import redis_or_host_time
from .conf import MAX_BATCH_SIZE, app_settings
from .dispatch import DEFAULT_ALIAS, BaseDispatcher, Occurrence, Outcome, Progress, dispatchers
from .errors import RebuildInProgress
from .health import check_drift, eviction_risk, record_drift
from .heartbeat import HeartbeatKeeper
from .index import REQUEUE, Change, ClaimedBatch, DueIndex, get_index
from .management import run_command
from .rebuild import ensure_built, rebuild_index
from .reconcile import reconcile
from .retention import Pruner, PruneReport
from .timing import from_ms

if TYPE_CHECKING:
    from .metrics import Metrics

logger = logging.getLogger("django_schedulinator.worker")

# Connections that drop come back, a Redis that is loading its data or failing over becomes
# writable again; a missing table or bad SQL does not, and must surface.
TRANSIENT_ERRORS = (
    redis_errors.ConnectionError,  # includes BusyLoadingError (Redis restarting)
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,  # a replica during failover
    redis_errors.TryAgainError,
    redis_errors.ClusterDownError,
    redis_errors.OutOfMemoryError,
    OperationalError,
    InterfaceError,
)
MAX_BACKOFF_SECONDS = 5.0
# Batches waiting for the dispatch thread: enough to keep both busy, little enough that a stop
# finishes quickly and a crash leaves few pending runs to take over.
DISPATCH_QUEUE_BATCHES = 2
# The longest a claim waits for a lane that is behind (more than DISPATCH_QUEUE_BATCHES
# waiting), and how many more batches a lane then holds before it counts as stuck and its
# runs are left to a take-over. A stop dispatches what a lane holds, within its grace.
LANE_WAIT_SECONDS = 1.0
LANE_BACKLOG_BATCHES = 8
# How often an idle lane looks whether the scheduler is stopping.
LANE_IDLE_SECONDS = 0.1
# What a stop allows a lane, past its grace and its dispatcher's own bound on a hand-off in
# progress, to record the outcomes it has.
STOP_RECORD_SECONDS = 2.0
# How often each scheduler looks for a rebuild asked for on the admin's operations page.
REBUILD_REQUEST_LOOK_SECONDS = 2.0
# The longest a stop waits for the notifications still queued to be sent.
NOTIFY_DRAIN_SECONDS = 5.0


# The threads of the loop (claiming and dispatching, not the tasks): their PostgreSQL
# connections wait at most LOCK_TIMEOUT_SECONDS on another transaction's row lock.
_loop_threads = threading.local()


def _set_lock_timeout(connection: BaseDatabaseWrapper, reset: bool = False) -> None:
    if connection.vendor != "postgresql":
        return  # SQLite has no row locks: its writers wait on the database's own timeout
    with connection.cursor() as cursor:
        if reset:
            cursor.execute("RESET lock_timeout")
        else:
            ms = max(1, round(app_settings.LOCK_TIMEOUT_SECONDS * 1000))
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [f"{ms}ms"])


def _on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    if getattr(_loop_threads, "bounded", False):
        _set_lock_timeout(connection)


def bound_lock_waits(enabled: bool = True) -> None:
    """Bound (or stop bounding) how long this thread's database connections wait on row
    locks: those open now and those it opens later. A user's transaction that holds a row
    (an edit, a migration) must not stall the scheduler behind it for longer."""
    _loop_threads.bounded = enabled
    if enabled:
        connection_created.connect(_on_connection_created, dispatch_uid=__name__)
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None:
            # Best effort: a dead connection reconnects (bounded then), and one in a failed
            # transaction is closed or rolled back by its owner.
            with contextlib.suppress(Exception):
                _set_lock_timeout(connection, reset=not enabled)


def _build_dispatcher(alias: str) -> BaseDispatcher:
    try:
        return dispatchers.create(alias)
    except ImproperlyConfigured as exc:
        logger.error("Runs of the dispatcher %r fail until this is fixed: %s", alias, exc)
        return Unavailable(alias, str(exc))


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


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


@dataclass(slots=True)
class PassResult:
    claimed: int
    full: bool  # the batch was full: more may be due right now
    now_ms: int
    next_due_ms: int | None


class BatchProgress(Progress):
    """The scheduler's side of one dispatched batch: records runs that started as running,
    and outcomes as the dispatcher reports them. Its leases are the LeaseKeeper's."""

    def __init__(
        self,
        worker: Worker,
        dispatcher: BaseDispatcher,
        occurrences: list[Occurrence],
        token: str,
        renewed: float,
        release: set[int],
    ) -> None:
        self.worker = worker
        self.dispatcher = dispatcher
        self.token = token
        self.release = release  # schedules whose buffered run waits for these runs
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
        return self.worker.past_stop_grace()

    def running(self, run_ids: Collection[int]) -> None:
        new = set(run_ids) - self.marked_running - self.recorded
        if not new:
            return
        try:
            self.worker.claimer.mark_running(new, self.token)
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
            ended = self.worker.record_outcomes(
                new, self.schedule_of, self.dispatched_at, self.dispatcher
            )
        else:
            ended = self.worker.claimer.record(
                new, self.schedule_of, self.dispatched_at, self.dispatcher
            )
        self.recorded.update(o.run_id for o in new)
        ended &= self.release
        if ended:
            # Their previous run is recorded: a buffered run of theirs may go now.
            self.worker.claimer.release_buffered(ended)


class LeaseKeeper:
    """Renews the leases of every batch being dispatched, every third of a lease, from one
    thread of its own (with its own database connection) that runs while there are any.
    No dispatcher has to remember to: one that blocks (a slow enqueue, a task run inside
    ``enqueue()``, a receiver that answers slowly, one hand-off longer than a lease) keeps
    its runs, and no other scheduler takes them over and sends them a second time."""

    def __init__(self, claimer: Claimer, lease_seconds: float) -> None:
        self.claimer = claimer
        self.every = lease_seconds / 3
        self._batches: set[BatchProgress] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextlib.contextmanager
    def keeping(self, batch: BatchProgress) -> Iterator[None]:
        """Keep the batch's leases while the block runs."""
        with self._changed:
            if not self._closed:
                self._batches.add(batch)
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="schedulinator-leases", daemon=True
                    )
                    self._thread.start()
        try:
            yield
        finally:
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
        bound_lock_waits()
        try:
            while due := self._wait_for_due():
                for batch in due:
                    self._renew(batch)
        finally:
            connections.close_all()  # this thread's

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
            self.claimer.renew_leases(run_ids, batch.token)
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


class Unavailable(BaseDispatcher):
    """Stands in for an alias that cannot be built (not configured, a missing extra, bad
    options): its runs fail with the reason, and the other aliases go on."""

    def __init__(self, alias: str, reason: str) -> None:
        super().__init__(alias)
        self.reason = reason

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        return [Outcome(o.run_id, "failed", self.reason) for o in occurrences]


@dataclass(eq=False, slots=True)
class Lane:
    """One dispatcher alias in a running scheduler: its dispatcher, the batches waiting for
    it, and the thread that hands them over. A slow or failing dispatcher holds up only
    its own lane; the claim loop and the other lanes go on."""

    alias: str
    dispatcher: BaseDispatcher
    outbox: queue.Queue[Leased] = field(
        default_factory=lambda: queue.Queue(DISPATCH_QUEUE_BATCHES + LANE_BACKLOG_BATCHES)
    )
    thread: threading.Thread | None = None
    # A stop stopped waiting for it: its thread closes its dispatcher when it ends.
    left: bool = False


class Worker:
    def __init__(
        self,
        *,
        batch_size: int | None = None,
        lease_seconds: float | None = None,
        once: bool = False,
        max_runs: int | None = None,
        max_seconds: float | None = None,
        worker_id: str | None = None,
        max_sleep: float | None = None,
        dispatcher: BaseDispatcher | None = None,
        index: DueIndex | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """``clock`` returns "now" in epoch ms in place of Redis TIME: for tests only."""
        self.batch_size = app_settings.BATCH_SIZE if batch_size is None else batch_size
        self.lease_seconds = app_settings.LEASE_SECONDS if lease_seconds is None else lease_seconds
        # The command validates its options too, but call_command() and embedding skip argparse.
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be 1-{MAX_BATCH_SIZE}, got {self.batch_size!r}")
        if not 0 < self.lease_seconds < float("inf"):
            raise ValueError(f"lease_seconds must be positive, got {self.lease_seconds!r}")
        for name, value in (("max_runs", max_runs), ("max_seconds", max_seconds)):
            if value is not None and not 0 < value < float("inf"):
                raise ValueError(f"{name} must be positive, got {value!r}")
        self.once = once
        self.max_runs = max_runs
        self.max_seconds = max_seconds
        self.worker_id = worker_id or default_worker_id()
        self.max_sleep = max_sleep or app_settings.MAX_SLEEP_SECONDS
        self.index = index or get_index()
        # One dispatcher given (tests, benchmarks, embedding) serves every alias.
        self._one_dispatcher = dispatcher is not None
        self.dispatcher = dispatcher or _build_dispatcher(DEFAULT_ALIAS)
        self._lanes: dict[str, Lane] = {DEFAULT_ALIAS: Lane(DEFAULT_ALIAS, self.dispatcher)}
        self._lanes_running = False
        self.claimer = Claimer(
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            index=self.index,
            clock=clock,
        )
        self.leases = LeaseKeeper(self.claimer, self.lease_seconds)
        self.counters = Counters()
        self.stopping = False
        # When the loop ended: from then the lanes dispatch what they hold for one lease
        # (the stop's grace), then start no more hand-offs.
        self._stop_grace_ends: float | None = None
        # Pending runs whose lease expired are looked for a few times per lease.
        self._takeover_every = max(self.lease_seconds / 4, 0.5)
        self._next_takeover = 0.0
        self._takeover_more = False  # the last take-over was a full batch: more may wait
        # Periodic chores: each process keeps its own clock, and Redis decides which one
        # does the chore in a period (DueIndex.take_turn).
        self._reconcile_every = app_settings.RECONCILE_SECONDS
        self._drift_every = app_settings.DRIFT_CHECK_SECONDS
        self._stats_every = app_settings.LOG_STATS_SECONDS
        self._missed_every = app_settings.MISSED_CHECK_SECONDS
        self._next_missed = 0.0
        self._next_reconcile = 0.0
        # This process holds reconcile's turn and has not caught up yet: it reads another
        # slice after each pass, without sleeping between, until it has.
        self._reconcile_behind = False
        self._next_drift = time.monotonic() + self._drift_every * random.uniform(0.1, 1.0)
        self._next_stats = time.monotonic() + self._stats_every
        self._next_rebuild_look = 0.0  # when to look for a rebuild asked for in the admin
        # Retention: soon after a start (the turn keeps it to one prune per period across
        # the fleet, so schedulers that never live a whole period still prune), then each
        # period, on a thread of its own (retention.PruneThread) that the loop never waits for.
        self._prune_every = app_settings.PRUNE_SECONDS
        self._next_prune = time.monotonic() + min(60.0, self._prune_every) * random.uniform(0, 1)
        self._prune_thread: retention.PruneThread | None = None
        # How long the claim waits for a lane that is behind (back-pressure, bounded).
        self._lane_wait = min(LANE_WAIT_SECONDS, self.lease_seconds / 4)
        self._last_summary = (time.monotonic(), 0)  # when, and the fired count then
        # What heartbeats and probes read (from other threads): when the loop started, when
        # it last completed a pass (time.monotonic()), and why its last pass failed, if one
        # has since it last completed one.
        self.started_at: datetime | None = None
        self.last_pass_at: float | None = None
        self.last_error = ""
        # When the loop last showed it is not stuck (time.monotonic()): a pass ended, well
        # or in an error it backs off from, or a long step moved on (a chunk of a rebuild,
        # a look at another process's rebuild). /healthz reads it (probes.py).
        self.last_progress_at: float | None = None
        # Occurrences recorded as skipped, by reason (catch-up, overlap, DST): what the
        # passes' counters.skipped adds up, for the metrics.
        self.skipped_by_reason: Counter[str] = Counter()
        # Observations of the hot path (claim and commit times, lateness, results), only
        # while metrics are on (attach_metrics): otherwise they cost nothing.
        self.metrics: Metrics | None = None
        # The port this process serves /metrics, /healthz and /readyz on (None: it does not).
        self.metrics_port: int | None = None
        # While run() runs, each lane's thread dispatches and records batch N while this one
        # claims and advances batch N+1 (the database and Python then overlap).

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        previous = self._install_signal_handlers()
        started = time.monotonic()
        failures = 0
        logger.info(
            "Scheduler %s started (batch %d, lease %.0fs).",
            self.worker_id,
            self.batch_size,
            self.lease_seconds,
        )
        self._lanes_running = True
        self._stop_grace_ends = None
        self.started_at = timezone.now()
        self.last_pass_at, self.last_error = None, ""
        self.last_progress_at = time.monotonic()  # the loop starts: its first pass comes
        self.leases = LeaseKeeper(self.claimer, self.lease_seconds)  # a stop closes it
        for lane in self._lanes.values():
            self._start(lane)
        bound_lock_waits()
        notify.outbox.send_in_background()  # never on the claim path
        self._warn_about_eviction()
        heartbeat = HeartbeatKeeper(self, self.index)
        heartbeat.start()
        try:
            while not self.stopping:
                try:
                    result = self.run_pass()
                except TRANSIENT_ERRORS as exc:
                    failures += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    # Not stuck: backing off from an outage that a restart would not end.
                    self.last_progress_at = time.monotonic()
                    self._recover(exc, failures)
                    continue
                self.last_pass_at = self.last_progress_at = time.monotonic()
                self.last_error = ""
                if failures:
                    logger.warning("Connections are back after %d failed pass(es).", failures)
                    failures = 0
                if self._limit_reached(started):
                    break
                if result.full:
                    continue
                if self.once:
                    break
                if self._reconcile_behind:
                    continue  # the next slice of reconcile's backlog, after one more pass
                self._sleep_between_passes(result)
        finally:
            self._stop_lanes()
            heartbeat.stop()  # after the lanes: until then, this scheduler still works
            if self._prune_thread is not None:
                self._prune_thread.stop(timeout=STOP_RECORD_SECONDS)
            self.close()
            bound_lock_waits(False)
            notify.outbox.send_in_background(False)
            notify.outbox.drain(NOTIFY_DRAIN_SECONDS)
            self._restore_signal_handlers(previous)
            logger.info("Scheduler %s stopped: %s", self.worker_id, self.counters.as_dict())

    def run_pass(self) -> PassResult:
        """Claim one batch, fire what is due, then take the runs waiting in SQL: those whose
        lease expired, those queued by run now, backfill or a released buffer, and failed
        hand-offs whose back-off ended. That take-over runs every quarter lease, when a run
        was queued (the claim says so), when the last one was a full batch, and when a
        retry this process recorded is due."""
        limit = self._claim_limit()
        leased_at = time.monotonic()
        batch, token = self.claimer.claim(limit)
        metrics = self.metrics
        if metrics is not None:
            metrics.claimed(batch.now_ms, time.monotonic() - leased_at)
        if not batch.built:
            ensure_built(
                self.index,
                built_by=self.worker_id,
                should_stop=self._stop_waiting,
                progress=self._moved_on,
            )
            return PassResult(0, True, batch.now_ms, None)
        try:
            plan = self.claimer.recheck(batch)
            committing = time.monotonic()
            occurrences, counters = self.claimer.commit(plan, token)
        except BaseException:
            self._give_back(batch, token)
            raise
        if metrics is not None and batch.entries:
            metrics.committed(time.monotonic() - committing)
        self.counters.add(counters)
        if plan.skip_reasons:
            self.skipped_by_reason.update(plan.skip_reasons)
        self._dispatch(Leased(occurrences, token, leased_at, plan.buffering, counted=True))
        periodic = time.monotonic() >= self._next_takeover
        retry_due = self.claimer.retries.take_due(batch.now_ms)
        more = False
        if (
            periodic or batch.woken or self._takeover_more or retry_due
        ) and not self._runs_exhausted():
            if periodic:
                self._next_takeover = time.monotonic() + self._takeover_every
                # Buffered runs whose release was missed (their predecessor's process died).
                self.claimer.release_buffered()
            # Its leases start at the claim's "now" (batch.now_ms), like the batch's.
            takeover_limit = self._claim_limit()
            taken, takeover, taken_counters = self.claimer.take_over_expired(
                batch.now_ms, takeover_limit
            )
            more = self._takeover_more = len(taken) >= takeover_limit
            self.counters.add(taken_counters)
            self._dispatch(Leased(taken, takeover, leased_at, counted=False))
        self._chores()
        if counters.claimed:
            logger.debug("Pass: %s", counters.as_dict())
        return PassResult(
            claimed=len(batch.entries),
            full=len(batch.entries) >= limit or more,
            now_ms=batch.now_ms,
            next_due_ms=batch.next_due_ms,
        )

    def attach_metrics(self, metrics: Metrics) -> None:
        """Observe the hot path into ``metrics`` from now on (metrics.py)."""
        self.metrics = self.claimer.metrics = metrics

    def _moved_on(self, *args: Any) -> None:
        """A long step of the loop moved on (a chunk of a rebuild): it is not stuck."""
        self.last_progress_at = time.monotonic()

    def _stop_waiting(self) -> bool:
        """Whether a wait for another process's rebuild should end; each look is progress."""
        self._moved_on()
        return self.stopping

    def _dispatch(self, leased: Leased) -> None:
        """Hand each part of a committed batch to its dispatcher's lane (at once when the
        loop is not running: ``run_pass`` called on its own)."""
        by_alias: dict[str, list[Occurrence]] = {}
        for o in leased.occurrences:
            by_alias.setdefault(DEFAULT_ALIAS if self._one_dispatcher else o.dispatcher, []).append(
                o
            )
        for alias, occurrences in by_alias.items():
            part = Leased(
                occurrences, leased.token, leased.leased_at, leased.release, counted=leased.counted
            )
            lane = self._lane(alias)
            if not self._lanes_running:
                self._dispatch_now(lane, part)
                continue
            # A lane that is behind slows the claim down (back-pressure), for a second at
            # most; past that the batch waits in the lane all the same, up to its capacity.
            # Only a lane that stays stuck fills up: then the runs stay pending, and once
            # their lease expires a take-over (here or in another scheduler) dispatches them
            # with the same keys.
            deadline = time.monotonic() + self._lane_wait
            while lane.outbox.qsize() >= DISPATCH_QUEUE_BATCHES and time.monotonic() < deadline:
                time.sleep(0.01)
            try:
                lane.outbox.put_nowait(part)
            except queue.Full:
                self.counters.lane_full += len(occurrences)
                self._give_back_hand_offs(part)
                logger.warning(
                    "The dispatcher %r is stuck: %d run(s) wait for their lease to expire "
                    "and are dispatched then, with the same keys.",
                    alias,
                    len(occurrences),
                )

    def lane_depths(self) -> dict[str, tuple[int, float | None]]:
        """Each lane's batches waiting for its dispatcher, and how long the oldest has waited
        (seconds, None when none waits). A snapshot, read from any thread."""
        now = time.monotonic()
        depths: dict[str, tuple[int, float | None]] = {}
        for alias, lane in list(self._lanes.items()):
            with lane.outbox.mutex:  # the lane's thread takes from it meanwhile
                waiting = list(lane.outbox.queue)
            oldest = min((b.leased_at for b in waiting), default=None)
            depths[alias] = (len(waiting), None if oldest is None else now - oldest)
        return depths

    def _lane(self, alias: str) -> Lane:
        lane = self._lanes.get(alias)
        if lane is None:
            lane = self._lanes[alias] = Lane(alias, _build_dispatcher(alias))
            if self._lanes_running:
                self._start(lane)
        return lane

    def _start(self, lane: Lane) -> None:
        lane.thread = threading.Thread(
            target=self._dispatch_loop,
            args=(lane,),
            name=f"schedulinator-dispatch-{lane.alias}",
            daemon=True,
        )
        lane.thread.start()

    def close(self) -> None:
        """Close every dispatcher this scheduler built or was given (but those of lanes a
        stop left still dispatching: their threads close them when they end)."""
        for lane in self._lanes.values():
            if not lane.left:
                with contextlib.suppress(Exception):
                    lane.dispatcher.close()

    def is_stopping(self) -> bool:
        """Told to stop, or its loop ended and its lanes finish what they hold."""
        return self.stopping or self._stop_grace_ends is not None

    def past_stop_grace(self) -> bool:
        """Whether the lanes should start no more hand-offs: a stop's grace is over."""
        ends = self._stop_grace_ends
        return ends is not None and time.monotonic() >= ends

    def _stop_lanes(self) -> None:
        """The end of run(): each lane dispatches and records what it holds, for one lease
        at most (the stop's grace: past it, another scheduler would take those runs over
        anyway), then starts no more hand-offs. A hand-off in progress then has as long as
        its dispatcher bounds one (an inline task's timeout, a webhook request's deadline).
        A lane still busy after that is left to end on its own: its runs not recorded stay
        pending, their leases are no longer renewed, and once they expire a take-over
        dispatches them, with the same keys."""
        self._lanes_running = False
        self._stop_grace_ends = time.monotonic() + self.lease_seconds
        for lane in self._lanes.values():
            if lane.thread is None:
                continue
            bound = lane.dispatcher.hand_off_timeout or 0.0
            lane.thread.join(
                max(0.0, self._stop_grace_ends + bound + STOP_RECORD_SECONDS - time.monotonic())
            )
            if lane.thread.is_alive():
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
            else:
                lane.thread = None
        self.leases.close()

    def _dispatch_loop(self, lane: Lane) -> None:
        bound_lock_waits()
        notify.outbox.send_in_background()  # a failed run or an auto-pause may notify
        not_started = 0
        try:
            while True:
                try:
                    leased = lane.outbox.get(timeout=LANE_IDLE_SECONDS)
                except queue.Empty:
                    if self._lanes_running:
                        continue
                    return  # stopped, and nothing left
                if self.past_stop_grace():
                    not_started += len(leased.occurrences)  # left for a take-over
                    self._give_back_hand_offs(leased)
                    continue
                try:
                    self._dispatch_now(lane, leased)
                except TRANSIENT_ERRORS as exc:
                    logger.warning(
                        "Could not dispatch or record %d run(s) (%s); they stay pending and "
                        "are dispatched again, with the same keys, once their lease expires.",
                        len(leased.occurrences),
                        exc,
                    )
                    connections.close_all()
                except Exception:
                    # The runs stay pending; once their lease expires they are taken over and
                    # dispatched again with the same keys.
                    logger.exception(
                        "Dispatching or recording %d run(s) failed.", len(leased.occurrences)
                    )
                    connections.close_all()  # reconnect on the next batch
        finally:
            if not_started:
                logger.warning(
                    "Stopped before dispatching %d run(s) of the dispatcher %r (the stop's "
                    "grace, LEASE_SECONDS, was over): they stay pending and are dispatched, "
                    "with their keys, once their lease expires.",
                    not_started,
                    lane.alias,
                )
            if lane.left:
                with contextlib.suppress(Exception):
                    lane.dispatcher.close()
            connections.close_all()  # this thread's connections

    def _dispatch_now(self, lane: Lane, leased: Leased) -> None:
        occurrences, token = leased.occurrences, leased.token
        renew_every = self.lease_seconds / 3
        renewed = leased.leased_at
        if time.monotonic() - renewed >= renew_every:
            # The batch waited behind others: renew its leases first (a fresh batch skips
            # this: no lease of it can have expired yet).
            self.claimer.renew_leases([o.run_id for o in occurrences], token)
            renewed = time.monotonic()
        # Leave out runs whose schedule was deleted or paused while the batch waited, and
        # runs another scheduler took over (it dispatches them: doing it here too would
        # deliver them twice).
        occurrences, cancelled = self._dispatchable(occurrences, token, leased.counted)
        self.counters.cancelled += cancelled
        if not occurrences:
            return
        progress = BatchProgress(self, lane.dispatcher, occurrences, token, renewed, leased.release)
        if self.metrics is not None and leased.counted:  # a fresh claim's first hand-offs
            self.metrics.handing_off(lane.alias, occurrences)
        try:
            with self.leases.keeping(progress):
                outcomes = lane.dispatcher.dispatch(occurrences, progress)
        except Exception as exc:
            outcomes = self._broken_dispatch(lane, occurrences, exc)
        progress.record(outcomes, retry=True)
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
        return [Outcome(o.run_id, "retry", error) for o in occurrences]

    def _give_back_hand_offs(self, leased: Leased) -> None:
        """A batch left for a take-over without being handed off: if its hand-offs were
        counted at the claim, they are given back (waiting uses up no attempts)."""
        if not leased.counted:
            return
        try:
            self.claimer.give_back_hand_offs([o.run_id for o in leased.occurrences], leased.token)
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
        """The claimer's check before dispatch, through a database blip: this thread's
        connection may have been dropped (a failover, pg_terminate_backend) since its last
        batch. Still failing, the batch is dispatched unchecked, as committed: it must not
        wait a whole lease for a check that only narrows a window."""
        try:
            return self.claimer.dispatchable(occurrences, token, counted=counted)
        except (OperationalError, InterfaceError):
            connections.close_all()  # this thread's: reconnect
        try:
            return self.claimer.dispatchable(occurrences, token, counted=counted)
        except (OperationalError, InterfaceError) as exc:
            connections.close_all()
            logger.warning(
                "Could not check %d run(s) against their schedules before dispatch (%s); "
                "dispatching them as committed.",
                len(occurrences),
                exc,
            )
            return occurrences, 0

    def record_outcomes(
        self,
        outcomes: list[Outcome],
        schedule_of: dict[int, int],
        dispatched_at: datetime,
        dispatcher: BaseDispatcher,
    ) -> set[int]:
        """Record outcomes, retrying through a database blip: every outcome recorded before
        the lease ends is a second delivery avoided. The schedules whose runs ended."""
        deadline = time.monotonic() + self.lease_seconds
        attempt = 0
        while True:
            try:
                return self.claimer.record(outcomes, schedule_of, dispatched_at, dispatcher)
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

    # -- periodic chores -----------------------------------------------------------------

    def _chores(self) -> None:
        now = time.monotonic()
        if self._reconcile_behind:
            self._chore("reconcile", self._reconcile_every, self._reconcile, turn=False)
        elif now >= self._next_reconcile:
            self._next_reconcile = now + self._reconcile_every * random.uniform(0.8, 1.0)
            self._chore("reconcile", self._reconcile_every, self._reconcile)
        if now >= self._next_drift:
            self._next_drift = now + self._drift_every * random.uniform(0.8, 1.0)
            self._chore("drift", self._drift_every, self._check_drift)
        if now >= self._next_missed:
            self._next_missed = now + self._missed_every * random.uniform(0.8, 1.0)
            self._chore("missed", self._missed_every, self._check_missed)
        if now >= self._next_stats:
            self._next_stats = now + self._stats_every
            self._log_summary(now)
        if now >= self._next_rebuild_look:
            self._next_rebuild_look = now + REBUILD_REQUEST_LOOK_SECONDS
            self._chore("rebuild request", 0, self._rebuild_if_asked, turn=False)
        if now >= self._next_prune:
            self._next_prune = now + self._prune_every * random.uniform(0.8, 1.0)
            if retention.enabled():  # switched off: no turn taken either
                self._chore("prune", self._prune_every, self._prune)

    def _rebuild_if_asked(self) -> None:
        """Perform a rebuild asked for on the admin's operations page, with the function
        ``manage.py rebuild_due_index`` runs, under its lock: the request only records that
        it was asked for, and the first scheduler to take it does it."""
        asked = self.index.take_rebuild_request()
        if asked is None:
            return
        by = str(asked.get("by") or "the operations page")
        try:
            report = rebuild_index(self.index, built_by=by, progress=self._moved_on)
        except RebuildInProgress:
            self.index.give_back_rebuild_request(asked)  # another process rebuilds right now
            return
        except TRANSIENT_ERRORS:
            self.index.give_back_rebuild_request(asked)  # Redis or the database went away
            raise
        except Exception:
            logger.exception(
                "The rebuild of the due index asked for by %s failed; it is not tried again "
                "until someone asks again.",
                by,
            )
            return
        logger.info(
            "Rebuilt the due index as asked by %s: %d schedules, %d entries added, %d fixed, "
            "%d removed.",
            by,
            report.rows,
            report.added,
            report.fixed,
            report.removed,
        )

    def _log_summary(self, now: float) -> None:
        """One line at INFO (run_scheduler's default verbosity) of what this process did:
        what it fired since it started and in the last period, then the other counters that
        are not zero. Counters only: nothing here costs a query or a Redis call."""
        counters = self.counters.as_dict()
        fired = counters.pop("fired")
        since, fired_then = self._last_summary
        self._last_summary = (now, fired)
        parts = [f"fired {fired:,} (+{fired - fired_then:,} in the last {now - since:.0f} s)"]
        parts += [f"{name.replace('_', ' ')} {n:,}" for name, n in counters.items() if n]
        logger.info("Scheduler %s: %s.", self.worker_id, ", ".join(parts))

    def _chore(
        self, name: str, every: float, work: Callable[[], None], *, turn: bool = True
    ) -> None:
        """Do ``work`` if this process wins the period's turn (or goes on with one it has,
        ``turn=False``); a failure waits for the next."""
        try:
            if not turn or self.index.take_turn(name, every * 0.8, self.worker_id):
                work()
        except TRANSIENT_ERRORS:
            raise  # the loop backs off and reconnects
        except Exception:
            logger.exception("The %s chore failed; the next period tries again.", name)

    def _reconcile(self) -> None:
        # One slice of at most RECONCILE_MAX_SECONDS between two claim passes: firing waits
        # that long at most, and a backlog is read slice after slice until it is caught up.
        was_behind, self._reconcile_behind = self._reconcile_behind, False
        report = reconcile(self.index)
        self._reconcile_behind = not report.caught_up
        self.counters.reconciled += report.healed
        if report.not_built:
            # Redis lost the index: the claim rebuilds it (and says so); nothing was missed.
            logger.info("Reconcile skipped: the due index is not built; the claim rebuilds it.")
            return
        if report.missed:
            logger.warning(
                "Reconcile healed %d index %s whose sync %s been missed.",
                report.missed,
                *(("entry", "write had") if report.missed == 1 else ("entries", "writes had")),
            )
        if report.unrecorded:
            logger.warning(
                "Reconcile indexed %d schedules the index had no record of: new schedules "
                "whose sync write was lost, or entries Redis lost with its data (flushed or "
                "restarted empty).",
                report.unrecorded,
            )
        if not report.caught_up and not was_behind:  # once per backlog, not every slice
            logger.info(
                "Reconcile read %d changed rows in %d batches and is still behind; it goes on "
                "after each pass until it has caught up.",
                report.rows,
                report.batches,
            )

    def _check_missed(self) -> None:
        """Raise the occurrences with no success within their grace (``alerts.check``), at
        the claim's clock; and, this scheduler being alive, end an outage noticed while
        none was."""
        alerts.no_scheduler_alive(True, index=self.index)
        now = clock.redis_or_host_time(lambda: timing.from_ms(self.claimer.now_ms()))
        self.counters.missed += len(alerts.check(now, using=self.claimer.db))

    def _prune(self) -> None:
        """Start this period's prune (retention.py) on a thread of its own: the loop goes on
        firing while it deletes. One still running from the last period goes on instead."""
        if self._prune_thread is not None and self._prune_thread.running:
            return
        now = redis_or_host_time(lambda: from_ms(self.claimer.now_ms()))
        pruner = Pruner.from_settings(now, using=self.claimer.db)
        if pruner is None:
            return  # the settings keep everything

        def count(batch: PruneReport) -> None:
            self.counters.pruned += batch.runs  # this thread is its only writer

        self._prune_thread = retention.PruneThread(pruner, on_batch=count, prepare=bound_lock_waits)
        self._prune_thread.start()

    def _check_drift(self) -> None:
        drift = check_drift(self.index)
        record_drift(self.index, drift)
        if drift.ok:
            logger.info("Index drift check: %s.", drift.summary())
        else:
            logger.warning(
                "Index drift check: %s (e.g. schedules %s); reconcile heals rows changed "
                "recently, %s heals the rest.",
                drift.summary(),
                drift.late_or_missing[:10],
                run_command("rebuild_due_index"),
            )

    def _warn_about_eviction(self) -> None:
        try:
            risk = eviction_risk(self.index.client)
        except TRANSIENT_ERRORS:
            return  # Redis is down: the loop reports that
        if risk:
            logger.warning(risk)

    # -- limits, sleeping, recovery -------------------------------------------------------

    def _runs_exhausted(self) -> bool:
        return self.max_runs is not None and self.counters.fired >= self.max_runs

    def _claim_limit(self) -> int:
        if self.max_runs is None:
            return self.batch_size
        return max(1, min(self.batch_size, self.max_runs - self.counters.fired))

    def _limit_reached(self, started: float) -> bool:
        if self._runs_exhausted():
            logger.info("Reached --max-runs %d.", self.max_runs)
            return True
        if self.max_seconds is not None and time.monotonic() - started >= self.max_seconds:
            logger.info("Reached --max-seconds %s.", self.max_seconds)
            return True
        return False

    def _sleep_seconds(self, result: PassResult, next_retry_ms: int | None = None) -> float:
        """Until the earliest due entry or retry planned here, at most a jittered maximum."""
        # Jitter keeps many idle schedulers from polling Redis in lockstep.
        ceiling = self.max_sleep * random.uniform(0.75, 1.0)
        due = [ms for ms in (result.next_due_ms, next_retry_ms) if ms is not None]
        if not due:
            return ceiling
        return max(0.0, min(ceiling, (min(due) - result.now_ms) / 1000))

    def _sleep_between_passes(self, result: PassResult) -> None:
        """Sleep as ``_sleep_seconds`` says, or less: a lane that records a failed hand-off
        meanwhile plans its retry, and if that comes before any this sleep was computed
        for, the next pass comes now (and computes the sleep again)."""
        planned = self.claimer.retries.next_ms()

        def earlier_retry() -> bool:
            earliest = self.claimer.retries.next_ms()
            return earliest is not None and (planned is None or earliest < planned)

        self._sleep(self._sleep_seconds(result, planned), wake=earlier_retry)

    def _sleep(self, seconds: float, *, wake: Callable[[], bool] | None = None) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0 or (wake is not None and wake()):
                return
            time.sleep(min(left, 0.1))

    def _give_back(self, batch: ClaimedBatch, token: str) -> None:
        """A pass that failed between its claim and its commit (the database away): its
        entries go back to the due set as they were, for the next pass, instead of waiting
        out their in-flight lease with their schedules held back. Safe even if the commit
        did land before the error: the next pass re-checks each row and repairs its entry."""
        if not batch.entries:
            return
        try:
            self.index.apply(
                [Change(sid, 0, REQUEUE, score) for sid, score in batch.entries],
                release_token=token,
            )
        except Exception as exc:  # Redis away too: the in-flight lease hands them back
            logger.warning(
                "Could not give back %d claimed entries (%s); they return when their "
                "in-flight lease ends.",
                len(batch.entries),
                exc,
            )

    def _recover(self, exc: BaseException, failures: int) -> None:
        if failures == 1:  # once per outage; "Connections are back" closes it
            logger.warning(
                "Scheduler pass failed (%s: %s); backing off and reconnecting until it works.",
                type(exc).__name__,
                exc,
            )
        # Reconnect on the next pass. (The scheduler keeps its connections open between
        # passes: with CONN_MAX_AGE = 0, close_old_connections() would reconnect every pass.)
        connections.close_all()
        # Fresh Redis connections too, but only the idle ones: the dispatch thread may be in
        # the middle of a command on another (closing it under that thread broke the
        # command with a TypeError). A broken connection in use is closed by its own thread.
        # Closing a broken socket must not stop the recovery.
        with contextlib.suppress(Exception):
            self.index.client.connection_pool.disconnect(inuse_connections=False)
        backoff = min(MAX_BACKOFF_SECONDS, 0.2 * 2 ** min(failures, 6))
        self._sleep(backoff * random.uniform(0.5, 1.0))

    # -- signals --------------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                previous[signum] = signal.signal(signum, self._on_signal)
            except ValueError:  # not the main thread (embedded use): no handlers
                return previous
        return previous

    def _restore_signal_handlers(self, previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.stopping:
            logger.warning("Second %s: exiting now; leases return unfinished work.", name)
            os._exit(128 + signum)
        logger.warning("%s received: finishing the current batch, then exiting.", name)
        self.stopping = True
