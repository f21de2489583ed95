"""Exactly once without the ledger's rows (issue 32): retention deletes old runs, and calendar
and zone-rule re-plans compute next runs from rules; neither may fire an occurrence twice,
early, or lose one. Each test drives the real scheduler (``Worker`` in this process, on the
simulation's travelling clock) and the services, then audits the ledger and what the task
received (``Delivery``: one row per time it ran).

The mechanism: each schedule's ``fired_through``, moved by the claim's conditional advance and
by every path that decides a next run (``docs/reliability.md``, "Exactly once, and its one
exception")."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import date, datetime, timedelta
from itertools import islice
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import IntegrityError, connection, connections, transaction

from django_schedulinator import services, timing
from django_schedulinator.errors import OutdatedZoneRules, PrunedRange
from django_schedulinator.models import Calendar, PrunedRuns, Run, Schedule, ZoneRules

from .models import Delivery
from .support.commits import committed
from .support.schedules import model_fields
from .support.simulation import START, Simulation, fired, skipped, utc

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler passes: real commits


def create(name: str, **fields: Any) -> Schedule:
    with committed():
        return services.create(Schedule(**model_fields(name=name, **fields)))


def calendar(name: str, *days: str, zone: str = "UTC") -> Calendar:
    cal = Calendar(name=name, timezone=zone)
    with committed():
        services.save_calendar(cal, days=[(date.fromisoformat(d), "closed") for d in days])
    return cal


def set_days(cal: Calendar, *days: str) -> None:
    with committed():
        services.save_calendar(cal, days=[(date.fromisoformat(d), "closed") for d in days])


def deliveries(schedule: Schedule) -> Counter[datetime]:
    """How many times the task ran for each occurrence of ``schedule``."""
    return Counter(
        Delivery.objects.filter(schedule_id=schedule.pk).values_list("scheduled_for", flat=True)
    )


def assert_each_ran_once(schedule: Schedule) -> None:
    twice = {at: n for at, n in deliveries(schedule).items() if n > 1}
    assert twice == {}, f"ran more than once: {twice}"


def prune(older_than: str = "1s", keep_last: int = 10) -> None:
    call_command(
        "prune_runs", "--older-than", older_than, "--keep-last", str(keep_last), "--no-progress"
    )


# -- retention -------------------------------------------------------------------------------


def test_a_one_off_that_ran_stays_run_after_a_prune_and_a_resume(sim: Simulation) -> None:
    """Issue 32, item 1: a one-off fired; ten runs now; a prune that keeps ten (by nominal
    time: the runs now are later); then pause and resume re-armed its run_at, and the next
    pass ran it again under the same key."""
    once = create("once", kind="once", cron="", run_at=START + timedelta(minutes=1))
    sim.run_until(START + timedelta(minutes=2))
    assert fired(once) == [START + timedelta(minutes=1)]
    for minute in range(3, 13):
        sim.at(START + timedelta(minutes=minute))
        with committed():
            services.run_now(once)
        sim.step()
    sim.at(START + timedelta(hours=1))
    prune("1s", keep_last=10)
    services.pause(once)
    services.resume(once)
    once.refresh_from_db()
    assert once.next_run_at is None  # finished: what it fired through stays fired
    sim.run_until(START + timedelta(hours=2))

    assert deliveries(once)[START + timedelta(minutes=1)] == 1
    assert_each_ran_once(once)
    # A one-off keeps its own run, the record of its one occurrence.
    assert Run.objects.filter(schedule=once, trigger="schedule").count() == 1


def test_a_backfill_over_a_pruned_range_is_refused_unless_asked(sim: Simulation) -> None:
    """Issue 32, item 2: backfill 20 minutes of a per-minute schedule, prune keeping 10,
    backfill the same range again: it re-ran the pruned ones under their keys."""
    minutely = create("minutely", cron="* * * * *", timezone="UTC")
    # No scheduler for 25 minutes: the latest occurrence fires, the others are skipped.
    sim.at(START + timedelta(minutes=25, seconds=30))
    sim.step()
    first, last = START + timedelta(minutes=1), START + timedelta(minutes=20)
    with committed():
        report = services.backfill(minutely, first, last)
    assert (report.queued, report.requeued) == (0, 20)
    sim.step()
    assert len(deliveries(minutely)) == 21  # the 20 backfilled and the latest
    sim.at(START + timedelta(hours=1))
    prune("1s", keep_last=10)  # keeps 16-25: 1-15 go
    pruned = PrunedRuns.objects.get(schedule=minutely)
    assert (pruned.through, pruned.runs) == (START + timedelta(minutes=15), 15)

    with pytest.raises(PrunedRange) as refused:
        services.backfill(minutely, first, last)
    assert "up to 2026-03-27 12:15:00 UTC" in str(refused.value)
    assert "15 occurrence(s) of the range (2026-03-27 12:01:00 UTC to 2026-03-27 12:15:00 UTC)" in (
        str(refused.value)
    )
    # Past what was pruned, the ledger tells: nothing new.
    again = services.backfill(minutely, START + timedelta(minutes=16), last)
    assert (again.queued, again.already) == (0, 5)
    sim.step()
    assert_each_ran_once(minutely)

    # Asked explicitly: the pruned ones run again, and the report says how many.
    with committed():
        rerun = services.backfill(minutely, first, last, rerun_pruned=True)
    assert (rerun.queued, rerun.rerun_pruned, rerun.already) == (15, 15, 5)


def test_retention_keeps_what_still_guards_an_occurrence(sim: Simulation) -> None:
    """A backfilled run ahead of what the schedule fired through guards its occurrence
    until the scheduler reaches it: a prune leaves it, and the scheduler does not run
    that occurrence again."""
    hourly = create("hourly", cron="0 * * * *", timezone="UTC")
    services.pause(hourly)
    sim.at(START + timedelta(hours=5, minutes=30))
    with committed():
        services.backfill(hourly, START, START + timedelta(hours=5))
    sim.step()
    assert len(deliveries(hourly)) == 6  # 12:00 to 17:00
    prune("1s", keep_last=1)
    assert Run.objects.filter(schedule=hourly).count() == 6  # all ahead of its mark
    services.resume(hourly, catch_up=True)  # the paused period to catch-up "all"
    services.update(hourly, {"catch_up": "all"})
    sim.run_until(START + timedelta(hours=6, minutes=30))
    assert_each_ran_once(hourly)


def test_a_run_now_never_takes_a_pruned_occurrences_key(sim: Simulation) -> None:
    every_second = create("second", cron="* * * * * *", timezone="UTC")
    sim.run_until(START + timedelta(seconds=5))
    sim.at(START + timedelta(minutes=5))
    sim.step()
    prune("1s", keep_last=1)
    assert PrunedRuns.objects.filter(schedule=every_second).exists()
    # A run now at an instant that is one of its occurrences (pruned) takes the next free one.
    sim.at(START + timedelta(seconds=3))
    with committed():
        run = services.run_now(every_second)
    assert run.scheduled_for == START + timedelta(seconds=3, milliseconds=1)


def test_no_write_can_put_a_next_run_at_or_before_what_fired(sim: Simulation) -> None:
    """The table's constraint: a bulk write (an older release, a data migration) that
    would re-arm an occurrence that fired fails instead."""
    hourly = create("hourly", cron="0 * * * *", timezone="UTC")
    sim.run_until(START + timedelta(hours=2, minutes=1))
    hourly.refresh_from_db()
    assert hourly.fired_through == START + timedelta(hours=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        Schedule.objects.filter(pk=hourly.pk).update(next_run_at=START + timedelta(hours=1))


# -- calendars -------------------------------------------------------------------------------

# The simulation starts on Friday 27 March 2026 at 12:00 UTC: Monday 30 March, Tuesday 31.
MONDAY, TUESDAY = "2026-03-30", "2026-03-31"


def test_a_day_excluded_after_its_run_does_not_run_it_again(sim: Simulation) -> None:
    """Issue 32, item 3: weekly Monday 09:00 on "next business day" ran Monday 09:00; at
    20:00 Monday was added to its calendar; the re-plan moved Monday's occurrence to Tuesday
    09:00 and it ran again."""
    hols = calendar("hols")
    weekly = create("weekly", cron="0 9 * * 1", timezone="UTC", calendars=["hols"],
                    calendar_rule="next_business_day")  # fmt: skip
    sim.run_until(utc("2026-03-30T20:00"))
    assert fired(weekly) == [utc("2026-03-30T09:00")]
    set_days(hols, MONDAY)
    sim.run_until(utc("2026-04-01T12:00"))

    assert fired(weekly) == [utc("2026-03-30T09:00")]
    assert skipped(weekly) == []
    assert_each_ran_once(weekly)
    weekly.refresh_from_db()
    assert weekly.next_run_at == utc("2026-04-06T09:00")


def test_removing_an_exclusion_keeps_the_moved_run(sim: Simulation) -> None:
    """Issue 32, item 4: Monday excluded, its run planned for Tuesday 09:00; at Monday
    10:00 the exclusion is removed; the re-plan jumped to next week and that week's
    occurrence neither ran nor appeared in the ledger."""
    hols = calendar("hols", MONDAY)
    weekly = create("weekly", cron="0 9 * * 1", timezone="UTC", calendars=["hols"],
                    calendar_rule="next_business_day")  # fmt: skip
    weekly.refresh_from_db()
    assert weekly.next_run_at == utc("2026-03-31T09:00")
    sim.run_until(utc("2026-03-30T10:00"))
    set_days(hols)
    sim.run_until(utc("2026-04-01T12:00"))

    # Late (its time passed while excluded), under the catch-up policy ("latest": it fires).
    assert fired(weekly) == [utc("2026-03-30T09:00")]
    assert_each_ran_once(weekly)
    weekly.refresh_from_db()
    assert weekly.next_run_at == utc("2026-04-06T09:00")


def test_a_moved_run_the_change_puts_behind_the_mark_is_late_not_lost(sim: Simulation) -> None:
    """Hourly on "next business day", Monday excluded: Monday's runs are moved to Tuesday.
    On Tuesday at 05:30 (Tuesday's own 00:00-05:00 ran, with Monday's) the exclusion is
    removed: Monday's later runs are now in the past; the catch-up policy fires the latest,
    and records the others as missed. None is lost, none runs twice."""
    hols = calendar("hols", MONDAY)
    hourly = create("hourly", cron="0 * * * *", timezone="UTC", calendars=["hols"],
                    calendar_rule="next_business_day")  # fmt: skip
    sim.run_until(utc("2026-03-31T05:30"))
    set_days(hols)
    sim.run_until(utc("2026-03-31T08:30"))

    assert_each_ran_once(hourly)
    runs = dict(Run.objects.filter(schedule=hourly).values_list("scheduled_for", "status"))
    monday = [utc("2026-03-30T00:00") + timedelta(hours=h) for h in range(24)]
    # Monday 00:00-05:00 moved to Tuesday 00:00-05:00, where Tuesday's own ran.
    assert [runs.get(at) for at in monday[:6]] == [None] * 6
    # 06:00-22:00: late when the exclusion went, passed over by "latest"; 23:00 ran.
    assert {runs.get(at) for at in monday[6:23]} == {"skipped"}
    assert runs[monday[23]] == "succeeded"
    assert all(runs[utc("2026-03-31T00:00") + timedelta(hours=h)] == "succeeded" for h in range(9))


def test_a_dense_schedule_keeps_the_moves_it_decided_without_a_row_each(
    sim: Simulation,
) -> None:
    """Every 17 minutes (off the day's grid, so moved runs do not land on Tuesday's own),
    on next business day, from Monday noon: Monday excluded at 15:00, after Monday's runs up
    to then ran. Those do not run again on Tuesday; Monday's later ones do, at their times;
    nothing is written per decided run (the schedule keeps one range)."""
    hols = calendar("hols")
    dense = create("dense", kind="interval", cron="", interval=timedelta(minutes=17),
                   anchor_at=utc("2026-03-30T00:00"), start_at=utc("2026-03-30T12:00"),
                   calendars=["hols"], calendar_rule="next_business_day")  # fmt: skip
    sim.run_until(utc("2026-03-30T15:00"))
    set_days(hols, MONDAY)
    dense.refresh_from_db()
    assert len(dense.decided_moves) == 1
    sim.run_until(utc("2026-04-01T00:00"))

    assert_each_ran_once(dense)
    times = {at for at in fired(dense) if at >= utc(TUESDAY)}
    grid = {
        utc("2026-03-30T00:00") + timedelta(minutes=17 * n) for n in range(2 * 24 * 60 // 17 + 1)
    }
    monday = sorted(at for at in grid if utc("2026-03-30T12:00") <= at < utc(TUESDAY))
    ran_monday = [at for at in monday if at <= utc("2026-03-30T15:00")]
    moved_later = [at + timedelta(days=1) for at in monday if at > utc("2026-03-30T15:00")]
    assert set(moved_later) <= times  # Monday's later runs, on Tuesday
    assert not {at + timedelta(days=1) for at in ran_monday} & times - grid
    assert (
        not Run.objects.filter(schedule=dense, scheduled_for__gte=utc(TUESDAY))
        .filter(status="skipped")
        .exists()
    )


def test_a_closure_that_grows_moves_what_had_not_run_and_only_that(sim: Simulation) -> None:
    """Hourly on Mondays and Tuesdays, next business day. Monday excluded: its runs land on
    Tuesday with Tuesday's own. At Tuesday 05:30 Tuesday is excluded too: the runs that
    landed (Monday's and Tuesday's 00:00-05:00) stay run; the others (06:00-23:00 of both
    days) land on Wednesday, which has none of its own: exactly 06:00-23:00, once each."""
    hols = calendar("hols", MONDAY)
    hourly = create("hourly", cron="0 * * * 1,2", timezone="UTC", calendars=["hols"],
                    calendar_rule="next_business_day")  # fmt: skip
    sim.run_until(utc("2026-03-31T05:30"))
    assert fired(hourly) == [utc("2026-03-31T00:00") + timedelta(hours=h) for h in range(6)]
    set_days(hols, MONDAY, TUESDAY)
    sim.run_until(utc("2026-04-02T00:30"))

    assert_each_ran_once(hourly)
    wednesday = [at for at in fired(hourly) if at >= utc("2026-04-01T00:00")]
    assert wednesday == [utc("2026-04-01T06:00") + timedelta(hours=h) for h in range(18)]


def test_a_calendar_in_another_zone_keeps_what_ran(sim: Simulation) -> None:
    """Item 3 with the calendar's days drawn in Berlin and the schedule in UTC (the walk
    then looks at the day moment by moment)."""
    hols = calendar("hols", zone="Europe/Berlin")
    weekly = create("weekly", cron="0 9 * * 1", timezone="UTC", calendars=["hols"],
                    calendar_rule="next_business_day")  # fmt: skip
    sim.run_until(utc("2026-03-30T20:00"))
    set_days(hols, MONDAY)
    sim.run_until(utc("2026-04-01T12:00"))
    assert fired(weekly) == [utc("2026-03-30T09:00")]
    assert_each_ran_once(weekly)


def test_a_day_excluded_after_it_began_records_its_remaining_runs(sim: Simulation) -> None:
    """Issue 32, item 10: a day excluded after it began (10:30) left no calendar record at
    all for that day's remaining occurrences."""
    hols = calendar("hols")
    hourly = create("hourly", cron="0 * * * *", timezone="UTC", calendars=["hols"])
    sim.run_until(utc("2026-03-30T10:30"))
    set_days(hols, MONDAY)
    sim.run_until(utc("2026-03-31T01:30"))

    assert skipped(hourly) == [(utc("2026-03-30T11:00"), "calendar")]
    assert utc("2026-03-30T10:00") in fired(hourly)
    assert not [at for at in fired(hourly) if utc("2026-03-30T11:00") <= at < utc(TUESDAY)]


