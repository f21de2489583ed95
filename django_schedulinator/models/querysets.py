"""QuerySets with intention-revealing names, and the batched conditional advance."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Self, TypeVar

from django.db import connections, models, transaction
from django.db.models import Case, F, Value, When
from django.db.models.functions import Coalesce
from django.utils.dateparse import parse_datetime

from django_schedulinator.models import spans
from django_schedulinator.models.batches import (
    FIRST_LOCK_WAIT_MS,
    INSERT_TYPES,
    NO_ALERT_BEFORE,
    PLAIN_FROM,
    PLAIN_RUN,
    Advance,
    Advanced,
    ClaimedRuns,
    NewRun,
    advances_in_one_statement,
    batches_as_json,
    json_ids,
    json_rows,
    json_times,
    table_and_columns,
)
from django_schedulinator.models.dbclock import DatabaseNow
from django_schedulinator.models.spans import Span
from django_schedulinator.statuses import UNFINISHED, RunStatus

# The model a queryset class serves (Schedule, Run). Generic rather than named:
# the models import their querysets, never the other way round, and ``self.model`` is the
# model at run time.
Row = TypeVar("Row", bound=models.Model)


# What every change of a saved schedule moves besides the fields it writes, all three at once:
# ``revision`` orders the writes to the index and makes the scheduler's advance conditional;
# ``version`` is what an edit must start from (the API's ETag, the admin's form);
# ``updated_at`` is reconcile's watermark, from the database's clock. ``Schedule.save()``
# and ``ScheduleQuerySet.change`` take them from ``counters_moved``, and only from there. The
# scheduler's advance (below) moves the revision alone, on purpose: firing changes no
# setting, so an edit never loses to a schedule that fired meanwhile.
COUNTERS = ("revision", "version", "updated_at")


def counters_moved() -> dict[str, Any]:
    """The counters' new values in the statement that writes a change (see ``COUNTERS``)."""
    return {
        "revision": F("revision") + 1,
        "version": F("version") + 1,
        "updated_at": DatabaseNow(),
    }


