"""Cron's day rule: when both the day of the month and the day of the week are restricted,
cron fires on a day that matches either (``day_rule="either"``, the default); with
``day_rule="both"`` a day must match both, as Celery's crontab has it. Hand-written vectors,
in the schedule's zone and across DST changes, and once through a real scheduler."""

from __future__ import annotations

from datetime import datetime
from io import StringIO
from itertools import islice
from typing import Any

import pytest
from django.core.management import call_command

from django_schedulinator.models import Schedule
from django_schedulinator.timing import (
    DayRule,
    Kind,
    Timing,
    describe,
    occurrences,
    occurrences_before,
    preview,
)

from .support.doc_examples import example
from .support.schedules import make_schedule
from .support.simulation import Simulation, fired, utc

BERLIN = "Europe/Berlin"
FIRST_MONDAY = Timing(kind=Kind.CRON, cron="30 6 1-7 * 1", timezone=BERLIN, day_rule=DayRule.BOTH)
FRIDAY_13TH = Timing(kind=Kind.CRON, cron="0 9 13 * 5", timezone=BERLIN, day_rule=DayRule.BOTH)


def after(timing: Timing, start: datetime, count: int) -> list[datetime]:
    return [m.at for m in islice(occurrences(timing, start), count)]


def test_the_first_monday_of_the_month_across_both_berlin_changes() -> None:
    # 06:30 local: 05:30 UTC in winter (CET), 04:30 UTC in summer (CEST); the clocks
    # change on 28 March and 31 October 2027.
    assert after(FIRST_MONDAY, utc("2027-01-15T00:00"), 5) == [
        utc("2027-02-01T05:30"),
        utc("2027-03-01T05:30"),
        utc("2027-04-05T04:30"),
        utc("2027-05-03T04:30"),
        utc("2027-06-07T04:30"),
    ]
    assert after(FIRST_MONDAY, utc("2027-09-15T00:00"), 2) == [
        utc("2027-10-04T04:30"),
        utc("2027-11-01T05:30"),
    ]
    # Backwards, as catch-up walks: the mirror image.
    before = [m.at for m in islice(occurrences_before(FIRST_MONDAY, utc("2027-05-03T04:30")), 3)]
    assert before == [utc("2027-04-05T04:30"), utc("2027-03-01T05:30"), utc("2027-02-01T05:30")]


def test_cron_s_own_rule_fires_on_either_day_field() -> None:
    either = Timing(kind=Kind.CRON, cron="30 6 1-7 * 1", timezone=BERLIN)
    assert either.day_rule == DayRule.EITHER  # the default
    # Every Monday, and every day from the 1st to the 7th.
    assert after(either, utc("2027-01-15T00:00"), 4) == [
        utc("2027-01-18T05:30"),  # a Monday
        utc("2027-01-25T05:30"),  # a Monday
        utc("2027-02-01T05:30"),  # the 1st (a Monday too)
        utc("2027-02-02T05:30"),  # the 2nd
    ]


def test_friday_the_13th() -> None:
    assert after(FRIDAY_13TH, utc("2026-01-01T00:00"), 5) == [
        utc("2026-02-13T08:00"),
        utc("2026-03-13T08:00"),
        utc("2026-11-13T08:00"),
        utc("2027-08-13T07:00"),  # summer time
        utc("2028-10-13T07:00"),
    ]


def test_both_fields_and_the_dst_policy_meet() -> None:
    # The last Sunday of March at 02:30 in Berlin: the very hour the clocks skip.
    last_sunday = Timing(
        kind=Kind.CRON, cron="30 2 25-31 3 0", timezone=BERLIN, day_rule=DayRule.BOTH
    )
    assert after(last_sunday, utc("2027-01-01T00:00"), 2) == [
        utc("2027-03-28T01:30"),  # shifted to 03:30 CEST
        utc("2028-03-26T01:30"),
    ]
    items = preview(last_sunday, start=utc("2027-01-01T00:00"), count=1)
    assert items[0].dst == "shifted"
    assert "02:30 does not exist in Europe/Berlin on 2027-03-28" in items[0].note


