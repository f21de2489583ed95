"""Heartbeats as a scheduler's keeper writes them, for the tests of what reads them
(scheduler_status, the API, the operations page) without running a scheduler."""

from __future__ import annotations

import time

from django_schedulinator.index.due import DueIndex
from django_schedulinator.operations.heartbeat import Heartbeat, HeartbeatKeeper
from django_schedulinator.scheduler.worker import Worker


def beat(
    index: DueIndex,
    worker_id: str = "w1",
    *,
    pass_ago: float | None = 0.0,
    error: str = "",
    stopping: bool = False,
) -> Heartbeat:
    """The heartbeat of a scheduler whose last pass was ``pass_ago`` seconds ago (None: none
    yet), recorded in Redis for a minute."""
    source = Worker(worker_id=worker_id, index=index)
    source.close()  # only read: its dispatcher is never used
    source.last_pass_at = None if pass_ago is None else time.monotonic() - pass_ago
    source.last_error, source.stopping = error, stopping
    source.counters.fired, source.counters.repaired = 1234, 2
    return HeartbeatKeeper(source, index, every=60).beat()
