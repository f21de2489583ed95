"""Policies through the claim: a real scheduler (claim script, re-check, ledger, index) on a real
Redis and database, driven by a controlled clock (``tests/support/simulation.py``), over days of
schedules: DST gaps and folds, catch-up after downtime, overlap, jitter, limits and anchors
(``django_schedulinator/scheduler/claiming.py`` applies them; ``timing/`` computes them,
tested on its own in ``test_timing.py``). Each test asserts what reached the ledger: which
occurrences fired, which were skipped and why."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_schedulinator import resync_schedules
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.models.spans import Span
from django_schedulinator.outcomes import Reported
from django_schedulinator.timing import to_ms

from .models import Delivery
from .support.schedules import make_schedule
from .support.simulation import START, Simulation, down_for_an_hour, fired, skipped, utc

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


# -- DST, through the whole scheduler ---------------------------------------------------------


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


def test_several_expressions_fire_their_union_across_the_berlin_spring_change(
    sim: Simulation,
) -> None:
    weekly = make_schedule(kind="cron", cron="0 9 * * 1-5; 0 12 * * 6", timezone="Europe/Berlin")
    meeting = make_schedule(
        kind="cron", cron="30 2 * * *; 30 3 * * *", timezone="Europe/Berlin", dst_gap="skip"
    )

    sim.run_until(utc("2026-03-30T12:00"))

    # From Friday 27 March, 12:00 UTC: Saturday at 12:00 CET, no Sunday, Monday at 09:00 CEST.
    assert fired(weekly) == [utc("2026-03-28T11:00"), utc("2026-03-30T07:00")]
    # On 29 March 02:30 does not exist: its skip falls on 03:30 CEST (01:30 UTC), when the
    # other expression fires: one run, and no skip recorded over it.
    assert fired(meeting) == [
        utc("2026-03-28T01:30"),
        utc("2026-03-28T02:30"),
        utc("2026-03-29T01:30"),
        utc("2026-03-30T00:30"),
        utc("2026-03-30T01:30"),
    ]
    assert skipped(meeting) == []


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


# -- catch-up after downtime ------------------------------------------------------------------


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


# -- overlap ----------------------------------------------------------------------------------


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
        fired_through=None, next_run_at=START + timedelta(minutes=1), due_at=None
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
    sim.worker.held.record(
        [
            Reported(
                [actions_outcome(busy.pk)],
                {busy.pk: schedule.pk},
                timezone.now(),
                Span.of([busy.scheduled_for]),
            )
        ],
        sim.worker.dispatcher,
    )
    sim.worker.held.release_buffered({schedule.pk})
    sim.step()
    waiting.refresh_from_db()
    assert waiting.status == Run.Status.SUCCEEDED
    assert Delivery.objects.filter(key=waiting.idempotency_key).exists()


def actions_outcome(run_id: int) -> Any:
    from django_schedulinator.dispatch import Outcome

    return Outcome(run_id, "succeeded")


# -- jitter, limits, anchors ------------------------------------------------------------------


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
