"""The next-run rules: parsing, zones, intervals, catch-up plans (DST: test_dst.py; properties:
test_timing_properties.py; bounded walks over skipped times: test_timing_walks.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_schedulinator.errors import TimingError
from django_schedulinator.timing import (
    CatchUp,
    Kind,
    Timing,
    first_run_at,
    from_ms,
    normalize_cron,
    occurrences,
    occurrences_before,
    plan_due,
    to_ms,
    truncate_ms,
)

NOW = datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC)


def test_milliseconds_round_trip_and_truncation() -> None:
    assert to_ms(from_ms(1_767_225_600_123)) == 1_767_225_600_123
    assert truncate_ms(NOW).microsecond == 123000
    assert to_ms(NOW) == to_ms(truncate_ms(NOW))


@pytest.mark.parametrize(
    ("alias", "expr"), [("@hourly", "0 * * * *"), ("@DAILY", "0 0 * * *"), ("@yearly", "0 0 1 1 *")]
)
def test_cron_aliases(alias: str, expr: str) -> None:
    assert normalize_cron(alias) == expr


@pytest.mark.parametrize("bad", ["", "   ", "* * * *", "* * * * * * *", "60 * * * *", "x" * 300])
def test_invalid_cron_raises(bad: str) -> None:
    with pytest.raises(TimingError):
        normalize_cron(bad)


def test_cron_is_evaluated_in_the_schedules_zone_and_stored_in_utc() -> None:
    spec = Timing(kind=Kind.CRON, cron="0 9 * * *", timezone="Europe/Berlin")
    # 09:00 in Berlin in November (UTC+1) is 08:00 UTC.
    assert first_run_at(spec, NOW) == datetime(2026, 11, 22, 8, 0, tzinfo=UTC)


def test_seconds_field_leads() -> None:
    spec = Timing(kind=Kind.CRON, cron="*/10 * * * * *", timezone="UTC")
    assert first_run_at(spec, NOW) == datetime(2026, 11, 21, 12, 0, 10, tzinfo=UTC)


def plan(spec: Timing, nominal: datetime, now: datetime, **policy: object):
    return plan_due(
        spec, CatchUp(**policy), schedule_id=1, nominal=nominal, due_at=nominal, now=now
    )


def test_interval_stays_anchored_on_nominal_times_and_fires_the_latest_missed() -> None:
    spec = Timing(kind=Kind.INTERVAL, interval=timedelta(minutes=5))
    nominal = datetime(2026, 11, 21, 11, 0, tzinfo=UTC)
    # On time: it fires, and moves exactly one interval on.
    on_time = plan(spec, nominal, nominal + timedelta(seconds=3))
    assert on_time.fire == [nominal]
    assert on_time.skips == []
    assert on_time.next_run_at == nominal + timedelta(minutes=5)
    # An hour late: the latest due occurrence fires once, the 12 before it are skipped as
    # missed, and the grid holds (12:05, not 12:00:00.123 + 5 min).
    late = plan(spec, nominal, NOW)
    assert late.fire == [datetime(2026, 11, 21, 12, 0, tzinfo=UTC)]
    assert [s.at.minute for s in late.skips] == list(range(0, 60, 5))
    assert {s.reason for s in late.skips} == {"missed"}
    assert late.next_run_at == datetime(2026, 11, 21, 12, 5, tzinfo=UTC)


def test_cron_after_downtime_fires_the_latest_then_moves_past_now() -> None:
    spec = Timing(kind=Kind.CRON, cron="*/15 * * * *", timezone="UTC")
    nominal = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
    result = plan(spec, nominal, NOW)
    assert result.fire == [datetime(2026, 11, 21, 12, 0, tzinfo=UTC)]
    assert len(result.skips) == 12
    assert result.next_run_at == datetime(2026, 11, 21, 12, 15, tzinfo=UTC)


@pytest.mark.parametrize(
    ("mode", "fired_minutes"),
    [("latest", [0]), ("skip", [0]), ("all", [15, 30, 45, 0])],
)
def test_catch_up_policies(mode: str, fired_minutes: list[int]) -> None:
    # Down from 09:00 to 12:00:00.123; "all" fires what is at most an hour late.
    spec = Timing(kind=Kind.CRON, cron="*/15 * * * *", timezone="UTC")
    nominal = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
    result = plan(spec, nominal, NOW, mode=mode, window=timedelta(hours=1))
    assert [at.minute for at in result.fire] == fired_minutes
    assert len(result.fire) + len(result.skips) == 13


def test_catch_up_skip_fires_nothing_missed() -> None:
    spec = Timing(kind=Kind.CRON, cron="0 * * * *", timezone="UTC")
    nominal = datetime(2026, 11, 21, 11, 0, tzinfo=UTC)
    result = plan(spec, nominal, NOW.replace(minute=5), mode="skip")
    assert result.fire == []  # 12:00 is 5 minutes late, more than the 1 minute grace
    assert [s.reason for s in result.skips] == ["missed", "missed"]
    assert result.next_run_at == datetime(2026, 11, 21, 13, 0, tzinfo=UTC)


def test_a_one_off_runs_once_or_expires() -> None:
    spec = Timing(kind=Kind.ONCE, run_at=NOW)
    assert first_run_at(spec, NOW - timedelta(hours=1)) == truncate_ms(NOW)
    on_time = plan(spec, truncate_ms(NOW), NOW)
    assert on_time.fire == [truncate_ms(NOW)]
    assert on_time.next_run_at is None
    expired = plan(spec, truncate_ms(NOW), NOW + timedelta(hours=1), mode="skip")
    assert expired.fire == []
    assert [s.reason for s in expired.skips] == ["expired"]


def test_max_runs_finishes_the_schedule() -> None:
    spec = Timing(kind=Kind.INTERVAL, interval=timedelta(minutes=5))
    nominal = datetime(2026, 11, 21, 11, 0, tzinfo=UTC)
    last = plan_due(
        spec, CatchUp(), schedule_id=1, nominal=nominal, due_at=nominal, now=nominal,
        runs_left=1,
    )  # fmt: skip
    assert last.fire == [nominal]
    assert last.next_run_at is None


def test_an_anchor_puts_intervals_on_its_grid() -> None:
    anchor = datetime(2026, 1, 1, 0, 15, tzinfo=UTC)
    spec = Timing(kind=Kind.INTERVAL, interval=timedelta(hours=1), anchor_at=anchor)
    assert first_run_at(spec, NOW) == datetime(2026, 11, 21, 12, 15, tzinfo=UTC)


# A start with microseconds, as a DateTimeField keeps it (a celery-beat start_time, a form):
# its instant is its whole millisecond, like every instant the app writes (issue 21, item 14).
START_US = datetime(2026, 11, 21, 12, 0, 24, 701808, tzinfo=UTC)


def ms(text: str) -> datetime:
    """A UTC instant written out by hand, to the millisecond."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_an_interval_starting_at_microseconds_starts_at_its_millisecond() -> None:
    daily = Timing(kind=Kind.INTERVAL, interval=timedelta(days=1), start_at=START_US)
    # A start ahead of now: the first run is the start (it was a day later).
    assert first_run_at(daily, NOW) == ms("2026-11-21T12:00:24.701")
    # Read from before the start, forward and backward, the start is the first occurrence.
    walked = [m.at for m in occurrences(daily, ms("2026-11-01T00:00"))]
    assert walked[:2] == [ms("2026-11-21T12:00:24.701"), ms("2026-11-22T12:00:24.701")]
    back = [m.at for m in occurrences_before(daily, ms("2026-11-23T00:00"))]
    assert back == [ms("2026-11-22T12:00:24.701"), ms("2026-11-21T12:00:24.701")]
    # A start in the past: the grid it anchors, from now on.
    assert first_run_at(daily, ms("2026-11-25T00:00")) == ms("2026-11-25T12:00:24.701")


def test_a_window_with_microseconds_holds_whole_milliseconds() -> None:
    every_second = Timing(
        kind=Kind.INTERVAL,
        interval=timedelta(seconds=1),
        start_at=START_US,
        end_at=datetime(2026, 11, 21, 12, 0, 26, 701900, tzinfo=UTC),
    )
    assert [m.at for m in occurrences(every_second, NOW)] == [
        ms("2026-11-21T12:00:24.701"),
        ms("2026-11-21T12:00:25.701"),
        ms("2026-11-21T12:00:26.701"),
    ]
    # A cron (seconds field) whose match is the start's own millisecond starts there.
    at_24s = Timing(
        kind=Kind.CRON,
        cron="24 0 12 * * *",
        timezone="UTC",
        start_at=datetime(2026, 11, 21, 12, 0, 24, 500, tzinfo=UTC),
    )
    assert first_run_at(at_24s, NOW) == ms("2026-11-21T12:00:24")
