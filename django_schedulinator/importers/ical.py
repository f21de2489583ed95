"""The days an iCalendar file's events cover, read as RFC 5545 says, within bounds of work
that no file can push.

icalendar parses the file and gives each event's start, its end (DTEND, or DURATION, or the
RFC's default: a DATE lasts its day, a DATE-TIME no time), its RRULE, RDATE and EXDATE
values, with their zones (VTIMEZONE blocks, Windows zone names); python-dateutil expands
each RRULE. What is done here:

- An occurrence is read on its event's own wall clock (a DATE as its midnight). It covers
  each day from its start to its exclusive end. A value given in another zone (an UNTIL or
  an EXDATE in UTC, as Google and Outlook export them) is first converted to the event's
  zone; to the calendar's zone for an all-day or floating event.
- DTSTART is the first occurrence and counts toward COUNT (RFC 5545, 3.8.5.3). UNTIL,
  COUNT, EXDATE and the occurrences that other events replace (RECURRENCE-ID) are applied
  here as the occurrences come, so that dateutil only ever expands a rule of one kind of
  time. A cancelled event (STATUS:CANCELLED) has no days.

The bounds, each an error of the file that names the event at fault:

- A rule that repeats within a day (HOURLY, MINUTELY, SECONDLY) is refused: its days are
  the days it touches, but dateutil would produce each of its up to 86,400 instants a day.
- ``MAX_OCCURRENCE_DAYS``: every occurrence produced counts (before the years read too,
  where COUNT needs them), and so does each further day an occurrence covers in them.
- ``validators.MAX_DAYS``: the distinct days, checked as each is added.
- ``MAX_WALK``: the periods (years, months, weeks, days) dateutil examines, weighted by what
  each costs, whether it finds an occurrence in them or not. A rule with no COUNT starts
  walking just before the years read (moved there by whole periods of the rule). A rule
  that never matches (30 February) makes dateutil look up to the year 9999: the walk runs
  in a frame of years ahead, the same in the calendar (leap years, weekdays) as the real
  ones over the span walked, that ends within a few centuries of 9999. Before a rule is
  walked, the most it can cost must fit in what is left of the bound.
"""

from __future__ import annotations

import functools
from calendar import isleap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import MAXYEAR, date, datetime, time, timedelta, tzinfo
from typing import Any

from django.core.exceptions import ValidationError

from django_schedulinator.models.validators import MAX_DAYS

MAX_OCCURRENCE_DAYS = 100_000
MAX_WALK = 500_000
# About a microsecond a unit: dateutil examines each day of a yearly rule's year.
PERIOD_COST = {"YEARLY": 20, "MONTHLY": 3, "WEEKLY": 2, "DAILY": 1}
RULE_PARTS = {
    "FREQ", "UNTIL", "COUNT", "INTERVAL", "BYSECOND", "BYMINUTE", "BYHOUR", "BYDAY",
    "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYMONTH", "BYSETPOS", "WKST",
}  # fmt: skip
ONE_DAY = timedelta(days=1)
END_OF_TIME = datetime(MAXYEAR, 12, 31)


def read_days(data: bytes | str, years: range, zone: tzinfo) -> list[tuple[date, str]]:
    """The days the events of an iCalendar file cover in ``years``, with their summaries;
    ``zone`` (the calendar's) places all-day and floating events' UTC values."""
    try:
        import icalendar
    except ImportError as exc:
        raise ValidationError(
            "iCalendar files need the icalendar package: "
            "pip install 'django-schedulinator[calendars]'."
        ) from exc
    try:
        parsed = icalendar.Calendar.from_ical(data)
    except ValueError as exc:
        raise ValidationError(f"Not an iCalendar file: {exc}") from exc
    events = list(parsed.walk("VEVENT"))
    reading = _Reading(date(years.start, 1, 1), date(years.stop - 1, 12, 31), zone)
    replaced: dict[str, list[Any]] = {}  # UID -> the occurrences its overrides replace
    for event in events:
        if "RECURRENCE-ID" in event and "UID" in event:
            with _naming(event):
                replaced.setdefault(str(event["UID"]), []).append(event.decoded("RECURRENCE-ID"))
    for event in events:
        with _naming(event):
            overridden = [] if "RECURRENCE-ID" in event else replaced.get(str(event.get("UID")))
            reading.event(event, overridden or [])
    return sorted(reading.days.items())


@contextmanager
def _naming(event: Any) -> Iterator[None]:
    """An event that cannot be read is an error that names it."""
    try:
        yield
    except (KeyError, ValueError, TypeError, OverflowError) as exc:
        summary = str(event.get("SUMMARY", "an event"))
        raise ValidationError(f"The iCalendar event {summary!r} cannot be read: {exc}") from exc


