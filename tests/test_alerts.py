"""Missed-run alerts (``alerts.py``): an occurrence with no successful run within its
schedule's grace is raised once, with the reason of what its run was at; nothing is raised
while runs succeed in time. The check takes "now" as an argument: a test asks it about a
moment past the grace instead of waiting for it."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction
from django.utils import timezone

from django_schedulinator import outcomes, resync_schedules, services, signals
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.operations import alerts
from django_schedulinator.scheduler.claiming import Claimer
from django_schedulinator.scheduler.transient import bound_lock_waits
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import truncate_ms

from .support.commits import committed
from .support.dispatchers import HandOff
from .support.handoff import fire
from .support.heartbeats import beat
from .support.passes import check_alerts
from .support.processes import looping, wait_for
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db

GRACE = timedelta(minutes=5)
REPORTING = {"BACKEND": "tests.support.dispatchers.HandOff", "OPTIONS": {"REPORTS": True}}
NOT_REPORTING = {"BACKEND": "tests.support.dispatchers.HandOff", "OPTIONS": {}}


@pytest.fixture(autouse=True)
def dispatchers(settings: Any, built_index: DueIndex) -> None:
    HandOff.received.clear()
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"queue": REPORTING, "fire-and-forget": NOT_REPORTING},
        "NOTIFY": None,  # test_notify.py tells of them
    }


class Heard:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, sender: Any, **kwargs: Any) -> None:
        kwargs.pop("signal")
        with self.lock:
            self.calls.append({"sender": sender, **kwargs})


@pytest.fixture
def missed() -> Iterator[Heard]:
    """What ``run_missed`` announced."""
    heard = Heard()
    signals.run_missed.connect(heard, weak=False)
    yield heard
    signals.run_missed.disconnect(heard)


def due(**fields: Any) -> Schedule:
    """A schedule with a grace, due five seconds ago."""
    fields.setdefault("grace", GRACE)
    fields.setdefault("next_run_at", truncate_ms(timezone.now() - timedelta(seconds=5)))
    fields.setdefault("kind", "interval")
    if fields["kind"] == "interval":
        fields.setdefault("interval", timedelta(hours=1))
    return make_schedule(**fields)


def after_grace(extra: timedelta = timedelta(seconds=1)) -> datetime:
    """A moment past the grace of everything a test made just now."""
    return timezone.now() + GRACE + extra


def run_of(schedule: Schedule) -> Run:
    return Run.objects.filter(schedule=schedule).latest("scheduled_for")


def reasons(found: list[alerts.Missed]) -> dict[int, str]:
    return {m.schedule_id: m.reason for m in found}


# -- each reason -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_run_that_succeeds_in_time_is_never_raised(missed: Heard) -> None:
    schedule = due(task="tests.noop")
    fire()
    run = run_of(schedule)
    assert run.status == "succeeded"
    assert run.alert_at is None  # cleared by the UPDATE that recorded the success

    assert check_alerts(after_grace()) == []
    assert missed.calls == []
    schedule.refresh_from_db()
    assert schedule.missed_at is None


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_failed_run_is_raised_once_its_grace_has_passed(missed: Heard) -> None:
    schedule = due(task="tests.boom")
    fire()
    run = run_of(schedule)
    assert run.status == "failed"
    assert run.alert_at == run.scheduled_for + GRACE

    alert_at = run.alert_at
    assert check_alerts(alert_at - timedelta(milliseconds=1)) == []  # not yet
    [found] = check_alerts(alert_at)
    assert found == alerts.Missed(schedule.pk, run.scheduled_for, run.pk, "failed", GRACE)
    assert check_alerts(alert_at + timedelta(minutes=1)) == []  # raised once

    run.refresh_from_db()
    assert (run.alert_at, run.missed_at) == (None, alert_at)  # found at the "now" given
    schedule.refresh_from_db()
    assert schedule.missed_at == run.scheduled_for  # the mark of the admin and the API
    assert missed.calls == [
        {
            "sender": Schedule,
            "schedule_id": schedule.pk,
            "scheduled_for": run.scheduled_for,
            "run_id": run.pk,
            "reason": "failed",
            "grace": GRACE,
        }
    ]


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_handed_off_run_whose_end_is_never_reported_has_no_outcome() -> None:
    schedule = due(dispatcher="queue")
    fire()
    assert run_of(schedule).status == "dispatched"
    assert reasons(check_alerts(after_grace())) == {schedule.pk: "no_outcome"}


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_run_reported_started_and_not_ended_is_running() -> None:
    schedule = due(dispatcher="queue")
    fire()
    assert outcomes.report_started(run_of(schedule).idempotency_key)
    assert reasons(check_alerts(after_grace())) == {schedule.pk: "running"}


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_reported_success_clears_the_wait_and_a_reported_failure_is_raised() -> None:
    ok, bad = due(dispatcher="queue"), due(dispatcher="queue")
    fire()
    assert outcomes.report_finished(run_of(ok).idempotency_key, succeeded=True)
    assert outcomes.report_finished(run_of(bad).idempotency_key, succeeded=False, error="x")
    assert run_of(ok).alert_at is None
    assert reasons(check_alerts(after_grace())) == {bad.pk: "failed"}


def test_a_run_claimed_and_never_handed_off_was_not_handed_off() -> None:
    schedule = due()
    claimer = Claimer(worker_id="stuck", lease_seconds=30)
    batch, token = claimer.claim(10)
    claimer.commit(claimer.recheck(batch), token)  # committed, and never dispatched (a lane stuck)
    assert run_of(schedule).status == "pending"
    assert reasons(check_alerts(after_grace())) == {schedule.pk: "not_handed_off"}


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_run_waiting_for_the_previous_one_is_buffered() -> None:
    schedule = due(dispatcher="queue", overlap="buffer")
    fire()
    fire(schedule)
    first, second = Run.objects.filter(schedule=schedule).order_by("scheduled_for")
    assert (first.status, second.status) == ("dispatched", "buffered")
    found = check_alerts(after_grace())
    assert {(m.run_id, m.reason) for m in found} == {
        (first.pk, "no_outcome"),
        (second.pk, "buffered"),
    }
    schedule.refresh_from_db()
    assert schedule.missed_at == second.scheduled_for  # the latest missed is the mark


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_an_occurrence_that_never_fired_is_raised_once(missed: Heard) -> None:
    """No scheduler ran: the schedule's next run passed its grace without a run."""
    schedule = due()
    nominal = schedule.next_run_at
    assert nominal is not None

    [found] = check_alerts(after_grace())
    assert found == alerts.Missed(schedule.pk, nominal, None, "not_fired", GRACE)
    assert check_alerts(after_grace(timedelta(hours=1))) == []
    schedule.refresh_from_db()
    assert schedule.missed_at == nominal
    assert [call["reason"] for call in missed.calls] == ["not_fired"]

    # The scheduler comes back and fires it late: its run is not raised a second time.
    fire()
    late = run_of(schedule)
    assert late.scheduled_for == nominal
    Run.objects.filter(pk=late.pk).update(status="failed", alert_at=nominal + GRACE)
    assert check_alerts(after_grace()) == []
    late.refresh_from_db()
    assert (late.alert_at, late.missed_at is not None) == (None, True)


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_no_alert_for_schedules_without_a_grace_paused_or_finished() -> None:
    due(grace=None, task="tests.boom")
    paused = due()
    services.pause(paused)
    finished = due(kind="once", run_at=timezone.now() + timedelta(hours=1))
    Schedule.objects.filter(pk=finished.pk).update(next_run_at=None)
    fire()
    assert check_alerts(after_grace(timedelta(days=40))) == []


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_dispatcher_that_never_learns_outcomes_is_done_with_the_hand_off() -> None:
    schedule = due(dispatcher="fire-and-forget")
    fire()
    run = run_of(schedule)
    assert (run.status, run.alert_at) == ("dispatched", None)
    assert check_alerts(after_grace()) == []


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_clearing_the_grace_forgets_the_runs_that_waited(missed: Heard) -> None:
    schedule = due(task="tests.boom")
    fire()
    services.update(schedule, {"grace": None})
    assert check_alerts(after_grace()) == []
    assert run_of(schedule).alert_at is None
    assert missed.calls == []


