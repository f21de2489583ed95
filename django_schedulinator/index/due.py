"""The due index: a Redis mirror of every schedule's ``next_run_at``.

It is derived data. It may be missing, stale or wrong at any moment; the claim loop re-checks
every entry against its row, and ``rebuild_due_index`` can rebuild it from SQL at any time.

It is ``INDEX_SHARDS`` independent shards (``DueIndex``, one each; ``ShardedIndex``, the set
of them). Every key of shard 0 shares the hash tag ``{<KEY_PREFIX>}`` (with one shard, the
whole index is today's single index), those of shard k the tag ``{<KEY_PREFIX>:k}``, so the
scripts work on Redis Cluster and a cluster spreads the shards over its masters. Schedule
``id`` lives in shard ``id % INDEX_SHARDS``. The control keys (the rebuild's lock and
request, reconcile's watermark, turns, the outage, the drift record, heartbeats) and the
fleet's clock are shard 0's.

Each shard records the layout its hash tag belongs to (``{tag}:layout``, the shard count),
written by a rebuild before it touches an entry; a rebuild for a new shard count also writes
it into each old shard the new layout drops. Every script that writes entries is given the
shard count its caller routes by and refuses a shard that records another: a process still
on the old count (a write-back its claim began before the rebuild, a web host not yet
redeployed) can neither bring a dropped shard back nor leave an entry in the wrong shard.
``apply`` then routes the refused changes by the layout the shard records.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, NamedTuple

from django_schedulinator.conf import app_settings
from django_schedulinator.errors import RebuildInProgress
from django_schedulinator.index.connection import get_redis

logger = logging.getLogger("django_schedulinator.index")

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
# How many times changes a shard refused follow the layout it records, when that layout's
# shards refuse them in turn (the shard count changed again meanwhile; a shard dropped two
# changes ago records the layout that dropped it). Past that, they are left to the rows:
# reconcile and the claim's re-check heal the entries.
LAYOUT_HOPS = 3


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


@functools.cache
def _lua(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


# A rebuild asked for and never performed (no scheduler ran) is forgotten after a day.
REQUEST_TTL = 86_400


def shard_tag(prefix: str, shard: int) -> str:
    """The Redis Cluster hash tag of a shard's keys: shard 0's is the single index's."""
    return f"{{{prefix}}}" if shard == 0 else f"{{{prefix}:{shard}}}"


