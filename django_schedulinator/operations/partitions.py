"""The ledger partitioned by day on PostgreSQL, so that retention drops whole days.

Retention deletes old runs in batches (``retention.py``). At a million runs a day those
deletes are the database's main background work: every deleted row is a dead tuple for
autovacuum and a hole in six indexes of the busiest table. Partitioned, a day of runs goes
with one ``DROP TABLE``: no dead tuples, no bloat.

The layout (``manage.py partition_runs`` converts to it, ``--undo`` back):

- The run table is partitioned ``BY RANGE (scheduled_for)``: a partition per UTC day of
  nominal times, ``<table>_pYYYYMMDD``, and a default partition, ``<table>_default``, for
  runs of days that have none (a backfill of last year, days before the conversion, days
  the prune chore has not made ahead yet).
- The unique (schedule, scheduled_for) key holds across partitions (PostgreSQL requires the
  partition key in every unique index, and it is in this one): the ledger still cannot
  record an occurrence twice. The database's primary key becomes (id, scheduled_for) for the
  same reason; ids still come from one sequence, so an id alone names one run, and Django's
  primary key is still ``id``.
- The prune chore makes the partitions of the next ``DAYS_AHEAD`` days each period
  (``ensure_days``), moving any of their runs out of the default partition first.

Which runs of an expired day may go is decided by the ``Pruner``, the same rule as the
delete path's (``retention.Pruner._doomed``); the runs that must stay (unfinished, a
schedule's newest, guarding an occurrence, recorded recently) move to the default partition
before the day is dropped (``drop_day``), where the delete path prunes them later.

On a partitioned ledger, every statement that reaches runs by id in the scheduler's path
also bounds their nominal times (``models/spans.py``), so PostgreSQL plans it over the
partitions of those days only, not over every partition. A process reads the layout when
it connects (``spans.ledger_partitioned``): schedulers are restarted after a conversion.
"""

from __future__ import annotations

import logging
import re
import time as clock
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db import OperationalError, connections, transaction

from django_schedulinator.conf import app_settings
from django_schedulinator.errors import LedgerLayoutError
from django_schedulinator.models import Run, Schedule, spans
from django_schedulinator.models.batches import ids_param, is_lock_timeout

logger = logging.getLogger("django_schedulinator.retention")

# Days whose partitions the prune chore makes ahead of time.
DAYS_AHEAD = 3
# How long a drop (or a day made ahead) tries to take the schedules' and the ledger's locks.
# It asks without waiting, again and again: a request that waited would hold back every
# query behind it, and under load the schedules' table is seldom free for long. Past this,
# it gives way, and the next prune tries again.
LOCK_TRY_SECONDS = 10.0
LOCK_TRY_EVERY_SECONDS = 0.005
DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Layout:
    """A partitioned ledger: its day partitions' first days, in order."""

    days: tuple[date, ...]

    def expired(self, cutoff: datetime) -> list[date]:
        """The days whose every nominal time is before ``cutoff``."""
        return [day for day in self.days if start_of(day + DAY) <= cutoff]


