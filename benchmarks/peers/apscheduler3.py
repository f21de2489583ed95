"""APScheduler 3's driver in the benchmark suite (see common.py), with its SQLAlchemy job
store on the local PostgreSQL (``--store sqlalchemy``) or its Redis job store (``--store
redis``), and its cheapest dispatch: a no-op function on the default thread pool (10 threads).

A pass is ``BaseScheduler._process_jobs``, what the scheduler's own thread runs each time it
wakes: read the due jobs from the store (unpickling each), submit each to the executor,
write each one's next run back (one UPDATE, or one Redis pipeline, per job), then read the
store's earliest next run. Run with the peers' venv (.bench-venv).
"""

from __future__ import annotations

import argparse
import pickle
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.job import Job
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger

from benchmarks.peers.common import (
    DUE_AGO,
    INTERVAL_SECONDS,
    HandOffs,
    main,
    not_due_offset,
    timed_passes,
)

CHUNK = 5000


def noop() -> None:
    return None


def analyze(engine: Any, table: str) -> None:
    """Table statistics, as autovacuum gathers soon after a bulk load: without them
    PostgreSQL scans the whole table for the due jobs instead of using the index."""
    from sqlalchemy import text

    with engine.begin() as connection:
        connection.execute(text(f"ANALYZE {table}"))


class CountingPool(ThreadPoolExecutor):
    """The default executor, counting each hand-off as it is submitted."""

    handoffs: HandOffs

    def _do_submit_job(self, job: Any, run_times: Any) -> None:
        super()._do_submit_job(job, run_times)
        self.handoffs()


class DrivenScheduler(BackgroundScheduler):
    """The background scheduler without its thread: this process calls its passes, as the
    thread would each time it wakes."""

    def start(self, paused: bool = False) -> None:
        self._event = threading.Event()
        BaseScheduler.start(self, paused=paused)

    def shutdown(self, wait: bool = True) -> None:
        BaseScheduler.shutdown(self, wait)


class APScheduler3:
    def __init__(self, options: argparse.Namespace) -> None:
        self.store_kind = options.store or "sqlalchemy"
        self.prefix = options.prefix
        self.database = options.database

    def _store(self) -> Any:
        if self.store_kind == "redis":
            from apscheduler.jobstores.redis import RedisJobStore

            return RedisJobStore(
                jobs_key=f"{self.prefix}:jobs",
                run_times_key=f"{self.prefix}:run_times",
                host="127.0.0.1",
            )
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

        self._ensure_database()
        return SQLAlchemyJobStore(
            url=f"postgresql+psycopg://postgres@127.0.0.1/{self.database}",
            tablename="apscheduler_jobs",
        )

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
            if not c.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [self.database]
            ).fetchone():
                c.execute(f'CREATE DATABASE "{self.database}"')

    def _scheduler(self, handoffs: HandOffs | None = None) -> BackgroundScheduler:
        pool = CountingPool()
        pool.handoffs = handoffs or HandOffs()
        scheduler = DrivenScheduler(
            jobstores={"default": self._store()}, executors={"default": pool}, timezone=UTC
        )
        scheduler.start()
        return scheduler

    def _state(self, scheduler: Any, i: int, next_run: datetime) -> bytes:
        job = Job(
            scheduler,
            id=f"bench-{i}",
            func="benchmarks.peers.apscheduler3:noop",
            trigger=IntervalTrigger(seconds=INTERVAL_SECONDS, timezone=UTC),
            executor="default",
            args=(),
            kwargs={},
            name=f"bench-{i}",
            misfire_grace_time=None,
            coalesce=True,
            max_instances=1,
            next_run_time=next_run,
        )
        return pickle.dumps(job.__getstate__(), pickle.HIGHEST_PROTOCOL)

    def _write(self, scheduler: Any, jobs: list[tuple[int, datetime]]) -> None:
        """Jobs as the store's add_job writes them, in bulk (a bulk path the store allows)."""
        store = scheduler._lookup_jobstore("default")
        if self.store_kind == "redis":
            with store.redis.pipeline() as pipe:
                for i, at in jobs:
                    pipe.hset(store.jobs_key, f"bench-{i}", self._state(scheduler, i, at))
                    pipe.zadd(store.run_times_key, {f"bench-{i}": at.timestamp()})
                pipe.execute()
            return
        from sqlalchemy.dialects.postgresql import insert

        rows = [
            {
                "id": f"bench-{i}",
                "next_run_time": at.timestamp(),
                "job_state": self._state(scheduler, i, at),
            }
            for i, at in jobs
        ]
        statement = insert(store.jobs_t)
        statement = statement.on_conflict_do_update(
            index_elements=["id"],
            set_={
                "next_run_time": statement.excluded.next_run_time,
                "job_state": statement.excluded.job_state,
            },
        )
        with store.engine.begin() as connection:
            connection.execute(statement, rows)

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
        if self.store_kind == "sqlalchemy":
            analyze(scheduler._lookup_jobstore("default").engine, "apscheduler_jobs")
        scheduler.shutdown(wait=False)
        return {"size": size, "created_s": time.perf_counter() - started}

    def arm(self, due: int) -> dict[str, Any]:
        scheduler = self._scheduler()
        at = datetime.now(UTC) - timedelta(seconds=DUE_AGO)
        for start in range(0, due, CHUNK):
            self._write(scheduler, [(i, at) for i in range(start, min(due, start + CHUNK))])
        scheduler.shutdown(wait=False)
        return {"armed": due}

    def idle(self, passes: int, max_seconds: float) -> list[float]:
        scheduler = self._scheduler()
        scheduler._process_jobs()  # warm
        samples = timed_passes(scheduler._process_jobs, passes, max_seconds)
        scheduler.shutdown(wait=False)
        return samples

    def burst(self, due: int, cap_seconds: float) -> dict[str, Any]:
        handoffs = HandOffs()
        scheduler = self._scheduler(handoffs)
        started = time.perf_counter()
        # One pass takes every due job (its store reads them all at once).
        while handoffs.count < due and time.perf_counter() - started < cap_seconds:
            scheduler._process_jobs()
        result = handoffs.result(started, due)
        scheduler.shutdown(wait=True)
        return result

    def clean(self) -> dict[str, Any]:
        store = self._store()
        if self.store_kind == "redis":
            store.redis.delete(store.jobs_key, store.run_times_key)
        else:
            store.jobs_t.drop(store.engine, checkfirst=True)
        return {}


if __name__ == "__main__":
    main(APScheduler3)
