"""Calendars of excluded days through the service layer and a real scheduler: a holiday is
skipped with the reason "calendar" (or its run moved to the next business day) in the
ledger; a calendar's change re-plans the schedules that name it, recorded in their change
log, and the index follows; a calendar in use cannot be deleted; the days come from the
hand, the holidays package or an iCalendar file. The timing rules themselves are tested on
their own in ``test_timing_calendars.py``."""

from __future__ import annotations

import io
from datetime import date
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from django_schedulinator import services
from django_schedulinator.admin.display import summarise_changes
from django_schedulinator.importers.days import icalendar_days, public_holidays
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Calendar, Run, Schedule, ScheduleChange
from django_schedulinator.timing import to_ms

from .support.commits import committed
from .support.rule_work import RuleWork
from .support.schedules import model_fields
from .support.simulation import Simulation, fired, skipped, utc
from .test_ical import SECONDLY

ICAL = b"""BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:1
DTSTART;VALUE=DATE:20261224
DTEND;VALUE=DATE:20261227
SUMMARY:Winter break
END:VEVENT
BEGIN:VEVENT
UID:2
DTSTART;VALUE=DATE:20250704
RRULE:FREQ=YEARLY
EXDATE;VALUE=DATE:20270704
SUMMARY:Founders' day
END:VEVENT
END:VCALENDAR
"""


def calendar(name: str = "hols", *days: str, **fields: Any) -> Calendar:
    cal = Calendar(name=name, timezone=fields.pop("timezone", "Europe/Berlin"), **fields)
    with committed():
        services.save_calendar(cal, days=[(date.fromisoformat(d), f"holiday {d}") for d in days])
    return cal


def create(name: str, **fields: Any) -> Schedule:
    with committed():
        return services.create(Schedule(**model_fields(name=name, **fields)))


# -- through a real scheduler ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_a_holiday_is_skipped_or_moved_in_the_ledger(sim: Simulation) -> None:
    # The simulation starts on Friday 27 March 2026 at 12:00 UTC; Monday 30 March is a
    # holiday in Berlin, which moves to CEST (UTC+2) on Sunday 29 March.
    calendar("hols", "2026-03-30")
    daily = create("daily", kind="cron", cron="0 9 * * *", timezone="Europe/Berlin",
                   calendars=["hols"])  # fmt: skip
    mondays = create("mondays", kind="cron", cron="0 9 * * 1", timezone="Europe/Berlin",
                     calendars=["hols"], calendar_rule="next_business_day")  # fmt: skip

    sim.run_until(utc("2026-04-01T12:00"))

    assert fired(daily) == [
        utc("2026-03-28T08:00"),  # Saturday 09:00 CET
        utc("2026-03-29T07:00"),  # Sunday 09:00 CEST
        utc("2026-03-31T07:00"),
        utc("2026-04-01T07:00"),
    ]
    assert skipped(daily) == [(utc("2026-03-30T07:00"), "calendar")]
    note = Run.objects.get(schedule=daily, status="skipped").note
    assert (
        note == "Excluded: holiday 2026-03-30, 2026-03-30 (calendar hols). Nothing fires that day."
    )
    assert fired(mondays) == [utc("2026-03-31T07:00")]  # Tuesday 09:00
    assert skipped(mondays) == []


@pytest.mark.django_db(transaction=True)
def test_a_calendar_change_re_plans_the_schedules_that_name_it(index: DueIndex) -> None:
    hols = calendar("hols", "2099-01-01")
    other = calendar("other")
    daily = create("daily", kind="cron", cron="0 9 * * *", timezone="UTC", calendars=["hols"],
                   start_at=utc("2098-12-31T10:00"))  # fmt: skip
    elsewhere = create("elsewhere", kind="cron", cron="0 9 * * *", timezone="UTC",
                       calendars=["other"], start_at=utc("2098-12-31T10:00"))  # fmt: skip
    # The first run is the holiday's marker: the ledger records the day there.
    assert daily.next_run_at == utc("2099-01-01T09:00")

    hols.description = "New Year"
    with committed():
        moved = services.save_calendar(hols, days=[(date(2099, 1, 2), "")])

    assert moved == 0  # the same instant: a plain run where the marker was
    daily.refresh_from_db()
    assert daily.next_run_at == utc("2099-01-01T09:00")  # a plain run now
    assert daily.timing_spec.calendar is not None
    assert index.scores([daily.pk]) == {daily.pk: to_ms(utc("2099-01-01T09:00"))}
    # No change of where the next run is, no entry: only the day moved, past it.
    assert not ScheduleChange.objects.filter(schedule=daily, action="replanned").exists()

    with committed():
        services.save_calendar(hols, days=[(date(2099, 1, 1), ""), (date(2099, 1, 2), "")])
    daily.refresh_from_db()
    assert daily.next_run_at == utc("2099-01-01T09:00")  # the marker again, same instant

    daily_moves = create("moves", kind="cron", cron="0 9 * * *", timezone="UTC",
                         calendars=["hols"], calendar_rule="next_business_day",
                         start_at=utc("2098-12-31T10:00"))  # fmt: skip
    # Thursday 1 and Friday 2 January 2099 are excluded: Monday the 5th, the first
    # business day, has its own run; the moved ones land on it.
    assert daily_moves.next_run_at == utc("2099-01-03T09:00")  # Saturday keeps its own
    with committed():
        services.save_calendar(hols, days=[])
    daily_moves.refresh_from_db()
    assert daily_moves.next_run_at == utc("2099-01-01T09:00")
    [entry] = ScheduleChange.objects.filter(schedule=daily_moves, action="replanned")
    # In the order the database keeps the keys (PostgreSQL's jsonb sorts them).
    assert set(summarise_changes(entry.action, entry.changes).split("; ")) == {
        "next_run_at: 2099-01-03T09:00:00+00:00 → 2099-01-01T09:00:00+00:00",
        "calendar: hols",
    }
    assert entry.changes == {
        "next_run_at": ["2099-01-03T09:00:00+00:00", "2099-01-01T09:00:00+00:00"],
        "calendar": "hols",
    }
    assert index.scores([daily_moves.pk]) == {daily_moves.pk: to_ms(utc("2099-01-01T09:00"))}
    elsewhere.refresh_from_db()
    assert elsewhere.version == 1
    assert other.days.count() == 0


