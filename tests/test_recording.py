"""The recorder (recording.py): a running scheduler's lanes hand what their dispatchers
returned to one thread that writes it, so a lane goes on to its next batch at once. Batches
that wait for it are written together; their runs stay leased until they are; a stop
writes what waits."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_schedulinator.index.due import get_index
from django_schedulinator.models import Run
from django_schedulinator.operations.heartbeat import HeartbeatKeeper, RecorderBacklog, alive
from django_schedulinator.operations.metrics import serve
from django_schedulinator.scheduler.held import HeldRuns
from django_schedulinator.scheduler.leases import Leased
from django_schedulinator.scheduler.worker import Worker

from .support.processes import get, wait_for
from .support.schedules import make_schedule

pytestmark = [
    pytest.mark.django_db(transaction=True),  # the lanes' threads commit
    pytest.mark.usefixtures("built_index"),
]


def commit_batches(worker: Worker, count: int) -> list[Leased]:
    """``count`` committed batches of one due schedule each, not dispatched yet."""
    batches = []
    for _ in range(count):
        make_schedule(next_run_at=timezone.now() - timedelta(seconds=5))
        batch, token = worker.claimer.claim(10)
        occurrences, _counters = worker.claimer.commit(worker.claimer.recheck(batch), token)
        assert len(occurrences) == 1
        batches.append(Leased(occurrences, token, time.monotonic(), counted=True))
    return batches


def counting_writes(held: HeldRuns) -> list[int]:
    """The number of batches each outcome write of the held runs carried, as they happen."""
    writes: list[int] = []
    record = held.record

    def counted(batches: Any, dispatcher: Any) -> set[int]:
        writes.append(len(batches))
        return record(batches, dispatcher)

    held.record = counted  # type: ignore[method-assign]
    return writes


def test_a_stop_records_every_batch_the_lanes_handed_over() -> None:
    worker = Worker(worker_id="t")
    batches = commit_batches(worker, 5)
    worker.lanes.start()
    for leased in batches:
        worker.lanes.put(leased)
    worker.lanes.stop()

    runs = Run.objects.all()
    assert runs.count() == 5
    assert set(runs.values_list("status", "lease_expires_at")) == {("succeeded", None)}
    assert all(run.dispatched_at is not None for run in runs)


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="row locks")
def test_batches_that_wait_for_a_held_up_recorder_are_written_together_and_stay_leased(
    settings: Any,
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "LOCK_TIMEOUT_SECONDS": 0.2}
    worker = Worker(worker_id="t")
    writes = counting_writes(worker.held)
    first, *rest = commit_batches(worker, 4)
    held = threading.Event()
    release = threading.Event()

    def hold_the_first_run() -> None:
        # Another transaction holds the first batch's run: its write waits and retries.
        with transaction.atomic():
            Run.objects.select_for_update().get(pk=first.occurrences[0].run_id)
            held.set()
            release.wait(10)
        connection.close()

    holder = threading.Thread(target=hold_the_first_run)
    holder.start()
    held.wait(10)
    worker.lanes.start()
    try:
        worker.lanes.put(first)
        wait_for(lambda: writes)  # the recorder took it, and waits for the row
        for leased in rest:
            worker.lanes.put(leased)  # the lane hands these off meanwhile
        recorder = worker.lanes.recorder
        assert recorder is not None
        wait_for(lambda: recorder.depth() == len(rest))
        # Not recorded yet, and still this scheduler's: no other can take them over.
        assert Run.objects.filter(status="pending").count() == 4
        assert worker.claimer.take_over_expired(worker.claimer.clock.now_ms(), 10)[0] == []
    finally:
        release.set()
        holder.join(10)
    wait_for(lambda: not Run.objects.filter(status="pending").exists())
    worker.lanes.stop()
    assert set(Run.objects.values_list("status", flat=True)) == {"succeeded"}
    # The three that waited went in one transaction after the first batch's own.
    assert writes[-1] == len(rest), writes


def test_the_recorders_backlog_is_in_the_heartbeat_and_the_metrics() -> None:
    """Outcomes waiting to be written are a backlog like a lane's (issue 32, item 20): the
    heartbeat (scheduler_status, the API) and /metrics say how many, and for how long."""
    worker = Worker(worker_id="t")
    first, *rest = commit_batches(worker, 3)
    writing, release = threading.Event(), threading.Event()
    record = worker.held.record

    def held(batches: Any, dispatcher: Any) -> set[int]:
        writing.set()
        release.wait(30)  # the database is slow: the recorder waits in its write
        return record(batches, dispatcher)

    worker.held.record = held  # type: ignore[method-assign]
    server = serve(worker, port=0, addr="127.0.0.1")
    index = get_index()
    keeper = HeartbeatKeeper(worker, index, every=60)
    worker.lanes.start()
    try:
        assert keeper.beat().recorder == RecorderBacklog(0, 0, None)
        worker.lanes.put(first)
        writing.wait(30)
        for leased in rest:
            worker.lanes.put(leased)
        wait_for(lambda: worker.recorder_backlog()[0] == 3)

        keeper.beat()
        [beat] = alive(index)
        assert (beat.recorder.batches, beat.recorder.outcomes) == (3, 3)
        assert beat.recorder.oldest_seconds is not None
        assert beat.recorder.oldest_seconds > 0
        assert beat.as_dict()["recorder"]["outcomes"] == 3
        scraped = get(server.port, "/metrics").text
        assert "schedulinator_recorder_batches 3.0" in scraped
        assert "schedulinator_recorder_outcomes 3.0" in scraped
        oldest = re.search(r"^schedulinator_recorder_oldest_seconds (\S+)$", scraped, re.M)
        assert oldest is not None
        assert float(oldest.group(1)) > 0
    finally:
        release.set()
        wait_for(lambda: worker.recorder_backlog() == (0, 0, None))
        worker.lanes.stop()
        server.close()
        keeper.remove()
    assert set(Run.objects.values_list("status", flat=True)) == {"succeeded"}
