"""Mirror committed schedule rows into the due index.

The signal handlers call this after each commit; bulk paths that bypass signals
(``QuerySet.update``, ``bulk_create``, raw SQL, data migrations) call ``resync_schedules``.
Rows are always re-read from the database, so what reaches Redis is what was committed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.db import models, router, transaction
from django.db.models import Q

from django_schedulinator import timing
from django_schedulinator.conf import app_settings
from django_schedulinator.index.due import (
    FORGET,
    REMOVE,
    SET,
    ApplyResult,
    Change,
    DueIndex,
    get_index,
)
from django_schedulinator.management import run_command

logger = logging.getLogger("django_schedulinator.sync")

INDEX_FIELDS = ("pk", "revision", "enabled", "next_run_at", "due_at", "jitter")

# Whether a schedule belongs in the index: the one rule, for rows read in Python and for
# queries. Sync, the claim's re-check, rebuild, reconcile and the drift check all use it.
IN_INDEX = Q(enabled=True, next_run_at__isnull=False)


def belongs_in_index(enabled: bool, next_run_at: datetime | None) -> bool:
    """An enabled schedule with a next run has an entry; any other has none."""
    return bool(enabled) and next_run_at is not None


def change_for_row(
    pk: int,
    revision: int,
    enabled: bool,
    next_run_at: datetime | None,
    due_at: datetime | None,
    jitter: timedelta | None,
) -> Change:
    """The index entry a row calls for: when its next run is due, or no entry.

    The score is ``due_at`` (the nominal time plus jitter) where it belongs to
    ``next_run_at``; a row whose ``due_at`` does not (a bulk path moved ``next_run_at``
    alone) is scored at its nominal time, and the claim's re-check recomputes its jitter.
    """
    if belongs_in_index(enabled, next_run_at):
        assert next_run_at is not None  # for mypy: belongs_in_index says so
        due = timing.stored_due_at(next_run_at, due_at, jitter) or next_run_at
        return Change(pk, revision, SET, timing.to_ms(due))
    return Change(pk, revision, REMOVE)


def resync_schedules(
    schedules: models.QuerySet[Any] | Iterable[Any] | None = None,
    *,
    using: str | None = None,
    index: DueIndex | None = None,
) -> ApplyResult:
    """Bring the index entries of ``schedules`` in line with their committed rows.

    ``schedules`` is a Schedule QuerySet, an iterable of Schedule instances or primary keys,
    or None for every schedule. Ids whose rows no longer exist leave the index. Safe to call
    at any time and from any process: writes are guarded by the row revision.
    """
    from django_schedulinator.models import Schedule

    index = index or get_index()
    db = using or router.db_for_write(Schedule)
    size = app_settings.REBUILD_CHUNK_SIZE
    result = ApplyResult()
    if schedules is None or isinstance(schedules, models.QuerySet):
        queryset = Schedule.objects.all() if schedules is None else schedules
        if schedules is None or using:
            queryset = queryset.using(db)
        for rows in keyset_pages(queryset, INDEX_FIELDS, size):
            result += index.apply([change_for_row(*row) for row in rows])
        return result
    for ids in _chunks((int(getattr(item, "pk", item)) for item in schedules), size):
        result += index.apply(changes_for_ids(ids, db))
    return result


def changes_for_ids(ids: list[int], db: str) -> list[Change]:
    """Changes for explicit ids: an id whose row is gone leaves the index."""
    from django_schedulinator.models import Schedule

    rows = {
        row[0]: row
        for row in Schedule.objects.using(db).filter(pk__in=ids).values_list(*INDEX_FIELDS)
    }
    return [change_for_row(*rows[pk]) if pk in rows else Change(pk, 0, FORGET) for pk in ids]


def keyset_pages(
    queryset: models.QuerySet[Any], fields: tuple[str, ...], size: int
) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``queryset`` (``fields[0]`` must be "pk") in pk order, ``size`` at a time.

    Keyset pagination: bounded memory and no OFFSET scans, however large the table.
    """
    rows_qs = queryset.order_by("pk").values_list(*fields)
    last = None
    while True:
        page = rows_qs if last is None else rows_qs.filter(pk__gt=last)
        rows = list(page[:size])
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def _chunks(ids: Iterable[int], size: int) -> Iterator[list[int]]:
    chunk: list[int] = []
    for sid in ids:
        chunk.append(sid)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _FailedWrites(threading.local):
    count = 0
    error: Exception | None = None


