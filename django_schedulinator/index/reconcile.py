"""Heal lost sync writes without a full rebuild.

The sync layer writes the index after each commit; if that write never lands (Redis was
down, the process died between the commit and the write), the row is saved and its entry is
stale. Every save sets ``updated_at``, so a cheap pass re-indexes the rows changed since a
watermark, in bounded batches, with the same revision-guarded writes as the sync layer
(re-indexing a row that was fine changes nothing). The watermark lives in Redis next to the
index: any scheduler can take the next turn. The scheduler's own advance does not touch
``updated_at``; it writes the index itself and its in-flight leases cover its failures.

A commit and its index write are two steps: a row read between them looks like a lost write.
So rows changed within ``SETTLE`` of the database's now are not read yet; once settled, a
row whose write never landed is healed and counted as missed (the scheduler warns), and one
whose write landed needs nothing. The scheduler's own advance is such a pair too, with no
``updated_at`` to wait on: a settled row may fire while reconcile reads it (a schedule made
just before a first start, say), its advance committed and its write-back on its way. Its
entry is in flight then, and reconcile leaves it alone: the claim writes it back, or its
lease returns it and the claim's re-check re-indexes it from the row. The trailing cursor
reads the row again later, and heals a write that was really lost then.

``updated_at`` and the watermark are times of the database's clock (``dbclock``), never a
host's: a host whose clock runs ahead would otherwise carry the watermark past the saves of
every other host. A row stamped ahead of the database anyway (saved by such a host before
the upgrade, or by a bulk write that used a host's time) is read when the database's clock
reaches its stamp: the watermark never goes past the database's now.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import router
from django.db.models import Q

from django_schedulinator.conf import app_settings
from django_schedulinator.index.due import (
    HEAL_REMOVE,
    HEAL_SET,
    SET,
    ApplyResult,
    DueIndex,
    get_index,
)
from django_schedulinator.index.sync import INDEX_FIELDS, change_for_row
from django_schedulinator.models.dbclock import database_now

# Where updated_at is in the rows read: after the fields of the index entry.
UPDATED_AT = len(INDEX_FIELDS)
# How long after its updated_at a row is left for its own after-commit index write to land
# (the rest of its transaction, the commit, the write) before reconcile reads it.
SETTLE = timedelta(seconds=5)


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
    # Rows read whose entry a claim held in flight: its write-back (or lease) settles them.
    in_flight: int = 0
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
    settle: timedelta | None = None,
) -> ReconcileReport:
    """Re-index the rows changed since the watermark, a batch at a time, moving it.

    Two cursors walk the rows in (updated_at, id) order, neither past the database's now
    less ``settle`` (``SETTLE``): the leading one reads each change once it has settled,
    when its own index write has had time to land; the trailing one reads each change once
    more ``lookback`` later, when a transaction that committed late (its ``updated_at`` is
    older than rows the leading cursor already passed) has committed. So every row is read
    twice, whatever the volume of changes, not once per pass.

    While behind, a pass reads batches until both have caught up or ``max_seconds``
    (``RECONCILE_MAX_SECONDS``) have passed on a monotonic clock; the scheduler calls it
    again after its next claim pass until it has caught up.
    """
    from django_schedulinator.models import Schedule

    index = index or get_index()
    if not index.is_built():
        # Its data is gone (the watermark with it): the rebuild the claim does indexes every
        # row, and healing rows here would call a lost index missed writes.
        return ReconcileReport(rows=0, healed=0, stale=0, caught_up=True, not_built=True)
    size = batch_size or app_settings.RECONCILE_BATCH_SIZE
    lookback = lookback or timedelta(seconds=app_settings.RECONCILE_LOOKBACK_SECONDS)
    budget = app_settings.RECONCILE_MAX_SECONDS if max_seconds is None else max_seconds
    deadline = time.monotonic() + budget
    settle = SETTLE if settle is None else settle
    db = using or router.db_for_write(Schedule)
    now = database_now(db)
    cursor = index.control.reconcile_cursor() or {}
    # A first pass, or one after Redis lost the watermark (the index was rebuilt then),
    # starts ``lookback`` back: sync writes lost just before are still healed.
    start = (now - lookback).isoformat()
    lead = Cursor(cursor.get("since", start), int(cursor.get("after_id", 0)))
    trail = Cursor(cursor.get("trail_since", start), int(cursor.get("trail_after_id", 0)))
    rows = batches = in_flight = 0
    written = ApplyResult()
    lead_done = trail_done = False
    while True:
        # The leading cursor first: it heals what was lost just now.
        if not lead_done:
            lead, lead_done, read, result = _batch(index, db, size, lead, now - settle)
            rows, written, in_flight = rows + read.rows, written + result, in_flight + read.held
        if lead_done:  # then the trailing one, in the same batch as the lead's last
            trail_until = now - max(lookback, settle)
            trail, trail_done, read, result = _batch(index, db, size, trail, trail_until)
            rows, written, in_flight = rows + read.rows, written + result, in_flight + read.held
        batches += 1
        index.control.set_reconcile_cursor(
            {
                "since": lead.since,
                "after_id": lead.after_id,
                "trail_since": trail.since,
                "trail_after_id": trail.after_id,
            }
        )
        if (lead_done and trail_done) or time.monotonic() >= deadline:
            break
    return ReconcileReport(
        rows=rows,
        healed=written.changed,
        stale=written.stale,
        caught_up=lead_done and trail_done,
        unrecorded=written.unrecorded,
        batches=batches,
        in_flight=in_flight,
    )


def lag(index: DueIndex | None = None, *, using: str | None = None) -> float | None:
    """How long the oldest change that reconcile has not read yet has waited, in seconds of
    the database's clock: 0 when it has read every change (a change within ``SETTLE`` of
    now is left for its own index write, so up to ``SETTLE`` plus ``RECONCILE_SECONDS`` is
    usual). None before reconcile first ran against this index. One indexed query."""
    from django_schedulinator.models import Schedule

    index = index or get_index()
    cursor = index.control.reconcile_cursor()
    if not cursor or "since" not in cursor:
        return None
    db = using or router.db_for_write(Schedule)
    lead = Cursor(cursor["since"], int(cursor.get("after_id", 0)))
    since = datetime.fromisoformat(lead.since)
    oldest = (
        Schedule.objects.using(db)
        .filter(Q(updated_at__gt=since) | Q(updated_at=since, pk__gt=lead.after_id))
        .order_by("updated_at", "pk")
        .values_list("updated_at", flat=True)
        .first()
    )
    if oldest is None:
        return 0.0
    return max(0.0, (database_now(db) - oldest).total_seconds())


class Read(NamedTuple):
    """What one batch read: its rows, and those of them whose entry a claim held in flight."""

    rows: int
    held: int


class Cursor(NamedTuple):
    """Where a walk of the rows stands: past (``since``, ``after_id``)."""

    since: str  # an updated_at, in ISO 8601
    after_id: int


def _batch(
    index: DueIndex, db: str, size: int, cursor: Cursor, until: datetime
) -> tuple[Cursor, bool, Read, ApplyResult]:
    """Re-index one batch of rows after ``cursor`` and changed no later than ``until``:
    (the cursor after them, caught up, what it read, what the index writes did).

    The entries in flight are read after the rows: a row whose claim committed its advance
    before the rows were read either has its write-back landed by then (the heal finds its
    revision recorded) or its entry still in flight (left to the claim). Either way it is no
    lost write.

    ``until`` keeps the cursor from passing the database's now (less the settle window): a
    row stamped ahead of it (saved by a host whose clock ran ahead, before the upgrade) is
    read once the database's clock reaches it, and does not carry the watermark past the
    rows saved until then.
    """
    from django_schedulinator.models import Schedule

    since = datetime.fromisoformat(cursor.since)
    rows: list[tuple[Any, ...]] = list(
        Schedule.objects.using(db)
        .filter(Q(updated_at__gt=since) | Q(updated_at=since, pk__gt=cursor.after_id))
        .filter(updated_at__lte=until)
        .order_by("updated_at", "pk")
        .values_list(*INDEX_FIELDS, "updated_at")[:size]
    )
    in_flight = index.inflight_ids() if rows else set()
    changes = [change_for_row(*row[:UPDATED_AT]) for row in rows if row[0] not in in_flight]
    # Only revisions the index has not recorded: those are the writes that never landed.
    written = index.apply(
        [c._replace(op=HEAL_SET if c.op == SET else HEAL_REMOVE) for c in changes]
    )
    if rows:
        cursor = Cursor(rows[-1][UPDATED_AT].isoformat(), rows[-1][0])
    return cursor, len(rows) < size, Read(len(rows), len(rows) - len(changes)), written