@pytest.mark.parametrize("cron", ["30 6 * * 1", "30 6 1-7 * *", "*/20 6 */2 * 1-5", "@monthly"])
def test_the_rule_changes_nothing_when_a_day_field_is_a_star(cron: str) -> None:
    either = Timing(kind=Kind.CRON, cron=cron, timezone=BERLIN)
    both = Timing(kind=Kind.CRON, cron=cron, timezone=BERLIN, day_rule=DayRule.BOTH)
    start = utc("2027-01-01T00:00")
    assert after(both, start, 40) == after(either, start, 40)
    assert describe(both) == describe(either)


def test_the_rule_is_validated() -> None:
    assert Timing(kind=Kind.CRON, cron="0 0 30 2 1", timezone=BERLIN).validate() == {}
    never = Timing(kind=Kind.CRON, cron="0 0 30 2 1", timezone=BERLIN, day_rule=DayRule.BOTH)
    assert "never matches" in never.validate()["cron"]
    unknown = Timing(kind=Kind.CRON, cron="0 0 1 * 1", timezone=BERLIN, day_rule="and")
    assert unknown.validate() == {"day_rule": "Unknown day rule 'and'; use either or both."}


@pytest.mark.parametrize(
    ("cron", "rule", "text"),
    [
        (
            "30 6 1-7 * 1",
            DayRule.BOTH,
            "At 06:30, between day 1 and 7 of the month, but only on Monday",
        ),
        (
            "30 6 1-7 * 1",
            DayRule.EITHER,
            "At 06:30, between day 1 and 7 of the month, or on Monday",
        ),
        ("0 9 13 * 5", DayRule.BOTH, "At 09:00, on day 13 of the month, but only on Friday"),
        (
            "0 9 1,15 * mon-fri",
            DayRule.BOTH,
            "At 09:00, on day 1 and 15 of the month, but only Monday through Friday",
        ),
        ("0 6 * * 1-5", DayRule.BOTH, "At 06:00, Monday through Friday"),
    ],
)
def test_the_description_says_which_days(cron: str, rule: str, text: str) -> None:
    timing = Timing(kind=Kind.CRON, cron=cron, timezone=BERLIN, day_rule=rule)
    assert describe(timing) == f"{text} ({BERLIN})"


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_a_real_scheduler_fires_the_first_monday_only(sim: Simulation) -> None:
    both = make_schedule(kind="cron", cron="30 6 1-7 * 1", timezone=BERLIN, day_rule="both")
    either = make_schedule(kind="cron", cron="30 6 1-7 * 1", timezone=BERLIN)

    sim.run_until(utc("2026-06-01T00:00"))  # from 27 March: across the spring change

    assert fired(both) == [utc("2026-04-06T04:30"), utc("2026-05-04T04:30")]
    assert len(fired(either)) > 2 * 7  # every Monday and every first week
    assert both.description.endswith("but only on Monday (Europe/Berlin)")
    both.refresh_from_db()
    assert both.next_run_at == utc("2026-06-01T04:30")  # the next first Monday


@pytest.mark.django_db
def test_the_upgrade_guide_lists_the_schedules_the_rule_can_concern(
    capsys: pytest.CaptureFixture[str],
) -> None:
    concerned = make_schedule(kind="cron", cron="30 6 1-7 * mon", timezone=BERLIN)
    make_schedule(kind="cron", cron="30 6 * * mon", timezone=BERLIN)
    make_schedule(kind="cron", cron="30 6 1-7 * mon", timezone=BERLIN, day_rule="both")

    example("day-rule-candidates", page="upgrading.md")

    assert capsys.readouterr().out == f"{concerned.pk} {concerned.name} 30 6 1-7 * mon\n"


@pytest.mark.django_db
def test_a_schedule_in_code_declares_its_day_rule(settings: Any) -> None:
    first_monday = {"task": "tests.record", "cron": "30 6 1-7 * 1", "timezone": BERLIN}
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "SCHEDULES": {"first-monday": {**first_monday, "day_rule": "both"}},
    }
    call_command("sync_schedules", stdout=StringIO())
    assert Schedule.objects.get(name="first-monday").day_rule == "both"

    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "SCHEDULES": {"first-monday": first_monday}}
    call_command("sync_schedules", stdout=StringIO())  # taken out of the declaration
    assert Schedule.objects.get(name="first-monday").day_rule == "either"
