"""Helpers of the tests of dispatchers that hand work to another system (Celery, RQ, Django
tasks): fire what is due in this process, and wait for what the worker reports."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import connections
from django.utils import timezone

from django_schedulinator import resync_schedules, services
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import truncate_ms

from .passes import scheduler_pass
from .schedules import make_schedule


def due(**fields: Any) -> Schedule:
    """A schedule due five seconds ago (each test file binds its dispatcher with partial)."""
    return make_schedule(next_run_at=timezone.now() - timedelta(seconds=5), **fields)


def created(**fields: Any) -> Schedule:
    """A schedule made through the write path (``services.create``: every rule checked, the
    dispatcher's included); each test file binds its dispatcher with partial."""
    fields.setdefault("name", f"s-{uuid.uuid4().hex[:10]}")
    fields.setdefault("task", "tests.record")
    fields.setdefault("kind", Schedule.Kind.INTERVAL)
    fields.setdefault("interval", timedelta(hours=1))
    return services.create(Schedule(**fields))


def fire(schedule: Schedule | None = None, worker_id: str = "t") -> None:
    """One scheduler pass here, committed as the scheduler's (``passes.scheduler_pass``;
    ``schedule``: made due again first)."""
    if schedule is not None:
        Schedule.objects.filter(pk=schedule.pk).update(  # as if nothing had fired yet
            next_run_at=truncate_ms(timezone.now() - timedelta(seconds=1)),
            due_at=None,
            fired_through=None,
        )
        resync_schedules([schedule.pk])
    scheduler_pass(worker_id)


def run_in_thread(worker: Worker) -> threading.Thread:
    """``worker.run()`` on a thread of its own, started (its connections closed at its end)."""

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()

    loop = threading.Thread(target=run)
    loop.start()
    return loop


def until(condition: Callable[[], bool], seconds: float = 30) -> None:
    """Wait for what a worker in another process does (a bound, not a timing under test)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def status_of(schedule: Schedule) -> str:
    """The status of the schedule's latest run."""
    return Run.objects.filter(schedule=schedule).latest("scheduled_for").status


def retry_until_failed(worker: Worker, schedule: Schedule, seconds: float = 30) -> Run:
    """Pass after pass (each takes over the runs whose backoff ended) until the run fails."""
    deadline = time.monotonic() + seconds
    while status_of(schedule) != "failed":
        assert time.monotonic() < deadline, Run.objects.filter(schedule=schedule).last()
        worker._next_takeover = 0.0  # take over at every pass, not every quarter lease
        worker.step()
        time.sleep(0.05)
    return Run.objects.filter(schedule=schedule).latest("scheduled_for")


def empty_queue(name: str) -> None:
    """An RQ queue of RQ_QUEUES emptied, with the jobs it keeps after they ended (or that a
    killed worker left started): tests share the Redis the queue is in."""
    import django_rq
    from rq.job import Job

    queue = django_rq.get_queue(name)
    queue.empty()
    for registry in (
        queue.started_job_registry,
        queue.finished_job_registry,
        queue.failed_job_registry,
    ):
        idents = registry.get_job_ids()
        if idents:
            queue.connection.delete(*(Job.key_for(ident) for ident in idents))
        queue.connection.delete(registry.key)
