"""The service layer (``django_schedulinator/services/``): every change to a schedule, with
its change-log entry and the index following once the transaction commits.

First what each service guarantees on its own; then pause, resume, the failure count, run now
and backfill through a real scheduler on a controlled clock (``tests/support/simulation.py``). The
admin and the API, which call these services, have their own tests.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from redis.exceptions import RedisError

from django_schedulinator import errors, services
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule, ScheduleChange
from django_schedulinator.services import Origin, streaks
from django_schedulinator.timing import to_ms

from .models import Delivery
from .support.redis_server import lose_redis
from .support.schedules import make_schedule
from .support.simulation import START, Simulation, down_for_an_hour, fired, skipped, utc
from .support.walks import NEVER, NEVER_DENSE

pytestmark = pytest.mark.django_db

CommitCapture = Callable[..., Any]


def entries(schedule: Schedule) -> list[tuple[str, str]]:
    return list(
        ScheduleChange.objects.filter(schedule_name=schedule.name)
        .order_by("id")
        .values_list("action", "source")
    )


def fields() -> dict[str, Any]:
    return {"name": "nightly", "task": "tests.record", "kind": "cron", "cron": "0 3 * * *"}


def test_create_validates_writes_records_and_indexes_after_commit(
    index: DueIndex, django_capture_on_commit_callbacks: CommitCapture
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        schedule = services.create(fields())
    assert schedule.pk is not None
    assert schedule.next_run_at is not None
    assert index.scores([schedule.pk])[schedule.pk] is not None
    assert entries(schedule) == [("created", "python")]
    (entry,) = ScheduleChange.objects.filter(schedule=schedule)
    assert entry.changes["cron"] == [None, "0 3 * * *"]

    with pytest.raises(ValidationError) as refused:
        services.create({**fields(), "name": "other", "cron": "61 * * * *"})
    assert "cron" in refused.value.message_dict
    assert not Schedule.objects.filter(name="other").exists()
    with pytest.raises(errors.ServiceError, match="saved already"):
        services.create(schedule)


def test_a_write_through_the_services_checks_the_rules_once(
    index: DueIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The services validate (``services.validate``: the row's rules and the rest) and
    save() writes what was validated without checking it again; a save of settings changed
    since, or a save with no service before it, checks them."""
    checked: list[str] = []
    clean = Schedule.clean

    def counting(self: Schedule) -> None:
        checked.append(self.name)
        clean(self)

    monkeypatch.setattr(Schedule, "clean", counting)
    schedule = services.create(fields())
    assert checked == ["nightly"]
    services.update(schedule, {"cron": "0 4 * * *"})
    assert checked == ["nightly"] * 2
    services.pause(schedule)
    assert checked == ["nightly"] * 3  # no service validates a pause first: save() checks

    validated = Schedule(**{**fields(), "name": "changed after"})
    services.validate(validated)
    validated.set_first_run(timezone.now())
    validated.cron = "61 * * * *"  # changed after the check: save() checks again
    with pytest.raises(ValidationError) as refused:
        validated.save()
    assert "cron" in refused.value.message_dict


@pytest.mark.parametrize(
    "finished",
    [
        pytest.param({"end_at": datetime(2020, 1, 1, tzinfo=UTC)}, id="ended"),
        pytest.param({"max_runs": 2, "run_count": 2}, id="its-runs-used"),
        pytest.param(
            {
                "kind": "once",
                "run_at": datetime(2020, 1, 1, tzinfo=UTC),
                "max_runs": 1,
                "run_count": 1,
            },
            id="a-one-off-that-ran",
        ),
        pytest.param(
            {
                "kind": "once",
                "run_at": datetime(2099, 1, 1, tzinfo=UTC),
                "end_at": datetime(2098, 1, 1, tzinfo=UTC),
            },
            id="a-one-off-that-ends-before-its-time",
        ),
    ],
)
def test_create_makes_a_schedule_with_no_run_left_finished(
    index: DueIndex, django_capture_on_commit_callbacks: CommitCapture, finished: dict[str, Any]
) -> None:
    """No occurrence after now is a decision too: the schedule is created finished (no next
    run, no index entry), not refused as if nobody had decided its first run."""
    with django_capture_on_commit_callbacks(execute=True):
        schedule = services.create({**fields(), **finished})
    stored = Schedule.objects.get(pk=schedule.pk)
    assert (stored.next_run_at, stored.due_at, stored.enabled) == (None, None, True)
    assert index.scores([schedule.pk]) == {schedule.pk: None}
    assert entries(schedule) == [("created", "python")]


