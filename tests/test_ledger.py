"""The ledger (``django_schedulinator/ledger.py``): every write of ``Run`` rows, seen through
the scheduler that makes them."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_schedulinator.index import DueIndex
from django_schedulinator.models import Run
from django_schedulinator.worker import Worker

from .conftest import make_schedule
from .models import Delivery

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


# -- run status -------------------------------------------------------------------------------


def test_a_long_task_is_recorded_running_while_it_runs(built_index: DueIndex) -> None:
    schedule = make_schedule(task="tests.report_status", next_run_at=timezone.now())
    Worker(worker_id="test", once=True).run()

    run = Run.objects.get(schedule=schedule)
    assert run.status == Run.Status.SUCCEEDED
    assert Delivery.objects.get().payload == {"status_while_running": "running"}
