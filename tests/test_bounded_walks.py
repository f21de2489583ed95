"""Every walk over a schedule's timeline does bounded work, even for a cron whose matches
are (nearly) all local times the DST policy skips.

``30 2 * 3 0L`` (the last Sunday of March at 02:30) in Europe/Berlin never exists since
1980: the clocks jump from 02:00 to 03:00 that very night. With ``dst_gap="skip"``, looking
for its next occurrence walked one skipped time a year up to the year 9999 (seconds of CPU
per request). The work is counted in wall times examined (``_moments_of_wall``), as
test_timing_properties.py counts it, never timed; the counter stops a walk that passes its
bound, so a regression fails at once instead of running for seconds.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any
from unittest import mock

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_schedulinator import services
from django_schedulinator import timing as timing_module
from django_schedulinator.timing import (
    CRON,
    Timing,
    first_run_at,
    following,
    occurrences_before,
    preceding,
    preview,
)

from .conftest import make_schedule

NEVER = Timing(kind=CRON, cron="30 2 * 3 0L", timezone="Europe/Berlin", dst_gap="skip")
# Every second of 02:00-02:59 on the last Sunday of March: 3,600 skipped times a year.
NEVER_DENSE = Timing(kind=CRON, cron="* * 2 * 3 0L", timezone="Europe/Berlin", dst_gap="skip")
NOW = datetime(2026, 6, 1, tzinfo=UTC)


class TooMuchWork(AssertionError):
    pass


@pytest.fixture
def walls() -> Iterator[list[int]]:
    """Counts the wall times examined; a walk past 20,000 of them fails at once."""
    timing_module._cron_next.cache_clear()  # a cold cache: count the real work
    timing_module._cron_prev.cache_clear()
    examined = [0]
    moments_of_wall = timing_module._moments_of_wall

    def counting(*args: Any, **kwargs: Any) -> Any:
        examined[0] += 1
        if examined[0] > 20_000:
            raise TooMuchWork("examined more than 20,000 wall times")
        return moments_of_wall(*args, **kwargs)

    with mock.patch.object(timing_module, "_moments_of_wall", counting):
        yield examined


# -- the timing module ------------------------------------------------------------------


def test_no_occurrence_after_a_run_of_skipped_times_is_found_in_bounded_steps(
    walls: list[int],
) -> None:
    assert following(NEVER, NOW, NOW) is None
    assert walls[0] <= 100
    walls[0] = 0
    assert following(NEVER_DENSE, NOW, NOW) is None
    # The skipped seconds of one clock change (each looked at a few times), not 3,600 a
    # year up to 9999.
    assert walls[0] <= 5 * 3_600


def test_a_walk_backwards_over_skipped_times_is_bounded(walls: list[int]) -> None:
    # Since 1981 every match is skipped (the last Sunday of March is the change): none
    # before 2026 within the bound, rather than a step a year back to 1980, which existed.
    assert preceding(NEVER, NOW, NOW) is None
    assert walls[0] <= 100
    one_year_on = datetime(1981, 6, 1, tzinfo=UTC)
    assert preceding(NEVER, one_year_on, one_year_on) == next(
        occurrences_before(NEVER, datetime(1981, 1, 1, tzinfo=UTC))
    )
    # With the markers asked for, each step is one skipped time: the caller bounds the walk.
    back = list(islice(occurrences_before(NEVER, NOW, include_skipped=True), 20))
    assert len(back) == 20
    assert all(m.skipped for m in back)
    assert walls[0] <= 1_000


def test_first_run_preview_and_validation_of_a_cron_that_never_exists_are_quick(
    walls: list[int],
) -> None:
    at = first_run_at(NEVER, NOW)
    assert at == datetime(2027, 3, 28, 1, 30, tzinfo=UTC)  # a skipped-time marker
    items = preview(NEVER, start=at, count=10)
    assert len(items) == 10
    assert all(item.skipped for item in items)
    assert NEVER.validate() == {}
    assert NEVER_DENSE.validate() == {}
    # The dense one examines the seconds of one clock change, once.
    assert walls[0] <= 1_000 + 2 * 3_600


# -- backfill -----------------------------------------------------------------------------


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
    with pytest.raises(services.ServiceError, match="skipped by the DST policy"):
        services.backfill(
            schedule, datetime(2000, 1, 1, tzinfo=UTC), timezone.now() - timedelta(minutes=1)
        )
    # The first change's seconds, then a few wall times per skipped time up to the limit.
    assert walls[0] <= 2 * 3_600 + 3 * 1_000


@pytest.mark.django_db
def test_the_command_answers_a_backfill_of_skipped_times_at_once(walls: list[int]) -> None:
    schedule = make_schedule(kind="cron", cron=NEVER.cron, timezone=NEVER.timezone, dst_gap="skip")
    out = io.StringIO()
    call_command(
        "schedule",
        "backfill",
        schedule.name,
        "--from",
        "2000-01-01T00:00:00Z",
        "--to",
        (timezone.now() - timedelta(minutes=1)).isoformat(),
        stdout=out,
    )
    assert out.getvalue().startswith("0 occurrence(s)")


@pytest.mark.django_db
def test_the_command_refuses_a_backfill_over_too_many_skipped_times(
    walls: list[int], settings: Any
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MAX_BACKFILL_RUNS": 1000}
    schedule = make_schedule(
        kind="cron", cron=NEVER_DENSE.cron, timezone=NEVER_DENSE.timezone, dst_gap="skip"
    )
    with pytest.raises(CommandError, match="skipped by the DST policy"):
        call_command(
            "schedule",
            "backfill",
            schedule.name,
            "--from",
            "2000-01-01T00:00:00Z",
            "--to",
            (timezone.now() - timedelta(minutes=1)).isoformat(),
            stdout=io.StringIO(),
        )


@pytest.mark.django_db
def test_the_api_answers_a_backfill_of_skipped_times_at_once(
    walls: list[int], admin_client: Any, settings: Any
) -> None:
    never = make_schedule(kind="cron", cron=NEVER.cron, timezone=NEVER.timezone, dst_gap="skip")
    span = {
        "start": "2000-01-01T00:00:00Z",
        "end": (timezone.now() - timedelta(minutes=1)).isoformat(),
    }
    url = f"/api/schedulinator/schedules/{never.pk}/backfill/"
    response = admin_client.post(url, span, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["occurrences"] == 0

    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MAX_BACKFILL_RUNS": 1000}
    dense = make_schedule(
        kind="cron", cron=NEVER_DENSE.cron, timezone=NEVER_DENSE.timezone, dst_gap="skip"
    )
    url = f"/api/schedulinator/schedules/{dense.pk}/backfill/"
    response = admin_client.post(url, span, content_type="application/json")
    assert response.status_code == 400
    assert "skipped by the DST policy" in response.json()["detail"]