def test_a_day_excluded_and_opened_again_before_its_marker_was_claimed_loses_nothing(
    sim: Simulation,
) -> None:
    """Found by the chaos test: the scheduler is behind (10:00 fired, then down); at 13:30
    Monday is excluded (its next run becomes the day's marker, 11:00, not yet claimed); at
    14:30 the exclusion is removed. The re-plan took the marker as recorded and passed the
    day over up to now: 11:00-14:00 neither ran nor were recorded. They are late instead,
    under the catch-up policy ("latest": 14:00 fires, the others are recorded missed)."""
    hols = calendar("hols")
    hourly = create("hourly", cron="0 * * * *", timezone="UTC", calendars=["hols"])
    sim.run_until(utc("2026-03-30T10:30"))
    sim.at(utc("2026-03-30T13:30"))
    set_days(hols, MONDAY)
    hourly.refresh_from_db()
    assert hourly.next_run_at == utc("2026-03-30T11:00")
    sim.at(utc("2026-03-30T14:30"))
    set_days(hols)
    sim.run_until(utc("2026-03-30T16:30"))

    assert_each_ran_once(hourly)
    accounted = set(fired(hourly)) | {at for at, _ in skipped(hourly)}
    monday = [utc("2026-03-30T00:00") + timedelta(hours=h) for h in range(17)]
    assert [at for at in monday if at not in accounted] == []
    assert utc("2026-03-30T14:00") in fired(hourly)