class ScheduleQuerySet(models.QuerySet[Row]):
    def change(self, **fields: Any) -> int:
        """Write a change the caller decided to these schedules in one statement: ``fields``
        and the counters (``counters_moved``). Like every ``update()``, it sends no signal:
        the caller has the index follow (``sync.resync_on_commit``). How many rows it
        changed."""
        return self.update(**fields, **counters_moved())

    def with_missed_mark(self) -> Self:
        """Annotated with ``missed_open``: whether the schedule's latest missed occurrence
        (``missed_at``) is not yet followed by a run at or after it that succeeded. The
        mark the admin and the API show; one subquery per row, which the unique (schedule,
        nominal time) index serves."""
        runs = self.model._meta.get_field("runs").related_model
        assert isinstance(runs, type)  # Run, found through the relation: not imported here
        recovered = models.Exists(
            runs._default_manager.filter(
                schedule=models.OuterRef("pk"),
                status=RunStatus.SUCCEEDED,
                scheduled_for__gte=models.OuterRef("missed_at"),
            )
        )
        return self.annotate(
            missed_open=models.ExpressionWrapper(
                models.Q(missed_at__isnull=False) & ~recovered,
                output_field=models.BooleanField(),
            )
        )

    def delete(self) -> tuple[int, dict[str, int]]:
        """Delete the schedules with their runs, their rows locked first.

        A scheduler's transaction that advanced a schedule and inserted a run of it holds
        the row: the lock waits for it to end, and the run it committed is then deleted
        with the schedule. Without the lock, the run escaped the delete and the commit
        failed on its foreign key (the schedule stayed). A scheduler that comes after the
        lock skips the row (``advance`` skips locked rows) and then finds it gone."""
        if self.query.is_sliced or self.query.combinator:
            return super().delete()  # Django's own refusal
        writing = self.all()
        writing._for_write = True  # type: ignore[attr-defined]  # where Django's delete writes
        db = writing.db
        with transaction.atomic(using=db):
            # In primary-key order: concurrent deletes lock in the same order (no deadlock).
            locked = self.model._base_manager.using(db).filter(pk__in=self.values("pk"))
            list(locked.order_by("pk").select_for_update().values_list("pk", flat=True))
            return super().delete()

    def advance(
        self,
        advances: Sequence[Advance],
        fired_at: datetime,
        *,
        skip_locked: bool = False,
        runs: ClaimedRuns | None = None,
    ) -> Advanced:
        """Conditionally advance many schedules in one statement.

        Each row moves only if its revision is still the one read by the claimer, so of two
        processes that claimed the same occurrence exactly one wins. Call inside a
        transaction, which the advance's rows then belong to.

        On PostgreSQL a row another transaction holds (a user's edit, a migration) must not
        stall the batch, nor every scheduler behind it. Almost always none is held, so the
        plain statement runs, with a short ``lock_timeout`` for the rest of the transaction;
        should it run out (``is_lock_timeout``), the caller redoes the transaction with
        ``skip_locked``: the rows are locked first, the held ones skipped (``locked``). Row
        locks on every row would cost the common case a third of its speed.

        ``runs`` (where ``advances_in_one_statement``): the same statement inserts the runs
        of the rows that moved (a data-modifying CTE), as ``RunQuerySet.insert_runs`` would,
        and is its own transaction outside the caller's: one round trip for the claim's
        whole write instead of five (BEGIN, the lock wait, the advance, the insert, COMMIT).
        """
        if not advances:
            return Advanced({}, set(), {} if runs is not None else None)
        connection = connections[self.db]
        if runs is not None and not advances_in_one_statement(connection):
            raise ValueError(
                "Runs go with the advance only where advances_in_one_statement(); "
                "services.advance inserts them after it elsewhere."
            )
        if not batches_as_json(connection):
            return self._advance_row_by_row(advances, fired_at)
        table, col = table_and_columns(self.model, connection)
        t = json_times(connection)
        # due_at travels only when jitter makes it differ from next_run_at.
        rows = json.dumps(
            [
                [
                    a.schedule_id,
                    a.revision,
                    t(a.next_run_at),
                    None if a.due_at == a.next_run_at else t(a.due_at),
                    a.fired,
                    t(a.through),
                ]
                for a in advances
            ]
        )
        values = json_rows(
            connection, "bigint", "bigint", "timestamp", "timestamp", "bigint", "timestamp"
        )
        rows_of_v = f"v(sid, rev, nxt, due, fired, thr) AS ({values})"
        mark = col["fired_through"]
        update = (
            f"UPDATE {table} SET {col['next_run_at']} = v.nxt, "
            f"{col['due_at']} = COALESCE(v.due, v.nxt), "
            # Only ever up: never back past what fired.
            f"{mark} = CASE WHEN {table}.{mark} IS NULL OR v.thr > {table}.{mark} "
            f"THEN COALESCE(v.thr, {table}.{mark}) ELSE {table}.{mark} END, "
            f"{col['revision']} = {table}.{col['revision']} + 1, "
            f"{col['run_count']} = {table}.{col['run_count']} + v.fired, "
            f"{col['last_run_at']} = CASE WHEN v.fired > 0 THEN %s "
            f"ELSE {table}.{col['last_run_at']} END "
        )
        match = f"{table}.{col['id']} = v.sid AND {table}.{col['revision']} = v.rev"
        moved_cols = f"{table}.{col['id']} AS id, {table}.{col['revision']} AS revision"
        params = [rows, connection.ops.adapt_datetimefield_value(fired_at)]
        # SQLite has no row locks to skip: a writer holds the whole database.
        postgresql = connection.vendor == "postgresql"
        lock_wait = (
            "SELECT set_config('lock_timeout', %s, true); "
            if postgresql and not skip_locked
            else ""
        )
        if postgresql and skip_locked:
            # The rows this statement locks, each with its new revision if it moved (NULL:
            # it changed since it was read); a row it does not name was held by someone else.
            head = (
                f"WITH {rows_of_v}, "
                f"free AS (SELECT s.{col['id']} AS id FROM {table} s JOIN v "
                f"ON s.{col['id']} = v.sid FOR UPDATE OF s SKIP LOCKED), "
                f"moved AS ({update} FROM v JOIN free ON free.id = v.sid WHERE {match} "
                f"RETURNING {moved_cols})"
            )
            answer = (
                "SELECT free.id, moved.revision FROM free LEFT JOIN moved ON moved.id = free.id"
            )
        else:
            head = (
                f"WITH {rows_of_v}, moved AS ({update} FROM v WHERE {match} RETURNING {moved_cols})"
            )
            answer = "SELECT moved.id, moved.revision FROM moved"
        inserted: dict[tuple[int, int], int] | None = None
        if runs is None and not (postgresql and skip_locked):
            # The advance alone (SQLite has no data-modifying CTE: its UPDATE comes first).
            head = f"WITH {rows_of_v} {update} FROM v WHERE {match}"
            answer = f"RETURNING {moved_cols}"
        elif runs is not None:
            # The runs of the rows that moved, inserted by the same statement (one round
            # trip, its own transaction): the answer's rows tell the two apart by a kind.
            new_runs = [r for sid in runs.runs for r in runs.runs[sid]]
            insert, insert_params = _insert_runs_sql(
                connection,
                self.model._meta.get_field("runs").related_model,
                new_runs,
                claimed_at=runs.claimed_at,
                worker_id=runs.worker_id,
                claim_token=runs.claim_token,
                lease_expires_at=runs.lease_expires_at,
                only_of="moved",
            )
            head += f", {insert[0]}, ins AS ({insert[1]})"
            params += insert_params
            answer = (
                f"SELECT 0, m.*, NULL::bigint FROM ({answer}) AS m "
                f"UNION ALL SELECT 1, ins.schedule_id, ins.ms, ins.id FROM ins"
            )
            inserted = {}
        sql = f"{head} {answer}"
        if lock_wait:
            params = [f"{FIRST_LOCK_WAIT_MS}ms", *params]
            if runs is not None:
                # One round trip: the setting lasts for the statement's own transaction
                # (a simple query of two statements is one), or the caller's.
                sql = f"{lock_wait}{sql}"
        with connection.cursor() as cursor:
            if lock_wait and runs is None:
                cursor.execute(lock_wait, params[:1])
                params = params[1:]
            cursor.execute(sql, params)
            if lock_wait and runs is not None:
                cursor.nextset()  # past set_config's answer
            answer_rows = cursor.fetchall()
        if inserted is not None:
            moved_rows = []
            for kind, a, b, c in answer_rows:
                if kind:
                    inserted[(int(a), int(b))] = int(c)
                else:
                    moved_rows.append((a, b))
            answer_rows = moved_rows
        if not (postgresql and skip_locked):
            return Advanced({int(sid): int(rev) for sid, rev in answer_rows}, set(), inserted)
        moved = {int(sid): int(rev) for sid, rev in answer_rows if rev is not None}
        locked = {a.schedule_id for a in advances} - {int(sid) for sid, _rev in answer_rows}
        return Advanced(moved, locked, inserted)

    def _advance_row_by_row(self, advances: Sequence[Advance], fired_at: datetime) -> Advanced:
        # Portable fallback for other backends: same guarantee, one statement per row.
        ids = [a.schedule_id for a in advances]
        locked: set[int] = set()
        if connections[self.db].features.has_select_for_update_skip_locked:
            free = self.filter(pk__in=ids).select_for_update(skip_locked=True)
            locked = set(ids) - set(free.values_list("pk", flat=True))
        moved: dict[int, int] = {}
        for a in advances:
            if a.schedule_id in locked:
                continue
            changes: dict[str, Any] = {
                "next_run_at": a.next_run_at,
                "due_at": a.due_at,
                "revision": models.F("revision") + 1,
                "run_count": models.F("run_count") + a.fired,
            }
            if a.fired:
                changes["last_run_at"] = fired_at
            if a.through is not None:
                changes["fired_through"] = Case(
                    When(
                        models.Q(fired_through__isnull=True)
                        | models.Q(fired_through__lt=a.through),
                        then=Value(a.through),
                    ),
                    default=F("fired_through"),
                )
            if self.filter(pk=a.schedule_id, revision=a.revision).update(**changes):
                moved[a.schedule_id] = a.revision + 1
        return Advanced(moved, locked)


