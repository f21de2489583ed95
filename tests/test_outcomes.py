"""Outcomes reported from the worker side by occurrence key (``outcomes.py``): what a
handed-off run becomes, and what overlap, auto-pause and the buffer make of it."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_schedulinator import outcomes, resync_schedules, services
from django_schedulinator.dispatch import Outcome, dispatchers
from django_schedulinator.errors import InvalidKey
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule, ScheduleChange
from django_schedulinator.models.spans import Span
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.services import streaks
from django_schedulinator.timing import truncate_ms

from .support.dispatchers import Flaky, HandOff
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db

REPORTING = {"BACKEND": "tests.support.dispatchers.HandOff", "OPTIONS": {"REPORTS": True}}


@pytest.fixture(autouse=True)
def reporting(settings: Any, built_index: DueIndex) -> None:
    HandOff.received.clear()
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": {"queue": REPORTING}}


def handed_off(**fields: Any) -> tuple[Schedule, Run]:
    """A schedule of the reporting dispatcher, due, claimed and handed off."""
    schedule = make_schedule(
        dispatcher="queue",
        kind="interval",
        interval=timedelta(minutes=1),
        next_run_at=timezone.now() - timedelta(seconds=5),
        **fields,
    )
    Worker(worker_id="t").step()
    return schedule, Run.objects.get(schedule=schedule)


def fire_again(schedule: Schedule) -> list[Run]:
    """Make the schedule due again and run a pass; its runs, oldest first."""
    Schedule.objects.filter(pk=schedule.pk).update(
        fired_through=None,
        next_run_at=truncate_ms(timezone.now() - timedelta(seconds=1)),
        due_at=None,
    )
    resync_schedules([schedule.pk])
    Worker(worker_id="t").step()
    return list(Run.objects.filter(schedule=schedule).order_by("scheduled_for"))


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_handed_off_run_reports_its_start_and_its_end_by_key() -> None:
    _schedule, run = handed_off()
    assert run.status == "dispatched"

    assert outcomes.report_started(run.idempotency_key)
    run.refresh_from_db()
    assert (run.status, run.lease_expires_at) == ("running", None)

    assert outcomes.report_finished(run.idempotency_key, succeeded=True)
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert run.finished_at is not None
    # A second report of the same end (a redelivered task) changes nothing.
    assert not outcomes.report_finished(run.idempotency_key, succeeded=False, error="late")
    run.refresh_from_db()
    assert (run.status, run.error) == ("succeeded", "")


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_reported_failure_is_logged_once_where_it_is_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run a worker reports failed is logged once, in the worker's process, with its
    schedule, its key and the exception its traceback ends with (issue 35, item 8)."""
    _schedule, run = handed_off(name="hourly-sync")
    error = (
        "Traceback (most recent call last):\n"
        '  File "tasks.py", line 3, in sync\n'
        "    raise ValueError('the upstream said 503')\n"
        "ValueError: the upstream said 503\n"
    )
    with caplog.at_level(logging.INFO, logger="django_schedulinator.outcomes"):
        assert outcomes.report_finished(run.idempotency_key, succeeded=False, error=error)
        assert not outcomes.report_finished(run.idempotency_key, succeeded=False, error=error)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"Run of 'hourly-sync' (key {run.idempotency_key}) failed: "
        "ValueError: the upstream said 503"
    ]


@pytest.mark.parametrize(
    ("error", "said"),
    [
        ("it failed", "it failed"),
        ("\n\nthe first line\nthe second", "the first line"),
        ("", ""),
        (
            # A chained exception: the one raised last is what the run ended with.
            "Traceback (most recent call last):\n  ...\nKeyError: 'a'\n\nDuring handling "
            "of the above exception, another exception occurred:\n\nTraceback (most recent "
            "call last):\n  ...\nRuntimeError: could not load 'a'\n",
            "RuntimeError: could not load 'a'",
        ),
        ("x" * 400, "x" * 297 + "..."),
    ],
)
def test_the_headline_of_an_error(error: str, said: str) -> None:
    assert outcomes.headline(error) == said


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_reported_error_with_a_nul_character_is_recorded() -> None:
    # PostgreSQL stores no NUL in text: the report failed, and the run stayed dispatched.
    _schedule, run = handed_off()
    assert outcomes.report_finished(run.idempotency_key, succeeded=False, error="bad\x00byte")
    run.refresh_from_db()
    assert (run.status, run.error) == ("failed", "bad\ufffdbyte")


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_reported_failure_counts_towards_auto_pause() -> None:
    schedule, run = handed_off(pause_after_failures=1)

    assert outcomes.report_finished(run.idempotency_key, succeeded=False, error="x" * 5000)

    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error == "x" * 4000  # the end of it, bounded
    schedule.refresh_from_db()
    assert not schedule.enabled
    assert ScheduleChange.objects.filter(
        schedule_id=schedule.pk, action="paused", source="scheduler"
    ).exists()


