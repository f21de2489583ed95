"""The RQ dispatcher (``dispatch/rq.py``) with a real ``rqworker`` subprocess on the real
Redis: a queue of this test process's own (tests/settings.py, RQ_TEST_QUEUE)."""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import django_rq
import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_schedulinator.checks import check_dispatchers, check_settings
from django_schedulinator.dispatch.rq import job_id
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker

from .models import Delivery
from .support import handoff
from .support.doc_examples import example
from .support.handoff import empty_queue, fire, retry_until_failed, status_of, until
from .support.processes import Schedulers
from .support.redis_server import RedisServer
from .support.slow_proxy import SlowProxy

QUEUE = django_settings.RQ_TEST_QUEUE
RQ = "django_schedulinator.dispatch.rq.RQDispatcher"


@pytest.fixture
def rq_alias(settings: Any, built_index: DueIndex) -> Iterator[None]:
    """The docs' configuration, on this test process's queue; the queue emptied after."""
    config = example("rq")["SCHEDULINATOR"]
    config["DISPATCHERS"]["jobs"]["OPTIONS"]["QUEUE"] = QUEUE
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **config}
    empty_queue(QUEUE)
    yield
    empty_queue(QUEUE)


@pytest.fixture
def rqworker(schedulers: Schedulers) -> Callable[[], Any]:
    """Starts a real worker (killed, its output shown, after the test)."""
    return lambda: schedulers.popen([sys.executable, "-m", "django", "rqworker", QUEUE])


due = functools.partial(handoff.due, dispatcher="jobs")
created = functools.partial(handoff.created, dispatcher="jobs")


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the worker writes the outcome
def test_a_job_runs_the_registered_task_with_its_key_and_reports_its_end(
    rq_alias: None, rqworker: Any
) -> None:
    ok = due(task="tests.record", args=[1], kwargs={"a": "b"})
    bad = due(task="tests.boom")
    fire()
    run = Run.objects.get(schedule=ok)
    assert (run.status, run.external_id) == ("dispatched", job_id(run.idempotency_key))

    rqworker()
    until(lambda: status_of(ok) == "succeeded" and status_of(bad) == "failed")

    delivery = Delivery.objects.get(schedule_id=ok.pk)
    assert delivery.key == run.idempotency_key
    assert delivery.payload == {"args": [1], "kwargs": {"a": "b"}}
    failed = Run.objects.get(schedule=bad)
    assert "RuntimeError: boom" in failed.error


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_job_calls_its_task_as_the_inline_dispatcher_does(rq_alias: None, rqworker: Any) -> None:
    """The runner passes ``occurrence_key`` to a task that takes it (issue 21, item 11), and
    runs an async task to its end (item 2)."""
    by_key = due(task="tests.django.record", args=[1])  # its function takes occurrence_key
    run_async = due(task="tests.async_record", kwargs={"a": "b"})
    fire()
    rqworker()
    ended = ("succeeded", "failed")
    until(lambda: status_of(by_key) in ended and status_of(run_async) in ended)

    for schedule in (by_key, run_async):
        run = Run.objects.get(schedule=schedule)
        assert run.status == "succeeded", run.error
        assert Delivery.objects.get(schedule_id=schedule.pk).key == run.idempotency_key
    assert Delivery.objects.get(schedule_id=by_key.pk).payload == {"args": [1], "kwargs": {}}


@pytest.mark.django_db(transaction=True)
def test_a_run_that_cannot_be_called_fails_alone_and_is_not_enqueued(rq_alias: None) -> None:
    """Its task removed from the code, or its arguments broken by a bulk write: the run fails
    at once with its own error, and the rest of the batch is enqueued (issue 21, items 3-4)."""
    healthy = due(task="tests.record")
    gone = due(task="tests.record")
    broken = due(task="tests.record")
    later = due(task="tests.record")
    Schedule.objects.filter(pk=gone.pk).update(task="tests.removed")
    Schedule.objects.filter(pk=broken.pk).update(kwargs=[1, 2])

    fire()

    assert (status_of(healthy), status_of(later)) == ("dispatched", "dispatched")
    assert Run.objects.get(schedule=gone).error == "'tests.removed' is not a registered task"
    assert "kwargs must be a JSON object, not a list" in Run.objects.get(schedule=broken).error
    assert (status_of(gone), status_of(broken)) == ("failed", "failed")
    assert django_rq.get_queue(QUEUE).count == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["on_db_commit", "request_finished"])