def test_an_occurrence_that_cannot_move_is_recorded_once_a_day(sim: Simulation) -> None:
    """Issue 32, item 10: an hourly schedule on "next business day" before a 45-day
    closure left 24 calendar records for one day (no business day within 31 days)."""
    closure = [str(date(2026, 3, 30) + timedelta(days=n)) for n in range(45)]
    calendar("closed", *closure)
    hourly = create("hourly", cron="0 * * * *", timezone="UTC", calendars=["closed"],
                    calendar_rule="next_business_day")  # fmt: skip
    sim.run_until(utc("2026-04-02T00:30"))

    records = [at for at, reason in skipped(hourly) if reason == "calendar"]
    assert records == [utc(f"2026-{day}T00:00") for day in ("03-30", "03-31", "04-01", "04-02")]


def test_a_calendar_change_during_a_claim_makes_the_claim_lose(sim: Simulation) -> None:
    """Issue 32, item 5: the claim re-checks the row and plans with the days it read; a
    change of the calendar meanwhile only wrote the rows whose next run it moved, so the
    claim's conditional advance committed a plan from the old days: the schedule ran on a
    closed Sunday."""
    hols = calendar("hols")
    daily = create("daily", cron="0 9 * * *", timezone="UTC", calendars=["hols"],
                   calendar_rule="next_business_day", catch_up="all")  # fmt: skip
    sim.run_until(utc("2026-03-28T08:00"))
    sim.at(utc("2026-03-28T09:00"))  # Saturday
    claimer = sim.worker.claimer
    batch, token = claimer.claim(100)
    plan = claimer.recheck(batch)  # plans Sunday 09:00 next, with the days it read
    set_days(hols, "2026-03-29")  # Sunday closed meanwhile: its run moves to Monday
    _fired, counters = claimer.commit(plan, token)
    assert counters.lost_races == 1  # planned with the old days: it does not commit
    sim.run_until(utc("2026-03-30T12:00"))

    # Saturday's, on the next pass; none on Sunday; Monday's own and Sunday's, once.
    assert fired(daily) == [utc("2026-03-28T09:00"), utc("2026-03-30T09:00")]
    assert_each_ran_once(daily)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL")