def backfilled(schedule: Schedule, minutes: int) -> list[Run]:
    """Backfill the last ``minutes`` whole minutes of an every-minute cron and hand the
    runs to the schedule's dispatcher in one take-over batch; its runs, oldest first."""
    this_minute = timezone.now().replace(second=0, microsecond=0)
    report = services.backfill(
        schedule, this_minute - timedelta(minutes=minutes), this_minute - timedelta(minutes=1)
    )
    assert report.queued == minutes
    Worker(worker_id="t").step()  # its first pass takes over what is queued
    return list(Run.objects.filter(schedule=schedule).order_by("scheduled_for"))


def every_minute(**fields: Any) -> Schedule:
    return make_schedule(kind="cron", cron="* * * * *", **fields)


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_failures_recorded_together_each_count_towards_auto_pause() -> None:
    """Five failed runs of one schedule in one batch are five failures in a row: they
    counted as one, and pause_after_failures=3 never paused after five failed backfills."""
    schedule = every_minute(task="tests.boom", pause_after_failures=3)

    runs = backfilled(schedule, 5)

    assert [r.status for r in runs] == ["failed"] * 5
    schedule.refresh_from_db()
    assert schedule.failure_streak == 5
    assert not schedule.enabled
    assert schedule.pause_note == outcomes.AUTO_PAUSE_NOTE


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_late_success_of_an_older_run_keeps_the_streak_of_the_newer_ones() -> None:
    """ "N times in a row" is the newest N runs by their nominal time: the three newest
    failed, so the late success of the oldest does not reset the count (it did)."""
    schedule = every_minute(dispatcher="queue")
    oldest, *newer = backfilled(schedule, 4)
    assert {r.status for r in [oldest, *newer]} == {"dispatched"}
    for run in newer:
        assert outcomes.report_finished(run.idempotency_key, succeeded=False, error="boom")
    assert Schedule.objects.get(pk=schedule.pk).failure_streak == 3

    assert outcomes.report_finished(oldest.idempotency_key, succeeded=True)

    assert Schedule.objects.get(pk=schedule.pk).failure_streak == 3


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_late_failure_of_a_run_older_than_a_success_starts_no_streak() -> None:
    schedule = every_minute(dispatcher="queue", pause_after_failures=2)
    *older, newest = backfilled(schedule, 3)
    assert outcomes.report_finished(newest.idempotency_key, succeeded=True)

    for run in older:
        assert outcomes.report_finished(run.idempotency_key, succeeded=False, error="boom")

    schedule.refresh_from_db()
    assert (schedule.failure_streak, schedule.enabled) == (0, True)


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_long_streak_is_counted_in_the_ledgers_order() -> None:
    """Past the newest runs the count reads (streaks.STREAK_WINDOW) it goes on from the
    stored count; a late outcome of a run older than those is counted from the ledger."""
    assert streaks.STREAK_WINDOW <= 12
    schedule = every_minute(dispatcher="queue")
    runs = backfilled(schedule, 16)

    def streak() -> int:
        return Schedule.objects.get(pk=schedule.pk).failure_streak

    for run in runs[1:3] + runs[4:]:  # 14 failures; the first run and the fourth not ended
        outcomes.report_finished(run.idempotency_key, succeeded=False, error="boom")
    assert streak() == 14

    outcomes.report_finished(runs[3].idempotency_key, succeeded=True)
    assert streak() == 12  # the failures after it
    outcomes.report_finished(runs[0].idempotency_key, succeeded=False, error="boom")
    assert streak() == 12  # older than the success


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_overlap_skip_waits_for_the_reported_end_of_a_handed_off_run() -> None:
    schedule, first = handed_off(overlap="skip")

    second = fire_again(schedule)[-1]
    assert (second.status, second.skip_reason) == ("skipped", "overlap")

    outcomes.report_finished(first.idempotency_key, succeeded=True)
    third = fire_again(schedule)[-1]
    assert third.status == "dispatched"


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_overlap_buffer_releases_its_run_when_the_end_is_reported() -> None:
    schedule, first = handed_off(overlap="buffer")
    buffered = fire_again(schedule)[-1]
    assert buffered.status == "buffered"

    outcomes.report_finished(first.idempotency_key, succeeded=True)

    buffered.refresh_from_db()
    assert buffered.status == "pending"  # queued for the next take-over
    worker = Worker(worker_id="t")
    worker.step()
    buffered.refresh_from_db()
    assert buffered.status == "dispatched"


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_run_never_reported_stops_holding_back_its_schedule_after_the_outcome_timeout(
    settings: Any,
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"queue": {**REPORTING, "OPTIONS": {"REPORTS": True,
                                                           "OUTCOME_TIMEOUT_SECONDS": 1}}},
    }  # fmt: skip
    schedule, first = handed_off(overlap="skip")
    time.sleep(1.1)

    second = fire_again(schedule)[-1]

    assert second.status == "dispatched"  # fired: the first no longer counts
    first.refresh_from_db()
    assert first.status == "dispatched"  # its outcome stays unknown


