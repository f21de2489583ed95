"""QuerySets with intention-revealing names, and the batched conditional advance."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import connections, models

if TYPE_CHECKING:
    from .models import Schedule


class Advance(NamedTuple):
    """Move one schedule past a fired occurrence, if its row still holds ``revision``."""

    schedule_id: int
    revision: int
    next_run_at: datetime | None


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def enabled(self) -> ScheduleQuerySet:
        return self.filter(enabled=True)

    def due(self, now: datetime) -> ScheduleQuerySet:
        return self.enabled().filter(next_run_at__lte=now)

    def advance(self, advances: Sequence[Advance], fired_at: datetime) -> dict[int, int]:
        """Conditionally advance many schedules in one statement.

        Each row moves only if its revision is still the one read by the claimer, so of two
        processes that claimed the same occurrence exactly one wins. Returns
        ``{schedule_id: new_revision}`` for the rows that moved. Call inside a transaction.
        """
        if not advances:
            return {}
        connection = connections[self.db]
        if connection.vendor in ("postgresql", "sqlite"):
            return self._advance_returning(connection, advances, fired_at)
        return self._advance_row_by_row(advances, fired_at)

    def _advance_returning(
        self, connection: Any, advances: Sequence[Advance], fired_at: datetime
    ) -> dict[int, int]:
        meta = self.model._meta
        qn = connection.ops.quote_name
        table = qn(meta.db_table)
        column = {name: qn(meta.get_field(name).column) for name in (
            "id", "revision", "next_run_at", "last_run_at", "run_count"
        )}
        # PostgreSQL must be told the type of a column that may be all NULLs.
        placeholder = (
            "(%s, %s, CAST(%s AS timestamp with time zone))"
            if connection.vendor == "postgresql"
            else "(%s, %s, %s)"
        )
        adapt = connection.ops.adapt_datetimefield_value
        params: list[Any] = []
        for a in advances:
            params.extend((a.schedule_id, a.revision, adapt(a.next_run_at)))
        params.append(adapt(fired_at))
        sql = (
            f"WITH v(sid, rev, nxt) AS (VALUES {', '.join([placeholder] * len(advances))}) "
            f"UPDATE {table} SET {column['next_run_at']} = v.nxt, "
            f"{column['revision']} = {table}.{column['revision']} + 1, "
            f"{column['run_count']} = {table}.{column['run_count']} + 1, "
            f"{column['last_run_at']} = %s "
            f"FROM v WHERE {table}.{column['id']} = v.sid "
            f"AND {table}.{column['revision']} = v.rev "
            f"RETURNING {table}.{column['id']}, {table}.{column['revision']}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {int(sid): int(rev) for sid, rev in cursor.fetchall()}

    def _advance_row_by_row(
        self, advances: Sequence[Advance], fired_at: datetime
    ) -> dict[int, int]:
        # Portable fallback for backends without UPDATE ... RETURNING: same guarantee,
        # one statement per row.
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
