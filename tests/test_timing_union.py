"""Several cron expressions in one schedule ("09:00 on weekdays; 12:00 on Saturdays"): the
schedule fires their union, each instant once. The vectors are worked out by hand from the
calendar and the zones' rules (never by the code under test); the properties compare the
union with its expressions taken one at a time. No database, no Redis: plain functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_schedulinator.errors import TimingError
from django_schedulinator.timing import (
    DST_SHIFT,
    MAX_CRON_EXPRESSIONS,
    DayRule,
    DstGap,
    Moment,
    Timing,
    cron_expressions,
    describe,
    first_run_at,
    occurrences,
    occurrences_before,
    preview,
)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def cron(expr: str, zone: str = "UTC", **fields: str) -> Timing:
    return Timing(kind="cron", cron=expr, timezone=zone, **fields)


def instants(moments: list[Moment]) -> list[datetime]:
    return [m.at for m in moments]


def first(timing: Timing, after: datetime, count: int, **options: bool) -> list[Moment]:
    return list(islice(occurrences(timing, after, **options), count))


# -- hand-written vectors ------------------------------------------------------------------------


def test_weekdays_at_nine_and_saturdays_at_noon() -> None:
    # Thursday 26 November 2026; Berlin keeps CET (UTC+1) until March.
    union = cron("0 9 * * 1-5; 0 12 * * 6", "Europe/Berlin")
    assert instants(first(union, utc("2026-11-26T00:00"), 5)) == [
        utc("2026-11-26T08:00"),  # Thursday 09:00
        utc("2026-11-27T08:00"),  # Friday 09:00
        utc("2026-11-28T11:00"),  # Saturday 12:00
        utc("2026-11-30T08:00"),  # Monday 09:00 (nothing on Sunday)
        utc("2026-12-01T08:00"),  # Tuesday 09:00
    ]


def test_an_instant_two_expressions_match_is_one_occurrence() -> None:
    # Sunday 29 November 2026: "every day at 9" and "Mondays at 9" meet on Monday.
    union = cron("0 9 * * *; 0 9 * * 1")
    assert instants(first(union, utc("2026-11-29T00:00"), 3)) == [
        utc("2026-11-29T09:00"),
        utc("2026-11-30T09:00"),
        utc("2026-12-01T09:00"),
    ]


@pytest.mark.parametrize("gap", [DstGap.SHIFT, DstGap.SKIP])
def test_a_shifted_or_skipped_time_landing_on_another_expressions_time_is_one(gap: str) -> None:
    # Berlin springs forward on Sunday 28 March 2027 at 01:00 UTC (02:00 CET -> 03:00 CEST):
    # 02:30 does not exist. Shifted it is 03:30 CEST, skipped it marks that instant; either
    # way 01:30 UTC, when the other expression's 03:30 CEST fires: once, untouched.
    union = cron("30 2 * * *; 30 3 * * *", "Europe/Berlin", dst_gap=gap)
    expected = [
        utc("2027-03-27T01:30"),  # 02:30 CET
        utc("2027-03-27T02:30"),  # 03:30 CET
        utc("2027-03-28T01:30"),  # 03:30 CEST (and 02:30, shifted or skipped)
        utc("2027-03-29T00:30"),  # 02:30 CEST
        utc("2027-03-29T01:30"),  # 03:30 CEST
    ]
    for include_skipped in (False, True):
        moments = first(union, utc("2027-03-27T00:00"), 5, include_skipped=include_skipped)
        assert instants(moments) == expected
        assert moments[2].dst == ""  # the occurrence that exists, not the marker
    # Backwards, the same moments.
    before = list(islice(occurrences_before(union, utc("2027-03-29T02:00")), 5))
    assert instants(before) == expected[::-1]


def test_a_shifted_time_alone_keeps_its_note() -> None:
    # With 03:45 instead of 03:30, nothing meets the shifted 02:30 (03:30 CEST, 01:30 UTC).
    union = cron("30 2 * * *; 45 3 * * *", "Europe/Berlin")
    moments = first(union, utc("2027-03-28T00:00"), 2)
    assert [(m.at, m.dst) for m in moments] == [
        (utc("2027-03-28T01:30"), DST_SHIFT),
        (utc("2027-03-28T01:45"), ""),
    ]


def test_a_fold_under_both_fires_each_instant_of_the_repeated_time() -> None:
    # Berlin falls back on Sunday 31 October 2027 at 01:00 UTC (03:00 CEST -> 02:00 CET):
    # 02:30 is 00:30 UTC, then 01:30 UTC; 03:00 CET is 02:00 UTC.
    union = cron("30 2 * * *; 0 3 * * *", "Europe/Berlin", dst_fold="both")
    assert instants(first(union, utc("2027-10-31T00:00"), 3)) == [
        utc("2027-10-31T00:30"),
        utc("2027-10-31T01:30"),
        utc("2027-10-31T02:00"),
    ]


def test_an_expression_past_its_last_match_leaves_the_others_to_go_on() -> None:
    # cronsim looks a bounded number of years ahead: 29 February on a Monday is rare, the
    # daily time never ends.
    union = cron("0 0 29 2 1; 0 6 * * *", day_rule=DayRule.BOTH)
    assert instants(first(union, utc("2026-11-26T12:00"), 2)) == [
        utc("2026-11-27T06:00"),
        utc("2026-11-28T06:00"),
    ]


def test_the_first_run_and_the_preview_see_every_expression() -> None:
    union = cron("0 9 * * 1-5; 0 12 * * 6", "Europe/Berlin")
    assert first_run_at(union, utc("2026-11-28T09:00")) == utc("2026-11-28T11:00")
    assert [item.at for item in preview(union, start=utc("2026-11-28T09:00"), count=2)] == [
        utc("2026-11-28T11:00"),
        utc("2026-11-30T08:00"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0 9 * * 1-5; 0 12 * * 6", ("0 9 * * 1-5", "0 12 * * 6")),
        ("0 9 * * 1-5\n0 12 * * 6\n", ("0 9 * * 1-5", "0 12 * * 6")),  # a line each
        ("0  9 * * *;0 9 * * *", ("0 9 * * *",)),  # each once
        ("@daily; 0 12 * * *", ("0 0 * * *", "0 12 * * *")),
        ("0 9 * * *;", ("0 9 * * *",)),
    ],
)
def test_the_expressions_of_a_field(text: str, expected: tuple[str, ...]) -> None:
    assert cron_expressions(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 9 * * *; 0 25 * * *", "Expression 2 of 2: Invalid cron expression '0 25 * * *'"),
        ("0 9 * * *; @often", "Expression 2 of 2: Unknown cron alias '@often'"),
        ("0 9 * *; 0 9 * * *", "Expression 1 of 2: A cron expression has 5 fields"),
        (" ; ", "Enter a cron expression"),
        (";".join(["0 9 * * *"] * 11), f"A schedule has at most {MAX_CRON_EXPRESSIONS} cron"),
    ],
)
def test_a_bad_expression_is_named_by_its_place(text: str, message: str) -> None:
    with pytest.raises(TimingError, match="^" + message.replace("*", r"\*")):
        cron_expressions(text)
    assert cron(text).validate()["cron"].startswith(message)


def test_the_day_rule_applies_to_each_expression() -> None:
    errors = cron("0 9 * * *; 0 0 30 2 1", day_rule=DayRule.BOTH).validate()
    assert "never matches a date when both day fields must match" in errors["cron"]


def test_the_description_joins_the_expressions() -> None:
    assert describe(cron("0 9 * * 1-5; 0 12 * * 6", "Europe/Berlin")) == (
        "At 09:00, Monday through Friday; and at 12:00, only on Saturday (Europe/Berlin)"
    )


# -- properties ------------------------------------------------------------------------------------

PALETTE = [
    "0 9 * * *",
    "0 9 * * 1-5",
    "30 2 * * *",
    "0 3 * * *",
    "*/20 * * * *",
    "0 */6 * * *",
    "15 1 1 * *",
    "0 12 * * 6",
    "30 1 * * 0",
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]
POLICIES = st.fixed_dictionaries(
    {
        "dst_gap": st.sampled_from(["shift", "skip"]),
        "dst_fold": st.sampled_from(["first", "second", "both"]),
    }
)
STARTS = st.datetimes(datetime(2020, 1, 1), datetime(2030, 12, 31)).map(
    lambda d: d.replace(tzinfo=UTC)
)
COUNT = 12


UNIONS = {
    "exprs": st.lists(st.sampled_from(PALETTE), min_size=2, max_size=3, unique=True),
    "zone": st.sampled_from(ZONES),
    "policies": POLICIES,
    "after": STARTS,
}


@settings(max_examples=150, deadline=None)
@given(**UNIONS)
def test_a_union_is_its_expressions_merged_each_instant_once(
    exprs: list[str], zone: str, policies: dict[str, str], after: datetime
) -> None:
    union = first(cron("; ".join(exprs), zone, **policies), after, COUNT)
    each = {m.at for expr in exprs for m in first(cron(expr, zone, **policies), after, COUNT)}
    assert instants(union) == sorted(each)[:COUNT]
    assert all(a.at < b.at for a, b in pairwise(union))  # each instant once, in order


@settings(max_examples=100, deadline=None)
@given(**UNIONS)
def test_a_union_read_backwards_is_the_same_moments(
    exprs: list[str], zone: str, policies: dict[str, str], after: datetime
) -> None:
    union = cron("; ".join(exprs), zone, **policies)
    forward = first(union, after, COUNT, include_skipped=True)
    end = forward[-1].at + timedelta(milliseconds=1)
    backward = list(islice(occurrences_before(union, end, include_skipped=True), COUNT))
    assert backward[::-1] == forward