def claimed(dispatcher: str) -> tuple[Schedule, Worker, list[Any], str]:
    """A due schedule of ``dispatcher`` whose run a scheduler claimed and committed, and has
    not dispatched yet: the schedule, the scheduler, the occurrences and the claim token."""
    schedule = make_schedule(
        dispatcher=dispatcher, next_run_at=timezone.now() - timedelta(seconds=5)
    )
    worker = Worker(worker_id="t")
    batch, token = worker.claimer.claim(10)
    occurrences, _counters = worker.claimer.commit(worker.claimer.recheck(batch), token)
    return schedule, worker, occurrences, token


def test_a_start_reported_before_the_hand_off_is_recorded_is_kept() -> None:
    schedule, worker, occurrences, token = claimed("queue")
    [occurrence] = occurrences
    # The worker is quicker than the scheduler's record of the hand-off.
    assert outcomes.report_started(occurrence.key)
    worker.lanes.dispatch_now(worker.lanes.lane("queue"), _leased(occurrences, token))

    run = Run.objects.get(schedule=schedule)
    assert run.status == "running"
    assert run.dispatched_at is not None
    assert run.lease_expires_at is None  # no scheduler hands it off again


def test_a_retry_answer_for_a_run_reported_started_keeps_it_running(settings: Any) -> None:
    """The hand-off reached the worker (it reported the start) although the dispatcher
    answered "retry" (a broker's confirmation lost, say): the run must not go back to
    pending and be handed off again."""
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"flaky": {"BACKEND": "tests.support.dispatchers.Flaky",
                                  "OPTIONS": {"RETRY_BACKOFF_SECONDS": 0.01}}},
    }  # fmt: skip
    Flaky.attempts.clear()
    Flaky.failures = 1
    schedule, worker, occurrences, token = claimed("flaky")
    [occurrence] = occurrences
    assert outcomes.report_started(occurrence.key)
    worker.lanes.dispatch_now(worker.lanes.lane("flaky"), _leased(occurrences, token))

    run = Run.objects.get(schedule=schedule)
    assert (run.status, run.lease_expires_at) == ("running", None)
    time.sleep(0.05)  # past any backoff
    assert worker.claimer.take_over_expired(worker.claimer.clock.now_ms(), 10)[0] == []
    assert Flaky.attempts == [(occurrence.key, 1)]  # handed off once


def _leased(occurrences: Any, token: str) -> Any:
    from django_schedulinator.scheduler.leases import Leased

    return Leased(occurrences, token, time.monotonic(), counted=True)  # a fresh claim


