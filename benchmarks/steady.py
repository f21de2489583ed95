"""Lateness and CPU of a steady load fired by real ``run_scheduler`` processes.

    python -m benchmarks.steady --rate 1000 --total 100000 --seconds 30
    python -m benchmarks.steady --rate 5000 --total 340000 --seconds 30 --json steady.json
    python -m benchmarks.steady --rate 1000 --total 100000 --seconds 30 --partitioned
    python -m benchmarks.steady --smoke   # a few seconds on tiny sizes (CI)

``--total`` interval schedules (a no-op task, the inline dispatcher) share one interval,
``total / rate`` seconds, at staggered phases: ``--rate`` occurrences fall due every second,
spread evenly over it (whole milliseconds), not in a burst. ``--processes`` real
``manage.py run_scheduler`` subprocesses (``benchmarks/settings.py``) fire them through the
whole path. After ``--warm-up`` seconds the benchmark measures ``--seconds``:

- lateness p50 / p99 / max of the occurrences due in the window, nominal time to hand-off
  (``dispatched_at - scheduled_for``, from the ledger);
- occurrences fired against those expected (nothing lost), and none handed off twice
  (every run succeeded at its first attempt; the ledger's unique key forbids a second run);
- CPU per occurrence (user + system): the scheduler processes' (``/proc/<pid>/stat``), the
  database's backends' (``/proc`` of every connection to the benchmark's database) and the
  Redis server's;
- per occurrence: the database's transactions (``pg_stat_database``) and the Redis
  commands (``INFO commandstats``).

Redis is a server of the benchmark's own (``redis-server`` on a free port, no persistence),
so its CPU and its command counts are the schedulers' alone; ``--redis-url`` uses another
(its CPU then is the whole server's, shared with whatever else uses it). The schedules are
kept between runs of the same ``--total`` and armed again with one statement; the ledger
is emptied. The database is ``schedulinator_bench_steady`` (``BENCH_PG_NAME``).

``--partitioned`` runs on a ledger partitioned by day (``manage.py partition_runs``: a
partition for each of the last 30 days and the next 3, and a default one), converted back
at the end: what partitioning costs the hot path.

``--count-statements`` runs each scheduler through a wrapper that counts its passes and
SQL statements by kind (a profile's figures, not a benchmark's: the counting costs CPU).

``measure()`` is the same for other code (the benchmark suite).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.run import add_smoke_option, arm_evenly, lateness, set_up

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

TICKS = os.sysconf("SC_CLK_TCK")
WORKER_PREFIX = "steady-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="occurrences due per second")
    parser.add_argument("--total", type=int, default=100_000, help="schedules")
    parser.add_argument("--seconds", type=float, default=30.0, help="the measured window")
    parser.add_argument("--processes", type=int, default=1, help="run_scheduler processes")
    parser.add_argument("--batch-size", type=int, default=None, help="run_scheduler's")
    parser.add_argument("--warm-up", type=float, default=10.0, help="seconds before the window")
    parser.add_argument("--redis-url", default=None, help="a Redis of your own (see above)")
    parser.add_argument(
        "--count-statements", action="store_true", help="count passes and SQL statements"
    )
    parser.add_argument(
        "--write-batch",
        type=int,
        default=None,
        metavar="N",
        help="measure only the claim's write of N schedules, one statement against two",
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="write the figures here")
    parser.add_argument(
        "--partitioned", action="store_true", help="the ledger partitioned by day (PostgreSQL)"
    )
    add_smoke_option(parser)
    options = parser.parse_args()
    if options.write_batch:
        os.environ.setdefault("BENCH_PG_NAME", "schedulinator_bench_steady")
        set_up(smoke=options.smoke)
        ensure_schedules(max(options.write_batch, options.total), 60_000)
        print(json.dumps(measure_write(options.write_batch), indent=2))
        return
    if options.smoke:
        options.rate, options.total, options.seconds, options.warm_up = 50, 200, 2.0, 1.0
    # CI's smoke (.ci/run) runs both layouts, so that neither rots.
    layouts = [False, True] if options.smoke and not options.partitioned else [options.partitioned]
    for partitioned in layouts:
        with partitioned_ledger(partitioned, smoke=options.smoke):
            result = measure(
                options.rate,
                options.total,
                options.seconds,
                options.processes,
                batch_size=options.batch_size,
                warm_up=options.warm_up,
                redis_url=options.redis_url,
                count_statements=options.count_statements,
                smoke=options.smoke,
            )
        print(HEADER)
        print(markdown_row(result))
        if options.smoke:
            assert result["fired"] == result["expected"], result
            assert not result["doubled"], result
    if options.count_statements:
        print(json.dumps(result["counted"], indent=2))
    if options.json:
        Path(options.json).write_text(json.dumps(result, indent=2) + "\n")


@contextmanager
def partitioned_ledger(wanted: bool, *, smoke: bool) -> Iterator[None]:
    """With ``wanted``, the benchmark's ledger partitioned by day (emptied first: the
    measure empties it anyway) for the block, one table again after it."""
    if not wanted:
        yield
        return
    if not smoke:
        os.environ.setdefault("BENCH_PG_NAME", "schedulinator_bench_steady")
    set_up(smoke=smoke)
    from django.db import connection
    from django.utils import timezone

    from django_schedulinator.operations import partitions

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {partitions.table()}")
    if partitions.layout("default") is not None:  # left so by a run that was killed
        partitions.unpartition(using="default")
    partitions.partition(today=timezone.now().date(), days_behind=30, days_ahead=3, using="default")
    try:
        yield
    finally:
        partitions.unpartition(using="default")


def measure(
    rate: int,
    total: int,
    seconds: float,
    processes: int = 1,
    *,
    batch_size: int | None = None,
    warm_up: float = 10.0,
    redis_url: str | None = None,
    count_statements: bool = False,
    settle: float = 2.0,
    smoke: bool = False,
) -> dict[str, Any]:
    """One steady run (see the module's docstring); returns the figures as a dict. Sets
    Django up on the benchmark's database if nothing has (``benchmarks.run.set_up``; with
    ``smoke``, the smoke's database and key prefix), else uses the database it has."""
    from django.apps import apps

    if not apps.ready:
        if not smoke:
            os.environ.setdefault("BENCH_PG_NAME", "schedulinator_bench_steady")
        set_up(smoke=smoke)
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from django_schedulinator.index.due import DueIndex
    from django_schedulinator.index.reconcile import reconcile
    from django_schedulinator.models import Run

    if rate < 1 or total < rate or processes < 1:
        raise ValueError("need rate >= 1, total >= rate and processes >= 1")
    period_ms = round(total * 1000 / rate)  # every schedule's interval
    database = settings.DATABASES["default"]["NAME"]
    prefix = f"{os.environ.get('BENCH_KEY_PREFIX', 'schedulinator-bench')}-steady-{os.getpid()}"
    with redis_server(redis_url) as (url, redis_pid):
        import redis

        client = redis.Redis.from_url(url)
        index = DueIndex(client=client, prefix=prefix)
        created = ensure_schedules(total, period_ms)
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {Run._meta.db_table}")
            cursor.execute("VACUUM ANALYZE")
        # Armed an hour ahead and indexed with the app's rebuild; once the processes run, the
        # rows and their entries move by the same amount to start in a moment (a rebuild
        # takes longer than a start, and must not decide when the load begins).
        armed = time.monotonic()
        far = timezone.now().replace(microsecond=0) + timedelta(hours=1)
        arm_evenly(index, period_ms=period_ms, base=far)
        while not reconcile(index, settle=timedelta(0)).caught_up:
            pass  # the rows just created (reconcile reads them once, as it would)
        vacuumed = time.monotonic()
        vacuum_schedules()
        vacuum_seconds = time.monotonic() - vacuumed
        setup_seconds = time.monotonic() - armed
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
            "BENCH_PG_NAME": database,
            "BENCH_REDIS_URL": url,
            "BENCH_KEY_PREFIX": prefix,
        }
        counts_dir = Path(tempfile.mkdtemp(prefix="steady-counts-"))
        schedulers = [
            start_scheduler(i, env, batch_size, counts_dir if count_statements else None)
            for i in range(processes)
        ]
        try:
            wait_for_heartbeats(index, schedulers)
            # Time for the move and the vacuum after it (the move leaves a dead row per
            # schedule, which autovacuum would otherwise clean up during the window).
            lead = timedelta(seconds=math.ceil(2 + 3 * vacuum_seconds))  # whole ms: whole s
            base = timezone.now().replace(microsecond=0) + lead
            move(index, base - far)
            vacuum_schedules()
            t0 = base + timedelta(seconds=warm_up)
            sleep_until(t0)
            before = sample(schedulers, database, redis_pid, client)
            _signal_all(schedulers, signal.SIGUSR1 if count_statements else None)
            sleep_until(t0 + timedelta(seconds=seconds))
            t1 = timezone.now()
            after = sample(schedulers, database, redis_pid, client)
            _signal_all(schedulers, signal.SIGUSR1 if count_statements else None)
            time.sleep(settle)  # the last occurrences of the window handed off and recorded
        finally:
            stopped = stop(schedulers)
        late = lateness(t0, t1)
        runs = Run.objects.filter(scheduled_for__gte=t0, scheduled_for__lt=t1)
        doubled = runs.exclude(attempts=1).count()
        not_succeeded = runs.exclude(status=Run.Status.SUCCEEDED).count()
        expected = expected_occurrences(total, period_ms, base, t0, t1)
        fired = late.handed_off
        window = (t1 - t0).total_seconds()
        passes = after.redis_calls.get("zrange", 0) - before.redis_calls.get("zrange", 0)
        result: dict[str, Any] = {
            "rate": rate,
            "total": total,
            "processes": processes,
            "batch_size": batch_size,
            "interval_ms": period_ms,
            "seconds": round(window, 3),
            "warm_up": warm_up,
            "expected": expected,
            "fired": fired,
            "lost": expected - fired,
            "doubled": doubled,
            "not_succeeded": not_succeeded,
            "fired_per_second": round(fired / window, 1),
            "lateness_ms": {
                k: None if v is None else round(v, 1)
                for k, v in late.as_dict().items()
                if k in ("p50", "p99", "max")
            },
            "cpu_ms_per_occurrence": {
                part: round(1000 * (after.cpu[part] - before.cpu[part]) / max(fired, 1), 4)
                for part in ("schedulers", "postgresql", "redis")
            },
            "cpu_share_of_a_core": {
                part: round((after.cpu[part] - before.cpu[part]) / window, 3)
                for part in ("schedulers", "postgresql", "redis")
            },
            # The claim script reads the head of the due set once per claim (ZRANGE).
            "passes": passes,
            "occurrences_per_pass": round(fired / passes, 1) if passes else None,
            "cpu_ms_per_pass": {
                part: round(1000 * (after.cpu[part] - before.cpu[part]) / passes, 3)
                for part in ("schedulers", "postgresql", "redis")
                if passes
            },
            "transactions_per_occurrence": round(
                (after.transactions - before.transactions) / max(fired, 1), 4
            ),
            "redis_commands_per_occurrence": {
                name: round((after.redis_calls[name] - before.redis_calls.get(name, 0)) / fired, 4)
                for name in sorted(after.redis_calls)
                if fired and after.redis_calls[name] - before.redis_calls.get(name, 0)
            },
            "postgresql_backends_gone": sorted(before.backends - after.backends),
            "redis_cpu_is_shared": redis_url is not None,
            "setup": {"schedules_created": created, "arm_and_rebuild_s": round(setup_seconds, 1)},
            "exit_codes": stopped,
            "taken_at": timezone.now().isoformat(timespec="seconds"),
        }
        if count_statements:
            result["counted"] = counted(counts_dir, fired)
        shutil.rmtree(counts_dir, ignore_errors=True)
        index.drop()
        return result


