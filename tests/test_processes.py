"""Real run_scheduler subprocesses: concurrency, crashes, signals, a lost index, rebuilds."""

from __future__ import annotations

import io
import signal
import sys
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db.models import Count
from django.utils import timezone

from django_schedulinator import resync_schedules
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule

from .models import Delivery
from .support.processes import Schedulers, output, wait_for
from .support.schedules import make_due, make_schedule

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.subprocess]


def assert_exactly_once(expected: int) -> None:
    """The ledger and the receiver both saw each occurrence exactly once."""
    assert Run.objects.count() == expected
    assert Run.objects.values("schedule_id", "scheduled_for").distinct().count() == expected
    assert Delivery.objects.count() == expected
    duplicates = Delivery.objects.values("key").annotate(n=Count("id")).filter(n__gt=1)
    assert list(duplicates) == []


def test_two_schedulers_fire_1000_occurrences_exactly_once(
    built_index: DueIndex, schedulers: Schedulers
) -> None:
    ids = make_due(1000)
    resync_schedules(ids)

    procs = [
        schedulers.start(
            "--once", "--batch-size", "50", "--worker-id", f"w{i}", "--max-seconds", "120"
        )
        for i in range(2)
    ]
    for proc in procs:
        assert proc.wait(timeout=180) == 0, output(proc)

    assert_exactly_once(1000)
    workers = set(Run.objects.values_list("worker_id", flat=True))
    assert workers <= {"w0", "w1"}
    assert built_index.client.zcard(built_index.inflight_key) == 0
    assert built_index.client.zcard(built_index.due_key) == 1000  # each at its next hour


@pytest.mark.parametrize("stage", ["claim", "advance"])
def test_a_scheduler_killed_mid_way_loses_nothing_and_fires_once(
    stage: str, built_index: DueIndex, schedulers: Schedulers
) -> None:
    ids = make_due(20)
    resync_schedules(ids)
    doomed = schedulers.popen([sys.executable, "-m", "tests.support.hang_after", stage, "20"])
    line = doomed.stdout.readline() if doomed.stdout else ""
    assert line.strip() in {"claimed 20", "advanced 20"}, line + output(doomed)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    assert built_index.client.zcard(built_index.inflight_key) == (20 if stage == "claim" else 0)

    time.sleep(2.2)  # the doomed process's 2 s leases expire
    survivor = schedulers.start("--once", "--max-seconds", "60")
    assert survivor.wait(timeout=90) == 0

    assert_exactly_once(20)
    if stage == "advance":
        # Crashed after the commit, before its hand-off: the claim counted that hand-off
        # (a process that dies after its claim may have made it), so the survivor's, with
        # the same keys, is the second.
        assert set(Run.objects.values_list("attempts", flat=True)) == {2}
        assert set(Delivery.objects.values_list("attempt", flat=True)) == {2}


def test_sigterm_finishes_the_current_batch_and_exits_0(
    built_index: DueIndex, schedulers: Schedulers
) -> None:
    ids = make_due(3, task="tests.slow")
    resync_schedules(ids)
    proc = schedulers.start("--max-seconds", "60")

    def claimed() -> bool:
        """a run to be pending"""
        return Run.objects.filter(status=Run.Status.PENDING).exists()

    wait_for(claimed)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, output(proc)
    # The batch in hand was finished, not abandoned.
    assert Run.objects.count() == 3
    assert set(Run.objects.values_list("status", flat=True)) == {Run.Status.SUCCEEDED}
    assert Delivery.objects.count() == 3


def test_a_flushed_index_is_rebuilt_by_exactly_one_scheduler(
    built_index: DueIndex, schedulers: Schedulers
) -> None:
    ids = make_due(300)
    resync_schedules(ids)
    built_index.drop()  # what FLUSHALL or an empty restart does to our keys
    assert not built_index.is_built()

    procs = [schedulers.start("--once", "--max-seconds", "90", "-v", "1") for _ in range(3)]
    logs = []
    for proc in procs:
        assert proc.wait(timeout=120) == 0
        logs.append(output(proc))

    assert sum("built it from 300 schedules" in log for log in logs) == 1, logs
    assert built_index.is_built()
    assert_exactly_once(300)


def test_rebuilding_while_a_scheduler_runs_loses_no_occurrence(
    built_index: DueIndex, schedulers: Schedulers
) -> None:
    start = timezone.now() + timedelta(seconds=2)
    expected = 150
    for i in range(expected):
        make_schedule(kind="once", run_at=start + timedelta(milliseconds=40 * i))
    proc = schedulers.start("--max-seconds", "120")

    rebuilds = 0
    while Delivery.objects.count() < expected and rebuilds < 200:
        call_command("rebuild_due_index", "--no-progress", stdout=io.StringIO())
        rebuilds += 1

    def all_fired() -> bool:
        """every one-off to fire"""
        return Delivery.objects.count() >= expected

    try:
        wait_for(all_fired, timeout=60)
    except AssertionError:
        statuses = dict(Run.objects.values_list("status").annotate(n=Count("id")))
        failed = Run.objects.filter(status="failed").values_list("error", flat=True).first()
        due = Schedule.objects.filter(next_run_at__isnull=False).values_list("pk", "next_run_at")
        scores = built_index.scores([pk for pk, _ in due])
        raise AssertionError(
            f"runs by status {statuses}, a failure: {failed}; not fired yet (row, index "
            f"score): {[(pk, at, scores[pk]) for pk, at in due][:10]}; in flight "
            f"{built_index.client.zrange(built_index.inflight_key, 0, 10, withscores=True)}; "
            f"scheduler alive: {proc.poll() is None}"
        ) from None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert rebuilds >= 3
    assert_exactly_once(expected)
    assert Schedule.objects.filter(next_run_at__isnull=True).count() == expected