def test_a_new_one_off_in_the_past_that_would_run_is_still_refused() -> None:
    with pytest.raises(ValidationError) as refused:
        services.create({**fields(), "kind": "once", "run_at": datetime(2020, 1, 1, tzinfo=UTC)})
    assert refused.value.message_dict == {"run_at": ["A new one-off must run in the future."]}


def test_update_writes_what_changed_and_records_the_diff(index: DueIndex) -> None:
    schedule = services.create(fields())
    before = schedule.next_run_at
    admin = Origin(None, ScheduleChange.Source.ADMIN)

    assert services.update(schedule, {"cron": "30 4 * * *"}, origin=admin) is True
    assert schedule.version == 2
    assert schedule.next_run_at != before  # the timing changed: the next run follows
    (entry,) = ScheduleChange.objects.filter(action="changed")
    assert (entry.source, entry.changes) == ("admin", {"cron": ["0 3 * * *", "30 4 * * *"]})

    # Nothing to change: nothing written, the version stays.
    assert services.update(schedule, {"cron": "30 4 * * *"}) is False
    assert Schedule.objects.get(pk=schedule.pk).version == 2
    with pytest.raises(errors.ServiceError, match="Not settings of a schedule: next_run_at"):
        services.update(schedule, {"next_run_at": None})


def test_update_refuses_a_stale_version_and_writes_nothing() -> None:
    schedule = services.create(fields())
    services.update(schedule, {"cron": "5 * * * *"})  # now at version 2
    with pytest.raises(errors.VersionConflict) as conflict:
        services.update(schedule, {"cron": "6 * * * *"}, expected_version=1)
    assert conflict.value.current == 2
    assert Schedule.objects.get(pk=schedule.pk).cron == "5 * * * *"
    with pytest.raises(errors.VersionConflict):
        services.delete(schedule, expected_version=1)
    assert Schedule.objects.filter(pk=schedule.pk).exists()
    with pytest.raises(errors.VersionConflict):
        services.lock_for_edit(schedule, 1)
    services.lock_for_edit(schedule, 2)


def test_update_of_a_stale_instance_keeps_what_the_scheduler_wrote() -> None:
    """The service writes the settings onto the row as it is now: a copy loaded before the
    scheduler fired the schedule cannot put back the fired occurrence."""
    schedule = services.create(fields())
    stale = Schedule.objects.get(pk=schedule.pk)
    fired_to = schedule.next_run_at + timedelta(days=1)
    Schedule.objects.filter(pk=schedule.pk).update(
        fired_through=None, next_run_at=fired_to, run_count=1
    )

    stale.args = [1]
    services.update(stale)
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.args, row.next_run_at, row.run_count) == ([1], fired_to, 1)
    assert (stale.next_run_at, stale.args) == (fired_to, [1])


def test_enabled_through_update_pauses_and_resumes_like_the_actions(
    index: DueIndex, django_capture_on_commit_callbacks: CommitCapture
) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        services.update(schedule, {"enabled": False, "pause_note": "freeze"})
    assert schedule.paused_at is not None
    assert index.scores([schedule.pk])[schedule.pk] is None
    # Paused for a while: its next run lies in the past now.
    Schedule.objects.filter(pk=schedule.pk).update(
        fired_through=None, next_run_at=schedule.next_run_at - timedelta(minutes=5)
    )
    with django_capture_on_commit_callbacks(execute=True):
        services.update(Schedule.objects.get(pk=schedule.pk), {"enabled": True})
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.enabled, row.paused_at, row.pause_note) == (True, None, "")
    skipped = Run.objects.filter(schedule=row, status=Run.Status.SKIPPED)
    assert skipped.count() >= 5
    assert {run.note for run in skipped} == {"Paused: freeze"}
    assert index.scores([row.pk])[row.pk] is not None


