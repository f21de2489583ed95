"""The days of an iCalendar file (``calendars.icalendar_days``), read as RFC 5545 says, from
files shaped as Google Calendar and Outlook export them (time zones in VTIMEZONE blocks, a
Windows zone name, UNTIL in UTC, overrides of one occurrence, DURATION), and within bounds of
work that no file can push: the instants dateutil's rules produce and the periods they
examine are counted (the ``rule_work`` fixture), never timed. The API, the admin and
``fill_calendars`` answer a rule that would run unbounded with an error of the file's field:
``test_api.py``, ``test_admin_calendars.py``, ``test_calendars.py``."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

import pytest
from dateutil.rrule import rrulestr
from django.core.exceptions import ValidationError
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from django_schedulinator.importers import ical
from django_schedulinator.importers.days import icalendar_days
from django_schedulinator.models.validators import MAX_DAYS
from django_schedulinator.timing import get_zone

from .support.rule_work import RuleWork

BERLIN = get_zone("Europe/Berlin")

# A Google Calendar export: the zone as a VTIMEZONE, a weekly event with its UNTIL in UTC,
# one of its occurrences moved (RECURRENCE-ID) and one excluded (EXDATE), all-day events
# (DTEND exclusive), a yearly one with one occurrence cancelled.
GOOGLE = b"""BEGIN:VCALENDAR
PRODID:-//Google Inc//Google Calendar 70.9054//EN
VERSION:2.0
CALSCALE:GREGORIAN
METHOD:PUBLISH
X-WR-CALNAME:Office closures
X-WR-TIMEZONE:Europe/Berlin
BEGIN:VTIMEZONE
TZID:Europe/Berlin
X-LIC-LOCATION:Europe/Berlin
BEGIN:DAYLIGHT
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
TZNAME:CEST
DTSTART:19700329T020000
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU
END:DAYLIGHT
BEGIN:STANDARD
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
TZNAME:CET
DTSTART:19701025T030000
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU
END:STANDARD
END:VTIMEZONE
BEGIN:VEVENT
DTSTART;TZID=Europe/Berlin:20260105T090000
DTEND;TZID=Europe/Berlin:20260105T170000
RRULE:FREQ=WEEKLY;WKST=MO;UNTIL=20260202T075959Z;BYDAY=MO
EXDATE;TZID=Europe/Berlin:20260119T090000
DTSTAMP:20251201T101500Z
UID:0a1b2c3d4e5f@google.com
CREATED:20251130T090000Z
LAST-MODIFIED:20251201T101400Z
SEQUENCE:1
STATUS:CONFIRMED
SUMMARY:Stocktaking
TRANSP:OPAQUE
END:VEVENT
BEGIN:VEVENT
DTSTART;TZID=Europe/Berlin:20260113T090000
DTEND;TZID=Europe/Berlin:20260113T170000
DTSTAMP:20251201T101500Z
UID:0a1b2c3d4e5f@google.com
RECURRENCE-ID;TZID=Europe/Berlin:20260112T090000
CREATED:20251130T090000Z
LAST-MODIFIED:20251201T101400Z
SEQUENCE:2
STATUS:CONFIRMED
SUMMARY:Stocktaking (moved)
TRANSP:OPAQUE
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20261224
DTEND;VALUE=DATE:20261227
DTSTAMP:20251201T101500Z
UID:9f8e7d6c@google.com
SUMMARY:Winter break
TRANSP:TRANSPARENT
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20250704
DTEND;VALUE=DATE:20250705
RRULE:FREQ=YEARLY
DTSTAMP:20251201T101500Z
UID:founders@google.com
SUMMARY:Founders' day
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20270704
DTEND;VALUE=DATE:20270705
RECURRENCE-ID;VALUE=DATE:20270704
DTSTAMP:20251201T101500Z
UID:founders@google.com
STATUS:CANCELLED
SUMMARY:Founders' day
END:VEVENT
END:VCALENDAR
""".replace(b"\n", b"\r\n")

# An Outlook export: a Windows zone name with its VTIMEZONE (rules from 1601), a monthly
# event whose UNTIL in UTC is its last occurrence, timed events over midnight, and DURATION.
OUTLOOK = b"""BEGIN:VCALENDAR
PRODID:-//Microsoft Corporation//Outlook 16.0 MIMEDIR//EN
VERSION:2.0
METHOD:PUBLISH
X-MS-OLK-FORCEINSPECTOROPEN:TRUE
BEGIN:VTIMEZONE
TZID:W. Europe Standard Time
BEGIN:STANDARD
DTSTART:16011028T030000
RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=10
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
END:STANDARD
BEGIN:DAYLIGHT
DTSTART:16010325T020000
RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=3
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
END:DAYLIGHT
END:VTIMEZONE
BEGIN:VEVENT
CLASS:PUBLIC
CREATED:20251120T080000Z
DTEND;TZID="W. Europe Standard Time":20260306T170000
DTSTAMP:20251120T080000Z
DTSTART;TZID="W. Europe Standard Time":20260306T090000
LAST-MODIFIED:20251120T080000Z
PRIORITY:5
RRULE:FREQ=MONTHLY;UNTIL=20260605T070000Z;BYDAY=1FR
SEQUENCE:0
SUMMARY;LANGUAGE=en-gb:Inventory day
TRANSP:OPAQUE
UID:040000008200E00074C5B7101A82E00800000000A0B1C2D3E4F5
X-MICROSOFT-CDO-BUSYSTATUS:BUSY
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20260525
DTEND;VALUE=DATE:20260526
SUMMARY;LANGUAGE=en-gb:Whit Monday
UID:040000008200E00074C5B7101A82E00800000000A0B1C2D3E4F6
X-MICROSOFT-CDO-ALLDAYEVENT:TRUE
END:VEVENT
BEGIN:VEVENT
DTSTART;TZID="W. Europe Standard Time":20260710T220000
DTEND;TZID="W. Europe Standard Time":20260711T020000
SUMMARY;LANGUAGE=en-gb:Maintenance night
UID:040000008200E00074C5B7101A82E00800000000A0B1C2D3E4F7
END:VEVENT
BEGIN:VEVENT
DTSTART;TZID="W. Europe Standard Time":20260801T180000
DTEND;TZID="W. Europe Standard Time":20260802T000000
SUMMARY;LANGUAGE=en-gb:Summer party
UID:040000008200E00074C5B7101A82E00800000000A0B1C2D3E4F8
END:VEVENT
BEGIN:VEVENT
DTSTART;TZID="W. Europe Standard Time":20260901T220000
DURATION:PT4H
SUMMARY;LANGUAGE=en-gb:Migration
UID:040000008200E00074C5B7101A82E00800000000A0B1C2D3E4F9
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20261228
DURATION:P3D
SUMMARY;LANGUAGE=en-gb:Year-end closure
UID:040000008200E00074C5B7101A82E00800000000A0B1C2D3E4FA
X-MICROSOFT-CDO-ALLDAYEVENT:TRUE
END:VEVENT
END:VCALENDAR
""".replace(b"\n", b"\r\n")


def ics(*events: str) -> bytes:
    """A file of the events given, each the lines between BEGIN:VEVENT and END:VEVENT."""
    body = "".join(f"BEGIN:VEVENT\r\nUID:{n}\r\n{e.strip()}\r\nEND:VEVENT\r\n" for n, e in
                   enumerate(events))  # fmt: skip
    return f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\n{body}END:VCALENDAR\r\n".encode()


def days(data: bytes, first: int = 2026, last: int = 2026, **kwargs: object) -> dict[date, str]:
    return dict(icalendar_days(data, range(first, last + 1), **kwargs))  # type: ignore[arg-type]


def dates(*texts: str) -> list[date]:
    return [date.fromisoformat(text) for text in texts]


# -- read as RFC 5545 says -------------------------------------------------------------------


def test_a_google_export() -> None:
    assert days(GOOGLE, 2026, 2027) == {
        # Mondays at 09:00 in Berlin until 07:59:59 UTC on 2 February (08:59:59 in
        # Berlin: not that day's); the 12th moved to the 13th, the 19th excluded.
        date(2026, 1, 5): "Stocktaking",
        date(2026, 1, 13): "Stocktaking (moved)",
        date(2026, 1, 26): "Stocktaking",
        date(2026, 7, 4): "Founders' day",  # 2027's is cancelled
        date(2026, 12, 24): "Winter break",  # DTEND is exclusive: the 24th to the 26th
        date(2026, 12, 25): "Winter break",
        date(2026, 12, 26): "Winter break",
    }


def test_an_outlook_export() -> None:
    assert days(OUTLOOK) == {
        # The first Friday of each month until 07:00 UTC on 5 June, 09:00 in Berlin: the
        # last occurrence, included.
        **dict.fromkeys(
            dates("2026-03-06", "2026-04-03", "2026-05-01", "2026-06-05"), "Inventory day"
        ),
        date(2026, 5, 25): "Whit Monday",
        # 22:00 to 02:00 covers two days; 18:00 to midnight one (the end is exclusive).
        date(2026, 7, 10): "Maintenance night",
        date(2026, 7, 11): "Maintenance night",
        date(2026, 8, 1): "Summer party",
        date(2026, 9, 1): "Migration",  # 22:00 for four hours
        date(2026, 9, 2): "Migration",
        **dict.fromkeys(dates("2026-12-28", "2026-12-29", "2026-12-30"), "Year-end closure"),
    }


def test_an_all_day_event_covers_its_duration_and_its_dtend_is_exclusive() -> None:
    assert list(days(ics("DTSTART;VALUE=DATE:20260302\r\nDURATION:P3D"))) == dates(
        "2026-03-02", "2026-03-03", "2026-03-04"
    )
    assert list(days(ics("DTSTART;VALUE=DATE:20260302\r\nDTEND;VALUE=DATE:20260304"))) == dates(
        "2026-03-02", "2026-03-03"
    )
    # No end: the one day. A week: each occurrence covers its days.
    assert list(days(ics("DTSTART;VALUE=DATE:20260302"))) == dates("2026-03-02")
    weekly = "DTSTART;VALUE=DATE:20260302\r\nDURATION:P2D\r\nRRULE:FREQ=WEEKLY;COUNT=2"
    assert list(days(ics(weekly))) == dates("2026-03-02", "2026-03-03", "2026-03-09", "2026-03-10")


def test_dtend_and_duration_together_are_refused_naming_the_event() -> None:
    both = (
        "SUMMARY:Both\r\nDTSTART;VALUE=DATE:20260302\r\nDTEND;VALUE=DATE:20260303\r\nDURATION:P3D"
    )
    with pytest.raises(ValidationError, match="The iCalendar event 'Both' cannot be read: Only "
                       "one of DTEND and DURATION"):  # fmt: skip
        days(ics(both))


def test_dtstart_is_the_first_occurrence_and_counts() -> None:
    # A Tuesday, with a rule of Mondays: the Tuesday, then two Mondays (COUNT=3 with it).
    tuesday = "DTSTART;VALUE=DATE:20260106\r\nRRULE:FREQ=WEEKLY;BYDAY=MO;COUNT=3"
    assert list(days(ics(tuesday))) == dates("2026-01-06", "2026-01-12", "2026-01-19")
    # In step with its rule, it is counted once.
    monday = "DTSTART;VALUE=DATE:20260105\r\nRRULE:FREQ=WEEKLY;BYDAY=MO;COUNT=3"
    assert list(days(ics(monday))) == dates("2026-01-05", "2026-01-12", "2026-01-19")


def test_until_in_utc_for_an_all_day_event_is_read_in_the_calendars_zone() -> None:
    # 23:00 UTC on the 29th is midnight of the 30th in Berlin: the 30th is the last day.
    daily = "DTSTART;VALUE=DATE:20261228\r\nRRULE:FREQ=DAILY;UNTIL=20261229T230000Z"
    assert list(days(ics(daily), zone=BERLIN)) == dates("2026-12-28", "2026-12-29", "2026-12-30")
    assert list(days(ics(daily))) == dates("2026-12-28", "2026-12-29")  # in UTC
    as_a_date = "DTSTART;VALUE=DATE:20261228\r\nRRULE:FREQ=DAILY;UNTIL=20261229"
    assert list(days(ics(as_a_date), zone=BERLIN)) == dates("2026-12-28", "2026-12-29")


def test_rdate_and_exdate() -> None:
    event = (
        "DTSTART;TZID=Europe/Berlin:20260302T090000\r\n"
        "RRULE:FREQ=DAILY;COUNT=3\r\n"
        "EXDATE:20260303T080000Z\r\n"  # 09:00 in Berlin: the 3rd's occurrence
        "EXDATE;VALUE=DATE:20260304\r\n"  # the whole day
        "RDATE;VALUE=DATE:20260310\r\n"
        "RDATE;VALUE=PERIOD:20260320T220000Z/PT3H"  # 23:00 to 02:00 in Berlin
    )
    assert list(days(ics(event))) == dates("2026-03-02", "2026-03-10", "2026-03-20", "2026-03-21")


def test_a_cancelled_event_has_no_days() -> None:
    assert days(ics("DTSTART;VALUE=DATE:20260302\r\nSTATUS:CANCELLED")) == {}


# -- the bounded walk finds what dateutil alone finds -----------------------------------------

WEEKDAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]


@st.composite
def rules(draw: st.DrawFn) -> str:
    """An RRULE of all-day occurrences that matches often (so that dateutil alone, walking
    it up to the years read and one occurrence past them, ends soon)."""
    freq = draw(st.sampled_from(["YEARLY", "MONTHLY", "WEEKLY", "DAILY"]))
    parts = [f"FREQ={freq}", f"INTERVAL={draw(st.integers(1, 3))}"]
    days = st.lists(st.sampled_from(WEEKDAYS), min_size=1, max_size=4, unique=True)
    monthdays = st.lists(
        st.integers(1, 28) | st.integers(-28, -1), min_size=1, max_size=3, unique=True
    )
    months = st.lists(st.integers(1, 12), min_size=1, max_size=4, unique=True)
    shape = draw(st.integers(0, 3))
    if freq == "YEARLY" and shape == 1:
        parts += [f"BYMONTH={','.join(map(str, draw(months)))}"]
        parts += [f"BYMONTHDAY={','.join(map(str, draw(monthdays)))}"]
    elif freq == "YEARLY" and shape == 2:
        parts += [f"BYWEEKNO={draw(st.integers(1, 52) | st.integers(-52, -1))}"]
        parts += [f"BYDAY={','.join(draw(days))}"]
    elif freq == "YEARLY" and shape == 3:
        parts += [f"BYYEARDAY={draw(st.integers(1, 365) | st.integers(-365, -1))}"]
    elif freq == "MONTHLY" and shape == 1:
        parts += [f"BYMONTHDAY={','.join(map(str, draw(monthdays)))}"]
    elif freq == "MONTHLY" and shape >= 2:
        nth = draw(st.sampled_from(["", "1", "2", "-1", "-2"]))
        parts += [f"BYDAY={','.join(nth + day for day in draw(days))}"]
        if shape == 3 and not nth:
            parts += [f"BYSETPOS={draw(st.sampled_from(['1', '-1', '2,-2']))}"]
    elif freq == "WEEKLY" and shape >= 1:
        parts += [f"BYDAY={','.join(draw(days))}", f"WKST={draw(st.sampled_from(WEEKDAYS))}"]
    elif freq == "DAILY" and shape == 1:
        parts += [f"BYDAY={','.join(draw(days))}"]
    elif freq == "DAILY" and shape >= 2:
        parts += [f"BYMONTH={','.join(map(str, draw(months)))}"]
    ending = draw(st.integers(0, 2))
    if ending == 1:
        parts += [f"COUNT={draw(st.integers(1, 300))}"]
    elif ending == 2:
        parts += [f"UNTIL={draw(st.dates(date(1890, 1, 1), date(2120, 12, 31))):%Y%m%d}"]
    return ";".join(parts)


@settings(max_examples=300, deadline=None, database=None)
@given(
    rule=rules(),
    seed=st.dates(date(1890, 1, 1), date(2105, 12, 31)),
    first=st.integers(1898, 2105),
    span=st.integers(0, 4),
)
@example(rule="FREQ=YEARLY", seed=date(1896, 2, 29), first=2098, span=4)  # no 29 Feb in 2100
@example(rule="FREQ=YEARLY;BYWEEKNO=1;BYDAY=MO", seed=date(1899, 1, 1), first=2099, span=2)
@example(rule="FREQ=MONTHLY;INTERVAL=3;BYMONTHDAY=-1", seed=date(1900, 1, 31), first=2099, span=2)
@example(rule="FREQ=WEEKLY;INTERVAL=3;BYDAY=SU;WKST=SU", seed=date(1890, 1, 1), first=2026, span=0)
@example(rule="FREQ=DAILY;INTERVAL=3;COUNT=300", seed=date(2025, 11, 1), first=2026, span=0)
@example(rule="FREQ=YEARLY;BYYEARDAY=1;UNTIL=18970101", seed=date(1898, 1, 1), first=1898, span=0)
def test_the_days_are_those_dateutil_alone_finds(
    rule: str, seed: date, first: int, span: int
) -> None:
    """Walking from the years read, in a frame of other years, with UNTIL and COUNT applied
    here: the same days as dateutil's own expansion of the rule from its DTSTART (the
    rule's first occurrence from ``seed``, so that the two count COUNT alike)."""
    bare = ";".join(part for part in rule.split(";") if not part.startswith(("COUNT", "UNTIL")))
    start = rrulestr(bare, dtstart=datetime.combine(seed, time())).after(
        datetime.combine(seed, time()), inc=True
    )
    assume(start is not None and start.year <= 2105)
    years = range(first, first + span + 1)
    expected = {
        moment.date()
        for moment in rrulestr(rule, dtstart=start).between(
            datetime(years.start, 1, 1), datetime(years.stop - 1, 12, 31), inc=True
        )
    }
    if start.year in years:  # the first occurrence, even with UNTIL before it
        expected.add(start.date())
    event = f"DTSTART;VALUE=DATE:{start:%Y%m%d}\r\nRRULE:{rule}"
    assert set(days(ics(event), years.start, years.stop - 1)) == expected


