"""Cron schedules across daylight-saving and other UTC-offset changes.

Every expectation below is a literal UTC instant worked out by hand from the transition
times in ``CHANGES`` (which ``test_the_changes_are_where_the_tables_say`` checks against
tzdata). A moment is written ``"2026-03-08T07:30Z shifted"``: the instant, then its
``Moment.dst`` flag when it has one. The brute-force check at the end recomputes every
transition minute by minute, independently of ``timing``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import takewhile
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from django_schedulinator.timing import (
    Kind,
    Moment,
    Timing,
    first_run_at,
    occurrences,
    occurrences_before,
    preview,
)

ONE_MS = timedelta(milliseconds=1)
MINUTE = timedelta(minutes=1)
GAP_POLICIES = ("shift", "skip")
FOLD_POLICIES = ("first", "second", "both")
FLAGS = ("shifted", "skipped", "first", "second")


# -- helpers ---------------------------------------------------------------------------------


def utc(text: str) -> datetime:
    """``"2026-03-08T07:30Z"`` -> an aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def show(at: datetime, dst: str = "") -> str:
    """The notation of the tables: the UTC instant, then the flag if any."""
    text = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")
    return f"{text} {dst}" if dst else text


def normalized(moments: Iterable[str]) -> list[str]:
    return [" ".join(moment.split()) for moment in moments]


def cron_timing(zone: str, cron: str, gap: str = "shift", fold: str = "first") -> Timing:
    return Timing(kind=Kind.CRON, cron=cron, timezone=zone, dst_gap=gap, dst_fold=fold)


def policy_timing(zone: str, cron: str, policy: str) -> Timing:
    """One policy name sets the gap or the fold policy; the other keeps its default."""
    if policy in GAP_POLICIES:
        return cron_timing(zone, cron, gap=policy)
    return cron_timing(zone, cron, fold=policy)


def forward(timing: Timing, start: datetime, end: datetime, markers: bool = True) -> list[Moment]:
    """The moments in [start, end), earliest first."""
    moments = occurrences(timing, start - ONE_MS, include_skipped=markers)
    return list(takewhile(lambda m: m.at < end, moments))


def backward(timing: Timing, start: datetime, end: datetime, markers: bool = True) -> list[Moment]:
    """The moments in [start, end), latest first."""
    moments = occurrences_before(timing, end, include_skipped=markers)
    return list(takewhile(lambda m: m.at >= start, moments))


def shown(moments: Iterable[Moment]) -> list[str]:
    return [show(m.at, m.dst) for m in moments]


def cron_label(cron: str) -> str:
    if cron == "0 * * * *":
        return "hourly"
    if cron.startswith("*/"):
        return f"every-{cron.split()[0][2:]}-min"
    minute, hour = cron.split()[:2]
    return f"daily-{int(hour):02d}:{int(minute):02d}"


# -- the changes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """A change of a zone's UTC offset: at ``at`` (UTC) the offset goes ``before`` -> ``after``."""

    zone: str
    at: str
    before: str
    after: str

    @property
    def kind(self) -> str:
        """The clocks jump forward ("gap": local times missing) or go back ("fold")."""
        return "gap" if _minutes(self.after) > _minutes(self.before) else "fold"

    @property
    def id(self) -> str:
        return f"{self.zone}-{self.at[:10]}-{self.kind}"


def _minutes(offset: str) -> int:
    sign = -1 if offset.startswith("-") else 1
    hours, minutes = offset[1:].split(":")
    return sign * (int(hours) * 60 + int(minutes))


# fmt: off
CHANGES = [
    Change("America/New_York",    "2026-03-08T07:00Z", "-05:00", "-04:00"),  # 02:00 -> 03:00
    Change("America/New_York",    "2026-11-01T06:00Z", "-04:00", "-05:00"),  # 02:00 -> 01:00
    Change("Europe/London",       "2026-03-29T01:00Z", "+00:00", "+01:00"),  # 01:00 -> 02:00
    Change("Europe/London",       "2026-10-25T01:00Z", "+01:00", "+00:00"),  # 02:00 -> 01:00
    Change("Europe/Berlin",       "2026-03-29T01:00Z", "+01:00", "+02:00"),  # 02:00 -> 03:00
    Change("Europe/Berlin",       "2026-10-25T01:00Z", "+02:00", "+01:00"),  # 03:00 -> 02:00
    Change("Australia/Sydney",    "2026-04-04T16:00Z", "+11:00", "+10:00"),  # 03:00 -> 02:00
    Change("Australia/Sydney",    "2026-10-03T16:00Z", "+10:00", "+11:00"),  # 02:00 -> 03:00
    Change("Australia/Lord_Howe", "2026-04-04T15:00Z", "+11:00", "+10:30"),  # 02:00 -> 01:30
    Change("Australia/Lord_Howe", "2026-10-03T15:30Z", "+10:30", "+11:00"),  # 02:00 -> 02:30
    Change("Pacific/Apia",        "2011-04-02T14:00Z", "-10:00", "-11:00"),  # 04:00 -> 03:00
    Change("Pacific/Apia",        "2011-09-24T14:00Z", "-11:00", "-10:00"),  # 03:00 -> 04:00
    Change("Pacific/Apia",        "2011-12-30T10:00Z", "-10:00", "+14:00"),  # 29th 24:00 -> 31st
    Change("Europe/Moscow",       "2014-10-25T22:00Z", "+04:00", "+03:00"),  # 02:00 -> 01:00
]
# fmt: on


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.id)
def test_the_changes_are_where_the_tables_say(change: Change) -> None:
    zone = ZoneInfo(change.zone)
    at = utc(change.at)
    before = (at - MINUTE).astimezone(zone).utcoffset()
    after = at.astimezone(zone).utcoffset()
    assert before == timedelta(minutes=_minutes(change.before))
    assert after == timedelta(minutes=_minutes(change.after))
    # The offset holds for a day on either side: one change per window.
    assert (at - timedelta(days=1)).astimezone(zone).utcoffset() == before
    assert (at + timedelta(days=1)).astimezone(zone).utcoffset() == after


# -- the matrix ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    zone: str
    cron: str
    policy: str  # shift / skip (the gap policy) or first / second / both (the fold policy)
    start: str  # the window [start, end) the moments are listed for, UTC
    end: str
    expected: tuple[str, ...]

    @property
    def timing(self) -> Timing:
        return policy_timing(self.zone, self.cron, self.policy)


def case(zone: str, cron: str, policies: str, start: str, end: str, *expected: str) -> list[Any]:
    """One row of the table: the same expectation for each of ``policies``."""
    return [
        pytest.param(
            Case(zone, cron, policy, start, end, tuple(normalized(expected))),
            id=f"{zone}-{start[:10]}-{cron_label(cron)}-{policy}",
        )
        for policy in policies.split()
    ]


