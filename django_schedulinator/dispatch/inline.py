"""Run registered tasks inside the scheduler process, in a bounded thread pool."""

from __future__ import annotations

import traceback
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

from django.db import close_old_connections

from ..conf import app_settings
from ..registry import UnknownTask, registry
from .base import BaseDispatcher, Occurrence, Outcome

MAX_ERROR_CHARS = 4000
KEEPALIVE_EVERY_SECONDS = 5.0


class InlineDispatcher(BaseDispatcher):
    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers or app_settings.INLINE_MAX_WORKERS
        self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="schedulinator")

    def dispatch(
        self, occurrences: Sequence[Occurrence], keepalive: Callable[[], None]
    ) -> list[Outcome]:
        # Always in the pool, even for one occurrence: the calling thread stays free to
        # keep the leases alive while tasks run.
        # A few drainers pulling from one queue: balanced like one future per task, without
        # the cost of hundreds of futures per batch.
        queue = deque(enumerate(occurrences))
        outcomes: list[Outcome | None] = [None] * len(occurrences)
        drainers = [
            self._pool.submit(_drain, queue, outcomes)
            for _ in range(min(self.max_workers, len(occurrences)))
        ]
        while wait(drainers, timeout=KEEPALIVE_EVERY_SECONDS).not_done:
            keepalive()
        for drainer in drainers:
            drainer.result()
        return [o for o in outcomes if o is not None]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


def _drain(queue: deque[tuple[int, Occurrence]], outcomes: list[Outcome | None]) -> None:
    try:
        while True:
            try:
                position, occurrence = queue.popleft()  # thread-safe
            except IndexError:
                return
            outcomes[position] = _run(occurrence)
    finally:
        # Tasks may use the ORM; each pool thread owns its connection.
        close_old_connections()


def _run(occurrence: Occurrence) -> Outcome:
    try:
        registered = registry.get(occurrence.task)
    except UnknownTask as exc:
        return Outcome(occurrence.run_id, "failed", str(exc))
    kwargs = dict(occurrence.kwargs)
    if registered.takes_occurrence:
        kwargs["occurrence"] = occurrence
    try:
        registered.func(*occurrence.args, **kwargs)
    except Exception as exc:  # a task must never take the scheduler down
        text = "".join(traceback.format_exception(exc))
        return Outcome(occurrence.run_id, "failed", text[-MAX_ERROR_CHARS:])
    return Outcome(occurrence.run_id, "succeeded")
