"""Lateness on the healthy shards while a Redis Cluster master fails over (issue 34, item 3).

    python -m benchmarks.failover                  # 3 masters + 3 replicas, 3 shards
    python -m benchmarks.failover --smoke          # a few seconds on tiny sizes (CI)
    python -m benchmarks.failover --code /path/to/another/checkout   # its app (before/after)

A real Redis Cluster of ``redis-server`` processes of its own (3 masters, a replica each,
``--node-timeout`` ms before a silent master is failed over), and an index of 3 shards
(``INDEX_SHARDS``) under a key prefix whose shards sit one per master. ``--schedules``
interval schedules of ``--interval-ms`` (a no-op task, catch-up "all", spread evenly over
the interval) fire through one real ``run_scheduler`` process (``benchmarks/settings.py``
with the cluster as ``REDIS``, a one-second socket timeout). After ``--warm-up`` seconds,
the master holding ``--shard`` is SIGKILLed, and its replica takes over.

Measured over the occurrences due from one second before the kill to ``--after`` seconds
after it: lateness (nominal time to hand-off, from the ledger) p50 / p99 / max, on the
healthy shards and on the failed one apart; and nothing lost or doubled (every occurrence
due in the window in the ledger, handed off at its first attempt).

``--code`` runs the scheduler from another checkout of the app (its ``django_schedulinator``
and ``benchmarks``): the same load on the code before a change. The database is
``schedulinator_bench_failover`` (``BENCH_PG_NAME``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.run import add_smoke_option, set_up

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

ROOT = Path(__file__).resolve().parent.parent
SHARDS = 3
# The scheduler's settings: the benchmark's, with the cluster of this run as REDIS.
SETTINGS_MODULE = """\
import json
import os

from benchmarks.settings import *  # noqa: F403

REDIS = json.loads(os.environ["BENCH_REDIS_CLUSTER"])
SCHEDULINATOR = {**SCHEDULINATOR, "REDIS": REDIS}  # noqa: F405
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=600)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--warm-up", type=float, default=8.0, help="seconds before the kill")
    parser.add_argument("--after", type=float, default=15.0, help="seconds measured after it")
    parser.add_argument("--shard", type=int, default=1, help="the shard whose master dies")
    parser.add_argument("--node-timeout", type=int, default=1000, help="cluster-node-timeout")
    parser.add_argument("--code", default=str(ROOT), help="the checkout the scheduler runs")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the figures here")
    add_smoke_option(parser)
    options = parser.parse_args()
    if options.smoke:
        options.schedules, options.warm_up, options.after = 30, 4.0, 4.0
    result = measure(options)
    print(json.dumps(result, indent=2))
    if options.json:
        Path(options.json).write_text(json.dumps(result, indent=2) + "\n")
    if options.smoke:
        assert result["lost"] == 0, result
        assert result["doubled"] == 0, result


def spread_prefix(client: Any, base: str) -> str:
    """A key prefix whose shards' hash tags land on as many masters as there are shards."""
    for n in range(1000):
        prefix = f"{base}-{n}"
        tags = [f"{{{prefix}}}" if k == 0 else f"{{{prefix}:{k}}}" for k in range(SHARDS)]
        if len({client.get_node_from_key(f"{tag}:due").port for tag in tags}) == SHARDS:
            return prefix
    raise RuntimeError("no prefix spreads the shards over the masters")


def measure(options: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))  # tests.support: the tests' real cluster
    from tests.support import redis_cluster

    redis_cluster.NODE_TIMEOUT_MS = options.node_timeout
    if not options.smoke:
        os.environ.setdefault("BENCH_PG_NAME", "schedulinator_bench_failover")
    workdir = Path(tempfile.mkdtemp(prefix="failover-"))
    with redis_cluster.redis_cluster(workdir / "cluster") as cluster:
        client = cluster.client()
        base = os.environ.get("BENCH_KEY_PREFIX", "schedulinator-bench")
        prefix = spread_prefix(client, f"{base}-failover-{os.getpid()}")
        client.close()
        setting = {
            "URL": [node.url for node in cluster.nodes],
            "CLUSTER": True,
            "OPTIONS": {"socket_timeout": 1, "socket_connect_timeout": 1},
        }
        os.environ.update(
            BENCH_KEY_PREFIX=prefix,
            BENCH_INDEX_SHARDS=str(SHARDS),
            BENCH_REDIS_CLUSTER=json.dumps(setting),
        )
        (workdir / "failover_settings.py").write_text(SETTINGS_MODULE)
        os.environ["DJANGO_SETTINGS_MODULE"] = "failover_settings"
        sys.path.insert(0, str(workdir))
        set_up(smoke=options.smoke)
        return _run(options, cluster, prefix, workdir)


