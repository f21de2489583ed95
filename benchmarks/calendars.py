"""What calendars of excluded days cost: walking a closure, and re-planning after a change.

    python -m benchmarks.calendars --schedules 5000
    python -m benchmarks.calendars --smoke   # a few seconds on tiny sizes (CI)

Two measurements, each the median of three:

- **walks** (no database): for a closure of 10, 40 and 730 days in a row, on next business
  day, an every-minute cron with jitter (the schedule whose pass once walked each of its
  markers for hours), the due plan of its last occurrence before the closure and the walk
  of its next 1,500 moments (what the admin's forecast expands of one timing); each with the
  calendar in the schedule's own zone (a closed day then moves by whole days) and in another
  (the walk then looks at each day's moments). Also counted: the wall times examined.
- **re-plan** (PostgreSQL): ``--schedules`` schedules name one calendar, half of them on
  next business day; closing today and tomorrow, then opening them again, each one
  ``services.save_calendar``: the re-plan of every schedule that names it, in its transaction.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from typing import Any

from benchmarks.run import add_smoke_option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

CLOSURES = (10, 40, 730)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=5000)
    add_smoke_option(parser)
    options = parser.parse_args()
    closures = CLOSURES
    if options.smoke:
        options.schedules, closures = 50, (10,)
    from benchmarks.run import start

    index = start(smoke=options.smoke)
    try:
        walks(closures)
        replan(options.schedules)
    finally:
        index.drop()


def median_seconds(work: Callable[[], Any]) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def walks(closures: tuple[int, ...]) -> None:
    from django_schedulinator import timing

    start = date(2027, 1, 1)
    nominal = datetime(2026, 12, 31, 23, 58, tzinfo=UTC)
    for days in closures:
        for cal_zone in ("UTC", "Europe/London"):
            calendar = timing.DayCalendar.of(
                ((cal_zone, start + timedelta(days=n), "closed") for n in range(days)),
                move=True,
                weekends=[(cal_zone, (6, 7))],
            )
            spec = timing.Timing(kind="cron", cron="* * * * *", timezone="UTC",
                                 jitter=timedelta(seconds=30), calendar=calendar)  # fmt: skip
            walls = count_walls()

            def plan(spec: timing.Timing = spec) -> None:
                timing.walks.cron_next.cache_clear()
                timing.plan_due(spec, timing.CatchUp(), schedule_id=7, nominal=nominal,
                                due_at=None, now=nominal + timedelta(minutes=1))  # fmt: skip

            def walk(spec: timing.Timing = spec) -> None:
                timing.walks.cron_next.cache_clear()
                list(islice(timing.occurrences(spec, nominal), 1500))

            planned = median_seconds(plan)
            examined = walls()
            walked = median_seconds(walk)
            where = "its own zone" if cal_zone == "UTC" else "another zone"
            print(
                f"walks: a {days}-day closure in {where}: the due plan {planned * 1000:.1f} ms "
                f"({examined // 3:,} wall times), 1,500 moments {walked * 1000:.0f} ms"
            )


def count_walls() -> Callable[[], int]:
    """Counts the wall times the timing rules examine from now on (a call returns the
    count so far, and starts again): ``walks.moments_of_wall``, replaced in each module of
    the timing package that calls it."""
    from django_schedulinator.timing import calendars as calendar_rules
    from django_schedulinator.timing import replan as replan_rules
    from django_schedulinator.timing import walks as wall_walks

    counted = [0]
    original = wall_walks.moments_of_wall
    callers = (wall_walks, calendar_rules, replan_rules)

    def counting(*args: Any, **kwargs: Any) -> Any:
        counted[0] += 1
        return original(*args, **kwargs)

    for module in callers:
        module.moments_of_wall = counting  # type: ignore[assignment]

    def read() -> int:
        for module in callers:
            module.moments_of_wall = original  # type: ignore[assignment]
        value, counted[0] = counted[0], 0
        return value

    return read


def replan(total: int) -> None:
    from django_schedulinator import services
    from django_schedulinator.index import clock
    from django_schedulinator.models import Calendar, Schedule

    Calendar.objects.filter(name="bench-closure").delete()
    calendar = Calendar(name="bench-closure", timezone="UTC", weekend=[])
    services.save_calendar(calendar, days=[])
    now = clock.now()
    Schedule.objects.bulk_create(
        Schedule(
            name=f"bench-cal-{i}",
            task="bench.noop",
            kind="interval",
            interval=timedelta(seconds=60 + i % 300),
            timezone="UTC",
            next_run_at=now.replace(microsecond=0) + timedelta(seconds=1 + i % 60),
            calendars=["bench-closure"],
            calendar_rule="next_business_day" if i % 2 else "skip",
        )
        for i in range(total)
    )
    today = now.date()
    closed = [(today, "closed"), (today + timedelta(days=1), "closed")]
    for what, days in (("closing", closed), ("opening", [])):
        started = time.perf_counter()
        moved = services.save_calendar(calendar, days=days)
        seconds = time.perf_counter() - started
        print(
            f"re-plan: {what} two days of a calendar {total:,} schedules name: {seconds:.2f}s "
            f"({moved:,} next runs moved, {seconds / total * 1e6:.0f} us a schedule)"
        )


if __name__ == "__main__":
    main()
