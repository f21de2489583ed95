"""The scheduler loop behind ``manage.py run_scheduler``.

Any number of workers may run on any number of hosts, with no leader: the claim script, the
conditional SQL advance and the ledger's unique constraint keep every occurrence to one
process. Between passes a worker sleeps until the earliest due entry, or a jittered maximum.

The loop claims and re-checks; while it runs, each batch commits on the commit stage's
thread (pipeline.py) as the next is claimed. Its lanes (lanes.py) dispatch and record, its
leases are kept by leases.py, and its periodic chores are in chores.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.utils import timezone

from django_schedulinator.conf import MAX_BATCH_SIZE, app_settings
from django_schedulinator.dispatch import BaseDispatcher, dispatchers
from django_schedulinator.errors import OutdatedZoneRules
from django_schedulinator.index.due import REQUEUE, Change, ClaimedBatch, DueIndex, get_index
from django_schedulinator.index.rebuild import ensure_built, layout_message
from django_schedulinator.operations.courier import courier
from django_schedulinator.operations.heartbeat import HeartbeatKeeper
from django_schedulinator.operations.stage import stage_thread
from django_schedulinator.scheduler.chores import Chores
from django_schedulinator.scheduler.claiming import Claimer, Plan
from django_schedulinator.scheduler.counters import Counters
from django_schedulinator.scheduler.lanes import STOP_RECORD_SECONDS, Lanes
from django_schedulinator.scheduler.leases import Leased
from django_schedulinator.scheduler.pipeline import CommitStage
from django_schedulinator.scheduler.transient import TRANSIENT_ERRORS, bound_lock_waits

if TYPE_CHECKING:
    from django_schedulinator.operations.metrics import Metrics

logger = logging.getLogger("django_schedulinator.worker")

MAX_BACKOFF_SECONDS = 5.0
# The longest a stop waits for the notifications still queued to be sent.
NOTIFY_DRAIN_SECONDS = 5.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(slots=True)
class PassResult:
    claimed: int
    full: bool  # the batch was full: more may be due right now
    now_ms: int
    next_due_ms: int | None


class Worker:
    """One scheduler: ``run`` loops over ``run_pass`` (claim, re-check, commit, hand the
    batch to its lane, take over what waits in SQL, the chores that are due) until told to
    stop or a ``--max-*`` limit is reached, backing off from outages in between."""

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
        # A shard whose node is away is probed, not called, until it answers (health.py),
        # on a thread beside the loop like the others.
        self.index.watch_shards(stage_thread)
        self.claimer = Claimer(
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            index=self.index,
            clock=clock,
        )
        self.counters = Counters()
        # The runs it commits, from their commit to their recorded outcome (held.py).
        self.held = self.claimer.held_runs()
        self.held.counters = self.counters
        self.lanes = Lanes(self.held, self.counters, self.lease_seconds, dispatcher)
        self.dispatcher = self.lanes.dispatcher
        # While the loop runs, batches commit on a thread of their own (pipeline.py).
        self.commits = CommitStage(
            self._commit, lambda plan, token: self._give_back(plan.batch, token)
        )
        self.chores = Chores(
            index=self.index,
            claimer=self.claimer,
            counters=self.counters,
            worker_id=self.worker_id,
            moved_on=self._moved_on,
        )
        self.stopping = False
        # Why the loop ended on its own, if it refused to go on (run_scheduler exits 1).
        self.exit_error = ""
        self.stop_signal = ""  # the signal that stopped the loop (set by _on_signal)
        self._stop_signal_logged = False
        # The shard count the index was built for, when it is not this process's (logged
        # once per value).
        self._other_layout: int | None = None
        # When --max-seconds is up (time.monotonic(), set by run()): the loop, its sleeps,
        # its back-off from an outage and its wait for another process's rebuild end then.
        self._ends_at: float | None = None
        # Pending runs whose lease expired are looked for a few times per lease.
        self._takeover_every = max(self.lease_seconds / 4, 0.5)
        self._next_takeover = 0.0
        self._takeover_more = False  # the last take-over was a full batch: more may wait
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

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        """Pass after pass, until a stop (a signal, ``once``, a limit) or time-zone rules
        older than those recorded; a pass that fails on a transient error is backed off
        from, and the next one tried."""
        previous = self._install_signal_handlers()
        heartbeat = self._begin()
        failures = 0
        try:
            while not self.stopping:
                try:
                    result = self.run_pass()
                except OutdatedZoneRules as exc:
                    # Never plans with rules older than those recorded: stops, and says why.
                    logger.error("%s", exc)
                    self.last_error = self.exit_error = str(exc)
                    break
                except TRANSIENT_ERRORS as exc:
                    failures += 1
                    self._recover(exc, failures)
                    if self._limit_reached():
                        break  # an outage does not outlast --max-seconds or --max-runs
                    continue
                failures = self._passed(failures)
                if self._limit_reached() or (self.once and not result.full):
                    break
                # A full batch, or reconcile's backlog, goes on at once: no sleep.
                if not result.full and not self.chores.reconcile_behind:
                    self._sleep_between_passes(result)
        finally:
            self._end(heartbeat)
            self._restore_signal_handlers(previous)

    def _begin(self) -> HeartbeatKeeper:
        """Start what runs beside the loop; returns the started heartbeat."""
        started = time.monotonic()
        self._ends_at = None if self.max_seconds is None else started + self.max_seconds
        logger.info(
            "Scheduler %s started (batch %d, lease %.0fs).",
            self.worker_id,
            self.batch_size,
            self.lease_seconds,
        )
        self.started_at = timezone.now()
        self.last_pass_at, self.last_error = None, ""
        self.last_progress_at = started  # the loop starts: its first pass comes
        self._start_stages()
        bound_lock_waits()
        courier.send_in_background()  # never on the claim path
        self.chores.warn_about_eviction()
        heartbeat = HeartbeatKeeper(self, self.index)
        heartbeat.start()
        return heartbeat

    def _passed(self, failures: int) -> int:
        """Note a pass that worked (after ``failures`` that did not); the failures now: 0."""
        self.last_pass_at = self.last_progress_at = time.monotonic()
        self.last_error = ""
        if failures:
            logger.warning("Connections are back after %d failed pass(es).", failures)
        return 0

    def _end(self, heartbeat: HeartbeatKeeper) -> None:
        """Stop what runs beside the loop, the lanes first: until they end, this scheduler
        still works (its heartbeat goes on)."""
        self._log_stop_signal()
        self._stop_stages()
        heartbeat.stop()
        self.chores.stop(timeout=STOP_RECORD_SECONDS)
        self.close()
        bound_lock_waits(False)
        courier.send_in_background(False)
        courier.drain(NOTIFY_DRAIN_SECONDS)
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
        if batch.other_layout is not None:
            # Built for another INDEX_SHARDS: said once, and nothing claimed until
            # rebuild_due_index rebuilds it (a scheduler never switches the layout itself).
            if batch.other_layout != self._other_layout:
                logger.error(layout_message(batch.other_layout, self.index.shard_count))
            self._other_layout = batch.other_layout
            return PassResult(0, False, batch.now_ms, None)
        self._other_layout = None
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
            # Committed on the stage's thread while the next pass claims (pipeline.py).
            self.commits.put(plan, token, leased_at)
            if self.max_runs is not None:
                self.commits.drain()  # the limit counts what this batch fired
        except BaseException:
            self._give_back(batch, token)
            raise
        more = self._take_over(batch, leased_at)
        full = len(batch.entries) >= limit or more
        if self.once and not full:
            # The last pass of --once: its chores (the summary line) count what it fired.
            self.commits.drain()
        self.chores.run()
        return PassResult(
            claimed=len(batch.entries),
            full=full,
            now_ms=batch.now_ms,
            next_due_ms=batch.next_due_ms,
        )

    def _take_over(self, batch: ClaimedBatch, leased_at: float) -> bool:
        """Take the runs waiting in SQL, when it is time (see ``run_pass``), and hand them
        to their lanes; whether there may be more than one take-over's worth."""
        periodic = time.monotonic() >= self._next_takeover
        retry_due = self.held.retries.take_due(batch.now_ms)
        wanted = periodic or batch.woken or self._takeover_more or retry_due
        if not wanted or self._runs_exhausted():
            return False
        if periodic:
            self._next_takeover = time.monotonic() + self._takeover_every
            # Buffered runs whose release was missed (their predecessor's process died).
            self.held.release_buffered()
        # Its leases start at the claim's "now" (batch.now_ms), like the batch's.
        limit = self._claim_limit()
        taken, takeover, counters = self.claimer.take_over_expired(batch.now_ms, limit)
        self._takeover_more = len(taken) >= limit
        self.counters.add(counters)
        self.lanes.put(Leased(taken, takeover, leased_at, counted=False))
        return self._takeover_more

    def _commit(self, plan: Plan, token: str, leased_at: float) -> None:
        """Commit a re-checked batch and hand what fired to its lane."""
        committing = time.monotonic()
        occurrences, counters = self.claimer.commit(plan, token)
        if self.metrics is not None and plan.batch.entries:
            self.metrics.committed(time.monotonic() - committing)
        self.counters.add(counters)
        if counters.claimed:
            logger.debug("Pass: %s", counters.as_dict())
        if plan.skip_reasons:
            self.skipped_by_reason.update(plan.skip_reasons)
        self.lanes.put(Leased(occurrences, token, leased_at, plan.buffering, counted=True))

    def attach_metrics(self, metrics: Metrics, *, port: int | None = None) -> None:
        """Observe the hot path into ``metrics`` from now on (metrics.py); ``port``: where
        they are served (the heartbeat says so)."""
        self.metrics = self.held.metrics = self.lanes.metrics = metrics
        self.metrics_port = port

    def _moved_on(self, *args: Any) -> None:
        """A long step of the loop moved on (a chunk of a rebuild): it is not stuck."""
        self.last_progress_at = time.monotonic()

    def _stop_waiting(self) -> bool:
        """Whether a wait for another process's rebuild should end; each look is progress."""
        self._moved_on()
        return self._should_end()

    def _should_end(self) -> bool:
        """Told to stop, or --max-seconds is up."""
        return self.stopping or (self._ends_at is not None and time.monotonic() >= self._ends_at)

    def lane_depths(self) -> dict[str, tuple[int, float | None]]:
        """Each lane's batches waiting, and how long the oldest has waited (lanes.py)."""
        return self.lanes.depths()

    def recorder_backlog(self) -> tuple[int, int, float | None]:
        """Batches and outcomes handed to the recorder and not written yet, and how long
        ago the oldest was handed over (recording.py)."""
        return self.lanes.recorder_backlog()

    def step(self) -> PassResult:
        """One pass, then wait until its stages are idle: what it fired is committed,
        dispatched and its outcomes recorded when this returns. For driving the scheduler
        pass by pass (tests, embedding); ``run`` is the same passes, without the waits."""
        with self.stages():
            result = self.run_pass()
            self.drain()
        return result

    @contextlib.contextmanager
    def stages(self) -> Iterator[None]:
        """The stages running (the commit stage, the lanes and the recorder, each a thread
        of its own), as the loop runs them, for passes driven one by one (``step``,
        benchmarks); stopped on leaving, as at the loop's end. Already running: left so."""
        if self.commits.running:
            yield
            return
        self._start_stages()
        try:
            yield
        finally:
            self._stop_stages()

    def drain(self) -> None:
        """Wait until the stages are idle: the commit, then the lanes, then the recorder
        (each hands to the next), then the notifications they raised. Raises a failed
        commit's error (its batch given back)."""
        self.commits.drain()
        self.lanes.drain()
        courier.drain(NOTIFY_DRAIN_SECONDS)

    def close(self) -> None:
        """Close every dispatcher this scheduler built or was given (lanes.py), and this
        thread's instances of the aliases (``dispatchers``: validation and the status)."""
        self.lanes.close()
        dispatchers.close_all()

    def _start_stages(self) -> None:
        self.lanes.start()
        self.commits.start()

    def _stop_stages(self) -> None:
        self.commits.stop()  # the batch it commits goes to its lane before the lanes stop
        self.lanes.stop()

    def is_stopping(self) -> bool:
        """Told to stop, or its loop ended and its lanes finish what they hold."""
        return self.stopping or self.lanes.stop_grace_ends is not None

    # -- limits, sleeping, recovery -------------------------------------------------------

    def _runs_exhausted(self) -> bool:
        return self.max_runs is not None and self.counters.fired >= self.max_runs

    def _claim_limit(self) -> int:
        if self.max_runs is None:
            return self.batch_size
        return max(1, min(self.batch_size, self.max_runs - self.counters.fired))

    def _limit_reached(self) -> bool:
        if self._runs_exhausted():
            logger.info("Reached --max-runs %d.", self.max_runs)
            return True
        if self._ends_at is not None and time.monotonic() >= self._ends_at:
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
        planned = self.held.retries.next_ms()

        def earlier_retry() -> bool:
            earliest = self.held.retries.next_ms()
            return earliest is not None and (planned is None or earliest < planned)

        self._sleep(self._sleep_seconds(result, planned), wake=earlier_retry)

    def _sleep(self, seconds: float, *, wake: Callable[[], bool] | None = None) -> None:
        """Sleep ``seconds``, less if woken, told to stop or out of --max-seconds."""
        deadline = time.monotonic() + seconds
        while not self._should_end():
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
        """Back off from a pass that failed on a transient error (the ``failures``-th in a
        row) and reconnect."""
        self.last_error = f"{type(exc).__name__}: {exc}"
        # Not stuck: backing off from an outage that a restart would not end.
        self.last_progress_at = time.monotonic()
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
        # It runs between two bytecodes of the main thread, maybe inside a log line's write:
        # logging here can fail ("reentrant call") before the flag is set, and leave the
        # scheduler running. So: set the flag and do no I/O; the loop logs it
        # (_log_stop_signal). A second signal exits at once, with one raw write.
        name = signal.Signals(signum).name
        if self.stopping:
            with contextlib.suppress(OSError):
                os.write(
                    2, f"Second {name}: exiting now; leases return unfinished work.\n".encode()
                )
            os._exit(128 + signum)
        self.stopping = True
        self.stop_signal = name

    def _log_stop_signal(self) -> None:
        if self.stop_signal and not self._stop_signal_logged:
            self._stop_signal_logged = True
            logger.warning(
                "%s received: finishing the current batch, then exiting.", self.stop_signal
            )
