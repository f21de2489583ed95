"""celery-redbeat's driver in the benchmark suite (see common.py): ``RedBeatScheduler``,
its schedule in the local Redis (a hash per entry and one sorted set by due time, under the
run's key prefix), dispatching with Celery's ``apply_async`` to a Redis broker with no worker.

A pass is ``tick()``, what ``celery beat`` calls in its loop: extend its lock, read the
entries due (and the next one) from the sorted set, load each due entry's hash, send it and
write its last run and new score back. Run with the peers' venv.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.schedules import schedule as every

from benchmarks.peers.celery_common import make_app
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


class RedBeat:
    def __init__(self, options: argparse.Namespace) -> None:
        self.prefix = options.prefix
        self.app = make_app(
            self.prefix,
            redbeat_redis_url="redis://127.0.0.1:6379/0",
            redbeat_key_prefix=f"{self.prefix}-redbeat:",
            beat_max_loop_interval=5,
        )

    def _scheduler(self, handoffs: HandOffs | None = None) -> Any:
        from redbeat.schedulers import LUA_EXTEND_TO_SCRIPT, RedBeatScheduler, get_redis

        counter = handoffs or HandOffs()

        class Counting(RedBeatScheduler):
            def apply_async(
                self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any
            ) -> Any:
                result = super().apply_async(entry, producer, advance, **kwargs)
                counter()
                return result

        scheduler = Counting(app=self.app)
        # Its lock, as beat's start-up takes it (redbeat's acquire_distributed_beat_lock).
        client = get_redis(self.app)
        lock = client.lock(
            scheduler.lock_key, timeout=scheduler.lock_timeout, sleep=scheduler.max_interval
        )
        lock.lua_extend = client.register_script(LUA_EXTEND_TO_SCRIPT)
        lock.acquire()
        scheduler.lock = lock
        return scheduler

    def _write(self, entries: list[tuple[int, datetime]]) -> None:
        """Entries as ``RedBeatSchedulerEntry.save()`` writes them, in one pipeline."""
        from redbeat.decoder import RedBeatJSONEncoder
        from redbeat.schedulers import RedBeatSchedulerEntry, get_redis

        client = get_redis(self.app)
        with client.pipeline() as pipe:
            for i, last_run_at in entries:
                entry = RedBeatSchedulerEntry(
                    name=f"bench-{i}",
                    task="bench.noop",
                    schedule=every(run_every=timedelta(seconds=INTERVAL_SECONDS)),
                    app=self.app,
                )
                entry.last_run_at = last_run_at
                definition = {
                    "name": entry.name, "task": entry.task, "args": entry.args,
                    "kwargs": entry.kwargs, "options": entry.options, "schedule": entry.schedule,
                    "enabled": entry.enabled,
                }  # fmt: skip
                pipe.hset(entry.key, "definition", json.dumps(definition, cls=RedBeatJSONEncoder))
                pipe.hset(
                    entry.key,
                    "meta",
                    json.dumps({"last_run_at": last_run_at}, cls=RedBeatJSONEncoder),
                )
                # The score redbeat writes when the entry runs (at last_run_at): its next
                # run. (entry.score computed later is earlier: due_at adds the time
                # remaining from now to last_run_at, not to now.)
                due_at = last_run_at + timedelta(seconds=INTERVAL_SECONDS)
                pipe.zadd(self.app.redbeat_conf.schedule_key, {entry.key: due_at.timestamp()})
            pipe.execute()

    def setup(self, size: int) -> dict[str, Any]:
        self.clean()
        now = datetime.now(UTC)
        started = time.perf_counter()
        for start in range(0, size, CHUNK):
            self._write(
                [
                    (i, now + timedelta(seconds=not_due_offset(i) - INTERVAL_SECONDS))
                    for i in range(start, min(size, start + CHUNK))
                ]
            )
        return {"size": size, "created_s": time.perf_counter() - started}

    def arm(self, due: int) -> dict[str, Any]:
        at = datetime.now(UTC) - timedelta(seconds=INTERVAL_SECONDS + DUE_AGO)
        for start in range(0, due, CHUNK):
            self._write([(i, at) for i in range(start, min(due, start + CHUNK))])
        return {"armed": due}

    def idle(self, passes: int, max_seconds: float) -> list[float]:
        scheduler = self._scheduler()
        scheduler.tick()  # warm
        samples = timed_passes(scheduler.tick, passes, max_seconds)
        scheduler.close()
        return samples

    def burst(self, due: int, cap_seconds: float) -> dict[str, Any]:
        handoffs = HandOffs()
        scheduler = self._scheduler(handoffs)
        started = time.perf_counter()
        while handoffs.count < due and time.perf_counter() - started < cap_seconds:
            scheduler.tick()
        result = handoffs.result(started, due)
        scheduler.close()
        from redis import Redis

        Redis(host="127.0.0.1").delete(f"{self.prefix}-celery")  # the messages sent
        return result

    def clean(self) -> dict[str, Any]:
        return {"keys_deleted": delete_keys(self.prefix)}


if __name__ == "__main__":
    main(RedBeat)
