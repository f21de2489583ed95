"""Which shards of the due index a scheduler backs off from.

On a Redis Cluster each shard's keys sit on a master of their own. When one master fails
over (seconds), only its shard is away: its calls fail, and the others' answer. So a
sharded index backs off from a shard alone (``ShardHealth``, logged once when the shard
goes away and once when it answers again), and a pass goes on with the shards that answer.
While a shard is away no pass calls it: a thread of its own probes its node (a read of its
TIME, with exponential back-off and jitter) until it answers, so a node that does not
answer at all (frozen, partitioned) costs the passes one socket timeout per outage, not
one per retry. ``NODE_ERRORS`` are the errors that say a node is away (or
between masters); anything else is no outage and goes up as before.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from redis import exceptions as redis_errors

from django_schedulinator.errors import SchedulinatorError
from django_schedulinator.index.entries import ApplyResult

logger = logging.getLogger("django_schedulinator.index")

# A node that is away, restarting, read-only (a replica being promoted), or a cluster
# between two masters of a slot (CLUSTERDOWN, TRYAGAIN, a MOVED the client could not
# follow, a slot no node serves for a moment).
NODE_ERRORS: tuple[type[Exception], ...] = (
    redis_errors.ConnectionError,  # includes BusyLoadingError (Redis restarting)
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,
    redis_errors.TryAgainError,
    redis_errors.ClusterError,  # ClusterDownError, MasterDownError
    redis_errors.MovedError,
    redis_errors.SlotNotCoveredError,
    redis_errors.OutOfMemoryError,
)

# A shard's back-off: 0.2 s after its first failure, doubling, at most this (as the loop's
# back-off from a whole outage), each jittered down to half.
FIRST_BACKOFF_SECONDS = 0.2
MAX_BACKOFF_SECONDS = 5.0


class ShardsAway(SchedulinatorError, redis_errors.ConnectionError):
    """Some shards' nodes failed a write that the other shards took (``DueIndex.apply``).

    ``result`` is what the shards that answered wrote; ``shards`` the numbers of those that
    did not, with their errors. A ConnectionError, so a caller that treats an outage as
    such still does; a scheduler's commit goes on (the failed shards' in-flight entries
    return when their lease ends, and the claim's re-check re-indexes them from the rows)."""

    def __init__(self, shards: dict[int, BaseException], result: ApplyResult) -> None:
        self.shards = dict(shards)
        self.result = result
        names = ", ".join(f"{k} ({type(e).__name__}: {e})" for k, e in sorted(shards.items()))
        super().__init__(f"Shard(s) of the due index away: {names}")


@dataclass(slots=True)
class _Away:
    failures: int
    retry_at: float  # time.monotonic(): when the probe looks again


class ShardHealth:
    """The shards of one index that failed and are backed off from, shared by the
    threads of a scheduler (the loop claims, the commit stage writes). ``probe`` reads
    a shard's node (``Shard.now_ms``): while the shard is away, a daemon thread calls it
    until it answers; None: no probe, a shard is called again once its back-off ends.
    ``log``: say when a shard goes and comes back (a scheduler's index: one per process;
    not a web request's, whose write failing is its caller's to report). ``start_thread``
    (name, target) starts the probe's thread: the scheduler's ``operations.stage.stage_thread``,
    as every thread beside its loop, handed down because the index sits below the stage."""

    def __init__(
        self,
        probe: Callable[[int], object] | None = None,
        *,
        start_thread: Callable[[str, Callable[[], None]], object] | None = None,
        log: bool = True,
    ) -> None:
        if (probe is None) != (start_thread is None):
            raise ValueError("A probe needs a thread to run on, and a thread a probe.")
        self._lock = threading.Lock()
        self._away: dict[int, _Away] = {}
        self._clock = 0  # the shard whose node's TIME the last claim read
        self._probe = probe
        self._start_thread = start_thread
        self._log = log

    def ready(self, shard: int) -> bool:
        """Whether to call ``shard`` now: it is not away (or, with no probe, its back-off
        has ended)."""
        with self._lock:
            away = self._away.get(shard)
            if away is None:
                return True
            return self._probe is None and time.monotonic() >= away.retry_at

    def retry_in(self, shard: int) -> float | None:
        """Seconds until ``shard`` is looked at again (None: it is not away)."""
        with self._lock:
            away = self._away.get(shard)
        return None if away is None else max(0.0, away.retry_at - time.monotonic())

    @property
    def away(self) -> list[int]:
        with self._lock:
            return sorted(self._away)

    def failed(self, shard: int, exc: BaseException) -> None:
        """``shard``'s node failed a call: back off from it (longer each time in a row)."""
        with self._lock:
            away = self._away.get(shard)
            failures = 1 if away is None else away.failures + 1
            delay = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** min(failures - 1, 6))
            self._away[shard] = _Away(failures, time.monotonic() + delay * random.uniform(0.5, 1))
        if failures == 1 and self._log:  # once per outage; "answers again" closes it
            logger.warning(
                "Shard %d of the due index is away (%s: %s): it is backed off from alone, "
                "and the other shards go on firing.",
                shard,
                type(exc).__name__,
                exc,
            )
        if failures == 1 and self._probe is not None and self._start_thread is not None:
            probing = functools.partial(self._probing, shard, self._probe)
            self._start_thread(f"schedulinator-probe-shard-{shard}", probing)

    def _probing(self, shard: int, probe: Callable[[int], object]) -> None:
        """Look at ``shard``'s node after each back-off until it answers (then it is
        back) or another call found it back."""
        while True:
            wait = self.retry_in(shard)
            if wait is None:
                return
            time.sleep(wait)
            try:
                probe(shard)
            except NODE_ERRORS as exc:
                self.failed(shard, exc)
                continue
            except Exception:  # not an outage: the passes call it again and see
                logger.exception("Probing shard %d of the due index failed.", shard)
            self.answered(shard)
            return

    def answered(self, shard: int) -> None:
        """``shard``'s node answered: if it was away, it is back."""
        with self._lock:
            away = self._away.pop(shard, None)
        if away is not None and self._log:
            logger.warning(
                "Shard %d of the due index answers again (after %d failed call(s)).",
                shard,
                away.failures,
            )

    def clock_from(self, shard: int, home: int) -> None:
        """The pass's "now" was read on ``shard``'s node: said when that is not ``home``'s
        (shard 0's: the fleet's clock), and when it is again."""
        with self._lock:
            previous, self._clock = self._clock, shard
        if shard == previous or not self._log:
            return
        if shard != home:
            logger.warning(
                "Shard %d's node is away: the passes read Redis TIME on shard %d's node "
                "until it answers.",
                home,
                shard,
            )
        else:
            logger.warning("The passes read Redis TIME on shard %d's node again.", home)
