"""``manage.py seed_demo``: create (or refresh) the demo's sample schedules. Idempotent."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from django_schedulinator.models import Schedule

ONE_OFF_DELAY = timedelta(seconds=15)


def sample_schedules() -> list[tuple[str, dict[str, Any]]]:
    """(name, field values) of every demo schedule; the one-off is re-armed on each call."""
    return [
        (
            "demo: heartbeat every 5 seconds",
            {
                "task": "demo.heartbeat",
                "kind": Schedule.Kind.INTERVAL,
                "interval": timedelta(seconds=5),
                "cron": "",
                "run_at": None,
                "timezone": "UTC",
                "args": [],
                "kwargs": {},
                "enabled": True,
            },
        ),
        (
            "demo: heartbeat every 10 seconds (cron)",
            {
                "task": "demo.heartbeat",
                "kind": Schedule.Kind.CRON,
                # Six fields, seconds first (cronsim's format).
                "cron": "*/10 * * * * *",
                "interval": None,
                "run_at": None,
                "timezone": "UTC",
                "args": [],
                "kwargs": {},
                "enabled": True,
            },
        ),
        (
            "demo: report every minute (Europe/Berlin)",
            {
                "task": "demo.report",
                "kind": Schedule.Kind.CRON,
                "cron": "* * * * *",
                "interval": None,
                "run_at": None,
                "timezone": "Europe/Berlin",
                "args": [],
                "kwargs": {"zone": "Europe/Berlin"},
                "enabled": True,
            },
        ),
        (
            "demo: one-off 15 seconds after seeding",
            {
                "task": "demo.say",
                "kind": Schedule.Kind.ONCE,
                "run_at": timezone.now() + ONE_OFF_DELAY,
                "cron": "",
                "interval": None,
                "timezone": "UTC",
                "args": [],
                "kwargs": {"message": "a one-off fires exactly once"},
                "enabled": True,
            },
        ),
    ]


class Command(BaseCommand):
    help = "Create or refresh the demo schedules (interval, cron with seconds, cron, one-off)."

    def handle(self, *args: Any, **options: Any) -> None:
        for name, values in sample_schedules():
            # update_or_create saves through Schedule.save(), so next_run_at is computed and
            # the post_save signal mirrors the row into the due index (bulk paths would not).
            schedule, created = Schedule.objects.update_or_create(name=name, defaults=values)
            self.stdout.write(
                f"{'created' if created else 'updated'}: {name!r} -> {schedule.task}, "
                f"{schedule.description}; next run {describe_next_run(schedule)}"
            )


def describe_next_run(schedule: Schedule) -> str:
    if schedule.next_run_at is None:
        return "none"
    text = schedule.next_run_at.isoformat(timespec="seconds")
    if schedule.next_run_at < timezone.now():
        # Left over from an earlier run of the demo: catch-up "latest" fires the most
        # recent missed occurrence once and records the others as skipped.
        text += " (overdue: the latest missed occurrence fires once when a scheduler runs)"
    return text
