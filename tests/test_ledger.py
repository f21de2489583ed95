"""The ledger (``services/ledger.py``): every write of ``Run`` rows, seen through
the scheduler that makes them."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_schedulinator import resync_schedules
from django_schedulinator.dispatch import BaseDispatcher, Occurrence, Outcome, Progress
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run
from django_schedulinator.models.spans import Span
from django_schedulinator.scheduler.claiming import Claimer
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.services import ledger

from .models import Delivery
from .support.processes import looping, wait_for
from .support.schedules import make_due, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


# -- run status -------------------------------------------------------------------------------


def test_a_long_task_is_recorded_running_while_it_runs(built_index: DueIndex) -> None:
    schedule = make_schedule(task="tests.report_status", next_run_at=timezone.now())
    Worker(worker_id="test", once=True).run()

    run = Run.objects.get(schedule=schedule)
    assert run.status == Run.Status.SUCCEEDED
    assert Delivery.objects.get().payload == {"status_while_running": "running"}


# -- leases held by a claim token -------------------------------------------------------------


def test_a_batch_taken_over_while_queued_is_not_dispatched_twice(built_index: DueIndex) -> None:
    make_due(3)
    resync_schedules()
    slow = Claimer(worker_id="slow", lease_seconds=0.2, index=built_index)
    batch, token = slow.claim(10)
    occurrences, _ = slow.commit(slow.recheck(batch), token)
    assert len(occurrences) == 3
    time.sleep(0.3)  # the batch waited in "slow"'s queue past its lease
    fast = Claimer(worker_id="fast", lease_seconds=30, index=built_index)
    taken, fast_token, _counters = fast.take_over_expired(built_index.now_ms(), 10)
    assert len(taken) == 3

    span = Span.of(o.scheduled_for for o in occurrences)
    assert slow.held_runs().renew_leases([o.run_id for o in occurrences], token, span=span) == set()
    renewed = fast.held_runs().renew_leases([o.run_id for o in taken], fast_token, span=span)
    assert renewed == {o.run_id for o in taken}


# -- attempts count hand-offs ----------------------------------------------------------------


class StuckThenFlaky(BaseDispatcher):
    """A broker that hangs until ``release`` is set, then refuses each occurrence's first
    hand-off ("retry") and takes the second. ``handed`` lists every hand-off (key,
    attempt), made when ``dispatch`` is called."""

    release = threading.Event()
    handed: ClassVar[list[tuple[str, int]]] = []
    reports_outcomes = True

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        self.handed.extend((o.key, o.attempt) for o in occurrences)
        while not self.release.wait(0.05):
            progress.keepalive()
        seen = Counter(key for key, _attempt in self.handed)
        return [
            Outcome(o.run_id, "retry", "broker hiccup")
            if seen[o.key] == 1
            else Outcome(o.run_id, "succeeded")
            for o in occurrences
        ]


def test_runs_that_wait_in_a_stuck_lane_keep_their_attempts(
    settings: Any, built_index: DueIndex
) -> None:
    """A lane that is stuck leaves its new runs pending; each lease that ends, a take-over
    sends them to the same lane, which is still full. Those take-overs are not hand-offs:
    with MAX_ATTEMPTS 3, every run must still get its three hand-offs once the broker is
    back (they failed after one, "Handed off 4 time(s)")."""
    StuckThenFlaky.handed.clear()
    StuckThenFlaky.release.clear()
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"stuck": {"BACKEND": "tests.test_ledger.StuckThenFlaky",
                                  "OPTIONS": {"MAX_ATTEMPTS": 3, "RETRY_BACKOFF_SECONDS": 0.05}}},
    }  # fmt: skip
    # One run a batch: the lane holds one batch in dispatch and ten waiting, the rest stay
    # pending for a take-over.
    make_due(15, dispatcher="stuck")
    resync_schedules()
    worker = Worker(worker_id="t", batch_size=1, lease_seconds=0.5)

    with looping(worker):
        try:
            # Every run but the one in dispatch taken over and sent to the full lane three
            # times on average.
            wait_for(lambda: worker.counters.lane_full >= 3 * 14, timeout=120)
            assert StuckThenFlaky.handed[1:] == []  # only the stuck batch was handed off
        finally:
            StuckThenFlaky.release.set()
        wait_for(lambda: not Run.objects.filter(status__in=Run.UNFINISHED).exists(), timeout=120)

    runs = list(Run.objects.all())
    assert [(r.status, r.error) for r in runs] == [("succeeded", "")] * 15
    handed = Counter(key for key, _attempt in StuckThenFlaky.handed)
    assert {r.idempotency_key: r.attempts for r in runs} == handed
    assert set(handed.values()) == {2}  # refused once, then taken
    for run in runs:  # each hand-off says which one it is
        key = run.idempotency_key
        assert [a for k, a in StuckThenFlaky.handed if k == key] == [1, 2]


# -- what receivers said of each run ---------------------------------------------------------


def committed_runs(index: DueIndex, count: int) -> list[Occurrence]:
    make_due(count)
    resync_schedules()
    claimer = Claimer(worker_id="t", lease_seconds=30, index=index)
    batch, token = claimer.claim(count)
    occurrences, _ = claimer.commit(claimer.recheck(batch), token)
    assert len(occurrences) == count
    return occurrences


def record(outcomes: list[Outcome]) -> None:
    now = timezone.now()
    with transaction.atomic():
        ledger.record_outcomes(outcomes, dispatched_at=now, now=now, using="default", span=None)


def test_each_run_keeps_what_its_receiver_said_and_the_others_keep_theirs(
    built_index: DueIndex,
) -> None:
    a, b, c, d, e = (o.run_id for o in committed_runs(built_index, 5))
    record(
        [
            Outcome(a, "dispatched", external_id="job-a", response_status=202),
            Outcome(b, "dispatched"),  # said nothing
            Outcome(c, "succeeded", output="done: 'c' \"quoted\" \u00e9", response_status=None),
            Outcome(d, "succeeded", external_id="x" * 300),  # cut to the column's 255
            Outcome(e, "succeeded"),
        ]
    )

    receipts = {
        run.pk: (run.status, run.external_id, run.response_status, run.output)
        for run in Run.objects.all()
    }
    assert receipts == {
        a: ("dispatched", "job-a", 202, ""),
        b: ("dispatched", "", None, ""),
        c: ("succeeded", "", None, "done: 'c' \"quoted\" \u00e9"),
        d: ("succeeded", "x" * 255, None, ""),
        e: ("succeeded", "", None, ""),
    }


def test_recording_what_receivers_said_is_one_statement_whatever_the_batch(
    built_index: DueIndex,
) -> None:
    """The ids of a batch's runs reach the database as one parameter, not as a CASE with a
    WHEN per run: Django took about a millisecond per run to build and compile that, which
    held every dispatcher that returns ids (Celery, RQ, webhooks) to about 600 hand-offs a
    second (benchmarks/dispatchers.py)."""
    occurrences = committed_runs(built_index, 40)
    parameters: list[int] = []

    def counting(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip().upper().startswith("UPDATE"):
            parameters.append(len(params or ()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counting):
        record(
            [Outcome(o.run_id, "succeeded", external_id=f"job-{o.run_id}") for o in occurrences[:4]]
        )
        record(
            [Outcome(o.run_id, "succeeded", external_id=f"job-{o.run_id}") for o in occurrences[4:]]
        )

    assert len(parameters) == 2
    assert parameters[0] == parameters[1]  # 4 runs or 36: the same statement
    assert set(Run.objects.values_list("external_id", flat=True)) == {
        f"job-{o.run_id}" for o in occurrences
    }
