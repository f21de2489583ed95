"""The one "now" of a scheduler's threads: Redis TIME, which every scheduler and web host
shares (``index.clock``), or the clock a test gives the worker instead.

The claim script reads TIME in Redis itself, so the claim asks only for a test's clock
(``claim_ms``); everything else the threads decide (leases, outcomes, released buffers,
missed runs, prunes) reads ``now``, which falls back to this host's clock, logged, while
Redis cannot be reached: work already committed is still dispatched and recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django_schedulinator import timing
from django_schedulinator.index import clock
from django_schedulinator.index.due import DueIndex


class LoopClock:
    def __init__(self, index: DueIndex, given: Callable[[], int] | None = None) -> None:
        """``given`` returns "now" in epoch milliseconds in place of Redis TIME: tests only."""
        self.index = index
        self.given = given

    def claim_ms(self) -> int | None:
        """The "now" a claim passes to its script: None, Redis TIME's own, unless given."""
        return self.given() if self.given else None

    def now_ms(self) -> int:
        """Redis TIME (or the given clock), epoch milliseconds; raises while Redis is away."""
        return self.given() if self.given else self.index.now_ms()

    def now(self) -> datetime:
        """``now_ms`` as a datetime, this host's clock while Redis cannot be reached."""
        return clock.redis_or_host_time(lambda: timing.from_ms(self.now_ms()))