# fmt: off
CASES = [
    # New York, spring forward on 2026-03-08 at 07:00Z: 02:00 EST (-5) -> 03:00 EDT (-4).
    *case("America/New_York", "30 2 * * *", "shift", "2026-03-07T00:00Z", "2026-03-10T00:00Z",
          "2026-03-07T07:30Z", "2026-03-08T07:30Z shifted", "2026-03-09T06:30Z"),
    *case("America/New_York", "30 2 * * *", "skip", "2026-03-07T00:00Z", "2026-03-10T00:00Z",
          "2026-03-07T07:30Z", "2026-03-08T07:30Z skipped", "2026-03-09T06:30Z"),
    # 02:00 moved forward is the real 03:00 (07:00Z): it fires once, untouched.
    *case("America/New_York", "0 * * * *", "shift skip", "2026-03-08T04:00Z", "2026-03-08T10:00Z",
          "2026-03-08T04:00Z", "2026-03-08T05:00Z", "2026-03-08T06:00Z",
          "2026-03-08T07:00Z", "2026-03-08T08:00Z", "2026-03-08T09:00Z"),
    *case("America/New_York", "*/15 * * * *", "shift skip", "2026-03-08T06:00Z",
          "2026-03-08T08:00Z",
          "2026-03-08T06:00Z", "2026-03-08T06:15Z", "2026-03-08T06:30Z", "2026-03-08T06:45Z",
          "2026-03-08T07:00Z", "2026-03-08T07:15Z", "2026-03-08T07:30Z", "2026-03-08T07:45Z"),

    # New York, fall back on 2026-11-01 at 06:00Z: 02:00 EDT (-4) -> 01:00 EST (-5).
    *case("America/New_York", "30 1 * * *", "first", "2026-10-31T00:00Z", "2026-11-03T00:00Z",
          "2026-10-31T05:30Z", "2026-11-01T05:30Z first", "2026-11-02T06:30Z"),
    *case("America/New_York", "30 1 * * *", "second", "2026-10-31T00:00Z", "2026-11-03T00:00Z",
          "2026-10-31T05:30Z", "2026-11-01T06:30Z second", "2026-11-02T06:30Z"),
    *case("America/New_York", "30 1 * * *", "both", "2026-10-31T00:00Z", "2026-11-03T00:00Z",
          "2026-10-31T05:30Z", "2026-11-01T05:30Z first", "2026-11-01T06:30Z second",
          "2026-11-02T06:30Z"),
    *case("America/New_York", "0 * * * *", "first", "2026-11-01T03:00Z", "2026-11-01T09:00Z",
          "2026-11-01T03:00Z", "2026-11-01T04:00Z", "2026-11-01T05:00Z first",
          "2026-11-01T07:00Z", "2026-11-01T08:00Z"),
    *case("America/New_York", "0 * * * *", "second", "2026-11-01T03:00Z", "2026-11-01T09:00Z",
          "2026-11-01T03:00Z", "2026-11-01T04:00Z", "2026-11-01T06:00Z second",
          "2026-11-01T07:00Z", "2026-11-01T08:00Z"),
    *case("America/New_York", "0 * * * *", "both", "2026-11-01T03:00Z", "2026-11-01T09:00Z",
          "2026-11-01T03:00Z", "2026-11-01T04:00Z", "2026-11-01T05:00Z first",
          "2026-11-01T06:00Z second", "2026-11-01T07:00Z", "2026-11-01T08:00Z"),
    *case("America/New_York", "*/15 * * * *", "first", "2026-11-01T04:30Z", "2026-11-01T07:30Z",
          "2026-11-01T04:30Z", "2026-11-01T04:45Z",
          "2026-11-01T05:00Z first", "2026-11-01T05:15Z first",
          "2026-11-01T05:30Z first", "2026-11-01T05:45Z first",
          "2026-11-01T07:00Z", "2026-11-01T07:15Z"),
    *case("America/New_York", "*/15 * * * *", "second", "2026-11-01T04:30Z", "2026-11-01T07:30Z",
          "2026-11-01T04:30Z", "2026-11-01T04:45Z",
          "2026-11-01T06:00Z second", "2026-11-01T06:15Z second",
          "2026-11-01T06:30Z second", "2026-11-01T06:45Z second",
          "2026-11-01T07:00Z", "2026-11-01T07:15Z"),
    *case("America/New_York", "*/15 * * * *", "both", "2026-11-01T04:30Z", "2026-11-01T07:30Z",
          "2026-11-01T04:30Z", "2026-11-01T04:45Z",
          "2026-11-01T05:00Z first", "2026-11-01T05:15Z first",
          "2026-11-01T05:30Z first", "2026-11-01T05:45Z first",
          "2026-11-01T06:00Z second", "2026-11-01T06:15Z second",
          "2026-11-01T06:30Z second", "2026-11-01T06:45Z second",
          "2026-11-01T07:00Z", "2026-11-01T07:15Z"),

    # London, spring forward on 2026-03-29 at 01:00Z: 01:00 GMT (+0) -> 02:00 BST (+1).
    *case("Europe/London", "30 1 * * *", "shift", "2026-03-28T00:00Z", "2026-03-31T00:00Z",
          "2026-03-28T01:30Z", "2026-03-29T01:30Z shifted", "2026-03-30T00:30Z"),
    *case("Europe/London", "30 1 * * *", "skip", "2026-03-28T00:00Z", "2026-03-31T00:00Z",
          "2026-03-28T01:30Z", "2026-03-29T01:30Z skipped", "2026-03-30T00:30Z"),
    *case("Europe/London", "0 * * * *", "shift skip", "2026-03-28T22:00Z", "2026-03-29T04:00Z",
          "2026-03-28T22:00Z", "2026-03-28T23:00Z", "2026-03-29T00:00Z",
          "2026-03-29T01:00Z", "2026-03-29T02:00Z", "2026-03-29T03:00Z"),
    *case("Europe/London", "*/15 * * * *", "shift skip", "2026-03-29T00:00Z", "2026-03-29T02:00Z",
          "2026-03-29T00:00Z", "2026-03-29T00:15Z", "2026-03-29T00:30Z", "2026-03-29T00:45Z",
          "2026-03-29T01:00Z", "2026-03-29T01:15Z", "2026-03-29T01:30Z", "2026-03-29T01:45Z"),

    # London, fall back on 2026-10-25 at 01:00Z: 02:00 BST (+1) -> 01:00 GMT (+0).
    *case("Europe/London", "30 1 * * *", "first", "2026-10-24T00:00Z", "2026-10-27T00:00Z",
          "2026-10-24T00:30Z", "2026-10-25T00:30Z first", "2026-10-26T01:30Z"),
    *case("Europe/London", "30 1 * * *", "second", "2026-10-24T00:00Z", "2026-10-27T00:00Z",
          "2026-10-24T00:30Z", "2026-10-25T01:30Z second", "2026-10-26T01:30Z"),
    *case("Europe/London", "30 1 * * *", "both", "2026-10-24T00:00Z", "2026-10-27T00:00Z",
          "2026-10-24T00:30Z", "2026-10-25T00:30Z first", "2026-10-25T01:30Z second",
          "2026-10-26T01:30Z"),
    *case("Europe/London", "0 * * * *", "first", "2026-10-24T22:00Z", "2026-10-25T04:00Z",
          "2026-10-24T22:00Z", "2026-10-24T23:00Z", "2026-10-25T00:00Z first",
          "2026-10-25T02:00Z", "2026-10-25T03:00Z"),
    *case("Europe/London", "0 * * * *", "second", "2026-10-24T22:00Z", "2026-10-25T04:00Z",
          "2026-10-24T22:00Z", "2026-10-24T23:00Z", "2026-10-25T01:00Z second",
          "2026-10-25T02:00Z", "2026-10-25T03:00Z"),
    *case("Europe/London", "0 * * * *", "both", "2026-10-24T22:00Z", "2026-10-25T04:00Z",
          "2026-10-24T22:00Z", "2026-10-24T23:00Z", "2026-10-25T00:00Z first",
          "2026-10-25T01:00Z second", "2026-10-25T02:00Z", "2026-10-25T03:00Z"),
    *case("Europe/London", "*/15 * * * *", "first", "2026-10-24T23:30Z", "2026-10-25T02:30Z",
          "2026-10-24T23:30Z", "2026-10-24T23:45Z",
          "2026-10-25T00:00Z first", "2026-10-25T00:15Z first",
          "2026-10-25T00:30Z first", "2026-10-25T00:45Z first",
          "2026-10-25T02:00Z", "2026-10-25T02:15Z"),
    *case("Europe/London", "*/15 * * * *", "second", "2026-10-24T23:30Z", "2026-10-25T02:30Z",
          "2026-10-24T23:30Z", "2026-10-24T23:45Z",
          "2026-10-25T01:00Z second", "2026-10-25T01:15Z second",
          "2026-10-25T01:30Z second", "2026-10-25T01:45Z second",
          "2026-10-25T02:00Z", "2026-10-25T02:15Z"),
    *case("Europe/London", "*/15 * * * *", "both", "2026-10-24T23:30Z", "2026-10-25T02:30Z",
          "2026-10-24T23:30Z", "2026-10-24T23:45Z",
          "2026-10-25T00:00Z first", "2026-10-25T00:15Z first",
          "2026-10-25T00:30Z first", "2026-10-25T00:45Z first",
          "2026-10-25T01:00Z second", "2026-10-25T01:15Z second",
          "2026-10-25T01:30Z second", "2026-10-25T01:45Z second",
          "2026-10-25T02:00Z", "2026-10-25T02:15Z"),

    # Berlin, spring forward on 2026-03-29 at 01:00Z: 02:00 CET (+1) -> 03:00 CEST (+2).
    *case("Europe/Berlin", "30 2 * * *", "shift", "2026-03-28T00:00Z", "2026-03-31T00:00Z",
          "2026-03-28T01:30Z", "2026-03-29T01:30Z shifted", "2026-03-30T00:30Z"),
    *case("Europe/Berlin", "30 2 * * *", "skip", "2026-03-28T00:00Z", "2026-03-31T00:00Z",
          "2026-03-28T01:30Z", "2026-03-29T01:30Z skipped", "2026-03-30T00:30Z"),
    *case("Europe/Berlin", "0 * * * *", "shift skip", "2026-03-28T22:00Z", "2026-03-29T04:00Z",
          "2026-03-28T22:00Z", "2026-03-28T23:00Z", "2026-03-29T00:00Z",
          "2026-03-29T01:00Z", "2026-03-29T02:00Z", "2026-03-29T03:00Z"),
    *case("Europe/Berlin", "*/15 * * * *", "shift skip", "2026-03-29T00:00Z", "2026-03-29T02:00Z",
          "2026-03-29T00:00Z", "2026-03-29T00:15Z", "2026-03-29T00:30Z", "2026-03-29T00:45Z",
          "2026-03-29T01:00Z", "2026-03-29T01:15Z", "2026-03-29T01:30Z", "2026-03-29T01:45Z"),

    # Berlin, fall back on 2026-10-25 at 01:00Z: 03:00 CEST (+2) -> 02:00 CET (+1).
    *case("Europe/Berlin", "30 2 * * *", "first", "2026-10-24T00:00Z", "2026-10-27T00:00Z",
          "2026-10-24T00:30Z", "2026-10-25T00:30Z first", "2026-10-26T01:30Z"),
    *case("Europe/Berlin", "30 2 * * *", "second", "2026-10-24T00:00Z", "2026-10-27T00:00Z",
          "2026-10-24T00:30Z", "2026-10-25T01:30Z second", "2026-10-26T01:30Z"),
    *case("Europe/Berlin", "30 2 * * *", "both", "2026-10-24T00:00Z", "2026-10-27T00:00Z",
          "2026-10-24T00:30Z", "2026-10-25T00:30Z first", "2026-10-25T01:30Z second",
          "2026-10-26T01:30Z"),
    *case("Europe/Berlin", "0 * * * *", "first", "2026-10-24T22:00Z", "2026-10-25T04:00Z",
          "2026-10-24T22:00Z", "2026-10-24T23:00Z", "2026-10-25T00:00Z first",
          "2026-10-25T02:00Z", "2026-10-25T03:00Z"),
    *case("Europe/Berlin", "0 * * * *", "second", "2026-10-24T22:00Z", "2026-10-25T04:00Z",
          "2026-10-24T22:00Z", "2026-10-24T23:00Z", "2026-10-25T01:00Z second",
          "2026-10-25T02:00Z", "2026-10-25T03:00Z"),
    *case("Europe/Berlin", "0 * * * *", "both", "2026-10-24T22:00Z", "2026-10-25T04:00Z",
          "2026-10-24T22:00Z", "2026-10-24T23:00Z", "2026-10-25T00:00Z first",
          "2026-10-25T01:00Z second", "2026-10-25T02:00Z", "2026-10-25T03:00Z"),
    *case("Europe/Berlin", "*/15 * * * *", "first", "2026-10-24T23:30Z", "2026-10-25T02:30Z",
          "2026-10-24T23:30Z", "2026-10-24T23:45Z",
          "2026-10-25T00:00Z first", "2026-10-25T00:15Z first",
          "2026-10-25T00:30Z first", "2026-10-25T00:45Z first",
          "2026-10-25T02:00Z", "2026-10-25T02:15Z"),
    *case("Europe/Berlin", "*/15 * * * *", "second", "2026-10-24T23:30Z", "2026-10-25T02:30Z",
          "2026-10-24T23:30Z", "2026-10-24T23:45Z",
          "2026-10-25T01:00Z second", "2026-10-25T01:15Z second",
          "2026-10-25T01:30Z second", "2026-10-25T01:45Z second",
          "2026-10-25T02:00Z", "2026-10-25T02:15Z"),
    *case("Europe/Berlin", "*/15 * * * *", "both", "2026-10-24T23:30Z", "2026-10-25T02:30Z",
          "2026-10-24T23:30Z", "2026-10-24T23:45Z",
          "2026-10-25T00:00Z first", "2026-10-25T00:15Z first",
          "2026-10-25T00:30Z first", "2026-10-25T00:45Z first",
          "2026-10-25T01:00Z second", "2026-10-25T01:15Z second",
          "2026-10-25T01:30Z second", "2026-10-25T01:45Z second",
          "2026-10-25T02:00Z", "2026-10-25T02:15Z"),

    # Sydney, fall back on 2026-04-05 local (04-04T16:00Z): 03:00 AEDT (+11) -> 02:00 AEST (+10).
    *case("Australia/Sydney", "30 2 * * *", "first", "2026-04-03T12:00Z", "2026-04-06T00:00Z",
          "2026-04-03T15:30Z", "2026-04-04T15:30Z first", "2026-04-05T16:30Z"),
    *case("Australia/Sydney", "30 2 * * *", "second", "2026-04-03T12:00Z", "2026-04-06T00:00Z",
          "2026-04-03T15:30Z", "2026-04-04T16:30Z second", "2026-04-05T16:30Z"),
    *case("Australia/Sydney", "30 2 * * *", "both", "2026-04-03T12:00Z", "2026-04-06T00:00Z",
          "2026-04-03T15:30Z", "2026-04-04T15:30Z first", "2026-04-04T16:30Z second",
          "2026-04-05T16:30Z"),
    *case("Australia/Sydney", "0 * * * *", "first", "2026-04-04T13:00Z", "2026-04-04T19:00Z",
          "2026-04-04T13:00Z", "2026-04-04T14:00Z", "2026-04-04T15:00Z first",
          "2026-04-04T17:00Z", "2026-04-04T18:00Z"),
    *case("Australia/Sydney", "0 * * * *", "second", "2026-04-04T13:00Z", "2026-04-04T19:00Z",
          "2026-04-04T13:00Z", "2026-04-04T14:00Z", "2026-04-04T16:00Z second",
          "2026-04-04T17:00Z", "2026-04-04T18:00Z"),
    *case("Australia/Sydney", "0 * * * *", "both", "2026-04-04T13:00Z", "2026-04-04T19:00Z",
          "2026-04-04T13:00Z", "2026-04-04T14:00Z", "2026-04-04T15:00Z first",
          "2026-04-04T16:00Z second", "2026-04-04T17:00Z", "2026-04-04T18:00Z"),
    *case("Australia/Sydney", "*/15 * * * *", "first", "2026-04-04T14:30Z", "2026-04-04T17:30Z",
          "2026-04-04T14:30Z", "2026-04-04T14:45Z",
          "2026-04-04T15:00Z first", "2026-04-04T15:15Z first",
          "2026-04-04T15:30Z first", "2026-04-04T15:45Z first",
          "2026-04-04T17:00Z", "2026-04-04T17:15Z"),
    *case("Australia/Sydney", "*/15 * * * *", "second", "2026-04-04T14:30Z", "2026-04-04T17:30Z",
          "2026-04-04T14:30Z", "2026-04-04T14:45Z",
          "2026-04-04T16:00Z second", "2026-04-04T16:15Z second",
          "2026-04-04T16:30Z second", "2026-04-04T16:45Z second",
          "2026-04-04T17:00Z", "2026-04-04T17:15Z"),
    *case("Australia/Sydney", "*/15 * * * *", "both", "2026-04-04T14:30Z", "2026-04-04T17:30Z",
          "2026-04-04T14:30Z", "2026-04-04T14:45Z",
          "2026-04-04T15:00Z first", "2026-04-04T15:15Z first",
          "2026-04-04T15:30Z first", "2026-04-04T15:45Z first",
          "2026-04-04T16:00Z second", "2026-04-04T16:15Z second",
          "2026-04-04T16:30Z second", "2026-04-04T16:45Z second",
          "2026-04-04T17:00Z", "2026-04-04T17:15Z"),

    # Sydney, spring forward on 2026-10-04 local (10-03T16:00Z): 02:00 AEST -> 03:00 AEDT.
    *case("Australia/Sydney", "30 2 * * *", "shift", "2026-10-02T12:00Z", "2026-10-05T00:00Z",
          "2026-10-02T16:30Z", "2026-10-03T16:30Z shifted", "2026-10-04T15:30Z"),
    *case("Australia/Sydney", "30 2 * * *", "skip", "2026-10-02T12:00Z", "2026-10-05T00:00Z",
          "2026-10-02T16:30Z", "2026-10-03T16:30Z skipped", "2026-10-04T15:30Z"),
    *case("Australia/Sydney", "0 * * * *", "shift skip", "2026-10-03T13:00Z",
          "2026-10-03T19:00Z",
          "2026-10-03T13:00Z", "2026-10-03T14:00Z", "2026-10-03T15:00Z",
          "2026-10-03T16:00Z", "2026-10-03T17:00Z", "2026-10-03T18:00Z"),
    *case("Australia/Sydney", "*/15 * * * *", "shift skip", "2026-10-03T15:00Z",
          "2026-10-03T17:00Z",
          "2026-10-03T15:00Z", "2026-10-03T15:15Z", "2026-10-03T15:30Z", "2026-10-03T15:45Z",
          "2026-10-03T16:00Z", "2026-10-03T16:15Z", "2026-10-03T16:30Z", "2026-10-03T16:45Z"),

    # Lord Howe, fall back by 30 minutes on 2026-04-05 local (04-04T15:00Z): 02:00 (+11)
    # -> 01:30 (+10:30); only 01:30-01:59 occurs twice, so the hourly job sees no fold.
    *case("Australia/Lord_Howe", "45 1 * * *", "first", "2026-04-03T12:00Z", "2026-04-06T00:00Z",
          "2026-04-03T14:45Z", "2026-04-04T14:45Z first", "2026-04-05T15:15Z"),
    *case("Australia/Lord_Howe", "45 1 * * *", "second", "2026-04-03T12:00Z",
          "2026-04-06T00:00Z",
          "2026-04-03T14:45Z", "2026-04-04T15:15Z second", "2026-04-05T15:15Z"),
    *case("Australia/Lord_Howe", "45 1 * * *", "both", "2026-04-03T12:00Z", "2026-04-06T00:00Z",
          "2026-04-03T14:45Z", "2026-04-04T14:45Z first", "2026-04-04T15:15Z second",
          "2026-04-05T15:15Z"),
    *case("Australia/Lord_Howe", "0 * * * *", "first second both", "2026-04-04T12:00Z",
          "2026-04-04T18:00Z",
          "2026-04-04T12:00Z", "2026-04-04T13:00Z", "2026-04-04T14:00Z",
          "2026-04-04T15:30Z", "2026-04-04T16:30Z", "2026-04-04T17:30Z"),
    *case("Australia/Lord_Howe", "*/15 * * * *", "first", "2026-04-04T14:00Z",
          "2026-04-04T16:00Z",
          "2026-04-04T14:00Z", "2026-04-04T14:15Z",
          "2026-04-04T14:30Z first", "2026-04-04T14:45Z first",
          "2026-04-04T15:30Z", "2026-04-04T15:45Z"),
    *case("Australia/Lord_Howe", "*/15 * * * *", "second", "2026-04-04T14:00Z",
          "2026-04-04T16:00Z",
          "2026-04-04T14:00Z", "2026-04-04T14:15Z",
          "2026-04-04T15:00Z second", "2026-04-04T15:15Z second",
          "2026-04-04T15:30Z", "2026-04-04T15:45Z"),
    *case("Australia/Lord_Howe", "*/15 * * * *", "both", "2026-04-04T14:00Z",
          "2026-04-04T16:00Z",
          "2026-04-04T14:00Z", "2026-04-04T14:15Z",
          "2026-04-04T14:30Z first", "2026-04-04T14:45Z first",
          "2026-04-04T15:00Z second", "2026-04-04T15:15Z second",
          "2026-04-04T15:30Z", "2026-04-04T15:45Z"),

    # Lord Howe, spring forward by 30 minutes on 2026-10-04 local (10-03T15:30Z): 02:00
    # (+10:30) -> 02:30 (+11). 02:00 moves to 02:30, which no hourly wall time occupies.
    *case("Australia/Lord_Howe", "15 2 * * *", "shift", "2026-10-02T12:00Z", "2026-10-05T00:00Z",
          "2026-10-02T15:45Z", "2026-10-03T15:45Z shifted", "2026-10-04T15:15Z"),
    *case("Australia/Lord_Howe", "15 2 * * *", "skip", "2026-10-02T12:00Z", "2026-10-05T00:00Z",
          "2026-10-02T15:45Z", "2026-10-03T15:45Z skipped", "2026-10-04T15:15Z"),
    *case("Australia/Lord_Howe", "0 * * * *", "shift", "2026-10-03T12:00Z", "2026-10-03T18:00Z",
          "2026-10-03T12:30Z", "2026-10-03T13:30Z", "2026-10-03T14:30Z",
          "2026-10-03T15:30Z shifted", "2026-10-03T16:00Z", "2026-10-03T17:00Z"),
    *case("Australia/Lord_Howe", "0 * * * *", "skip", "2026-10-03T12:00Z", "2026-10-03T18:00Z",
          "2026-10-03T12:30Z", "2026-10-03T13:30Z", "2026-10-03T14:30Z",
          "2026-10-03T15:30Z skipped", "2026-10-03T16:00Z", "2026-10-03T17:00Z"),
    # 02:00 and 02:15 move onto the real 02:30 and 02:45.
    *case("Australia/Lord_Howe", "*/15 * * * *", "shift skip", "2026-10-03T15:00Z",
          "2026-10-03T16:30Z",
          "2026-10-03T15:00Z", "2026-10-03T15:15Z", "2026-10-03T15:30Z",
          "2026-10-03T15:45Z", "2026-10-03T16:00Z", "2026-10-03T16:15Z"),
    # 02:00 -> 02:30 and 02:20 -> 02:50 interleave with the real 02:40.
    *case("Australia/Lord_Howe", "*/20 * * * *", "shift", "2026-10-03T15:00Z",
          "2026-10-03T16:30Z",
          "2026-10-03T15:10Z", "2026-10-03T15:30Z shifted", "2026-10-03T15:40Z",
          "2026-10-03T15:50Z shifted", "2026-10-03T16:00Z", "2026-10-03T16:20Z"),
    *case("Australia/Lord_Howe", "*/20 * * * *", "skip", "2026-10-03T15:00Z",
          "2026-10-03T16:30Z",
          "2026-10-03T15:10Z", "2026-10-03T15:30Z skipped", "2026-10-03T15:40Z",
          "2026-10-03T15:50Z skipped", "2026-10-03T16:00Z", "2026-10-03T16:20Z"),

    # Apia skips 30 December 2011 (10:00Z): 29th 23:59 (-10) -> 31st 00:00 (+14). Every time
    # of the 30th moved forward by the 24-hour gap is the same time on the 31st, which fires
    # untouched: no shifted time and no skipped marker, and one run per 24 hours of UTC.
    *case("Pacific/Apia", "30 2 * * *", "shift skip", "2011-12-28T00:00Z", "2012-01-01T00:00Z",
          "2011-12-28T12:30Z", "2011-12-29T12:30Z", "2011-12-30T12:30Z", "2011-12-31T12:30Z"),
    *case("Pacific/Apia", "0 * * * *", "shift skip", "2011-12-30T07:00Z", "2011-12-30T13:00Z",
          "2011-12-30T07:00Z", "2011-12-30T08:00Z", "2011-12-30T09:00Z",
          "2011-12-30T10:00Z", "2011-12-30T11:00Z", "2011-12-30T12:00Z"),
    *case("Pacific/Apia", "*/15 * * * *", "shift skip", "2011-12-30T09:00Z", "2011-12-30T11:00Z",
          "2011-12-30T09:00Z", "2011-12-30T09:15Z", "2011-12-30T09:30Z", "2011-12-30T09:45Z",
          "2011-12-30T10:00Z", "2011-12-30T10:15Z", "2011-12-30T10:30Z", "2011-12-30T10:45Z"),

    # Moscow leaves UTC+4 for good on 2014-10-26 local (10-25T22:00Z): 02:00 -> 01:00, no DST.
    *case("Europe/Moscow", "30 1 * * *", "first", "2014-10-24T12:00Z", "2014-10-27T12:00Z",
          "2014-10-24T21:30Z", "2014-10-25T21:30Z first", "2014-10-26T22:30Z"),
    *case("Europe/Moscow", "30 1 * * *", "second", "2014-10-24T12:00Z", "2014-10-27T12:00Z",
          "2014-10-24T21:30Z", "2014-10-25T22:30Z second", "2014-10-26T22:30Z"),
    *case("Europe/Moscow", "30 1 * * *", "both", "2014-10-24T12:00Z", "2014-10-27T12:00Z",
          "2014-10-24T21:30Z", "2014-10-25T21:30Z first", "2014-10-25T22:30Z second",
          "2014-10-26T22:30Z"),
    *case("Europe/Moscow", "0 * * * *", "first", "2014-10-25T19:00Z", "2014-10-26T01:00Z",
          "2014-10-25T19:00Z", "2014-10-25T20:00Z", "2014-10-25T21:00Z first",
          "2014-10-25T23:00Z", "2014-10-26T00:00Z"),
    *case("Europe/Moscow", "0 * * * *", "second", "2014-10-25T19:00Z", "2014-10-26T01:00Z",
          "2014-10-25T19:00Z", "2014-10-25T20:00Z", "2014-10-25T22:00Z second",
          "2014-10-25T23:00Z", "2014-10-26T00:00Z"),
    *case("Europe/Moscow", "0 * * * *", "both", "2014-10-25T19:00Z", "2014-10-26T01:00Z",
          "2014-10-25T19:00Z", "2014-10-25T20:00Z", "2014-10-25T21:00Z first",
          "2014-10-25T22:00Z second", "2014-10-25T23:00Z", "2014-10-26T00:00Z"),
    *case("Europe/Moscow", "*/15 * * * *", "first", "2014-10-25T20:30Z", "2014-10-25T23:30Z",
          "2014-10-25T20:30Z", "2014-10-25T20:45Z",
          "2014-10-25T21:00Z first", "2014-10-25T21:15Z first",
          "2014-10-25T21:30Z first", "2014-10-25T21:45Z first",
          "2014-10-25T23:00Z", "2014-10-25T23:15Z"),
    *case("Europe/Moscow", "*/15 * * * *", "second", "2014-10-25T20:30Z", "2014-10-25T23:30Z",
          "2014-10-25T20:30Z", "2014-10-25T20:45Z",
          "2014-10-25T22:00Z second", "2014-10-25T22:15Z second",
          "2014-10-25T22:30Z second", "2014-10-25T22:45Z second",
          "2014-10-25T23:00Z", "2014-10-25T23:15Z"),
    *case("Europe/Moscow", "*/15 * * * *", "both", "2014-10-25T20:30Z", "2014-10-25T23:30Z",
          "2014-10-25T20:30Z", "2014-10-25T20:45Z",
          "2014-10-25T21:00Z first", "2014-10-25T21:15Z first",
          "2014-10-25T21:30Z first", "2014-10-25T21:45Z first",
          "2014-10-25T22:00Z second", "2014-10-25T22:15Z second",
          "2014-10-25T22:30Z second", "2014-10-25T22:45Z second",
          "2014-10-25T23:00Z", "2014-10-25T23:15Z"),
]
# fmt: on