def test_a_job_is_enqueued_at_once_whatever_the_projects_commit_mode(
    rq_alias: None, settings: Any, mode: str
) -> None:
    """django-rq defers an enqueue to the transaction's commit (its default) or to the end of
    the request: a scheduler has no request, and its run would be recorded as handed off
    while its job waited for a commit or a request that never comes."""
    settings.RQ = {"COMMIT_MODE": mode}
    schedule = due(task="tests.record")
    fire()
    assert status_of(schedule) == "dispatched"
    assert django_rq.get_queue(QUEUE).count == 1


def test_a_batch_is_enqueued_over_the_queue_s_connection_not_a_new_one_per_job(
    rq_alias: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``django_rq.get_queue`` builds a new Redis client, and its pool, on every call: looked
    up per hand-off, it opened a connection per job (10,000 in a burst of 10,000, each left
    in TIME_WAIT; benchmarks/dispatchers.py found it). The dispatcher keeps its queues."""
    from redis.connection import AbstractConnection

    from django_schedulinator.dispatch import Occurrence, Progress, dispatchers

    opened = []
    connect = AbstractConnection.connect

    def counted(self: AbstractConnection) -> None:
        if self._sock is None:  # a real new connection, not one the pool hands out again
            opened.append(self)
        connect(self)

    monkeypatch.setattr(AbstractConnection, "connect", counted)
    dispatcher = dispatchers.create_connection("jobs")
    occurrences = [
        Occurrence(
            key=f"{i}:1780000000000",
            run_id=i,
            schedule_id=i,
            schedule_name=f"s{i}",
            task="tests.noop",
            scheduled_for=timezone.now(),
            attempt=1,
        )
        for i in range(1, 21)
    ]
    try:
        outcomes = dispatcher.dispatch(occurrences, Progress())
    finally:
        dispatcher.close()
    connected = len(opened)

    assert [o.status for o in outcomes] == ["dispatched"] * 20
    assert django_rq.get_queue(QUEUE).count == 20
    assert connected == 1


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_overlap_skip_holds_while_the_job_runs_and_fires_once_it_ended(
    rq_alias: None, rqworker: Any
) -> None:
    schedule = due(
        task="tests.slow", kwargs={"seconds": 3}, overlap="skip",
        kind="interval", interval=timedelta(minutes=1),
    )  # fmt: skip
    fire()
    rqworker()
    until(lambda: status_of(schedule) == "running")

    fire(schedule)  # due again while the job runs
    runs = list(Run.objects.filter(schedule=schedule).order_by("scheduled_for"))
    assert [(r.status, r.skip_reason) for r in runs] == [("running", ""), ("skipped", "overlap")]

    until(lambda: runs[0].__class__.objects.get(pk=runs[0].pk).status == "succeeded")
    fire(schedule)
    assert Run.objects.filter(schedule=schedule).latest("scheduled_for").status in (
        "dispatched",
        "running",
        "succeeded",
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_redelivery_keeps_its_job_id_and_runs_once(rq_alias: None, rqworker: Any) -> None:
    schedule = due(task="tests.record")
    fire()
    run = Run.objects.get(schedule=schedule)
    # The scheduler's lease ran out before it recorded the hand-off: another takes it over.
    Run.objects.filter(pk=run.pk).update(
        status="pending", lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    worker = Worker(worker_id="other")
    worker.step()
    worker.close()
    run.refresh_from_db()
    assert (run.attempts, run.external_id) == (2, job_id(run.idempotency_key))
    assert django_rq.get_queue(QUEUE).count == 1  # RQ refused the second job

    rqworker()
    until(lambda: status_of(schedule) == "succeeded")
    assert Delivery.objects.filter(key=run.idempotency_key).count() == 1


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_rq_alone_runs_a_second_enqueue_of_the_same_id_twice(rq_alias: None, rqworker: Any) -> None:
    """What the dispatcher guards against: without unique=True, RQ overwrites the job and
    queues its id again, and the worker runs it twice."""
    schedule = due(task="tests.record")
    fire()
    run = Run.objects.get(schedule=schedule)
    queue = django_rq.get_queue(QUEUE)
    job = queue.fetch_job(run.external_id)
    assert job is not None
    queue.enqueue_call(job.func_name, args=job.args, job_id=job.id)  # plain, as RQ allows
    assert queue.count == 2

    rqworker()
    until(lambda: Delivery.objects.filter(key=run.idempotency_key).count() == 2)


@pytest.mark.django_db(transaction=True)
def test_a_broker_that_is_down_retries_then_fails_while_others_fire(
    rq_alias: None, settings: Any
) -> None:
    settings.SCHEDULINATOR["DISPATCHERS"]["down"] = {
        "BACKEND": RQ,
        "OPTIONS": {"QUEUE": "down", "MAX_ATTEMPTS": 2, "RETRY_BACKOFF_SECONDS": 0.05},
    }
    lost = [due(dispatcher="down", task="tests.record") for _ in range(2)]
    other = due(task="tests.record")
    worker = Worker(worker_id="t")
    worker.step()
    assert status_of(other) == "dispatched"
    assert {status_of(s) for s in lost} == {"pending"}  # waiting for their retry

    for schedule in lost:
        retry_until_failed(worker, schedule)
    worker.close()
    error = Run.objects.get(schedule=lost[0]).error
    assert error.startswith("Handed off 2 time(s) without success; the last error: The Redis")
    assert "'down' cannot be reached" in error


@pytest.mark.django_db
def test_a_schedule_asking_what_rq_does_not_do_is_refused(rq_alias: None) -> None:
    with pytest.raises(ValidationError) as unknown:
        created(dispatch_options={"priority": 5})
    assert "has no option 'priority' (options it takes: queue, timeout)" in str(unknown.value)
    with pytest.raises(ValidationError) as queue:
        created(dispatch_options={"queue": "nowhere"})
    assert "The option 'queue' must be one of RQ_QUEUES (down, schedtest-" in str(queue.value)


def test_checks_name_a_missing_queue_and_an_unreachable_redis(settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "nowhere": {"BACKEND": RQ, "OPTIONS": {"QUEUE": "nowhere"}},
            "down": {"BACKEND": RQ, "OPTIONS": {"QUEUE": "down"}},
        },
    }
    [missing] = check_settings()
    assert missing.id == "schedulinator.E026"
    assert "'nowhere', which is not in RQ_QUEUES" in missing.msg
    unreachable = [
        m for m in check_dispatchers(databases=["default"]) if m.id == "schedulinator.W022"
    ]
    assert len(unreachable) == 1
    assert "queue 'down'" in unreachable[0].msg


# -- a batch is one script per queue (issue 34) ------------------------------------------


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_in_a_batch_the_runs_that_cannot_be_sent_fail_alone_and_the_rest_run_once(
    rq_alias: None, rqworker: Any
) -> None:
    healthy = [due(task="tests.record", args=[i]) for i in range(3)]
    gone = due(task="tests.record")
    broken = due(task="tests.record")
    Schedule.objects.filter(pk=gone.pk).update(task="tests.removed")
    Schedule.objects.filter(pk=broken.pk).update(args={"a": 1})

    fire()  # one batch: the five runs together

    assert Run.objects.get(schedule=gone).error == "'tests.removed' is not a registered task"
    assert "args must be a JSON list, not an object" in Run.objects.get(schedule=broken).error
    assert django_rq.get_queue(QUEUE).count == 3
    rqworker()
    until(lambda: all(status_of(s) == "succeeded" for s in healthy))
    for schedule in healthy:
        key = Run.objects.get(schedule=schedule).idempotency_key
        assert Delivery.objects.filter(key=key).count() == 1
    assert (status_of(gone), status_of(broken)) == ("failed", "failed")


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_batch_handed_off_again_enqueues_only_the_jobs_rq_does_not_have(
    rq_alias: None, rqworker: Any
) -> None:
    """The scheduler died before recording a batch's hand-offs: another takes the runs over
    and hands the whole batch off again. The jobs RQ has are not pushed again; one lost
    from RQ meanwhile (deleted by hand) is enqueued again: each runs once."""
    schedules = [due(task="tests.record", args=[i]) for i in range(4)]
    fire()
    runs = list(Run.objects.filter(schedule__in=schedules).order_by("pk"))
    queue = django_rq.get_queue(QUEUE)
    assert queue.count == 4
    lost = queue.fetch_job(runs[0].external_id)
    assert lost is not None
    lost.delete()
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(
        status="pending", lease_expires_at=timezone.now() - timedelta(seconds=1)
    )

    fire(worker_id="other")

    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.attempts, run.external_id) == (
            "dispatched",
            2,
            job_id(run.idempotency_key),
        )
    assert queue.count == 4  # three kept, the lost one pushed again
    rqworker()
    until(lambda: all(status_of(s) == "succeeded" for s in schedules))
    for run in runs:
        assert Delivery.objects.filter(key=run.idempotency_key).count() == 1


@pytest.mark.subprocess  # a redis-server of its own
def test_a_redis_lost_during_a_batch_makes_its_jobs_and_the_rest_retry(
    rq_alias: None, settings: Any, tmp_path: Any
) -> None:
    """The batch goes to three queues in turn. The second's Redis (behind a relay) runs the
    script and the connection is lost before its answer: those runs, and the third queue's
    after them, are retried, not recorded as handed off; the first queue's are. The retry
    finds the jobs the lost answer was about and pushes none of them again."""
    from django_schedulinator.dispatch import Occurrence, Progress, dispatchers

    server = RedisServer(tmp_path)
    server.start()
    relay = SlowProxy(server.port, delay=1.0)  # holds each answer for a second
    stalled = django_settings.RQ_STALLED_QUEUE
    settings.RQ_QUEUES = {**settings.RQ_QUEUES, "lost": {"URL": relay.url()}}

    def occurrence(i: int, queue: str) -> Occurrence:
        return Occurrence(
            key=f"{i}:1780000000000",
            run_id=i,
            schedule_id=i,
            schedule_name=f"s{i}",
            task="tests.noop",
            scheduled_for=timezone.now(),
            attempt=1,
            dispatch_options={"queue": queue},
        )

    dispatcher = dispatchers.create_connection("jobs")
    lost_queue = django_rq.get_queue("lost")
    try:
        # Connected, and the script loaded, before the batch.
        [first] = dispatcher.dispatch([occurrence(1, "lost")], Progress())
        assert first.status == "dispatched"

        def lose_the_answer() -> None:
            client = server.client()
            until(lambda: client.llen(lost_queue.key) == 3)  # the script ran
            relay.close()

        cut = threading.Thread(target=lose_the_answer)
        cut.start()
        batch = [
            occurrence(2, QUEUE),
            occurrence(3, "lost"),
            occurrence(4, QUEUE),
            occurrence(5, "lost"),
            occurrence(6, stalled),
        ]
        outcomes = {o.run_id: o for o in dispatcher.dispatch(batch, Progress())}
        cut.join()
    finally:
        dispatcher.close()
        relay.close()

    assert {i: outcomes[i].status for i in outcomes} == {
        2: "dispatched", 3: "retry", 4: "dispatched", 5: "retry", 6: "retry"
    }  # fmt: skip
    assert "The Redis of the RQ queue 'lost' cannot be reached" in outcomes[3].error
    assert outcomes[6].error == outcomes[3].error  # not tried: retried with the same error
    assert django_rq.get_queue(QUEUE).count == 2
    assert django_rq.get_queue(stalled).count == 0

    # The retry, with the Redis reachable again: the jobs are there, none is pushed again.
    settings.RQ_QUEUES = {**settings.RQ_QUEUES, "lost": {"URL": server.url}}
    dispatcher = dispatchers.create_connection("jobs")
    try:
        again = dispatcher.dispatch([batch[1], batch[3]], Progress())
    finally:
        dispatcher.close()
    server_queue = server.client()
    try:
        assert [o.status for o in again] == ["dispatched", "dispatched"]
        assert server_queue.llen(lost_queue.key) == 3
    finally:
        server.kill()