def test_delete_and_delete_many_record_the_last_settings(
    index: DueIndex, django_capture_on_commit_callbacks: CommitCapture
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        one, two, three = (services.create({**fields(), "name": n}) for n in "abc")
        services.delete(one)
        assert services.delete_many([two, three, two]) == 2
    assert not Schedule.objects.exists()
    assert index.scores([one.pk, two.pk, three.pk]) == {one.pk: None, two.pk: None, three.pk: None}
    deleted = ScheduleChange.objects.filter(action="deleted")
    assert sorted(deleted.values_list("schedule_name", flat=True)) == ["a", "b", "c"]
    assert deleted.get(schedule_name="a").changes["cron"] == ["0 3 * * *", None]
    with pytest.raises(errors.ScheduleDeleted):
        services.pause(one)


def test_auto_pause_is_the_schedulers_own_change(
    index: DueIndex, django_capture_on_commit_callbacks: CommitCapture
) -> None:
    schedule = make_schedule()
    with django_capture_on_commit_callbacks(execute=True):
        paused = streaks.auto_pause([schedule.pk, 0], note="too many failures", using="default")
    assert paused == [schedule.pk]
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.enabled, row.pause_note, row.version) == (False, "too many failures", 2)
    assert entries(row) == [("paused", "scheduler")]
    assert index.scores([row.pk])[row.pk] is None
    assert streaks.auto_pause([schedule.pk], note="again", using="default") == []


def test_resync_records_only_what_it_wrote(settings: Any, index: DueIndex) -> None:
    schedule = make_schedule()
    result = services.resync([schedule])
    assert result.applied == 1
    assert entries(schedule)[-1] == ("resynced", "python")
    lose_redis(settings)
    with pytest.raises(RedisError):
        services.resync([schedule])
    assert ScheduleChange.objects.filter(action="resynced").count() == 1


def test_every_service_takes_who_acts() -> None:
    for name in services.__all__:
        function = getattr(services, name)
        # The scheduler's own writes (its advance, its counters, its auto-pause, its marks
        # of missed runs) act as the scheduler, the sync of declarations as the code, a
        # re-plan after a tz rule change as the tz database; lock_for_edit and lock_streaks
        # change nothing, calendar_users and calendar_use read, and validate,
        # outside_errors and validated_declarations check.
        machine = (
            "advance", "lock_streaks", "record_streaks", "auto_pause", "lock_for_edit",
            "sync_declared", "mark_missed", "mark_not_fired", "replan_for_zone_rules",
            "calendar_users", "calendar_use", "validate", "outside_errors",
            "validated_declarations",
        )  # fmt: skip
        if inspect.isfunction(function) and name not in machine:
            assert "origin" in inspect.signature(function).parameters, name


# -- pause and resume, through a real scheduler on a controlled clock -------------------------


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
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


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_resume_with_catch_up_hands_the_paused_period_to_the_policy(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="*/10 * * * *", timezone="UTC")
    services.pause(schedule)
    sim.at(START + timedelta(hours=1, minutes=5))
    services.resume(schedule, catch_up=True)
    sim.step()

    assert fired(schedule) == [utc("2026-03-27T13:00")]  # catch-up "latest"
    assert {reason for _at, reason in skipped(schedule)} == {"missed"}


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_an_interval_keeps_its_grid_across_a_pause(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=7))
    services.pause(schedule)
    sim.at(START + timedelta(minutes=30))
    services.resume(schedule)
    # 12:07, 12:14, 12:21, 12:28 were paused; the grid continues at 12:35.
    assert schedule.next_run_at == utc("2026-03-27T12:35")
    assert len(skipped(schedule)) == 4


# -- failures in a row (record_streaks, auto_pause), through a real scheduler -----------------


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
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


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_a_success_resets_the_failure_streak(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1), task="tests.boom")
    sim.run_until(START + timedelta(minutes=2))
    assert Schedule.objects.get(pk=schedule.pk).failure_streak == 2
    schedule.task = "tests.record"
    schedule.save()
    sim.run_until(START + timedelta(minutes=4))
    assert Schedule.objects.get(pk=schedule.pk).failure_streak == 0