class DueIndex:
    """One shard of the due index (the whole index when ``INDEX_SHARDS`` is 1): its keys,
    under one hash tag, and the scripts that work on them. Shard 0's instance also holds the
    control keys."""

    def __init__(
        self,
        client: Any | None = None,
        prefix: str | None = None,
        *,
        shard: int = 0,
        shards: int | None = None,
    ) -> None:
        # Taken on first use, not here: a scheduler starts while Redis is away (a cluster
        # client connects when it is built) and its loop waits the outage out.
        self._client = client
        self.prefix = prefix if prefix is not None else app_settings.KEY_PREFIX
        # The layout this process uses: how many shards, and which one this is.
        self.shard_count = shards if shards is not None else app_settings.INDEX_SHARDS
        self.shard = shard
        # The Redis Cluster hash tag every key of the shard (and of the heartbeats) starts with.
        self.tag = tag = shard_tag(self.prefix, shard)
        self.due_key = f"{tag}:due"
        self.inflight_key = f"{tag}:inflight"
        self.revisions_key = f"{tag}:rev"
        self.marker_key = f"{tag}:built"
        self.layout_key = f"{tag}:layout"
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
    def data_keys(self) -> tuple[str, ...]:
        """The keys of this shard's entries: what a rebuild of it replaces."""
        return (self.due_key, self.inflight_key, self.revisions_key, self.marker_key, self.wake_key)

    @property
    def keys(self) -> tuple[str, ...]:
        if self.shard:
            return (*self.data_keys, self.layout_key)
        return (
            self.layout_key,
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

        "now" is Redis TIME; ``now_ms`` replaces it: the pass's "now", read on shard 0 (a
        sharded index), or a test's controlled clock. The requeue of expired leases is
        bounded by ``limit`` too, and by one at least (a share of a batch may be 0).
        """
        reply = self._claim(
            keys=[self.due_key, self.inflight_key, self.marker_key, self.wake_key, self.layout_key],
            args=[
                limit,
                lease_ms,
                token,
                max(1, limit),
                "" if now_ms is None else now_ms,
                self.shard_count,
            ],
        )
        built, now, requeued, head, woken, layout = (int(x) for x in reply[:6])
        rest = reply[6:]
        entries = [(int(rest[i]), int(float(rest[i + 1]))) for i in range(0, len(rest), 2)]
        return ClaimedBatch(
            built=bool(built),
            now_ms=now,
            requeued=requeued,
            next_due_ms=head if head >= 0 else None,
            entries=entries,
            woken=bool(woken),
            other_layout=layout if layout and layout != self.shard_count else None,
        )

    def wake(self, schedule_ids: Iterable[int] | None = None) -> None:
        """Tell the schedulers that runs were queued in SQL (of ``schedule_ids``, or of any
        schedule): the next claim takes them."""
        self.client.set(self.wake_key, 1)

    def owns(self, schedule_id: int) -> bool:
        """Whether the schedule's entry belongs in this index (its shard)."""
        return schedule_id % self.shard_count == self.shard

    def apply(self, changes: Sequence[Change], release_token: str = "") -> ApplyResult:
        """Write changes (revision-guarded), releasing ``release_token``'s in-flight entries.
        Changes a shard refuses because it records another layout (the index was rebuilt for
        another shard count) are written to the shards of that layout instead."""
        result, refused = self._write(changes, release_token)
        for _hop in range(LAYOUT_HOPS):
            if refused is None:
                return result
            if refused.layout < 1:
                break  # a layout key that cannot be read: rebuild_due_index rewrites it
            _say_layout_differs(self.shard_count, refused.layout)
            routed = layout_index(refused.layout, self._client, self.prefix)
            written, refused = routed._write(refused.changes, release_token)
            result += written + ApplyResult(rerouted=written.applied)
        if refused is not None:
            logger.warning(
                "Could not write %d change(s) to the due index: its shards refused them for "
                "another shard count %d times (INDEX_SHARDS keeps changing?). Reconcile and "
                "the claim's re-check heal their entries from the rows.",
                len(refused.changes),
                LAYOUT_HOPS + 1,
            )
            result += ApplyResult(refused=len(refused.changes))
        return result

    def _write(
        self, changes: Sequence[Change], release_token: str
    ) -> tuple[ApplyResult, Refused | None]:
        """``apply``'s script calls, a chunk each: what was written, and what the shard
        refused for the layout it records (apply.lua)."""
        result = ApplyResult()
        refused: Refused | None = None
        for start in range(0, len(changes), APPLY_CHUNK):
            chunk = list(changes[start : start + APPLY_CHUNK])
            payload = json.dumps(
                [(str(c.schedule_id), c.revision, c.op, c.score_ms) for c in chunk]
            )
            reply = self._apply(
                keys=[
                    self.due_key,
                    self.revisions_key,
                    self.inflight_key,
                    self.layout_key,
                    self.marker_key,
                ],
                args=[release_token, payload, self.shard_count],
            )
            if len(reply) > 4:
                layout = int(reply[4])
                refused = Refused([*(refused.changes if refused else []), *chunk], layout)
                continue
            result += ApplyResult(*(int(x) for x in reply))
        return result, refused

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
            reply = self._rebuild(
                keys=[self.due_key, self.revisions_key, self.layout_key],
                args=["1" if dry_run else "", payload, self.shard_count],
            )
            if len(reply) > 2:
                raise RebuildInProgress(
                    f"Shard {self.shard} of the due index is laid out for {int(reply[2])} "
                    f"shard(s) now, not the {self.shard_count} this rebuild builds: another "
                    f"rebuild took over (this one's lock had expired)."
                )
            refused, letters = reply
            stale += int(refused)
            found.append(letters.decode() if isinstance(letters, bytes) else letters)
        return Rebuilt("".join(found), stale)

    # -- reading --------------------------------------------------------------------------

    def now_ms(self) -> int:
        """Redis TIME of the node that holds this shard (shard 0's: the fleet's clock). On a
        cluster, read by a script on the shard's key, which the client sends to that node
        (TIME itself goes to any node); elsewhere there is one node."""
        if self._on_cluster:
            seconds, micros = self._time(keys=[self.due_key])
        else:
            seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    @functools.cached_property
    def _on_cluster(self) -> bool:
        from redis.cluster import RedisCluster

        return isinstance(self.client, RedisCluster)

    @functools.cached_property
    def _time(self) -> Any:
        return self.client.register_script("return redis.call('TIME')")

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
        """Built (every shard), for this process's shard count."""
        count = self.shard_count
        return all(
            s.built and s.built_for == count and s.layout in (None, count)
            for s in self.shard_layouts().values()
        )

    def shard_layouts(self) -> dict[int, ShardLayout]:
        """What each shard records of its layout (one read per shard)."""
        marker, layout = self.client.mget([self.marker_key, self.layout_key])
        info = _json_record(marker)
        return {
            self.shard: ShardLayout(
                info is not None,
                _layout_number(layout),
                None if info is None else _recorded_shards(info),
            )
        }

    def missing_shards(self) -> list[int]:
        """The shards not built (no marker): each is rebuilt alone."""
        return [k for k, s in self.shard_layouts().items() if not s.built]

    def other_layout(self) -> int | None:
        """The shard count a shard records, if one records another than this process's:
        the index was built (or is being rebuilt) for another layout. Its layout key says
        first; a marker left by a rebuild that did not finish says too."""
        count = self.shard_count
        for s in self.shard_layouts().values():
            for recorded in (s.layout, s.built_for):
                if recorded is not None and recorded != count:
                    return recorded
        return None

    def built_info(self) -> dict[str, Any] | None:
        """What the last rebuild recorded (built_at, rows, by, shards), or None if never
        built."""
        return _json_record(self.client.get(self.marker_key))

    def shard_status(self, now_ms: int) -> list[dict[str, Any]]:
        """Per shard: its number, built, its entries due or not, due at ``now_ms``, in
        flight, and its earliest entry's score."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.exists(self.marker_key)
            pipe.zcard(self.due_key)
            pipe.zcount(self.due_key, "-inf", now_ms)
            pipe.zcard(self.inflight_key)
            pipe.zrange(self.due_key, 0, 0, withscores=True)
            built, entries, due, inflight, head = pipe.execute()
        return [
            {
                "shard": self.shard,
                "built": bool(built),
                "entries_due": int(entries),
                "due_now": int(due),
                "in_flight": int(inflight),
                "earliest_ms": int(float(head[0][1])) if head else None,
            }
        ]

    def rebuild_running(self) -> bool:
        return bool(self.client.exists(self.lock_key))

    def mark_built(self, info: dict[str, Any], rows: Mapping[int, int] | None = None) -> None:
        """Record that this shard is built, and for how many shards (claim.lua reads it,
        and the layout key: a rebuild wrote it already); ``rows``: each shard's rows,
        recorded in its marker."""
        record = {**info, "shards": self.shard_count}
        if rows is not None:
            record["rows"] = rows.get(self.shard, 0)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.set(self.layout_key, self.shard_count)
            pipe.set(self.marker_key, json.dumps(record, sort_keys=True))
            pipe.execute()

    def record_layout(self, dropped: int | None = None) -> None:
        """Before a rebuild writes any entry: record in each shard it builds the shard count
        they are laid out for, and, when the shard count changes from ``dropped``, in each
        shard of the old layout the new one lacks. From then on, writes of processes still
        routing by another count are refused by those shards (apply.lua, claim.lua)."""
        count = self.shard_count
        gone = range(count, dropped) if dropped is not None else range(0)
        keys = [part.layout_key for part in self._built_parts()]
        keys += [DueIndex(self._client, self.prefix, shard=k).layout_key for k in gone]
        with self.client.pipeline(transaction=False) as pipe:  # a slot each, on a cluster
            for key in keys:
                pipe.set(key, count)
            pipe.execute()

    def _built_parts(self) -> list[DueIndex]:
        """The shards this instance builds."""
        return [self]

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
        """Delete every key of this index (``rebuild_due_index --reset``, tests);
        ``keep_lock``: but the lock and the layout of the rebuild that drops it."""
        kept = (self.lock_key, self.layout_key) if keep_lock else ()
        self.client.delete(*(k for k in self.keys if k not in kept))

    def drop_layout(self, shards: int) -> None:
        """Delete the entries of every shard of a layout of ``shards`` shards (the one the
        index was built for before INDEX_SHARDS changed). The control keys stay, and so do
        the layout keys (``record_layout`` wrote the new layout in them first)."""
        for shard in range(shards):
            old = DueIndex(self._client, self.prefix, shard=shard, shards=shards)
            old.client.delete(*old.data_keys)


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


def _recorded_shards(info: dict[str, Any]) -> int:
    value = info.get("shards", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _layout_number(raw: Any) -> int | None:
    """A layout key's shard count (None: no key; 0: one that cannot be read)."""
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return 0