def test_a_calendar_deleted_while_a_schedule_naming_it_is_created() -> None:
    """Issue 32, item 7: check then insert, no lock: both committed, the name dangled and
    was ignored, so the schedule fired on the days it should avoid. Now whichever comes
    second sees the first."""
    cal = calendar("hols", "2026-12-25")
    created = threading.Event()
    release = threading.Event()
    outcome: list[Any] = []

    def create_and_hold() -> None:
        try:
            with transaction.atomic():
                services.create(Schedule(**model_fields(name="naming", calendars=["hols"])))
                created.set()
                release.wait(30)
        finally:
            connections.close_all()

    def delete() -> None:
        try:
            services.delete_calendar(Calendar.objects.get(pk=cal.pk))
            outcome.append("deleted")
        except ValidationError as exc:
            outcome.append(exc)
        finally:
            connections.close_all()

    holder = threading.Thread(target=create_and_hold)
    holder.start()
    assert created.wait(30)
    deleter = threading.Thread(target=delete)
    deleter.start()
    deleter.join(1)
    assert deleter.is_alive()  # waits for the schedule's transaction
    release.set()
    holder.join(30)
    deleter.join(30)
    [refused] = outcome
    assert isinstance(refused, ValidationError)
    assert "naming" in str(refused)
    assert Calendar.objects.filter(name="hols").exists()

    # The other order: the delete first; the create then finds the name gone.
    Schedule.objects.all().delete()
    with transaction.atomic():
        services.delete_calendar(Calendar.objects.get(name="hols"))
    with pytest.raises(ValidationError) as gone:
        services.create(Schedule(**model_fields(name="late", calendars=["hols"])))
    assert "No calendar is named hols" in str(gone.value)


