"""Lateness of a scheduler firing a steady load, with and without a prune of a large ledger
beside it.

    python -m benchmarks.prune --runs 3000000 --schedules 1000 --seconds 30
    python -m benchmarks.prune --runs 3000000 --schedules 1000 --seconds 30 --partitioned
    python -m benchmarks.prune --month --runs-per-day 100000
    python -m benchmarks.prune --smoke   # each mode on tiny sizes, a minute (CI)

Creates ``--schedules`` schedules firing every second, spread evenly over the second (a
steady ``--schedules`` occurrences per second), and a ledger of ``--runs`` runs of theirs that
ended 90 days ago, written by ``generate_series`` in the order a ledger grows (ids with
time). One in-process scheduler (inline dispatcher, a no-op task) fires the load through the
whole real path; the benchmark measures the lateness of what it fires (nominal time to
hand-off, ``dispatched_at - scheduled_for``) in three phases:

1. **no prune**: ``--seconds`` of the load alone;
2. **chore**: the scheduler's own retention (30 days) prunes the ledger on the scheduler's
   prune thread, slices of ``PRUNE_MAX_SECONDS`` with rests between, until it has caught up;
3. **command**: the ledger written again (the ledger emptied first), ``manage.py prune_runs
   --older-than 30d`` prunes it from a process of its own beside the scheduler (whose
   retention is off).

It prints, for each phase, the occurrences fired, the lateness p50, p99 and maximum, and for
the prunes the rows deleted, the time and the rate. The database is ``schedulinator_bench_prune``
(``BENCH_PG_NAME``): the ledger is larger than the other benchmarks'.

``--partitioned``: the same phases on a ledger partitioned by day (``manage.py
partition_runs``, converted while empty; converted back at the end): the old runs are one
day's partition, which both prunes drop whole.

``--month``: no scheduler; the ledger's size after a simulated month and more, on each layout.
For each of ``--days`` days, ``--runs-per-day`` runs of that day are written (ended that
day), then retention (30 days, the default) prunes as of the day's end. It prints the table's
and its indexes' sizes, the dead tuples autovacuum has left to do, and the time the prunes
took, for the plain ledger and the partitioned one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from benchmarks.run import add_smoke_option, arm_evenly, lateness

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

RETENTION = 30 * 86_400.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3_000_000, help="old runs in the ledger")
    parser.add_argument("--schedules", type=int, default=1000, help="occurrences per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of phase 1")
    parser.add_argument("--batch-size", type=int, default=None, help="PRUNE_BATCH_SIZE")
    parser.add_argument("--max-seconds", type=float, default=None, help="PRUNE_MAX_SECONDS")
    parser.add_argument(
        "--partitioned", action="store_true", help="the ledger partitioned by day (PostgreSQL)"
    )
    parser.add_argument(
        "--month", action="store_true", help="the ledger's size after --days days, each layout"
    )
    parser.add_argument("--days", type=int, default=40, help="days simulated by --month")
    parser.add_argument("--runs-per-day", type=int, default=100_000, help="with --month")
    add_smoke_option(parser)
    options = parser.parse_args()
    if options.smoke:
        options.runs, options.schedules, options.seconds = 4000, 20, 2.0
        options.days, options.runs_per_day = 33, 200
    else:
        os.environ.setdefault("BENCH_PG_NAME", "schedulinator_bench_prune")

    from benchmarks.run import start

    index = start(smoke=options.smoke)
    from django.conf import settings

    overrides = {"RUN_RETENTION_SECONDS": None, "CHANGE_RETENTION_SECONDS": None}
    if options.batch_size:
        overrides["PRUNE_BATCH_SIZE"] = options.batch_size
    if options.max_seconds:
        overrides["PRUNE_MAX_SECONDS"] = options.max_seconds
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **overrides}
    try:
        if options.smoke and not (options.month or options.partitioned):
            # CI's smoke (.ci/run) runs every mode, so that none rots.
            measure(options, index)
            index = start(smoke=True)
            measure(argparse.Namespace(**{**vars(options), "partitioned": True}), index)
            index = start(smoke=True)
            month(options)
        elif options.month:
            month(options)
        else:
            measure(options, index)
    finally:
        index.drop()
        unpartition()


def partition(*, behind: int) -> None:
    """The ledger (empty) partitioned by day, from ``behind`` days ago to 3 days ahead."""
    from django.db import connection
    from django.utils import timezone

    from django_schedulinator.operations import partitions

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {partitions.table()}")
    unpartition()
    partitions.partition(
        today=timezone.now().date(), days_behind=behind, days_ahead=3, using="default"
    )


def unpartition() -> None:
    """The ledger one table again, as the other benchmarks expect it."""
    from django_schedulinator.operations import partitions

    if partitions.layout("default") is not None:
        partitions.unpartition(using="default")


def measure(options: argparse.Namespace, index: Any) -> None:
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from django_schedulinator.conf import app_settings
    from django_schedulinator.models import Run, Schedule

    n = options.schedules
    Schedule.objects.bulk_create(
        (
            Schedule(
                name=f"bench-{i}",
                task="bench.noop",
                kind=Schedule.Kind.INTERVAL,
                interval=timedelta(seconds=1),
                catch_up="all",
                timezone="UTC",
            )
            for i in range(n)
        ),
        batch_size=5000,
    )
    print(
        f"setup: {n} schedules firing every second, PRUNE_BATCH_SIZE "
        f"{app_settings.PRUNE_BATCH_SIZE}, PRUNE_MAX_SECONDS {app_settings.PRUNE_MAX_SECONDS:g}"
    )

    if options.partitioned:
        partition(behind=91)
        print("ledger: partitioned by day (the old runs: one day's partition)")
    write_old_ledger(options.runs, first=0)
    table = Run._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {table}")
    scheduler = Scheduler()
    warm_up = min(5.0, options.seconds / 2)  # past the start and the first passes
    try:
        # 1. The load alone.
        arm(index)
        scheduler.start()
        time.sleep(warm_up)
        t0 = timezone.now()
        time.sleep(options.seconds)
        report("no prune", t0, timezone.now())

        # 2. The scheduler's own prune.
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "RUN_RETENTION_SECONDS": RETENTION}
        t0, started = timezone.now(), time.monotonic()
        worker = scheduler.worker
        assert worker is not None
        worker.chores.next_prune = 0  # now, rather than within a minute of its start
        pruned_before = worker.counters.pruned
        wait_until(lambda: worker.chores.prune_thread is not None)
        thread = worker.chores.prune_thread
        assert thread is not None
        thread.join()  # the loop fires meanwhile: the prune runs on a thread of its own
        elapsed = time.monotonic() - started
        deleted = worker.counters.pruned - pruned_before
        total = thread.pruner.total
        report(
            "chore", t0, timezone.now(), f"deleted {deleted:,} runs in {elapsed:.1f}s "
            f"({deleted / elapsed:,.0f}/s), {total.batches:,} batches on the scheduler's "
            f"prune thread, {total.seconds:.1f}s of them deleting"
            + (f", {total.days} day partition(s) dropped" if total.days else "")
        )  # fmt: skip
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "RUN_RETENTION_SECONDS": None}
        scheduler.stop()

        # 3. prune_runs beside the scheduler, on a ledger written again (before the new runs,
        # as a ledger grows: the walk ends at the first batch with nothing old).
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {table} RESTART IDENTITY")
        if options.partitioned:
            partition(behind=91)  # the dropped day made again
        write_old_ledger(options.runs, first=0)
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {table}")
        arm(index)
        scheduler.start()
        time.sleep(warm_up)
        t0, started = timezone.now(), time.monotonic()
        command = [sys.executable, "-m", "django", "prune_runs", "--older-than", "30d"]
        command += ["--no-progress"]
        if options.batch_size:
            command += ["--batch-size", str(options.batch_size)]
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
        if done.returncode:
            raise SystemExit(f"prune_runs failed ({done.returncode}): {done.stderr.strip()}")
        elapsed = time.monotonic() - started
        report("command", t0, timezone.now(), f"{done.stdout.strip()} ({elapsed:.1f}s wall)")
    finally:
        scheduler.stop()


def month(options: argparse.Namespace) -> None:
    """The ledger's size after ``options.days`` days of ``options.runs_per_day`` runs, pruned
    each day with the default retention, on each layout."""
    from django.db import connection
    from django.utils import timezone

    from django_schedulinator.conf import app_settings
    from django_schedulinator.models import Schedule
    from django_schedulinator.operations import partitions
    from django_schedulinator.operations.retention import Pruner

    retention = timedelta(seconds=RETENTION)
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    # Fired through today: no run of theirs guards an occurrence (retention.py).
    Schedule.objects.bulk_create(
        Schedule(name=f"bench-{i}", task="bench.noop", kind=Schedule.Kind.INTERVAL,
                 interval=timedelta(seconds=10), timezone="UTC", fired_through=today)
        for i in range(1000)
    )  # fmt: skip
    first = today - timedelta(days=options.days)
    table = partitions.table()
    for layout in ("plain", "partitioned"):
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {table} RESTART IDENTITY")
        if layout == "partitioned":
            partition(behind=options.days + 1)
        else:
            unpartition()
        pruning = 0.0
        for d in range(options.days):
            day = first + timedelta(days=d)
            write_day(options.runs_per_day, day)
            pruner = Pruner(
                now=day + timedelta(days=1), run_age=retention, keep_last=app_settings.RUN_KEEP_LAST
            )
            started = time.perf_counter()
            pruner.step()
            pruning += time.perf_counter() - started
        with connection.cursor() as cursor:
            # This process's counts of what it deleted, sent to the statistics now (PG 15).
            cursor.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(1.0)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COALESCE(SUM(pg_table_size(c.oid)), 0), "
                "COALESCE(SUM(pg_indexes_size(c.oid)), 0), COALESCE(SUM(s.n_live_tup), 0), "
                "COALESCE(SUM(s.n_dead_tup), 0) FROM pg_class c "
                "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
                "WHERE c.relname = %s OR c.relname LIKE %s",
                [table, f"{table}\\_%"],
            )
            data, indexes, live, dead = cursor.fetchone()
            cursor.execute(f"SELECT count(*) FROM {table}")
            (rows,) = cursor.fetchone()
        mib = 1024 * 1024
        print(
            f"{layout}: {options.days} days of {options.runs_per_day:,} runs, pruned daily "
            f"(30 days kept): {rows:,} runs left; table {data / mib:,.1f} MiB, indexes "
            f"{indexes / mib:,.1f} MiB, dead tuples {dead:,} (live {live:,}); prunes took "
            f"{pruning:.1f}s in all"
        )


def write_day(total: int, day: datetime) -> None:
    """``total`` runs of the schedules in ``day``, spread over it, ended when due."""
    from django.db import connection

    from django_schedulinator.models import Run, Schedule

    qn = connection.ops.quote_name
    columns = ", ".join(
        qn(Run._meta.get_field(name).column)
        for name in ("schedule", "scheduled_for", "status", "trigger", "skip_reason", "task",
                     "args", "kwargs", "dispatcher", "dispatch_options", "claimed_at",
                     "dispatched_at", "finished_at", "worker_id", "claim_token", "attempts",
                     "output", "external_id", "error", "note")
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {qn(Run._meta.db_table)} ({columns}) "
            "SELECT s.id, t.at, 'succeeded', 'schedule', '', 'bench.noop', '[]', '{}', "
            "'default', '{}', t.at, t.at, t.at, 'bench-old', '', 1, '', '', '', '' "
            "FROM generate_series(0, %s - 1) AS g "
            f"JOIN {qn(Schedule._meta.db_table)} AS s ON s.id = (SELECT min(id) FROM "
            f"{qn(Schedule._meta.db_table)}) + g %% 1000 "
            "CROSS JOIN LATERAL (SELECT %s::timestamptz + (g * 86400.0 / %s) * "
            "interval '1 second' AS at) AS t",
            [total, day, total],
        )


def arm(index: Any) -> None:
    """Every schedule's next run a second from now, spread evenly over the second (a steady
    load, not a burst at each second), and the index rebuilt: no backlog of missed runs."""
    from django.utils import timezone

    base = timezone.now().replace(microsecond=0) + timedelta(seconds=2)
    arm_evenly(index, period_ms=1000, base=base)
    time.sleep(max(0.0, (base - timezone.now()).total_seconds()))


def write_old_ledger(total: int, *, first: int) -> None:
    """``total`` runs of the schedules, ended 90 days ago, one a second per schedule from
    ``first`` seconds on, written in the order a ledger grows: ids with time."""
    from django.db import connection

    from django_schedulinator.models import Run, Schedule

    meta = Run._meta
    qn = connection.ops.quote_name
    values = {
        "schedule_id": "s.id",
        "scheduled_for": "t.at",
        "status": "'succeeded'",
        "trigger": "'schedule'",
        "skip_reason": "''",
        "task": "'bench.noop'",
        "args": "'[]'",
        "kwargs": "'{}'",
        "dispatcher": "'default'",
        "dispatch_options": "'{}'",
        "claimed_at": "t.at",
        "dispatched_at": "t.at",
        "finished_at": "t.at + interval '10 milliseconds'",
        "worker_id": "'bench-old'",
        "claim_token": "''",
        "attempts": "1",
        "output": "''",
        "external_id": "''",
        "error": "''",
        "note": "''",
    }
    columns = ", ".join(qn(meta.get_field(name).column) for name in values)
    schedules = Schedule.objects.count()
    per_schedule = total // schedules
    step = max(1, 200_000 // schedules)  # rows per statement: about 200,000
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for g in range(first, first + per_schedule, step):
            last = min(g + step, first + per_schedule) - 1
            cursor.execute(
                f"INSERT INTO {qn(meta.db_table)} ({columns}) "
                f"SELECT {', '.join(values.values())} "
                f"FROM generate_series(%s, %s) AS g "
                f"CROSS JOIN LATERAL (SELECT now() - interval '90 days' "
                f"+ g * interval '1 second' AS at) AS t "
                f"CROSS JOIN {qn(Schedule._meta.db_table)} AS s ORDER BY g, s.id",
                [g, last],
            )
    print(
        f"ledger: {per_schedule * schedules:,} runs ended 90 days ago written in "
        f"{time.perf_counter() - started:.1f}s"
    )


class Scheduler:
    """One in-process scheduler in a thread of its own, as ``run_scheduler`` runs it."""

    def __init__(self) -> None:
        self.worker: Any = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        from django.db import connections

        from django_schedulinator.dispatch.inline import InlineDispatcher
        from django_schedulinator.scheduler.worker import Worker

        self.worker = worker = Worker(worker_id="bench", dispatcher=InlineDispatcher())

        def run() -> None:
            try:
                worker.run()
            finally:
                connections.close_all()

        self.thread = threading.Thread(target=run, name="scheduler")
        self.thread.start()

    def stop(self) -> None:
        if self.thread is not None:
            self.worker.stopping = True
            self.thread.join(120)
            self.thread = None


def wait_until(condition: Any, timeout: float = 3600.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the prune did not finish")
        time.sleep(0.1)


def report(phase: str, since: datetime, until: datetime, note: str = "") -> None:
    """The lateness of the occurrences due in the window (nominal time to hand-off)."""
    late = lateness(since, until, exclude_worker="bench-old")
    seconds = (until - since).total_seconds()
    if not late.handed_off:
        print(f"{phase}: nothing fired in {seconds:.0f}s" + (f"; {note}" if note else ""))
        return
    undispatched = late.due - late.handed_off
    print(
        f"{phase}: {late.handed_off:,} fired in {seconds:.0f}s "
        f"({late.handed_off / seconds:,.0f}/s), {late.summary()}"
        + (f", {undispatched} not handed off yet" if undispatched else "")
        + (f"; {note}" if note else "")
    )


if __name__ == "__main__":
    main()
