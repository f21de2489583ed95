"""Fire-rate and tick benchmark on PostgreSQL and a real Redis.

    python -m benchmarks.run --total 100000 --due 10000 --batch-size 500
    python -m benchmarks.run --smoke   # a few seconds: the whole path on tiny sizes (CI)
    python -m benchmarks.run --metrics # the same with run_scheduler --metrics-port's metrics on
    python -m benchmarks.run --calendar-share 1  # every schedule names a holidays calendar
    BENCH_INDEX_SHARDS=3 python -m benchmarks.run  # a sharded index (INDEX_SHARDS)

Creates `--total` schedules (`--due` of them due now), builds the index, then measures:
- fire: one in-process Worker (inline dispatcher, a no-op task) firing every due occurrence,
  with the row re-check, the conditional advance and the ledger: occurrences per second;
- tick: the cost of an idle pass (claim script + sleep computation) with nothing due.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")


def bench_schedule(i: int, next_run_at: datetime, *, prefix: str = "bench", **fields: Any) -> Any:
    """The benchmarks' schedule number ``i``, not saved: every other one a cron every 5
    minutes, the others 5-minute intervals, all of the no-op task in UTC."""
    from django_schedulinator.models import Schedule

    return Schedule(
        name=f"{prefix}-{i}",
        task="bench.noop",
        kind="cron" if i % 2 else "interval",
        cron="*/5 * * * *",
        interval=timedelta(minutes=5),
        timezone="UTC",
        next_run_at=next_run_at,
        **fields,
    )


def ensure_database() -> None:
    name = os.environ.get("BENCH_PG_NAME", "schedulinator_bench")
    exists = subprocess.run(
        [
            "psql",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-tAc",
            f"SELECT 1 FROM pg_database WHERE datname = '{name}'",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not exists:
        subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", name], check=True)


def add_smoke_option(parser: argparse.ArgumentParser) -> None:
    """``--smoke``, which every benchmark has: .ci/run runs each with it, so none rots."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, a database and key prefix of its own: checks that it still runs",
    )


def use_smoke_services() -> None:
    """A smoke run's own database and Redis key prefix: it never touches a real run's data."""
    os.environ.setdefault("BENCH_PG_NAME", "schedulinator_bench_smoke")
    os.environ.setdefault("BENCH_KEY_PREFIX", f"schedulinator-bench-smoke-{os.getpid()}")


def set_up(*, smoke: bool) -> None:
    """Django set up on the benchmark's database, created and migrated if need be (a smoke
    run's own database and key prefix when ``smoke``); its rows are left as they are."""
    if smoke:
        use_smoke_services()
    ensure_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start(*, smoke: bool) -> Any:
    """Django set up on the benchmark's database (migrated, its schedules and runs gone) and
    its due index, empty; a smoke run's own database and key prefix when ``smoke``."""
    set_up(smoke=smoke)
    from django.db import connection

    from django_schedulinator.index.due import get_index
    from django_schedulinator.models import Run, Schedule

    with connection.cursor() as cursor:
        cursor.execute(
            f"TRUNCATE {Run._meta.db_table}, {Schedule._meta.db_table} RESTART IDENTITY CASCADE"
        )
    index = get_index()  # every shard of it (BENCH_INDEX_SHARDS)
    index.drop()
    return index


def arm_evenly(index: Any, *, period_ms: int, base: datetime) -> None:
    """A steady load: the schedules' next runs spread evenly over ``period_ms`` from
    ``base`` (the i-th of n at ``base + i * period_ms // n`` ms, whole milliseconds), in one
    statement, newer revisions than the index holds; then the index rebuilt. Interval
    schedules with ``period_ms`` as their interval then fire n per period, evenly, for as
    long as they run (a burst at each period would be a burst benchmark)."""
    from django.db import connection

    from django_schedulinator.index.rebuild import rebuild_index
    from django_schedulinator.models import Schedule

    qn = connection.ops.quote_name
    table = qn(Schedule._meta.db_table)
    col = {f.name: qn(f.column) for f in Schedule._meta.concrete_fields}
    at = "%s + (r.i * %s / r.n) * interval '1 millisecond'"
    with connection.cursor() as cursor:
        # updated_at stays: reconcile has nothing to read again (the rebuild writes them).
        cursor.execute(
            f"WITH r AS (SELECT {col['id']} AS id, row_number() OVER (ORDER BY {col['id']}) - 1 "
            f"AS i, count(*) OVER () AS n FROM {table}) "
            f"UPDATE {table} SET {col['next_run_at']} = {at}, {col['anchor_at']} = {at}, "
            f"{col['due_at']} = {at}, {col['revision']} = {table}.{col['revision']} + 1 "
            f"FROM r WHERE {table}.{col['id']} = r.id",
            [base, period_ms] * 3,
        )
    rebuild_index(index)


