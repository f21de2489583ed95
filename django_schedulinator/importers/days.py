"""Where the days of a calendar of excluded days (holidays) come from.

The rules (skip an occurrence on an excluded day, or move it to the next business day) are
``timing.calendars``', on the ``timing.days.DayCalendar`` that ``models.day_calendar``
builds from the days a process loaded. The days come from the hand (the admin, the API,
code), from the ``holidays`` package (its public holidays of a country and a subdivision,
for a span of years), or from an iCalendar file (its events' days, recurring events within
the same span: ``ical``). Every change goes through ``services`` (``save_calendar`` and the
functions around it).

This module is the services' and the admin's: it reads and fills a ``Calendar`` row, above
the models. The timing rules are given days, never rows.
"""

from __future__ import annotations

from datetime import UTC, date, tzinfo

from django.core.exceptions import ValidationError

from django_schedulinator import timing
from django_schedulinator.errors import TimingError
from django_schedulinator.importers import ical
from django_schedulinator.models import Calendar

# Filling a calendar from a source: the years it covers by default, around the current one.
YEARS_BEFORE = 1
YEARS_AFTER = 10
MAX_ICALENDAR_BYTES = 1_000_000


def default_years(today: date) -> range:
    """The years a calendar filled from a source covers unless told otherwise."""
    return range(today.year - YEARS_BEFORE, today.year + YEARS_AFTER + 1)


def parse_years(text: str, today: date) -> range:
    """ "2026-2036" or "2026" as the years to fill; blank: ``default_years``."""
    text = text.strip()
    if not text:
        return default_years(today)
    first, _dash, last = text.partition("-")
    try:
        years = range(int(first), int(last or first) + 1)
    except ValueError:
        raise ValidationError("Enter the years as 2026-2036, or one year.") from None
    if not 1 <= len(years) <= 50 or years.start < 1900 or years.stop > 3000:
        raise ValidationError("Enter at most 50 years, between 1900 and 2999.")
    return years


# -- where the days come from ---------------------------------------------------------------


def days_from_source(
    calendar: Calendar, *, years: range, icalendar: bytes | str | None = None
) -> list[tuple[date, str]]:
    """The days of ``calendar``'s source over ``years``: the public holidays of its country
    and subdivision (``calendar.weekend`` becomes the country's), or the iCalendar file
    given. A ``ValidationError`` names the field at fault."""
    if calendar.source == Calendar.Source.HOLIDAYS:
        days, calendar.weekend = public_holidays(calendar.country, calendar.subdivision, years)
        return days
    if calendar.source == Calendar.Source.ICALENDAR:
        if icalendar is None:
            raise ValidationError({"source": "Give the iCalendar file to read the days from."})
        try:
            zone: tzinfo = timing.get_zone(calendar.timezone)
        except TimingError:
            zone = UTC  # the model says what is wrong with it
        return icalendar_days(icalendar, years, zone=zone)
    raise ValidationError({"source": "A calendar kept by hand has no source to fill from."})


def public_holidays(
    country: str, subdivision: str, years: range
) -> tuple[list[tuple[date, str]], list[int]]:
    """The public holidays of ``country`` (and ``subdivision``) in ``years``, and the
    country's weekend (ISO weekdays), from the holidays package. The country is one the
    package lists (its codes are also the names of other things in its module, such as
    JAN), the subdivision one of that country's (a code, or a name the package knows)."""
    try:
        import holidays
    except ImportError as exc:  # the "calendars" extra
        raise ValidationError(
            {"source": "Public holidays need the holidays package: "
                       "pip install 'django-schedulinator[calendars]'."}
        ) from exc  # fmt: skip
    code = country.strip().upper()
    supported: dict[str, list[str]] = holidays.list_supported_countries()
    if code not in supported:
        raise ValidationError(
            {"country": f"The holidays package does not know it: no country {country!r} "
                        "(an ISO 3166 code, such as GB or US)."}
        )  # fmt: skip
    codes = supported[code]
    wanted = subdivision.strip()
    subdiv = next((c for c in codes if c.upper() == wanted.upper()), wanted) or None
    try:
        found = holidays.country_holidays(code, subdiv=subdiv, years=list(years), language="en_US")
    except NotImplementedError as exc:  # a subdivision neither listed nor a known name
        known = ", ".join(codes[:30]) + (", ..." if len(codes) > 30 else "") or "none"
        raise ValidationError(
            {"subdivision": f"The holidays package does not know it: {code} has no "
                            f"subdivision {wanted!r} (it has {known})."}
        ) from exc  # fmt: skip
    days = sorted((day, str(name)) for day, name in found.items())
    weekend = sorted(day + 1 for day in getattr(found, "weekend", (5, 6)))
    return days, weekend


def icalendar_days(
    data: bytes | str, years: range, *, zone: tzinfo = UTC
) -> list[tuple[date, str]]:
    """The days of the events of an iCalendar file (each day an event covers; recurring
    events within ``years``), with their summaries: ``ical``, at most 1 MB. ``zone`` is the
    calendar's, where an all-day event's UNTIL or EXDATE given in UTC falls."""
    if len(data) > MAX_ICALENDAR_BYTES:
        raise ValidationError(f"The iCalendar file is larger than {MAX_ICALENDAR_BYTES} bytes.")
    return ical.read_days(data, years, zone)