_failed = _FailedWrites()


def failed_writes() -> tuple[int, Exception | None]:
    """How many of this thread's after-commit index writes have failed so far, and the last
    error. A caller that wants to tell its user (the admin's actions) reads it before its
    change and again once the change has committed: the write itself never raises."""
    return _failed.count, _failed.error


class _ResyncAfterCommit:
    """The ids saved in one transaction, written to the index in one ``resync_schedules``
    call once it commits: a transaction of 1,000 saves makes one read of its rows per chunk
    and one index script per chunk, not 1,000 of each."""

    def __init__(self, using: str, index: DueIndex | None) -> None:
        self.using = using
        self.index = index
        self.ids: dict[int, None] = {}  # insertion-ordered, each id once
        # Set once it runs: it takes no more ids then. A commit removes its callbacks
        # before running them, but a test's captureOnCommitCallbacks(execute=True) leaves
        # them in the transaction, where a later save would join a write already made.
        self.ran = False

    def add(self, ids: Iterable[int]) -> None:
        self.ids.update(dict.fromkeys(ids))

    def __call__(self) -> None:
        self.ran = True
        pks = list(self.ids)
        try:
            resync_schedules(pks, using=self.using, index=self.index)
        except Exception as exc:
            _failed.count += 1
            _failed.error = exc
            logger.warning(
                "Could not update the due index for schedule(s) %s after commit; the rows are "
                "saved. Run %s once Redis is reachable to bring the index back in line.",
                ", ".join(map(str, pks[:20])),
                run_command("rebuild_due_index"),
                exc_info=True,
            )


def _pending_resync(using: str, index: DueIndex | None) -> _ResyncAfterCommit | None:
    """The resync this transaction registered last, if it can take more ids: it has not run,
    nothing was registered after it (callbacks keep their order) and it belongs to the savepoint now
    open (a savepoint rolled back drops its callbacks, and must drop only its own ids)."""
    connection = transaction.get_connection(using)
    if not connection.in_atomic_block or not connection.run_on_commit:
        return None
    last = connection.run_on_commit[-1]
    if not isinstance(last, tuple) or len(last) < 2:  # Django's (savepoint ids, callback, ...)
        return None
    savepoints, callback = last[0], last[1]
    # Django drops a callback when any savepoint it was registered in rolls back. Those
    # released since can no longer roll back, and None marks a block without a savepoint
    # (QuerySet.delete sends its signals in one): the ids join it when every savepoint open
    # now is one of its own, so both are dropped or kept together.
    if (
        isinstance(callback, _ResyncAfterCommit)
        and not callback.ran
        and callback.index is index
        and set(connection.savepoint_ids) - {None} <= savepoints
    ):
        return callback
    return None


def resync_on_commit(ids: Iterable[int], *, using: str, index: DueIndex | None = None) -> None:
    """Bring the index entries of ``ids`` in line with their rows once the transaction
    commits (at once outside one); a rollback writes nothing. Saves in a row in one
    transaction share one write. Never raises into the caller: the row is committed and
    stays the truth, only the index lags behind it (reconcile heals it; the warning names
    the command that rebuilds it)."""
    pending = _pending_resync(using, index)
    if pending is not None:
        pending.add(ids)
        return
    resync = _ResyncAfterCommit(using, index)
    resync.add(ids)
    transaction.on_commit(resync, using=using)