@pytest.mark.parametrize("case", CASES)
def test_occurrences_across_the_change(case: Case) -> None:
    start, end = utc(case.start), utc(case.end)
    assert shown(forward(case.timing, start, end)) == list(case.expected)
    # Without markers, the skipped local times are simply absent.
    occurring = [moment for moment in case.expected if not moment.endswith("skipped")]
    assert shown(forward(case.timing, start, end, markers=False)) == occurring


@pytest.mark.parametrize("case", CASES)
def test_occurrences_before_gives_the_same_moments_in_reverse(case: Case) -> None:
    start, end = utc(case.start), utc(case.end)
    assert shown(backward(case.timing, start, end)) == list(reversed(case.expected))
    occurring = [moment for moment in case.expected if not moment.endswith("skipped")]
    assert shown(backward(case.timing, start, end, markers=False)) == occurring[::-1]


# -- the local wall time a moment stands for -------------------------------------------------


# fmt: off
WALLS = [
    # zone, cron, policy; the moment (UTC instant and flag); the local wall time matched
    ("America/New_York", "30 2 * * *", "shift",
     "2026-03-08T07:30Z shifted", "2026-03-08 02:30"),
    ("America/New_York", "30 2 * * *", "skip",
     "2026-03-08T07:30Z skipped", "2026-03-08 02:30"),
    ("America/New_York", "*/15 * * * *", "shift",  # 02:00 shifted is the real 03:00
     "2026-03-08T07:00Z", "2026-03-08 03:00"),
    ("America/New_York", "30 1 * * *", "second",
     "2026-11-01T06:30Z second", "2026-11-01 01:30"),
    ("Australia/Lord_Howe", "0 * * * *", "shift",
     "2026-10-03T15:30Z shifted", "2026-10-04 02:00"),
    ("Australia/Lord_Howe", "*/15 * * * *", "shift",  # 02:00 shifted is the real 02:30
     "2026-10-03T15:30Z", "2026-10-04 02:30"),
    ("Pacific/Apia", "30 2 * * *", "skip",  # the 30th's 02:30 skipped is the 31st's 02:30
     "2011-12-30T12:30Z", "2011-12-31 02:30"),
    ("Europe/Moscow", "30 1 * * *", "first",
     "2014-10-25T21:30Z first", "2014-10-26 01:30"),
]
# fmt: on