class RunQuerySet(models.QuerySet[Row]):
    def pending(self) -> Self:
        return self.filter(status=RunStatus.PENDING)

    def unfinished(self) -> Self:
        """Pending or running: a process holds each under a lease."""
        return self.filter(status__in=UNFINISHED)

    def within(self, span: Span | None) -> Self:
        """Only runs whose nominal time lies in ``span`` (both ends included); all of them
        for None. The bound a statement by id carries so that a ledger partitioned by
        ``scheduled_for`` is planned over the partitions in range only; written only where
        the ledger is partitioned (``spans.py`` says why)."""
        if span is None or not spans.ledger_partitioned(self.db):
            return self
        return self.filter(scheduled_for__gte=span.first, scheduled_for__lte=span.last)

    def held_by(self, claim_token: str, ids: Any) -> Self:
        """The unfinished runs among ``ids`` that the claim ``claim_token`` still holds (a
        run taken over by another process carries that process's token)."""
        return self.unfinished().filter(pk__in=ids, claim_token=claim_token)

    def in_progress(self, now: datetime) -> Self:
        """Runs that hold back their schedule's next one (overlap): pending or buffered;
        running in a scheduler (under a lease); or handed off, or reported started, with
        their outcome still expected (``outcome_due_by`` not passed)."""
        return self.filter(
            models.Q(status__in=(RunStatus.PENDING, RunStatus.BUFFERED))
            | models.Q(status=RunStatus.RUNNING, outcome_due_by__isnull=True)
            | models.Q(status__in=(RunStatus.RUNNING, RunStatus.DISPATCHED), outcome_due_by__gt=now)
        )

    def lease_expired(self, now: datetime) -> Self:
        """Unfinished runs whose lease has ended (a lease that ends now has ended)."""
        return self.unfinished().filter(lease_expires_at__lte=now)

    def mark_missed(
        self, ids: Sequence[int], now: datetime, *, span: Span | None
    ) -> dict[int, str]:
        """Record the runs among ``ids`` that still await their alert time (``alert_at``
        set, and passed at ``now``) as missed at ``now``, their alert time cleared; returns
        the status of each run this call marked, by id. Conditional, in one statement: of
        several processes marking the same run at once, exactly one gets it. ``span``: the
        runs' nominal times (``within``)."""
        if not ids:
            return {}
        connection = connections[self.db]
        if span is not None and not spans.ledger_partitioned(self.db):
            span = None
        if not batches_as_json(connection):  # other backends: one conditional row at a time
            runs = self.within(span)
            found = runs.filter(pk__in=list(ids), alert_at__lte=now).values_list("pk", "status")
            return {
                pk: status
                for pk, status in found
                if runs.filter(pk=pk, alert_at__lte=now).update(missed_at=now, alert_at=None)
            }
        table, col = table_and_columns(self.model, connection)
        wanted = json_ids(ids, self.db)
        adapt = connection.ops.adapt_datetimefield_value
        bound, bounds = "", []
        if span is not None:
            nominal = col["scheduled_for"]
            bound = f" AND {nominal} >= %s AND {nominal} <= %s"
            bounds = [adapt(span.first), adapt(span.last)]
        sql = (
            f"UPDATE {table} SET {col['missed_at']} = %s, {col['alert_at']} = NULL "
            f"WHERE {col['id']} IN ({wanted.sql}) AND {col['alert_at']} <= %s{bound} "
            f"RETURNING {col['id']}, {col['status']}"
        )
        at = adapt(now)
        with connection.cursor() as cursor:
            cursor.execute(sql, [at, *wanted.params, at, *bounds])
            return {int(pk): str(status) for pk, status in cursor.fetchall()}

    def done(self, now: datetime) -> Self:
        """Runs nothing waits for any more (retention may delete them): succeeded, failed,
        skipped, or handed off with no outcome expected after ``now``, and none whose
        missed-run alert is still to come (``alert_at``: a grace may outlast retention).
        Never pending, running or buffered."""
        return self.filter(
            models.Q(status__in=(RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SKIPPED))
            | models.Q(status=RunStatus.DISPATCHED, outcome_due_by__isnull=True)
            | models.Q(status=RunStatus.DISPATCHED, outcome_due_by__lte=now),
            # alert_at IS NULL, said so that PostgreSQL guesses its share of the rows
            # sanely on a table it has no statistics of yet (IS NULL is guessed at 0.5 %:
            # a prune right after a bulk load of the ledger then read the whole table once
            # per id of its batch). No alert_at is before the epoch.
            ~models.Q(alert_at__gte=NO_ALERT_BEFORE),
        )

    def recorded_before(self, cutoff: datetime) -> Self:
        """Runs last recorded before ``cutoff``: when they ended, else when they were handed
        off, else when they entered the ledger; not their nominal time (a backfill of last
        year is new)."""
        return self.alias(
            recorded_at=Coalesce("finished_at", "dispatched_at", "claimed_at")
        ).filter(recorded_at__lt=cutoff)

    def insert_runs(
        self,
        runs: Sequence[NewRun],
        *,
        claimed_at: datetime,
        worker_id: str,
        claim_token: str = "",
        lease_expires_at: datetime | None = None,
    ) -> dict[tuple[int, int], int]:
        """Insert runs, skipping occurrences already in the ledger.

        ``lease_expires_at`` is the lease of pending runs that carry none of their own.

        Returns ``{(schedule_id, epoch ms of scheduled_for): run_id}`` for the runs inserted.
        The unique constraint on (schedule, scheduled_for) is what makes an occurrence
        impossible to record twice.
        """
        if not runs:
            return {}
        connection = connections[self.db]
        if not batches_as_json(connection):
            return self._insert_runs_portable(
                runs, claimed_at, worker_id, claim_token, lease_expires_at
            )
        insert, params = _insert_runs_sql(
            connection,
            self.model,
            runs,
            claimed_at=claimed_at,
            worker_id=worker_id,
            claim_token=claim_token,
            lease_expires_at=lease_expires_at,
        )
        with connection.cursor() as cursor:
            cursor.execute(f"WITH {insert[0]} {insert[1]}", params)
            return {
                (int(sid), _returned_ms(connection, sf)): int(rid)
                for rid, sid, sf in cursor.fetchall()
            }

    def _insert_runs_portable(
        self,
        runs: Sequence[NewRun],
        claimed_at: datetime,
        worker_id: str,
        claim_token: str,
        lease_expires_at: datetime | None,
    ) -> dict[tuple[int, int], int]:
        from django_schedulinator.timing.instants import to_ms

        wanted = {(r.schedule_id, to_ms(r.scheduled_for)) for r in runs}
        before = set(self._ids_of(wanted).values())  # the ids of the runs there already
        self.bulk_create(
            [
                self.model(
                    schedule_id=r.schedule_id,
                    scheduled_for=r.scheduled_for,
                    task=r.task,
                    args=r.args,
                    kwargs=r.kwargs,
                    dispatcher=r.dispatcher,
                    dispatch_options=r.dispatch_options,
                    status=r.status,
                    trigger=r.trigger,
                    skip_reason=r.skip_reason,
                    note=r.note,
                    attempts=r.attempts,
                    lease_expires_at=(r.lease_expires_at or lease_expires_at)
                    if r.status == RunStatus.PENDING
                    else r.lease_expires_at,
                    alert_at=r.alert_at,
                    claimed_at=claimed_at,
                    worker_id=worker_id,
                    claim_token=claim_token,
                )
                for r in runs
            ],
            ignore_conflicts=True,
        )
        return {k: v for k, v in self._ids_of(wanted).items() if v not in before}

    def _ids_of(self, wanted: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
        from django_schedulinator.timing.instants import to_ms

        found = self.filter(schedule_id__in={sid for sid, _ms in wanted}).values_list(
            "schedule_id", "scheduled_for", "pk"
        )
        return {(sid, to_ms(at)): pk for sid, at, pk in found if (sid, to_ms(at)) in wanted}


def _insert_runs_sql(
    connection: Any,
    run_model: Any,
    runs: Sequence[NewRun],
    *,
    claimed_at: datetime,
    worker_id: str,
    claim_token: str,
    lease_expires_at: datetime | None,
    only_of: str = "",
) -> tuple[tuple[str, str], list[Any]]:
    """The SQL that inserts ``runs`` (``RunQuerySet.insert_runs``) as two parts: the rows,
    a CTE named ``r``, and the ``INSERT ... ON CONFLICT DO NOTHING RETURNING id,
    schedule_id, ms`` that reads them (of the schedules in the CTE ``only_of`` when given);
    and their parameters, in that order."""
    table, col = table_and_columns(run_model, connection)
    names = (
        "schedule", "scheduled_for", "task", "args", "kwargs", "dispatcher",
        "dispatch_options", "status", "trigger", "skip_reason", "note", "attempts",
        "lease_expires_at", "alert_at", "claimed_at", "worker_id", "claim_token", "error",
        "external_id", "output",
    )  # fmt: skip
    t = json_times(connection)
    # NewRun's fields are in the order of the columns of INSERT_TYPES. A plain run (the
    # bulk of a claim) sends the schedule's snapshot only; the SQL fills in the defaults.
    rows = json.dumps(
        [
            [r.schedule_id, t(r.scheduled_for), *r[2:PLAIN_FROM]]
            if r[PLAIN_FROM:] == PLAIN_RUN
            else [
                r.schedule_id,
                t(r.scheduled_for),
                *r[2:-2],
                t(r.lease_expires_at),
                t(r.alert_at),
            ]
            for r in runs
        ]
    )
    values = json_rows(connection, *INSERT_TYPES)
    cte = (
        "r(sid, sf, task, args, kwargs, disp, dopts, status, trig, reason, note, attempts, "
        f"lease, alert) AS ({values})"
    )
    source = f"r JOIN {only_of} ON {only_of}.id = r.sid" if only_of else "r"
    returned_at = _epoch_ms(connection, col["scheduled_for"])
    insert = (
        f"INSERT INTO {table} ({', '.join(col[n] for n in names)}) "
        f"SELECT r.sid, r.sf, r.task, r.args, r.kwargs, r.disp, r.dopts, "
        f"COALESCE(r.status, 'pending'), "
        f"COALESCE(r.trig, 'schedule'), COALESCE(r.reason, ''), COALESCE(r.note, ''), "
        f"COALESCE(r.attempts, 1), "
        f"CASE WHEN COALESCE(r.status, 'pending') = 'pending' THEN COALESCE(r.lease, %s) END, "
        f"r.alert, %s, %s, %s, '', '', '' "
        # WHERE true: SQLite needs it to parse ON CONFLICT after INSERT ... SELECT.
        f"FROM {source} WHERE true "
        f"ON CONFLICT ({col['schedule']}, {col['scheduled_for']}) DO NOTHING "
        f"RETURNING {col['id']} AS id, {col['schedule']} AS schedule_id, {returned_at} AS ms"
    )
    adapt = connection.ops.adapt_datetimefield_value
    params = [rows, adapt(lease_expires_at), adapt(claimed_at), worker_id, claim_token]
    return (cte, insert), params


def _epoch_ms(connection: Any, column: str) -> str:
    """SQL for a timestamp column as epoch milliseconds, where the database can say it
    exactly (PostgreSQL: every stored instant is a whole millisecond, so ROUND is exact)."""
    if connection.vendor == "postgresql":
        return f"ROUND(EXTRACT(EPOCH FROM {column}) * 1000)::bigint"
    return column


def _returned_ms(connection: Any, value: Any) -> int:
    """Epoch ms of a timestamp read back by a raw RETURNING (see ``_epoch_ms``)."""
    from django_schedulinator.timing.instants import to_ms

    if isinstance(value, int | Decimal):
        return int(value)

    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"Unreadable timestamp {value!r}")
        value = parsed
    # SQLite stores UTC without an offset (USE_TZ), and its converters return it naive.
    return to_ms(value if value.tzinfo else value.replace(tzinfo=UTC))
