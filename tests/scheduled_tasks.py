"""Tasks registered for the tests (autodiscovered like a user's scheduled_tasks.py)."""

import asyncio
import time

from django.db import IntegrityError, InterfaceError, OperationalError, connection
from django.utils import timezone

from django_schedulinator import task
from django_schedulinator.dispatch import Occurrence

from .models import Delivery, Receipt, Redelivery, receive


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
    time.sleep(seconds)
    record(occurrence=occurrence)


@task(name="tests.exit")
def exit_now():
    raise SystemExit(3)


@task(name="tests.hang", timeout=0.5)
def hang(seconds: float = 3600):
    time.sleep(seconds)


@task(name="tests.receipt")
def receipt(*, occurrence: Occurrence):
    """A receiver that dedupes on the key: the first delivery is the effect, later ones are
    only counted. Like any real receiver it retries its own write through a dropped
    database connection."""
    received_at = timezone.now()  # this host's clock, the one Redis TIME reads here too
    for attempt in range(5):
        try:
            try:
                Receipt.objects.create(
                    key=occurrence.key,
                    schedule_id=occurrence.schedule_id,
                    scheduled_for=occurrence.scheduled_for,
                    received_at=received_at,
                    attempt=occurrence.attempt,
                )
            except IntegrityError:
                Redelivery.objects.create(
                    key=occurrence.key, received_at=received_at, attempt=occurrence.attempt
                )
            return
        except (OperationalError, InterfaceError):
            if attempt == 4:
                raise
            connection.close()
            time.sleep(0.2 * (attempt + 1))


@task(name="tests.slow_receipt")
def slow_receipt(*, occurrence: Occurrence, seconds: float = 1.5):
    """A hand-off that takes its time, then a receiver that dedupes on the key."""
    time.sleep(seconds)
    receive(occurrence.key, occurrence.attempt)


@task(name="tests.async_record")
async def async_record(*args, occurrence: Occurrence, **kwargs):
    """An async task: it awaits, uses the ORM's async API, and returns its output."""
    await asyncio.sleep(0.01)
    await Delivery.objects.acreate(
        key=occurrence.key,
        schedule_id=occurrence.schedule_id,
        scheduled_for=occurrence.scheduled_for,
        attempt=occurrence.attempt,
        payload={"args": list(args), "kwargs": kwargs},
    )
    return f"async ran {occurrence.key}"


@task(name="tests.async_boom")
async def async_boom():
    await asyncio.sleep(0)
    raise RuntimeError("async boom")


# Keys of the async tasks that were cancelled (they run in this process: inline).
CANCELLED: list[str] = []


@task(name="tests.async_hang", timeout=0.5)
async def async_hang(*, occurrence: Occurrence):
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        CANCELLED.append(occurrence.key)
        raise


@task(name="tests.report_status")
def report_status(*, occurrence: Occurrence):
    """Runs past the dispatcher's one-second report, then reads its own run's status."""
    from django_schedulinator.models import Run

    time.sleep(1.6)
    status = Run.objects.get(pk=occurrence.run_id).status
    Delivery.objects.create(
        key=occurrence.key,
        schedule_id=occurrence.schedule_id,
        scheduled_for=occurrence.scheduled_for,
        attempt=occurrence.attempt,
        payload={"status_while_running": status},
    )


@task(name="tests.show_lock_timeout")
def show_lock_timeout(*, occurrence: Occurrence):
    """Records the lock_timeout its own database connection has (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        value = cursor.fetchone()[0]
    Delivery.objects.create(
        key=occurrence.key,
        schedule_id=occurrence.schedule_id,
        scheduled_for=occurrence.scheduled_for,
        attempt=occurrence.attempt,
        payload={"lock_timeout": value},
    )


@task(name="billing.invoice_run")
def invoice_run(*args, **kwargs):
    """The task the examples in docs/dispatch.md schedule (tests/support/doc_examples.py
    runs them)."""
    return None


@task(name="reports.nightly")
def nightly_report(*args, **kwargs):
    """The task the example in docs/alerts.md schedules (tests/test_notify.py runs it)."""
    return None


# The Celery tasks of tests/support/celery_app.py, registered for scheduling under their
# Celery names.
def _register_celery_tasks() -> None:
    from .support.celery_app import boom as celery_boom
    from .support.celery_app import receipt as celery_receipt
    from .support.celery_app import record as celery_record
    from .support.celery_app import slow as celery_slow

    for celery_task in (celery_record, celery_boom, celery_slow, celery_receipt):
        task(name=celery_task.name)(celery_task)


_register_celery_tasks()


# Django tasks (django.tasks, or the backport), registered in one line each.
def _register_django_tasks() -> None:
    from .support import django_task_defs as defs

    for django_task in (defs.record, defs.boom, defs.slow, defs.plain, defs.slow_receipt):
        task(name=f"tests.django.{django_task.func.__name__}")(django_task)


_register_django_tasks()


@task(name="tests.says")
def says(text: str, *, nul: bool = False) -> str:
    """Returns ``text`` (its "0"s made NUL characters with ``nul``, which no schedule's
    arguments can hold): its output, as a run records it."""
    return text.replace("0", "\x00") if nul else text


@task(name="tests.fails_saying")
def fails_saying(text: str, *, nul: bool = False) -> None:
    raise RuntimeError(text.replace("0", "\x00") if nul else text)