@pytest.mark.django_db
def test_a_calendar_in_use_is_not_deleted_and_unknown_names_are_refused() -> None:
    hols = calendar("hols", "2099-01-01")
    create("daily", kind="cron", cron="0 9 * * *", calendars=["hols"])
    with pytest.raises(ValidationError, match="used by 1 schedule"):
        services.delete_calendar(hols)
    assert Calendar.objects.filter(name="hols").exists()
    with pytest.raises(ValidationError) as caught:
        create("other", kind="cron", cron="0 9 * * *", calendars=["nope", "hols"])
    assert caught.value.message_dict["calendars"] == ["No calendar is named nope."]
    with pytest.raises(ValidationError) as caught:
        create("twice", kind="cron", cron="0 9 * * *", calendars=["hols", "hols"])
    assert caught.value.message_dict["calendars"] == ["A calendar is named twice."]
    # Nor renamed under it: the schedule would lose it.
    hols.name = "renamed"
    with pytest.raises(ValidationError) as caught:
        services.save_calendar(hols)
    assert caught.value.message_dict["name"] == [
        "The calendar 'hols' is used by 1 schedule(s): daily. Take it out of them before it "
        "is renamed."
    ]
    assert Calendar.objects.filter(name="hols").exists()
    unused = calendar("unused", "2099-01-01")
    unused.name = "still-unused"
    services.save_calendar(unused)
    services.delete_calendar(unused)
    assert not Calendar.objects.filter(name="unused").exists()


@pytest.mark.django_db
def test_a_calendar_is_validated() -> None:
    with pytest.raises(ValidationError) as caught:
        services.save_calendar(Calendar(name="bad zone", timezone="Mars/Olympus", weekend=[8]))
    assert set(caught.value.message_dict) == {"name", "timezone", "weekend"}
    with pytest.raises(ValidationError) as caught:
        services.save_calendar(Calendar(name="x", source="holidays"))
    assert caught.value.message_dict == {"country": ["Public holidays need a country."]}


# -- where the days come from ----------------------------------------------------------------


@pytest.mark.django_db
def test_public_holidays_of_a_country_and_a_subdivision() -> None:
    # England and Wales: Christmas on Friday 25 December 2026, Boxing Day (Saturday)
    # substituted on Monday 28 December.
    cal = Calendar(name="england", timezone="Europe/London", source="holidays", country="GB",
                   subdivision="ENG")  # fmt: skip
    with committed():
        services.fill_calendar(cal, years=range(2026, 2027))
    days = dict(cal.days.values_list("day", "name"))
    assert days[date(2026, 12, 25)] == "Christmas Day"
    assert date(2026, 12, 28) in days
    assert date(2026, 3, 17) not in days  # St Patrick's Day: Northern Ireland only
    assert cal.weekend == [6, 7]
    northern_ireland, _weekend = public_holidays("GB", "NIR", range(2026, 2027))
    assert date(2026, 3, 17) in dict(northern_ireland)
    # The United Arab Emirates rest on Saturday and Sunday since 2022; Israel on Friday and
    # Saturday: the weekend comes with the country.
    assert public_holidays("IL", "", range(2026, 2027))[1] == [5, 6]
    with pytest.raises(ValidationError) as caught:
        public_holidays("XX", "", range(2026, 2027))
    assert "country" in caught.value.message_dict
    with pytest.raises(ValidationError) as caught:
        public_holidays("GB", "ZZZ", range(2026, 2027))
    assert "subdivision" in caught.value.message_dict


