"""``manage.py import_schedules --from django-celery-beat``: real rows made through
django-celery-beat's own models, imported; and the move itself, end to end: the imported
schedules keep sending to the same Celery tasks, run by a real worker on the real broker."""

from __future__ import annotations

import os
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.utils import timezone

from django_schedulinator.models import Run, Schedule

from .models import Delivery
from .support.celery_support import CRONTABS, disagreements
from .support.handoff import fire, status_of, until

try:
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        IntervalSchedule,
        PeriodicTask,
        SolarSchedule,
    )
except ImportError:  # the run on Django 6 (not supported by django-celery-beat yet)
    if os.environ.get("SCHEDULINATOR_REQUIRE_CELERY_BEAT"):
        raise
    pytest.skip("django-celery-beat is not installed", allow_module_level=True)

pytestmark = pytest.mark.django_db

QUEUE = django_settings.TEST_QUEUE


def run(*args: str) -> str:
    out = StringIO()
    call_command("import_schedules", "--from", "django-celery-beat", *args, stdout=out)
    return out.getvalue()


def test_periodic_tasks_become_schedules_with_what_cannot_be_mapped_listed(
    celery_alias: None,
) -> None:
    now = timezone.now()
    weekdays = CrontabSchedule.objects.create(
        minute="0", hour="3", day_of_week="mon-fri", timezone="Europe/Paris"
    )
    PeriodicTask.objects.create(
        name="nightly",
        task="tests.celery.record",
        crontab=weekdays,
        args="[1]",
        kwargs='{"a": "b"}',
        queue=QUEUE,
        priority=5,
        expire_seconds=60,
        start_time=now + timedelta(days=1),
    )
    every_ten = IntervalSchedule.objects.create(every=10, period=IntervalSchedule.MINUTES)
    last_run = now - timedelta(minutes=3)
    PeriodicTask.objects.create(
        name="every-ten-minutes", task="tests.celery.record", interval=every_ten,
        last_run_at=last_run,
    )  # fmt: skip
    PeriodicTask.objects.create(
        name="paused", task="tests.celery.record", interval=every_ten, enabled=False
    )
    PeriodicTask.objects.create(
        name="once",
        task="legacy.report",
        clocked=ClockedSchedule.objects.create(clocked_time=now + timedelta(days=1)),
        one_off=True,
    )
    PeriodicTask.objects.create(
        name="once-a-day-then-done",
        task="tests.celery.record",
        crontab=weekdays,
        one_off=True,
        expires=now + timedelta(days=30),
    )
    sunset = SolarSchedule.objects.create(event="sunset", latitude=48.85, longitude=2.35)
    PeriodicTask.objects.create(name="at-sunset", task="tests.celery.record", solar=sunset)
    PeriodicTask.objects.create(name="unknown", task="nope.task", crontab=weekdays)
    PeriodicTask.objects.create(
        name="with-exchange", task="tests.celery.record", crontab=weekdays, exchange="direct"
    )
    PeriodicTask.objects.create(
        name="with-headers", task="tests.celery.record", crontab=weekdays, headers='{"x": 1}'
    )
    PeriodicTask.objects.create(
        name="bad-args", task="tests.celery.record", crontab=weekdays, args="[1,"
    )
    # What beat itself adds to the table when it starts.
    PeriodicTask.objects.create(
        name="celery.backend_cleanup",
        task="celery.backend_cleanup",
        crontab=CrontabSchedule.objects.create(minute="0", hour="4"),
    )
    mapping = ("--map", "legacy.report=tests.celery.record", "--dispatcher", "celery")

    dry = run(*mapping, "--dry-run")
    assert Schedule.objects.count() == 0
    assert "Would import 6 schedule(s); left out 5." in dry
    assert "would create 'at-sunset': solar: Sunset at 48.85, 2.35," in dry
    assert "'celery.backend_cleanup': celery beat's own housekeeping" in dry

    out = run(*mapping)

    nightly = Schedule.objects.get(name="nightly")
    assert (nightly.kind, nightly.cron, nightly.timezone) == (
        "cron",
        "0 3 * * mon-fri",
        "Europe/Paris",
    )
    assert (nightly.task, nightly.dispatcher) == ("tests.celery.record", "celery")
    assert (nightly.args, nightly.kwargs) == ([1], {"a": "b"})
    assert nightly.dispatch_options == {"queue": QUEUE, "priority": 5, "expires": 60}
    assert nightly.start_at == now + timedelta(days=1)
    ten = Schedule.objects.get(name="every-ten-minutes")
    assert ten.interval == timedelta(minutes=10)
    # The cadence goes on where beat left it: ten minutes after its last run, not from now.
    assert ten.next_run_at == last_run.replace(microsecond=last_run.microsecond // 1000 * 1000) + (
        timedelta(minutes=10)
    )
    paused = Schedule.objects.get(name="paused")
    assert not paused.enabled
    assert paused.pause_note == "Imported paused: it was disabled in django-celery-beat."
    once = Schedule.objects.get(name="once")
    assert (once.kind, once.task) == ("once", "tests.celery.record")
    done = Schedule.objects.get(name="once-a-day-then-done")
    assert (done.max_runs, done.end_at) == (1, now + timedelta(days=30))
    sunset = Schedule.objects.get(name="at-sunset")
    assert (sunset.kind, sunset.solar_event, sunset.latitude, sunset.longitude) == (
        "solar",
        "sunset",
        48.85,
        2.35,
    )
    assert sunset.next_run_at is not None
    assert now < sunset.next_run_at < now + timedelta(days=1)
    for name, reason in [
        ("unknown", "the task 'nope.task' is not registered"),
        ("with-exchange", "exchange 'direct': the Celery dispatcher sends by queue only"),
        ("with-headers", "headers: the Celery dispatcher sends its own"),
        ("bad-args", "args is not JSON"),
        ("celery.backend_cleanup", "celery beat's own housekeeping (it deletes expired task"),
    ]:
        assert f"{name!r}: {reason}" in out, out

    assert "Imported 0 schedule(s); left out 11." in run(*mapping)


