"""QuerySets with intention-revealing names, and the batched conditional advance."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import connections, models
from django.db.models.expressions import RawSQL

if TYPE_CHECKING:
    from .models import Schedule  # noqa: F401 - named in a string below


class Advance(NamedTuple):
    """Move one schedule past a fired occurrence, if its row still holds ``revision``."""

    schedule_id: int
    revision: int
    next_run_at: datetime | None


class PendingRun(NamedTuple):
    """One occurrence to enter the ledger, with what will be dispatched for it."""

    schedule_id: int
    scheduled_for: datetime
    task: str
    args: Any
    kwargs: Any


# Backends whose batches travel as one JSON parameter: the SQL text stays short and constant
# (the driver parses it once), whatever the batch size, and nothing is quoted per value.
JSON_BATCH_VENDORS = ("postgresql", "sqlite")


def batches_as_json(connection: Any) -> bool:
    # RETURNING arrived in SQLite 3.35; Django's flag tracks it for both backends.
    return (
        connection.vendor in JSON_BATCH_VENDORS
        and connection.features.can_return_columns_from_insert
    )


def json_ids(ids: Sequence[int], using: str) -> RawSQL:
    """A subquery yielding ``ids``, for ``filter(pk__in=json_ids(...))`` on large batches."""
    connection = connections[using]
    payload = json.dumps(list(ids))
    if connection.vendor == "postgresql":
        return RawSQL("SELECT (jsonb_array_elements_text(%s::jsonb))::bigint", [payload])
    if connection.vendor == "sqlite":
        return RawSQL("SELECT value FROM json_each(%s)", [payload])
    return RawSQL(", ".join(["%s"] * len(ids)), list(ids))  # plain IN list elsewhere


def _json_rows(connection: Any, *types: str) -> str:
    """SQL that turns a JSON array of arrays (one parameter) into typed rows."""
    if connection.vendor == "postgresql":
        pg = {"bigint": "bigint", "timestamp": "timestamptz", "text": "text"}
        columns = [
            f"e->{i}" if kind == "json" else f"(e->>{i})::{pg[kind]}"
            for i, kind in enumerate(types)
        ]
        return f"SELECT {', '.join(columns)} FROM jsonb_array_elements(%s::jsonb) AS e"
    # SQLite: json_extract returns arrays and objects as JSON text, which is how Django
    # stores a JSONField there.
    columns = [f"json_extract(value, '$[{i}]')" for i in range(len(types))]
    return f"SELECT {', '.join(columns)} FROM json_each(%s)"


def _json_time(connection: Any, value: datetime | None) -> str | None:
    if value is None:
        return None
    if connection.vendor == "postgresql":
        return value.isoformat()
    return str(connection.ops.adapt_datetimefield_value(value))  # Django's SQLite text form


def _names(model: Any, connection: Any) -> tuple[str, dict[str, str]]:
    qn = connection.ops.quote_name
    meta = model._meta
    return qn(meta.db_table), {f.name: qn(f.column) for f in meta.concrete_fields}


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def advance(self, advances: Sequence[Advance], fired_at: datetime) -> dict[int, int]:
        """Conditionally advance many schedules in one statement.

        Each row moves only if its revision is still the one read by the claimer, so of two
        processes that claimed the same occurrence exactly one wins. Returns
        ``{schedule_id: new_revision}`` for the rows that moved. Call inside a transaction.
        """
        if not advances:
            return {}
        connection = connections[self.db]
        if not batches_as_json(connection):
            return self._advance_row_by_row(advances, fired_at)
        table, col = _names(self.model, connection)
        rows = json.dumps(
            [[a.schedule_id, a.revision, _json_time(connection, a.next_run_at)] for a in advances]
        )
        sql = (
            f"WITH v(sid, rev, nxt) AS ({_json_rows(connection, 'bigint', 'bigint', 'timestamp')}) "
            f"UPDATE {table} SET {col['next_run_at']} = v.nxt, "
            f"{col['revision']} = {table}.{col['revision']} + 1, "
            f"{col['run_count']} = {table}.{col['run_count']} + 1, "
            f"{col['last_run_at']} = %s "
            f"FROM v WHERE {table}.{col['id']} = v.sid AND {table}.{col['revision']} = v.rev "
            f"RETURNING {table}.{col['id']}, {table}.{col['revision']}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [rows, connection.ops.adapt_datetimefield_value(fired_at)])
            return {int(sid): int(rev) for sid, rev in cursor.fetchall()}

    def _advance_row_by_row(
        self, advances: Sequence[Advance], fired_at: datetime
    ) -> dict[int, int]:
        # Portable fallback for other backends: same guarantee, one statement per row.
        moved: dict[int, int] = {}
        for a in advances:
            updated = self.filter(pk=a.schedule_id, revision=a.revision).update(
                next_run_at=a.next_run_at,
                revision=models.F("revision") + 1,
                run_count=models.F("run_count") + 1,
                last_run_at=fired_at,
            )
            if updated:
                moved[a.schedule_id] = a.revision + 1
        return moved


class RunQuerySet(models.QuerySet[Any]):
    def pending(self) -> RunQuerySet:
        return self.filter(status="pending")

    def lease_expired(self, now: datetime) -> RunQuerySet:
        return self.pending().filter(lease_expires_at__lt=now)

    def insert_pending(
        self,
        runs: Sequence[PendingRun],
        *,
        claimed_at: datetime,
        worker_id: str,
        claim_token: str,
        lease_expires_at: datetime,
    ) -> dict[int, int]:
        """Insert pending runs, skipping occurrences already in the ledger.

        Returns ``{schedule_id: run_id}`` for the runs inserted. The unique constraint on
        (schedule, scheduled_for) is what makes an occurrence impossible to record twice.
        """
        if not runs:
            return {}
        connection = connections[self.db]
        if not batches_as_json(connection):
            return self._insert_pending_portable(
                runs, claimed_at, worker_id, claim_token, lease_expires_at
            )
        table, col = _names(self.model, connection)
        names = (
            "schedule",
            "scheduled_for",
            "task",
            "args",
            "kwargs",
            "status",
            "claimed_at",
            "worker_id",
            "claim_token",
            "lease_expires_at",
            "attempts",
            "error",
        )
        rows = json.dumps(
            [
                [r.schedule_id, _json_time(connection, r.scheduled_for), r.task, r.args, r.kwargs]
                for r in runs
            ]
        )
        values = _json_rows(connection, "bigint", "timestamp", "text", "json", "json")
        sql = (
            f"WITH v(sid, sf, task, args, kwargs) AS ({values}) "
            f"INSERT INTO {table} ({', '.join(col[n] for n in names)}) "
            f"SELECT v.sid, v.sf, v.task, v.args, v.kwargs, %s, %s, %s, %s, %s, 1, '' "
            # WHERE true: SQLite needs it to parse ON CONFLICT after INSERT ... SELECT.
            f"FROM v WHERE true "
            f"ON CONFLICT ({col['schedule']}, {col['scheduled_for']}) DO NOTHING "
            f"RETURNING {col['id']}, {col['schedule']}"
        )
        adapt = connection.ops.adapt_datetimefield_value
        params = [
            rows,
            "pending",
            adapt(claimed_at),
            worker_id,
            claim_token,
            adapt(lease_expires_at),
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {int(sid): int(rid) for rid, sid in cursor.fetchall()}

    def _insert_pending_portable(
        self,
        runs: Sequence[PendingRun],
        claimed_at: datetime,
        worker_id: str,
        claim_token: str,
        lease_expires_at: datetime,
    ) -> dict[int, int]:
        self.bulk_create(
            [
                self.model(
                    schedule_id=r.schedule_id,
                    scheduled_for=r.scheduled_for,
                    task=r.task,
                    args=r.args,
                    kwargs=r.kwargs,
                    claimed_at=claimed_at,
                    worker_id=worker_id,
                    claim_token=claim_token,
                    lease_expires_at=lease_expires_at,
                )
                for r in runs
            ],
            ignore_conflicts=True,
        )
        return dict(self.pending().filter(claim_token=claim_token).values_list("schedule_id", "pk"))
