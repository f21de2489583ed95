"""The due index: a Redis mirror of every schedule's ``next_run_at``.

It is derived data. It may be missing, stale or wrong at any moment; the claim loop re-checks
every entry against its row, and ``rebuild_due_index`` can rebuild it from SQL at any time.

``DueIndex`` is the index as its callers see it, composed of two parts:

- its entries, in ``INDEX_SHARDS`` independent shards (``shard.Shard``, one each): schedule
  ``id`` lives in shard ``id % INDEX_SHARDS``. ``DueIndex`` routes each change to its
  shard, splits a claim between the shards (at one "now") and adds their reads up; with one
  shard (the default) a claim is that shard's one script call.
- its control plane (``control.ControlPlane``, ``index.control``): the rebuild's lock and
  request, reconcile's cursor, turns, the outage, the drift record. Callers use it
  directly (``index.control.take_turn(...)``); ``DueIndex`` itself only drops its keys with
  shard 0's (``drop``).

Every key of shard 0 shares the hash tag ``{<KEY_PREFIX>}`` (with one shard, the whole index
is the single index of before shards), those of shard k the tag ``{<KEY_PREFIX>:k}``, so the
scripts work on Redis Cluster and a cluster spreads the shards over its masters. The control
keys, the heartbeats and the fleet's clock are shard 0's.

Each shard records the layout its hash tag belongs to (``{tag}:layout``, the shard count),
written by a rebuild before it touches an entry; a rebuild for a new shard count also writes
it into each old shard the new layout drops. Every script that writes entries is given the
shard count its caller routes by and refuses a shard that records another: a process still
on the old count (a write-back its claim began before the rebuild, a web host not yet
redeployed) can neither bring a dropped shard back nor leave an entry in the wrong shard.
``apply`` then routes the refused changes by the layout the shard records.

Longer than the package's other modules, as one subject: the index as its callers see it.
Each section (the shards, claiming, writing, reading, the markers and the layout) routes
to the shards and joins what they answer; what a shard does is ``shard.py``'s, and the
control plane's ``control.py``'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from django_schedulinator.conf import app_settings
from django_schedulinator.index.connection import LazyClient
from django_schedulinator.index.control import REQUEST_TTL, TURNS, ControlPlane
from django_schedulinator.index.entries import (
    ADDED,
    APPLY_CHUNK,
    FIXED,
    FORGET,
    HEAL_REMOVE,
    HEAL_SET,
    REMOVE,
    REMOVED,
    REQUEUE,
    SET,
    UNCHANGED,
    ApplyResult,
    Change,
    ClaimedBatch,
    Op,
    Rebuilt,
    Refused,
    ShardLayout,
    recorded_shards,
)
from django_schedulinator.index.health import NODE_ERRORS, ShardHealth, ShardsAway
from django_schedulinator.index.shard import Shard, shard_tag

# What callers import from here: the index, and the values it takes and gives.
__all__ = [
    "ADDED",
    "APPLY_CHUNK",
    "FIXED",
    "FORGET",
    "HEAL_REMOVE",
    "HEAL_SET",
    "LAYOUT_HOPS",
    "REMOVE",
    "REMOVED",
    "REQUEST_TTL",
    "REQUEUE",
    "SET",
    "TURNS",
    "UNCHANGED",
    "ApplyResult",
    "Change",
    "ClaimedBatch",
    "ControlPlane",
    "DueIndex",
    "Op",
    "Rebuilt",
    "Shard",
    "ShardLayout",
    "ShardsAway",
    "get_index",
    "shard_tag",
]

logger = logging.getLogger("django_schedulinator.index")

# How many times changes a shard refused follow the layout it records, when that layout's
# shards refuse them in turn (the shard count changed again meanwhile; a shard dropped two
# changes ago records the layout that dropped it). Past that, they are left to the rows:
# reconcile and the claim's re-check heal the entries.
LAYOUT_HOPS = 3


class DueIndex(LazyClient):
    """The due index laid out for ``shards`` shards (default ``INDEX_SHARDS``): its shards
    (``parts``, by number) behind the methods of one index, and its control plane
    (``control``), which callers use directly.

    ``only``: the shards this instance covers (a rebuild of the shards that lost their
    data); default all. Whatever it covers, shard 0 is its clock (``now_ms``) and names its
    keys (``due_key``, ``tag``...), and a change is written to the shard it belongs in."""

    def __init__(
        self,
        client: Any | None = None,
        prefix: str | None = None,
        *,
        shards: int | None = None,
        only: Iterable[int] | None = None,
    ) -> None:
        super().__init__(client)
        self.prefix = prefix if prefix is not None else app_settings.KEY_PREFIX
        # The layout this process routes by.
        self.shard_count = count = shards if shards is not None else app_settings.INDEX_SHARDS
        numbers = sorted(set(range(count) if only is None else only))
        self.parts = {k: Shard(client, self.prefix, k, count) for k in numbers}
        self.home = self.parts[0] if 0 in self.parts else Shard(client, self.prefix, 0, count)
        self.control = ControlPlane(client, self.prefix)
        # Which shard gets the first share of the next claim: it turns, so that no shard's
        # entries always come last when a batch cannot take every shard's due entries.
        self._turn = 0
        # The shards whose node failed, backed off from one by one (health.py): quietly,
        # and retried once their back-off ends, unless watched (``watch_shards``).
        self.health = ShardHealth(log=False)

    def watch_shards(self, start_thread: Callable[[str, Callable[[], None]], object]) -> None:
        """Back off from shards away as a scheduler does, for as long as this index lives:
        each shard away probed on a thread of its own, started by ``start_thread`` (name,
        target: the scheduler's ``stage_thread``), until it answers (no claim or write calls
        it meanwhile), its outage and its return logged once. A scheduler's index only: one
        per process."""
        if self.shard_count > 1:
            self.health = ShardHealth(
                probe=lambda k: self._part(k).now_ms(), start_thread=start_thread
            )

    def __repr__(self) -> str:
        covered = "" if self.covers_all else f", shards {sorted(self.parts)}"
        return f"<DueIndex {self.prefix!r}: {self.shard_count} shard(s){covered}>"

    # Shard 0's keys that callers read by name (the others: ``self.home``, ``self.control``).

    @property
    def tag(self) -> str:
        """Shard 0's hash tag: the heartbeats' keys start with it."""
        return self.home.tag

    @property
    def due_key(self) -> str:
        return self.home.due_key

    @property
    def inflight_key(self) -> str:
        return self.home.inflight_key

    @property
    def revisions_key(self) -> str:
        return self.home.revisions_key

    # -- the shards -----------------------------------------------------------------------

    def subset(self, shards: Iterable[int]) -> DueIndex:
        """This index covering only ``shards``."""
        return DueIndex(self._client, self.prefix, shards=self.shard_count, only=shards)

    @property
    def covers_all(self) -> bool:
        return len(self.parts) == self.shard_count

    def owns(self, schedule_id: int) -> bool:
        """Whether the schedule's entry belongs in a shard this covers."""
        return schedule_id % self.shard_count in self.parts

    def _part(self, shard: int) -> Shard:
        part = self.parts.get(shard)
        if part is None:  # outside this subset: written all the same, to where it belongs
            part = Shard(self._client, self.prefix, shard, self.shard_count)
        return part

    def _split(self, changes: Sequence[Change]) -> Mapping[int, Sequence[Change]]:
        if self.shard_count == 1:  # the one shard: no copy
            return {0: changes} if changes else {}
        by_shard: dict[int, list[Change]] = {}
        for change in changes:
            by_shard.setdefault(change.schedule_id % self.shard_count, []).append(change)
        return by_shard

    # -- claiming -------------------------------------------------------------------------

    def claim(
        self, limit: int, lease_ms: int, token: str, now_ms: int | None = None
    ) -> ClaimedBatch:
        """Move up to ``limit`` due entries into the in-flight set, under ``token``'s lease.

        One shard: its claim, one script call; its node away fails the claim. More: each
        shard that answers claims on its own (``health``). A shard whose node fails (one
        of ``NODE_ERRORS``: away, failing over) is backed off from alone, and the pass
        goes on with the others; it fails as a whole only when no shard answers. The
        shards that answer get an even share (the remainder turning from pass to pass),
        and what a share leaves unused goes to the shards that had more due.

        The first claim reads Redis TIME on its node (unless ``now_ms`` is given: a test's
        clock), and every other claim of the pass uses that instant, so the whole pass
        decides at one "now". That first claim is shard 0's (its node's clock is the
        fleet's); while shard 0 is away, the next shard's that answers (logged).

        Exactly once holds whatever fails: a shard's claimed entries are in its own
        in-flight set, released on that shard by the commit's ``apply`` or given back
        there; a shard whose node fails after it took the claim (the reply lost) keeps
        them in flight until their lease ends, and the claim after that makes them due
        again, re-checked against their rows."""
        if self.shard_count == 1:
            return self.home.claim(limit, lease_ms, token, now_ms)
        numbers = list(self.parts)
        start, self._turn = self._turn, (self._turn + 1) % len(numbers)
        # Every shard backed off: all are tried, and the loop's back-off paces the passes.
        ready = [k for k in numbers if self.health.ready(k)] or numbers
        order = [k for k in numbers[start:] + numbers[:start] if k in ready]
        count = len(order)
        shares = {k: limit // count + (1 if i < limit % count else 0) for i, k in enumerate(order)}
        batches: dict[int, ClaimedBatch] = {}
        failed: set[int] = set()
        try:
            now = self._claim_first(ready, shares, lease_ms, token, now_ms, batches, failed)
            for k in order:
                if k not in batches and k not in failed:
                    self._claim_part(k, shares[k], lease_ms, token, now, batches, failed)
            left = limit - sum(len(b.entries) for b in batches.values())
            for k in order:
                batch = batches.get(k)
                if left <= 0:
                    break
                if batch is None or k in failed:
                    continue
                more_due = batch.next_due_ms is not None and batch.next_due_ms <= now
                if batch.built and more_due:
                    extra: dict[int, ClaimedBatch] = {}
                    if self._claim_part(k, left, lease_ms, token, now, extra, failed):
                        batches[k] = _joined(batch, extra[k])
                        left -= len(extra[k].entries)
        except Exception:
            # Not a node away (a bug, a script refused): what was claimed goes back now,
            # not after its lease, and the error goes up.
            with contextlib.suppress(Exception):
                self._give_back([e for b in batches.values() for e in b.entries], token)
            raise
        claimed = self._combined(batches, [k for k in order if k in batches], token, now)
        waits = [w for k in numbers if (w := self.health.retry_in(k)) is not None]
        if waits:
            # The loop sleeps no longer than a shard's back-off: it is tried again then.
            back = now + int(min(waits) * 1000)
            head = claimed.next_due_ms
            claimed = dataclasses.replace(
                claimed, next_due_ms=back if head is None else min(head, back)
            )
        return claimed

    def _claim_first(
        self,
        ready: list[int],
        shares: Mapping[int, int],
        lease_ms: int,
        token: str,
        now_ms: int | None,
        batches: dict[int, ClaimedBatch],
        failed: set[int],
    ) -> int:
        """The pass's first claim, which reads Redis TIME (or takes ``now_ms``): on shard
        0, or while its node is away on the next shard that answers. Its "now"; raises the
        last node's error if none answers."""
        error: BaseException | None = None
        for k in ready:
            try:
                batches[k] = self.parts[k].claim(shares[k], lease_ms, token, now_ms)
            except NODE_ERRORS as exc:
                failed.add(k)
                self.health.failed(k, exc)
                error = exc
                continue
            self.health.answered(k)
            self.health.clock_from(k, next(iter(self.parts)))
            return batches[k].now_ms
        assert error is not None
        raise error

    def _claim_part(
        self,
        shard: int,
        limit: int,
        lease_ms: int,
        token: str,
        now: int,
        batches: dict[int, ClaimedBatch],
        failed: set[int],
    ) -> bool:
        """One shard's claim at ``now``, into ``batches``; False (and backed off from) if
        its node failed."""
        try:
            batches[shard] = self.parts[shard].claim(limit, lease_ms, token, now)
        except NODE_ERRORS as exc:
            failed.add(shard)
            self.health.failed(shard, exc)
            return False
        self.health.answered(shard)
        return True

    def _give_back(self, entries: list[tuple[int, int]], token: str) -> None:
        """Claimed entries back to their shards' due sets as they were; those of a shard
        whose node is away return when their lease ends."""
        if not entries:
            return
        with contextlib.suppress(*NODE_ERRORS):
            self.apply([Change(sid, 0, REQUEUE, score) for sid, score in entries], token)

    def _combined(
        self, batches: dict[int, ClaimedBatch], order: list[int], token: str, now: int
    ) -> ClaimedBatch:
        """The shards' claims of one pass, as one."""
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
            self._give_back(entries, token)
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
        forget = [Change(sid, 0, FORGET) for sid, _ in entries]
        self._rerouted(*self.parts[shard].write(forget, token), token)
        self.apply([Change(sid, 0, REQUEUE, score) for sid, score in entries])

    def wake(self, schedule_ids: Iterable[int] | None = None) -> None:
        """Tell the schedulers that runs were queued in SQL (of ``schedule_ids``, or of any
        schedule): the next claim takes them."""
        if self.shard_count == 1:
            self.home.wake()
            return
        shards = (
            set(self.parts)
            if schedule_ids is None
            else {sid % self.shard_count for sid in schedule_ids}
        )
        with self.client.pipeline(transaction=False) as pipe:
            for k in sorted(shards):
                pipe.set(self._part(k).wake_key, 1)
            pipe.execute()

    # -- writing --------------------------------------------------------------------------

    def apply(self, changes: Sequence[Change], release_token: str = "") -> ApplyResult:
        """Write changes (revision-guarded), each to its shard, releasing ``release_token``'s
        in-flight entries. Changes a shard refuses because it records another layout (the
        index was rebuilt for another shard count) are written to the shards of that layout
        instead.

        Sharded, a shard whose node fails (``NODE_ERRORS``) loses none of the others'
        writes: every other shard is written, then ``ShardsAway`` (a ConnectionError) says
        which failed, with what was written. The failed shard's changes are lost as a sync
        write's are when Redis is away: reconcile and the claim's re-check heal its entries
        from the rows, and its in-flight entries return when their lease ends."""
        away: dict[int, BaseException] = {}
        result = self._rerouted(*self._write(changes, release_token, away), release_token, away)
        if away:
            raise ShardsAway(away, result) from next(iter(away.values()))
        return result

    def _rerouted(
        self,
        result: ApplyResult,
        refused: Refused | None,
        release_token: str,
        away: dict[int, BaseException] | None = None,
    ) -> ApplyResult:
        """``result``, with the ``refused`` changes written to the layout they were refused
        for (see ``apply``)."""
        for _hop in range(LAYOUT_HOPS):
            if refused is None:
                return result
            if refused.layout < 1:
                break  # a layout key that cannot be read: rebuild_due_index rewrites it
            _say_layout_differs(self.shard_count, refused.layout)
            routed = DueIndex(self._client, self.prefix, shards=refused.layout)
            written, refused = routed._write(refused.changes, release_token, away)
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
        self,
        changes: Sequence[Change],
        release_token: str,
        away: dict[int, BaseException] | None = None,
    ) -> tuple[ApplyResult, Refused | None]:
        """Each shard's changes written to it: what was written, and what the shards
        refused for the layout they record. Sharded, with ``away`` given, a shard whose
        node fails is noted there (and backed off from), and the next shard is written."""
        result = ApplyResult()
        refused: Refused | None = None
        for k, part_changes in self._split(changes).items():
            if away is None or self.shard_count == 1:
                written, part_refused = self._part(k).write(part_changes, release_token)
            elif not self.health.ready(k):
                # Away (its probe waits for it): not called, as if it had failed again.
                away[k] = RedisConnectionError(f"shard {k} of the due index is away")
                continue
            else:
                try:
                    written, part_refused = self._part(k).write(part_changes, release_token)
                except NODE_ERRORS as exc:
                    away[k] = exc
                    self.health.failed(k, exc)
                    continue
                self.health.answered(k)
            result += written
            if part_refused is not None:
                before = refused.changes if refused else []
                refused = Refused([*before, *part_refused.changes], part_refused.layout)
        return result, refused

    def rebuild_entries(self, changes: Sequence[Change], *, dry_run: bool = False) -> Rebuilt:
        """``Shard.rebuild_entries`` of each change's shard; the letters in ``changes``'
        order."""
        if self.shard_count == 1:
            return self.home.rebuild_entries(changes, dry_run=dry_run)
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

    def now_ms(self) -> int:
        """Redis TIME of shard 0's node: the fleet's clock. Sharded, while shard 0's node
        is away (``NODE_ERRORS``), that of the next shard's node that answers (logged):
        Redis time still, as the claim's; raises when no node answers."""
        if self.shard_count == 1:
            return self.home.now_ms()
        numbers = range(self.shard_count)
        error: BaseException | None = None
        for k in [k for k in numbers if self.health.ready(k)] or numbers:
            try:
                now = self._part(k).now_ms()
            except NODE_ERRORS as exc:
                self.health.failed(k, exc)
                error = exc
                continue
            self.health.answered(k)
            self.health.clock_from(k, 0)
            return now
        assert error is not None
        raise error

    def scores(self, schedule_ids: Sequence[int]) -> dict[int, int | None]:
        """Each schedule's entry's score (ms), None if it has none."""
        if self.shard_count == 1:
            return self.home.scores(schedule_ids)
        by_shard: dict[int, list[int]] = {}
        for sid in schedule_ids:
            by_shard.setdefault(sid % self.shard_count, []).append(sid)
        found: dict[int, int | None] = {}
        for k, ids in by_shard.items():
            found.update(self._part(k).scores(ids))
        return {sid: found[sid] for sid in schedule_ids}

    def counts(self) -> tuple[int, int]:
        """(entries in the due sets, entries in flight)."""
        due = inflight = 0
        for part in self.parts.values():
            d, i = part.counts()
            due, inflight = due + d, inflight + i
        return due, inflight

    def due_now(self) -> tuple[int, int | None, int]:
        """(entries due at Redis TIME, score of the earliest entry or None, Redis TIME ms)."""
        now = self.now_ms()
        shards = self.shard_status(now)
        heads = [s["earliest_ms"] for s in shards if s["earliest_ms"] is not None]
        return sum(s["due_now"] for s in shards), min(heads) if heads else None, now

    def shard_status(self, now_ms: int) -> list[dict[str, Any]]:
        """Per shard: ``Shard.status``."""
        return [part.status(now_ms) for part in self.parts.values()]

    def earliest(self) -> tuple[int, int] | None:
        """The entry with the lowest score, due or not: (schedule id, score ms), or None."""
        heads = [h for part in self.parts.values() if (h := part.earliest()) is not None]
        return min(heads, key=lambda head: (head[1], head[0])) if heads else None

    def random_entries(self, count: int) -> dict[int, int]:
        """Up to ``count`` entries in all, from every shard (the drift check samples each):
        id -> score."""
        share = -(-count // len(self.parts))
        found: dict[int, int] = {}
        for part in self.parts.values():
            found.update(part.random_entries(share))
        return found

    def inflight_ids(self, limit: int = 10_000) -> set[int]:
        """Schedule ids with an entry in flight (at most ``limit`` looked at per shard)."""
        return {sid for part in self.parts.values() for sid in part.inflight_ids(limit)}

    def iter_members(self, count: int = 1000) -> Iterator[list[int]]:
        """Chunks of schedule ids with an entry, shard after shard (``Shard.iter_members``)."""
        for part in self.parts.values():
            yield from part.iter_members(count)

    # -- the build markers and the layout -------------------------------------------------

    def is_built(self) -> bool:
        """Built (every shard this covers), for this process's shard count."""
        count = self.shard_count
        return all(
            s.built and s.built_for == count and s.layout in (None, count)
            for s in self.shard_layouts().values()
        )

    def shard_layouts(self) -> dict[int, ShardLayout]:
        """What each shard records of its layout (one read per shard)."""
        return {k: part.layout() for k, part in self.parts.items()}

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
        built. Sharded: the shards' markers together, None if any shard is not built; else
        when the last was built and by whom, the rows of all, and the shard count."""
        if self.shard_count == 1:
            return self.home.built_info()
        infos = [part.built_info() for part in self.parts.values()]
        if any(info is None for info in infos):
            return None
        known = [info for info in infos if info is not None]  # all of them (for mypy)
        latest = max(known, key=lambda info: str(info.get("built_at", "")))
        rows = sum(r for info in known if isinstance(r := info.get("rows"), int))
        return {**latest, "rows": rows, "shards": recorded_shards(known[0])}

    def mark_built(self, info: dict[str, Any], rows: Mapping[int, int] | None = None) -> None:
        """``Shard.mark_built`` of every shard this covers."""
        for part in self.parts.values():
            part.mark_built(info, rows)

    def record_layout(self, dropped: int | None = None) -> None:
        """Before a rebuild writes any entry: record in each shard it builds the shard count
        they are laid out for, and, when the shard count changes from ``dropped``, in each
        shard of the old layout the new one lacks. From then on, writes of processes still
        routing by another count are refused by those shards (apply.lua, claim.lua)."""
        count = self.shard_count
        gone = range(count, dropped) if dropped is not None else range(0)
        keys = [part.layout_key for part in self.parts.values()]
        keys += [Shard(self._client, self.prefix, k, count).layout_key for k in gone]
        with self.client.pipeline(transaction=False) as pipe:  # a slot each, on a cluster
            for key in keys:
                pipe.set(key, count)
            pipe.execute()

    def drop(self, keep_lock: bool = False) -> None:
        """Delete every key of the shards this covers (with shard 0, the control keys;
        ``rebuild_due_index --reset``, tests); ``keep_lock``: but the rebuild's lock and the
        layout keys of the rebuild that drops them."""
        for k, part in self.parts.items():
            keys = [*part.data_keys, *(() if keep_lock else (part.layout_key,))]
            if k == 0:
                control = self.control
                keys += [key for key in control.keys if not keep_lock or key != control.lock_key]
            part.client.delete(*keys)

    def drop_layout(self, shards: int) -> None:
        """Delete the entries of every shard of a layout of ``shards`` shards (the one the
        index was built for before INDEX_SHARDS changed). The control keys stay, and so do
        the layout keys (``record_layout`` wrote the new layout in them first)."""
        for k in range(shards):
            old = Shard(self._client, self.prefix, k, shards)
            old.client.delete(*old.data_keys)


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


def get_index() -> DueIndex:
    """The due index of this project, as configured now: the one place that chooses it
    (``INDEX_SHARDS`` shards, 1 by default).

    Built per call (cheap: the Redis client is shared) so that it follows the settings;
    every module takes its index from here, or as an argument that defaults to this."""
    return DueIndex(shards=app_settings.INDEX_SHARDS)