# -- run now and backfill, through a real scheduler -------------------------------------------


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_run_now_uses_the_ledger_and_a_key_of_its_own(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(hours=1))
    run = services.run_now(schedule)
    sim.step()

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.trigger == Run.Trigger.RUN_NOW
    assert run.attempts == 1
    [delivery] = Delivery.objects.filter(schedule_id=schedule.pk)
    assert delivery.key == run.idempotency_key == f"{schedule.pk}:{to_ms(START)}"
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == START + timedelta(hours=1)
    # A second one at the same instant gets a key of its own.
    again = services.run_now(schedule)
    assert again.idempotency_key != run.idempotency_key


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_run_now_with_advance_takes_the_place_of_the_next_run(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(hours=1))
    services.run_now(schedule, advance=True)
    sim.step()

    assert skipped(schedule) == [(START + timedelta(hours=1), "replaced")]
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == START + timedelta(hours=2)


def runs_of(schedule: Schedule) -> list[tuple[datetime, str, str]]:
    """Each run of the schedule: its nominal time, how it came to be, and its status."""
    return list(
        Run.objects.filter(schedule=schedule)
        .order_by("scheduled_for")
        .values_list("scheduled_for", "trigger", "status")
    )


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_run_now_on_the_millisecond_of_the_next_run_leaves_that_run_its_key(
    sim: Simulation,
) -> None:
    """Run now at the very millisecond of the regular run not claimed yet took that run's
    key: the claim then counted the occurrence a duplicate and it never ran as itself (issue
    21, under concurrent load)."""
    schedule = make_schedule(kind="interval", interval=timedelta(hours=1))
    regular = START + timedelta(hours=1)
    sim.at(regular)  # Redis TIME on the next run, which no scheduler has claimed yet

    run = services.run_now(schedule)

    assert run.scheduled_for == regular + timedelta(milliseconds=1)
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == regular  # it did not move
    sim.step()
    assert runs_of(schedule) == [
        (regular, Run.Trigger.SCHEDULE, Run.Status.SUCCEEDED),
        (regular + timedelta(milliseconds=1), Run.Trigger.RUN_NOW, Run.Status.SUCCEEDED),
    ]
    assert sorted(Delivery.objects.values_list("key", flat=True)) == [
        f"{schedule.pk}:{to_ms(regular)}",
        f"{schedule.pk}:{to_ms(regular) + 1}",
    ]
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == regular + timedelta(hours=1)


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_run_now_with_advance_on_the_millisecond_of_the_next_run_records_it_replaced(
    sim: Simulation,
) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(hours=1))
    regular = START + timedelta(hours=1)
    sim.at(regular)

    run = services.run_now(schedule, advance=True)
    sim.step()

    assert runs_of(schedule) == [
        (regular, Run.Trigger.SCHEDULE, Run.Status.SKIPPED),
        (regular + timedelta(milliseconds=1), Run.Trigger.RUN_NOW, Run.Status.SUCCEEDED),
    ]
    assert skipped(schedule) == [(regular, "replaced")]
    assert run.idempotency_key == f"{schedule.pk}:{to_ms(regular) + 1}"
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == regular + timedelta(hours=1)


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_run_now_never_takes_the_key_of_an_occurrence_still_to_come(sim: Simulation) -> None:
    """Not only the next run: every occurrence the schedule has yet to reach keeps its key.
    Here no scheduler ran for three minutes, and catch-up "all" fires each one."""
    schedule = make_schedule(kind="cron", cron="* * * * *", timezone="UTC", catch_up="all")
    sim.at(START + timedelta(minutes=3))  # 12:01, 12:02 and 12:03 are due

    run = services.run_now(schedule)
    sim.step()

    assert run.scheduled_for == START + timedelta(minutes=3, milliseconds=1)
    assert runs_of(schedule) == [
        *((START + timedelta(minutes=m), "schedule", "succeeded") for m in (1, 2, 3)),
        (START + timedelta(minutes=3, milliseconds=1), "run_now", "succeeded"),
    ]
    assert Delivery.objects.count() == 4


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
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


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_backfill_fires_occurrences_that_were_skipped(sim: Simulation) -> None:
    schedule = down_for_an_hour(sim)
    report = services.backfill(schedule, utc("2026-03-27T12:01"), utc("2026-03-27T12:10"))
    sim.step()
    assert report.requeued == 10
    assert len(fired(schedule)) == 11
    assert len(skipped(schedule)) == 49


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_a_backfill_over_occurrences_not_claimed_yet_fires_each_once(sim: Simulation) -> None:
    """Unlike a run now, a backfill queues each occurrence under its own key: one the
    scheduler has yet to reach is that occurrence, fired once, and the claim that reaches
    it finds it in the ledger and fires nothing more."""
    schedule = make_schedule(kind="cron", cron="0 * * * *", timezone="UTC")
    sim.at(START + timedelta(hours=3, minutes=30))  # 13:00, 14:00, 15:00 not claimed yet

    services.backfill(schedule, utc("2026-03-27T11:00"), utc("2026-03-27T15:00"))
    sim.step()

    hours = [utc(f"2026-03-27T{h}:00") for h in range(11, 16)]
    assert fired(schedule) == hours
    assert sorted(Delivery.objects.values_list("key", flat=True)) == sorted(
        f"{schedule.pk}:{to_ms(at)}" for at in hours
    )
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == utc("2026-03-27T16:00")


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
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
    with pytest.raises(errors.ServiceError, match=fragment):
        services.backfill(schedule, utc(start), utc(end))
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_manual_operations_refuse_a_task_no_longer_registered(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="0 * * * *", timezone="UTC")
    Schedule.objects.filter(pk=schedule.pk).update(task="gone.task")
    schedule.refresh_from_db()
    with pytest.raises(
        errors.ServiceError, match=re.escape("'gone.task' is not a registered task")
    ):
        services.run_now(schedule)
    with pytest.raises(errors.ServiceError, match="not a registered task"):
        services.backfill(schedule, utc("2026-03-26T00:00"), utc("2026-03-26T05:00"))
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_a_backfill_needs_aware_times(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="0 * * * *", timezone="UTC")
    with pytest.raises(errors.ServiceError, match="start must be a date and time with a time"):
        services.backfill(schedule, datetime(2026, 3, 26), utc("2026-03-26T05:00"))
    assert not Run.objects.exists()


