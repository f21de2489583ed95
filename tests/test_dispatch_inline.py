"""The inline dispatcher (``django_schedulinator/dispatch/inline.py``, and the checks of
``dispatch/base.py`` it runs): a task that hangs, exits, no longer fits its stored arguments or
is no longer registered fails its own run, and the others run."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import JSONField, Value
from django.utils import timezone

from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker

from .models import Delivery
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


# -- poisoned schedules -----------------------------------------------------------------------


def test_a_hanging_task_is_cut_off_and_the_others_run(built_index: DueIndex) -> None:
    hung = make_schedule(task="tests.hang", next_run_at=timezone.now())
    fine = [make_schedule(next_run_at=timezone.now()) for _ in range(3)]

    Worker(once=True).run()

    run = Run.objects.get(schedule=hung)
    assert run.status == Run.Status.FAILED
    assert "Timed out after 0.5s" in run.error
    assert set(Run.objects.filter(schedule__in=fine).values_list("status", flat=True)) == {
        Run.Status.SUCCEEDED
    }
    assert Delivery.objects.count() == 3


def test_args_that_no_longer_fit_fail_their_own_run_only(built_index: DueIndex) -> None:
    poisoned = make_schedule(task="tests.boom", next_run_at=timezone.now())
    # The task's signature changed after the schedule was saved: it now takes no args.
    Schedule.objects.filter(pk=poisoned.pk).update(args=[1, 2], kwargs={"x": 1})
    fine = make_schedule(next_run_at=timezone.now())

    Worker(once=True).run()

    run = Run.objects.get(schedule=poisoned)
    assert run.status == Run.Status.FAILED
    assert "TypeError" in run.error
    assert Run.objects.get(schedule=fine).status == Run.Status.SUCCEEDED


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ([], [1, 2], "kwargs must be a JSON object"),
        ({"a": 1}, {}, "args must be a JSON list"),
        ("abc", {}, "args must be a JSON list, not a string"),
        (Value(None, JSONField()), {}, "args must be a JSON list, not null"),
        ([], {"occurrence": 1}, "'occurrence', which is reserved"),
    ],
)
def test_arguments_a_bulk_write_broke_fail_their_own_run_at_once(
    built_index: DueIndex, settings: Any, args: Any, kwargs: Any, error: str
) -> None:
    """Rows written by bulk paths skip validation. A kwargs that is not an object killed an
    inline pool thread: the run was recorded "Timed out" and the batch waited for the task
    timeout (issue 12, item 11). It fails its own run, with its own error, at once."""
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "TASK_TIMEOUT_SECONDS": 5.0}
    broken = make_schedule(next_run_at=timezone.now())
    Schedule.objects.filter(pk=broken.pk).update(args=args, kwargs=kwargs)
    fine = make_schedule(next_run_at=timezone.now())

    Worker(once=True).run()

    run = Run.objects.get(schedule=broken)
    assert run.status == Run.Status.FAILED
    assert error in run.error
    assert "Timed out" not in run.error
    assert Run.objects.get(schedule=fine).status == Run.Status.SUCCEEDED


def test_a_task_that_calls_exit_fails_its_own_run_only(built_index: DueIndex) -> None:
    exits = [make_schedule(task="tests.exit", next_run_at=timezone.now()) for _ in range(10)]
    fine = make_schedule(next_run_at=timezone.now())

    Worker(once=True).run()  # returns: neither the pool nor the loop died

    failed = Run.objects.filter(schedule__in=exits, status=Run.Status.FAILED)
    assert failed.count() == 10
    assert "SystemExit: 3" in failed[0].error
    assert Run.objects.get(schedule=fine).status == Run.Status.SUCCEEDED


def test_a_task_no_longer_registered_fails_its_run(built_index: DueIndex) -> None:
    schedule = make_schedule(next_run_at=timezone.now())
    # Renamed in code after the schedule was saved: nothing is imported from the stored name.
    Schedule.objects.filter(pk=schedule.pk).update(task="os.system")

    Worker(once=True).run()

    run = Run.objects.get(schedule=schedule)
    assert run.status == Run.Status.FAILED
    assert "'os.system' is not a registered task" in run.error


# -- async tasks (issue 21, item 2) -------------------------------------------------------------


def test_an_async_task_runs_and_its_output_is_recorded(built_index: DueIndex) -> None:
    """An async def task was called, its coroutine dropped and its run recorded succeeded."""
    schedule = make_schedule(
        task="tests.async_record", args=[1], kwargs={"a": "b"}, next_run_at=timezone.now()
    )

    Worker(once=True).run()

    run = Run.objects.get(schedule=schedule)
    assert (run.status, run.output) == ("succeeded", f"async ran {run.idempotency_key}")
    delivery = Delivery.objects.get(schedule_id=schedule.pk)
    assert (delivery.key, delivery.payload) == (
        run.idempotency_key,
        {"args": [1], "kwargs": {"a": "b"}},
    )


def test_an_async_task_that_raises_fails_its_run(built_index: DueIndex) -> None:
    schedule = make_schedule(task="tests.async_boom", next_run_at=timezone.now())

    Worker(once=True).run()

    run = Run.objects.get(schedule=schedule)
    assert run.status == Run.Status.FAILED
    assert "RuntimeError: async boom" in run.error


def test_an_async_task_past_its_timeout_is_cancelled(built_index: DueIndex) -> None:
    """Unlike a thread, a coroutine can be stopped: it is cancelled at its timeout."""
    from .scheduled_tasks import CANCELLED

    CANCELLED.clear()
    hung = make_schedule(task="tests.async_hang", next_run_at=timezone.now())
    fine = make_schedule(next_run_at=timezone.now())

    Worker(once=True).run()

    run = Run.objects.get(schedule=hung)
    assert run.status == Run.Status.FAILED
    assert run.error == "Timed out after 0.5s and was cancelled."
    assert [run.idempotency_key] == CANCELLED
    assert Run.objects.get(schedule=fine).status == Run.Status.SUCCEEDED


# -- text the database cannot store -------------------------------------------------------------


def test_a_nul_character_in_a_tasks_output_or_error_fails_no_other_run(
    built_index: DueIndex,
) -> None:
    """PostgreSQL stores no NUL character in text: a task whose output or error held one
    made the whole batch's recording fail, and every run of it was dispatched again once
    its lease ended. The character is replaced; each run is recorded once."""
    nul_output = make_schedule(
        task="tests.says", args=["a0b"], kwargs={"nul": True}, next_run_at=timezone.now()
    )
    nul_error = make_schedule(
        task="tests.fails_saying", args=["c0d"], kwargs={"nul": True}, next_run_at=timezone.now()
    )
    plain = make_schedule(task="tests.says", args=["fine"], next_run_at=timezone.now())

    Worker(once=True).run()

    runs = {run.schedule_id: run for run in Run.objects.all()}
    assert (runs[nul_output.pk].status, runs[nul_output.pk].output) == ("succeeded", "a\ufffdb")
    assert runs[nul_error.pk].status == "failed"
    assert "c\ufffdd" in runs[nul_error.pk].error
    assert (runs[plain.pk].status, runs[plain.pk].output) == ("succeeded", "fine")
    assert {run.attempts for run in runs.values()} == {1}
