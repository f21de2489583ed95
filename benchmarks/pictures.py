"""What the admin's pictures cost on a large installation.

    python -m benchmarks.pictures --total 100000 --runs 200000
    python -m benchmarks.pictures --smoke   # a few seconds on tiny sizes (CI)

Creates ``--total`` schedules shaped like a large installation's: crons in ten zones, four
in ten of them common expressions (hourly, every 5 minutes, nightly...) and the others
daily at a time of their own (mostly on the hour: the herds), intervals of a minute to a day
at every phase, one-offs over two days, some with jitter, an end or a run limit, some
paused; and ``--runs`` runs in the ledger. Then it times, each the median of five:

- the forecast (the grouping query, the expansion of each timing, the counts) and its page
  fragment (the SVG and the busiest minutes);
- the lateness histogram (one query of the last 10,000 runs) and its fragment;
- one schedule's strip of its last 60 runs and its fragment.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from benchmarks.run import add_smoke_option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
os.environ.setdefault("BENCH_ADMIN", "1")  # the admin and its URLs (benchmarks/settings.py)

ZONES = [
    "UTC", "Europe/Berlin", "Europe/London", "America/New_York", "America/Los_Angeles",
    "Asia/Tokyo", "Asia/Kolkata", "Australia/Sydney", "America/Sao_Paulo", "Africa/Lagos",
]  # fmt: skip
INTERVALS = [timedelta(minutes=m) for m in (1, 5, 15, 30, 60, 360, 1440)]


def __getattr__(name: str) -> Any:
    """This module is the URL configuration too (ROOT_URLCONF with BENCH_ADMIN): the
    pictures link to the admin's pages. Built on first use, once Django is set up."""
    if name == "urlpatterns":
        from django.contrib import admin
        from django.urls import path

        return [path("admin/", admin.site.urls)]
    raise AttributeError(name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200_000)
    add_smoke_option(parser)
    options = parser.parse_args()
    if options.smoke:
        options.total, options.runs = 2000, 2000

    from benchmarks.run import start

    index = start(smoke=options.smoke)
    try:
        measure(options)
    finally:
        index.drop()


COMMON = [
    "0 * * * *", "*/5 * * * *", "*/15 * * * *", "0 0 * * *", "30 2 * * *", "0 9 * * 1-5",
    "0 */6 * * *", "*/10 * * * *", "0 0 * * 0", "0 0 1 * *",
]  # fmt: skip


def cron_of(rng: random.Random) -> str:
    """A common expression (four in ten), else a daily one at a time of its own, as a
    product that lets each customer choose when their report runs has (on the hour or the
    half hour more often than not)."""
    if rng.random() < 0.4:
        return rng.choice(COMMON)
    minute = rng.choice((0, 0, 0, 30, rng.randrange(60)))
    return f"{minute} {rng.randrange(24)} * * *"


