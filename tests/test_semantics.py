"""Schedule semantics end to end: a real scheduler (claim script, re-check, ledger, index) on a
real Redis and database, driven by a controlled clock.

time-machine moves Python's clock, and it replaces Redis TIME for the scheduler (its injected
clock) and for saves, resumes and the other actions (``clock.now``), so days of schedules, DST
changes included, run in seconds. Each test asserts what reached the
ledger: which occurrences fired, which were skipped and why.
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_schedulinator import resync_schedules, services
from django_schedulinator.index import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.timing import to_ms
from django_schedulinator.worker import Worker

from .conftest import make_schedule
from .models import Delivery
from .simulation import START, Simulation, down_for_an_hour, fired, skipped, utc

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits

# -- DST, through the whole scheduler -------------------------------------------------------


def test_days_across_the_berlin_spring_change(sim: Simulation) -> None:
    shift = make_schedule(kind="cron", cron="30 2 * * *", timezone="Europe/Berlin")
    skip = make_schedule(kind="cron", cron="30 2 * * *", timezone="Europe/Berlin", dst_gap="skip")
    hourly = make_schedule(kind="cron", cron="0 * * * *", timezone="Europe/Berlin")

    sim.run_until(utc("2026-03-30T12:00"))

    # 02:30 does not exist on 29 March: shifted, it runs at 03:30 CEST (01:30 UTC).
    assert fired(shift) == [
        utc("2026-03-28T01:30"),
        utc("2026-03-29T01:30"),
        utc("2026-03-30T00:30"),
    ]
    assert skipped(shift) == []
    # Skipped, it leaves a ledger row that says why, at the instant a shift would have given.
    assert fired(skip) == [utc("2026-03-28T01:30"), utc("2026-03-30T00:30")]
    assert skipped(skip) == [(utc("2026-03-29T01:30"), "dst")]
    note = Run.objects.get(schedule=skip, status="skipped").note
    assert "02:30 does not exist in Europe/Berlin on 2026-03-29" in note
    # Hourly: 02:00 shifted lands on the real 03:00 and fires once; every UTC hour once.
    hours = fired(hourly)
    assert hours[0] == utc("2026-03-27T13:00")
    assert hours[-1] == utc("2026-03-30T12:00")
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(hours))
    # Every fired occurrence reached the task, with the nominal time in its key.
    assert Delivery.objects.count() == len(hours) + 5


def test_days_across_the_new_york_fall_change(sim: Simulation) -> None:
    sim.at(utc("2026-10-30T12:00"))
    both = make_schedule(
        kind="cron", cron="30 1 * * *", timezone="America/New_York", dst_fold="both"
    )
    first = make_schedule(kind="cron", cron="30 1 * * *", timezone="America/New_York")
    second = make_schedule(
        kind="cron", cron="30 1 * * *", timezone="America/New_York", dst_fold="second"
    )

    sim.run_until(utc("2026-11-02T12:00"))

    # 01:30 occurs twice on 1 November: 05:30 UTC (EDT), then 06:30 UTC (EST).
    before, after = utc("2026-10-31T05:30"), utc("2026-11-02T06:30")
    assert fired(both) == [before, utc("2026-11-01T05:30"), utc("2026-11-01T06:30"), after]
    assert fired(first) == [before, utc("2026-11-01T05:30"), after]
    assert fired(second) == [before, utc("2026-11-01T06:30"), after]


def test_lord_howe_shifts_by_half_an_hour(sim: Simulation) -> None:
    sim.at(utc("2026-10-03T12:00"))
    hourly = make_schedule(kind="cron", cron="0 * * * *", timezone="Australia/Lord_Howe")
    skip = make_schedule(
        kind="cron", cron="0 * * * *", timezone="Australia/Lord_Howe", dst_gap="skip"
    )

    sim.run_until(utc("2026-10-03T17:00"))

    # 02:00 jumps to 02:30 (UTC+10:30 to +11): 02:00 runs at 02:30, or is skipped.
    assert fired(hourly) == [
        utc("2026-10-03T12:30"), utc("2026-10-03T13:30"), utc("2026-10-03T14:30"),
        utc("2026-10-03T15:30"), utc("2026-10-03T16:00"), utc("2026-10-03T17:00"),
    ]  # fmt: skip
    assert utc("2026-10-03T15:30") not in fired(skip)
    assert skipped(skip) == [(utc("2026-10-03T15:30"), "dst")]


# -- catch-up after downtime ----------------------------------------------------------------


def test_catch_up_latest_fires_the_latest_missed_once(sim: Simulation) -> None:
    schedule = down_for_an_hour(sim)

    assert fired(schedule) == [utc("2026-03-27T13:00")]
    missed = skipped(schedule)
    assert len(missed) == 59
    assert {reason for _at, reason in missed} == {"missed"}
    assert missed[0][0] == utc("2026-03-27T12:01")
    assert schedule.next_run_at == utc("2026-03-27T13:01")
    assert schedule.run_count == 1
    note = Run.objects.filter(schedule=schedule, status="skipped").first().note
    assert "catch-up 'latest'" in note


def test_catch_up_skip_fires_only_what_is_within_the_grace(sim: Simulation) -> None:
    schedule = down_for_an_hour(sim, catch_up="skip")

    # 13:00 is 30 s late, within MISFIRE_GRACE_SECONDS (60 s); the 59 before it are not.
    assert fired(schedule) == [utc("2026-03-27T13:00")]
    assert len(skipped(schedule)) == 59
    assert schedule.next_run_at == utc("2026-03-27T13:01")


def test_catch_up_all_fires_within_the_window_and_the_cap(sim: Simulation, settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "CATCH_UP_MAX_RUNS": 5}
    schedule = down_for_an_hour(sim, catch_up="all", catch_up_window=timedelta(minutes=10))

    # Within the window: 12:51 to 13:00; the cap keeps the 5 most recent.
    assert fired(schedule) == [utc(f"2026-03-27T12:{m}") for m in (56, 57, 58, 59)] + [
        utc("2026-03-27T13:00")
    ]
    assert len(skipped(schedule)) == 55
    assert schedule.run_count == 5


def test_skips_recorded_are_bounded(sim: Simulation, settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MAX_SKIPS_RECORDED": 10}
    schedule = down_for_an_hour(sim)

    rows = Run.objects.filter(schedule=schedule, status="skipped").order_by("scheduled_for")
    assert rows.count() == 10
    assert rows[0].scheduled_for == utc("2026-03-27T12:50")
    assert "back to 2026-03-27 12:01:00 UTC" in rows[0].note


def test_a_one_off_too_late_for_catch_up_skip_expires(sim: Simulation) -> None:
    schedule = make_schedule(kind="once", run_at=START + timedelta(minutes=5), catch_up="skip")
    sim.at(START + timedelta(hours=2))
    sim.step()
    schedule.refresh_from_db()

    assert fired(schedule) == []
    assert skipped(schedule) == [(START + timedelta(minutes=5), "expired")]
    assert schedule.next_run_at is None
    assert DueIndex().scores([schedule.pk])[schedule.pk] is None


# -- pause and resume ------------------------------------------------------------------------


def test_resume_fires_nothing_from_the_paused_period_and_records_it(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="*/10 * * * *", timezone="UTC")
    services.pause(schedule, "database migration")
    assert DueIndex().scores([schedule.pk])[schedule.pk] is None
    assert schedule.paused_at == START

    sim.at(START + timedelta(hours=1, minutes=5))
    sim.step()  # nothing is due: the schedule is not in the index
    services.resume(schedule)
    sim.step()

    assert fired(schedule) == []
    paused = skipped(schedule)
    assert [at.minute for at, _r in paused] == [10, 20, 30, 40, 50, 0]
    assert {reason for _at, reason in paused} == {"paused"}
    assert Run.objects.filter(schedule=schedule).first().note == "Paused: database migration"
    assert schedule.next_run_at == utc("2026-03-27T13:10")
    assert schedule.pause_note == ""
    assert schedule.paused_at is None


def test_resume_with_catch_up_hands_the_paused_period_to_the_policy(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="*/10 * * * *", timezone="UTC")
    services.pause(schedule)
    sim.at(START + timedelta(hours=1, minutes=5))
    services.resume(schedule, catch_up=True)
    sim.step()

    assert fired(schedule) == [utc("2026-03-27T13:00")]  # catch-up "latest"
    assert {reason for _at, reason in skipped(schedule)} == {"missed"}


def test_an_interval_keeps_its_grid_across_a_pause(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=7))
    services.pause(schedule)
    sim.at(START + timedelta(minutes=30))
    services.resume(schedule)
    # 12:07, 12:14, 12:21, 12:28 were paused; the grid continues at 12:35.
    assert schedule.next_run_at == utc("2026-03-27T12:35")
    assert len(skipped(schedule)) == 4


def test_auto_pause_after_failures_in_a_row(sim: Simulation) -> None:
    schedule = make_schedule(
        kind="interval", interval=timedelta(minutes=1), task="tests.boom", pause_after_failures=2
    )
    sim.run_until(START + timedelta(minutes=5))
    schedule.refresh_from_db()

    assert not schedule.enabled
    assert schedule.failure_streak == 2
    assert "pause_after_failures" in schedule.pause_note
    assert Run.objects.filter(schedule=schedule, status="failed").count() == 2
    assert DueIndex().scores([schedule.pk])[schedule.pk] is None


def test_a_success_resets_the_failure_streak(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1), task="tests.boom")
    sim.run_until(START + timedelta(minutes=2))
    assert Schedule.objects.get(pk=schedule.pk).failure_streak == 2
    schedule.task = "tests.record"
    schedule.save()
    sim.run_until(START + timedelta(minutes=4))
    assert Schedule.objects.get(pk=schedule.pk).failure_streak == 0


# -- overlap -----------------------------------------------------------------------------------


def still_running(schedule: Schedule, at: datetime) -> Run:
    """A run of ``schedule`` that another scheduler is running right now."""
    return Run.objects.create(
        schedule=schedule,
        scheduled_for=at,
        task=schedule.task,
        status=Run.Status.RUNNING,
        claimed_at=at,
        worker_id="elsewhere",
        claim_token="elsewhere",
        lease_expires_at=at + timedelta(days=1),
    )


def test_overlap_skip(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1), overlap="skip")
    busy = still_running(schedule, START - timedelta(minutes=1))
    sim.run_until(START + timedelta(minutes=2))
    assert skipped(schedule) == [
        (START + timedelta(minutes=1), "overlap"),
        (START + timedelta(minutes=2), "overlap"),
    ]
    busy.status = Run.Status.SUCCEEDED
    busy.save()
    sim.run_until(START + timedelta(minutes=3))
    assert fired(schedule)[-1] == START + timedelta(minutes=3)


def test_like_schedules_due_together_keep_their_own_overlap_outcome(sim: Simulation) -> None:
    # Same timing, same due time: the claim plans them once and shares the plan; holding
    # one back for overlap must not hold back the other.
    busy = make_schedule(kind="interval", interval=timedelta(minutes=1), overlap="skip")
    free = make_schedule(kind="interval", interval=timedelta(minutes=1), overlap="skip")
    Schedule.objects.filter(pk__in=[busy.pk, free.pk]).update(
        next_run_at=START + timedelta(minutes=1), due_at=None
    )
    resync_schedules([busy.pk, free.pk])
    still_running(busy, START)
    sim.at(START + timedelta(minutes=1))
    sim.step()

    assert skipped(busy) == [(START + timedelta(minutes=1), "overlap")]
    assert fired(free) == [START + timedelta(minutes=1)]


def test_overlap_buffer_keeps_one_and_runs_it_when_the_previous_ends(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1), overlap="buffer")
    busy = still_running(schedule, START - timedelta(minutes=1))
    sim.run_until(START + timedelta(minutes=3))

    waiting = Run.objects.get(schedule=schedule, status=Run.Status.BUFFERED)
    assert waiting.scheduled_for == START + timedelta(minutes=1)
    assert [reason for _at, reason in skipped(schedule)] == ["overlap", "overlap"]

    # The running one ends (recorded by its scheduler), which releases the buffered run.
    sim.worker.claimer.record([actions_outcome(busy.pk)], {busy.pk: schedule.pk}, timezone.now())
    sim.worker.claimer.release_buffered({schedule.pk})
    sim.step()
    waiting.refresh_from_db()
    assert waiting.status == Run.Status.SUCCEEDED
    assert Delivery.objects.filter(key=waiting.idempotency_key).exists()


def actions_outcome(run_id: int) -> Any:
    from django_schedulinator.dispatch import Outcome

    return Outcome(run_id, "succeeded")


# -- jitter, limits, anchors ----------------------------------------------------------------------


def test_jitter_delays_each_occurrence_by_its_own_fixed_amount(sim: Simulation) -> None:
    schedule = make_schedule(
        kind="interval", interval=timedelta(minutes=10), jitter=timedelta(minutes=5)
    )
    delay = schedule.due_at - schedule.next_run_at
    assert timedelta(0) <= delay <= timedelta(minutes=5)
    assert DueIndex().scores([schedule.pk])[schedule.pk] == to_ms(schedule.due_at)

    if delay > timedelta(0):
        sim.at(schedule.due_at - timedelta(milliseconds=1))
        sim.step()
        assert fired(schedule) == []  # nominally due, but not before its jittered time
    sim.at(schedule.due_at)
    sim.step()
    assert fired(schedule) == [START + timedelta(minutes=10)]  # the key stays nominal
    schedule.refresh_from_db()
    assert schedule.next_run_at == START + timedelta(minutes=20)
    assert schedule.next_run_at <= schedule.due_at < schedule.next_run_at + timedelta(minutes=5)


def test_max_runs_finishes_the_schedule_and_it_leaves_the_index(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1), max_runs=3)
    sim.run_until(START + timedelta(minutes=10))
    schedule.refresh_from_db()

    assert len(fired(schedule)) == 3
    assert schedule.next_run_at is None
    assert DueIndex().scores([schedule.pk])[schedule.pk] is None


def test_an_end_finishes_the_schedule(sim: Simulation) -> None:
    schedule = make_schedule(
        kind="interval", interval=timedelta(minutes=1), end_at=START + timedelta(minutes=3)
    )
    sim.run_until(START + timedelta(minutes=10))
    assert len(fired(schedule)) == 3
    assert Schedule.objects.get(pk=schedule.pk).next_run_at is None


def test_an_anchored_interval_fires_on_its_grid(sim: Simulation) -> None:
    schedule = make_schedule(
        kind="interval", interval=timedelta(hours=1), anchor_at=utc("2026-01-01T00:20")
    )
    sim.run_until(START + timedelta(hours=3))
    assert fired(schedule) == [utc(f"2026-03-27T{h}:20") for h in (12, 13, 14)]


def test_a_one_off_fires_once_and_is_kept(sim: Simulation) -> None:
    schedule = make_schedule(kind="once", run_at=START + timedelta(minutes=1))
    sim.run_until(START + timedelta(hours=1))
    schedule.refresh_from_db()
    assert fired(schedule) == [START + timedelta(minutes=1)]
    assert schedule.next_run_at is None
    assert Schedule.objects.filter(pk=schedule.pk).exists()


# -- run now and backfill ---------------------------------------------------------------------


def test_run_now_uses_the_ledger_and_a_key_of_its_own(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(hours=1))
    run = services.run_now(schedule)
    sim.step()

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.trigger == Run.Trigger.RUN_NOW
    assert run.attempts == 1
    assert Delivery.objects.get().key == run.idempotency_key == f"{schedule.pk}:{to_ms(START)}"
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == START + timedelta(hours=1)
    # A second one at the same instant gets a key of its own.
    again = services.run_now(schedule)
    assert again.idempotency_key != run.idempotency_key


def test_run_now_with_advance_takes_the_place_of_the_next_run(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(hours=1))
    services.run_now(schedule, advance=True)
    sim.step()

    assert skipped(schedule) == [(START + timedelta(hours=1), "replaced")]
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == START + timedelta(hours=2)


def test_backfill_fires_each_occurrence_once(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="0 * * * *", timezone="UTC")
    start, end = utc("2026-03-26T00:00"), utc("2026-03-26T05:00")

    report = services.backfill(schedule, start, end)
    sim.step()
    assert (report.occurrences, report.queued) == (6, 6)
    assert fired(schedule) == [utc(f"2026-03-26T0{h}:00") for h in range(6)]
    assert Delivery.objects.count() == 6

    again = services.backfill(schedule, start, end)
    sim.step()
    assert (again.queued, again.requeued, again.already) == (0, 0, 6)
    assert Delivery.objects.count() == 6


def test_backfill_fires_occurrences_that_were_skipped(sim: Simulation) -> None:
    schedule = down_for_an_hour(sim)
    report = services.backfill(schedule, utc("2026-03-27T12:01"), utc("2026-03-27T12:10"))
    sim.step()
    assert report.requeued == 10
    assert len(fired(schedule)) == 11
    assert len(skipped(schedule)) == 49


@pytest.mark.parametrize(
    ("start", "end", "fragment"),
    [
        ("2026-03-27T10:00", "2026-03-27T09:00", "not be before its start"),
        ("2026-03-27T10:00", "2026-03-28T09:00", "must not be after now"),
        ("2025-03-27T00:00", "2026-03-27T00:00", "more than 10,000 occurrences"),
    ],
)
def test_bad_backfills_are_refused_with_a_reason(
    sim: Simulation, start: str, end: str, fragment: str
) -> None:
    schedule = make_schedule(kind="cron", cron="* * * * *", timezone="UTC")
    with pytest.raises(services.ServiceError, match=fragment):
        services.backfill(schedule, utc(start), utc(end))
    assert not Run.objects.exists()


# -- run status ------------------------------------------------------------------------------


def test_a_long_task_is_recorded_running_while_it_runs(built_index: DueIndex) -> None:
    schedule = make_schedule(task="tests.report_status", next_run_at=timezone.now())
    Worker(worker_id="test", once=True).run()

    run = Run.objects.get(schedule=schedule)
    assert run.status == Run.Status.SUCCEEDED
    assert Delivery.objects.get().payload == {"status_while_running": "running"}


# -- previews and descriptions ----------------------------------------------------------------


def test_preview_shows_local_and_utc_times_and_flags_dst(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="30 2 * * *", timezone="Europe/Berlin")
    items = schedule.preview(3)

    assert [i.at for i in items] == [
        utc("2026-03-28T01:30"), utc("2026-03-29T01:30"), utc("2026-03-30T00:30"),
    ]  # fmt: skip
    assert [f"{i.local:%H:%M %Z}" for i in items] == ["02:30 CET", "03:30 CEST", "02:30 CEST"]
    assert [i.dst for i in items] == ["", "shifted", ""]
    assert "runs at 03:30 CEST instead" in items[1].note
    assert schedule.description == "At 02:30 (Europe/Berlin)"


def test_the_schedule_command(sim: Simulation, capsys: pytest.CaptureFixture[str]) -> None:
    schedule = make_schedule(
        name="nightly", kind="cron", cron="30 2 * * *", timezone="Europe/Berlin"
    )
    call_command("schedule", "preview", "nightly", "--count", "2")
    out = capsys.readouterr().out
    assert "At 02:30 (Europe/Berlin)" in out
    assert "2026-03-29 03:30:00 CEST" in out
    assert "does not exist" in out

    call_command("schedule", "pause", "nightly", "--note", "upgrade")
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    call_command("schedule", "resume", str(schedule.pk))
    assert Schedule.objects.get(pk=schedule.pk).enabled
    call_command("schedule", "run-now", "nightly")
    assert Run.objects.filter(trigger="run_now").count() == 1
    call_command("schedule", "backfill", "nightly", "--from", "2026-03-20T00:00", "--to",
                 "2026-03-22T00:00", "--dry-run")  # fmt: skip
    assert "Would queue 2 new" in capsys.readouterr().out


def test_manual_operations_refuse_a_task_no_longer_registered(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="0 * * * *", timezone="UTC")
    Schedule.objects.filter(pk=schedule.pk).update(task="gone.task")
    schedule.refresh_from_db()
    with pytest.raises(
        services.ServiceError, match=re.escape("'gone.task' is not a registered task")
    ):
        services.run_now(schedule)
    with pytest.raises(services.ServiceError, match="not a registered task"):
        services.backfill(schedule, utc("2026-03-26T00:00"), utc("2026-03-26T05:00"))
    assert not Run.objects.exists()


def test_a_backfill_needs_aware_times(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="0 * * * *", timezone="UTC")
    with pytest.raises(services.ServiceError, match="start must be a date and time with a time"):
        services.backfill(schedule, datetime(2026, 3, 26), utc("2026-03-26T05:00"))
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["preview", "no-such-schedule"], "No schedule is named 'no-such-schedule'"),
        (["backfill", "nightly", "--from", "yesterday", "--to", "2026-03-20T00:00"],
         "--from 'yesterday' is not an ISO 8601 date and time"),
        (["backfill", "nightly", "--from", "2026-03-20T00:00", "--to", "2026-04-20T00:00"],
         "must not be after now"),
        (["preview", "nightly", "--count", "5000"], "--count must be at most 1000"),
        (["pause", "nightly", "--note", "n" * 501],
         "pause_note: Ensure this value has at most 500"),
    ],
)  # fmt: skip
def test_the_schedule_command_reports_mistakes(
    sim: Simulation, argv: list[str], fragment: str
) -> None:
    from django.core.management.base import CommandError

    make_schedule(name="nightly", kind="cron", cron="30 2 * * *", timezone="Europe/Berlin")
    with pytest.raises(CommandError, match=re.escape(fragment)):
        call_command("schedule", *argv)
    assert not Run.objects.exists()
    assert Schedule.objects.get(name="nightly").enabled  # a refused pause changes nothing