@dataclass
class _Reading:
    first: date
    last: date
    zone: tzinfo
    days: dict[date, str] = field(default_factory=dict)
    occurrence_days: int = 0
    walked: int = 0

    def event(self, event: Any, replaced: list[Any]) -> None:
        if str(event.get("STATUS", "")).upper() == "CANCELLED":
            return
        name = str(event.get("SUMMARY", ""))[:200]
        summary = str(event.get("SUMMARY", "an event"))
        start = event.start
        own: tzinfo | None = None  # the event's zone; None: all-day or floating
        if isinstance(start, datetime):
            own, begin, all_day = start.tzinfo, start.replace(tzinfo=None), False
        else:
            begin, all_day = datetime.combine(start, time()), True
        length = max(event.duration, timedelta(0))
        wall = functools.partial(self._wall, own=own, all_day=all_day)
        exact: set[datetime] = set()
        whole: set[date] = set()
        for value in [*event.exdates, *replaced]:
            excluded = wall(value)
            if isinstance(excluded, datetime):
                exact.add(excluded)
            else:
                whole.add(excluded)

        def occur(at: datetime, span: timedelta) -> None:
            if at not in exact and at.date() not in whole:
                self.cover(at, span, name, summary)

        self.spend(1, summary)
        occur(begin, length)  # DTSTART: the first occurrence
        for rdate, rdate_end in event.rdates:
            self.spend(1, summary)
            at = wall(rdate)
            if not isinstance(at, datetime):
                at = datetime.combine(at, time())
            occur(at, length if rdate_end is None else max(rdate_end - rdate, timedelta(0)))
        for rule in event.rrules:
            if begin.date() <= self.last:  # later, none of its occurrences is in the years
                self.rule(rule, begin, length, wall, occur, summary)

    def rule(
        self,
        rule: Any,
        begin: datetime,
        length: timedelta,
        wall: Callable[[Any], date],
        occur: Callable[[datetime, timedelta], None],
        summary: str,
    ) -> None:
        """Walks one RRULE of an event that starts at ``begin``, each of its occurrences
        but DTSTART to ``occur``."""
        from dateutil.rrule import rrulestr

        parts = {key.upper(): list(values) for key, values in rule.items()}
        freq = str(parts.get("FREQ", [""])[0]).upper()
        if freq in ("HOURLY", "MINUTELY", "SECONDLY"):
            raise ValidationError(
                f"The iCalendar event {summary!r} repeats more often than daily "
                f"(FREQ={freq}): a calendar of excluded days takes whole days."
            )
        if freq not in PERIOD_COST:
            raise ValueError(f"FREQ={freq} is not a frequency of RFC 5545.")
        unknown = sorted(set(parts) - RULE_PARTS)
        if unknown:
            raise ValueError(f"{', '.join(unknown)} is not a part of an RRULE (RFC 5545).")
        until = parts.pop("UNTIL", [None])[0]
        count = parts.pop("COUNT", [None])[0]
        interval = int(parts.get("INTERVAL", [1])[0])
        if interval < 1:
            raise ValueError(f"INTERVAL={interval} is not a positive number.")
        if "BYSETPOS" in parts:  # dateutil examines each position given, repeated or not
            parts["BYSETPOS"] = sorted({int(position) for position in parts["BYSETPOS"]})
        cost = PERIOD_COST[freq] * (1 + len(parts.get("BYSETPOS", ())))
        past_until = _past(None if until is None else wall(until))
        start = begin if count is not None else self._advanced(begin, freq, interval, parts, length)
        shift = _frame_shift(max(start.year - 1, 1), min(self.last.year + 1, MAXYEAR))
        framed = start.replace(year=start.year + shift)
        if self.walked + cost * _periods(framed, END_OF_TIME, freq, interval) > MAX_WALK:
            self._too_much_walking(summary)
        recur: Any = type(rule)(parts)  # icalendar's vRecur, without UNTIL and COUNT
        text = recur.to_ical().decode()
        remaining = None if count is None else int(count) - 1  # DTSTART is one
        reached = END_OF_TIME  # dateutil looks up to the year 9999 for one more
        for moment in rrulestr(text, dtstart=framed):
            self.spend(1, summary)
            if moment.year - shift > self.last.year:
                reached = moment
                break
            at = moment.replace(year=moment.year - shift)
            if past_until(at) or at.date() > self.last:
                reached = moment
                break
            if at == begin:
                continue  # DTSTART, an occurrence already
            if remaining is not None:
                if remaining <= 0:
                    reached = moment
                    break
                remaining -= 1
            occur(at, length)
        self.walked += cost * _periods(framed, reached, freq, interval)
        if self.walked > MAX_WALK:
            self._too_much_walking(summary)

    def cover(self, start: datetime, length: timedelta, name: str, summary: str) -> None:
        """Adds the days of an occurrence from ``start`` for ``length``, in the years read,
        named ``name``."""
        try:
            last = (start + length - timedelta.resolution).date() if length else start.date()
        except OverflowError:
            last = date.max
        day, stop = max(start.date(), self.first), min(last, self.last)
        if day > stop:
            return
        self.spend((stop - day).days, summary)  # its first day counted with the occurrence
        while day <= stop:
            if day not in self.days:
                if len(self.days) >= MAX_DAYS:
                    raise ValidationError(f"The iCalendar file has more than {MAX_DAYS} days.")
                self.days[day] = name
            day += ONE_DAY

    def spend(self, occurrence_days: int, summary: str) -> None:
        self.occurrence_days += occurrence_days
        if self.occurrence_days > MAX_OCCURRENCE_DAYS:
            raise ValidationError(
                f"The iCalendar file has more than {MAX_OCCURRENCE_DAYS} occurrence days in "
                f"all (at the event {summary!r}): give fewer years, or fewer events."
            )

    def _too_much_walking(self, summary: str) -> None:
        raise ValidationError(
            "The recurring events of the iCalendar file are too many, or repeat over too "
            f"long a time, to expand (at the event {summary!r}): give fewer years, or fewer "
            "recurring events."
        )

    def _wall(self, value: Any, *, own: tzinfo | None, all_day: bool) -> date:
        """A DATE as it is; a DATE-TIME on the event's wall clock (converted to ``own``, or
        to the calendar's zone for an all-day or floating event), its date for an all-day
        event."""
        if not isinstance(value, datetime):
            if isinstance(value, date):
                return value
            raise ValueError(f"not a date: {value!r}")
        moment: datetime = value
        if moment.tzinfo is not None:
            moment = moment.astimezone(own or self.zone).replace(tzinfo=None)
        return moment.date() if all_day else moment

    def _advanced(
        self,
        begin: datetime,
        freq: str,
        interval: int,
        parts: dict[str, list[Any]],
        length: timedelta,
    ) -> datetime:
        """Where a rule with no COUNT can start walking: ``begin`` moved forward by whole
        periods of the rule, to before the years read by an occurrence's length and a period
        more, so that none of their occurrences is lost."""
        try:
            horizon = datetime.combine(self.first, time()) - length - ONE_DAY
        except OverflowError:
            return begin
        if begin >= horizon:
            return begin
        if freq in ("DAILY", "WEEKLY"):
            step = ONE_DAY * interval * (7 if freq == "WEEKLY" else 1)
            return begin + step * max((horizon - begin) // step - 1, 0)
        if freq == "MONTHLY":
            months = (horizon.year - begin.year) * 12 + horizon.month - begin.month
            periods = months // interval - 1
        else:
            periods = (horizon.year - begin.year) // interval - 1
        if periods <= 0:
            return begin
        # A yearly or monthly rule's missing parts come from DTSTART (RFC 5545, 3.3.10):
        # written into the rule, before its start moves to the first day of a period.
        if not parts.keys() & {"BYWEEKNO", "BYYEARDAY", "BYMONTHDAY", "BYDAY"}:
            parts["BYMONTHDAY"] = [begin.day]
            if freq == "YEARLY":
                parts.setdefault("BYMONTH", [begin.month])
        if freq == "MONTHLY":
            month = begin.year * 12 + begin.month - 1 + interval * periods
            return datetime.combine(date(month // 12, month % 12 + 1, 1), begin.time())
        return datetime.combine(date(begin.year + interval * periods, 1, 1), begin.time())


def _past(until: date | None) -> Callable[[datetime], bool]:
    """Whether an occurrence is past UNTIL (on the event's wall clock; a DATE: its day)."""
    if until is None:
        return lambda at: False
    if isinstance(until, datetime):
        return lambda at: at > until
    return lambda at: at.date() > until


def _periods(start: datetime, end: datetime, freq: str, interval: int) -> int:
    """How many periods of a rule a walk from ``start`` to ``end`` examines."""
    if freq == "YEARLY":
        units = end.year - start.year
    elif freq == "MONTHLY":
        units = (end.year - start.year) * 12 + end.month - start.month
    else:
        units = (end - start).days // (7 if freq == "WEEKLY" else 1)
    return max(units, 0) // interval + 1


@functools.lru_cache(maxsize=1024)
def _frame_shift(first_year: int, last_year: int) -> int:
    """The years to add to a walk over ``first_year`` to ``last_year`` so that it runs as
    near the year 9999 as can be, in years the same in the calendar (each a leap year or
    not as its own, the first starting on the same weekday): dateutil, looking for an
    occurrence that never comes, stops at 9999. A multiple of 400 years always is."""
    weekday = date(first_year, 1, 1).weekday()
    for shift in range(MAXYEAR - last_year, 0, -1):
        if date(first_year + shift, 1, 1).weekday() == weekday and all(
            isleap(year + shift) == isleap(year) for year in range(first_year, last_year + 1)
        ):
            return shift
    return 0