def test_periodic_tasks_with_no_run_left_import_as_finished_schedules() -> None:
    """A periodic task that has nothing left to run imports beside the others as a finished
    schedule (no next run): its expiry has passed, or it was a one-off
    beat already ran (beat disables those after their run)."""
    now = timezone.now()
    hourly = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS)
    weekdays = CrontabSchedule.objects.create(minute="0", hour="3", day_of_week="mon-fri")
    yesterday = now - timedelta(days=1)
    ran = {"one_off": True, "enabled": False, "last_run_at": yesterday, "total_run_count": 1}
    PeriodicTask.objects.create(
        name="expired-interval", task="tests.record", interval=hourly, expires=yesterday
    )
    PeriodicTask.objects.create(
        name="expired-crontab", task="tests.record", crontab=weekdays, expires=yesterday
    )
    PeriodicTask.objects.create(name="one-off-that-ran", task="tests.record", crontab=weekdays,
                                **ran)  # fmt: skip
    PeriodicTask.objects.create(
        name="clocked-that-ran",
        task="tests.record",
        clocked=ClockedSchedule.objects.create(clocked_time=yesterday),
        **ran,
    )
    PeriodicTask.objects.create(
        name="clocked-expired-before-its-time",
        task="tests.record",
        clocked=ClockedSchedule.objects.create(clocked_time=now + timedelta(days=1)),
        one_off=True,
        expires=yesterday,
    )
    PeriodicTask.objects.create(name="live", task="tests.record", interval=hourly)
    finished = [
        "expired-interval",
        "expired-crontab",
        "one-off-that-ran",
        "clocked-that-ran",
        "clocked-expired-before-its-time",
    ]

    dry = run("--dry-run")
    assert "Would import 6 schedule(s); left out 0." in dry, dry
    for name in finished:
        assert f"would create {name!r}: " in dry
    assert dry.count(", finished: no run left") == len(finished), dry

    out = run()

    assert "Imported 6 schedule(s); left out 0." in out, out
    rows = {s.name: s for s in Schedule.objects.all()}
    assert {name: rows[name].next_run_at for name in finished} == dict.fromkeys(finished)
    assert all(rows[name].enabled for name in finished)  # finished, not paused
    assert rows["live"].next_run_at is not None
    # Resuming or editing a finished one-off that ran does not fire it again.
    assert (rows["clocked-that-ran"].run_count, rows["clocked-that-ran"].max_runs) == (1, 1)