HEADER = (
    "| rate/s | schedules | processes | fired / expected | doubled | lateness p50 / p99 / max "
    "(ms) | CPU ms per occurrence: schedulers / PostgreSQL / Redis | occurrences per pass | "
    "CPU ms per pass: schedulers / PostgreSQL |\n"
    "| ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |"
)


def markdown_row(r: dict[str, Any]) -> str:
    late, cpu, per_pass = r["lateness_ms"], r["cpu_ms_per_occurrence"], r["cpu_ms_per_pass"]
    return (
        f"| {r['rate']:,} | {r['total']:,} | {r['processes']} | {r['fired']:,} / "
        f"{r['expected']:,} | {r['doubled']} | {late['p50']} / {late['p99']} / {late['max']} | "
        f"{cpu['schedulers']:.3f} / {cpu['postgresql']:.3f} / {cpu['redis']:.3f} | "
        f"{r['occurrences_per_pass']} | {per_pass.get('schedulers', 0):.2f} / "
        f"{per_pass.get('postgresql', 0):.2f} |"
    )


# -- the claim's write alone ----------------------------------------------------------------


def measure_write(batch: int, rounds: int = 200, pairs: int = 3) -> dict[str, Any]:
    """The claim's write alone, in this process: the conditional advance of ``batch``
    schedules and their runs, as one statement (``services.advance`` with runs, PostgreSQL)
    and as the transaction of two it replaced (the advance, then ``ledger.record_claimed``),
    ``rounds`` each, alternated ``pairs`` times. CPU per write of this process and of its
    database backend, and wall time (Django set up, the schedules created)."""
    from django.db import connection, transaction
    from django.utils import timezone

    from django_schedulinator import services
    from django_schedulinator.models import Run, Schedule
    from django_schedulinator.models.batches import Advance, ClaimedRuns, NewRun
    from django_schedulinator.services import ledger

    rows = list(Schedule.objects.order_by("pk").values_list("pk", "revision")[:batch])
    revision = dict(rows)
    template = Schedule.objects.get(pk=rows[0][0])
    start = timezone.now().replace(microsecond=0) + timedelta(days=1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    step = [0]

    def one(combined: bool) -> None:
        step[0] += 1
        at = start + timedelta(milliseconds=step[0])
        advances = [Advance(sid, revision[sid], at, at, 1) for sid in revision]
        runs = {sid: [NewRun.of(template, at)._replace(schedule_id=sid)] for sid in revision}
        claim = ClaimedRuns(runs, at, "bench-write", "token", at + timedelta(seconds=30))
        if combined:
            advanced = services.advance(advances, at, using="default", runs=claim)
        else:
            with transaction.atomic():
                advanced = services.advance(advances, at, using="default")
                ledger.record_claimed(
                    [r for sid in advanced.moved for r in runs[sid]],
                    claimed_at=at,
                    worker_id="bench-write",
                    claim_token="token",
                    lease_expires_at=at + timedelta(seconds=30),
                    using="default",
                )
        assert len(advanced.moved) == len(revision), advanced
        revision.update(advanced.moved)

    figures: dict[str, list[dict[str, float]]] = {"one statement": [], "two in a transaction": []}
    for _ in range(pairs):
        for name, combined in (("two in a transaction", False), ("one statement", True)):
            cpu, db, wall = time.process_time(), cpu_seconds(backend), time.perf_counter()
            for _ in range(rounds):
                one(combined)
            figures[name].append(
                {
                    "client_ms": 1000 * (time.process_time() - cpu) / rounds,
                    "backend_ms": 1000 * (cpu_seconds(backend) - db) / rounds,
                    "wall_ms": 1000 * (time.perf_counter() - wall) / rounds,
                }
            )
    Run.objects.filter(worker_id="bench-write").delete()
    return {
        "batch": batch,
        "rounds": rounds,
        "per_write": {
            name: {k: round(statistics.median(f[k] for f in runs), 3) for k in runs[0]}
            for name, runs in figures.items()
        },
    }


# -- the schedules ------------------------------------------------------------------------


def ensure_schedules(total: int, period_ms: int) -> int:
    """``total`` interval schedules of ``period_ms`` (a no-op task, catch-up "all": a
    scheduler behind fires everything late rather than skipping), kept from an earlier run
    when there are as many; how many were created. One row through the ORM (its defaults),
    the others copied from it in one statement."""
    from django.db import connection
    from django.utils import timezone

    from django_schedulinator.models import Schedule

    interval = timedelta(milliseconds=period_ms)
    qn = connection.ops.quote_name
    table = qn(Schedule._meta.db_table)
    # Changed a day ago, as far as reconcile knows: its cursors, which start RECONCILE_LOOKBACK
    # back on a new index, must not read every row again while the load runs.
    long_ago = f"UPDATE {table} SET {qn('updated_at')} = now() - interval '1 day'"
    rows = Schedule.objects.all()
    if rows.count() == total and not rows.exclude(task="bench.noop").exists():
        if rows.exclude(interval=interval).exists():
            rows.update(interval=interval)
            with connection.cursor() as cursor:
                cursor.execute(long_ago)
        return 0
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Schedule._meta.db_table} RESTART IDENTITY CASCADE")
    now = timezone.now()
    [first] = Schedule.objects.bulk_create(
        [
            Schedule(
                name="steady-0",
                task="bench.noop",
                kind=Schedule.Kind.INTERVAL,
                interval=interval,
                catch_up="all",
                timezone="UTC",
                next_run_at=now,
                anchor_at=now,
            )
        ]
    )
    columns = [f.column for f in Schedule._meta.concrete_fields if f.column != "id"]
    chosen = ["'steady-' || g" if c == "name" else qn(c) for c in columns]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(qn(c) for c in columns)}) "
            f"SELECT {', '.join(chosen)} FROM {table}, generate_series(1, %s) AS g "
            f"WHERE {qn('id')} = %s",
            [total - 1, first.pk],
        )
        cursor.execute(long_ago)
    return total


