"""Run registered tasks inside the scheduler process, in a bounded thread pool."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait

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
        if len(occurrences) == 1 or self.max_workers == 1:
            # No thread hand-off for the trivial case.
            return [_run(o) for o in occurrences]
        futures: list[Future[Outcome]] = [self._pool.submit(_run_in_thread, o) for o in occurrences]
        while True:
            _done, pending = wait(futures, timeout=KEEPALIVE_EVERY_SECONDS,
                                  return_when=FIRST_EXCEPTION)
            if not pending:
                break
            keepalive()
        return [f.result() for f in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


def _run_in_thread(occurrence: Occurrence) -> Outcome:
    try:
        return _run(occurrence)
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
    except BaseException as exc:  # a task must never take the scheduler down
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        text = "".join(traceback.format_exception(exc))
        return Outcome(occurrence.run_id, "failed", text[-MAX_ERROR_CHARS:])
    return Outcome(occurrence.run_id, "succeeded")