# (the shard count a process routes by, the one the index is laid out for) already logged
_layouts_said: set[tuple[int, int]] = set()


def _say_layout_differs(routed_by: int, laid_out_for: int) -> None:
    """Warn, once per process and pair of counts, that writes were routed by a shard count
    the index is no longer laid out for."""
    if (routed_by, laid_out_for) in _layouts_said:
        return
    _layouts_said.add((routed_by, laid_out_for))
    logger.warning(
        "This process routes the due index's writes by %d shard(s) (INDEX_SHARDS), and the "
        "index is laid out for %d (rebuilt since, by rebuild_due_index): its writes go to "
        "the shards of %d. Give every process the same INDEX_SHARDS (docs/scaling.md, "
        "changing the shard count).",
        routed_by,
        laid_out_for,
        laid_out_for,
    )


class ShardedIndex(DueIndex):
    """The set of ``INDEX_SHARDS`` shards, with the methods of one index: ``apply`` and the
    rebuild's writes split changes by shard, ``claim`` takes from every shard in one pass
    (at one "now"), and the reads add the shards up. Inherited, unchanged: the control keys,
    which are shard 0's (this instance is shard 0 for them), and the clock.

    ``only``: the shards this instance covers (a rebuild of the shards that lost their data);
    default all."""

    def __init__(
        self,
        client: Any | None = None,
        prefix: str | None = None,
        *,
        shards: int | None = None,
        only: Iterable[int] | None = None,
    ) -> None:
        super().__init__(client, prefix, shard=0, shards=shards)
        numbers = sorted(set(range(self.shard_count) if only is None else only))
        self.parts = {
            k: DueIndex(client, self.prefix, shard=k, shards=self.shard_count) for k in numbers
        }
        # Which shard gets the first share of the next claim: it turns, so that no shard's
        # entries always come last when a batch cannot take every shard's due entries.
        self._turn = 0

    def subset(self, shards: Iterable[int]) -> ShardedIndex:
        return ShardedIndex(self._client, self.prefix, shards=self.shard_count, only=shards)

    @property
    def covers_all(self) -> bool:
        return len(self.parts) == self.shard_count

    def owns(self, schedule_id: int) -> bool:
        return schedule_id % self.shard_count in self.parts

    def _split(self, changes: Sequence[Change]) -> dict[int, list[Change]]:
        by_shard: dict[int, list[Change]] = {}
        for change in changes:
            by_shard.setdefault(change.schedule_id % self.shard_count, []).append(change)
        return by_shard

    def _part(self, shard: int) -> DueIndex:
        part = self.parts.get(shard)
        if part is None:  # outside this subset: written all the same, to where it belongs
            part = DueIndex(self._client, self.prefix, shard=shard, shards=self.shard_count)
        return part

    # -- claiming -------------------------------------------------------------------------

    def claim(
        self, limit: int, lease_ms: int, token: str, now_ms: int | None = None
    ) -> ClaimedBatch:
        """Up to ``limit`` due entries from all shards: each gets an even share (the
        remainder turning from pass to pass), and what a share leaves unused goes to the
        shards that had more due. The first claim is on shard 0 and reads Redis TIME there
        (unless ``now_ms`` is given); every other claim of the pass uses that instant, so
        the whole pass decides at one "now"."""
        numbers = list(self.parts)
        count = len(numbers)
        start, self._turn = self._turn, (self._turn + 1) % count
        order = numbers[start:] + numbers[:start]
        shares = {k: limit // count + (1 if i < limit % count else 0) for i, k in enumerate(order)}
        first = numbers[0]  # shard 0 in a whole index: its node's clock is the fleet's
        batches = {first: self.parts[first].claim(shares[first], lease_ms, token, now_ms)}
        now = batches[first].now_ms
        try:
            for k in order:
                if k != first:
                    batches[k] = self.parts[k].claim(shares[k], lease_ms, token, now)
            left = limit - sum(len(b.entries) for b in batches.values())
            for k in order:
                batch = batches[k]
                if left <= 0:
                    break
                more_due = batch.next_due_ms is not None and batch.next_due_ms <= now
                if batch.built and more_due:
                    extra = self.parts[k].claim(left, lease_ms, token, now)
                    batches[k] = _joined(batch, extra)
                    left -= len(extra.entries)
        except Exception:
            # One shard's node away (failing over): what the others gave goes back now, not
            # after its lease; the loop backs off from the error as from any outage.
            taken = [e for batch in batches.values() for e in batch.entries]
            with contextlib.suppress(Exception):
                self.apply([Change(sid, 0, REQUEUE, score) for sid, score in taken], token)
            raise
        return self._combined(batches, order, token, now)

    def _combined(
        self, batches: dict[int, ClaimedBatch], order: list[int], token: str, now: int
    ) -> ClaimedBatch:
        built = all(b.built for b in batches.values())
        other = next((b.other_layout for b in batches.values() if b.other_layout), None)
        entries: list[tuple[int, int]] = []
        for k in order:
            misplaced = [e for e in batches[k].entries if e[0] % self.shard_count != k]
            if misplaced:
                self._move(k, misplaced, token)
            entries += [e for e in batches[k].entries if e[0] % self.shard_count == k]
        if not built and entries:
            # A shard to rebuild (or another layout): the pass fires nothing, and what the
            # other shards gave goes back as it was, not left to its lease.
            self.apply([Change(sid, 0, REQUEUE, score) for sid, score in entries], token)
            entries = []
        heads = [b.next_due_ms for b in batches.values() if b.next_due_ms is not None]
        return ClaimedBatch(
            built=built,
            now_ms=now,
            requeued=sum(b.requeued for b in batches.values()),
            next_due_ms=min(heads) if heads else None,
            entries=entries,
            woken=any(b.woken for b in batches.values()),
            other_layout=other,
        )

    def _move(self, shard: int, entries: list[tuple[int, int]], token: str) -> None:
        """Entries claimed from a shard they do not belong in (written by a process with
        another INDEX_SHARDS): released there, and put in their own shard at their score
        unless it holds an entry."""
        self.parts[shard].apply([Change(sid, 0, FORGET) for sid, _ in entries], token)
        self.apply([Change(sid, 0, REQUEUE, score) for sid, score in entries])

    def wake(self, schedule_ids: Iterable[int] | None = None) -> None:
        shards = (
            set(self.parts)
            if schedule_ids is None
            else {sid % self.shard_count for sid in schedule_ids}
        )
        with self.client.pipeline(transaction=False) as pipe:
            for k in sorted(shards):
                pipe.set(self._part(k).wake_key, 1)
            pipe.execute()

    def _write(
        self, changes: Sequence[Change], release_token: str
    ) -> tuple[ApplyResult, Refused | None]:
        result = ApplyResult()
        refused: Refused | None = None
        for k, part_changes in self._split(changes).items():
            written, part_refused = self._part(k)._write(part_changes, release_token)
            result += written
            if part_refused is not None:
                before = refused.changes if refused else []
                refused = Refused([*before, *part_refused.changes], part_refused.layout)
        return result, refused

    def rebuild_entries(self, changes: Sequence[Change], *, dry_run: bool = False) -> Rebuilt:
        letters = [""] * len(changes)
        stale = 0
        positions: dict[int, list[int]] = {}
        for i, change in enumerate(changes):
            positions.setdefault(change.schedule_id % self.shard_count, []).append(i)
        for k, where in positions.items():
            found, refused = self._part(k).rebuild_entries(
                [changes[i] for i in where], dry_run=dry_run
            )
            stale += refused
            for i, letter in zip(where, found, strict=True):
                letters[i] = letter
        return Rebuilt("".join(letters), stale)

    # -- reading --------------------------------------------------------------------------

    def scores(self, schedule_ids: Sequence[int]) -> dict[int, int | None]:
        by_shard: dict[int, list[int]] = {}
        for sid in schedule_ids:
            by_shard.setdefault(sid % self.shard_count, []).append(sid)
        found: dict[int, int | None] = {}
        for k, ids in by_shard.items():
            found.update(self._part(k).scores(ids))
        return {sid: found[sid] for sid in schedule_ids}

    def counts(self) -> tuple[int, int]:
        due = inflight = 0
        for part in self.parts.values():
            d, i = part.counts()
            due, inflight = due + d, inflight + i
        return due, inflight

    def due_now(self) -> tuple[int, int | None, int]:
        now = self.now_ms()
        shards = self.shard_status(now)
        heads = [s["earliest_ms"] for s in shards if s["earliest_ms"] is not None]
        return sum(s["due_now"] for s in shards), min(heads) if heads else None, now

    def shard_status(self, now_ms: int) -> list[dict[str, Any]]:
        return [row for part in self.parts.values() for row in part.shard_status(now_ms)]

    def earliest(self) -> tuple[int, int] | None:
        heads = [h for part in self.parts.values() if (h := part.earliest()) is not None]
        return min(heads, key=lambda head: (head[1], head[0])) if heads else None

    def random_entries(self, count: int) -> dict[int, int]:
        """Up to ``count`` entries in all, from every shard (the drift check samples each)."""
        share = -(-count // len(self.parts))
        found: dict[int, int] = {}
        for part in self.parts.values():
            found.update(part.random_entries(share))
        return found

    def inflight_ids(self, limit: int = 10_000) -> set[int]:
        return {sid for part in self.parts.values() for sid in part.inflight_ids(limit)}

    def iter_members(self, count: int = 1000) -> Iterator[list[int]]:
        for part in self.parts.values():
            yield from part.iter_members(count)

    # -- the build markers ----------------------------------------------------------------

    def shard_layouts(self) -> dict[int, ShardLayout]:
        return {k: s for part in self.parts.values() for k, s in part.shard_layouts().items()}

    def _built_parts(self) -> list[DueIndex]:
        return list(self.parts.values())

    def built_info(self) -> dict[str, Any] | None:
        """The shards' markers together: None if any shard is not built; else when the
        last was built and by whom, the rows of all, and the shard count."""
        infos = [part.built_info() for part in self.parts.values()]
        if any(info is None for info in infos):
            return None
        known = [info for info in infos if info is not None]  # all of them (for mypy)
        latest = max(known, key=lambda info: str(info.get("built_at", "")))
        rows = sum(r for info in known if isinstance(r := info.get("rows"), int))
        return {**latest, "rows": rows, "shards": _recorded_shards(known[0])}

    def mark_built(self, info: dict[str, Any], rows: Mapping[int, int] | None = None) -> None:
        for part in self.parts.values():
            part.mark_built(info, rows)

    @property
    def keys(self) -> tuple[str, ...]:
        """Every shard's keys, and the control keys (with shard 0's)."""
        return tuple(key for part in self.parts.values() for key in part.keys)

    def drop(self, keep_lock: bool = False) -> None:
        """Delete every key of the shards this covers (with shard 0, the control keys);
        ``keep_lock``: but the rebuild's lock and layout."""
        for part in self.parts.values():
            part.drop(keep_lock=keep_lock)


def _joined(first: ClaimedBatch, more: ClaimedBatch) -> ClaimedBatch:
    """Two claims of one shard in one pass, as one."""
    return ClaimedBatch(
        built=first.built and more.built,
        now_ms=first.now_ms,
        requeued=first.requeued + more.requeued,
        next_due_ms=more.next_due_ms,
        entries=first.entries + more.entries,
        woken=first.woken or more.woken,
        other_layout=first.other_layout or more.other_layout,
    )


def get_index() -> DueIndex:
    """The due index of this project, as configured now: the one place that chooses it.
    One shard (``INDEX_SHARDS`` 1, the default) is a ``DueIndex``, more a ``ShardedIndex``.

    Built per call (cheap: the Redis client is shared) so that it follows the settings;
    every module takes its index from here, or as an argument that defaults to this."""
    return layout_index(app_settings.INDEX_SHARDS)


def layout_index(shards: int, client: Any | None = None, prefix: str | None = None) -> DueIndex:
    """The index laid out for ``shards`` shards: a ``DueIndex`` for one, else a
    ``ShardedIndex``."""
    if shards > 1:
        return ShardedIndex(client, prefix, shards=shards)
    return DueIndex(client, prefix, shards=1)
