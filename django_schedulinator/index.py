"""The due index: a Redis mirror of every schedule's ``next_run_at``.

It is derived data. It may be missing, stale or wrong at any moment; the claim loop re-checks
every entry against its row, and ``rebuild_due_index`` can rebuild it from SQL at any time.
All keys share the hash tag ``{<KEY_PREFIX>}`` so the scripts work on Redis Cluster.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, NamedTuple

from .conf import app_settings
from .connection import get_redis

Op = Literal["S", "R", "F", "Q", "s", "r"]
SET: Op = "S"  # put the entry at the row's next run (revision-guarded)
REMOVE: Op = "R"  # the row exists but has nothing to run (revision-guarded)
FORGET: Op = "F"  # the row is gone
REQUEUE: Op = "Q"  # re-check this row at a score, unless an entry exists
# SET and REMOVE only for a revision newer than the recorded one (reconcile: a write that
# landed, whose entry may be in flight right now, is left alone).
HEAL_SET: Op = "s"
HEAL_REMOVE: Op = "r"

# Periodic chores that one process of the fleet does per period (see take_turn).
TURNS = ("reconcile", "drift", "missed", "prune")

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


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: int = 0
    stale: int = 0  # refused: the index held a newer revision
    changed: int = 0  # writes that altered the due set (an entry added, moved or removed)
    # Of those, writes for rows the index held no revision of: new rows, or an index that
    # lost its data (flushed, restarted empty).
    unrecorded: int = 0

    def __add__(self, other: ApplyResult) -> ApplyResult:
        return ApplyResult(
            self.applied + other.applied,
            self.stale + other.stale,
            self.changed + other.changed,
            self.unrecorded + other.unrecorded,
        )


class Rebuilt(NamedTuple):
    """What ``rebuild_entries`` found: one letter per change, in order (``ADDED``,
    ``FIXED``, ``REMOVED``, ``UNCHANGED``: what the index held, written or not), and how
    many changes were refused because the index held a newer revision (stale)."""

    found: str
    stale: int


ADDED, FIXED, REMOVED, UNCHANGED = "a", "f", "r", "u"


@functools.cache
def _lua(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


# A rebuild asked for and never performed (no scheduler ran) is forgotten after a day.
REQUEST_TTL = 86_400


class DueIndex:
    def __init__(self, client: Any | None = None, prefix: str | None = None) -> None:
        # Taken on first use, not here: a scheduler starts while Redis is away (a cluster
        # client connects when it is built) and its loop waits the outage out.
        self._client = client
        self.prefix = prefix if prefix is not None else app_settings.KEY_PREFIX
        # The Redis Cluster hash tag every key of the index (and of the heartbeats) starts with.
        self.tag = tag = f"{{{self.prefix}}}"
        self.due_key = f"{tag}:due"
        self.inflight_key = f"{tag}:inflight"
        self.revisions_key = f"{tag}:rev"
        self.marker_key = f"{tag}:built"
        self.lock_key = f"{tag}:rebuild-lock"
        self.rebuild_request_key = f"{tag}:rebuild-request"
        self.reconcile_key = f"{tag}:reconcile"
        self.wake_key = f"{tag}:wake"
        # When an outage with no scheduler alive was first noticed (alerts.py).
        self.outage_key = f"{tag}:no-scheduler"
        self.drift_key = f"{tag}:drift"
        self._turn_prefix = f"{tag}:turn:"

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = get_redis()
        return self._client

    @functools.cached_property
    def _claim(self) -> Any:
        return self.client.register_script(_lua("claim"))

    @functools.cached_property
    def _apply(self) -> Any:
        return self.client.register_script(_lua("apply"))

    @functools.cached_property
    def _rebuild(self) -> Any:
        return self.client.register_script(_lua("rebuild"))

    @property
    def keys(self) -> tuple[str, ...]:
        return (
            self.due_key,
            self.inflight_key,
            self.revisions_key,
            self.marker_key,
            self.lock_key,
            self.rebuild_request_key,
            self.reconcile_key,
            self.wake_key,
            self.outage_key,
            self.drift_key,
            *(f"{self._turn_prefix}{name}" for name in TURNS),
        )

    # -- claiming -------------------------------------------------------------------------

    def claim(
        self, limit: int, lease_ms: int, token: str, now_ms: int | None = None
    ) -> ClaimedBatch:
        """Move up to ``limit`` entries with score <= now into the in-flight set.

        "now" is Redis TIME; ``now_ms`` replaces it for a test's controlled clock only.
        """
        reply = self._claim(
            keys=[self.due_key, self.inflight_key, self.marker_key, self.wake_key],
            args=[limit, lease_ms, token, limit, "" if now_ms is None else now_ms],
        )
        built, now, requeued, head, woken = (int(x) for x in reply[:5])
        rest = reply[5:]
        entries = [(int(rest[i]), int(float(rest[i + 1]))) for i in range(0, len(rest), 2)]
        return ClaimedBatch(
            built=bool(built),
            now_ms=now,
            requeued=requeued,
            next_due_ms=head if head >= 0 else None,
            entries=entries,
            woken=bool(woken),
        )

    def wake(self) -> None:
        """Tell the schedulers that runs were queued in SQL: the next claim takes them."""
        self.client.set(self.wake_key, 1)

    def apply(self, changes: Sequence[Change], release_token: str = "") -> ApplyResult:
        """Write changes (revision-guarded), releasing ``release_token``'s in-flight entries."""
        result = ApplyResult()
        for start in range(0, len(changes), APPLY_CHUNK):
            payload = json.dumps(
                [
                    (str(c.schedule_id), c.revision, c.op, c.score_ms)
                    for c in changes[start : start + APPLY_CHUNK]
                ]
            )
            reply = self._apply(
                keys=[self.due_key, self.revisions_key, self.inflight_key],
                args=[release_token, payload],
            )
            result += ApplyResult(*(int(x) for x in reply))
        return result

    def rebuild_entries(self, changes: Sequence[Change], *, dry_run: bool = False) -> Rebuilt:
        """Write the entries rows call for (SET and REMOVE only), revision-guarded as
        ``apply`` does, and say what the index held for each (``Rebuilt``); ``dry_run``
        writes nothing. One script call per ``APPLY_CHUNK`` changes (rebuild.lua)."""
        found: list[str] = []
        stale = 0
        for start in range(0, len(changes), APPLY_CHUNK):
            payload = json.dumps(
                [
                    (str(c.schedule_id), c.revision, c.op, c.score_ms)
                    for c in changes[start : start + APPLY_CHUNK]
                ]
            )
            refused, letters = self._rebuild(
                keys=[self.due_key, self.revisions_key], args=["1" if dry_run else "", payload]
            )
            stale += int(refused)
            found.append(letters.decode() if isinstance(letters, bytes) else letters)
        return Rebuilt("".join(found), stale)

    # -- reading --------------------------------------------------------------------------

    def now_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def scores(self, schedule_ids: Sequence[int]) -> dict[int, int | None]:
        if not schedule_ids:
            return {}
        values = self.client.zmscore(self.due_key, list(schedule_ids))
        return {
            sid: None if v is None else int(v) for sid, v in zip(schedule_ids, values, strict=True)
        }

    def counts(self) -> tuple[int, int]:
        """(entries in the due set, entries in flight)."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zcard(self.due_key)
            pipe.zcard(self.inflight_key)
            due, inflight = pipe.execute()
        return int(due), int(inflight)

    def due_now(self) -> tuple[int, int | None, int]:
        """(entries due at Redis TIME, score of the earliest entry or None, Redis TIME ms)."""
        now = self.now_ms()
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zcount(self.due_key, "-inf", now)
            pipe.zrange(self.due_key, 0, 0, withscores=True)
            due, head = pipe.execute()
        earliest = int(float(head[0][1])) if head else None
        return int(due), earliest, now

    def earliest(self) -> tuple[int, int] | None:
        """The entry with the lowest score, due or not: (schedule id, score ms), or None."""
        head = self.client.zrange(self.due_key, 0, 0, withscores=True)
        return (int(head[0][0]), int(float(head[0][1]))) if head else None

    def random_entries(self, count: int) -> dict[int, int]:
        """Up to ``count`` distinct entries of the due set, picked at random: id -> score."""
        reply = self.client.zrandmember(self.due_key, count, withscores=True) or []
        if reply and isinstance(reply[0], list | tuple):  # RESP3: [[member, score], ...]
            reply = [item for pair in reply for item in pair]
        return {int(m): int(float(s)) for m, s in zip(reply[::2], reply[1::2], strict=True)}

    def inflight_ids(self, limit: int = 10_000) -> set[int]:
        """Schedule ids with an entry in flight (at most ``limit`` looked at)."""
        members = self.client.zrange(self.inflight_key, 0, limit - 1)
        return {int(m.split(b"@", 1)[0]) for m in members}

    def iter_members(self, count: int = 1000) -> Iterator[list[int]]:
        """Chunks of schedule ids in the due set (ZSCAN: safe while it changes; an entry
        may come twice). The scores are never parsed: a rebuild reads a million of them."""
        cursor: Any = 0
        while True:
            cursor, pairs = self.client.zscan(
                self.due_key, cursor, count=count, score_cast_func=_unparsed
            )
            if pairs:
                yield [int(member) for member, _score in pairs]
            if not cursor:
                return

    # -- the build marker -----------------------------------------------------------------

    def is_built(self) -> bool:
        return bool(self.client.exists(self.marker_key))

    def built_info(self) -> dict[str, Any] | None:
        """What the last rebuild recorded (built_at, rows, by), or None if never built."""
        return _json_record(self.client.get(self.marker_key))

    def rebuild_running(self) -> bool:
        return bool(self.client.exists(self.lock_key))

    def mark_built(self, info: dict[str, Any]) -> None:
        self.client.set(self.marker_key, json.dumps(info, sort_keys=True))

    def request_rebuild(self, info: dict[str, Any]) -> bool:
        """Ask the schedulers for a rebuild (the admin's button): the first to look performs
        it. False if one is asked for already (two clicks make one request)."""
        raw = json.dumps(info, sort_keys=True)
        return bool(self.client.set(self.rebuild_request_key, raw, nx=True, ex=REQUEST_TTL))

    def rebuild_request(self) -> dict[str, Any] | None:
        """The rebuild asked for and not yet performed (who asked, when), or None."""
        return _json_record(self.client.get(self.rebuild_request_key))

    def take_rebuild_request(self) -> dict[str, Any] | None:
        """The rebuild asked for, removed in the same step (GET and DEL in one MULTI): of
        several schedulers that look at once, one gets it."""
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self.rebuild_request_key)
        pipe.delete(self.rebuild_request_key)
        raw, _deleted = pipe.execute()
        return _json_record(raw)

    def give_back_rebuild_request(self, info: dict[str, Any]) -> None:
        """Put a request taken with ``take_rebuild_request`` back (its rebuild could not run
        now), unless a newer one was made meanwhile."""
        self.request_rebuild(info)

    # -- periodic chores ------------------------------------------------------------------

    def take_turn(self, chore: str, seconds: float, owner: str) -> bool:
        """True for the one process that claims ``chore`` for the next ``seconds``."""
        assert chore in TURNS, chore
        key = f"{self._turn_prefix}{chore}"
        return bool(self.client.set(key, owner, nx=True, px=max(1, int(seconds * 1000))))

    # -- schedulers down -------------------------------------------------------------------

    def begin_outage(self, since: str) -> bool:
        """Record that no scheduler is alive, noticed at ``since`` (ISO 8601): True for the
        one caller that records it first (SET NX), until ``end_outage``."""
        return bool(self.client.set(self.outage_key, since, nx=True))

    def end_outage(self) -> str | None:
        """A scheduler is alive: forget the outage; when it was noticed, if there was one
        (GETDEL: of several callers, one learns it)."""
        raw = self.client.getdel(self.outage_key)
        return raw.decode() if isinstance(raw, bytes) else raw

    def reconcile_cursor(self) -> dict[str, Any] | None:
        raw = self.client.get(self.reconcile_key)
        return json.loads(raw) if raw else None

    def set_reconcile_cursor(self, cursor: dict[str, Any]) -> None:
        self.client.set(self.reconcile_key, json.dumps(cursor, sort_keys=True))

    def drift_record(self) -> dict[str, Any] | None:
        """What the last drift check found (``health.record_drift``), or None."""
        return _json_record(self.client.get(self.drift_key))

    def set_drift_record(self, record: dict[str, Any]) -> None:
        self.client.set(self.drift_key, json.dumps(record, sort_keys=True))

    def rebuild_lock(self, timeout: float) -> Any:
        """The Redis lock (redis-py's, token-checked) that keeps two rebuilds apart.

        Its token is kept on the instance, not per thread: the admin takes the lock in the
        request and hands it to the thread that rebuilds. Each rebuild has its own instance."""
        return self.client.lock(self.lock_key, timeout=timeout, blocking=False, thread_local=False)

    def drop(self, keep_lock: bool = False) -> None:
        """Delete every key of this index (``rebuild_due_index --reset``, tests)."""
        keys = [k for k in self.keys if not (keep_lock and k == self.lock_key)]
        self.client.delete(*keys)


def _unparsed(value: Any) -> Any:
    return value


def _json_record(raw: Any) -> dict[str, Any] | None:
    """A JSON object kept in Redis (a marker, a request): None if there is none, {} if it
    cannot be read."""
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def get_index() -> DueIndex:
    """The due index of this project, as configured now: the one place that chooses it.

    Built per call (cheap: the Redis client is shared) so that it follows the settings;
    every module takes its index from here, or as an argument that defaults to this."""
    return DueIndex()
