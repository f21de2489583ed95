"""The demo's tasks. django-schedulinator imports every app's ``scheduled_tasks`` module at
startup, so registering them is all it takes to make them selectable in schedules.

A task that declares an ``occurrence`` parameter receives the Occurrence being fired: its
idempotency ``key`` (the same on every re-dispatch), its nominal time and its schedule.
"""

from __future__ import annotations

import logging
from datetime import datetime
from zoneinfo import ZoneInfo

from django.db.models import Count
from django.utils import timezone

from django_schedulinator import task
from django_schedulinator.dispatch import Occurrence
from django_schedulinator.models import Run

from .models import Firing

logger = logging.getLogger("demo")


def _describe(name: str, occurrence: Occurrence) -> str:
    now = timezone.now()
    lag_ms = (now - occurrence.scheduled_for).total_seconds() * 1000
    return (
        f"[demo] {name} fired: schedule={occurrence.schedule_name!r} key={occurrence.key} "
        f"nominal={_clock(occurrence.scheduled_for)} now={_clock(now)} (+{lag_ms:.0f} ms)"
        + (f" attempt={occurrence.attempt}" if occurrence.attempt > 1 else "")
    )


def _clock(moment: datetime) -> str:
    return moment.astimezone(ZoneInfo("UTC")).strftime("%H:%M:%S.%f")[:-3] + "Z"


@task(name="demo.heartbeat")
def heartbeat(*, occurrence: Occurrence) -> None:
    """Log the occurrence and record it, once per idempotency key."""
    # get_or_create on the unique key: a re-dispatch after a crash (same key) is a no-op.
    _firing, created = Firing.objects.get_or_create(
        key=occurrence.key,
        defaults={
            "schedule_name": occurrence.schedule_name,
            "scheduled_for": occurrence.scheduled_for,
        },
    )
    suffix = "" if created else " (already recorded: duplicate key ignored)"
    logger.info("%s%s", _describe("heartbeat", occurrence), suffix)


@task(name="demo.report")
def report(*, occurrence: Occurrence, zone: str = "Europe/Berlin") -> None:
    """Summarise what the demo has fired so far."""
    local = occurrence.scheduled_for.astimezone(ZoneInfo(zone)).strftime("%H:%M:%S %Z")
    runs = dict(Run.objects.values_list("status").annotate(n=Count("pk")).order_by())
    logger.info(
        "%s local=%s | %d heartbeats recorded, runs by status: %s",
        _describe("report", occurrence),
        local,
        Firing.objects.count(),
        ", ".join(f"{status}={n}" for status, n in sorted(runs.items())) or "none",
    )


@task(name="demo.say")
def say(message: str = "hello", *, occurrence: Occurrence) -> None:
    """Log a message taken from the schedule's kwargs."""
    logger.info("%s message=%r", _describe("say", occurrence), message)