# -- within bounds of work -------------------------------------------------------------------

# 180 bytes: every second from New Year 2026, with no end.
SECONDLY = (
    b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Example//Calendar//EN\r\nBEGIN:VEVENT\r\n"
    b"UID:1\r\n"
    b"DTSTART:20260101T000000Z\r\nRRULE:FREQ=SECONDLY\r\nSUMMARY:Every second\r\n"
    b"END:VEVENT\r\nEND:VCALENDAR\r\n"
)


@pytest.mark.parametrize("freq", ["SECONDLY", "MINUTELY", "HOURLY"])
def test_a_rule_that_repeats_within_a_day_is_refused_before_any_instant(
    rule_work: RuleWork, freq: str
) -> None:
    assert len(SECONDLY) == 180
    with pytest.raises(ValidationError) as caught:
        days(SECONDLY.replace(b"SECONDLY", freq.encode()), 2026, 2037)
    assert caught.value.messages == [
        f"The iCalendar event 'Every second' repeats more often than daily (FREQ={freq}): a "
        "calendar of excluded days takes whole days."
    ]
    assert rule_work.instants == 0


def test_many_times_a_day_stop_at_the_bound_of_occurrences(rule_work: RuleWork) -> None:
    # Daily, at each of the day's 86,400 seconds.
    every_second = (
        "DTSTART:20260101T000000Z\r\nRRULE:FREQ=DAILY;"
        f"BYHOUR={','.join(map(str, range(24)))};BYMINUTE={','.join(map(str, range(60)))};"
        f"BYSECOND={','.join(map(str, range(60)))}"
    )
    with pytest.raises(ValidationError, match="more than 100000 occurrence days"):
        days(ics(every_second))
    assert rule_work.instants <= ical.MAX_OCCURRENCE_DAYS + 1