def _run(options: argparse.Namespace, cluster: Any, prefix: str, workdir: Path) -> dict[str, Any]:
    from django.db import connection
    from django.utils import timezone

    from benchmarks.run import arm_evenly
    from benchmarks.steady import ensure_schedules, expected_occurrences, wait_for_heartbeats
    from django_schedulinator.index.due import get_index, shard_tag
    from django_schedulinator.models import Run

    index = get_index()
    ensure_schedules(options.schedules, options.interval_ms)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Run._meta.db_table}")
    start = timezone.now().replace(microsecond=0) + timedelta(seconds=4)
    arm_evenly(index, period_ms=options.interval_ms, base=start)
    code = Path(options.code).resolve()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(code), str(workdir)]),
        "DJANGO_SETTINGS_MODULE": "failover_settings",
    }
    argv = [sys.executable, "-m", "django", "run_scheduler", "--worker-id", "failover-0"]
    log = (workdir / "scheduler.log").open("w")
    scheduler = subprocess.Popen(argv, cwd=code, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_heartbeats(index, [scheduler])
        kill_at = start + timedelta(seconds=options.warm_up)
        _sleep_until(kill_at)
        killed_at = timezone.now()
        key = f"{shard_tag(prefix, options.shard)}:due"
        old = cluster.master_of(key).port
        failed_over = time.monotonic()
        new = cluster.fail_over(key).port
        failover_s = time.monotonic() - failed_over
        t0, t1 = killed_at - timedelta(seconds=1), killed_at + timedelta(seconds=options.after)
        _sleep_until(t1)
        # Every occurrence of the window handed off (those the failed shard held in flight
        # wait for their lease), or a minute more.
        expected = expected_occurrences(options.schedules, options.interval_ms, start, t0, t1)
        window = Run.objects.filter(
            scheduled_for__gte=t0, scheduled_for__lt=t1, dispatched_at__isnull=False
        )
        deadline = time.monotonic() + 60
        while window.count() < expected and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        scheduler.send_signal(signal.SIGTERM)
        try:
            code_exit = scheduler.wait(timeout=60)
        except subprocess.TimeoutExpired:
            scheduler.kill()
            code_exit = scheduler.wait()
        log.close()
    text = (workdir / "scheduler.log").read_text()
    runs = list(
        Run.objects.filter(scheduled_for__gte=t0, scheduled_for__lt=t1).values_list(
            "schedule_id", "scheduled_for", "dispatched_at", "attempts"
        )
    )
    healthy = [r for r in runs if r[0] % SHARDS != options.shard]
    failed = [r for r in runs if r[0] % SHARDS == options.shard]
    shutil.rmtree(workdir, ignore_errors=True)
    return {
        "code": str(code),
        "schedules": options.schedules,
        "interval_ms": options.interval_ms,
        "shard_killed": options.shard,
        "master_killed": old,
        "took_over": new,
        "failover_s": round(failover_s, 1),
        "window_s": [-1, options.after],
        "expected": expected,
        "fired": sum(1 for r in runs if r[2] is not None),
        "lost": expected - len(runs),
        "doubled": sum(1 for r in runs if r[3] != 1),
        "lateness_ms": {"healthy shards": _late(healthy), f"shard {options.shard}": _late(failed)},
        "passes_failed": text.count("Scheduler pass failed"),
        "exit_code": code_exit,
        "taken_at": timezone.now().isoformat(timespec="seconds"),
    }


def _late(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """p50 / p99 / max of nominal time to hand-off (ms), and how many."""
    late = sorted((d - s).total_seconds() * 1000 for _sid, s, d, _a in rows if d is not None)
    if not late:
        return {"n": 0}

    def pct(p: float) -> int:
        return round(late[min(len(late) - 1, int(len(late) * p))])

    return {"n": len(late), "p50": pct(0.5), "p99": pct(0.99), "max": round(late[-1])}


def _sleep_until(moment: datetime) -> None:
    from django.utils import timezone

    time.sleep(max(0.0, (moment - timezone.now()).total_seconds()))


if __name__ == "__main__":
    main()
