"""What goes into the due index and what comes out of it: the changes written to it
(``Change`` and its ops), a claim's batch (``ClaimedBatch``), what a write did
(``ApplyResult``) or a rebuild found (``Rebuilt``), and what a shard records of its layout
(``ShardLayout``). Plain values, shared by a shard (``shard``), the index of all shards
(``due``) and their callers; nothing here talks to Redis."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

Op = Literal["S", "R", "F", "Q", "s", "r"]
SET: Op = "S"  # put the entry at the row's next run (revision-guarded)
REMOVE: Op = "R"  # the row exists but has nothing to run (revision-guarded)
FORGET: Op = "F"  # the row is gone
REQUEUE: Op = "Q"  # re-check this row at a score, unless an entry exists
# SET and REMOVE only for a revision newer than the recorded one (reconcile: a write that
# landed, whose entry may be in flight right now, is left alone).
HEAL_SET: Op = "s"
HEAL_REMOVE: Op = "r"

# Changes per script call: bounded work while Redis is blocked by the script.
APPLY_CHUNK = 1000


class Change(NamedTuple):
    schedule_id: int
    revision: int
    op: Op
    score_ms: int = 0


@dataclass(frozen=True, slots=True)
class ClaimedBatch:
    built: bool
    now_ms: int
    requeued: int
    next_due_ms: int | None
    entries: list[tuple[int, int]]  # (schedule id, score ms)
    woken: bool = False  # runs were queued in SQL since the last claim (run now, backfill)
    # The index was built for this many shards, not this process's INDEX_SHARDS: nothing
    # was claimed (built is False), and no rebuild is done by a scheduler (docs/scaling.md).
    other_layout: int | None = None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: int = 0
    stale: int = 0  # refused: the index held a newer revision
    changed: int = 0  # writes that altered the due set (an entry added, moved or removed)
    # Of those, writes for rows the index held no revision of: new rows, or an index that
    # lost its data (flushed, restarted empty).
    unrecorded: int = 0
    # Changes refused by a shard laid out for another shard count than the caller's, then
    # written to the shards of the layout it records; and those no layout took.
    rerouted: int = 0
    refused: int = 0

    def __add__(self, other: ApplyResult) -> ApplyResult:
        return ApplyResult(
            self.applied + other.applied,
            self.stale + other.stale,
            self.changed + other.changed,
            self.unrecorded + other.unrecorded,
            self.rerouted + other.rerouted,
            self.refused + other.refused,
        )


class ShardLayout(NamedTuple):
    """What one shard records of its layout."""

    built: bool  # its build marker is there
    layout: int | None  # the shard count its layout key records (None: no key)
    built_for: int | None  # the shard count its marker records (None: no marker)


class Refused(NamedTuple):
    """Changes a shard refused, and the shard count of the layout it records."""

    changes: list[Change]
    layout: int


class Rebuilt(NamedTuple):
    """What ``rebuild_entries`` found: one letter per change, in order (``ADDED``,
    ``FIXED``, ``REMOVED``, ``UNCHANGED``: what the index held, written or not), and how
    many changes were refused because the index held a newer revision (stale)."""

    found: str
    stale: int


ADDED, FIXED, REMOVED, UNCHANGED = "a", "f", "r", "u"


def json_record(raw: Any) -> dict[str, Any] | None:
    """A JSON object kept in Redis (a marker, a request): None if there is none, {} if it
    cannot be read."""
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def recorded_shards(info: dict[str, Any]) -> int:
    """The shard count a build marker records (1: a marker from before shards; 0: one that
    cannot be read)."""
    value = info.get("shards", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
