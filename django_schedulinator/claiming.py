"""Claim due entries, re-check their rows, and decide in SQL which occurrences fire.

One pass over a batch costs one claim script, one read query, one transaction (conditional
advance plus the pending runs) and one index script, whatever the batch size:

1. ``claim``: Redis moves up to N entries with score <= Redis TIME into the in-flight set,
   each leased to this process. The same "now" is used for every decision below.
2. ``advance``: the rows are read in one query. A deleted, disabled or finished row leaves
   the index; a row not due yet is re-indexed at its true time (a repair: the entry was
   stale, it never fires early). Due rows advance with a conditional UPDATE that only
   matches the revision that was read, and their pending Runs are inserted in the same
   transaction. Then the index gets the new next runs and the in-flight entries are
   released. A crash before the commit leaves the in-flight entries, whose leases expire
   and return them to the due set; a crash after it leaves pending Runs, which
   ``take_over_expired`` dispatches again with the same idempotency key.
3. The caller dispatches the occurrences and ``record``s the outcomes.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import F
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import timing
from .dispatch.base import Occurrence, Outcome
from .index import FORGET, REMOVE, REQUEUE, SET, Change, ClaimedBatch, DueIndex
from .models import Run, Schedule, occurrence_key
from .querysets import Advance, PendingRun, json_ids
from .sync import change_for_row

logger = logging.getLogger("django_schedulinator.claiming")

ROW_FIELDS = (
    "pk", "revision", "enabled", "next_run_at", "kind", "cron", "interval", "run_at",
    "timezone", "task", "args", "kwargs", "name", "start_at", "end_at",
)  # fmt: skip
RUN_FIELDS = (
    "pk", "schedule_id", "schedule__name", "task", "args", "kwargs", "scheduled_for",
    "attempts",
)  # fmt: skip
# A row whose timing cannot be evaluated (it reached SQL around validation) is looked at
# again after this long instead of spinning.
INVALID_RETRY = timedelta(minutes=1)


def new_token() -> str:
    return secrets.token_hex(8)


@dataclass(slots=True)
class Counters:
    """What the passes did; the worker logs them and tests read them."""

    claimed: int = 0
    fired: int = 0
    repaired: int = 0  # stale entries re-indexed at the row's true time
    dropped: int = 0  # entries of deleted, disabled or finished rows
    lost_races: int = 0  # another process (or an edit) changed the row first
    duplicates: int = 0  # occurrence already in the ledger
    invalid: int = 0  # rows whose timing cannot be evaluated
    leases_expired: int = 0  # in-flight entries returned to the due set
    redispatched: int = 0  # pending runs taken over after their lease expired
    reconciled: int = 0  # entries healed by reconcile passes (lost sync writes)

    def add(self, other: Counters) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True)
class Plan:
    """What a re-check decided for one claimed batch."""

    batch: ClaimedBatch
    counters: Counters
    changes: list[Change] = field(default_factory=list)
    due: list[tuple[tuple[Any, ...], Advance]] = field(default_factory=list)


class Claimer:
    def __init__(
        self,
        *,
        worker_id: str,
        lease_seconds: float,
        index: DueIndex | None = None,
        using: str | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.lease = timedelta(seconds=lease_seconds)
        self.index = index or DueIndex()
        self.db = using or router.db_for_write(Schedule)

    # -- 1. claim -------------------------------------------------------------------------

    def claim(self, limit: int) -> tuple[ClaimedBatch, str]:
        token = new_token()
        lease_ms = int(self.lease.total_seconds() * 1000)
        return self.index.claim(limit, lease_ms, token), token

    # -- 2. re-check and advance ----------------------------------------------------------

    def advance(self, batch: ClaimedBatch, token: str) -> tuple[list[Occurrence], Counters]:
        """Re-check the claimed rows, fire the due ones in SQL, and update the index."""
        return self.commit(self.recheck(batch), token)

    def recheck(self, batch: ClaimedBatch) -> Plan:
        """Read the claimed rows in one query and decide what each entry calls for."""
        plan = Plan(batch, Counters(claimed=len(batch.entries), leases_expired=batch.requeued))
        if not batch.entries:
            return plan
        now = timing.from_ms(batch.now_ms)
        ids = [sid for sid, _score in batch.entries]
        rows = {
            row[0]: row
            for row in Schedule.objects.using(self.db)
            .filter(pk__in=json_ids(ids, self.db))
            .values_list(*ROW_FIELDS)
        }
        counters = plan.counters
        for sid in ids:
            row = rows.get(sid)
            if row is None:
                plan.changes.append(Change(sid, 0, FORGET))
                counters.dropped += 1
                continue
            _pk, revision, enabled, next_run_at = row[:4]
            if not enabled or next_run_at is None:
                plan.changes.append(Change(sid, revision, REMOVE))
                counters.dropped += 1
                continue
            due_ms = timing.to_ms(next_run_at)
            if due_ms > batch.now_ms:
                # The index said due, the row says later: trust the row, fix the index.
                plan.changes.append(Change(sid, revision, SET, due_ms))
                counters.repaired += 1
                logger.debug("Repaired the stale entry of schedule %s (due %s).", sid, next_run_at)
                continue
            kind, cron, interval, run_at, zone = row[4:9]
            spec = timing.Timing(kind, cron, interval, run_at, zone, row[13], row[14])
            try:
                following = timing.next_run_after(spec, next_run_at, now)
            except timing.TimingError as exc:
                logger.error("Schedule %s (%r) cannot be evaluated: %s", sid, row[12], exc)
                retry_ms = timing.to_ms(now + INVALID_RETRY)
                plan.changes.append(Change(sid, revision, REQUEUE, retry_ms))
                counters.invalid += 1
                continue
            plan.due.append((row, Advance(sid, revision, following)))
        if counters.repaired:
            logger.info(
                "Repaired %d stale index entr%s: not due yet, re-indexed at the row's time.",
                counters.repaired,
                "y" if counters.repaired == 1 else "ies",
            )
        return plan

    def commit(self, plan: Plan, token: str) -> tuple[list[Occurrence], Counters]:
        """One transaction: advance the due rows that still hold what was read, insert their
        pending runs; then write the index and release this claim's in-flight entries."""
        batch, counters, changes = plan.batch, plan.counters, plan.changes
        occurrences: list[Occurrence] = []
        if plan.due:
            now = timing.from_ms(batch.now_ms)
            with transaction.atomic(using=self.db):
                moved = Schedule.objects.using(self.db).advance([a for _r, a in plan.due], now)
                inserted = Run.objects.using(self.db).insert_pending(
                    [
                        PendingRun(row[0], row[3], row[9], row[10], row[11])
                        for row, a in plan.due
                        if a.schedule_id in moved
                    ],
                    claimed_at=now,
                    worker_id=self.worker_id,
                    claim_token=token,
                    lease_expires_at=now + self.lease,
                )
            occurrences = [
                Occurrence(
                    key=occurrence_key(row[0], row[3]),
                    run_id=inserted[row[0]],
                    schedule_id=row[0],
                    schedule_name=row[12],
                    task=row[9],
                    scheduled_for=row[3],
                    attempt=1,
                    args=row[10],
                    kwargs=row[11],
                )
                for row, _a in plan.due
                if row[0] in inserted
            ]
            for _row, a in plan.due:
                if a.schedule_id in moved:
                    new_revision = moved[a.schedule_id]
                    changes.append(change_for_row(a.schedule_id, new_revision, True, a.next_run_at))
                else:
                    # Someone changed the row after we read it; they write its entry. Ask
                    # for a re-check in case their write never comes.
                    changes.append(Change(a.schedule_id, a.revision, REQUEUE, batch.now_ms))
                    counters.lost_races += 1
            counters.fired = len(occurrences)
            counters.duplicates = len(moved) - len(inserted)
        self.index.apply(changes, release_token=token)
        return occurrences, counters

    # -- pending runs whose dispatch never completed --------------------------------------

    def take_over_expired(self, now_ms: int, limit: int) -> tuple[list[Occurrence], str]:
        """Pending runs whose lease expired, now leased to this process under a new claim
        token (returned), to dispatch again."""
        now = timing.from_ms(now_ms)
        runs = Run.objects.using(self.db)
        candidates = list(
            runs.lease_expired(now)
            .order_by("lease_expires_at")
            .values_list("pk", flat=True)[:limit]
        )
        token = new_token()
        if not candidates:
            return [], token
        # Conditional: of two processes taking over the same run, exactly one matches.
        runs.filter(pk__in=candidates).lease_expired(now).update(
            claim_token=token,
            worker_id=self.worker_id,
            lease_expires_at=now + self.lease,
            attempts=F("attempts") + 1,
        )
        taken = runs.pending().filter(pk__in=candidates, claim_token=token).values_list(*RUN_FIELDS)
        occurrences = [
            Occurrence(
                key=occurrence_key(schedule_id, scheduled_for),
                run_id=pk,
                schedule_id=schedule_id,
                schedule_name=name,
                task=task,
                scheduled_for=scheduled_for,
                attempt=attempts,
                args=args,
                kwargs=kwargs,
            )
            for pk, schedule_id, name, task, args, kwargs, scheduled_for, attempts in taken
        ]
        if occurrences:
            logger.warning(
                "Dispatching %d pending run(s) again whose lease expired (same keys).",
                len(occurrences),
            )
        return occurrences, token

    def renew_leases(self, run_ids: Sequence[int], token: str) -> set[int]:
        """Extend the leases of the runs that ``token`` still holds; their ids.

        Conditional on the token: a run whose lease expired and that another process took
        over (with a token of its own) is not renewed, and the caller must not dispatch it.
        Leases are on Redis TIME like the claims; while Redis is unreachable this host's
        clock stands in, so work already committed is still dispatched.
        """
        try:
            now = timing.from_ms(self.index.now_ms())
        except (RedisConnectionError, RedisTimeoutError):
            now = timezone.now()
        until = now + self.lease
        held = (
            Run.objects.using(self.db)
            .pending()
            .filter(pk__in=json_ids(run_ids, self.db), claim_token=token)
        )
        held.update(lease_expires_at=until)
        return set(held.values_list("pk", flat=True))

    # -- 3. record outcomes ---------------------------------------------------------------

    def record(self, outcomes: Sequence[Outcome], dispatched_at: Any) -> None:
        """Store what the dispatcher reported, in one transaction."""
        finished_at = timezone.now()
        by_status: dict[str, list[int]] = {}
        failed: list[Outcome] = []
        for o in outcomes:
            if o.status == "failed":
                failed.append(o)
            else:
                by_status.setdefault(o.status, []).append(o.run_id)
        runs = Run.objects.using(self.db)
        with transaction.atomic(using=self.db):
            for status, ids in by_status.items():
                runs.pending().filter(pk__in=json_ids(ids, self.db)).update(
                    status=status,
                    dispatched_at=dispatched_at,
                    finished_at=finished_at if status == Run.Status.SUCCEEDED else None,
                    lease_expires_at=None,
                )
            for o in failed:  # one statement each: failures carry their own error text
                runs.pending().filter(pk=o.run_id).update(
                    status=Run.Status.FAILED,
                    error=o.error,
                    dispatched_at=dispatched_at,
                    finished_at=finished_at,
                    lease_expires_at=None,
                )
