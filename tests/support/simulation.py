"""Driving a real scheduler in-process (claim script, re-check, ledger, index) on a real
Redis and database, with a controlled clock; and reading what it left in the ledger.

time-machine moves Python's clock, and it replaces Redis TIME for the scheduler (its injected
clock) and for saves, resumes and the other actions (``clock.now``), so days of schedules, DST
changes included, run in seconds. The ``sim`` fixture (``conftest.py``) starts a simulation
at ``START``; ``fired`` and ``skipped`` say what reached the ledger: which occurrences fired,
which were skipped and why.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import from_ms, to_ms

from .schedules import make_schedule

START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class Simulation:
    """A scheduler whose "now" is the travelling clock."""

    def __init__(self, traveller: Any) -> None:
        self.traveller = traveller
        self.worker = Worker(worker_id="sim", clock=lambda: to_ms(timezone.now()))

    def at(self, when: datetime) -> None:
        self.traveller.move_to(when)

    def step(self) -> Any:
        return self.worker.step()

    def run_until(self, end: datetime) -> None:
        """Fire everything due up to ``end``, jumping from one due time to the next."""
        index = self.worker.index
        while True:
            result = self.step()
            if result.full:
                continue
            # The earliest entry once the pass wrote its new next runs back.
            head = index.client.zrange(index.due_key, 0, 0, withscores=True)
            if not head or head[0][1] > to_ms(end):
                self.at(end)
                self.step()
                return
            self.at(from_ms(max(int(head[0][1]), result.now_ms)))


def fired(schedule: Schedule) -> list[datetime]:
    return sorted(
        Run.objects.filter(schedule=schedule)
        .exclude(status=Run.Status.SKIPPED)
        .values_list("scheduled_for", flat=True)
    )


def skipped(schedule: Schedule) -> list[tuple[datetime, str]]:
    return sorted(
        Run.objects.filter(schedule=schedule, status=Run.Status.SKIPPED).values_list(
            "scheduled_for", "skip_reason"
        )
    )


def down_for_an_hour(sim: Simulation, **fields: Any) -> Schedule:
    """A minutely schedule, then no scheduler for an hour and a half minute."""
    schedule = make_schedule(kind="cron", cron="* * * * *", timezone="UTC", **fields)
    sim.at(START + timedelta(hours=1, seconds=30))
    sim.step()
    schedule.refresh_from_db()
    return schedule


def entry(index: DueIndex, schedule: Schedule) -> int | None:
    return index.scores([schedule.pk])[schedule.pk]