def start_of(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def table() -> str:
    return Run._meta.db_table


def partition_name(day: date) -> str:
    return f"{table()}_p{day:%Y%m%d}"


def default_name() -> str:
    return f"{table()}_default"


def layout(using: str) -> Layout | None:
    """The ledger's partitions, or None when it is a plain table (or not on PostgreSQL)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class p JOIN pg_inherits i ON i.inhparent = p.oid "
            "JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE p.oid = to_regclass(%s) AND p.relkind = 'p'",
            [table()],
        )
        names = [name for (name,) in cursor.fetchall()]
        if not names:
            cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [table()])
            row = cursor.fetchone()
            if row is None or row[0] != "p":
                return None
    day = re.compile(re.escape(table()) + r"_p(\d{8})$")
    days = sorted(
        datetime.strptime(found[1], "%Y%m%d").date()
        for name in names
        if (found := day.match(name)) is not None
    )
    return Layout(tuple(days))


def _columns(connection: Any) -> str:
    qn = connection.ops.quote_name
    return ", ".join(qn(f.column) for f in Run._meta.concrete_fields)


def _prepare(cursor: Any) -> None:
    """For the rest of the transaction: lock waits bounded (a DDL statement that waits for
    a long query holds back every query queued behind it), and the deferred foreign key
    checks of rows written earlier in it done now (a table with such checks pending can
    be neither altered nor dropped)."""
    ms = max(1, int(app_settings.LOCK_TIMEOUT_SECONDS * 1000))
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{ms}ms"])
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


@dataclass(frozen=True, slots=True)
class Converted:
    """What a conversion did."""

    runs: int
    days: tuple[date, ...]


def partition(*, today: date, days_behind: int, days_ahead: int, using: str) -> Converted:
    """Convert a plain ledger to the partitioned layout, in one transaction: a partition per
    day from ``days_behind`` days before ``today`` to ``days_ahead`` after it, the default
    partition, and every run copied (older runs to the default partition). The ledger is
    locked for the copy: schedulers wait for it (or stop them first)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        raise LedgerLayoutError(
            f"partitioning needs PostgreSQL; the database {using!r} is {connection.vendor} "
            "(retention deletes old runs in batches there)"
        )
    if layout(using) is not None:
        raise LedgerLayoutError("the ledger is partitioned already")
    qn = connection.ops.quote_name
    t, old = table(), f"{table()}_unpartitioned"
    columns = _columns(connection)
    days = tuple(today + timedelta(days=n) for n in range(-days_behind, days_ahead + 1))
    with transaction.atomic(using=using), connection.cursor() as cursor:
        _prepare(cursor)
        cursor.execute(f"LOCK TABLE {qn(t)} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(f"ALTER TABLE {qn(t)} RENAME TO {qn(old)}")
        foreign_keys = _free_names(cursor, old)
        # The identity's sequence goes with the identity; the new table has its own.
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {qn(old)}")
        (last_id,) = cursor.fetchone()
        cursor.execute(f"ALTER TABLE {qn(old)} ALTER COLUMN id DROP IDENTITY")
        cursor.execute(
            f"CREATE TABLE {qn(t)} (LIKE {qn(old)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
            "PARTITION BY RANGE (scheduled_for)"
        )
        sequence = f"{t}_id_seq"
        cursor.execute(f"CREATE SEQUENCE {qn(sequence)} OWNED BY {qn(t)}.id")
        cursor.execute(f"ALTER TABLE {qn(t)} ALTER COLUMN id SET DEFAULT nextval(%s)", [sequence])
        if last_id:
            cursor.execute("SELECT setval(%s, %s)", [sequence, last_id])
        cursor.execute(
            f"ALTER TABLE {qn(t)} ADD CONSTRAINT {qn(t + '_pkey')} PRIMARY KEY (id, scheduled_for)"
        )
        with connection.schema_editor(atomic=False) as editor:
            for constraint in Run._meta.constraints:
                editor.execute(constraint.create_sql(Run, editor))
            for index in Run._meta.indexes:
                editor.execute(index.create_sql(Run, editor))
        for name, definition in foreign_keys:  # as the migrations made them
            cursor.execute(f"ALTER TABLE {qn(t)} ADD CONSTRAINT {qn(name)} {definition}")
        cursor.execute(f"CREATE TABLE {qn(default_name())} PARTITION OF {qn(t)} DEFAULT")
        for day in days:
            cursor.execute(
                f"CREATE TABLE {qn(partition_name(day))} PARTITION OF {qn(t)} "
                "FOR VALUES FROM (%s) TO (%s)",
                [start_of(day), start_of(day + DAY)],
            )
        cursor.execute(f"INSERT INTO {qn(t)} ({columns}) SELECT {columns} FROM {qn(old)}")
        runs = cursor.rowcount
        cursor.execute(f"DROP TABLE {qn(old)}")
        cursor.execute(f"ANALYZE {qn(t)}")
    spans.forget_partitioning()  # this process's statements by id: bounded from now on
    return Converted(runs=runs, days=days)


def unpartition(*, using: str) -> Converted:
    """Convert a partitioned ledger back to one plain table, as the migrations make it, in
    one transaction that copies every run. The ledger is locked for the copy."""
    connection = connections[using]
    current = layout(using)
    if current is None:
        raise LedgerLayoutError("the ledger is not partitioned")
    qn = connection.ops.quote_name
    t, old = table(), f"{table()}_partitioned"
    columns = _columns(connection)
    with transaction.atomic(using=using), connection.cursor() as cursor:
        _prepare(cursor)
        cursor.execute(f"LOCK TABLE {qn(t)} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(f"ALTER TABLE {qn(t)} RENAME TO {qn(old)}")
        _free_names(cursor, old, checks=True)
        cursor.execute(f"ALTER TABLE {qn(old)} ALTER COLUMN id DROP DEFAULT")
        cursor.execute(f"DROP SEQUENCE IF EXISTS {qn(t + '_id_seq')}")
        with connection.schema_editor(atomic=False) as editor:
            editor.create_model(Run)
        cursor.execute(f"INSERT INTO {qn(t)} ({columns}) SELECT {columns} FROM {qn(old)}")
        runs = cursor.rowcount
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence(%s, 'id'), COALESCE(MAX(id), 1), "
            f"MAX(id) IS NOT NULL) FROM {qn(t)}",
            [t],
        )
        cursor.execute(f"DROP TABLE {qn(old)}")
        cursor.execute(f"ANALYZE {qn(t)}")
    spans.forget_partitioning()
    return Converted(runs=runs, days=current.days)


def _free_names(cursor: Any, renamed: str, *, checks: bool = False) -> list[tuple[str, str]]:
    """Drop the renamed table's indexes and the constraints they back (their names are the
    ones the new table takes; index names are unique in a schema), its foreign keys, which
    it returns (name, definition), and with ``checks`` its check constraints (PostgreSQL
    names a new table's unnamed ones apart from every other in the schema). The rows are
    copied by a scan."""
    kinds = ["p", "u", "f", "c"] if checks else ["p", "u", "f"]
    cursor.execute(
        "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = to_regclass(%s) AND contype = ANY(%s) AND coninhcount = 0",
        [renamed, kinds],
    )
    qn = cursor.db.ops.quote_name
    found = cursor.fetchall()
    for name, _kind, _definition in found:
        cursor.execute(f"ALTER TABLE {qn(renamed)} DROP CONSTRAINT {qn(name)}")
    cursor.execute(
        "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = to_regclass(%s)",
        [renamed],
    )
    for (name,) in cursor.fetchall():
        cursor.execute(f"DROP INDEX {name}")
    return [(name, definition) for name, kind, definition in found if kind == "f"]


def ensure_days(*, today: date, days_ahead: int = DAYS_AHEAD, using: str) -> list[date]:
    """Make the partitions of ``today`` and the ``days_ahead`` days after it that the
    ledger lacks, each in a transaction of its own: its runs moved out of the default
    partition, then attached (which locks the parent only against other DDL). The days
    made; none when the ledger is not partitioned."""
    current = layout(using)
    if current is None:
        return []
    made = []
    for n in range(days_ahead + 1):
        day = today + timedelta(days=n)
        if day not in current.days:
            _make_day(day, using)
            made.append(day)
    return made


def _make_day(day: date, using: str) -> None:
    connection = connections[using]
    qn = connection.ops.quote_name
    name, columns = partition_name(day), _columns(connection)
    bounds = [start_of(day), start_of(day + DAY)]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        _prepare(cursor)
        # Attaching gives the new partition the foreign key, whose triggers go on the
        # schedules' table: its lock first, as every writer of both takes them (drop_day).
        _take(
            cursor,
            f"LOCK TABLE {qn(Schedule._meta.db_table)} IN SHARE ROW EXCLUSIVE MODE NOWAIT",
            using,
        )
        cursor.execute(
            f"CREATE TABLE {qn(name)} (LIKE {qn(table())} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        cursor.execute(
            f"WITH moved AS (DELETE FROM {qn(default_name())} WHERE scheduled_for >= %s "
            f"AND scheduled_for < %s RETURNING {columns}) "
            f"INSERT INTO {qn(name)} ({columns}) SELECT {columns} FROM moved",
            bounds,
        )
        cursor.execute(
            f"ALTER TABLE {qn(table())} ATTACH PARTITION {qn(name)} FOR VALUES FROM (%s) TO (%s)",
            bounds,
        )


def _take(cursor: Any, lock: str, using: str) -> None:
    """Take the locks of the statement ``lock`` (NOWAIT), asking again every
    ``LOCK_TRY_EVERY_SECONDS`` for ``LOCK_TRY_SECONDS``; then the last refusal is raised (a
    lock timeout: the prune gives way)."""
    deadline = clock.monotonic() + LOCK_TRY_SECONDS
    while True:
        try:
            with transaction.atomic(using=using):  # a savepoint: a refusal undoes only it
                cursor.execute(lock)
            return
        except OperationalError as exc:
            if not is_lock_timeout(exc) or clock.monotonic() >= deadline:
                raise
        clock.sleep(LOCK_TRY_EVERY_SECONDS)


def hold_day(day: date, using: str) -> None:
    """In the caller's transaction: no run of ``day`` changes until it ends (a share lock
    on its partition, which readers pass and writers of that day wait for)."""
    connection = connections[using]
    with connection.cursor() as cursor:
        _prepare(cursor)
        cursor.execute(f"LOCK TABLE {connection.ops.quote_name(partition_name(day))} IN SHARE MODE")


def drop_day(day: date, *, keep: Sequence[int], using: str) -> None:
    """In the caller's transaction (``hold_day`` first): take ``day``'s partition out of the
    ledger, its runs among ``keep`` moved to the default partition first, and its foreign
    key dropped; ``discard`` drops the table once the caller has committed.

    This locks the schedules and the whole ledger, for as long as the kept runs take to
    copy (those of one day: usually a few). Detaching the partition and dropping its foreign
    key change the triggers PostgreSQL keeps for it on the schedules' table, which takes that
    table's strongest lock; both locks are taken up front, the schedules first, as every
    writer of both takes them (``streaks``): a lock taken later would wait for a writer that
    waits for the first. Dropping the table itself (its files, its buffers) happens after,
    outside these locks."""
    connection = connections[using]
    qn = connection.ops.quote_name
    name, columns = qn(partition_name(day)), _columns(connection)
    with connection.cursor() as cursor:
        _prepare(cursor)
        _take(
            cursor,
            f"LOCK TABLE {qn(Schedule._meta.db_table)} IN ACCESS EXCLUSIVE MODE NOWAIT; "
            f"LOCK TABLE {qn(table())} IN ACCESS EXCLUSIVE MODE NOWAIT",
            using,
        )
        cursor.execute(f"ALTER TABLE {qn(table())} DETACH PARTITION {name}")
        if keep:
            cursor.execute(
                f"INSERT INTO {qn(table())} ({columns}) SELECT {columns} FROM {name} "
                "WHERE id = ANY(%s::bigint[])",
                [ids_param(connection, keep)],
            )
        # Detached, it would still hold the schedules it names (a schedule's delete would
        # fail on it), and dropping it would need the schedules' lock again.
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'f'",
            [partition_name(day)],
        )
        for (constraint,) in cursor.fetchall():
            cursor.execute(f"ALTER TABLE {name} DROP CONSTRAINT {qn(constraint)}")
        cursor.execute(f"ALTER TABLE {name} RENAME TO {qn(detached_name(day))}")


def detached_name(day: date) -> str:
    return f"{table()}_detached_p{day:%Y%m%d}"


def discard(*, using: str) -> int:
    """Drop the days ``drop_day`` took out of the ledger (after their transaction: those a
    process that died before it dropped them left too); how many."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return 0
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE %s "
            "AND relnamespace = to_regnamespace(current_schema())",
            [table().replace("_", "\\_") + "\\_detached\\_p%"],
        )
        names = [name for (name,) in cursor.fetchall()]
        for name in names:
            cursor.execute(f"DROP TABLE IF EXISTS {qn(name)}")
    return len(names)