def test_a_resume_that_hands_the_paused_period_to_catch_up_is_not_a_miss() -> None:
    """The occurrence left due by the resume counts its grace from the resume."""
    schedule = due()
    services.pause(schedule)
    Schedule.objects.filter(pk=schedule.pk).update(
        fired_through=None, next_run_at=truncate_ms(timezone.now() - 2 * GRACE)
    )
    services.resume(schedule, catch_up=True)
    assert check_alerts(timezone.now() + GRACE / 2) == []
    assert reasons(check_alerts(after_grace(timedelta(seconds=5)))) == {schedule.pk: "not_fired"}


def test_run_now_and_backfill_count_their_grace_from_when_they_were_queued() -> None:
    schedule = due(next_run_at=timezone.now() + timedelta(hours=1))
    now_run = services.run_now(schedule)
    services.backfill(
        schedule, timezone.now() - timedelta(days=3), timezone.now() - timedelta(days=2)
    )
    backfilled = Run.objects.filter(schedule=schedule, trigger="backfill")
    assert backfilled.exists()
    for run in [now_run, *backfilled]:
        run.refresh_from_db()
        assert run.alert_at is not None
        assert timezone.now() < run.alert_at <= timezone.now() + GRACE
    assert check_alerts() == []  # not yet: they were just queued
    found = check_alerts(after_grace())
    assert {m.reason for m in found} == {"not_handed_off"}
    assert len(found) == 1 + backfilled.count()