@dataclass(frozen=True, slots=True)
class Lateness:
    """The lateness of what was due in a window (nominal time to hand-off, ms)."""

    due: int  # runs in the ledger with a nominal time in the window
    handed_off: int
    p50: float | None
    p99: float | None
    max: float | None
    samples: list[float] = field(repr=False, default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("due", "handed_off", "p50", "p99", "max")}

    def summary(self) -> str:
        if not self.handed_off:
            return "nothing handed off"
        return f"lateness p50 {self.p50:.0f} ms, p99 {self.p99:.0f} ms, max {self.max:.0f} ms"


def lateness(since: datetime, until: datetime, *, exclude_worker: str = "") -> Lateness:
    """The lateness of the runs whose nominal time lies in [since, until): ``dispatched_at -
    scheduled_for``, the run handed to its dispatcher (``exclude_worker``: runs written by
    the benchmark itself)."""
    from django_schedulinator.models import Run

    runs = Run.objects.filter(scheduled_for__gte=since, scheduled_for__lt=until)
    if exclude_worker:
        runs = runs.exclude(worker_id=exclude_worker)
    rows = list(runs.values_list("scheduled_for", "dispatched_at"))
    late = sorted((d - s).total_seconds() * 1000 for s, d in rows if d is not None)
    if not late:
        return Lateness(len(rows), 0, None, None, None)

    def pct(p: float) -> float:
        return late[min(len(late) - 1, int(len(late) * p))]

    return Lateness(len(rows), len(late), pct(0.5), pct(0.99), late[-1], late)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total", type=int, default=100_000)
    parser.add_argument("--due", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--workers", type=int, default=8, help="inline dispatcher threads")
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument(
        "--grace",
        type=float,
        default=0,
        help="give every schedule a grace of this many seconds (missed-run alerts: its runs "
        "carry an alert time, cleared by their success); 0: none",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="observe the hot path into Prometheus metrics, as --metrics-port does",
    )
    parser.add_argument(
        "--calendar-share",
        type=float,
        default=0,
        help="the share of schedules (0 to 1) that name a calendar of public holidays (twelve "
        "years of England's, none of them today: every due schedule still fires)",
    )
    add_smoke_option(parser)
    options = parser.parse_args()
    if options.smoke:
        # The figures mean nothing at this size; what counts is that every step still runs,
        # on the same services, without touching a real benchmark's data.
        options.total, options.due, options.batch_size, options.ticks = 2000, 500, 100, 20
        options.calendar_share = 0.5  # both paths, with and without a calendar
    index = start(smoke=options.smoke)
    try:
        measure(options, index)
    finally:
        index.drop()


def measure(options: argparse.Namespace, index: Any) -> None:
    from django.utils import timezone

    from django_schedulinator.index.rebuild import rebuild_index
    from django_schedulinator.index.reconcile import reconcile
    from django_schedulinator.models import Run, Schedule

    now = timezone.now().replace(microsecond=0)
    grace = timedelta(seconds=options.grace) if options.grace else None
    named = holidays_calendar(now) if options.calendar_share else None
    every = round(1 / options.calendar_share) if options.calendar_share else 0
    started = time.perf_counter()
    chunk = 20_000
    for offset in range(0, options.total, chunk):
        rows = []
        for i in range(offset, min(offset + chunk, options.total)):
            due = i < options.due
            # Spread the not-due rows over the next days, as real schedules are.
            at = now - timedelta(seconds=5) if due else now + timedelta(seconds=600 + i % 200_000)
            fields: dict[str, Any] = {"grace": grace} if grace else {}
            if named and i % every == 0:
                fields["calendars"] = [named]
            rows.append(bench_schedule(i, at, **fields))
        Schedule.objects.bulk_create(rows, batch_size=5000)
    created = time.perf_counter() - started
    started = time.perf_counter()
    rebuild_index(index)
    rebuilt = time.perf_counter() - started
    print(
        f"setup: {options.total} rows in {created:.1f}s, rebuild {rebuilt:.1f}s "
        f"({options.total / rebuilt:,.0f} rows/s)"
    )
    # The steady state: reconcile has read the rows just created (as it would within seconds
    # of their creation). Its catch-up after a bulk write is benchmarks/reconcile.py's.
    while not reconcile(index, settle=timedelta(0)).caught_up:
        pass

    result = fire(batch_size=options.batch_size, workers=options.workers, metrics=options.metrics)
    fired = result["fired"]
    assert fired == options.due, result["counters"]
    assert Run.objects.filter(status="succeeded").count() == options.due
    if grace:
        assert not Run.objects.exclude(alert_at=None).exists()  # each success cleared its own
    print(
        f"fire: {fired} occurrences in {result['seconds']:.2f}s = {result['rate']:,.0f}/s "
        f"(batch {options.batch_size}, {options.total} schedules"
        f"{f', grace {grace}' if grace else ''}{', metrics on' if options.metrics else ''}"
        f"{f', 1 in {every} naming a calendar' if named else ''})"
    )

    idle = measure_idle(options.ticks, batch_size=options.batch_size, metrics=options.metrics)
    print(
        f"tick: idle pass {idle} over {options.ticks} passes with {options.total} schedules indexed"
    )


def holidays_calendar(now: datetime) -> str:
    """A calendar of twelve years of England's public holidays, through the services, minus
    today and tomorrow (so that every due schedule fires); its name."""
    from django_schedulinator import services
    from django_schedulinator.importers.days import default_years, public_holidays
    from django_schedulinator.models import Calendar

    Calendar.objects.filter(name="bench-holidays").delete()
    days, _weekend = public_holidays("GB", "ENG", default_years(now.date()))
    near = {now.date(), now.date() + timedelta(days=1)}
    calendar = Calendar(name="bench-holidays", timezone="UTC")
    services.save_calendar(calendar, days=[(d, n) for d, n in days if d not in near])
    return calendar.name


def fire(*, batch_size: int, workers: int, metrics: bool = False) -> dict[str, Any]:
    """One in-process Worker (inline dispatcher, a no-op task) fires every due occurrence
    once (``once``): the whole path, claim to ledger. benchmarks.suite's burst calls it."""
    from django_schedulinator.dispatch.inline import InlineDispatcher
    from django_schedulinator.scheduler.worker import Worker

    worker = Worker(
        batch_size=batch_size,
        once=True,
        worker_id="bench",
        dispatcher=InlineDispatcher(max_workers=workers),
    )
    if metrics:
        from django_schedulinator.operations.metrics import Metrics

        worker.attach_metrics(Metrics(worker))
    started = time.perf_counter()
    worker.run()
    elapsed = time.perf_counter() - started
    fired = worker.counters.fired
    return {
        "fired": fired,
        "seconds": elapsed,
        "rate": fired / elapsed if elapsed else 0.0,
        "counters": worker.counters.as_dict(),
    }


class IdlePass(NamedTuple):
    """Milliseconds per idle pass: wall time, and this thread's CPU time (which the other
    work on a shared machine barely changes)."""

    median: float
    p99: float
    cpu_median: float
    cpu_p99: float

    def __str__(self) -> str:
        return (
            f"median {self.median:.3f} ms, p99 {self.p99:.3f} ms "
            f"(CPU: median {self.cpu_median:.3f} ms, p99 {self.cpu_p99:.3f} ms)"
        )


def measure_idle(ticks: int, *, batch_size: int = 500, metrics: bool = False) -> IdlePass:
    """The idle pass: ``Worker.run_pass`` with nothing due, ``ticks`` times."""
    walls, cpus = idle_samples(batch_size=batch_size, ticks=ticks, metrics=metrics)
    return IdlePass(*_median_p99(walls), *_median_p99(cpus))


def idle_passes(*, batch_size: int, ticks: int, metrics: bool = False) -> list[float]:
    """Milliseconds of each of ``ticks`` idle passes (wall time); benchmarks.suite's."""
    return idle_samples(batch_size=batch_size, ticks=ticks, metrics=metrics)[0]


def idle_samples(
    *, batch_size: int, ticks: int, metrics: bool = False
) -> tuple[list[float], list[float]]:
    """Wall and this thread's CPU milliseconds of each of ``ticks`` passes of a Worker with
    nothing due (the claim script and the sleep's computation)."""
    from django_schedulinator.scheduler.worker import Worker

    idle = Worker(batch_size=batch_size, worker_id="bench-idle")
    if metrics:
        from django_schedulinator.operations.metrics import Metrics

        idle.attach_metrics(Metrics(idle))
    walls, cpus = [], []
    with idle.stages():  # running beside the passes, as in run_scheduler
        for _ in range(ticks):
            wall, cpu = time.perf_counter(), time.thread_time()
            idle.run_pass()
            cpus.append((time.thread_time() - cpu) * 1000)
            walls.append((time.perf_counter() - wall) * 1000)
    idle.close()
    return walls, cpus


def _median_p99(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.99) - 1)]


if __name__ == "__main__":
    main()