# -- time-zone rules -----------------------------------------------------------------------------


def test_a_scheduler_on_an_older_tz_release_does_not_claim(sim: Simulation) -> None:
    """Issue 32, item 6: a scheduler not yet restarted in a rolling restart planned the next
    run with the old rules after the new release was recorded: an hour early."""
    minutely = create("minutely", cron="* * * * *", timezone="UTC")
    ZoneRules.objects.update_or_create(
        pk=1,
        defaults={"version": "2099z", "source": "tzdata", "start": START, "end": START,
                  "offsets": {}, "recorded_at": START},
    )  # fmt: skip
    sim.at(START + timedelta(minutes=5))
    with pytest.raises(OutdatedZoneRules) as refused:
        sim.step()
    assert "2099z" in str(refused.value)
    assert not Run.objects.filter(schedule=minutely).exists()
    # Given back: the entry is due again, for a scheduler with the rules recorded.
    assert sim.worker.index.scores([minutely.pk])[minutely.pk] is not None


def test_run_scheduler_on_an_older_tz_release_exits_saying_what_to_install(
    sim: Simulation,
) -> None:
    ZoneRules.objects.update_or_create(
        pk=1,
        defaults={"version": "2099z", "source": "tzdata", "start": START, "end": START,
                  "offsets": {}, "recorded_at": START},
    )  # fmt: skip
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as refused:
        call_command("run_scheduler", "--once", verbosity=0)
    assert "install 2099z or newer" in str(refused.value)
    assert ZoneRules.objects.get().version == "2099z"  # never recorded back


