"""The next-run rules (the full DST and catch-up policies come with their own issue)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_schedulinator.timing import (
    CRON,
    INTERVAL,
    ONCE,
    Timing,
    TimingError,
    first_run_at,
    from_ms,
    next_run_after,
    normalize_cron,
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
    spec = Timing(kind=CRON, cron="0 9 * * *", timezone="Europe/Berlin")
    # 09:00 in Berlin in November (UTC+1) is 08:00 UTC.
    assert first_run_at(spec, NOW) == datetime(2026, 11, 22, 8, 0, tzinfo=UTC)


def test_seconds_field_leads() -> None:
    spec = Timing(kind=CRON, cron="*/10 * * * * *", timezone="UTC")
    assert first_run_at(spec, NOW) == datetime(2026, 11, 21, 12, 0, 10, tzinfo=UTC)


def test_interval_stays_anchored_on_nominal_times_and_coalesces_missed_ones() -> None:
    spec = Timing(kind=INTERVAL, interval=timedelta(minutes=5))
    nominal = datetime(2026, 11, 21, 11, 0, tzinfo=UTC)
    # On time: exactly one interval later.
    assert next_run_after(spec, nominal, nominal + timedelta(seconds=3)) == nominal + timedelta(
        minutes=5
    )
    # An hour late: the next slot on the same grid after now, not a burst of 12.
    assert next_run_after(spec, nominal, NOW) == datetime(2026, 11, 21, 12, 5, tzinfo=UTC)


def test_cron_after_downtime_moves_past_now() -> None:
    spec = Timing(kind=CRON, cron="*/15 * * * *", timezone="UTC")
    nominal = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
    assert next_run_after(spec, nominal, NOW) == datetime(2026, 11, 21, 12, 15, tzinfo=UTC)


def test_one_off_runs_once() -> None:
    spec = Timing(kind=ONCE, run_at=NOW)
    assert first_run_at(spec, NOW - timedelta(hours=1)) == truncate_ms(NOW)
    assert next_run_after(spec, NOW, NOW) is None