def measure(options: argparse.Namespace) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from django_schedulinator import timing
    from django_schedulinator.admin.pictures import drawing as pictures
    from django_schedulinator.admin.pictures import forecast, lateness, marks
    from django_schedulinator.models import Run, Schedule

    rng = random.Random(22)
    now = timezone.now().replace(microsecond=0)
    firsts: dict[tuple[str, str], Any] = {}
    started = time.perf_counter()
    chunk = 20_000
    for offset in range(0, options.total, chunk):
        rows = []
        for i in range(offset, min(offset + chunk, options.total)):
            fields: dict[str, Any] = {"name": f"bench-{i}", "task": "bench.noop"}
            roll = rng.random()
            if roll < 0.6:
                cron, zone = cron_of(rng), rng.choice(ZONES)
                if (cron, zone) not in firsts:
                    spec = timing.Timing(kind="cron", cron=cron, timezone=zone)
                    firsts[cron, zone] = timing.first_run_at(spec, now)
                fields.update(kind="cron", cron=cron, timezone=zone, next_run_at=firsts[cron, zone])
            elif roll < 0.95:
                interval = rng.choice(INTERVALS)
                phase = timedelta(seconds=rng.randrange(int(interval.total_seconds())))
                fields.update(kind="interval", interval=interval, next_run_at=now + phase)
            else:
                at = now + timedelta(seconds=rng.randrange(2 * 86_400))
                fields.update(kind="once", run_at=at, next_run_at=at)
            fields["due_at"] = fields["next_run_at"]
            if rng.random() < 0.05:
                fields["jitter"] = timedelta(minutes=rng.choice((1, 5, 10)))
            if rng.random() < 0.02:
                fields["end_at"] = now + timedelta(hours=rng.randrange(1, 48))
            if rng.random() < 0.02:
                fields["max_runs"] = rng.randrange(1, 30)
            if rng.random() < 0.05:
                fields["enabled"] = False
            rows.append(Schedule(**fields))
        Schedule.objects.bulk_create(rows, batch_size=5000)
    ids = list(Schedule.objects.values_list("pk", flat=True)[:1000])
    strip = ids[0]
    for offset in range(0, options.runs, chunk):
        runs = []
        for i in range(offset, min(offset + chunk, options.runs)):
            scheduled = now - timedelta(seconds=options.runs - i)
            handed = scheduled + timedelta(milliseconds=rng.lognormvariate(3, 1.5))
            runs.append(
                Run(
                    # A tenth of them the strip's schedule's: its runs are many.
                    schedule_id=strip if i % 10 == 0 else rng.choice(ids),
                    scheduled_for=scheduled,
                    status=rng.choice(("succeeded",) * 8 + ("failed", "dispatched")),
                    task="bench.noop",
                    claimed_at=handed,
                    dispatched_at=handed,
                    worker_id="bench",
                )
            )
        Run.objects.bulk_create(runs, batch_size=5000, ignore_conflicts=True)
    print(
        f"setup: {options.total:,} schedules, {options.runs:,} runs in "
        f"{time.perf_counter() - started:.1f}s"
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    def timed(name: str, work: Callable[[], Any], detail: Callable[[Any], str]) -> None:
        # Wall time, and this process's CPU time (what a busy machine inflates least; the
        # database's own time is in its process).
        samples, cpu = [], []
        result = None
        for _ in range(5):
            with CaptureQueriesContext(connection) as queries:
                t, c = time.perf_counter(), time.process_time()
                result = work()
                samples.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
        print(
            f"{name}: median {statistics.median(samples):.0f} ms (min {min(samples):.0f}, "
            f"max {max(samples):.0f}; CPU median {statistics.median(cpu):.0f} ms), "
            f"{len(queries)} queries; {detail(result)}"
        )

    timed(
        "forecast",
        forecast.forecast,
        lambda r: (
            f"{r.schedules:,} schedules in {r.groups:,} groups, "
            f"{r.uncounted:,} not counted, peak {r.peak[1]:,.0f} a minute, "
            f"{r.dense_timings} timings estimated in part"
        ),
    )
    timed(
        "forecast with its page fragment",
        lambda: pictures.forecast_html(forecast.forecast()),
        lambda html: f"{len(html) / 1024:.0f} KiB of HTML",
    )
    timed(
        "lateness histogram",
        lateness.histogram,
        lambda r: f"{r.runs:,} runs counted, p50 {lateness.ms_text(r.p50)}",
    )
    timed(
        "lateness with its page fragment",
        lambda: pictures.lateness_html(lateness.histogram()),
        lambda html: f"{len(html) / 1024:.0f} KiB of HTML",
    )
    schedule = Schedule.objects.get(pk=strip)
    timed(
        "strip of one schedule's last runs, with its fragment",
        lambda: marks.run_strip_html(schedule, lateness.recent_runs(strip, marks.STRIP_RUNS)),
        lambda html: f"{len(html) / 1024:.0f} KiB of HTML",
    )


if __name__ == "__main__":
    main()
