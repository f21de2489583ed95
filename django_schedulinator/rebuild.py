"""Build the due index from SQL: the explicit, idempotent step (and the upgrade path).

Rows are read in primary-key chunks and written with the same revision-guarded script as the
sync layer, so a rebuild never overwrites a newer write and never removes an entry first:
no due entry goes missing while it runs. Entries whose rows are gone are removed last. A
Redis lock keeps two rebuilds apart, and a marker records that the index was built; the
scheduler checks the marker inside its claim script, so a lost index (Redis restarted
empty, flushed) is noticed on the next pass and rebuilt by exactly one process.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import router
from django.utils import timezone
from redis.exceptions import LockError

from . import signals
from .conf import app_settings
from .errors import RebuildInProgress as RebuildInProgress  # its home was here
from .index import FORGET, SET, ApplyResult, Change, DueIndex, get_index
from .sync import INDEX_FIELDS, change_for_row, keyset_pages

logger = logging.getLogger("django_schedulinator.rebuild")

# The lock outlives any single chunk by far; it is renewed after each chunk.
LOCK_TIMEOUT_SECONDS = 60.0
EXAMPLES_KEPT = 20


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
    examples: dict[str, list[int]] = field(default_factory=dict)

    def note(self, kind: str, schedule_id: int) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        kept = self.examples.setdefault(kind, [])
        if len(kept) < EXAMPLES_KEPT:
            kept.append(schedule_id)


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
    if dry_run:
        return _rebuild(index, None, dry_run=True, chunk_size=chunk_size, progress=progress)
    lock = lock or take_rebuild_lock(index)
    try:
        if reset:
            index.drop(keep_lock=True)
        report = _rebuild(index, lock, dry_run=False, chunk_size=chunk_size, progress=progress)
        index.mark_built(
            {"built_at": timezone.now().isoformat(), "rows": report.rows, "by": built_by}
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
    lock = index.rebuild_lock(LOCK_TIMEOUT_SECONDS)
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
    """Make sure the index was built: one process rebuilds it, the others wait for it.
    ``progress`` is called after each chunk of a rebuild done here (``rebuild_index``)."""
    waited = False
    while not should_stop():
        if index.is_built():
            return True
        try:
            lock = take_rebuild_lock(index)
        except RebuildInProgress:
            if not waited:
                logger.info("Waiting for another process to rebuild the due index.")
                waited = True
            time.sleep(poll)
            continue
        if index.is_built():
            # Another process built it between the look above and taking the lock.
            with contextlib.suppress(LockError):
                lock.release()
            return True
        report = rebuild_index(index, built_by=built_by, lock=lock, progress=progress)
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
    from .models import Run

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
    from .models import Schedule

    started = time.monotonic()
    size = chunk_size or app_settings.REBUILD_CHUNK_SIZE
    db = router.db_for_write(Schedule)
    report = RebuildReport(dry_run=dry_run)
    written = ApplyResult()
    for rows in keyset_pages(Schedule.objects.using(db), INDEX_FIELDS, size):
        current = index.scores([row[0] for row in rows])
        changes = []
        for row in rows:
            change = change_for_row(*row)
            changes.append(change)
            score = current[row[0]]
            if change.op == SET:
                kind = "added" if score is None else "fixed" if score != change.score_ms else None
            else:
                kind = "removed" if score is not None else None
            report.note(kind or "unchanged", row[0])
        report.rows += len(rows)
        if not dry_run:
            written += index.apply(changes)
            lock.reacquire()
        if progress:
            progress(len(rows))

    # Entries whose rows are gone. An entry seen here was written after its row committed,
    # so a row missing now was deleted: removing it cannot lose a new schedule.
    for ids in index.iter_members(size):
        existing = set(Schedule.objects.using(db).filter(pk__in=ids).values_list("pk", flat=True))
        orphans = [sid for sid in ids if sid not in existing]
        for sid in orphans:
            report.note("orphans", sid)
        if not dry_run:
            if orphans:
                written += index.apply([Change(sid, 0, FORGET) for sid in orphans])
            lock.reacquire()
        if progress:
            progress(0)  # no rows, but the rebuild moved on (a scheduler's /healthz)
    report.stale = written.stale
    report.seconds = time.monotonic() - started
    return report
