"""The ledger (``django_schedulinator/ledger.py``): every write of ``Run`` rows, seen through
the scheduler that makes them."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from django_schedulinator import resync_schedules
from django_schedulinator.claiming import Claimer
from django_schedulinator.index import DueIndex
from django_schedulinator.models import Run
from django_schedulinator.worker import Worker

from .conftest import make_due, make_schedule
from .models import Delivery

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
    occurrences, _ = slow.advance(batch, token)
    assert len(occurrences) == 3
    time.sleep(0.3)  # the batch waited in "slow"'s queue past its lease
    fast = Claimer(worker_id="fast", lease_seconds=30, index=built_index)
    taken, fast_token = fast.take_over_expired(built_index.now_ms(), 10)
    assert len(taken) == 3

    assert slow.renew_leases([o.run_id for o in occurrences], token) == set()
    assert fast.renew_leases([o.run_id for o in taken], fast_token) == {o.run_id for o in taken}