@pytest.mark.parametrize(
    ("zone", "cron", "policy", "moment", "wall"),
    WALLS,
    ids=[f"{row[0]}-{cron_label(row[1])}-{row[2]}-{row[3].split()[0]}" for row in WALLS],
)
def test_moment_wall_is_the_local_time_the_cron_matched(
    zone: str, cron: str, policy: str, moment: str, wall: str
) -> None:
    at = utc(moment.split()[0])
    found = next(occurrences(policy_timing(zone, cron, policy), at - ONE_MS, include_skipped=True))
    assert show(found.at, found.dst) == moment
    assert found.wall == datetime.fromisoformat(wall)
    assert found.skipped == moment.endswith("skipped")


# -- skipped-time markers --------------------------------------------------------------------


def test_a_skipped_local_time_is_a_marker_only_when_asked_for() -> None:
    timing = cron_timing("America/New_York", "30 2 * * *", gap="skip")
    marker = Moment(utc("2026-03-08T07:30Z"), "skipped", datetime(2026, 3, 8, 2, 30))
    after, before = utc("2026-03-07T12:00Z"), utc("2026-03-09T00:00Z")

    assert next(occurrences(timing, after, include_skipped=True)) == marker
    assert marker.skipped
    assert show(next(occurrences(timing, after)).at) == "2026-03-09T06:30Z"

    assert next(occurrences_before(timing, before, include_skipped=True)) == marker
    assert show(next(occurrences_before(timing, before)).at) == "2026-03-07T07:30Z"


