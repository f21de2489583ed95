"""Tasks registered for the tests (autodiscovered like a user's scheduled_tasks.py)."""

from django_schedulinator import task
from django_schedulinator.dispatch import Occurrence

from .models import Delivery


@task(name="tests.record")
def record(*args, occurrence: Occurrence, **kwargs):
    Delivery.objects.create(
        key=occurrence.key,
        schedule_id=occurrence.schedule_id,
        scheduled_for=occurrence.scheduled_for,
        attempt=occurrence.attempt,
        payload={"args": list(args), "kwargs": kwargs},
    )


@task(name="tests.boom")
def boom():
    raise RuntimeError("boom")


@task(name="tests.noop")
def noop(*args, **kwargs):
    return None


@task(name="tests.slow")
def slow(*, occurrence: Occurrence, seconds: float = 1.5):
    import time

    time.sleep(seconds)
    record(occurrence=occurrence)
