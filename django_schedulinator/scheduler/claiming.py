"""Claim due entries, re-check their rows, and decide in SQL which occurrences fire.

One pass over a batch costs one claim script, one read query, one transaction (conditional
advance plus the new runs) and one index script, whatever the batch size:

1. ``claim``: Redis moves up to N entries with score <= Redis TIME into the in-flight set,
   each leased to this process. The same "now" is used for every decision below.
2. ``recheck``: the rows are read in one query. A deleted, disabled or finished row leaves
   the index; a row not due yet is re-indexed at its true time (a repair: the entry was
   stale, it never fires early). For each due row, ``timing.plan_due`` decides what fires
   (catch-up), what is skipped and where the schedule goes next; schedules with an overlap
   policy are then checked against their runs in progress (one more query, only for them).
3. ``commit``: due rows advance with a conditional UPDATE that only matches the revision
   that was read, and their runs (pending, buffered and skipped) are inserted in the same
   transaction. Then the index gets the new next runs and the in-flight entries are
   released (on a sharded index, by every shard that answers: one whose node is away
   keeps its entries in flight until their lease ends; the fired runs still go). A crash
   before the commit leaves the in-flight entries, whose leases expire and return them to
   the due set; a crash after it leaves pending Runs, which
   ``take_over_expired`` dispatches again with the same idempotency key.
4. The caller dispatches the occurrences and ``record``s the outcomes.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import OperationalError, router
from django.db.models import Subquery

from django_schedulinator import services, signals, timing
from django_schedulinator.conf import app_settings
from django_schedulinator.dispatch.base import Occurrence
from django_schedulinator.errors import OutdatedZoneRules, TimingError
from django_schedulinator.index.due import (
    FORGET,
    REMOVE,
    REQUEUE,
    SET,
    Change,
    ClaimedBatch,
    DueIndex,
    ShardsAway,
    get_index,
)
from django_schedulinator.index.sync import belongs_in_index, change_for_row
from django_schedulinator.models import (
    Run,
    Schedule,
    ZoneRules,
    alert_time,
    catch_up_policy,
    day_calendar,
    load_calendars,
)
from django_schedulinator.models.batches import (
    Advance,
    ClaimedRuns,
    NewRun,
    PreparedQuery,
    is_lock_timeout,
    json_ids,
)
from django_schedulinator.models.keys import occurrence_key
from django_schedulinator.models.spans import Span
from django_schedulinator.scheduler.counters import Counters
from django_schedulinator.scheduler.held import HeldRuns
from django_schedulinator.scheduler.now import LoopClock
from django_schedulinator.services import ledger
from django_schedulinator.timing import zonedata

logger = logging.getLogger("django_schedulinator.claiming")

ROW_FIELDS = (
    "pk", "revision", "enabled", "next_run_at", "due_at", "kind", "cron", "interval",
    "run_at", "timezone", "start_at", "end_at", "anchor_at", "dst_gap", "dst_fold", "jitter",
    "day_rule", "solar_event", "latitude", "longitude", "solar_offset", "catch_up",
    "catch_up_window", "overlap", "calendars", "calendar_rule", "max_runs", "run_count",
    "task", "args", "kwargs", "dispatcher", "dispatch_options", "name", "grace",
    "decided_moves",
)  # fmt: skip
# The slice of ROW_FIELDS a due plan depends on (next_run_at to catch_up_window), with the
# calendars and their rule.
PLAN_FIELDS = slice(ROW_FIELDS.index("next_run_at"), ROW_FIELDS.index("overlap"))
RUN_FIELDS = (
    "pk", "schedule_id", "schedule__name", "task", "args", "kwargs", "dispatcher",
    "dispatch_options", "scheduled_for", "attempts",
)  # fmt: skip
# The read of every pass, compiled once (batches.PreparedQuery): the claimed rows, each
# with the tz release the next runs were planned with (``Claimer._check_zone_rules``), read
# in the same statement: one round trip of the loop's, and one snapshot for both.
RECHECK = PreparedQuery(
    lambda ids: Schedule.objects.filter(pk__in=ids).annotate(
        planned_with=Subquery(ZoneRules.objects.filter(pk=1).values("version")[:1])
    ),
    (*ROW_FIELDS, "planned_with"),
)
# A row whose timing cannot be evaluated (it reached SQL around validation) is looked at
# again after this long instead of spinning.
INVALID_RETRY = timedelta(minutes=1)
# A due row that another transaction holds locked is looked at again after this long.
LOCKED_RETRY = timedelta(seconds=1)


def new_token() -> str:
    return secrets.token_hex(8)


@dataclass(slots=True)
class Due:
    """One due row and what its claim does: the runs it fires, buffers and skips."""

    row: Any  # a named row of ROW_FIELDS
    plan: timing.DuePlan
    buffer: list[datetime] = field(default_factory=list)

    @property
    def advance(self) -> Advance:
        row, plan = self.row, self.plan
        fired = len(plan.fire) + len(self.buffer)
        return Advance(row.pk, row.revision, plan.next_run_at, plan.due_at, fired, plan.through)


@dataclass(slots=True)
class Plan:
    """What a re-check decided for one claimed batch."""

    batch: ClaimedBatch
    counters: Counters
    changes: list[Change] = field(default_factory=list)
    due: list[Due] = field(default_factory=list)
    # Schedules whose overlap policy buffers and that fire here: their buffered run is
    # released once the runs fired here are recorded.
    buffering: set[int] = field(default_factory=set)
    # Stale entries re-indexed at their row's time: (schedule id, entry ms, row's due ms).
    repaired: list[tuple[int, int, int]] = field(default_factory=list)
    # What the commit recorded as skipped, by reason (counters.skipped is their sum).
    skip_reasons: dict[str, int] = field(default_factory=dict)


def _runs_of(due: Due) -> list[NewRun]:
    """The ledger rows of one due schedule: fired (pending; the insert leases them to this
    claim and counts the hand-off that follows under that lease: a batch that is not handed
    off after all gives it back), buffered (waiting for the previous run), skipped. With a
    grace, the fired and buffered ones are missed at their nominal time plus the grace."""
    row, grace = due.row, due.row.grace
    if grace is None and not due.buffer and not due.plan.skips:
        # The bulk of a burst: pending runs alone, NewRun's defaults (built positionally).
        snapshot = (row.task, row.args, row.kwargs, row.dispatcher, row.dispatch_options)
        return [NewRun(row.pk, at, *snapshot) for at in due.plan.fire]
    return [
        *(NewRun.of(row, at, alert_at=alert_time(grace, at)) for at in due.plan.fire),
        *(
            NewRun.of(row, at, status=Run.Status.BUFFERED, attempts=0,
                      alert_at=alert_time(grace, at))
            for at in due.buffer
        ),
        *(
            NewRun.of(row, skip.at, status=Run.Status.SKIPPED, skip_reason=skip.reason,
                      note=skip.note)
            for skip in due.plan.skips
        ),
    ]  # fmt: skip


class Claimer:
    """The fire path of a scheduler: claim due entries, re-check their rows, commit what
    fires (``commit``), and take over the runs whose lease expired. What happens to the
    runs it committed until their outcome is recorded is ``held.HeldRuns``'s."""

    def __init__(
        self,
        *,
        worker_id: str,
        lease_seconds: float,
        index: DueIndex | None = None,
        using: str | None = None,
        clock: LoopClock | Callable[[], int] | None = None,
    ) -> None:
        """``clock``: the scheduler's (``now.LoopClock``), or a function that returns "now"
        in epoch ms in place of Redis TIME (tests that control time)."""
        self.worker_id = worker_id
        self.lease = timedelta(seconds=lease_seconds)
        self.index = index or get_index()
        self.db = using or router.db_for_write(Schedule)
        self.clock = clock if isinstance(clock, LoopClock) else LoopClock(self.index, clock)
        # The tz database release this process plans with (None: it cannot tell).
        self.zone_rules = zonedata.release_in_use()

    def held_runs(self) -> HeldRuns:
        """What becomes of the runs this claimer commits, on the same clock and database."""
        lease = self.lease.total_seconds()
        return HeldRuns(clock=self.clock, lease_seconds=lease, index=self.index, using=self.db)

    # -- 1. claim -------------------------------------------------------------------------

    def claim(self, limit: int) -> tuple[ClaimedBatch, str]:
        token = new_token()
        lease_ms = int(self.lease.total_seconds() * 1000)
        return self.index.claim(limit, lease_ms, token, self.clock.claim_ms()), token

    # -- 2. re-check ----------------------------------------------------------------------

    def recheck(self, batch: ClaimedBatch) -> Plan:
        """Read the claimed rows in one query and decide what each entry calls for."""
        plan = Plan(batch, Counters(claimed=len(batch.entries), leases_expired=batch.requeued))
        if not batch.entries:
            return plan
        now = timing.from_ms(batch.now_ms)
        ids = [sid for sid, _score in batch.entries]
        entry_ms = dict(batch.entries)
        rows = {row.pk: row for row in RECHECK.rows(self.db, ids)}
        if rows:
            self._check_zone_rules(next(iter(rows.values())).planned_with)
        counters = plan.counters
        defaults = catch_up_policy("", None)
        skips_recorded = app_settings.MAX_SKIPS_RECORDED
        # A plan depends only on the timing, the due times, the policy and "now": rows that
        # share them (a burst of like schedules) share one. Jitter is per schedule: not shared.
        plans: dict[tuple[Any, ...], timing.DuePlan] = {}
        # The calendars the batch's schedules name, in one read (their days only when they
        # changed since this process read them).
        named = {name for row in rows.values() for name in (row.calendars or ())}
        loaded = load_calendars(named, using=self.db) if named else {}
        for sid in ids:
            row = rows.get(sid)
            if row is None:
                plan.changes.append(Change(sid, 0, FORGET))
                counters.dropped += 1
                continue
            if not belongs_in_index(row.enabled, row.next_run_at):
                plan.changes.append(Change(sid, row.revision, REMOVE))
                counters.dropped += 1
                continue
            stored = timing.stored_due_at(row.next_run_at, row.due_at, row.jitter)
            due_at = stored or row.next_run_at
            due_ms = timing.to_ms(due_at)
            if due_ms > batch.now_ms:
                # The index said due, the row says later: trust the row, fix the index.
                plan.changes.append(Change(sid, row.revision, SET, due_ms))
                plan.repaired.append((sid, entry_ms[sid], due_ms))
                counters.repaired += 1
                logger.debug("Repaired the stale entry of schedule %s (due %s).", sid, due_at)
                continue
            runs_left = None if row.max_runs is None else row.max_runs - row.run_count
            # Not shared: jitter is per schedule. The calendars' days are the batch's own
            # (``loaded``): their names and the rule name them.
            key = None
            if not row.jitter:
                rule = row.calendar_rule if row.calendars else ""
                moves = tuple(map(tuple, row.decided_moves or ())) if row.calendars else ()
                key = (*row[PLAN_FIELDS], runs_left, tuple(row.calendars or ()), rule, moves)
            shared = plans.get(key) if key else None
            if shared is not None:
                plan.due.append(Due(row, shared))
                continue
            policy = defaults
            if row.catch_up or row.catch_up_window:
                policy = replace(
                    defaults,
                    mode=row.catch_up or defaults.mode,
                    window=row.catch_up_window or defaults.window,
                )
            try:
                calendar = None
                if row.calendars:
                    calendar = day_calendar(
                        row.calendars, row.calendar_rule, using=self.db, loaded=loaded
                    )
                due_plan = timing.plan_due(
                    timing.Timing.of(row, calendar),
                    policy,
                    schedule_id=sid,
                    # Whole milliseconds, like every instant the app writes: a row written
                    # around save() may hold more, and the occurrence (its key, its run)
                    # must be the one the key names.
                    nominal=timing.truncate_ms(row.next_run_at),
                    due_at=stored,
                    now=now,
                    runs_left=runs_left,
                    skips_recorded=skips_recorded,
                )
            except (TimingError, OverflowError) as exc:
                logger.error("Schedule %s (%r) cannot be evaluated: %s", sid, row.name, exc)
                retry_ms = timing.to_ms(now + INVALID_RETRY)
                plan.changes.append(Change(sid, row.revision, REQUEUE, retry_ms))
                counters.invalid += 1
                continue
            if key:
                plans[key] = due_plan
            plan.due.append(Due(row, due_plan))
        self._apply_overlap(plan)
        if counters.repaired:
            logger.info(
                "Repaired %d stale index entr%s: not due yet, re-indexed at the row's time.",
                counters.repaired,
                "y" if counters.repaired == 1 else "ies",
            )
        return plan

    def _check_zone_rules(self, planned_with: str | None) -> None:
        """Refuse to plan (``OutdatedZoneRules``) when the next runs were planned with a
        newer tz database than this process reads: during a rolling restart, a process not
        restarted yet would plan the next runs with the old rules. ``planned_with`` is read
        with the rows, in one snapshot: a re-plan that commits after it changed their
        revision, so this batch's advance loses instead (``services.replan_for_zone_rules``).
        None: no release recorded."""
        if self.zone_rules is None or planned_with is None:
            return
        if zonedata.newer(planned_with, self.zone_rules):
            raise OutdatedZoneRules(zonedata.outdated_message(planned_with, self.zone_rules))

    def _apply_overlap(self, plan: Plan) -> None:
        """Hold back what the overlap policies forbid: runs of schedules whose previous run
        is still in progress are skipped, or buffered (one)."""
        guarded = [d for d in plan.due if d.row.overlap != timing.Overlap.ALLOW and d.plan.fire]
        if not guarded:
            return
        busy: set[int] = set()
        waiting: set[int] = set()
        for sid, status in (
            Run.objects.using(self.db)
            .in_progress(timing.from_ms(plan.batch.now_ms))
            .filter(schedule_id__in=json_ids([d.row.pk for d in guarded], self.db))
            .values_list("schedule_id", "status")
        ):
            (waiting if status == Run.Status.BUFFERED else busy).add(sid)
        for due in guarded:
            sid, fire = due.row.pk, list(due.plan.fire)
            run, held = ([], fire) if sid in busy else (fire[:1], fire[1:])
            if due.row.overlap == timing.Overlap.BUFFER:
                if run:  # its buffered successor may go once this run is recorded
                    plan.buffering.add(sid)
                if sid not in waiting and held:
                    due.buffer = held[:1]
                    held = held[1:]
            note = (
                f"The schedule's previous run was still in progress (overlap {due.row.overlap!r})."
            )
            skips = [timing.Skip(at, timing.SkipReason.OVERLAP, note) for at in held]
            # A new plan: rows with the same timing may share the old one.
            due.plan = replace(due.plan, fire=run, skips=sorted(due.plan.skips + skips))

    # -- 3. commit ------------------------------------------------------------------------

    def commit(self, plan: Plan, token: str) -> tuple[list[Occurrence], Counters]:
        """One transaction: advance the due rows that still hold what was read, insert their
        runs; then write the index and release this claim's in-flight entries."""
        batch, counters, changes = plan.batch, plan.counters, plan.changes
        occurrences: list[Occurrence] = []
        if plan.due:
            now = timing.from_ms(batch.now_ms)
            try:
                moved, locked, inserted = self._advance_and_record(plan, now, token)
            except OperationalError as exc:
                if not is_lock_timeout(exc):
                    raise
                # Another transaction holds one of the rows: the same transaction again,
                # skipping the rows that are held instead of waiting for them.
                moved, locked, inserted = self._advance_and_record(
                    plan, now, token, skip_locked=True
                )
            retry_ms = timing.to_ms(now + LOCKED_RETRY)
            for d in plan.due:
                row = d.row
                if row.pk in locked:
                    # Another transaction holds the row: look again shortly (not spinning on
                    # it while it stays held).
                    changes.append(Change(row.pk, row.revision, REQUEUE, retry_ms))
                    counters.busy += 1
                    continue
                if row.pk not in moved:
                    # Someone changed the row after we read it; they write its entry. Ask
                    # for a re-check in case their write never comes.
                    changes.append(Change(row.pk, row.revision, REQUEUE, batch.now_ms))
                    counters.lost_races += 1
                    continue
                changes.append(
                    change_for_row(
                        row.pk, moved[row.pk], True, d.plan.next_run_at, d.plan.due_at, row.jitter
                    )
                )
                for at in d.plan.fire:
                    run_id = inserted.get((row.pk, timing.to_ms(at)))
                    if run_id is None:
                        counters.duplicates += 1
                        continue
                    occurrences.append(
                        Occurrence(
                            key=occurrence_key(row.pk, at),
                            run_id=run_id,
                            schedule_id=row.pk,
                            schedule_name=row.name,
                            task=row.task,
                            scheduled_for=at,
                            attempt=1,
                            args=row.args,
                            kwargs=row.kwargs,
                            dispatcher=row.dispatcher,
                            dispatch_options=row.dispatch_options,
                        )
                    )
                counters.skipped += len(d.plan.skips)
                for skip in d.plan.skips:
                    plan.skip_reasons[skip.reason] = plan.skip_reasons.get(skip.reason, 0) + 1
                counters.buffered += len(d.buffer)
            counters.fired = len(occurrences)
            if counters.busy:
                logger.info(
                    "%d due schedule row(s) held by another transaction (an edit, a "
                    "migration): skipped after a short wait, looked at again in %gs.",
                    counters.busy,
                    LOCKED_RETRY.total_seconds(),
                )
        # Committed: announced before the index write, which may fail (the runs still go,
        # taken over once their lease ends).
        for o in occurrences:
            signals.send(signals.occurrence_fired, Schedule, occurrence=o, worker_id=self.worker_id)
        # Sharded: the shards that answer are written; one whose node is away (logged by
        # its back-off) keeps this claim's entries in flight until their lease ends, and
        # the claim's re-check then re-indexes them from their advanced rows.
        with contextlib.suppress(ShardsAway):
            self.index.apply(changes, release_token=token)
        for sid, entry, due in plan.repaired:
            signals.send(
                signals.entry_repaired, Schedule, schedule_id=sid, entry_ms=entry, due_ms=due
            )
        return occurrences, counters

    def _advance_and_record(
        self, plan: Plan, now: datetime, token: str, *, skip_locked: bool = False
    ) -> tuple[dict[int, int], set[int], dict[tuple[int, int], int]]:
        """One transaction: the conditional advance of the due rows and their runs (one
        statement on PostgreSQL: ``services.advance``)."""
        moved, locked, inserted = services.advance(
            [d.advance for d in plan.due],
            now,
            using=self.db,
            skip_locked=skip_locked,
            runs=ClaimedRuns(
                {d.row.pk: _runs_of(d) for d in plan.due},
                claimed_at=now,
                worker_id=self.worker_id,
                claim_token=token,
                lease_expires_at=now + self.lease,
            ),
        )
        return moved, locked, inserted or {}

    # -- runs waiting in SQL: expired leases, and runs queued for any scheduler ----------

    def take_over_expired(self, now_ms: int, limit: int) -> tuple[list[Occurrence], str, Counters]:
        """Unfinished runs whose lease expired, now leased to this process under a new claim
        token (returned), to dispatch. These are runs whose process died or stalled, and
        runs queued with an expired lease on purpose (run now, backfill, a released buffer:
        no attempt yet, so their first hand-off has ``attempt == 1``). Each occurrence's
        ``attempt`` is the hand-off it is about to be (``dispatchable`` counts it). The
        counters say which kind each was: ``queued``, ``retried`` (a failed hand-off whose
        back-off ended) or ``redispatched`` (left behind by the process that held it)."""
        now = timing.from_ms(now_ms)
        runs = Run.objects.using(self.db)
        # Held by no process (an empty claim token): queued, or waiting for its retry. With
        # their nominal times, which bound the statements on them by id (spans.py).
        expired = list(
            runs.lease_expired(now)
            .order_by("lease_expires_at")
            .values_list("pk", "claim_token", "attempts", "scheduled_for")[:limit]
        )
        held_before = {pk: (claim_token, attempts) for pk, claim_token, attempts, _at in expired}
        span = Span.of(at for _pk, _token, _attempts, at in expired)
        candidates = list(held_before)
        token = new_token()
        counters = Counters()
        if not candidates:
            return [], token, counters
        ledger.take_over(
            candidates,
            now=now,
            lease_expires_at=now + self.lease,
            claim_token=token,
            worker_id=self.worker_id,
            using=self.db,
            span=span,
        )
        taken = (
            runs.within(span)
            .pending()
            .filter(pk__in=candidates, claim_token=token)
            .values_list(*RUN_FIELDS)
        )
        occurrences = [
            Occurrence(
                key=occurrence_key(schedule_id, scheduled_for),
                run_id=pk,
                schedule_id=schedule_id,
                schedule_name=name,
                task=task,
                scheduled_for=scheduled_for,
                attempt=attempts + 1,
                args=args,
                kwargs=kwargs,
                dispatcher=dispatcher,
                dispatch_options=options,
            )
            for (
                pk, schedule_id, name, task, args, kwargs, dispatcher, options, scheduled_for,
                attempts,
            ) in taken
        ]  # fmt: skip
        for o in occurrences:
            held_by, attempts = held_before[o.run_id]
            if held_by:
                counters.redispatched += 1
            elif attempts:
                counters.retried += 1
            else:  # its first hand-off: a run now, a backfilled or a released buffered run
                counters.queued += 1
                signals.send(
                    signals.occurrence_fired, Schedule, occurrence=o, worker_id=self.worker_id
                )
        counters.fired = len(occurrences)
        if counters.retried:
            logger.info(
                "Handing off %d run(s) again whose back-off after a failed hand-off ended "
                "(same keys).",
                counters.retried,
            )
        if counters.redispatched:
            logger.warning(
                "Dispatching %d run(s) again whose lease expired (same keys).",
                counters.redispatched,
            )
        return occurrences, token, counters