def test_a_clocked_task_whose_time_passed_and_that_beat_never_ran_is_left_out_saying_so() -> None:
    """Beat would run it at its next start; an import fires no missed run, so it is listed
    with the reason (and the rest imported)."""
    PeriodicTask.objects.create(
        name="missed",
        task="tests.record",
        clocked=ClockedSchedule.objects.create(clocked_time=timezone.now() - timedelta(days=1)),
        one_off=True,
    )
    hourly = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS)
    PeriodicTask.objects.create(name="live", task="tests.record", interval=hourly)

    out = run()

    assert "Imported 1 schedule(s); left out 1." in out, out
    assert "skipped periodic task " in out
    assert "'missed': its time (" in out
    assert "has passed and beat has not run it" in out


def test_imported_crontabs_fire_when_celery_would() -> None:
    """Each crontab row fires as its own Celery schedule object (``CrontabSchedule.schedule``)
    does: on days that match both day fields, ranges that wrap included."""
    rows = {}
    for name, fields in CRONTABS.items():
        if all(isinstance(value, str) for value in fields.values()):  # the table's text
            row = CrontabSchedule.objects.create(**fields, timezone="Europe/Berlin")
            PeriodicTask.objects.create(name=name, task="tests.record", crontab=row)
            rows[name] = row

    assert f"Imported {len(rows)} schedule(s); left out 0." in run()

    found = {
        name: disagreements(Schedule.objects.get(name=name), row.schedule, "Europe/Berlin")[:3]
        for name, row in rows.items()
    }
    assert found == {name: [] for name in rows}
    assert Schedule.objects.get(name="friday-13th").day_rule == "both"


def test_an_option_the_dispatcher_does_not_take_leaves_the_task_out() -> None:
    PeriodicTask.objects.create(
        name="queued",
        task="tests.record",
        interval=IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS),
        queue="reports",
    )
    out = run()  # the default (inline) dispatcher takes no queue
    assert "skipped periodic task" in out
    assert "dispatch_options: " in out
    assert "queue" in out
    assert not Schedule.objects.exists()


def test_without_django_celery_beat_installed_the_command_says_so(settings: Any) -> None:
    from django.apps import apps

    installed = [app for app in settings.INSTALLED_APPS if app != "django_celery_beat"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(apps, "is_installed", lambda name: name in installed)
        from django.core.management.base import CommandError

        with pytest.raises(CommandError, match="django_celery_beat is not in INSTALLED_APPS"):
            run()


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the worker writes the outcome
def test_a_beat_project_moves_over_and_its_celery_worker_runs_the_tasks_unchanged(
    celery_alias: None, celery_worker: Any
) -> None:
    """The move, as docs/migrating-from-celery-beat.md tells it: the beat rows imported with
    the Celery dispatcher, the scheduler fires them, and the same Celery task runs in the
    same worker, now with the occurrence key, its end reported back."""
    PeriodicTask.objects.create(
        name="send-invoices",
        task="tests.celery.record",
        interval=IntervalSchedule.objects.create(every=1, period=IntervalSchedule.SECONDS),
        kwargs='{"batch": 7}',
        queue=QUEUE,
    )
    assert "Imported 1 schedule(s)" in run("--dispatcher", "celery")
    schedule = Schedule.objects.get(name="send-invoices")
    celery_worker()

    until(lambda: Schedule.objects.get(pk=schedule.pk).next_run_at <= timezone.now())
    fire()

    until(lambda: status_of(schedule) == "succeeded", seconds=60)
    run_ = Run.objects.get(schedule=schedule)
    delivery = Delivery.objects.get(schedule_id=schedule.pk)
    assert delivery.key == run_.idempotency_key
    assert delivery.payload["kwargs"] == {"batch": 7}
