"""The scheduler's periodic chores, done between two claim passes: reconcile (in slices
until it has caught up), the drift check, the missed-run check (and the delivery of the
alerts' outbox, on the notifications' thread), the summary line, a rebuild
asked for on the admin's operations page, and retention's prune (on a thread of its own).

Each process keeps its own clock for each chore, and Redis decides which one does the chore
in a period (``DueIndex.control.take_turn``). A chore that fails waits for its next period; an
outage (``TRANSIENT_ERRORS``) goes up to the loop, which backs off and reconnects. With a
sharded index, a Redis node away (``index.health.NODE_ERRORS``: the control plane's, shard
0's, or another shard's) only makes the chore wait for its next period: the passes go on
with the shards that answer (``DueIndex.claim``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_schedulinator.conf import app_settings
from django_schedulinator.errors import RebuildInProgress
from django_schedulinator.index.health import NODE_ERRORS
from django_schedulinator.index.rebuild import rebuild_index
from django_schedulinator.index.reconcile import reconcile
from django_schedulinator.management import run_command
from django_schedulinator.operations import alerts, retention
from django_schedulinator.operations.courier import courier
from django_schedulinator.operations.index_health import check_drift, eviction_risk, record_drift
from django_schedulinator.operations.retention import Pruner, PruneReport
from django_schedulinator.scheduler.counters import Counters
from django_schedulinator.scheduler.transient import TRANSIENT_ERRORS

if TYPE_CHECKING:
    from django_schedulinator.index.due import DueIndex
    from django_schedulinator.scheduler.claiming import Claimer

logger = logging.getLogger("django_schedulinator.worker")

# How often each scheduler looks for a rebuild asked for on the admin's operations page.
REBUILD_REQUEST_LOOK_SECONDS = 2.0


class Chores:
    """The chores of one scheduler, with a clock of its own for each."""

    def __init__(
        self,
        *,
        index: DueIndex,
        claimer: Claimer,
        counters: Counters,
        worker_id: str,
        moved_on: Callable[[int], None],
    ) -> None:
        """``moved_on`` is told when a long chore (a rebuild) moves on: it is not stuck."""
        self.index = index
        self.claimer = claimer
        self.counters = counters
        self.worker_id = worker_id
        self.moved_on = moved_on
        self._reconcile_every = app_settings.RECONCILE_SECONDS
        self._drift_every = app_settings.DRIFT_CHECK_SECONDS
        self._stats_every = app_settings.LOG_STATS_SECONDS
        self._missed_every = app_settings.MISSED_CHECK_SECONDS
        self._next_missed = 0.0
        self._next_reconcile = 0.0
        # This process holds reconcile's turn and has not caught up yet: it reads another
        # slice after each pass, without sleeping between, until it has.
        self.reconcile_behind = False
        self._next_drift = time.monotonic() + self._drift_every * random.uniform(0.1, 1.0)
        self._next_stats = time.monotonic() + self._stats_every
        self._next_rebuild_look = 0.0  # when to look for a rebuild asked for in the admin
        # Retention: soon after a start (the turn keeps it to one prune per period across
        # the fleet, so schedulers that never live a whole period still prune), then each
        # period, on a thread of its own (retention.PruneThread) that the loop never waits for.
        self._prune_every = app_settings.PRUNE_SECONDS
        self.next_prune = time.monotonic() + min(60.0, self._prune_every) * random.uniform(0, 1)
        self.prune_thread: retention.PruneThread | None = None
        self._last_summary = (time.monotonic(), 0)  # when, and the fired count then

    def run(self) -> None:
        """The chores whose time has come (after each pass)."""
        now = time.monotonic()
        if self.reconcile_behind:
            self._chore(
                "reconcile", self._reconcile_every, self.reconcile, turn=False, entries=True
            )
        elif now >= self._next_reconcile:
            self._next_reconcile = now + self._reconcile_every * random.uniform(0.8, 1.0)
            self._chore("reconcile", self._reconcile_every, self.reconcile, entries=True)
        if now >= self._next_drift:
            self._next_drift = now + self._drift_every * random.uniform(0.8, 1.0)
            self._chore("drift", self._drift_every, self.drift_check, entries=True)
        if now >= self._next_missed:
            self._next_missed = now + self._missed_every * random.uniform(0.8, 1.0)
            self._chore("missed", self._missed_every, self.missed_check)
        if now >= self._next_stats:
            self._next_stats = now + self._stats_every
            self._log_summary(now)
        if now >= self._next_rebuild_look:
            self._next_rebuild_look = now + REBUILD_REQUEST_LOOK_SECONDS
            self._chore("rebuild request", 0, self._rebuild_if_asked, turn=False, entries=True)
        if now >= self.next_prune:
            self.next_prune = now + self._prune_every * random.uniform(0.8, 1.0)
            if retention.enabled():  # switched off: no turn taken either
                self._chore("prune", self._prune_every, self._prune)

    def stop(self, timeout: float) -> None:
        """The loop ended: let a prune in progress end its batch, ``timeout`` at most."""
        if self.prune_thread is not None:
            self.prune_thread.stop(timeout=timeout)

    def warn_about_eviction(self) -> None:
        """Warn, at a start, when Redis may evict the index's keys."""
        try:
            risk = eviction_risk(self.index.client)
        except TRANSIENT_ERRORS:
            return  # Redis is down: the loop reports that
        if risk:
            logger.warning(risk)

    def _chore(
        self,
        name: str,
        every: float,
        work: Callable[[], None],
        *,
        turn: bool = True,
        entries: bool = False,
    ) -> None:
        """Do ``work`` if this process wins the period's turn (or goes on with one it has,
        ``turn=False``); a failure waits for the next. ``entries``: the work reads or writes
        every shard's entries (else only the control plane's keys, shard 0's node)."""
        away = self.index.health.away if self.index.shard_count > 1 else []
        if away and (entries or 0 in away):
            # A node it needs is away (its probe waits for it): not called now, the chore
            # waits for its next period.
            logger.debug("The %s chore waits: shard(s) %s of the due index away.", name, away)
            return
        try:
            if not turn or self.index.control.take_turn(name, every * 0.8, self.worker_id):
                work()
        except NODE_ERRORS as exc:
            if self.index.shard_count == 1:
                raise  # the index's one node: the loop backs off and reconnects
            # Sharded, the claim goes on with the shards that answer: a chore that needs
            # a node that is away (the control plane's, shard 0's, or a shard's) waits for
            # its next period instead of failing the pass. What it did not do is done then:
            # its turn was not taken, an outage mark not ended stays, reconcile's cursor
            # did not move.
            logger.info(
                "The %s chore waits for its next period: a node of the due index is away (%s: %s).",
                name,
                type(exc).__name__,
                exc,
            )
        except TRANSIENT_ERRORS:
            raise  # the loop backs off and reconnects
        except Exception:
            logger.exception("The %s chore failed; the next period tries again.", name)

    def reconcile(self) -> None:
        """One slice of at most RECONCILE_MAX_SECONDS between two claim passes: firing waits
        that long at most, and a backlog is read slice after slice until it is caught up."""
        was_behind, self.reconcile_behind = self.reconcile_behind, False
        report = reconcile(self.index)
        self.reconcile_behind = not report.caught_up
        self.counters.add(Counters(reconciled=report.healed))
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

    def _rebuild_if_asked(self) -> None:
        """Perform a rebuild asked for on the admin's operations page, with the function
        ``manage.py rebuild_due_index`` runs, under its lock: the request only records that
        it was asked for, and the first scheduler to take it does it."""
        asked = self.index.control.take_rebuild_request()
        if asked is None:
            return
        by = str(asked.get("by") or "the operations page")
        try:
            report = rebuild_index(self.index, built_by=by, progress=self.moved_on)
        except RebuildInProgress:
            self.index.control.give_back_rebuild_request(
                asked
            )  # another process rebuilds right now
            return
        except TRANSIENT_ERRORS:
            self.index.control.give_back_rebuild_request(asked)  # Redis or the database went away
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

    def missed_check(self) -> None:
        """Raise the occurrences with no success within their grace (``alerts.check``), at
        the claim's clock, then have the outbox delivered (on the courier's thread:
        ``operations.courier``); and, this scheduler being alive, end an outage noticed while
        none was."""
        alerts.no_scheduler_alive(True, index=self.index)
        missed = alerts.check(self.claimer.clock.now(), using=self.claimer.db)
        self.counters.add(Counters(missed=len(missed)))
        # Every period, not only after a miss: what waits for its back-off goes again.
        courier.deliver_outbox(using=self.claimer.db)

    def _prune(self) -> None:
        """Start this period's prune (retention.py) on a thread of its own: the loop goes on
        firing while it deletes. One still running from the last period goes on instead."""
        if self.prune_thread is not None and self.prune_thread.running:
            return
        pruner = Pruner.from_settings(self.claimer.clock.now(), using=self.claimer.db)
        if pruner is None:
            return  # the settings keep everything

        def count(batch: PruneReport) -> None:
            # On the prune's thread, while the loop's threads count too: under the lock.
            self.counters.add(Counters(pruned=batch.runs))

        self.prune_thread = retention.PruneThread(pruner, on_batch=count)
        self.prune_thread.start()

    def drift_check(self) -> None:
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