def vacuum_schedules() -> None:
    from django.db import connection

    from django_schedulinator.models import Schedule

    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(Schedule._meta.db_table)}")


def move(index: Any, by: timedelta) -> None:
    """Every schedule's next run, and its index entry, ``by`` earlier or later: the rows in one
    statement (their revisions stay: the index holds what they hold), then the entries."""
    from django.db import connection

    from django_schedulinator.models import Schedule

    qn = connection.ops.quote_name
    col = {f.name: qn(f.column) for f in Schedule._meta.concrete_fields}
    moved = ", ".join(f"{col[n]} = {col[n]} + %s" for n in ("next_run_at", "anchor_at", "due_at"))
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {qn(Schedule._meta.db_table)} SET {moved}", [by] * 3)
    ms = round(by.total_seconds() * 1000)
    client = index.client
    entries = client.zrange(index.due_key, 0, -1, withscores=True)
    for start in range(0, len(entries), 10_000):
        chunk = entries[start : start + 10_000]
        client.zadd(index.due_key, {member: score + ms for member, score in chunk}, xx=True)


def wait_for_heartbeats(index: Any, schedulers: list[subprocess.Popen[bytes]]) -> None:
    from django_schedulinator.operations.heartbeat import alive

    deadline = time.monotonic() + 60
    while len(alive(index)) < len(schedulers):
        if time.monotonic() > deadline or any(p.poll() is not None for p in schedulers):
            raise RuntimeError("the schedulers did not start")
        time.sleep(0.1)


