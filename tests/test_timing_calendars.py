"""Calendars of excluded days (holidays): an occurrence on one is skipped (one marker a day,
recorded with the reason "calendar") or moved to the same local time on the next business
day. The vectors are worked out by hand from the calendar and the zones' rules (never by the
code under test); the properties check that no excluded day ever fires, against the day
each instant falls on, read with zoneinfo alone. No database, no Redis: plain functions."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

from hypothesis import example, given, settings
from hypothesis import strategies as st

from django_schedulinator.timing import (
    CAL_MOVED,
    CAL_SKIPPED,
    CatchUp,
    DayCalendar,
    Moment,
    SkipReason,
    Timing,
    catchup,
    describe,
    occurrences,
    occurrences_before,
    plan_due,
    preview,
)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def days(
    zone: str, *dates: str, move: bool = False, weekend: tuple[int, ...] = (6, 7)
) -> DayCalendar:
    return DayCalendar.of(
        ((zone, date.fromisoformat(d), f"day {d}") for d in dates),
        move=move,
        weekends=[(zone, weekend)],
        names=["hols"],
    )


def first(timing: Timing, after: datetime, count: int, **options: bool) -> list[Moment]:
    return list(islice(occurrences(timing, after, **options), count))


def seen(moments: list[Moment]) -> list[tuple[datetime, str]]:
    return [(m.at, m.calendar) for m in moments]


LONDON_XMAS = days("Europe/London", "2026-12-25", "2026-12-28", "2027-01-01")


# -- skipped -------------------------------------------------------------------------------------


def test_a_daily_run_skips_each_excluded_day_once() -> None:
    # London keeps GMT (UTC+0) in December. 25 December is a Friday, 28 a Monday.
    daily = Timing(kind="cron", cron="0 9 * * *", timezone="Europe/London", calendar=LONDON_XMAS)
    moments = first(daily, utc("2026-12-24T00:00"), 6, include_skipped=True)
    assert seen(moments) == [
        (utc("2026-12-24T09:00"), ""),
        (utc("2026-12-25T09:00"), CAL_SKIPPED),
        (utc("2026-12-26T09:00"), ""),
        (utc("2026-12-27T09:00"), ""),
        (utc("2026-12-28T09:00"), CAL_SKIPPED),
        (utc("2026-12-29T09:00"), ""),
    ]
    assert moments[1].excluded == "day 2026-12-25"
    # Without the markers, the excluded days are simply not there.
    assert [m.at for m in first(daily, utc("2026-12-24T00:00"), 3)] == [
        utc("2026-12-24T09:00"),
        utc("2026-12-26T09:00"),
        utc("2026-12-27T09:00"),
    ]


def test_an_hourly_run_records_one_skip_for_the_whole_day() -> None:
    hourly = Timing(kind="cron", cron="0 * * * *", calendar=days("UTC", "2026-12-25"))
    moments = first(hourly, utc("2026-12-24T22:30"), 4, include_skipped=True)
    assert seen(moments) == [
        (utc("2026-12-24T23:00"), ""),
        (utc("2026-12-25T00:00"), CAL_SKIPPED),  # the day's first occurrence stands for it
        (utc("2026-12-26T00:00"), ""),
        (utc("2026-12-26T01:00"), ""),
    ]
    # The marker has one instant, so that the ledger records the day once: from the marker,
    # or from any time later in the day, the next moment is the next day's.
    for after in (utc("2026-12-25T00:00"), utc("2026-12-25T05:30")):
        assert seen(first(hourly, after, 1, include_skipped=True)) == [
            (utc("2026-12-26T00:00"), "")
        ]


def test_the_calendars_zone_draws_the_day() -> None:
    # Christmas in Auckland (NZDT, UTC+13) runs from 11:00 UTC on the 24th to 11:00 UTC on
    # the 25th: an hourly run in UTC is skipped over exactly those hours.
    hourly = Timing(kind="cron", cron="0 * * * *", calendar=days("Pacific/Auckland", "2026-12-25"))
    moments = first(hourly, utc("2026-12-24T09:30"), 4, include_skipped=True)
    assert seen(moments) == [
        (utc("2026-12-24T10:00"), ""),
        (utc("2026-12-24T11:00"), CAL_SKIPPED),
        (utc("2026-12-25T11:00"), ""),
        (utc("2026-12-25T12:00"), ""),
    ]


def test_an_interval_keeps_its_grid_across_an_excluded_day() -> None:
    every_six = Timing(
        kind="interval",
        interval=timedelta(hours=6),
        anchor_at=utc("2026-12-01T00:00"),
        calendar=days("UTC", "2026-12-25"),
    )
    moments = first(every_six, utc("2026-12-24T12:00"), 4, include_skipped=True)
    assert seen(moments) == [
        (utc("2026-12-24T18:00"), ""),
        (utc("2026-12-25T00:00"), CAL_SKIPPED),
        (utc("2026-12-26T00:00"), ""),
        (utc("2026-12-26T06:00"), ""),
    ]


def test_backwards_is_the_same_timeline() -> None:
    daily = Timing(kind="cron", cron="0 9 * * *", timezone="Europe/London", calendar=LONDON_XMAS)
    back = list(islice(occurrences_before(daily, utc("2026-12-29T10:00"), include_skipped=True), 6))
    assert seen(back) == seen(first(daily, utc("2026-12-24T00:00"), 6, include_skipped=True))[::-1]


def test_a_late_claim_fires_the_day_after_and_records_the_holiday() -> None:
    daily = Timing(kind="cron", cron="0 9 * * *", calendar=days("UTC", "2026-12-25"))
    plan = plan_due(
        daily,
        CatchUp(mode="latest"),
        schedule_id=1,
        nominal=utc("2026-12-25T09:00"),  # the row's next run: the day's marker
        due_at=None,
        now=utc("2026-12-26T10:00"),
    )
    assert plan.fire == [utc("2026-12-26T09:00")]
    assert [(s.at, s.reason) for s in plan.skips] == [
        (utc("2026-12-25T09:00"), SkipReason.CALENDAR)
    ]
    assert "day 2026-12-25" in plan.skips[0].note
    assert plan.next_run_at == utc("2026-12-27T09:00")


# -- moved ---------------------------------------------------------------------------------------


def test_a_weekly_run_moves_to_the_next_business_day() -> None:
    fridays = Timing(
        kind="cron",
        cron="0 9 * * 5",
        timezone="Europe/London",
        calendar=replace(LONDON_XMAS, move=True),
    )
    moments = first(fridays, utc("2026-12-17T00:00"), 4)
    assert seen(moments) == [
        (utc("2026-12-18T09:00"), ""),
        # Friday 25th: Saturday and Sunday are the weekend, Monday 28th is excluded.
        (utc("2026-12-29T09:00"), CAL_MOVED),
        # Friday 1 January: moved over the weekend to Monday the 4th.
        (utc("2027-01-04T09:00"), CAL_MOVED),
        (utc("2027-01-08T09:00"), ""),
    ]
    assert "day 2026-12-25" in moments[1].excluded
    back = list(islice(occurrences_before(fridays, utc("2027-01-08T10:00")), 4))
    assert [m.at for m in back] == [m.at for m in moments][::-1]


def test_moved_runs_that_land_on_a_run_fire_once() -> None:
    weekdays = Timing(
        kind="cron", cron="0 9 * * 1-5", calendar=days("UTC", "2026-12-25", "2026-12-28", move=True)
    )
    # Thursday 24th; Friday 25th and Monday 28th both move to Tuesday 29th, which has its own.
    assert [m.at for m in first(weekdays, utc("2026-12-24T00:00"), 3)] == [
        utc("2026-12-24T09:00"),
        utc("2026-12-29T09:00"),
        utc("2026-12-30T09:00"),
    ]


def test_a_moved_run_keeps_its_local_time_across_a_dst_change() -> None:
    # Friday 26 March 2027 is excluded; Berlin moves to CEST on Sunday the 28th, so 09:00
    # on Monday the 29th is 07:00 UTC, where the Friday's 09:00 was 08:00 UTC.
    fridays = Timing(
        kind="cron",
        cron="0 9 * * 5",
        timezone="Europe/Berlin",
        calendar=days("Europe/Berlin", "2027-03-26", move=True),
    )
    assert seen(first(fridays, utc("2027-03-20T00:00"), 2)) == [
        (utc("2027-03-29T07:00"), CAL_MOVED),
        (utc("2027-04-02T07:00"), ""),
    ]


def test_another_weekend_is_kept() -> None:
    # A Friday-Saturday weekend: Thursday 24th moves to Sunday 27th.
    thursdays = Timing(
        kind="cron", cron="0 9 * * 4", calendar=days("UTC", "2026-12-24", move=True, weekend=(5, 6))
    )
    assert seen(first(thursdays, utc("2026-12-20T00:00"), 1)) == [
        (utc("2026-12-27T09:00"), CAL_MOVED)
    ]


def test_a_run_moved_past_the_end_is_skipped() -> None:
    fridays = Timing(
        kind="cron",
        cron="0 9 * * 5",
        end_at=utc("2026-12-27T00:00"),
        calendar=days("UTC", "2026-12-25", move=True),
    )
    assert seen(first(fridays, utc("2026-12-20T00:00"), 5, include_skipped=True)) == [
        (utc("2026-12-25T09:00"), CAL_SKIPPED)
    ]


def test_previews_and_descriptions_say_it() -> None:
    moved = Timing(
        kind="cron",
        cron="0 9 * * 5",
        timezone="Europe/London",
        calendar=replace(LONDON_XMAS, move=True),
    )
    items = preview(moved, start=utc("2026-12-20T00:00"), count=1)
    assert items[0].calendar == CAL_MOVED
    assert items[0].note == "Moved to the next business day from day 2026-12-25."
    assert describe(moved).endswith("; on a day excluded by hols, moved to the next business day")
    skipped = Timing(kind="cron", cron="0 9 * * *", calendar=days("UTC", "2026-12-25"))
    items = preview(skipped, start=utc("2026-12-25T00:00"), count=2)
    assert (items[0].skipped, items[0].calendar) == (True, CAL_SKIPPED)
    assert items[0].note == "Excluded: day 2026-12-25. Nothing fires that day."
    assert describe(skipped) == "At 09:00 (UTC); not on days excluded by hols"


# -- properties ----------------------------------------------------------------------------------

ZONES = ["UTC", "Europe/London", "America/New_York", "Pacific/Auckland", "Asia/Kolkata"]
CRONS = ["0 9 * * *", "30 2 * * *", "0 */5 * * *", "15 10 * * 1-5", "0 0 1 * *", "45 23 * * 0,3"]
START = utc("2026-01-01T00:00")


@st.composite
def calendars(draw: st.DrawFn) -> tuple[str, set[date], tuple[int, ...]]:
    zone = draw(st.sampled_from(ZONES))
    offsets = draw(st.sets(st.integers(0, 120), max_size=25))
    weekend = draw(st.sampled_from([(6, 7), (5, 6), (7,), ()]))
    return zone, {date(2026, 1, 1) + timedelta(days=n) for n in offsets}, weekend


def local_day(at: datetime, zone: str) -> date:
    return at.astimezone(ZoneInfo(zone)).date()


@settings(max_examples=80, deadline=None)
@given(calendars(), st.sampled_from(CRONS), st.sampled_from(ZONES), st.booleans())
def test_no_excluded_day_ever_fires(
    cal: tuple[str, set[date], tuple[int, ...]], expr: str, zone: str, move: bool
) -> None:
    cal_zone, excluded, weekend = cal
    calendar = DayCalendar.of(
        ((cal_zone, d, "") for d in excluded), move=move, weekends=[(cal_zone, weekend)]
    )
    plain = Timing(kind="cron", cron=expr, timezone=zone)
    timing = replace(plain, calendar=calendar)
    end = utc("2026-05-01T00:00")
    fired = list(takewhile(lambda m: m.at < end, occurrences(timing, START)))
    # Each instant once, in order, and none on an excluded day in the calendar's zone.
    assert all(a.at < b.at for a, b in pairwise(fired))
    assert not [m for m in fired if local_day(m.at, cal_zone) in excluded]
    expected_plain = [
        m.at
        for m in takewhile(lambda m: m.at < end, occurrences(plain, START))
        if local_day(m.at, cal_zone) not in excluded
    ]
    if not move:
        # Skipping takes exactly the excluded days' occurrences out.
        assert [m.at for m in fired] == expected_plain
    else:
        # Moving keeps every other occurrence, and lands the moved ones on business days.
        assert set(expected_plain) <= {m.at for m in fired}
        for m in fired:
            if m.calendar == CAL_MOVED:
                assert local_day(m.at, cal_zone).isoweekday() not in weekend
    # Backwards, the same timeline.
    if fired:
        back = list(
            islice(occurrences_before(timing, fired[-1].at + timedelta(milliseconds=1)), len(fired))
        )
        assert [m.at for m in back] == [m.at for m in fired][::-1]


@settings(max_examples=80, deadline=None)
@given(
    calendars(),
    st.sampled_from(CRONS),
    st.sampled_from(ZONES),
    st.booleans(),
    st.sampled_from(["shift", "skip"]),
    st.integers(0, 100 * 24 * 60),
    st.integers(0, 3 * 24 * 60),
)
def test_the_quick_plan_is_the_plan(
    cal: tuple[str, set[date], tuple[int, ...]],
    expr: str,
    zone: str,
    move: bool,
    gap: str,
    start_minutes: int,
    late_minutes: int,
) -> None:
    """``plan_due`` takes a short path for one due occurrence (``_plan_one``): with excluded
    days and skipped local times, it plans what the whole walk plans."""
    cal_zone, excluded, weekend = cal
    calendar = DayCalendar.of(
        ((cal_zone, d, "") for d in excluded), move=move, weekends=[(cal_zone, weekend)]
    )
    spec = Timing(kind="cron", cron=expr, timezone=zone, dst_gap=gap, calendar=calendar)
    moment = next(occurrences(spec, START + timedelta(minutes=start_minutes), include_skipped=True))
    now = moment.at + timedelta(minutes=late_minutes)
    quick = catchup._plan_one(spec, CatchUp(), moment.at, None, now, None)
    if quick is None:
        return
    walked = plan_due(
        spec, CatchUp(mode="all", window=timedelta(days=9)), schedule_id=1,
        nominal=moment.at, due_at=None, now=now,
    )  # fmt: skip
    assert (quick.fire, quick.skips, quick.next_run_at) == (
        walked.fire,
        walked.skips,
        walked.next_run_at,
    )


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "120")), deadline=None)
@given(
    calendars(),
    st.sampled_from([*CRONS, "*/20 * * * *", "0 9,17 * * 1,3", "0 12 * * *; 30 9 * * 2"]),
    st.sampled_from(ZONES),
    st.booleans(),
)
# A spring-forward day excluded: its 02:30, shifted to 03:30 that day, moves as 02:30.
@example(("America/New_York", {date(2026, 3, 8)}, (6, 7)), "30 2 * * *", "UTC", True)
def test_moved_runs_land_where_the_rule_says(
    cal: tuple[str, set[date], tuple[int, ...]], expr: str, zone: str, same_zone: bool
) -> None:
    """Every occurrence on an excluded day lands at its own local time on the first later
    day (within 31) whose instant no calendar excludes and no weekend holds, computed here
    from zoneinfo, moment by moment; the walk (which jumps runs of excluded days and moves a
    whole day at once where it can) lands exactly those, each instant once."""
    cal_zone, excluded, weekend = cal
    if same_zone:
        zone = cal_zone  # the walk's whole-day shortcuts apply
    calendar = DayCalendar.of(
        ((cal_zone, d, "") for d in excluded), move=True, weekends=[(cal_zone, weekend)]
    )
    plain = Timing(kind="cron", cron=expr, timezone=zone)
    timing = replace(plain, calendar=calendar)
    start, end = utc("2026-02-15T00:00"), utc("2026-04-15T00:00")
    local, days_zone = ZoneInfo(zone), ZoneInfo(cal_zone)

    def business(at: datetime) -> bool:
        day = at.astimezone(days_zone)
        return day.date() not in excluded and day.isoweekday() not in weekend

    expected: set[datetime] = set()
    for moment in takewhile(lambda m: m.at < end, occurrences(plain, START)):
        if local_day(moment.at, cal_zone) not in excluded:
            expected.add(moment.at)
            continue
        # Its own local time: the wall time the cron matched, even one the DST policy
        # shifted out of a gap that day (02:30 on a spring-forward day moves as 02:30).
        wall = moment.wall or moment.at.astimezone(local).replace(tzinfo=None)
        for days in range(1, 32):
            # PEP 495's fold=0: a wall time in a gap is shifted forward, one in a fold is
            # the first (the default DST policy).
            landed = (wall + timedelta(days=days)).replace(tzinfo=local).astimezone(UTC)
            if business(landed):
                expected.add(landed)
                break
    walked = [m.at for m in takewhile(lambda m: m.at < end, occurrences(timing, start))]
    assert walked == sorted({at for at in expected if start < at < end})
