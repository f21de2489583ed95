"""The occurrence key (keys.py): what builds it reads it back, and nothing else passes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_schedulinator import timing
from django_schedulinator.errors import InvalidKey
from django_schedulinator.models import keys
from django_schedulinator.models.keys import occurrence_key, parse_key

# Nominal times are whole milliseconds (timing keeps them so), within the datetimes Python has.
moments = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
).map(lambda at: timing.from_ms(timing.to_ms(at)))


@settings(max_examples=300, deadline=None, database=None)
@given(schedule_id=st.integers(1, keys.MAX_SCHEDULE_ID), at=moments)
def test_a_key_reads_back_as_the_occurrence_it_was_built_from(
    schedule_id: int, at: datetime
) -> None:
    key = occurrence_key(schedule_id, at)
    assert parse_key(key) == (schedule_id, at)
    assert occurrence_key(*parse_key(key)) == key


def test_the_key_is_the_schedule_and_the_epoch_milliseconds() -> None:
    at = datetime(2026, 11, 26, 10, 0, 0, 123000, tzinfo=UTC)
    assert occurrence_key(17, at) == f"17:{timing.to_ms(at)}" == "17:1795687200123"
    assert parse_key("17:-1") == (17, datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC))


@pytest.mark.parametrize(
    "key", ["", "17", "17:", ":1", "a:1", "17:1:2", " 17:1", "17:1.5", "²:1",
            f"{keys.MAX_SCHEDULE_ID + 1}:1", "1:999999999999999"],
)  # fmt: skip
def test_something_that_is_not_a_key_is_refused(key: str) -> None:
    with pytest.raises(InvalidKey, match="is not an occurrence key"):
        parse_key(key)