def expected_occurrences(
    total: int, period_ms: int, base: datetime, t0: datetime, t1: datetime
) -> int:
    """How many occurrences of the armed schedules fall in [t0, t1): the i-th fires at
    ``base + i * period_ms // total`` ms and every ``period_ms`` after."""
    # Nominal times are whole milliseconds: those in [t0, t1) are ceil(t0) ... ceil(t1) - 1.
    lo = math.ceil((t0 - base) / timedelta(milliseconds=1))
    hi = math.ceil((t1 - base) / timedelta(milliseconds=1))
    count = 0
    for i in range(total):
        phase = i * period_ms // total
        # k >= 0 with lo <= phase + k * period_ms < hi
        first = max(0, -(-(lo - phase) // period_ms))
        last = (hi - 1 - phase) // period_ms
        count += max(0, last - first + 1)
    return count


# -- the processes --------------------------------------------------------------------------


def start_scheduler(
    i: int, env: dict[str, str], batch_size: int | None, counts_dir: Path | None
) -> subprocess.Popen[bytes]:
    command = ["run_scheduler", "--worker-id", f"{WORKER_PREFIX}{i}"]
    if batch_size:
        command += ["--batch-size", str(batch_size)]
    if counts_dir is None:
        argv = [sys.executable, "-m", "django", *command]
    else:
        argv = [sys.executable, "-m", "benchmarks.steady", "--counting", str(counts_dir / f"{i}"),
                *command]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)


def stop(schedulers: list[subprocess.Popen[bytes]]) -> list[int | None]:
    for p in schedulers:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for p in schedulers:
        try:
            codes.append(p.wait(timeout=60))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes


def _signal_all(schedulers: list[subprocess.Popen[bytes]], signum: int | None) -> None:
    if signum is not None:
        for p in schedulers:
            p.send_signal(signum)


def sleep_until(moment: datetime) -> None:
    from django.utils import timezone

    time.sleep(max(0.0, (moment - timezone.now()).total_seconds()))


@contextmanager
def redis_server(url: str | None) -> Iterator[tuple[str, int | None]]:
    """The Redis the schedulers use, and its process id (None when it is not on this
    host): ``url``, or a server of this run's own, stopped at the end."""
    import redis

    if url is not None:
        info = redis.Redis.from_url(url).info("server")
        local = url.startswith(("redis://127.0.0.1", "redis://localhost"))
        yield url, int(info["process_id"]) if local else None
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed; or give --redis-url")
    with socket.socket() as sock:  # a free port
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis.from_url(url).ping():
                    break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- CPU and counts -------------------------------------------------------------------------


class Sample:
    def __init__(self, cpu: dict[str, float], backends: set[int], transactions: int,
                 redis_calls: dict[str, int]) -> None:  # fmt: skip
        self.cpu = cpu
        self.backends = backends
        self.transactions = transactions
        self.redis_calls = redis_calls


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time (all its threads), 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def sample(
    schedulers: list[subprocess.Popen[bytes]], database: str, redis_pid: int | None, client: Any
) -> Sample:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        )
        backends = {pid for (pid,) in cursor.fetchall()}
        cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [database])
        (transactions,) = cursor.fetchone()
    stats = client.info("commandstats")
    return Sample(
        cpu={
            "schedulers": sum(cpu_seconds(p.pid) for p in schedulers),
            # A backend that ends within the window takes its CPU with it: the benchmark says
            # which (the schedulers keep their connections open).
            "postgresql": sum(cpu_seconds(pid) for pid in backends),
            "redis": cpu_seconds(redis_pid) if redis_pid else 0.0,
        },
        backends=backends,
        transactions=int(transactions),
        redis_calls={k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()},
    )