@pytest.mark.parametrize("change", [c for c in CHANGES if c.kind == "gap"], ids=lambda c: c.id)
def test_a_marker_on_a_real_occurrence_is_not_reported(change: Change) -> None:
    """Every 15 minutes, each skipped local time lands on a real one: no marker, no gap."""
    timing = cron_timing(change.zone, "*/15 * * * *", gap="skip")
    start = utc(change.at) - timedelta(hours=3)
    got = forward(timing, start, start + timedelta(hours=6))
    assert [m.at for m in got] == [start + k * timedelta(minutes=15) for k in range(24)]
    assert [m.dst for m in got] == [""] * 24


# -- the first run of a new schedule ---------------------------------------------------------


# fmt: off
FIRST_RUNS = [
    # zone, cron, policy, now, the first run (UTC)
    # New York 2026-11-01: 01:00-01:59 is 05:00-05:59Z (EDT), then 06:00-06:59Z (EST).
    ("America/New_York",    "45 1 * * *",   "first",  "2026-11-01T05:30Z", "2026-11-01T05:45Z"),
    ("America/New_York",    "45 1 * * *",   "second", "2026-11-01T05:30Z", "2026-11-01T06:45Z"),
    ("America/New_York",    "45 1 * * *",   "both",   "2026-11-01T05:30Z", "2026-11-01T05:45Z"),
    # In the second pass, the first 01:45 is over: "first" waits for the next day.
    ("America/New_York",    "45 1 * * *",   "first",  "2026-11-01T06:10Z", "2026-11-02T06:45Z"),
    ("America/New_York",    "45 1 * * *",   "second", "2026-11-01T06:10Z", "2026-11-01T06:45Z"),
    ("America/New_York",    "45 1 * * *",   "both",   "2026-11-01T06:10Z", "2026-11-01T06:45Z"),
    # Now is the first 01:30 itself.
    ("America/New_York",    "30 1 * * *",   "first",  "2026-11-01T05:30Z", "2026-11-02T06:30Z"),
    ("America/New_York",    "30 1 * * *",   "both",   "2026-11-01T05:30Z", "2026-11-01T06:30Z"),
    ("America/New_York",    "0 * * * *",    "first",  "2026-11-01T05:30Z", "2026-11-01T07:00Z"),
    ("America/New_York",    "0 * * * *",    "second", "2026-11-01T05:30Z", "2026-11-01T06:00Z"),
    ("America/New_York",    "0 * * * *",    "both",   "2026-11-01T05:30Z", "2026-11-01T06:00Z"),
    # Berlin 2026-10-25: 02:00-02:59 is 00:00-00:59Z (CEST), then 01:00-01:59Z (CET).
    ("Europe/Berlin",       "*/15 * * * *", "first",  "2026-10-25T00:20Z", "2026-10-25T00:30Z"),
    ("Europe/Berlin",       "*/15 * * * *", "second", "2026-10-25T00:20Z", "2026-10-25T01:00Z"),
    ("Europe/Berlin",       "*/15 * * * *", "both",   "2026-10-25T00:20Z", "2026-10-25T00:30Z"),
    # Lord Howe 2026-04-05: 01:30-01:59 is 14:30-14:59Z (+11), then 15:00-15:29Z (+10:30).
    ("Australia/Lord_Howe", "*/15 * * * *", "first",  "2026-04-04T14:50Z", "2026-04-04T15:30Z"),
    ("Australia/Lord_Howe", "*/15 * * * *", "second", "2026-04-04T14:50Z", "2026-04-04T15:00Z"),
    ("Australia/Lord_Howe", "*/15 * * * *", "both",   "2026-04-04T14:50Z", "2026-04-04T15:00Z"),
    # Moscow 2014-10-26: 01:00-01:59 is 21:00-21:59Z (+4), then 22:00-22:59Z (+3).
    ("Europe/Moscow",       "0 * * * *",    "first",  "2014-10-25T21:30Z", "2014-10-25T23:00Z"),
    ("Europe/Moscow",       "0 * * * *",    "second", "2014-10-25T21:30Z", "2014-10-25T22:00Z"),
    ("Europe/Moscow",       "0 * * * *",    "both",   "2014-10-25T21:30Z", "2014-10-25T22:00Z"),
    # Right before a gap. Under "skip" the first run is the marker: the scheduler records
    # the skip when it gets there.
    ("America/New_York",    "30 2 * * *",   "shift",  "2026-03-08T06:59Z", "2026-03-08T07:30Z"),
    ("America/New_York",    "30 2 * * *",   "skip",   "2026-03-08T06:59Z", "2026-03-08T07:30Z"),
    ("America/New_York",    "*/15 * * * *", "skip",   "2026-03-08T06:59Z", "2026-03-08T07:00Z"),
    ("Australia/Sydney",    "30 2 * * *",   "shift",  "2026-10-03T15:59Z", "2026-10-03T16:30Z"),
    ("Australia/Lord_Howe", "0 * * * *",    "shift",  "2026-10-03T15:29Z", "2026-10-03T15:30Z"),
    ("Australia/Lord_Howe", "0 * * * *",    "skip",   "2026-10-03T15:29Z", "2026-10-03T15:30Z"),
    ("Pacific/Apia",        "0 * * * *",    "shift",  "2011-12-30T09:59Z", "2011-12-30T10:00Z"),
    ("Pacific/Apia",        "30 2 * * *",   "skip",   "2011-12-29T12:31Z", "2011-12-30T12:30Z"),
]
# fmt: on


