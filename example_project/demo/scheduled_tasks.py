"""The demo's tasks. django-schedulinator imports every app's ``scheduled_tasks`` module at
startup, so registering them is all it takes to make them selectable in schedules.

Each is a task of Django's tasks framework (``@django_task``), registered for scheduling on
top (``@task``): the inline dispatcher calls its function, and with DEMO_DISPATCHER=tasks
(example_project/settings.py) the tasks dispatcher enqueues it. A task that declares an
``occurrence_key`` parameter receives the occurrence's idempotency key (the same on every
re-dispatch); the ledger has the rest.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Count
from django.utils import timezone

from django_schedulinator import task
from django_schedulinator.dispatch.tasks import framework
from django_schedulinator.models import Run
from django_schedulinator.outcomes import parse_key

from .models import Firing

logger = logging.getLogger("demo")
tasks_framework = framework()
assert tasks_framework is not None, "the demo needs Django 6, or the django-tasks backport"
django_task = tasks_framework.task


def _run_of(key: str) -> Any:
    schedule_id, scheduled_for = parse_key(key)
    return (
        Run.objects.filter(schedule_id=schedule_id, scheduled_for=scheduled_for)
        .select_related("schedule")
        .get()
    )


def _describe(name: str, run: Any) -> str:
    now = timezone.now()
    lag_ms = (now - run.scheduled_for).total_seconds() * 1000
    return (
        f"[demo] {name} fired: schedule={run.schedule.name!r} key={run.idempotency_key} "
        f"nominal={_clock(run.scheduled_for)} now={_clock(now)} (+{lag_ms:.0f} ms)"
        + (f" attempt={run.attempts}" if run.attempts > 1 else "")
    )


def _clock(moment: datetime) -> str:
    return moment.astimezone(ZoneInfo("UTC")).strftime("%H:%M:%S.%f")[:-3] + "Z"


@task(name="demo.heartbeat")
@django_task()
def heartbeat(*, occurrence_key: str) -> None:
    """Log the occurrence and record it, once per idempotency key."""
    run = _run_of(occurrence_key)
    # get_or_create on the unique key: a re-dispatch after a crash (same key) is a no-op.
    _firing, created = Firing.objects.get_or_create(
        key=occurrence_key,
        defaults={"schedule_name": run.schedule.name, "scheduled_for": run.scheduled_for},
    )
    suffix = "" if created else " (already recorded: duplicate key ignored)"
    logger.info("%s%s", _describe("heartbeat", run), suffix)


@task(name="demo.report")
@django_task()
def report(*, occurrence_key: str, zone: str = "Europe/Berlin") -> None:
    """Summarise what the demo has fired so far."""
    run = _run_of(occurrence_key)
    local = run.scheduled_for.astimezone(ZoneInfo(zone)).strftime("%H:%M:%S %Z")
    runs = dict(Run.objects.values_list("status").annotate(n=Count("pk")).order_by())
    logger.info(
        "%s local=%s | %d heartbeats recorded, runs by status: %s",
        _describe("report", run),
        local,
        Firing.objects.count(),
        ", ".join(f"{status}={n}" for status, n in sorted(runs.items())) or "none",
    )


@task(name="demo.say")
@django_task()
def say(message: str = "hello", *, occurrence_key: str) -> None:
    """Log a message taken from the schedule's kwargs."""
    logger.info("%s message=%r", _describe("say", _run_of(occurrence_key)), message)
