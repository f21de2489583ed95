"""The excluded days of a schedule's calendars (holidays), as the timing rules see them:
each excluded day is a span of UTC time (the day in its calendar's zone), built from the
days given (``DayCalendar.of``); nothing here reads a row. What the timeline does with a
moment on one is ``calendars``'.

A process keeps what it built: ``calendar_of`` builds a schedule's ``DayCalendar`` from its
calendars as the process loaded them (``LoadedCalendar``: each one's days, under a stamp
that changes with them; ``models.load_calendars`` reads the rows), once per stamps and rule.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from itertools import chain
from typing import Any, NamedTuple

from django_schedulinator.timing.instants import ONE_DAY, from_ms, get_zone, local_midnight, to_ms
from django_schedulinator.timing.vocabulary import CalendarRule


class ExcludedSpan(NamedTuple):
    """Excluded time: one day of a calendar, in its zone, as UTC instants (days of several
    calendars that overlap are one span)."""

    start: datetime  # inclusive
    end: datetime  # exclusive
    label: str  # "Christmas Day, 2026-12-25 (calendar uk)", joined by "; " when merged


@dataclass(frozen=True, slots=True)
class DayCalendar:
    """The excluded days of a schedule's calendars, and what the schedule does with an
    occurrence on one. Built by ``DayCalendar.of``; nothing here reads the database."""

    spans: tuple[ExcludedSpan, ...] = ()  # ascending, none overlapping
    move: bool = False  # move such an occurrence to the next business day (else skip it)
    # (zone, ISO weekdays): the days no occurrence is moved to, read in each calendar's zone.
    weekends: tuple[tuple[str, frozenset[int]], ...] = ()
    names: tuple[str, ...] = ()  # the calendars', for descriptions
    # The zones its days and weekends are read in: when a schedule's is the only one, every
    # moment of an excluded day moves by the same number of days
    # (``calendars.moves_by_whole_days``).
    zones: frozenset[str] = frozenset()
    _starts: tuple[datetime, ...] = field(default=(), init=False, repr=False, compare=False)
    # For each span, the end of the run of spans it starts that follow one another without
    # a gap (a closure of many days): ``next_business`` jumps it in one step.
    _run_ends: tuple[datetime, ...] = field(default=(), init=False, repr=False, compare=False)
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", tuple(span.start for span in self.spans))
        ends: list[datetime] = []
        for span, following_span in zip(
            reversed(self.spans), chain([None], reversed(self.spans)), strict=False
        ):
            touching = following_span is not None and following_span.start <= span.end
            ends.append(ends[-1] if touching else span.end)
        object.__setattr__(self, "_run_ends", tuple(reversed(ends)))
        # Hashed once: a timing that has one is a cache key (``calendars._moved_from``).
        object.__setattr__(self, "_hash", hash((self.spans, self.move, self.weekends)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def of(
        cls,
        days: Iterable[tuple[str, date, str]],
        *,
        move: bool = False,
        weekends: Iterable[tuple[str, Iterable[int]]] = (),
        names: Iterable[str] = (),
    ) -> DayCalendar:
        """From (zone, day, label) triples: each day is its span in its zone, from its
        local midnight to the next (a midnight that does not exist is read as PEP 495's
        ``fold=0`` reads it: the instant the clocks jump)."""
        listed = list(days)
        week = tuple((zone, frozenset(wd)) for zone, wd in weekends)
        zones = {zone for zone, _day, _label in listed} | {zone for zone, _wd in week}
        raw = sorted(
            ExcludedSpan(local_midnight(day, zone), local_midnight(day + ONE_DAY, zone), label)
            for zone, day, label in listed
        )
        spans: list[ExcludedSpan] = []
        for span in raw:
            if spans and span.start < spans[-1].end:  # overlapping: one span
                last = spans[-1]
                spans[-1] = ExcludedSpan(
                    last.start, max(last.end, span.end), f"{last.label}; {span.label}"
                )
            else:
                spans.append(span)
        return cls(tuple(spans), move, week, tuple(names), frozenset(zones))

    def span_at(self, at: datetime) -> ExcludedSpan | None:
        """The excluded span ``at`` falls in, or None."""
        i = bisect.bisect_right(self._starts, at) - 1
        if i >= 0 and at < self.spans[i].end:
            return self.spans[i]
        return None

    def is_business(self, at: datetime) -> bool:
        """Whether an occurrence can be moved to ``at``: not excluded, and on no calendar's
        weekend."""
        if self.span_at(at) is not None:
            return False
        return not any(
            at.astimezone(get_zone(zone)).isoweekday() in days for zone, days in self.weekends
        )

    def run_end_at(self, at: datetime) -> datetime | None:
        """The end of the run of excluded days ``at`` falls in, or None (not excluded)."""
        i = bisect.bisect_right(self._starts, at) - 1
        if i >= 0 and at < self.spans[i].end:
            return self._run_ends[i]
        return None

    def next_business(self, at: datetime, limit: datetime) -> datetime | None:
        """The first instant from ``at`` on that an occurrence can be moved to (no span
        holds it, no calendar's weekend), or None before ``limit``. A run of excluded days
        is one step, a weekend day one more: about one step per stretch, not per day."""
        while at < limit:
            i = bisect.bisect_right(self._starts, at) - 1
            if i >= 0 and at < self._run_ends[i]:
                at = self._run_ends[i]
                continue
            weekend_end = self._weekend_end(at)
            if weekend_end is None:
                return at
            at = weekend_end
        return None

    def _weekend_end(self, at: datetime) -> datetime | None:
        """The next local midnight of a calendar whose weekend ``at`` falls on, or None."""
        for zone_name, days in self.weekends:
            local = at.astimezone(get_zone(zone_name))
            if local.isoweekday() in days:
                return local_midnight(local.date() + ONE_DAY, zone_name)
        return None

    def spans_after(self, at: datetime) -> Iterator[ExcludedSpan]:
        """The spans that end after ``at``, ascending."""
        i = max(bisect.bisect_right(self._starts, at) - 1, 0)
        return (span for span in self.spans[i:] if span.end > at)

    def spans_before(self, at: datetime) -> Iterator[ExcludedSpan]:
        """The spans that start before ``at``, latest first."""
        return reversed(self.spans[: bisect.bisect_left(self._starts, at)])


def decided_moves(stored: object) -> tuple[tuple[datetime, datetime], ...]:
    """``Timing.decided`` from a schedule's ``decided_moves`` ([[first, last] epoch ms]);
    what cannot be read is left out (a row a bulk path wrote)."""
    if not isinstance(stored, list):
        return ()
    return tuple(
        (from_ms(pair[0]), from_ms(pair[1]))
        for pair in stored
        if isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)
    )


def stored_moves(decided: Iterable[tuple[datetime, datetime]]) -> list[list[int]]:
    """A schedule's ``decided_moves`` from ``Timing.decided``."""
    return [[to_ms(first), to_ms(last)] for first, last in decided]


# -- what a process keeps ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadedCalendar:
    """One calendar as a process loaded it."""

    stamp: str
    timezone: str
    weekend: frozenset[int]
    days: tuple[tuple[date, str], ...]


_built: dict[tuple[Any, ...], DayCalendar] = {}
_lock = threading.Lock()
MAX_BUILT = 1024


def calendar_of(
    loaded: Mapping[str, LoadedCalendar], names: Sequence[str], rule: str
) -> DayCalendar:
    """The excluded days of the calendars ``names`` as ``loaded`` has them (a name it does
    not have is left out: the schedule's validation says so), under the calendar rule
    ``rule``. Built once for the same stamps and rule."""
    present = [name for name in names if name in loaded]
    key = (tuple((name, loaded[name].stamp) for name in present), rule)
    calendar = _built.get(key)
    if calendar is None:
        calendar = DayCalendar.of(
            (
                (loaded[name].timezone, day, _label(name, day, label))
                for name in present
                for day, label in loaded[name].days
            ),
            move=rule == CalendarRule.MOVE,
            weekends=[(loaded[name].timezone, loaded[name].weekend) for name in present],
            names=present,
        )
        with _lock:
            if len(_built) >= MAX_BUILT:
                _built.clear()
            _built[key] = calendar
    return calendar


def _label(name: str, day: date, label: str) -> str:
    return f"{label + ', ' if label else ''}{day:%Y-%m-%d} (calendar {name})"