# -- backfills of crons whose matches are all skipped (tests/support/walks.py) -------------------


@pytest.mark.django_db
def test_a_backfill_of_a_cron_that_never_exists_answers_zero_at_once(walls: list[int]) -> None:
    schedule = make_schedule(kind="cron", cron=NEVER.cron, timezone=NEVER.timezone, dst_gap="skip")
    walls[0] = 0
    report = services.backfill(
        schedule, datetime(2000, 1, 1, tzinfo=UTC), timezone.now() - timedelta(minutes=1)
    )
    assert (report.occurrences, report.queued) == (0, 0)
    # Until 1980 the change was not that night: 02:30 existed, one occurrence a year.
    report = services.backfill(
        schedule,
        datetime(1970, 1, 1, tzinfo=UTC),
        timezone.now() - timedelta(minutes=1),
        dry_run=True,
    )
    assert report.occurrences == 11  # 1970 to 1980 (summer time began on 6 April 1980)
    assert walls[0] <= 2_000


@pytest.mark.django_db
def test_a_backfill_over_too_many_skipped_times_is_refused_saying_why(
    walls: list[int], settings: Any
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MAX_BACKFILL_RUNS": 1000}
    schedule = make_schedule(
        kind="cron", cron=NEVER_DENSE.cron, timezone=NEVER_DENSE.timezone, dst_gap="skip"
    )
    walls[0] = 0
    with pytest.raises(errors.ServiceError, match="skipped local times"):
        services.backfill(
            schedule, datetime(2000, 1, 1, tzinfo=UTC), timezone.now() - timedelta(minutes=1)
        )
    # The first change's seconds, then a few wall times per skipped time up to the limit.
    assert walls[0] <= 2 * 3_600 + 3 * 1_000
