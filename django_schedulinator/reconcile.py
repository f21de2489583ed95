"""Heal lost sync writes without a full rebuild.

The sync layer writes the index after each commit; if that write never lands (Redis was
down, the process died between the commit and the write), the row is saved and its entry is
stale. Every save sets ``updated_at``, so a cheap pass re-indexes the rows changed since a
watermark, in bounded batches, with the same revision-guarded writes as the sync layer
(re-indexing a row that was fine changes nothing). The watermark lives in Redis next to the
index: any scheduler can take the next turn. The scheduler's own advance does not touch
``updated_at``; it writes the index itself and its in-flight leases cover its failures.

``updated_at`` and the watermark are times of the database's clock (``dbclock``), never a
host's: a host whose clock runs ahead would otherwise carry the watermark past the saves of
every other host. A row stamped ahead of the database anyway (saved by such a host before
the upgrade, or by a bulk write that used a host's time) is read, but the watermark never
goes past the database's now.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import router
from django.db.models import Q

from .conf import app_settings
from .dbclock import database_now
from .index import HEAL_REMOVE, HEAL_SET, SET, ApplyResult, DueIndex
from .sync import INDEX_FIELDS, change_for_row

# Where updated_at is in the rows read: after the fields of the index entry.
UPDATED_AT = len(INDEX_FIELDS)


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    rows: int  # rows read (changed since the watermark)
    healed: int  # entries added, moved or removed: revisions the index had not recorded
    stale: int  # rows whose revision the index already recorded: nothing to heal
    caught_up: bool  # False: more changed rows wait for the next pass
    # Of ``healed``: rows the index held no revision of at all. New schedules whose sync
    # write was lost, or an index that lost its data; the rest are missed sync writes.
    unrecorded: int = 0
    batches: int = 0  # batches read in this pass
    # The index was not built (Redis lost its data, or a first start): nothing was read,
    # the claim rebuilds it from every row.
    not_built: bool = False

    @property
    def missed(self) -> int:
        """Entries of rows the index knew at an older revision: sync writes that were lost."""
        return self.healed - self.unrecorded


def reconcile(
    index: DueIndex | None = None,
    *,
    batch_size: int | None = None,
    lookback: timedelta | None = None,
    using: str | None = None,
    max_seconds: float | None = None,
) -> ReconcileReport:
    """Re-index the rows changed since the watermark, a batch at a time, moving the watermark.

    While behind, the pass keeps reading batches until it has caught up or ``max_seconds``
    (``RECONCILE_MAX_SECONDS``; 0 reads one batch) have passed on a monotonic clock, so a
    backlog is worked off at the speed of the database and Redis rather than one batch per
    ``RECONCILE_SECONDS``.
    """
    from .models import Schedule

    index = index or DueIndex()
    if not index.is_built():
        # Its data is gone (the watermark with it): the rebuild the claim does indexes every
        # row, and healing rows here would call a lost index missed writes.
        return ReconcileReport(rows=0, healed=0, stale=0, caught_up=True, not_built=True)
    size = batch_size or app_settings.RECONCILE_BATCH_SIZE
    lookback = lookback or timedelta(seconds=app_settings.RECONCILE_LOOKBACK_SECONDS)
    budget = app_settings.RECONCILE_MAX_SECONDS if max_seconds is None else max_seconds
    deadline = time.monotonic() + budget
    db = using or router.db_for_write(Schedule)
    now = database_now(db)
    rows = batches = 0
    written = ApplyResult()
    while True:
        read, caught_up, result = _batch(index, db, size, lookback, now)
        rows, batches, written = rows + read, batches + 1, written + result
        if caught_up or time.monotonic() >= deadline:
            break
    return ReconcileReport(
        rows=rows,
        healed=written.changed,
        stale=written.stale,
        caught_up=caught_up,
        unrecorded=written.unrecorded,
        batches=batches,
    )


def _batch(
    index: DueIndex, db: str, size: int, lookback: timedelta, now: datetime
) -> tuple[int, bool, ApplyResult]:
    """One batch from the cursor: (rows read, caught up, what the index writes did).

    Rows are read in (updated_at, id) order from the cursor. Once a batch finds fewer rows
    than its size the pass has caught up, and the cursor goes back ``lookback`` from the
    newest change seen (at most the database's ``now``), so a row saved by a transaction
    that committed late (its ``updated_at`` is older than rows already read) is still picked
    up by a later pass.
    """
    from .models import Schedule

    cursor = index.reconcile_cursor()
    if cursor is None:
        # First pass, or Redis lost the watermark with its data (then the index is rebuilt).
        since, after_id, newest = now - lookback, 0, None
    else:
        since = datetime.fromisoformat(cursor["since"])
        after_id = int(cursor["after_id"])
        newest = datetime.fromisoformat(cursor["newest"]) if cursor.get("newest") else None
    rows: list[tuple[Any, ...]] = list(
        Schedule.objects.using(db)
        .filter(Q(updated_at__gt=since) | Q(updated_at=since, pk__gt=after_id))
        .order_by("updated_at", "pk")
        .values_list(*INDEX_FIELDS, "updated_at")[:size]
    )
    changes = [change_for_row(*row[:UPDATED_AT]) for row in rows]
    # Only revisions the index has not recorded: those are the writes that never landed.
    written = index.apply(
        [c._replace(op=HEAL_SET if c.op == SET else HEAL_REMOVE) for c in changes]
    )
    if rows:
        newest = max(newest, rows[-1][UPDATED_AT]) if newest else rows[-1][UPDATED_AT]
    caught_up = len(rows) < size
    if not caught_up:
        since, after_id = rows[-1][UPDATED_AT], rows[-1][0]
    elif newest is not None:
        # A row stamped ahead of the database's clock must not carry the watermark past
        # the rows saved until the database's clock reaches it: it is read again instead.
        newest = min(newest, now)
        since, after_id = newest - lookback, 0
    index.set_reconcile_cursor(
        {
            "since": since.isoformat(),
            "after_id": after_id,
            "newest": newest.isoformat() if newest else None,
        }
    )
    return len(rows), caught_up, written
