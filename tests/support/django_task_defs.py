"""Tasks of Django's tasks framework, registered for scheduling (tests/scheduled_tasks.py)."""

from __future__ import annotations

import time

from django.utils import timezone

from django_schedulinator.dispatch.tasks import framework

tasks = framework()
assert tasks is not None
task = tasks.task


@task()
def record(*args: object, occurrence_key: str, **kwargs: object) -> None:
    from ..models import Delivery

    Delivery.objects.create(
        key=occurrence_key,
        schedule_id=int(occurrence_key.split(":")[0]),
        scheduled_for=timezone.now(),
        attempt=1,
        payload={"args": list(args), "kwargs": kwargs},
    )


@task()
def boom() -> None:
    raise RuntimeError("boom")


@task()
def slow(seconds: float = 3) -> None:
    time.sleep(seconds)


@task()
def slow_receipt(occurrence_key: str, seconds: float = 1.5) -> None:
    """A task that takes its time (inside enqueue() on the immediate backend), then a
    receiver that dedupes on the key."""
    from ..models import receive

    time.sleep(seconds)
    receive(occurrence_key)


@task(priority=0)
def plain() -> None:
    """No occurrence_key parameter: the key is not passed."""