@pytest.mark.parametrize(
    "key",
    ["", "abc", "12", "12:", ":5", "1:2:3", "x:1", "1:--5", "1:\u00b2", "1:99999999999999999",
     "9223372036854775808:1"],
)  # fmt: skip
def test_a_report_with_something_that_is_not_a_key_is_refused(key: str) -> None:
    with pytest.raises(InvalidKey, match="is not an occurrence key"):
        outcomes.report_finished(key, succeeded=True)


def test_a_report_for_an_occurrence_not_in_the_ledger_changes_nothing() -> None:
    assert not outcomes.report_started("999999:1000")
    assert not outcomes.report_finished("999999:1000", succeeded=True)


@pytest.mark.django_db(transaction=True)  # the report commits on a connection of its own
@pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_terminate_backend")
@pytest.mark.parametrize("status", ["started", "succeeded"])
def test_a_report_goes_through_a_database_connection_dropped_since_the_last_one(
    status: str,
) -> None:
    """A worker's connection dies between two jobs (a failover, a restart, an idle
    timeout): its next report reconnects instead of being lost."""
    _schedule, run = handed_off()
    drop_this_connection()

    assert (
        outcomes.report_started(run.idempotency_key)
        if status == "started"
        else outcomes.report_finished(run.idempotency_key, succeeded=True)
    )
    run.refresh_from_db()
    assert run.status == {"started": "running", "succeeded": "succeeded"}[status]


def drop_this_connection() -> None:
    """Terminate this connection's PostgreSQL backend from another connection and wait
    until it is gone: the server's side of a connection lost."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    other = connection.get_new_connection(connection.get_connection_params())
    other.autocommit = True  # pg_stat_activity is read once per transaction
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
                if cursor.fetchone()[0] == 0:
                    return
                time.sleep(0.02)
            raise AssertionError(f"backend {pid} is still there")
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)  # two connections, each with its own transaction
@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks that SQLite has not")
@pytest.mark.parametrize("status", ["dispatched", "failed", "reported failed"])
def test_an_outcome_recorded_while_its_schedule_is_deleted_does_not_deadlock(status: str) -> None:
    """Deleting a schedule locks its row, then deletes its runs. An outcome recorded in
    between must not hold a run's row while it waits for the schedule's (to count a failure,
    or for the foreign key check of a row it wrote twice): the delete would wait for it in
    turn, and PostgreSQL breaks the deadlock by failing one of the two (found by the chaos
    run through RQ)."""
    schedule = make_schedule(dispatcher="queue", next_run_at=timezone.now() - timedelta(seconds=5))
    worker = Worker(worker_id="t")
    batch, token = worker.claimer.claim(10)
    [occurrence], _counters = worker.claimer.commit(worker.claimer.recheck(batch), token)
    if status == "reported failed":
        record_outcome(occurrence, schedule, "dispatched")
    locked, errors = threading.Event(), []

    def delete() -> None:  # what services.delete does, with time between its two steps
        try:
            with transaction.atomic():
                row = Schedule.objects.select_for_update().get(pk=schedule.pk)
                locked.set()
                time.sleep(0.5)  # the outcome is being recorded meanwhile
                row.delete()
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    deadlocks = deadlocks_so_far()
    deleting = threading.Thread(target=delete)
    deleting.start()
    try:
        assert locked.wait(10)
        if status == "reported failed":
            outcomes.report_finished(occurrence.key, succeeded=False, error="boom")
        else:
            record_outcome(occurrence, schedule, status)
    finally:
        deleting.join()
    assert errors == []
    assert not Schedule.objects.filter(pk=schedule.pk).exists()
    # Not even one that a retry hid (a report is tried again after a database error).
    assert deadlocks_so_far() == deadlocks


def deadlocks_so_far() -> int:
    """The deadlocks PostgreSQL has broken in the test database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def record_outcome(occurrence: Any, schedule: Schedule, status: str) -> None:
    """What a scheduler records when its dispatcher returns ``status`` (with the receiver's
    id for a hand-off)."""
    outcomes.record(
        [
            outcomes.Reported(
                [Outcome(occurrence.run_id, status, "boom", external_id=f"ext-{occurrence.key}")],
                {occurrence.run_id: schedule.pk},
                timezone.now(),
                Span.of([occurrence.scheduled_for]),
            )
        ],
        dispatcher=dispatchers.create_connection("queue"),
        now=timezone.now(),
        using="default",
    )