@pytest.mark.parametrize(
    "rule",
    [
        "RRULE:FREQ=DAILY;COUNT=999999999",
        "RRULE:FREQ=DAILY;UNTIL=99991231",
        "RRULE:FREQ=DAILY",
        "RRULE:FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR,SA,SU",
        "RRULE:FREQ=DAILY;BYSETPOS=1",
    ],
)
def test_a_rule_with_more_days_than_a_calendar_holds_stops_there(
    rule_work: RuleWork, rule: str
) -> None:
    with pytest.raises(ValidationError, match=f"more than {MAX_DAYS} days"):
        days(ics(f"DTSTART;VALUE=DATE:20260101\r\n{rule}"), 2026, 2075)
    assert rule_work.instants <= MAX_DAYS + 1


def test_an_old_dtstart_is_walked_from_the_years_read(rule_work: RuleWork) -> None:
    # Every 1 January since 1900, as a daily rule: 2026's and 2027's.
    event = "DTSTART;VALUE=DATE:19000101\r\nRRULE:FREQ=DAILY;BYMONTH=1;BYMONTHDAY=1"
    assert list(days(ics(event), 2026, 2027)) == dates("2026-01-01", "2027-01-01")
    assert rule_work.instants <= 10
    assert rule_work.periods <= 3 * 366
    # With COUNT, the occurrences before the years read count, so they are walked: three
    # times a day since 1900 stops at the bound of occurrences; from the year 1, the walk could
    # pass its bound, and is refused before it starts.
    thrice = "DTSTART;VALUE=DATE:19000101\r\nRRULE:FREQ=DAILY;BYHOUR=0,8,16;COUNT=1000000000"
    with pytest.raises(ValidationError, match="more than 100000 occurrence days"):
        days(ics(thrice))
    assert rule_work.instants <= 10 + ical.MAX_OCCURRENCE_DAYS
    rule_work.instants = 0
    from_year_1 = "DTSTART;VALUE=DATE:00010101\r\nRRULE:FREQ=DAILY;COUNT=1000000000"
    with pytest.raises(ValidationError, match="too many, or repeat over too long a time"):
        days(ics(from_year_1))
    assert rule_work.instants == 0


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",  # 30 February: never
        "FREQ=WEEKLY;INTERVAL=2;BYMONTH=2;BYMONTHDAY=30",
        "FREQ=MONTHLY;BYMONTH=4;BYMONTHDAY=31",
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30;BYSETPOS=1,-1",
        "FREQ=DAILY;INTERVAL=7;BYDAY=MO",  # from a Thursday, every seventh day: never Monday
        "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30;COUNT=5",
        "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30;UNTIL=20260301",
    ],
)
def test_a_rule_that_never_matches_examines_few_periods(rule_work: RuleWork, rule: str) -> None:
    assert days(ics(f"DTSTART;VALUE=DATE:20260101\r\nRRULE:{rule}"), 2026, 2037) == {
        date(2026, 1, 1): ""  # its DTSTART
    }
    # Up to the year 9999, it examined 2.9 million days (or their weeks, months, years);
    # now the years read and the three decades of the frame after them.
    assert rule_work.periods <= 31 * 366


