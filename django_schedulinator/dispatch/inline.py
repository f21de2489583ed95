"""Run registered tasks inside the scheduler process, in a bounded pool of threads.

A task that runs past its timeout is cut off: its run is recorded as failed and the batch
goes on. An async task is cancelled at its timeout. Python cannot kill a thread, so the
thread of a plain function that hangs (or of an async one that blocks its event loop) is
abandoned (a daemon: it never holds up the exit) and a fresh thread takes its place in the
pool; whatever the abandoned task does later is not recorded. Tasks that must be killed for
real belong in a dispatcher that hands them to another process.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections

from django_schedulinator.conf import app_settings
from django_schedulinator.dispatch.base import (
    DEFAULT_ALIAS,
    MAX_ERROR_CHARS,
    REPORT_EVERY_SECONDS,
    BaseDispatcher,
    Call,
    Occurrence,
    Option,
    Outcome,
    Progress,
)
from django_schedulinator.errors import TaskTimedOut, UnknownTask
from django_schedulinator.registry import RegisteredTask, registry
from django_schedulinator.statuses import OutcomeStatus

logger = logging.getLogger("django_schedulinator.dispatch")

# How often running tasks are compared with their deadlines: a timeout is enforced to
# within this much.
TIMEOUT_CHECK_SECONDS = 0.5
# An async task is cancelled at its timeout; its thread is cut off only if it has not
# ended this much later (it blocks its event loop).
CANCEL_GRACE_SECONDS = 1.0


@dataclass(eq=False, slots=True)
class _Job:
    occurrence: Occurrence
    position: int
    batch: _Batch
    timeout: float
    cancellable: bool  # an async task, cancelled at its timeout
    started: float | None = None
    thread: threading.Thread | None = None
    abandoned: bool = False


@dataclass(eq=False, slots=True)
class _Batch:
    outcomes: list[Outcome | None]
    remaining: int
    stopped: Callable[[], bool]  # start no more of its jobs
    done: threading.Condition = field(default_factory=threading.Condition)
    running: set[_Job] = field(default_factory=set)
    ended: list[Outcome] = field(default_factory=list)  # not reported to progress yet


class InlineDispatcher(BaseDispatcher):
    """The default: registered functions called in the scheduler process, in its pool."""

    reports_outcomes = True
    runs_in_process = True
    options = {
        "MAX_WORKERS": Option(
            int,
            "Threads in the pool (default: SCHEDULINATOR['INLINE_MAX_WORKERS']).",
            minimum=1,
            maximum=256,
        ),
        "TIMEOUT_SECONDS": Option(
            float,
            "A task running longer is cut off and recorded as failed (default: "
            "SCHEDULINATOR['TASK_TIMEOUT_SECONDS']; @task(timeout=...) wins).",
            minimum=0.001,
        ),
    }

    def __init__(
        self,
        alias: str = DEFAULT_ALIAS,
        options: Mapping[str, Any] | None = None,
        *,
        max_workers: int | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(alias, options)
        self.max_workers = (
            max_workers or self.settings["MAX_WORKERS"] or app_settings.INLINE_MAX_WORKERS
        )
        self.default_timeout = (
            timeout or self.settings["TIMEOUT_SECONDS"] or app_settings.TASK_TIMEOUT_SECONDS
        )
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._abandoned: list[threading.Thread] = []
        self._started = False  # the pool starts with the first batch, not when built

    @property
    def hand_off_timeout(self) -> float:
        longest = max(self.default_timeout, registry.longest_timeout() or 0)
        return longest + CANCEL_GRACE_SECONDS + TIMEOUT_CHECK_SECONDS

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        # Tasks always run on pool threads, each handed off through hand_off(): the calling
        # thread stays free to report progress (running, finished) and to enforce
        # timeouts. A batch that ends within a second reports nothing along the way: its
        # outcomes come back at once.
        if not self._started:
            self._started = True
            for _ in range(self.max_workers):
                self._spawn()
        batch = _Batch([None] * len(occurrences), len(occurrences), progress.stopped)
        for position, occurrence in enumerate(occurrences):
            task = self._task_of(occurrence)
            self._jobs.put(
                _Job(
                    occurrence,
                    position,
                    batch,
                    self._timeout_of(task),
                    cancellable=task is not None and task.is_async,
                )
            )
        next_report = time.monotonic() + REPORT_EVERY_SECONDS
        reported_running: set[int] = set()
        while True:
            with batch.done:
                if batch.remaining:
                    batch.done.wait(TIMEOUT_CHECK_SECONDS)
                if not batch.remaining:
                    break
                self._cut_off_overdue(batch)
                if time.monotonic() < next_report:
                    continue
                ended, batch.ended = batch.ended, []
                started = {j.occurrence.run_id for j in batch.running} - reported_running
            # Outside the lock: tasks finishing meanwhile must not wait for the database.
            if ended:
                progress.finished(ended)
            if started:
                progress.running(started)
                reported_running |= started
            next_report = time.monotonic() + REPORT_EVERY_SECONDS
        return [o for o in batch.outcomes if o is not None]

    def send(self, occurrence: Occurrence, call: Call) -> Outcome:
        run_id = occurrence.run_id
        try:
            result = call.run(occurrence, timeout=self._timeout_of(call.task))
        except TaskTimedOut as exc:
            return Outcome(run_id, OutcomeStatus.FAILED, str(exc))
        except BaseException as exc:  # a task must never take the scheduler down, not even exit()
            text = "".join(traceback.format_exception(exc))
            return Outcome(run_id, OutcomeStatus.FAILED, text[-MAX_ERROR_CHARS:])
        # Text a task returns is its output, kept on the run (other values are not recorded).
        output = result[-MAX_ERROR_CHARS:] if isinstance(result, str) else ""
        return Outcome(run_id, OutcomeStatus.SUCCEEDED, output=output)

    def close(self) -> None:
        self._started = False
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    # -- the pool -------------------------------------------------------------------------

    @staticmethod
    def _task_of(occurrence: Occurrence) -> RegisteredTask | None:
        try:
            return registry.get(occurrence.task)
        except UnknownTask:
            return None  # its hand-off fails, saying so

    def _timeout_of(self, task: RegisteredTask | None) -> float:
        return (task and task.timeout) or self.default_timeout

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._work, name="schedulinator-task", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                # Idle: tasks may have used the ORM, and this thread owns its connection.
                try:
                    close_old_connections()
                except Exception:  # a pool thread must outlive anything but close()
                    logger.exception("Closing a task thread's database connections failed.")
                job = self._jobs.get()
            if job is None:
                return
            batch = job.batch
            with batch.done:
                if batch.stopped():
                    # The scheduler is stopping: not started, its run stays pending.
                    batch.remaining -= 1
                    if not batch.remaining:
                        batch.done.notify()
                    continue
                job.started = time.monotonic()
                job.thread = threading.current_thread()
                batch.running.add(job)
            try:
                outcome = self.hand_off(job.occurrence)
            except BaseException as exc:  # a pool thread must never die with its job
                logger.exception("Running the task of run %s failed.", job.occurrence.run_id)
                text = "".join(traceback.format_exception(exc))[-MAX_ERROR_CHARS:]
                outcome = Outcome(job.occurrence.run_id, OutcomeStatus.FAILED, text)
            with batch.done:
                if job.abandoned:
                    # Cut off while it ran; a replacement thread already took this one's place.
                    close_old_connections()
                    return
                batch.running.discard(job)
                batch.outcomes[job.position] = outcome
                batch.ended.append(outcome)
                batch.remaining -= 1
                if not batch.remaining:
                    batch.done.notify()

    def _cut_off_overdue(self, batch: _Batch) -> None:
        """Fail the running jobs past their deadline and replace their threads (lock held)."""
        now = time.monotonic()
        for job in [j for j in batch.running if now - (j.started or now) >= _cutoff(j)]:
            job.abandoned = True
            batch.running.discard(job)
            outcome = Outcome(
                job.occurrence.run_id,
                OutcomeStatus.FAILED,
                f"Timed out after {job.timeout:g}s and was cut off: the run is recorded as "
                f"failed, and anything the task does from now on is not recorded.",
            )
            batch.outcomes[job.position] = outcome
            batch.ended.append(outcome)
            batch.remaining -= 1
            if job.thread in self._threads:
                self._threads.remove(job.thread)
                self._abandoned.append(job.thread)
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            self._spawn()
            logger.error(
                "Task %s of schedule %r (key %s) ran longer than %gs: recorded as failed; its "
                "thread is abandoned (%d abandoned thread(s) still running).",
                job.occurrence.task,
                job.occurrence.schedule_name,
                job.occurrence.key,
                job.timeout,
                len(self._abandoned),
            )


def _cutoff(job: _Job) -> float:
    """Seconds after its start when a job's thread is abandoned."""
    return job.timeout + (CANCEL_GRACE_SECONDS if job.cancellable else 0)
