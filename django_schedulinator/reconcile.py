"""Heal lost sync writes without a full rebuild.

The sync layer writes the index after each commit; if that write never lands (Redis was
down, the process died between the commit and the write), the row is saved and its entry is
stale. Every save sets ``updated_at``, so a cheap pass re-indexes the rows changed since a
watermark, a bounded batch at a time, with the same revision-guarded writes as the sync layer
(re-indexing a row that was fine changes nothing). The watermark lives in Redis next to the
index: any scheduler can take the next turn. The scheduler's own advance does not touch
``updated_at``; it writes the index itself and its in-flight leases cover its failures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import router
from django.db.models import Q
from django.utils import timezone

from .conf import app_settings
from .index import HEAL_REMOVE, HEAL_SET, SET, DueIndex
from .sync import INDEX_FIELDS, change_for_row


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    rows: int  # rows read (changed since the watermark)
    healed: int  # entries added, moved or removed: sync writes that had not landed
    stale: int  # rows whose revision the index already recorded: nothing to heal
    caught_up: bool  # False: more changed rows wait for the next pass


def reconcile(
    index: DueIndex | None = None,
    *,
    batch_size: int | None = None,
    lookback: timedelta | None = None,
    using: str | None = None,
) -> ReconcileReport:
    """Re-index one batch of rows changed since the watermark, then move the watermark.

    Rows are read in (updated_at, id) order from the cursor. Once a pass finds fewer rows
    than a batch it has caught up, and the cursor goes back ``lookback`` from the newest
    change seen, so a row saved by a transaction that committed late (its ``updated_at`` is
    older than rows already read) is still picked up by a later pass.
    """
    from .models import Schedule

    index = index or DueIndex()
    size = batch_size or app_settings.RECONCILE_BATCH_SIZE
    lookback = lookback or timedelta(seconds=app_settings.RECONCILE_LOOKBACK_SECONDS)
    db = using or router.db_for_write(Schedule)
    cursor = index.reconcile_cursor()
    if cursor is None:
        # First pass, or Redis lost the watermark with its data (then the index is rebuilt).
        since, after_id, newest = timezone.now() - lookback, 0, None
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
    changes = [change_for_row(*row[:6]) for row in rows]
    # Only revisions the index has not recorded: those are the writes that never landed.
    written = index.apply(
        [c._replace(op=HEAL_SET if c.op == SET else HEAL_REMOVE) for c in changes]
    )
    if rows:
        newest = max(newest, rows[-1][6]) if newest else rows[-1][6]
    caught_up = len(rows) < size
    if not caught_up:
        since, after_id = rows[-1][6], rows[-1][0]
    elif newest is not None:
        since, after_id = newest - lookback, 0
    index.set_reconcile_cursor(
        {
            "since": since.isoformat(),
            "after_id": after_id,
            "newest": newest.isoformat() if newest else None,
        }
    )
    return ReconcileReport(
        rows=len(rows), healed=written.changed, stale=written.stale, caught_up=caught_up
    )