def test_many_rules_that_never_match_stop_at_the_bound_of_work(rule_work: RuleWork) -> None:
    never = "DTSTART;VALUE=DATE:20260101\r\nRRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"
    with pytest.raises(ValidationError, match="too many, or repeat over too long a time"):
        days(ics(*[never] * 100), 2026, 2037)
    assert rule_work.periods <= ical.MAX_WALK
    # BYSETPOS of every position makes each year's examination 733 times as long.
    positions = ",".join(str(n) for n in [*range(1, 367), *range(-366, 0)] * 3)
    setpos = (
        "DTSTART;VALUE=DATE:20260101\r\n"
        f"RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30;BYSETPOS={positions}"
    )
    rule_work.periods = 0
    with pytest.raises(ValidationError, match="too many, or repeat over too long a time"):
        days(ics(*[setpos] * 5), 2026, 2037)
    assert rule_work.periods * 733 <= ical.MAX_WALK


def test_many_events_each_a_little_stop_at_the_bound_of_occurrences(rule_work: RuleWork) -> None:
    # Four thousand events on the same month: few days, many occurrence days.
    month = "DTSTART;VALUE=DATE:20260101\r\nRRULE:FREQ=DAILY;COUNT=31"
    with pytest.raises(ValidationError, match="more than 100000 occurrence days"):
        days(ics(*[month] * 4000))
    assert rule_work.instants <= ical.MAX_OCCURRENCE_DAYS
    # And one event over a thousand years, in its years read only.
    long = "DTSTART;VALUE=DATE:15000101\r\nDURATION:P365000D"
    assert list(days(ics(long))) == [date(2026, 1, 1) + timedelta(n) for n in range(365)]
