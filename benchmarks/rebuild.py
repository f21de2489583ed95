"""The rebuild of the due index and the idle pass, as the number of schedules grows.

    python -m benchmarks.rebuild --total 1000000
    python -m benchmarks.rebuild --smoke   # a few seconds on tiny sizes (CI)

For each size of ``--sizes`` up to ``--total`` (1,000, 10,000, ... by default) it grows the
table to that many schedules in SQL (``INSERT ... SELECT`` over ``generate_series``, copies
of one schedule saved through the ORM: a million rows in seconds), then measures:

- **rebuild**: ``rebuild_index`` (what ``manage.py rebuild_due_index`` runs) on an empty
  index (``--repeat`` times, the index dropped before each: a lost index, or ``--reset``),
  then once more on the index it built (every entry unchanged); each with its wall time,
  the CPU seconds of this process, of its PostgreSQL backend and of the Redis server (all
  of it: on a shared server, others' work too), and this process's peak RSS so far;
- **idle pass**: ``Worker.run_pass`` with nothing due (``benchmarks.run.measure_idle``,
  the tick of ``benchmarks.run``), median and p99 over ``--ticks`` passes.

The rows look like a real installation's: half cron and half interval, spread over the
next days, one in ten jittered (with its ``due_at``), one in twenty paused and one in
twenty finished (no next run, so no entry).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.run import add_smoke_option, measure_idle

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

SIZES = (1_000, 10_000, 100_000, 1_000_000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total", type=int, default=1_000_000, help="the largest size")
    parser.add_argument(
        "--sizes",
        type=lambda text: tuple(int(n) for n in text.split(",")),
        default=SIZES,
        help="comma-separated sizes to measure at, up to --total (default: powers of ten)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="rebuilds of an empty index")
    parser.add_argument("--ticks", type=int, default=500, help="idle passes per size")
    parser.add_argument("--chunk-size", type=int, default=None, help="REBUILD_CHUNK_SIZE")
    parser.add_argument("--no-idle", action="store_true", help="measure the rebuild only")
    add_smoke_option(parser)
    options = parser.parse_args()
    if options.smoke:
        options.total, options.sizes, options.repeat, options.ticks = 2000, (500, 2000), 1, 20
    sizes = sorted({n for n in options.sizes if n < options.total} | {options.total})

    from benchmarks.run import start

    index = start(smoke=options.smoke)
    try:
        for size in sizes:
            seed(size)
            measure(size, index, options)
    finally:
        index.drop()


def seed(total: int) -> None:
    """Grow the table to ``total`` schedules: copies of one, made in one SQL statement."""
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from django_schedulinator.models import Schedule

    have = Schedule.objects.count()
    if have >= total:
        return
    if not have:
        Schedule.objects.bulk_create(
            [
                Schedule(
                    name="bench-0",
                    task="bench.noop",
                    kind="cron",
                    cron="*/5 * * * *",
                    interval=timedelta(minutes=5),
                    timezone="UTC",
                    next_run_at=timezone.now() + timedelta(hours=1),
                )
            ]
        )
        have = 1
    table = connection.ops.quote_name(Schedule._meta.db_table)
    generated = {
        "name": "'bench-' || g",
        "kind": "CASE WHEN mod(g, 2) = 0 THEN 'cron' ELSE 'interval' END",
        # Spread over the next days; one in twenty finished (no next run).
        "next_run_at": "CASE WHEN mod(g, 20) = 0 THEN NULL"
        " ELSE now() + make_interval(secs => 600 + mod(g, 200000)) END",
        "due_at": "CASE WHEN mod(g, 20) = 0 THEN NULL"
        " ELSE now() + make_interval(secs => 600 + mod(g, 200000) + CASE WHEN mod(g, 10) = 3"
        " THEN mod(g, 30) ELSE 0 END) END",
        "jitter": "CASE WHEN mod(g, 10) = 3 THEN interval '30 seconds' END",
        "enabled": "mod(g, 20) <> 1",
        "revision": "1 + mod(g, 7)",
        # Saved long ago: reconcile's first pass looks back only RECONCILE_LOOKBACK_SECONDS.
        "created_at": "now() - interval '1 day'",
        "updated_at": "now() - interval '1 day'",
    }
    columns = [f.column for f in Schedule._meta.concrete_fields if not f.primary_key]
    values = [generated.get(c, connection.ops.quote_name(c)) for c in columns]
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({names}) SELECT {', '.join(values)} FROM {table},"
            f" generate_series(%s, %s) AS g WHERE name = 'bench-0'",
            [have, total - 1],
        )
        # What autovacuum does soon after: the orphan look's index-only lookups then skip
        # the table's pages (a table never vacuumed costs them several times as much).
        cursor.execute(f"VACUUM ANALYZE {table}")
    print(f"seed: {have:,} -> {total:,} schedules in {time.perf_counter() - started:.1f}s")


@dataclass
class Costs:
    """Wall and CPU seconds of one step: this process, its PostgreSQL backend, Redis."""

    wall: float = 0.0
    python: float = 0.0
    postgres: float = 0.0
    redis: float = 0.0

    def __str__(self) -> str:
        return (
            f"{self.wall:.2f}s wall; CPU: Python {self.python:.2f}s, PostgreSQL "
            f"{self.postgres:.2f}s, Redis {self.redis:.2f}s"
        )


class Meter:
    """Reads the CPU time of this process, of its database backend (``/proc``: the server
    runs on this host) and of the Redis server (``INFO cpu``: all of its clients)."""

    def __init__(self, index: Any) -> None:
        from django.db import connection

        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            self.backend_pid = cursor.fetchone()[0]
        self.index = index
        self.tick = os.sysconf("SC_CLK_TCK")

    def _postgres(self) -> float:
        try:
            with open(f"/proc/{self.backend_pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the database runs elsewhere
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self.tick

    def _redis(self) -> float:
        info = self.index.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def read(self) -> Costs:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return Costs(
            time.perf_counter(), usage.ru_utime + usage.ru_stime, self._postgres(), self._redis()
        )

    def since(self, before: Costs) -> Costs:
        now = self.read()
        return Costs(
            now.wall - before.wall,
            now.python - before.python,
            now.postgres - before.postgres,
            now.redis - before.redis,
        )


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(size: int, index: Any, options: argparse.Namespace) -> None:
    from django_schedulinator.index.rebuild import rebuild_index

    meter = Meter(index)
    cold: list[Costs] = []
    for _ in range(options.repeat):
        index.drop()
        gc.collect()
        before = meter.read()
        report = rebuild_index(index, chunk_size=options.chunk_size)
        cold.append(meter.since(before))
        assert report.rows == size, report
        assert not report.stale, report
        assert report.added == index.counts()[0], report
    before = meter.read()
    report = rebuild_index(index, chunk_size=options.chunk_size)
    warm = meter.since(before)
    assert report.unchanged == size, report
    walls = sorted(c.wall for c in cold)
    middle = sorted(cold, key=lambda c: c.wall)[len(cold) // 2]
    print(
        f"rebuild of {size:,}: empty index {statistics.median(walls):.2f}s median "
        f"({walls[0]:.2f} - {walls[-1]:.2f} over {len(walls)}), "
        f"{size / statistics.median(walls):,.0f} rows/s; the median run: {middle}"
    )
    print(f"rebuild of {size:,}: index in place (all unchanged) {warm}")
    print(f"peak RSS of this process so far: {peak_rss_mib():.0f} MiB")
    if not options.no_idle:
        from datetime import timedelta

        from django_schedulinator.index.reconcile import reconcile

        # The steady state: reconcile has read the rows just created (as it would within
        # seconds of their creation), as in benchmarks.run.
        while not reconcile(index, settle=timedelta(0)).caught_up:
            pass
        before = meter.read()
        idle = measure_idle(options.ticks)
        redis = meter.since(before).redis / options.ticks * 1000
        print(
            f"idle pass at {size:,}: {idle} over {options.ticks} passes; Redis server CPU "
            f"{redis:.3f} ms a pass (all its clients)"
        )


if __name__ == "__main__":
    main()
