"""One shard of the due index: the keys of its entries under one Redis Cluster hash tag
(``shard_tag``), and the Lua scripts (``lua/``) that claim and write them.

A ``Shard`` knows nothing of the other shards: ``due.DueIndex`` routes each schedule to its
shard, splits a claim between the shards and adds their reads up. Shard 0's tag is the
single index's, and also holds the control keys (``control.ControlPlane``) and the fleet's
clock (``Shard.now_ms`` of shard 0)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from typing import Any

from django_schedulinator.errors import RebuildInProgress
from django_schedulinator.index.connection import LazyClient
from django_schedulinator.index.entries import (
    APPLY_CHUNK,
    ApplyResult,
    Change,
    ClaimedBatch,
    Rebuilt,
    Refused,
    ShardLayout,
    json_record,
    recorded_shards,
)


@functools.cache
def _lua(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


def shard_tag(prefix: str, shard: int) -> str:
    """The Redis Cluster hash tag of a shard's keys: shard 0's is the single index's."""
    return f"{{{prefix}}}" if shard == 0 else f"{{{prefix}:{shard}}}"


class Shard(LazyClient):
    """Shard ``number`` of a layout of ``shard_count`` shards: the schedules whose id is
    ``number`` modulo ``shard_count``. Every script it runs is given ``shard_count``, and
    refuses a shard whose layout key records another (the index was rebuilt for another
    shard count meanwhile)."""

    def __init__(self, client: Any | None, prefix: str, number: int, shard_count: int) -> None:
        super().__init__(client)
        self.number = number
        self.shard_count = shard_count
        # The Redis Cluster hash tag every key of the shard (and of the heartbeats) starts with.
        self.tag = tag = shard_tag(prefix, number)
        self.due_key = f"{tag}:due"
        self.inflight_key = f"{tag}:inflight"
        self.revisions_key = f"{tag}:rev"
        self.marker_key = f"{tag}:built"
        self.layout_key = f"{tag}:layout"
        self.wake_key = f"{tag}:wake"

    def __repr__(self) -> str:
        return f"<Shard {self.number} of {self.shard_count}: {self.tag}>"

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

    def owns(self, schedule_id: int) -> bool:
        """Whether the schedule's entry belongs in this shard."""
        return schedule_id % self.shard_count == self.number

    # -- claiming and writing ------------------------------------------------------------

    def claim(
        self, limit: int, lease_ms: int, token: str, now_ms: int | None = None
    ) -> ClaimedBatch:
        """Move up to ``limit`` entries with score <= now into the in-flight set (claim.lua).

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

    def wake(self) -> None:
        """Tell the schedulers that runs of this shard's schedules were queued in SQL: the
        next claim takes them."""
        self.client.set(self.wake_key, 1)

    def write(
        self, changes: Sequence[Change], release_token: str
    ) -> tuple[ApplyResult, Refused | None]:
        """Write changes (revision-guarded), releasing ``release_token``'s in-flight entries,
        a chunk per script call (apply.lua): what was written, and what the shard refused for
        the layout it records (``DueIndex.apply`` routes those by that layout)."""
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
        ``write`` does, and say what the shard held for each (``Rebuilt``); ``dry_run``
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
                    f"Shard {self.number} of the due index is laid out for {int(reply[2])} "
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

    def status(self, now_ms: int) -> dict[str, Any]:
        """Its number, built, its entries due or not, due at ``now_ms``, in flight, and its
        earliest entry's score (one pipeline)."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.exists(self.marker_key)
            pipe.zcard(self.due_key)
            pipe.zcount(self.due_key, "-inf", now_ms)
            pipe.zcard(self.inflight_key)
            pipe.zrange(self.due_key, 0, 0, withscores=True)
            built, entries, due, inflight, head = pipe.execute()
        return {
            "shard": self.number,
            "built": bool(built),
            "entries_due": int(entries),
            "due_now": int(due),
            "in_flight": int(inflight),
            "earliest_ms": int(float(head[0][1])) if head else None,
        }

    # -- the build marker and the layout --------------------------------------------------

    def layout(self) -> ShardLayout:
        """What this shard records of its layout (one read)."""
        marker, layout = self.client.mget([self.marker_key, self.layout_key])
        info = json_record(marker)
        return ShardLayout(
            info is not None,
            _layout_number(layout),
            None if info is None else recorded_shards(info),
        )

    def built_info(self) -> dict[str, Any] | None:
        """What the last rebuild of this shard recorded (built_at, rows, by, shards), or None
        if never built."""
        return json_record(self.client.get(self.marker_key))

    def mark_built(self, info: dict[str, Any], rows: Mapping[int, int] | None = None) -> None:
        """Record that this shard is built, and for how many shards (claim.lua reads it,
        and the layout key: a rebuild wrote it already); ``rows``: each shard's rows,
        recorded in its marker."""
        record = {**info, "shards": self.shard_count}
        if rows is not None:
            record["rows"] = rows.get(self.number, 0)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.set(self.layout_key, self.shard_count)
            pipe.set(self.marker_key, json.dumps(record, sort_keys=True))
            pipe.execute()


def _unparsed(value: Any) -> Any:
    return value


def _layout_number(raw: Any) -> int | None:
    """A layout key's shard count (None: no key; 0: one that cannot be read)."""
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return 0
