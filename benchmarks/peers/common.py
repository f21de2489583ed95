"""What every driver of the benchmark suite shares (the standard library, and redis-py for
``delete_keys``: the peers' drivers run in the peers' own venvs, where this app is not
installed).

A driver is a small script for one system, run as ``python -m benchmarks.peers.<name>
COMMAND [options]`` from the repository's root, each command in a fresh process:

- ``setup --size N``: N schedules of one hour, none due (next runs 30 to 60 minutes away);
- ``arm --due D``: the first D of them due now (their next run 5 seconds ago);
- ``idle --passes P``: the scheduler built as its own command builds it, then P of its
  passes with nothing due, each timed; the process's RSS after them;
- ``burst --due D``: the scheduler fires what ``arm`` made due; the time from the start of
  its first pass to the last hand-off;
- ``clean``: everything the driver wrote, gone (tables, keys, queued messages).

The last line a command prints is ``RESULT {json}``; ``benchmarks.suite`` reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

# Not-due schedules run hourly and are next due 30 to 60 minutes from setup: nothing
# becomes due by itself while a suite runs (a quick run takes well under 30 minutes).
INTERVAL_SECONDS = 3600
NOT_DUE_FROM = 1800
NOT_DUE_SPREAD = 1800
# An armed schedule is due since this many seconds.
DUE_AGO = 5
# The local Redis the peers keep their schedules in (their keys under the run's prefix).
REDIS_URL = "redis://127.0.0.1:6379/0"


def not_due_offset(i: int) -> int:
    """Seconds from now to the next run of not-due schedule ``i``: spread, as real ones are."""
    return NOT_DUE_FROM + i % NOT_DUE_SPREAD


class Driver(Protocol):
    def setup(self, size: int) -> dict[str, Any]: ...
    def arm(self, due: int) -> dict[str, Any]: ...
    def idle(self, passes: int, max_seconds: float) -> list[float]: ...
    def burst(self, due: int, cap_seconds: float) -> dict[str, Any]: ...
    def clean(self) -> dict[str, Any]: ...


def rss_kib() -> int:
    """This process's resident set size now (Linux), in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


MIN_PASSES = 5


def timed_passes(one_pass: Callable[[], Any], passes: int, max_seconds: float) -> list[float]:
    """Milliseconds of each of ``passes`` calls of ``one_pass``; fewer (but at least
    MIN_PASSES) once ``max_seconds`` have gone by."""
    samples: list[float] = []
    deadline = time.perf_counter() + max_seconds
    for _ in range(passes):
        if len(samples) >= MIN_PASSES and time.perf_counter() > deadline:
            break
        started = time.perf_counter()
        one_pass()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


class HandOffs:
    """Counts hand-offs and when the last one happened (perf_counter)."""

    def __init__(self) -> None:
        self.count = 0
        self.last = 0.0

    def __call__(self) -> None:
        self.count += 1
        self.last = time.perf_counter()

    def result(self, started: float, due: int) -> dict[str, Any]:
        seconds = (self.last or time.perf_counter()) - started
        return {
            "handed_off": self.count,
            "due": due,
            "seconds": seconds,
            "rate": self.count / seconds if seconds > 0 and self.count else 0.0,
            "complete": self.count >= due,
        }


def delete_keys(prefix: str) -> int:
    """Every key of this run on the local Redis: a scheduler's keys and a broker's queue,
    all named after ``prefix``. (redis-py: every peer's venv has it.)"""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"*{prefix}*", count=10_000))
    for start in range(0, len(keys), 10_000):
        client.delete(*keys[start : start + 10_000])
    return len(keys)


def emit(result: dict[str, Any]) -> None:
    print("RESULT " + json.dumps(result), flush=True)


def main(make_driver: Callable[[argparse.Namespace], Driver]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["setup", "arm", "idle", "burst", "clean"])
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--due", type=int, default=100)
    parser.add_argument("--passes", type=int, default=100)
    parser.add_argument("--max-seconds", type=float, default=10.0, help="idle: at most")
    parser.add_argument(
        "--cap-seconds",
        type=float,
        default=60.0,
        help="burst: stop after this long, whatever is left (the rate is of what was done)",
    )
    parser.add_argument("--prefix", default=os.environ.get("BENCH_KEY_PREFIX", "bench-suite"))
    parser.add_argument("--database", default=os.environ.get("BENCH_PG_NAME", "bench_suite"))
    parser.add_argument("--store", default="", help="APScheduler: sqlalchemy or redis")
    options = parser.parse_args()
    driver = make_driver(options)
    started = time.perf_counter()
    if options.command == "setup":
        result = driver.setup(options.size)
    elif options.command == "arm":
        result = driver.arm(options.due)
    elif options.command == "idle":
        samples = driver.idle(options.passes, options.max_seconds)
        result = {"pass_ms": samples, "rss_kib": rss_kib()}
    elif options.command == "burst":
        result = driver.burst(options.due, options.cap_seconds)
        result["rss_kib"] = rss_kib()
    else:
        result = driver.clean()
    result["wall_seconds"] = time.perf_counter() - started
    result["python"] = sys.version.split()[0]
    emit(result)