@pytest.mark.parametrize(
    ("zone", "cron", "policy", "now", "first"),
    FIRST_RUNS,
    ids=[f"{r[0]}-{cron_label(r[1])}-{r[2]}-now-{r[3]}" for r in FIRST_RUNS],
)
def test_first_run_at_inside_a_fold_or_before_a_gap(
    zone: str, cron: str, policy: str, now: str, first: str
) -> None:
    assert first_run_at(policy_timing(zone, cron, policy), utc(now)) == utc(first)


# -- previews --------------------------------------------------------------------------------


# fmt: off
PREVIEW_NOTES = [
    # zone, cron, policy, preview start; the flagged moment; what its note names
    ("America/New_York", "30 2 * * *", "shift", "2026-03-07T00:00Z",
     "2026-03-08T07:30Z shifted", ("America/New_York", "02:30", "2026-03-08", "03:30")),
    ("America/New_York", "30 2 * * *", "skip", "2026-03-07T00:00Z",
     "2026-03-08T07:30Z skipped", ("America/New_York", "02:30", "2026-03-08")),
    ("Europe/Berlin", "30 2 * * *", "skip", "2026-03-28T00:00Z",
     "2026-03-29T01:30Z skipped", ("Europe/Berlin", "02:30", "2026-03-29")),
    ("Australia/Lord_Howe", "0 * * * *", "shift", "2026-10-03T12:00Z",
     "2026-10-03T15:30Z shifted", ("Australia/Lord_Howe", "02:00", "2026-10-04", "02:30")),
    ("America/New_York", "30 1 * * *", "first", "2026-10-31T00:00Z",
     "2026-11-01T05:30Z first", ("America/New_York", "01:30", "2026-11-01", "UTC-04:00")),
    ("America/New_York", "30 1 * * *", "second", "2026-10-31T00:00Z",
     "2026-11-01T06:30Z second", ("America/New_York", "01:30", "2026-11-01", "UTC-05:00")),
    ("Australia/Sydney", "30 2 * * *", "second", "2026-04-03T12:00Z",
     "2026-04-04T16:30Z second", ("Australia/Sydney", "02:30", "2026-04-05", "UTC+10:00")),
    ("Europe/Moscow", "30 1 * * *", "both", "2014-10-24T12:00Z",
     "2014-10-25T21:30Z first", ("Europe/Moscow", "01:30", "2014-10-26", "UTC+04:00")),
    ("Europe/Moscow", "30 1 * * *", "both", "2014-10-24T12:00Z",
     "2014-10-25T22:30Z second", ("Europe/Moscow", "01:30", "2014-10-26", "UTC+03:00")),
]
# fmt: on


