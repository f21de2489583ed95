"""Walks over a schedule's timeline in the timing package (``django_schedulinator/timing/``)
do bounded work, even for a cron whose matches are (nearly) all skipped times
(``tests/support/walks.py`` says why; the ``walls`` fixture counts the work)."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice

from django_schedulinator.timing import (
    first_run_at,
    following,
    occurrences_before,
    preceding,
    preview,
)

from .support.walks import NEVER, NEVER_DENSE

NOW = datetime(2026, 6, 1, tzinfo=UTC)


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
