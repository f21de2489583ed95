"""What the Celery fixtures of conftest.py use (the dispatcher's tests, and the import from
django-celery-beat): this test process's queue (tests/settings.py, TEST_QUEUE) on the real
RabbitMQ, and the command of a real ``celery worker`` on it. And what the import tests
compare an imported schedule with: Celery's own schedule object."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings as django_settings

from django_schedulinator.models import Schedule
from django_schedulinator.timing import occurrences

from .celery_app import app

QUEUE = django_settings.TEST_QUEUE


def purge() -> None:
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        channel.queue_declare(QUEUE, durable=True, auto_delete=False)
        channel.queue_purge(QUEUE)


def worker_argv() -> list[str]:
    return [
        sys.executable, "-m", "celery", "-A", "tests.support.celery_app", "worker", "-P", "solo",
        "-Q", QUEUE, "-n", f"{QUEUE}@%h", "--without-heartbeat", "--without-gossip",
        "--without-mingle", "-l", "INFO",
    ]  # fmt: skip


# -- comparing an imported schedule with Celery's own schedule object -----------------------

# Celery crontabs (their keyword arguments), each imported and compared with Celery's own.
CRONTABS: dict[str, dict[str, Any]] = {
    # Celery fires when both day fields match; cron alone would fire on either.
    "first-monday": {"minute": "30", "hour": "6", "day_of_month": "1-7", "day_of_week": "mon"},
    "friday-13th": {"minute": "0", "hour": "9", "day_of_month": "13", "day_of_week": "fri"},
    "1st-15th": {"minute": "0", "hour": "12", "day_of_month": "1,15", "day_of_week": "mon-fri"},
    "first-week": {"minute": "0", "hour": "7", "day_of_month": "1-7", "day_of_week": "0-6"},
    "weekend-tens": {"minute": "0", "hour": "8", "day_of_month": "*/10", "day_of_week": "sat,sun"},
    # Forms Celery reads and cron does not: a list, ranges that wrap around.
    "twice-a-day": {"minute": 0, "hour": [6, 18]},
    "around-midnight": {"minute": "15", "hour": "22-1"},
    "long-weekend": {"minute": "0", "hour": "10", "day_of_week": "fri-mon"},
    # The usual ones.
    "weekday-mornings": {"minute": "0", "hour": "4", "day_of_week": "mon-fri"},
    "quarter-hourly": {"minute": "*/15"},
    "monthly": {"minute": "0", "hour": "0", "day_of_month": "1"},
    "summer-noons": {"minute": "0", "hour": "12", "month_of_year": "6-8"},
    "new-year": {"minute": "0", "hour": "0", "day_of_month": "1", "month_of_year": "1"},
    "office-hours": {"minute": "30", "hour": "9-17", "day_of_week": "1-5"},
}

COMPARED_FROM = datetime(2026, 1, 1, tzinfo=UTC)
# Instants over three years, a prime number of minutes apart: they fall on every weekday,
# hour and day of the month.
COMPARED_AT = [COMPARED_FROM + timedelta(minutes=4999 * i) for i in range(320)]


def celery_next(celery_schedule: Any, after: datetime, zone: str) -> datetime:
    """The first run after ``after`` as Celery computes it: its crontab's own next-time
    step, in the zone its beat reads it in."""
    start, delta, _now = celery_schedule.remaining_delta(after, tz=ZoneInfo(zone))
    return (start + delta).astimezone(UTC)


def disagreements(
    schedule: Schedule, celery_schedule: Any, zone: str
) -> list[tuple[datetime, datetime, datetime | None]]:
    """(after, Celery's next run, the schedule's) wherever the two differ: from each of
    COMPARED_AT, and stepping from one run to the next for two dozen runs."""
    spec = schedule.timing_spec

    def ours(after: datetime) -> datetime | None:
        moment = next(occurrences(spec, after), None)
        return moment.at if moment is not None else None

    found = []
    for after in COMPARED_AT:
        theirs = celery_next(celery_schedule, after, zone)
        if ours(after) != theirs:
            found.append((after, theirs, ours(after)))
    at = COMPARED_FROM
    for _step in range(24):
        theirs = celery_next(celery_schedule, at, zone)
        if ours(at) != theirs:
            found.append((at, theirs, ours(at)))
            break
        at = theirs
    return found