@pytest.mark.parametrize(
    ("zone", "cron", "policy", "start", "moment", "fragments"),
    PREVIEW_NOTES,
    ids=[f"{r[0]}-{cron_label(r[1])}-{r[2]}-{r[4].replace(' ', '-')}" for r in PREVIEW_NOTES],
)
def test_preview_notes_name_the_zone_and_the_local_time(
    zone: str, cron: str, policy: str, start: str, moment: str, fragments: tuple[str, ...]
) -> None:
    items = preview(policy_timing(zone, cron, policy), start=utc(start), count=6)
    (item,) = [item for item in items if show(item.at) == moment.split()[0]]
    assert item.dst == moment.split()[1]
    assert item.skipped == (item.dst == "skipped")
    assert item.local == item.at.astimezone(ZoneInfo(zone))
    assert item.note
    for fragment in fragments:
        assert fragment in item.note


@pytest.mark.parametrize("case", CASES)
def test_preview_flags_every_moment_a_change_touched(case: Case) -> None:
    """Over each window of the matrix: shifted, skipped, first and second moments carry a
    note naming the zone and the local time matched; an untouched one is flagged "offset"
    when its UTC offset differs from the previous one's, and has no note otherwise."""
    zone = ZoneInfo(case.zone)
    moments = forward(case.timing, utc(case.start), utc(case.end))
    items = preview(case.timing, start=utc(case.start), count=len(moments))
    assert [item.at for item in items] == [moment.at for moment in moments]
    previous = None
    for moment, item in zip(moments, items, strict=True):
        offset = moment.at.astimezone(zone).utcoffset()
        assert item.skipped == moment.skipped
        if moment.dst:
            assert item.dst == moment.dst
            assert case.zone in item.note
            assert moment.wall is not None
            assert f"{moment.wall:%H:%M}" in item.note
        elif previous is not None and offset != previous:
            assert item.dst == "offset"
            assert item.note.startswith("The UTC offset is now")
        else:
            assert (item.dst, item.note) == ("", "")
        previous = offset


# fmt: off
OFFSET_CHANGES = [
    # zone, preview start, a daily 09:00 job's runs (UTC), the new offset
    ("America/New_York", "2026-03-07T00:00Z",
     ("2026-03-07T14:00Z", "2026-03-08T13:00Z offset", "2026-03-09T13:00Z"), "UTC-04:00"),
    ("America/New_York", "2026-10-31T00:00Z",
     ("2026-10-31T13:00Z", "2026-11-01T14:00Z offset", "2026-11-02T14:00Z"), "UTC-05:00"),
    ("Europe/London", "2026-03-28T00:00Z",
     ("2026-03-28T09:00Z", "2026-03-29T08:00Z offset", "2026-03-30T08:00Z"), "UTC+01:00"),
    ("Europe/London", "2026-10-24T00:00Z",
     ("2026-10-24T08:00Z", "2026-10-25T09:00Z offset", "2026-10-26T09:00Z"), "UTC+00:00"),
    ("Europe/Berlin", "2026-03-28T00:00Z",
     ("2026-03-28T08:00Z", "2026-03-29T07:00Z offset", "2026-03-30T07:00Z"), "UTC+02:00"),
    ("Europe/Berlin", "2026-10-24T00:00Z",
     ("2026-10-24T07:00Z", "2026-10-25T08:00Z offset", "2026-10-26T08:00Z"), "UTC+01:00"),
    ("Australia/Sydney", "2026-04-03T12:00Z",
     ("2026-04-03T22:00Z", "2026-04-04T23:00Z offset", "2026-04-05T23:00Z"), "UTC+10:00"),
    ("Australia/Sydney", "2026-10-02T12:00Z",
     ("2026-10-02T23:00Z", "2026-10-03T22:00Z offset", "2026-10-04T22:00Z"), "UTC+11:00"),
    ("Australia/Lord_Howe", "2026-04-03T12:00Z",
     ("2026-04-03T22:00Z", "2026-04-04T22:30Z offset", "2026-04-05T22:30Z"), "UTC+10:30"),
    ("Australia/Lord_Howe", "2026-10-02T12:00Z",
     ("2026-10-02T22:30Z", "2026-10-03T22:00Z offset", "2026-10-04T22:00Z"), "UTC+11:00"),
    # Apia: the 09:00 of the missing 30th moves onto the 31st's, 24 hours after the 29th's.
    ("Pacific/Apia", "2011-12-28T00:00Z",
     ("2011-12-28T19:00Z", "2011-12-29T19:00Z", "2011-12-30T19:00Z offset",
      "2011-12-31T19:00Z"), "UTC+14:00"),
    ("Europe/Moscow", "2014-10-24T00:00Z",
     ("2014-10-24T05:00Z", "2014-10-25T05:00Z", "2014-10-26T06:00Z offset",
      "2014-10-27T06:00Z"), "UTC+03:00"),
]
# fmt: on


@pytest.mark.parametrize(
    ("zone", "start", "expected", "offset"),
    OFFSET_CHANGES,
    ids=[f"{r[0]}-{r[1][:10]}" for r in OFFSET_CHANGES],
)
def test_preview_flags_the_first_daily_run_after_an_offset_change(
    zone: str, start: str, expected: tuple[str, ...], offset: str
) -> None:
    timing = cron_timing(zone, "0 9 * * *")
    items = preview(timing, start=utc(start), count=len(expected))
    assert [show(item.at, item.dst) for item in items] == list(expected)
    assert [f"{item.local:%H:%M}" for item in items] == ["09:00"] * len(expected)
    for item in items:
        if item.dst == "offset":
            assert offset in item.note
        else:
            assert item.note == ""


