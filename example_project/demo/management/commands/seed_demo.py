"""``manage.py seed_demo``: create the demo's sample schedules, or bring them back to their
definition, through the service layer as any project would (each change in the change log,
the version moved only by a change). The one-off is armed again on every seeding, 15 seconds
later, so that each run of the demo sees it fire."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from django_schedulinator import services
from django_schedulinator.models import Schedule, ScheduleChange
from django_schedulinator.services import Origin

ONE_OFF_DELAY = timedelta(seconds=15)
COMMAND = Origin(None, ScheduleChange.Source.COMMAND)


def sample_schedules() -> dict[str, dict[str, Any]]:
    """The field values of every demo schedule, by name; the one-off at 15 s from now."""
    return {
        "demo: heartbeat every 5 seconds": {
            "task": "demo.heartbeat",
            "kind": Schedule.Kind.INTERVAL,
            "interval": timedelta(seconds=5),
        },
        "demo: heartbeat every 10 seconds (cron)": {
            "task": "demo.heartbeat",
            "kind": Schedule.Kind.CRON,
            # Six fields, seconds first (cronsim's format).
            "cron": "*/10 * * * * *",
            "timezone": "UTC",
        },
        "demo: report every minute (Europe/Berlin)": {
            "task": "demo.report",
            "kind": Schedule.Kind.CRON,
            "cron": "* * * * *",
            "timezone": "Europe/Berlin",
            "kwargs": {"zone": "Europe/Berlin"},
        },
        "demo: one-off 15 seconds after seeding": {
            "task": "demo.say",
            "kind": Schedule.Kind.ONCE,
            "run_at": timezone.now() + ONE_OFF_DELAY,
            "kwargs": {"message": "a one-off fires exactly once"},
        },
    }


def definition(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every field they leave out at its default: an edited schedule is
    brought back to the demo's definition (another kind's fields cleared, resumed)."""
    defaults = {
        "cron": "", "interval": None, "run_at": None, "timezone": "UTC", "args": [],
        "kwargs": {}, "enabled": True,
    }  # fmt: skip
    return {**defaults, **values}


class Command(BaseCommand):
    help = "Create or refresh the demo schedules (interval, cron with seconds, cron, one-off)."

    def handle(self, *args: Any, **options: Any) -> None:
        for name, values in sample_schedules().items():
            wanted = definition(values)
            schedule = Schedule.objects.filter(name=name).first()
            if schedule is None:
                schedule = services.create({"name": name, **wanted}, origin=COMMAND)
                done = "created"
            else:
                changed = services.update(schedule, wanted, origin=COMMAND)
                done = "updated" if changed else "unchanged"
            self.stdout.write(
                f"{done}: {name!r} -> {schedule.task}, {schedule.description}; "
                f"next run {describe_next_run(schedule)}"
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
