"""rq-scheduler's driver in the benchmark suite (see common.py): its ``Scheduler`` on the
local Redis (a job hash per schedule and one sorted set by due time), repeating jobs of an
hour, enqueued to an RQ queue with no worker (its only dispatch).

A pass is one turn of ``Scheduler.run()``'s loop: heartbeat, take its lock, ``enqueue_jobs()``
(read the due job ids, fetch each job, push it onto its queue and score its next run),
heartbeat, release the lock. Its keys are renamed under the run's prefix (they are class
attributes); RQ's job keys are ``rq:job:<prefix>-<n>``. Run with the peers' venv.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from redis import Redis
from rq.job import Job
from rq_scheduler import Scheduler
from rq_scheduler.utils import to_unix

from benchmarks.peers.common import (
    DUE_AGO,
    INTERVAL_SECONDS,
    HandOffs,
    delete_keys,
    main,
    not_due_offset,
    timed_passes,
)

CHUNK = 5000


def noop() -> None:
    return None


class RQScheduler:
    def __init__(self, options: argparse.Namespace) -> None:
        self.prefix = options.prefix
        self.connection = Redis(host="127.0.0.1")

    def _scheduler(self, handoffs: HandOffs | None = None) -> Scheduler:
        counter = handoffs or HandOffs()
        prefix = self.prefix

        class Counting(Scheduler):
            scheduler_key = f"{prefix}:rq:scheduler"
            scheduler_lock_key = f"{prefix}:rq:scheduler_lock"
            scheduled_jobs_key = f"{prefix}:rq:scheduler:scheduled_jobs"

            def enqueue_job(self, job: Any) -> Any:
                result = super().enqueue_job(job)
                counter()
                return result

        # interval: the loop's period; this process calls the turns itself.
        return Counting(queue_name=self.prefix, connection=self.connection, interval=1)

    def _write(self, scheduler: Scheduler, jobs: list[tuple[int, datetime]]) -> None:
        """Jobs as ``Scheduler.schedule(..., interval=INTERVAL)`` writes them, in one pipeline."""
        with self.connection.pipeline() as pipe:
            for i, at in jobs:
                job = Job.create(
                    "benchmarks.peers.rq_scheduler.noop",
                    connection=self.connection,
                    id=f"{self.prefix}-{i}",
                    result_ttl=-1,
                    meta={"interval": INTERVAL_SECONDS},
                )
                job.origin = self.prefix
                job.save(pipeline=pipe)
                pipe.zadd(scheduler.scheduled_jobs_key, {job.id: to_unix(at.replace(tzinfo=None))})
            pipe.execute()

    def setup(self, size: int) -> dict[str, Any]:
        self.clean()
        scheduler = self._scheduler()
        now = datetime.now(UTC)
        started = time.perf_counter()
        for start in range(0, size, CHUNK):
            self._write(
                scheduler,
                [
                    (i, now + timedelta(seconds=not_due_offset(i)))
                    for i in range(start, min(size, start + CHUNK))
                ],
            )
        return {"size": size, "created_s": time.perf_counter() - started}

    def arm(self, due: int) -> dict[str, Any]:
        scheduler = self._scheduler()
        at = datetime.now(UTC) - timedelta(seconds=DUE_AGO)
        with self.connection.pipeline() as pipe:
            for i in range(due):
                pipe.zadd(
                    scheduler.scheduled_jobs_key,
                    {f"{self.prefix}-{i}": to_unix(at.replace(tzinfo=None))},
                )
            pipe.execute()
        return {"armed": due}

    @staticmethod
    def _turn(scheduler: Scheduler) -> None:
        """One turn of Scheduler.run()'s loop, without its sleep."""
        scheduler.heartbeat()
        if scheduler.acquire_lock():
            scheduler.enqueue_jobs()
            scheduler.heartbeat()
            scheduler.remove_lock()

    def idle(self, passes: int, max_seconds: float) -> list[float]:
        scheduler = self._scheduler()
        scheduler.register_birth()
        self._turn(scheduler)  # warm
        samples = timed_passes(lambda: self._turn(scheduler), passes, max_seconds)
        scheduler.register_death()
        return samples

    def burst(self, due: int, cap_seconds: float) -> dict[str, Any]:
        handoffs = HandOffs()
        scheduler = self._scheduler(handoffs)
        scheduler.register_birth()
        started = time.perf_counter()
        while handoffs.count < due and time.perf_counter() - started < cap_seconds:
            self._turn(scheduler)
        result = handoffs.result(started, due)
        scheduler.register_death()
        self.connection.delete(f"rq:queue:{self.prefix}")  # the jobs enqueued
        return result

    def clean(self) -> dict[str, Any]:
        # RQ also lists the queue in its registry of queues (one key for every RQ user).
        self.connection.srem("rq:queues", f"rq:queue:{self.prefix}")
        return {"keys_deleted": delete_keys(self.prefix)}


if __name__ == "__main__":
    main(RQScheduler)
