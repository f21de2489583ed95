"""Leases kept while a batch is handed off, whatever the dispatcher (issue 21, item 5).

Two real ``run_scheduler`` processes share four due schedules whose hand-offs are slow: each
takes longer than half a lease, so the batch outlasts its leases several times. The first
scheduler claims them all; the second starts while the first is still handing them off and
looks for runs whose lease expired every half second. Each occurrence must take effect once:
one receipt per key at a receiver that dedupes on it, no repeat, and no run taken over (its
``attempts`` stays 1). The slowness is real in each case: an inline task that sleeps, Django's
immediate backend running such a task inside ``enqueue()``, a Celery publish held by Celery's
own ``before_task_publish`` hook, an RQ enqueue through a slow network to Redis, and a webhook
receiver that answers late."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run

from .models import Receipt, Redelivery
from .support.handoff import empty_queue
from .support.processes import Schedulers, subprocess_env, wait_for
from .support.schedules import make_schedule
from .support.slow_proxy import SlowProxy
from .support.webhook_receiver import SECRET, webhook_receiver

OCCURRENCES = 4
LEASE_SECONDS = 2.0
HAND_OFF_SECONDS = 1.5  # each: the batch takes three leases


@dataclass
class Case:
    """How one dispatcher is made slow, and where its effects are counted."""

    backend: str
    options: dict[str, Any]
    task: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    dispatch_options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    workers: list[list[str]] = field(default_factory=list)  # argv of real workers to start
    # Effects per key; by default the receipts of the receiver that dedupes.
    effects: Callable[[], Counter[str]] | None = None


def receipts() -> Counter[str]:
    counts = Counter(Receipt.objects.values_list("key", flat=True))
    counts.update(Redelivery.objects.values_list("key", flat=True))
    return counts


@pytest.fixture
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    name = request.param
    if name == "inline":
        yield Case(
            "django_schedulinator.dispatch.inline.InlineDispatcher",
            {"MAX_WORKERS": 1},
            "tests.slow_receipt",
            kwargs={"seconds": HAND_OFF_SECONDS},
        )
    elif name == "tasks":
        yield Case(
            "django_schedulinator.dispatch.tasks.TasksDispatcher",
            {"BACKEND_ALIAS": "immediate"},  # the task runs inside enqueue()
            "tests.django.slow_receipt",
            kwargs={"seconds": HAND_OFF_SECONDS},
        )
    elif name == "celery":
        from .support.celery_support import QUEUE, purge, worker_argv

        purge()
        yield Case(
            "django_schedulinator.dispatch.celery.CeleryDispatcher",
            {"APP": "tests.support.celery_app.app", "REPORTS_OUTCOMES": True},
            "tests.celery.receipt",
            dispatch_options={"queue": QUEUE},
            env={"SCHEDULINATOR_TEST_SLOW_PUBLISH": str(HAND_OFF_SECONDS)},
            workers=[worker_argv()],
        )
        purge()
    elif name == "rq":
        import sys

        queue = django_settings.RQ_TEST_QUEUE
        empty_queue(queue)
        # An enqueue waits for two answers from Redis: each comes half the hand-off late.
        redis = urlsplit(django_settings.REDIS_URL)  # the suite's Redis, wherever it is
        proxy = SlowProxy(redis.port or 6379, HAND_OFF_SECONDS / 2)
        yield Case(
            "django_schedulinator.dispatch.rq.RQDispatcher",
            {"QUEUE": queue},
            "tests.receipt",
            env={"SCHEDULINATOR_TEST_BROKER_URL": proxy.url(int(redis.path.strip("/") or 0))},
            workers=[[sys.executable, "-m", "django", "rqworker", queue]],
        )
        proxy.close()
        empty_queue(queue)
    else:
        with webhook_receiver() as receiver:
            receiver.delays["/hook"] = HAND_OFF_SECONDS
            yield Case(
                "django_schedulinator.dispatch.webhook.WebhookDispatcher",
                {
                    "TARGETS": {"hooks": {"URL": f"{receiver.url}/hook", "SECRET": SECRET}},
                    "MAX_CONCURRENCY": 1,
                },
                "tests.record",
                dispatch_options={"target": "hooks"},
                effects=lambda: Counter(receiver.keys()),
            )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the schedulers and workers see the rows
@pytest.mark.parametrize("case", ["inline", "tasks", "celery", "rq", "webhook"], indirect=True)
def test_two_schedulers_and_a_slow_hand_off_give_one_effect_per_occurrence(
    case: Case, settings: Any, built_index: DueIndex, key_prefix: str, schedulers: Schedulers
) -> None:
    dispatchers = {"slow": {"BACKEND": case.backend, "OPTIONS": case.options}}
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": dispatchers}
    schedules = [
        make_schedule(
            task=case.task,
            kwargs=case.kwargs,
            dispatcher="slow",
            dispatch_options=case.dispatch_options,
            next_run_at=timezone.now() - timedelta(seconds=1),
        )
        for _ in range(OCCURRENCES)
    ]
    for argv in case.workers:
        schedulers.popen(argv)
    env = subprocess_env(
        key_prefix,
        SCHEDULINATOR_TEST_LEASE=str(LEASE_SECONDS),
        SCHEDULINATOR_TEST_DISPATCHERS=json.dumps(dispatchers),
        **case.env,
    )
    runs = Run.objects.filter(schedule__in=schedules)

    schedulers.start("--max-seconds", "120", env=env)
    wait_for(lambda: runs.count() == OCCURRENCES, timeout=60)  # one batch, all of them
    schedulers.start("--max-seconds", "120", env=env)  # while the first hands them off

    # Ended: recorded by the scheduler, or reported by the worker.
    wait_for(lambda: not runs.filter(status__in=[*Run.UNFINISHED, "dispatched"]).exists(), 90)
    keys = {run.idempotency_key for run in runs}
    effects = case.effects or receipts
    wait_for(lambda: set(effects()) >= keys, timeout=60)

    assert sorted(runs.values_list("status", flat=True)) == ["succeeded"] * OCCURRENCES
    assert sorted(runs.values_list("attempts", flat=True)) == [1] * OCCURRENCES  # none taken over
    assert effects() == Counter(dict.fromkeys(keys, 1))
