"""The Django tasks dispatcher (``dispatch/tasks.py``) through django-tasks-db's database
backend, with its real ``db_worker`` as a subprocess: a backend whose worker runs elsewhere
and sends the framework's task_started and task_finished signals, on the test's own
database (SQLite file or PostgreSQL), so no broker is needed."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_schedulinator.checks import check_settings
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule

from .models import Delivery
from .support import handoff
from .support.doc_examples import example
from .support.handoff import fire, status_of, until
from .support.processes import Schedulers

TASKS_DISPATCHER = "django_schedulinator.dispatch.tasks.TasksDispatcher"


@pytest.fixture
def tasks_alias(settings: Any, built_index: DueIndex) -> None:
    config = example("tasks")["SCHEDULINATOR"]
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **config}


@pytest.fixture
def db_worker(schedulers: Schedulers) -> Callable[[], Any]:
    """Starts a real worker (killed, its output shown, after the test)."""
    return lambda: schedulers.popen(
        [
            sys.executable,
            "-m",
            "django",
            "db_worker",
            "--queue-name",
            "*",
            "--interval",
            "0.1",
            "--no-startup-delay",
        ]
    )


due = functools.partial(handoff.due, dispatcher="tasks")
created = functools.partial(handoff.created, dispatcher="tasks")


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the worker writes the outcome
def test_a_django_task_gets_its_key_and_its_signals_report_its_end(
    tasks_alias: None, db_worker: Any
) -> None:
    ok = due(task="tests.django.record", args=[1], kwargs={"a": "b"})
    bad = due(task="tests.django.boom")
    fire()
    run = Run.objects.get(schedule=ok)
    assert run.status == "dispatched"
    assert run.external_id  # the result id the backend gave

    db_worker()
    until(lambda: status_of(ok) == "succeeded" and status_of(bad) == "failed")

    delivery = Delivery.objects.get(schedule_id=ok.pk)
    assert delivery.key == run.idempotency_key
    assert delivery.payload == {"args": [1], "kwargs": {"a": "b"}}
    assert "RuntimeError: boom" in Run.objects.get(schedule=bad).error


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_overlap_skip_holds_while_the_task_runs(tasks_alias: None, db_worker: Any) -> None:
    schedule = due(
        task="tests.django.slow", kwargs={"seconds": 3}, overlap="skip",
        kind="interval", interval=timedelta(minutes=1),
    )  # fmt: skip
    fire()
    db_worker()
    until(lambda: status_of(schedule) == "running")

    fire(schedule)
    runs = list(Run.objects.filter(schedule=schedule).order_by("scheduled_for"))
    assert [(r.status, r.skip_reason) for r in runs] == [("running", ""), ("skipped", "overlap")]

    until(lambda: Run.objects.get(pk=runs[0].pk).status == "succeeded")
    fire(schedule)
    assert Run.objects.filter(schedule=schedule).latest("scheduled_for").skip_reason == ""


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_redelivery_carries_the_same_key_and_runs_again_under_a_new_result_id(
    tasks_alias: None, db_worker: Any
) -> None:
    schedule = due(task="tests.django.record")
    fire()
    run = Run.objects.get(schedule=schedule)
    first_id = run.external_id
    Run.objects.filter(pk=run.pk).update(
        status="pending", lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    fire(worker_id="other")  # its lease ran out: another scheduler hands it off again
    run.refresh_from_db()
    assert run.attempts == 2
    assert run.external_id != first_id  # the backend gave the second enqueue an id of its own

    db_worker()
    until(lambda: Delivery.objects.filter(key=run.idempotency_key).count() == 2)
    until(lambda: status_of(schedule) == "succeeded")


@pytest.mark.django_db(transaction=True)  # the immediate backend runs the task in this process
def test_a_backend_that_runs_the_task_in_enqueue_gives_its_outcome_at_once(
    settings: Any, built_index: DueIndex
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "now": {"BACKEND": TASKS_DISPATCHER, "OPTIONS": {"BACKEND_ALIAS": "immediate"}}
        },
    }
    ok = due(dispatcher="now", task="tests.django.record")
    bad = due(dispatcher="now", task="tests.django.boom")
    fire()
    assert (status_of(ok), status_of(bad)) == ("succeeded", "failed")


@pytest.mark.django_db(transaction=True)
def test_a_backend_that_refuses_the_task_fails_its_runs_at_once_while_others_fire(
    tasks_alias: None, settings: Any
) -> None:
    aliases = settings.SCHEDULINATOR["DISPATCHERS"]

    def other(**options: str) -> None:
        other = {"BACKEND": TASKS_DISPATCHER, "OPTIONS": options}
        settings.SCHEDULINATOR = {
            **settings.SCHEDULINATOR,
            "DISPATCHERS": {**aliases, "other": other},
        }

    other()
    refused = due(dispatcher="other", task="tests.django.plain")
    fine = due(task="tests.django.plain")
    # Its backend is misconfigured after the schedule was saved: not worth a retry.
    other(BACKEND_ALIAS="gone")
    fire()
    assert status_of(fine) == "dispatched"
    run = Run.objects.get(schedule=refused)
    assert (run.status, run.attempts) == ("failed", 1)
    assert run.error.startswith("Could not enqueue: ")
    assert "gone" in run.error


@pytest.mark.django_db(transaction=True)
def test_a_task_removed_from_the_code_fails_its_runs_and_the_rest_of_the_batch_goes_on(
    tasks_alias: None,
) -> None:
    """Looking the task up and building its arguments raised out of the dispatcher: the run
    stayed pending with growing attempts, and the healthy runs after it waited for a take-over
    (issue 21, item 4). Each fails alone, with its own error."""
    healthy = due(task="tests.django.record")
    gone = due(task="tests.django.record")
    broken = due(task="tests.django.record")
    later = due(task="tests.django.record")
    Schedule.objects.filter(pk=gone.pk).update(task="tests.django.removed")
    Schedule.objects.filter(pk=broken.pk).update(args={"a": 1})

    fire()

    assert (status_of(healthy), status_of(later)) == ("dispatched", "dispatched")
    run = Run.objects.get(schedule=gone)
    assert (run.status, run.attempts) == ("failed", 1)
    assert run.error == "'tests.django.removed' is not a registered task"
    run = Run.objects.get(schedule=broken)
    assert (run.status, run.attempts) == ("failed", 1)
    assert "args must be a JSON list, not an object" in run.error


@pytest.mark.django_db
def test_a_schedule_asking_what_the_backend_does_not_do_is_refused(tasks_alias: None) -> None:
    with pytest.raises(ValidationError) as unknown:
        created(task="tests.django.plain", dispatch_options={"routing_key": "x"})
    assert "has no option 'routing_key' (options it takes: backend, priority, queue_name)" in (
        str(unknown.value)
    )
    with pytest.raises(ValidationError) as queue:
        created(task="tests.django.plain", dispatch_options={"queue_name": "elsewhere"})
    assert "'queue_name' must be one of the backend's QUEUES (default, reports)" in str(queue.value)
    with pytest.raises(ValidationError) as priority:
        created(
            task="tests.django.plain", dispatch_options={"priority": 5, "backend": "nopriority"}
        )
    assert "'priority' is not supported by the tasks backend 'nopriority'" in str(priority.value)
    with pytest.raises(ValidationError) as backend:
        created(task="tests.django.plain", dispatch_options={"backend": "elsewhere"})
    assert "The tasks backend 'elsewhere' cannot be used: The connection" in str(backend.value)
    created(task="tests.django.plain", dispatch_options={"queue_name": "reports", "priority": 5})


@pytest.mark.django_db(transaction=True)
def test_a_task_that_is_not_a_django_task_fails_saying_so(tasks_alias: None) -> None:
    schedule = due(task="tests.record")
    fire()
    run = Run.objects.get(schedule=schedule)
    assert run.status == "failed"
    assert "'tests.record' is not a Django task" in run.error


def test_the_check_names_a_backend_alias_that_is_not_in_tasks(settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"t": {"BACKEND": TASKS_DISPATCHER, "OPTIONS": {"BACKEND_ALIAS": "x"}}},
    }
    [error] = check_settings()
    assert error.id == "schedulinator.E023"
    assert "uses the tasks backend 'x'" in error.msg


# -- a batch on the database backend is one transaction (issue 34) ------------------------


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_in_a_batch_the_runs_that_cannot_be_sent_fail_alone_and_the_rest_run_once(
    tasks_alias: None, db_worker: Any
) -> None:
    healthy = [due(task="tests.django.record", args=[i]) for i in range(3)]
    gone = due(task="tests.django.record")
    broken = due(task="tests.django.record")
    not_django = due(task="tests.record")
    Schedule.objects.filter(pk=gone.pk).update(task="tests.django.removed")
    Schedule.objects.filter(pk=broken.pk).update(kwargs=[1])

    fire()  # one batch: the six runs, the healthy ones enqueued in one transaction

    assert all(status_of(s) == "dispatched" for s in healthy)
    assert [status_of(s) for s in (gone, broken, not_django)] == ["failed"] * 3
    db_worker()
    until(lambda: all(status_of(s) == "succeeded" for s in healthy))
    for schedule in healthy:
        key = Run.objects.get(schedule=schedule).idempotency_key
        assert Delivery.objects.filter(key=key).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_task_the_database_refuses_is_retried_alone_and_the_rest_of_its_batch_goes(
    tasks_alias: None,
) -> None:
    """PostgreSQL refuses a NUL in JSON: the batch's transaction is lost with it, and the
    batch is enqueued again one task at a time (nothing of the transaction was kept)."""
    from django.db import connection
    from django_tasks_db.models import DBTaskResult

    from django_schedulinator.dispatch import Occurrence, Progress, dispatchers

    if connection.vendor != "postgresql":
        pytest.skip("SQLite keeps a NUL in JSON text")

    def occurrence(i: int, args: list[Any]) -> Occurrence:
        return Occurrence(
            key=f"{i}:1780000000000",
            run_id=i,
            schedule_id=i,
            schedule_name=f"s{i}",
            task="tests.django.record",
            scheduled_for=timezone.now(),
            attempt=1,
            args=args,
        )

    dispatcher = dispatchers.create_connection("tasks")
    try:
        batch = [occurrence(1, [1]), occurrence(2, ["\x00"]), occurrence(3, [3])]
        outcomes = {o.run_id: o for o in dispatcher.dispatch(batch, Progress())}
    finally:
        dispatcher.close()
    statuses = {i: o.status for i, o in outcomes.items()}
    assert statuses == {1: "dispatched", 2: "retry", 3: "dispatched"}
    assert outcomes[2].error.startswith("Could not enqueue: ")
    kept = set(DBTaskResult.objects.values_list("id", flat=True))
    assert {str(i) for i in kept} == {outcomes[1].external_id, outcomes[3].external_id}