def test_a_run_cancelled_by_a_pause_is_not_a_miss() -> None:
    schedule = due()
    claimer = Claimer(worker_id="t", lease_seconds=30)
    batch, token = claimer.claim(10)
    [occurrence], _ = claimer.commit(claimer.recheck(batch), token)
    services.pause(schedule)
    assert claimer.held_runs().dispatchable([occurrence], token, counted=True) == ([], 1)
    run = run_of(schedule)
    assert (run.status, run.alert_at) == ("skipped", None)
    assert check_alerts(after_grace()) == []


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_skipped_occurrences_wait_for_nothing() -> None:
    schedule = due(catch_up="skip")
    Schedule.objects.filter(pk=schedule.pk).update(  # none of them within the misfire grace
        fired_through=None, next_run_at=truncate_ms(timezone.now() - timedelta(hours=3, minutes=30))
    )
    resync_schedules([schedule.pk])
    fire()
    runs = Run.objects.filter(schedule=schedule)
    assert {r.status for r in runs} == {"skipped"}
    assert all(r.alert_at is None for r in runs)


# -- exactly once, whoever checks ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # checkers on connections of their own
def test_two_checkers_at_once_raise_each_occurrence_exactly_once(missed: Heard) -> None:
    for _ in range(20):
        due(task="tests.boom")  # fires, and fails
    never = [due(next_run_at=timezone.now() + timedelta(hours=1)) for _ in range(20)]
    fire()
    # Their next run passes without a scheduler.
    Schedule.objects.filter(pk__in=[s.pk for s in never]).update(
        fired_through=None, next_run_at=truncate_ms(timezone.now() - timedelta(seconds=5))
    )
    now = after_grace()
    found: list[list[alerts.Missed]] = []
    start = threading.Barrier(4)

    def checker() -> None:
        try:
            start.wait()
            found.append(check_alerts(now, limit=7))  # several small batches each
            found.append(check_alerts(now))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=checker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    raised = [(m.schedule_id, m.scheduled_for) for batch in found for m in batch]
    assert len(raised) == len(set(raised)) == 40
    assert len(missed.calls) == 40
    assert {m.reason for batch in found for m in batch} == {"failed", "not_fired"}