# -- --count-statements: a scheduler that counts its passes and statements ----------------


def counted(directory: Path, fired: int) -> dict[str, Any]:
    """The counting schedulers' passes and statements in the window, summed, per pass and
    per occurrence."""
    total: Counter[str] = Counter()
    for first in directory.glob("*.0.json"):
        start = json.loads(first.read_text())
        end = json.loads(first.with_name(first.name.replace(".0.", ".1.")).read_text())
        total.update({k: v - start.get(k, 0) for k, v in end.items()})
    passes = total.pop("passes", 0)
    claimed = total.pop("claimed", 0)
    return {
        "passes": passes,
        "claimed_per_pass": round(claimed / passes, 1) if passes else None,
        "statements_per_pass": {k: round(v / passes, 3) for k, v in total.most_common() if passes},
        "statements_per_occurrence": round(sum(total.values()) / fired, 4) if fired else None,
    }


def statement_kind(sql: str) -> str:
    """A short name for a statement: its first words and the table it names first."""
    words = re.sub(r"\s+", " ", sql.strip())
    table = re.search(r'"django_schedulinator_(\w+)"', words)
    head = words.split(" ", 1)[0].upper()
    if head == "WITH":  # named by what it writes (the CTEs' and the final statement's verbs)
        verbs = [v for v in ("UPDATE", "INSERT", "DELETE") if re.search(rf"[(\)] ?{v} ", words)]
        head = "WITH.." + ("+".join(verbs) or "SELECT")
    kind = f"{head} {table.group(1) if table else ''}".strip()
    if words.startswith("SELECT set_config"):
        rest = words.split(";", 1)[1] if ";" in words else ""
        # The lock wait's setting, alone or sent with the statement it bounds.
        return f"set_config; {statement_kind(rest)}" if rest.strip() else "SELECT set_config"
    return kind


