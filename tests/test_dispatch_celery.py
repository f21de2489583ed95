"""The Celery dispatcher (``dispatch/celery.py``) with a real ``celery worker`` subprocess on
the real RabbitMQ, on a queue of this test process's own (tests/settings.py, TEST_QUEUE)."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_schedulinator.checks import check_dispatchers, check_settings
from django_schedulinator.dispatch.celery import task_id
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker

from .models import Delivery
from .support import handoff
from .support.handoff import fire, retry_until_failed, status_of, until
from .support.redis_server import free_port

QUEUE = django_settings.TEST_QUEUE
CELERY = "django_schedulinator.dispatch.celery.CeleryDispatcher"


due = functools.partial(handoff.due, dispatcher="celery", dispatch_options={"queue": QUEUE})
created = functools.partial(handoff.created, dispatcher="celery", dispatch_options={"queue": QUEUE})


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the worker writes the outcome
def test_a_task_gets_its_key_and_the_hook_reports_its_end(
    celery_alias: None, celery_worker: Any
) -> None:
    ok = due(task="tests.celery.record", args=[1], kwargs={"a": "b"})
    bad = due(task="tests.celery.boom")
    fire()
    run = Run.objects.get(schedule=ok)
    assert (run.status, run.external_id) == ("dispatched", task_id(run.idempotency_key))

    celery_worker()
    until(lambda: status_of(ok) == "succeeded" and status_of(bad) == "failed")

    delivery = Delivery.objects.get(schedule_id=ok.pk)
    assert delivery.key == run.idempotency_key
    assert delivery.payload == {"args": [1], "kwargs": {"a": "b"}, "task_id": run.external_id}
    assert "RuntimeError" in Run.objects.get(schedule=bad).error


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_bad_run_fails_alone_and_the_healthy_ones_are_sent_once(
    celery_alias: None, celery_worker: Any
) -> None:
    """Building a run's arguments raised outside the per-run handling: the batch broke after
    the healthy run was sent and before it was recorded, and every take-over sent it again
    (issue 21, item 3). Each bad run fails alone; the others are sent once."""
    healthy = due(task="tests.celery.record")
    broken = due(task="tests.celery.record")
    gone = due(task="tests.celery.record")
    later = due(task="tests.celery.record")
    Schedule.objects.filter(pk=broken.pk).update(kwargs=[1, 2])  # a bulk write, unchecked
    Schedule.objects.filter(pk=gone.pk).update(task="tests.celery.removed")

    fire()

    assert (status_of(healthy), status_of(later)) == ("dispatched", "dispatched")
    run = Run.objects.get(schedule=broken)
    assert (run.status, run.attempts) == ("failed", 1)
    assert "kwargs must be a JSON object, not a list" in run.error
    assert Run.objects.get(schedule=gone).error == "'tests.celery.removed' is not a registered task"
    celery_worker()
    until(lambda: status_of(healthy) == "succeeded" and status_of(later) == "succeeded")
    fire(worker_id="other")  # a take-over pass: nothing is left to send again
    for schedule in (healthy, later):
        assert Delivery.objects.filter(schedule_id=schedule.pk).count() == 1


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_overlap_skip_holds_while_the_task_runs(celery_alias: None, celery_worker: Any) -> None:
    schedule = due(
        task="tests.celery.slow", kwargs={"seconds": 3}, overlap="skip",
        kind="interval", interval=timedelta(minutes=1),
    )  # fmt: skip
    fire()
    celery_worker()
    until(lambda: status_of(schedule) == "running")

    fire(schedule)
    runs = list(Run.objects.filter(schedule=schedule).order_by("scheduled_for"))
    assert [(r.status, r.skip_reason) for r in runs] == [("running", ""), ("skipped", "overlap")]

    until(lambda: Run.objects.get(pk=runs[0].pk).status == "succeeded")
    fire(schedule)
    latest = Run.objects.filter(schedule=schedule).latest("scheduled_for")
    assert latest.skip_reason == ""


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_redelivery_carries_the_same_key_and_task_id_and_celery_runs_it_again(
    celery_alias: None, celery_worker: Any
) -> None:
    schedule = due(task="tests.celery.record")
    fire()
    run = Run.objects.get(schedule=schedule)
    # The first scheduler's lease ran out before it recorded the hand-off: another takes over.
    Run.objects.filter(pk=run.pk).update(
        status="pending", lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    fire(worker_id="other")
    run.refresh_from_db()
    assert (run.attempts, run.external_id) == (2, task_id(run.idempotency_key))

    celery_worker()
    until(lambda: Delivery.objects.filter(key=run.idempotency_key).count() == 2)
    # Celery ran both messages, with the same id and key; the second end report was a no-op.
    ids = {d.payload["task_id"] for d in Delivery.objects.filter(key=run.idempotency_key)}
    assert ids == {run.external_id}
    until(lambda: status_of(schedule) == "succeeded")


@pytest.mark.django_db(transaction=True)
def test_a_broker_that_is_down_retries_then_fails_while_others_fire(
    celery_alias: None, settings: Any
) -> None:
    settings.SCHEDULINATOR["DISPATCHERS"]["down"] = {
        "BACKEND": CELERY,
        "OPTIONS": {"APP": "tests.test_dispatch_celery.DOWN", "MAX_ATTEMPTS": 2,
                    "RETRY_BACKOFF_SECONDS": 0.05},
    }  # fmt: skip
    lost = due(dispatcher="down", task="tests.celery.record", dispatch_options={})
    other = due(task="tests.celery.record")
    worker = Worker(worker_id="t")
    worker.step()
    assert status_of(other) == "dispatched"

    retry_until_failed(worker, lost)
    worker.close()
    error = Run.objects.get(schedule=lost).error
    assert error.startswith("Handed off 2 time(s) without success; the last error: The Celery")


def _down_app() -> Any:
    from celery import Celery

    down = Celery("down", broker=f"amqp://guest:guest@127.0.0.1:{free_port()}//")
    down.conf.broker_connection_timeout = 1
    return down


DOWN = _down_app()


@pytest.mark.django_db
def test_a_schedule_asking_what_celery_does_not_do_is_refused(celery_alias: None) -> None:
    with pytest.raises(ValidationError) as unknown:
        created(dispatch_options={"queue": QUEUE, "timeout": 5})
    assert "has no option 'timeout' (options it takes: expires, priority, queue, routing_key)" in (
        str(unknown.value)
    )


@pytest.mark.django_db
def test_overlap_needs_the_workers_hook(settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "celery": {"BACKEND": CELERY, "OPTIONS": {"APP": "tests.support.celery_app.app"}}
        },
    }
    with pytest.raises(ValidationError, match="never learns when a run ends"):
        handoff.created(dispatcher="celery", task="tests.celery.record", overlap="skip")


def test_checks_name_a_missing_app_and_an_unreachable_broker(settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "nowhere": {"BACKEND": CELERY, "OPTIONS": {"APP": "no.such.app"}},
            "down": {"BACKEND": CELERY, "OPTIONS": {"APP": "tests.test_dispatch_celery.DOWN"}},
            "empty": {"BACKEND": CELERY},
        },
    }
    messages = {m.id: m.msg for m in check_settings()}
    assert "'no.such.app', which cannot be imported" in messages["schedulinator.E025"]
    assert "'APP' must name your Celery app" in messages["schedulinator.E004"]
    unreachable = [
        m for m in check_dispatchers(databases=["default"]) if m.id == "schedulinator.W021"
    ]
    assert len(unreachable) == 1
    assert "'down'" in unreachable[0].msg