@pytest.mark.django_db(transaction=True)  # a second connection holds the lock
def test_a_miss_whose_schedule_row_is_held_is_raised_by_the_check_after_the_lock_ends(
    settings: Any, missed: Heard
) -> None:
    """Issue 32, item 13: a transaction holds schedule rows (an admin edit, a migration)
    while a scheduler checks, its lock waits bounded as the loop's are. The check committed
    the run's mark, then failed on the schedule's lock: no signal, no mark on the schedule,
    and no later check found anything left to raise; the never-fired path the same. The
    misses of the held rows wait for a check after the lock; the others are raised now."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks that SQLite has not")
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "LOCK_TIMEOUT_SECONDS": 0.2}
    failing, free = due(task="tests.boom"), due(task="tests.boom")
    fire()
    never = due(next_run_at=timezone.now() + timedelta(hours=1))
    Schedule.objects.filter(pk=never.pk).update(  # its next run passes without a scheduler
        fired_through=None, next_run_at=truncate_ms(timezone.now() - timedelta(seconds=5))
    )
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(Schedule.objects.select_for_update().filter(pk__in=[failing.pk, never.pk]))
                locked.set()
                release.wait(60)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        bound_lock_waits()  # as in a scheduler's loop
        try:
            first = check_alerts(after_grace())
        finally:
            bound_lock_waits(False)
    finally:
        release.set()
        holder.join(60)
    assert reasons(first) == {free.pk: "failed"}  # the held rows' misses wait

    second = check_alerts(after_grace())
    assert reasons(second) == {failing.pk: "failed", never.pk: "not_fired"}
    assert check_alerts(after_grace()) == []
    assert sorted(call["schedule_id"] for call in missed.calls) == sorted(
        [free.pk, failing.pk, never.pk]
    )  # each announced once
    for schedule in (failing, free, never):
        schedule.refresh_from_db()
        assert schedule.missed_at is not None


# -- in a scheduler -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the loop runs on a thread of its own
def test_a_scheduler_raises_missed_runs_between_its_passes(settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MISSED_CHECK_SECONDS": 0.2}
    soon = truncate_ms(timezone.now() + timedelta(seconds=1))
    schedule = due(task="tests.boom", grace=timedelta(seconds=2), next_run_at=soon)
    ok = due(task="tests.noop", grace=timedelta(seconds=2), next_run_at=soon)
    worker = Worker(worker_id="checker")
    with looping(worker):
        wait_for(lambda: worker.counters.missed >= 1, timeout=30)
    assert worker.counters.missed == 1
    schedule.refresh_from_db()
    ok.refresh_from_db()
    assert schedule.missed_at is not None
    assert ok.missed_at is None


# -- no scheduler alive ------------------------------------------------------------------------


def test_no_scheduler_alive_is_raised_once_per_outage(index: DueIndex) -> None:
    heard = Heard()
    signals.schedulers_down.connect(heard, weak=False)
    try:
        assert alerts.no_scheduler_alive(False, index=index)
        assert not alerts.no_scheduler_alive(lambda: False, index=index)  # the same outage
        [call] = heard.calls
        assert call["sender"] is DueIndex
        assert isinstance(call["since"], datetime)

        assert not alerts.no_scheduler_alive(True, index=index)  # a scheduler is back
        assert alerts.no_scheduler_alive(False, index=index)  # a new outage
        assert len(heard.calls) == 2
    finally:
        signals.schedulers_down.disconnect(heard)


def test_a_running_scheduler_ends_the_outage(index: DueIndex) -> None:
    assert alerts.no_scheduler_alive(False, index=index)
    Worker(worker_id="t", index=index).chores.missed_check()
    assert index.client.get(index.control.outage_key) is None


def test_scheduler_status_notify_raises_the_outage_once_and_the_missed_runs(
    built_index: DueIndex, missed: Heard
) -> None:
    """What a cron job runs while every scheduler may be down (docs/alerts.md)."""
    down = Heard()
    signals.schedulers_down.connect(down, weak=False)
    try:
        schedule = due(next_run_at=truncate_ms(timezone.now() - 2 * GRACE))
        Schedule.objects.filter(pk=schedule.pk).update(updated_at=timezone.now() - 2 * GRACE)

        def status(*argv: str) -> str:
            out = io.StringIO()
            with pytest.raises(CommandError), committed():  # unhealthy: none alive, one waits
                call_command("scheduler_status", "--no-drift", "--notify", *argv, stdout=out)
            return out.getvalue()

        printed = status()
        assert (
            "Alerts (--notify): no scheduler alive: raised now; missed runs raised now: 1"
            in printed
        )
        assert f"  schedule {schedule.pk} at " in printed
        assert ": not_fired\nNotifications of missed and failed runs: nobody is told" in printed
        again = json.loads(status("--json"))["alerts"]
        assert again.pop("delivery")["notifier"] == ""  # NOTIFY is None here
        assert again == {"no_scheduler_raised": False, "missed_raised": []}  # once
        assert len(down.calls) == 1
        assert [call["reason"] for call in missed.calls] == ["not_fired"]

        beat(built_index)  # a scheduler runs again: the outage is over
        assert "no scheduler alive: nothing new to raise" in status()  # (its entry is late)
        assert built_index.client.get(built_index.control.outage_key) is None
    finally:
        signals.schedulers_down.disconnect(down)


# -- the grace itself ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grace", "jitter", "message"),
    [
        (timedelta(milliseconds=500), None, "at least 1 second"),
        (timedelta(days=32), None, "at most 31 days"),
        (timedelta(seconds=30), timedelta(seconds=30), "longer than the jitter"),
    ],
)
def test_a_grace_that_cannot_work_is_refused(
    grace: timedelta, jitter: timedelta | None, message: str
) -> None:
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        due(grace=grace, jitter=jitter)
    assert message in refused.value.message_dict["grace"][0]