# Names of constants in the holidays package (its module's attributes), not countries.
NOT_COUNTRIES = ["JAN", "MON", "PUBLIC", "XX", "gb-eng", ""]


@pytest.mark.parametrize("country", NOT_COUNTRIES)
def test_a_country_the_holidays_package_does_not_list_is_an_error_of_its_field(
    country: str,
) -> None:
    with pytest.raises(ValidationError) as caught:
        public_holidays(country, "", range(2026, 2027))
    assert list(caught.value.message_dict) == ["country"]
    assert "does not know it" in caught.value.message_dict["country"][0]


def test_a_subdivision_is_one_of_its_countrys() -> None:
    with pytest.raises(ValidationError) as caught:
        public_holidays("GB", "JAN", range(2026, 2027))
    [message] = caught.value.message_dict["subdivision"]
    assert message == (
        "The holidays package does not know it: GB has no subdivision 'JAN' (it has ENG, "
        "NIR, SCT, WLS)."
    )
    # Its codes in any case, and the names the package knows them by.
    assert dict(public_holidays("gb", "eng", range(2026, 2027))[0]) == dict(
        public_holidays("GB", "England", range(2026, 2027))[0]
    )


@pytest.mark.django_db
def test_fill_calendars_names_a_country_the_holidays_package_does_not_list() -> None:
    # A row written before countries were checked (the model takes any text).
    Calendar.objects.create(name="monthly", source="holidays", country="JAN")
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 calendar\\(s\\) could not be filled"):
        call_command("fill_calendars", "--years", "2026", stderr=err)
    assert err.getvalue().startswith("monthly: The holidays package does not know it: ")


@pytest.mark.django_db
def test_fill_calendars_names_an_icalendar_rule_that_would_run_unbounded(
    tmp_path: Any, rule_work: RuleWork
) -> None:
    with committed():
        services.save_calendar(Calendar(name="seconds", source="ical"), days=[])
    path = tmp_path / "seconds.ics"
    path.write_bytes(SECONDLY)
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 calendar\\(s\\) could not be filled"):
        call_command("fill_calendars", "seconds", "--icalendar", str(path), stderr=err)
    assert err.getvalue() == (
        "seconds: The iCalendar event 'Every second' repeats more often than daily "
        "(FREQ=SECONDLY): a calendar of excluded days takes whole days.\n"
    )
    assert rule_work.instants == 0


def test_an_icalendar_files_days() -> None:
    days = dict(icalendar_days(ICAL, range(2026, 2028)))
    assert days == {
        date(2026, 7, 4): "Founders' day",
        date(2026, 12, 24): "Winter break",  # DTEND is exclusive: the 24th to the 26th
        date(2026, 12, 25): "Winter break",
        date(2026, 12, 26): "Winter break",
        # 4 July 2027 is an EXDATE.
    }
    with pytest.raises(ValidationError, match="Not an iCalendar file"):
        icalendar_days(b"hello", range(2026, 2027))


@pytest.mark.django_db
def test_an_icalendar_calendar_is_filled_through_the_service() -> None:
    cal = Calendar(name="school", timezone="UTC", source="ical")
    with committed():
        services.fill_calendar(cal, years=range(2026, 2027), icalendar=ICAL)
    assert list(cal.days.values_list("day", flat=True)) == [
        date(2026, 7, 4), date(2026, 12, 24), date(2026, 12, 25), date(2026, 12, 26),
    ]  # fmt: skip
    with pytest.raises(ValidationError, match="Give the iCalendar file"):
        services.fill_calendar(cal)


@pytest.mark.django_db
def test_fill_calendars_reads_the_sources_again(tmp_path: Any) -> None:
    england = Calendar(name="england", timezone="Europe/London", source="holidays",
                       country="GB", subdivision="ENG")  # fmt: skip
    with committed():
        services.fill_calendar(england, years=range(2026, 2027))
    school = Calendar(name="school", timezone="UTC", source="ical")
    with committed():
        services.fill_calendar(school, years=range(2026, 2027), icalendar=ICAL)
    out = io.StringIO()
    with committed():
        call_command("fill_calendars", "--years", "2026-2027", stdout=out)
    assert out.getvalue().startswith("england: ")  # the holidays ones, not the file's
    assert england.days.filter(day__year=2027).exists()
    path = tmp_path / "school.ics"
    path.write_bytes(ICAL)
    out = io.StringIO()
    with committed():
        call_command("fill_calendars", "school", "--icalendar", str(path), "--years", "2027",
                     stdout=out)  # fmt: skip
    # In 2027: the break was in 2026, and 4 July 2027 is an EXDATE.
    assert out.getvalue() == "school: 0 day(s); re-planned 0 schedule(s).\n"
    with pytest.raises(CommandError, match="1 calendar\\(s\\) could not be filled"):
        call_command("fill_calendars", "school", stderr=io.StringIO())