def run_counting(out: str, argv: list[str]) -> None:
    """``manage.py <argv>`` with every SQL statement counted by kind, and the claims; the
    counts written to ``out.N.json`` at each SIGUSR1 (N = 0, 1, ...)."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.db.backends.signals import connection_created

    from django_schedulinator.scheduler.claiming import Claimer

    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        with lock:
            counts[statement_kind(sql)] += 1
        return execute(sql, params, many, context)

    def wrap(sender: Any, connection: Any, **kwargs: Any) -> None:
        connection.execute_wrappers.append(count)

    connection_created.connect(wrap, weak=False)
    claim = Claimer.claim

    def counting_claim(self: Claimer, limit: int) -> Any:
        batch, token = claim(self, limit)
        with lock:
            counts["passes"] += 1
            counts["claimed"] += len(batch.entries)
        return batch, token

    Claimer.claim = counting_claim  # type: ignore[method-assign]
    snapshots = 0

    def dump(signum: int, frame: Any) -> None:
        nonlocal snapshots
        with lock:
            Path(f"{out}.{snapshots}.json").write_text(json.dumps(counts))
        snapshots += 1

    signal.signal(signal.SIGUSR1, dump)
    call_command(*argv)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--counting":
        run_counting(sys.argv[2], sys.argv[3:])
    else:
        main()