def test_tz_version_order() -> None:
    from django_schedulinator.timing.zonedata import newer

    assert all(
        newer(a, b) for a, b in [("2025a", "2024b"), ("2024b", "2024a"), ("2024aa", "2024z")]
    )
    assert not [
        (a, b)
        for a, b in [("2024b", "2024b"), ("unknown", "2024b"), ("2025a", None), (None, "2025a")]
        if newer(a, b)
    ]


# -- bounded work --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_long_closure_costs_a_step_a_day(walls: list[int]) -> None:
    """Issue 32, item 9: an every-minute schedule with jitter, on "next business day",
    before a two-year closure walked every per-minute skip marker (about a million, 1.6 ms
    each): a scheduler pass hung for hours. Counted in wall times examined, never timed."""
    cal = timing.DayCalendar.of(
        (("UTC", date(2027, 1, 1) + timedelta(days=n), "closed") for n in range(730)),
        move=True,
        weekends=[("UTC", (6, 7))],
    )
    spec = timing.Timing(kind="cron", cron="* * * * *", timezone="UTC",
                         jitter=timedelta(seconds=30), calendar=cal)  # fmt: skip
    nominal = utc("2026-12-31T23:58")
    plan = timing.plan_due(spec, timing.CatchUp(), schedule_id=7, nominal=nominal, due_at=None,
                           now=nominal + timedelta(minutes=1))  # fmt: skip
    assert plan.fire == [nominal]
    assert walls[0] < 2 * 730 + 100  # a wall or two a day of the closure
    walls[0] = 0
    moved = timing.Timing(kind="cron", cron="* * * * *", timezone="UTC", calendar=cal)
    items = list(islice(timing.occurrences(moved, nominal, include_skipped=True), 800))
    assert items[2].calendar == timing.CAL_SKIPPED  # 1 January 2027: cannot move
    assert walls[0] < 2 * 800 + 100