# -- intervals -------------------------------------------------------------------------------


# fmt: off
INTERVALS = [
    # zone, interval, anchor (UTC); the runs (UTC) and their local wall times
    ("Europe/Berlin", timedelta(hours=24), "2026-03-27T08:00Z",
     ("2026-03-28T08:00Z", "2026-03-29T08:00Z", "2026-03-30T08:00Z"),
     ("2026-03-28 09:00 CET", "2026-03-29 10:00 CEST", "2026-03-30 10:00 CEST")),
    ("Europe/Berlin", timedelta(hours=24), "2026-10-23T07:00Z",
     ("2026-10-24T07:00Z", "2026-10-25T07:00Z", "2026-10-26T07:00Z"),
     ("2026-10-24 09:00 CEST", "2026-10-25 08:00 CET", "2026-10-26 08:00 CET")),
    ("America/New_York", timedelta(hours=1), "2026-11-01T04:00Z",
     ("2026-11-01T05:00Z", "2026-11-01T06:00Z", "2026-11-01T07:00Z"),
     ("2026-11-01 01:00 EDT", "2026-11-01 01:00 EST", "2026-11-01 02:00 EST")),
    ("Australia/Lord_Howe", timedelta(minutes=30), "2026-10-03T14:30Z",
     ("2026-10-03T15:00Z", "2026-10-03T15:30Z", "2026-10-03T16:00Z"),
     ("2026-10-04 01:30 +1030", "2026-10-04 02:30 +11", "2026-10-04 03:00 +11")),
]
# fmt: on


@pytest.mark.parametrize(
    ("zone", "interval", "anchor", "runs", "walls"),
    INTERVALS,
    ids=[f"{r[0]}-every-{r[1]}-from-{r[2]}" for r in INTERVALS],
)
def test_intervals_are_exact_durations_whatever_the_clocks_do(
    zone: str, interval: timedelta, anchor: str, runs: tuple[str, ...], walls: tuple[str, ...]
) -> None:
    timing = Timing(kind=Kind.INTERVAL, interval=interval, timezone=zone, anchor_at=utc(anchor))
    got = forward(timing, utc(anchor) + ONE_MS, utc(runs[-1]) + ONE_MS)
    assert shown(got) == list(runs)
    assert [f"{m.at.astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M %Z}" for m in got] == list(walls)
    assert shown(backward(timing, utc(runs[0]), utc(runs[-1]) + ONE_MS)) == list(runs)[::-1]


# -- a brute-force reference -----------------------------------------------------------------


@functools.cache
def walls_around(zone_name: str, change_at: str) -> dict[datetime, tuple[datetime, ...]]:
    """Every local wall minute shown over the two days around a change -> its UTC instants."""
    zone = ZoneInfo(zone_name)
    center = utc(change_at)
    walls: dict[datetime, list[datetime]] = {}
    at = center - timedelta(days=1)
    while at < center + timedelta(days=1):
        walls.setdefault(at.astimezone(zone).replace(tzinfo=None), []).append(at)
        at += MINUTE
    return {wall: tuple(instants) for wall, instants in walls.items()}


def field_matches(field: str, value: int) -> bool:
    """A cron field of ``*``, ``*/n``, ``a``, ``a-b`` and lists of them."""
    for part in field.split(","):
        if part == "*":
            return True
        if part.startswith("*/"):
            if value % int(part[2:]) == 0:
                return True
        elif "-" in part:
            low, high = part.split("-")
            if int(low) <= value <= int(high):
                return True
        elif int(part) == value:
            return True
    return False


def cron_matches(cron: str, wall: datetime) -> bool:
    minute, hour, *days = cron.split()
    assert days == ["*", "*", "*"], "the reference knows minutes and hours only"
    return field_matches(minute, wall.minute) and field_matches(hour, wall.hour)


def instants_of_wall(
    wall: datetime, walls: dict[datetime, tuple[datetime, ...]], gap: str, fold: str
) -> Iterator[tuple[datetime, str]]:
    """The instants a matching wall time stands for under the policy, with their flags."""
    instants = walls.get(wall, ())
    if len(instants) == 1:
        yield instants[0], ""
    elif len(instants) == 2:
        if fold in ("first", "both"):
            yield instants[0], "first"
        if fold in ("second", "both"):
            yield instants[1], "second"
    else:  # no UTC minute shows this wall time: the clocks jumped over it
        before, after = wall, wall
        while before not in walls:
            before -= MINUTE
        while after not in walls:
            after += MINUTE
        length = after - before - MINUTE  # the gap: the wall minutes nobody saw
        (at,) = walls[wall + length]
        yield at, "shifted" if gap == "shift" else "skipped"


# Two wall times on one instant fire once: untouched (or folded) beats shifted beats skipped.
RANK = {"": 0, "first": 0, "second": 0, "shifted": 1, "skipped": 2}


def reference(
    change: Change, cron: str, gap: str, fold: str
) -> list[tuple[datetime, str, datetime]]:
    """(instant, flag, wall) for every moment, markers included, over the two days."""
    walls = walls_around(change.zone, change.at)
    best: dict[datetime, tuple[str, datetime]] = {}
    wall, last = min(walls), max(walls)
    while wall <= last:
        if cron_matches(cron, wall):
            for at, dst in instants_of_wall(wall, walls, gap, fold):
                if at not in best or RANK[dst] < RANK[best[at][0]]:
                    best[at] = (dst, wall)
        wall += MINUTE
    return [(at, dst, wall) for at, (dst, wall) in sorted(best.items())]


BRUTE_CRONS = [
    "0 * * * *",
    "*/15 * * * *",
    "*/20 * * * *",
    "0 0 * * *",
    "30 1 * * *",
    "30 2 * * *",
    "45 3 * * *",
]


def brute_policies(change: Change) -> list[tuple[str, str]]:
    """Each policy that matters at the change, the other one set off its default (it must
    not matter)."""
    if change.kind == "gap":
        return [(gap, "both") for gap in GAP_POLICIES]
    return [("skip", fold) for fold in FOLD_POLICIES]


BRUTE_CASES = [
    pytest.param(change, cron, gap, fold, id=f"{change.id}-{cron_label(cron)}-{gap}-{fold}")
    for change in CHANGES
    for cron in BRUTE_CRONS
    for gap, fold in brute_policies(change)
]


@pytest.mark.parametrize(("change", "cron", "gap", "fold"), BRUTE_CASES)
def test_occurrences_match_a_minute_by_minute_reference(
    change: Change, cron: str, gap: str, fold: str
) -> None:
    # 20 hours either side: every wall time of an instant in there lies in the two days.
    start = utc(change.at) - timedelta(hours=20)
    end = utc(change.at) + timedelta(hours=20)
    expected = [m for m in reference(change, cron, gap, fold) if start <= m[0] < end]
    assert expected, "the reference found nothing: the window is wrong"
    timing = cron_timing(change.zone, cron, gap, fold)

    def triples(moments: Iterable[Moment]) -> list[tuple[datetime, str, datetime | None]]:
        return [(m.at, m.dst, m.wall) for m in moments]

    assert triples(forward(timing, start, end)) == expected
    assert triples(backward(timing, start, end)) == expected[::-1]
    occurring = [m for m in expected if m[1] != "skipped"]
    assert triples(forward(timing, start, end, markers=False)) == occurring
    assert triples(backward(timing, start, end, markers=False)) == occurring[::-1]
