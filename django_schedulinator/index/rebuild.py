"""Build the due index from SQL: the explicit, idempotent step (and the upgrade path).

Rows are read in primary-key chunks and written under the sync layer's revision guard (by a
script of their own, ``lua/rebuild.lua``, that handles a chunk in a few calls instead of
three per row), so a rebuild never overwrites a newer write and never removes an entry
first: no due entry goes missing while it runs. Entries whose rows are gone are removed
last. A Redis lock keeps two rebuilds apart, and a marker records that the index was built;
the scheduler checks the marker inside its claim script, so a lost index (Redis restarted
empty, flushed) is noticed on the next pass and rebuilt by exactly one process.

A sharded index has a marker per shard, each recording the shard count: a shard that lost
its data (a fail-over to a replica that had not received it) is rebuilt alone, from the rows
that belong in it. An index built for another shard count (``INDEX_SHARDS`` changed) is
rebuilt only by ``rebuild_due_index`` (or a rebuild asked for in the admin), which records
the new layout in every shard it builds and every old shard it drops (so that the scripts
refuse the writes of processes still on the old count: index.py), then drops the old
layout's entries; a scheduler that finds one says so and claims nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import connections, router
from django.utils import timezone
from redis.exceptions import LockError

from django_schedulinator import signals
from django_schedulinator.conf import app_settings
from django_schedulinator.errors import RebuildInProgress
from django_schedulinator.index.due import (
    ADDED,
    FIXED,
    FORGET,
    REMOVED,
    UNCHANGED,
    Change,
    DueIndex,
    Rebuilt,
    get_index,
)
from django_schedulinator.index.sync import INDEX_FIELDS, change_for_row, keyset_pages
from django_schedulinator.management import run_command
from django_schedulinator.models.batches import json_ids, table_and_columns

logger = logging.getLogger("django_schedulinator.rebuild")

# The lock outlives any single chunk by far; it is renewed after each chunk.
LOCK_TIMEOUT_SECONDS = 60.0
EXAMPLES_KEPT = 20
T = TypeVar("T")
KINDS = {ADDED: "added", FIXED: "fixed", REMOVED: "removed", UNCHANGED: "unchanged"}


@dataclass(slots=True)
class RebuildReport:
    dry_run: bool
    rows: int = 0
    added: int = 0  # rows that call for an entry the index lacks
    fixed: int = 0  # entries whose score differs from the row
    removed: int = 0  # entries of disabled or finished rows
    orphans: int = 0  # entries of rows that no longer exist
    unchanged: int = 0
    stale: int = 0  # writes refused: the index held a newer revision than the row read
    seconds: float = 0.0
    # The index had been built for this many shards, not INDEX_SHARDS: its entries were
    # dropped before this rebuild (by a dry run: would be).
    layout_changed_from: int | None = None
    examples: dict[str, list[int]] = field(default_factory=dict)
    rows_by_shard: dict[int, int] = field(default_factory=dict)  # each shard's build marker

    def note(self, kind: str, schedule_id: int) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        kept = self.examples.setdefault(kind, [])
        if len(kept) < EXAMPLES_KEPT:
            kept.append(schedule_id)

    def tally(self, found: str, ids: list[int]) -> None:
        """Count what the index held for a chunk of rows (``DueIndex.rebuild_entries``:
        one letter per row, in the order of ``ids``), and keep the first examples."""
        for letter, kind in KINDS.items():
            count = found.count(letter)
            if not count:
                continue
            setattr(self, kind, getattr(self, kind) + count)
            kept = self.examples.setdefault(kind, [])
            at = -1
            while len(kept) < EXAMPLES_KEPT and (at := found.find(letter, at + 1)) >= 0:
                kept.append(ids[at])


def rebuild_index(
    index: DueIndex | None = None,
    *,
    dry_run: bool = False,
    reset: bool = False,
    chunk_size: int | None = None,
    built_by: str = "rebuild_due_index",
    progress: Callable[[int], None] | None = None,
    lock: Any = None,
) -> RebuildReport:
    """Rebuild under the lock; raises RebuildInProgress if another rebuild holds it.

    ``lock``: the lock already taken by :func:`take_rebuild_lock` (released here)."""
    index = index or get_index()
    # Only a rebuild of every shard changes the layout (a shard rebuilt alone is one of it).
    whole = index.covers_all
    other = index.other_layout() if whole else None
    if dry_run:
        report = _rebuild(index, None, dry_run=True, chunk_size=chunk_size, progress=progress)
        report.layout_changed_from = other
        return report
    lock = lock or take_rebuild_lock(index)
    try:
        if whole:
            other = index.other_layout()  # again, under the lock
        # Before anything is dropped or written: from now on the shards refuse the writes
        # of processes still routing by the old count (a write-back whose claim came before
        # this rebuild), instead of bringing a dropped shard back or writing an entry into
        # the wrong shard; those writes follow the new layout.
        index.record_layout(dropped=other)
        if other is not None:
            logger.warning(
                "The due index was built for %d shard(s); INDEX_SHARDS is %d: dropping the "
                "entries of the old layout and rebuilding it for %d.",
                other,
                index.shard_count,
                index.shard_count,
            )
            index.drop_layout(other)
        if reset:
            index.drop(keep_lock=True)
        report = _rebuild(index, lock, dry_run=False, chunk_size=chunk_size, progress=progress)
        report.layout_changed_from = other
        index.mark_built(
            {"built_at": timezone.now().isoformat(), "rows": report.rows, "by": built_by},
            report.rows_by_shard,
        )
        signals.send(
            signals.index_rebuilt,
            DueIndex,
            rows=report.rows,
            added=report.added,
            fixed=report.fixed,
            removed=report.removed,
            built_by=built_by,
        )
        return report
    finally:
        try:
            lock.release()
        except LockError:
            logger.warning("The rebuild lock expired before the rebuild ended.")


def take_rebuild_lock(index: DueIndex) -> Any:
    """Take the rebuild lock now, for a rebuild started later (``rebuild_index(lock=...)``),
    so the caller knows at once whether it will run; RebuildInProgress if another holds it."""
    lock = index.control.rebuild_lock(LOCK_TIMEOUT_SECONDS)
    if not lock.acquire(blocking=False):
        raise RebuildInProgress("Another rebuild of the due index is running; try again later.")
    return lock


def ensure_built(
    index: DueIndex,
    *,
    built_by: str,
    should_stop: Callable[[], bool],
    poll: float = 0.25,
    progress: Callable[[int], None] | None = None,
) -> bool:
    """Make sure the index was built: one process rebuilds it (the shards that are not
    built, each from its own rows), the others wait for it. False if it was built for
    another shard count (``other_layout``), which only ``rebuild_due_index`` rebuilds, or if
    told to stop. ``progress`` is called after each chunk of a rebuild done here."""
    waited = False
    while not should_stop():
        if not (missing := _to_build(index)):
            return missing is not None
        try:
            lock = take_rebuild_lock(index)
        except RebuildInProgress:
            if not waited:
                logger.info("Waiting for another process to rebuild the due index.")
                waited = True
            time.sleep(poll)
            continue
        if not (missing := _to_build(index)):
            # Another process built it between the look above and taking the lock.
            with contextlib.suppress(LockError):
                lock.release()
            return missing is not None
        target = index
        if len(missing) < len(index.parts):
            target = index.subset(missing)
            logger.warning(
                "Shard(s) %s of the due index lost their data (a fail-over to a replica that "
                "had not received it, a flush); rebuilding them alone.",
                ", ".join(map(str, missing)),
            )
        report = rebuild_index(target, built_by=built_by, lock=lock, progress=progress)
        if _ever_dispatched():
            logger.warning(
                "The due index was missing from Redis although schedulers have dispatched runs "
                "from this database before: Redis lost its data (restarted without persistence, "
                "flushed, evicted) or is a new server, or KEY_PREFIX changed; rebuilt it from "
                "%d schedules in %.1fs.",
                report.rows,
                report.seconds,
            )
        else:
            logger.info(
                "Built the due index: no scheduler has dispatched a run from this database yet "
                "(a new install), so nothing was lost; built it from %d schedules in %.1fs.",
                report.rows,
                report.seconds,
            )
        return True
    return False


def _to_build(index: DueIndex) -> list[int] | None:
    """The shards to build (none: built); None if the index was built for another shard
    count: said here, and left to ``rebuild_due_index``."""
    other = index.other_layout()
    if other is not None:
        logger.error(layout_message(other, index.shard_count))
        return None
    return index.missing_shards()


def layout_message(built_for: int, shards: int) -> str:
    """What a process says when the index was built for another shard count than its own."""
    return (
        f"The due index was built for {built_for} shard(s), and INDEX_SHARDS is {shards} "
        f"here: this scheduler claims nothing until the index is rebuilt for {shards}. Give "
        f"every process (schedulers and web) the same INDEX_SHARDS, then run "
        f"{run_command('rebuild_due_index')} (docs/scaling.md, changing the shard count)."
    )


def _ever_dispatched() -> bool:
    """Whether a scheduler ever dispatched a run from this database, which it can only do
    from a built index: then a missing marker means the index was lost, else this is its
    first build.

    The marker lives in Redis, so it cannot tell a first start from a FLUSHALL by itself; the
    ledger can, with no new state to keep. ``dispatched_at`` is set only when a scheduler
    records an outcome (runs written by resume, run now or backfill have none until then). One
    ``LIMIT 1`` query, only on the rare pass that finds the marker missing. An index built
    but lost before anything was dispatched logs INFO: a rebuild then restores all of it.
    """
    from django_schedulinator.models import Run

    db = router.db_for_write(Run)
    return Run.objects.using(db).filter(dispatched_at__isnull=False).exists()


def _rebuild(
    index: DueIndex,
    lock: Any,
    *,
    dry_run: bool,
    chunk_size: int | None,
    progress: Callable[[int], None] | None,
) -> RebuildReport:
    from django_schedulinator.models import Schedule

    started = time.monotonic()
    size = chunk_size or app_settings.REBUILD_CHUNK_SIZE
    db = router.db_for_write(Schedule)
    report = RebuildReport(dry_run=dry_run)
    # Entries that were there before the rebuild may belong to rows deleted since (a sync
    # write lost): those are looked for at the end, unless the index started empty.
    held_entries = index.counts()[0] > 0

    def written(ids: list[int], writing: Future[Rebuilt]) -> None:
        found, stale = writing.result()
        report.tally(found, ids)
        report.stale += stale
        report.rows += len(ids)
        for sid in ids:
            shard = sid % index.shard_count
            report.rows_by_shard[shard] = report.rows_by_shard.get(shard, 0) + 1
        if not dry_run:
            # A row deleted after its chunk was read, whose sync write removed its entry
            # before this chunk's write put it back: its entry was added, and its row is
            # gone now. Removed here, so the rebuild leaves no entry behind of its own.
            added = [sid for sid, letter in zip(ids, found, strict=True) if letter == ADDED]
            forget(rows_gone(db, added) if added else [])
            lock.reacquire()
        if progress:
            progress(len(ids))

    def forget(orphans: list[int]) -> None:
        for sid in orphans:
            report.note("orphans", sid)
        if orphans and not dry_run:
            index.apply([Change(sid, 0, FORGET) for sid in orphans])

    # Redis works on one chunk (in the writer's thread) while this thread reads the next
    # from the database and builds its changes: the two servers' time overlaps instead of
    # adding up. At most two chunks are held, whatever the table's size.
    with ThreadPoolExecutor(1, thread_name_prefix="schedulinator-rebuild") as redis_side:
        pending: deque[tuple[list[int], Future[Rebuilt]]] = deque()
        for read in index_rows(db, size):
            # A shard rebuilt alone (or one of several): the rows that belong in it.
            rows = [row for row in read if index.owns(row[0])]
            if not rows:
                continue
            changes = [change_for_row(*row) for row in rows]
            pending.append(
                (
                    [row[0] for row in rows],
                    redis_side.submit(index.rebuild_entries, changes, dry_run=dry_run),
                )
            )
            if len(pending) > 1:
                written(*pending.popleft())
        while pending:
            written(*pending.popleft())

        # Entries whose rows are gone. An entry seen here was written after its row
        # committed, so a row missing now was deleted: removing it cannot lose a new
        # schedule. The next chunk of the scan is read while this one is looked up.
        for ids in _ahead(index.iter_members(size), redis_side) if held_entries else ():
            forget(missing_rows(db, ids))
            if not dry_run:
                lock.reacquire()
            if progress:
                progress(0)  # no rows, but the rebuild moved on (a scheduler's /healthz)
    report.seconds = time.monotonic() - started
    return report


def _ahead(items: Iterator[T], pool: ThreadPoolExecutor) -> Iterator[T]:
    """``items``, each one taken in ``pool``'s thread while the caller works on the one
    before."""
    done = object()
    coming = pool.submit(next, items, done)
    while (item := coming.result()) is not done:
        coming = pool.submit(next, items, done)
        yield item  # type: ignore[misc]


def index_rows(db: str, size: int) -> Iterator[list[tuple[Any, ...]]]:
    """``INDEX_FIELDS`` of every schedule in primary-key order, ``size`` rows at a time
    (keyset pages, each its own query: bounded memory, and no snapshot held for the whole
    table).

    On PostgreSQL with psycopg 3 the rows travel in binary (``_fetch_binary``): the ORM's
    two timestamps per row, parsed in Python, were most of a rebuild's time (10 s of CPU
    per million rows against half a second). Elsewhere the ORM reads them (``keyset_pages``).
    """
    from django_schedulinator.models import Schedule

    connection = connections[db]
    if connection.vendor != "postgresql" or not _psycopg3():
        yield from keyset_pages(Schedule.objects.using(db), INDEX_FIELDS, size)
        return
    table, column = table_and_columns(Schedule, connection)
    pk = column["id"]
    columns = ", ".join(column["id" if name == "pk" else name] for name in INDEX_FIELDS)
    select = f"SELECT {columns} FROM {table}"
    first, after = (
        f"{select} ORDER BY {pk} LIMIT %s",
        f"{select} WHERE {pk} > %s ORDER BY {pk} LIMIT %s",
    )
    last = None
    while True:
        if last is None:
            rows = _fetch_binary(connection, first, [size])
        else:
            rows = _fetch_binary(connection, after, [last, size])
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def rows_gone(db: str, ids: list[int]) -> list[int]:
    """Those of ``ids`` (ascending: rows of a chunk just read) whose rows are gone now. One
    range of the primary key, read in order, costs a tenth of looking each id up."""
    from django_schedulinator.models import Schedule

    rows = Schedule.objects.using(db).filter(pk__range=(ids[0], ids[-1]))
    existing = set(rows.values_list("pk", flat=True))
    return [sid for sid in ids if sid not in existing]


def missing_rows(db: str, ids: list[int]) -> list[int]:
    """Those of ``ids`` that have no row. On PostgreSQL (psycopg 3) one anti-join of an
    array sent in binary, which returns only the missing ids (the ORM's ``IN`` list sent
    every id as SQL text and read every row back: 6 s of PostgreSQL's CPU per million)."""
    from django_schedulinator.models import Schedule

    connection = connections[db]
    if connection.vendor != "postgresql" or not _psycopg3():
        existing = set(
            Schedule.objects.using(db).filter(pk__in=json_ids(ids, db)).values_list("pk", flat=True)
        )
        return [sid for sid in ids if sid not in existing]
    table, column = table_and_columns(Schedule, connection)
    rows = _fetch_binary(
        connection,
        f"SELECT u.id FROM unnest(%s::bigint[]) AS u(id) "
        f"WHERE NOT EXISTS (SELECT 1 FROM {table} s WHERE s.{column['id']} = u.id)",
        [sorted(ids)],
    )
    return [row[0] for row in rows]


def _fetch_binary(connection: Any, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Every row of a query on PostgreSQL with psycopg 3, sent and read in binary: psycopg's
    C loaders, where the ORM parses each timestamp in Python (Django's time-zone loader).
    Django's own cursors bind on the client, which cannot return binary rows; the query is
    never prepared (a connection pooler in transaction mode would lose the statement)."""
    import psycopg

    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, binary=True, prepare=False)
        return cursor.fetchall()


def _psycopg3() -> bool:
    """Whether Django's PostgreSQL backend runs on psycopg 3 (not psycopg2)."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)
