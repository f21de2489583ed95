"""The signals of ``django_schedulinator.signals``: each sent once, after the commit that
made its event true, with the arguments docs/signals.md lists; a receiver that raises is
logged and changes nothing for the scheduler."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from django_schedulinator import outcomes, resync_schedules, services, signals
from django_schedulinator.index.due import DueIndex
from django_schedulinator.index.rebuild import rebuild_index
from django_schedulinator.models import Run, Schedule
from django_schedulinator.models.keys import occurrence_key
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import to_ms

from .support.schedules import make_due, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)  # sent after real commits


class Heard:
    """What a receiver connected to ``signal`` heard: its keyword arguments, each call, and
    whether the event was committed when it came (seen from another connection's view is
    not needed: on_commit runs after the commit on this one)."""

    def __init__(self, signal: Signal) -> None:
        self.signal = signal
        self.calls: list[dict[str, Any]] = []

    def __call__(self, sender: Any, **kwargs: Any) -> None:
        kwargs.pop("signal")
        self.calls.append({"sender": sender, **kwargs})


@pytest.fixture
def hear() -> Iterator[Any]:
    connected: list[Heard] = []

    def hear(signal: Signal) -> Heard:
        heard = Heard(signal)
        signal.connect(heard, weak=False)
        connected.append(heard)
        return heard

    yield hear
    for heard in connected:
        heard.signal.disconnect(heard)


def run_once(**options: Any) -> Worker:
    worker = Worker(once=True, worker_id="signals", **options)
    worker.run()
    return worker


def test_a_fired_occurrence_and_its_end_are_announced_once(built_index: DueIndex, hear) -> None:
    fired, finished = hear(signals.occurrence_fired), hear(signals.run_finished)
    fired_seen_in_ledger: list[bool] = []
    signals.occurrence_fired.connect(
        lambda sender, occurrence, **kw: fired_seen_in_ledger.append(
            Run.objects.filter(pk=occurrence.run_id).exists()
        ),
        weak=False,
        dispatch_uid="seen",
    )
    try:
        ok, bad = make_due(1), make_due(1, task="tests.boom")
        resync_schedules(ok + bad)
        run_once()
    finally:
        signals.occurrence_fired.disconnect(dispatch_uid="seen")

    assert sorted(c["occurrence"].schedule_id for c in fired.calls) == sorted(ok + bad)
    assert {c["sender"] for c in fired.calls} == {Schedule}
    assert {c["worker_id"] for c in fired.calls} == {"signals"}
    assert fired_seen_in_ledger == [True, True]  # committed before it was announced
    by_schedule = {c["schedule_id"]: c for c in finished.calls}
    assert len(finished.calls) == 2
    run = Run.objects.get(schedule_id=ok[0])
    assert by_schedule[ok[0]] | {"sender": None} == {
        "sender": None,
        "run_id": run.pk,
        "schedule_id": ok[0],
        "scheduled_for": run.scheduled_for,
        "key": occurrence_key(ok[0], run.scheduled_for),
        "status": "succeeded",
        "error": "",
    }
    assert by_schedule[ok[0]]["sender"] is Run
    assert by_schedule[bad[0]]["status"] == "failed"
    assert by_schedule[bad[0]]["error"]


def test_a_hand_off_is_announced_and_its_reported_end_too(
    built_index: DueIndex, settings: Any, hear
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "default": {
                "BACKEND": "tests.support.dispatchers.HandOff",
                "OPTIONS": {"REPORTS": True},
            }
        },
    }
    handed, finished = hear(signals.run_handed_off), hear(signals.run_finished)
    [sid] = make_due(1)
    resync_schedules([sid])
    run_once()

    run = Run.objects.get(schedule_id=sid)
    [call] = handed.calls
    assert (call["run_id"], call["key"]) == (run.pk, run.idempotency_key)
    assert (call["dispatcher"], call["awaits_outcome"]) == ("default", True)
    assert finished.calls == []

    assert outcomes.report_finished(run.idempotency_key, succeeded=False, error="worker died")
    [end] = finished.calls
    assert (end["run_id"], end["status"], end["error"]) == (run.pk, "failed", "worker died")
    # A second report ends nothing, and says nothing.
    assert not outcomes.report_finished(run.idempotency_key, succeeded=True)
    assert len(finished.calls) == 1


def test_a_run_now_fires_once_when_the_scheduler_takes_it(built_index: DueIndex, hear) -> None:
    fired = hear(signals.occurrence_fired)
    schedule = make_schedule(next_run_at=timezone.now() + timedelta(hours=1))
    services.run_now(schedule)
    run_once()
    [call] = fired.calls
    assert call["occurrence"].schedule_id == schedule.pk
    assert call["occurrence"].attempt == 1


def test_pauses_are_announced_after_commit_and_not_when_rolled_back(
    built_index: DueIndex, hear
) -> None:
    paused = hear(signals.schedule_paused)
    schedule = make_schedule()
    with transaction.atomic():
        services.pause(schedule, note="maintenance")
        transaction.set_rollback(True)
    assert paused.calls == []
    schedule.refresh_from_db()

    services.pause(schedule, note="maintenance")
    assert [(c["schedule_id"], c["note"], c["auto"]) for c in paused.calls] == [
        (schedule.pk, "maintenance", False)
    ]


def test_an_auto_pause_is_announced(built_index: DueIndex, hear) -> None:
    paused = hear(signals.schedule_paused)
    [sid] = make_due(1, task="tests.boom", pause_after_failures=1)
    resync_schedules([sid])
    run_once()
    [call] = paused.calls
    assert (call["schedule_id"], call["auto"]) == (sid, True)
    assert call["note"]


def test_a_repaired_entry_and_a_rebuild_are_announced(built_index: DueIndex, hear) -> None:
    repaired, rebuilt = hear(signals.entry_repaired), hear(signals.index_rebuilt)
    schedule = make_schedule(next_run_at=timezone.now() + timedelta(hours=1))
    stale_ms = to_ms(timezone.now() - timedelta(minutes=1))
    built_index.client.zadd(built_index.due_key, {str(schedule.pk): stale_ms})
    run_once()
    [call] = repaired.calls
    assert call == {
        "sender": Schedule,
        "schedule_id": schedule.pk,
        "entry_ms": stale_ms,
        "due_ms": to_ms(schedule.next_run_at),
    }
    assert not Run.objects.exists()

    rebuild_index(built_index, built_by="tests")
    [call] = rebuilt.calls
    assert (call["sender"], call["built_by"], call["rows"]) == (DueIndex, "tests", 1)


def test_a_receiver_that_raises_is_logged_and_the_batch_goes_on(
    built_index: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(sender: Any, **kwargs: Any) -> None:
        raise ValueError("receiver bug")

    signals.occurrence_fired.connect(broken, weak=False, dispatch_uid="broken")
    try:
        due = make_due(3)
        resync_schedules(due)
        worker = run_once()
    finally:
        signals.occurrence_fired.disconnect(dispatch_uid="broken")
    assert worker.counters.fired == 3
    assert Run.objects.filter(status=Run.Status.SUCCEEDED).count() == 3
    assert caplog.text.count("A receiver of a schedulinator signal raised") == 3
    assert "receiver bug" in caplog.text
