"""The forecast of the operations page: how many occurrences fall in each minute of the next
24 hours, across all schedules, and which schedules make the busiest minutes.

Cheap on 100,000 schedules and more, because schedules share their timing: one GROUP BY
query collects the enabled schedules with a next run in the window by what decides their
times (a cron expression with its zone, day rule and DST policies; an interval with the
minute of its next run, its phase; a one-off with its minute; the calendars of excluded
days they name, which take holidays out or move them: ``families.TimelineKey``), with
their jitter and what bounds them (an end in the window, runs left under ``max_runs``), and
counts the members. Each timing is then expanded once with ``timing.occurrences`` (what the
admin's preview uses), and each group adds its members to the occurrences within its bounds
(a difference array over the timeline, so a group costs a bisection, not a walk).

Timings that fire every minute or more often (on average over the 24 hours: 1,440 times or
more) are counted apart, as the series ``frequent``: they are a steady load, not a herd, and
drawn with the rest a few schedules firing every second would flatten every herd into a
wall. The picture shows them in a panel of their own, and the busiest minutes leave them out
(no minute is busier for them, and jitter cannot spread them).

The work is bounded, and the page says when a bound was reached: at most ``MAX_GROUPS``
groups are read (the largest first; the schedules of the others are not counted), at most
``MAX_OCCURRENCES`` cron occurrences are expanded in all (an interval's or a one-off's count
a tenth; the timings met after that are not counted), and one timing is expanded at most
``MAX_PER_TIMELINE`` times: a timing that fires more often than that in 24 hours (more than
once a minute) is counted exactly up to there and then minute by minute (see ``_probe``),
and the picture marks those minutes as estimated.

An occurrence is counted at its nominal minute. A schedule with jitter fires up to its
jitter later (a delay that is the same on every re-dispatch, and uniform across the
occurrences of many schedules): its occurrences are counted as spread evenly over that
span, as a separate series, so the picture shows what jitter already spreads and where the
herds at :00 are that have none. Intervals are counted from the minute of their next run
(an interval that is not a whole number of minutes may land a minute off), and ``max_runs``
and the end of the window bound each group as a whole: the forecast is for seeing load, not
for predicting one schedule.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import router
from django.db.models import BigIntegerField, Case, Count, DateTimeField, F, Q, Value, When
from django.db.models.functions import TruncMinute
from django.utils.translation import gettext

from django_schedulinator import timing
from django_schedulinator.admin.pictures.families import Family, TimelineKey
from django_schedulinator.errors import TimingError
from django_schedulinator.index import clock
from django_schedulinator.models import Schedule
from django_schedulinator.models.scopes import Scope, schedules_in

WINDOW_MINUTES = 24 * 60
MINUTE_MS = 60_000
MAX_GROUPS = 5_000  # groups read from the database, the largest first
# The cron occurrences expanded across all timings (and minutes probed): a cron's next
# occurrence is a walk of its wall clock, about 25 µs, so this bounds the expansion to about
# a quarter of a second however many timings there are (docs/benchmarks.md). An interval's
# or a one-off's is arithmetic, about a tenth of that, and counts as such.
MAX_OCCURRENCES = 10_000
ARITHMETIC_COST = 0.1
MAX_PER_TIMELINE = 1_500  # one timing (every minute is 1,440); a denser one is estimated
BUSIEST_SHOWN = 5  # the busiest minutes listed under the picture (each unlike the others)
SHARES_SHOWN = 3  # the groups listed for each of them
FREQUENT_SHOWN = 10  # the timings that fire every minute or more often, listed apart
# The jitter suggested for a group at a busy minute: the smallest of these that brings the
# minute down to the day's average, at most a quarter of the time between the group's runs
# (a run stays near its time, far from the next one) and at most an hour.
NICE_JITTERS = tuple(timedelta(seconds=s) for s in (15, 30, 60, 120, 300, 600, 900, 1800, 3600))
LONGEST_SUGGESTED = timedelta(hours=1)


@dataclass(slots=True)
class Timeline:
    """One timing's occurrences from the start of the window on, to the first past its end
    (so the gap after the last one in it is known). A timing that fires more than
    MAX_PER_TIMELINE times is expanded that far, then looked at minute by minute: ``cut``
    is the minute from which it is estimated, ``active`` the minutes from there on in which
    it fires, ``per_active`` how often it fires in such a minute."""

    times: list[int]  # epoch ms, increasing
    cut: int | None = None
    active: list[int] = field(default_factory=list)
    per_active: float = 0.0
    diff: dict[timedelta | None, list[int]] = field(default_factory=dict)  # by jitter
    # Fires every minute or more often (on average over the window): counted apart.
    frequent: bool = False
    _gap: int | None = -1

    def shortest_gap(self) -> int | None:
        """The shortest time between two of its occurrences (ms), None for one alone."""
        if self._gap == -1:
            self._gap = min((b - a for a, b in itertools.pairwise(self.times)), default=None)
        return self._gap

    def work(self, kind: str) -> float:
        """The occurrences and probes it took, in cron occurrences."""
        steps = len(self.times) + len(self.active)
        costly = (timing.Kind.CRON, timing.Kind.SOLAR)  # a walk each, not a sum
        return steps if kind in costly else steps * ARITHMETIC_COST


@dataclass(frozen=True, slots=True)
class Group:
    """A row of the GROUP BY: members of one family with the same bounds."""

    family: Family
    members: int
    first: int  # index in the timeline of the first occurrence counted
    stop: int  # index past the last


@dataclass(frozen=True, slots=True)
class Share:
    """A family's occurrences at one busy minute, and the jitter suggested for it."""

    family: Family
    description: str
    members: int
    occurrences: int
    suggested_jitter: timedelta | None
    note: str  # why there is no suggestion, or ""


@dataclass(frozen=True, slots=True)
class BusyMinute:
    minute: int  # index from the start of the window
    at: datetime
    total: float  # the occurrences of the schedules that fire less often than every minute
    shares: list[Share]
    # The other minutes led by the same timings (the hours of an hourly herd), which the
    # list does not repeat: their indexes, in time order.
    alike: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FrequentShare:
    """A family that fires every minute or more often: its occurrences in the window (an
    estimate when its timing is dense) and the most in one minute."""

    family: Family
    description: str
    members: int
    occurrences: float
    per_minute: float


@dataclass(slots=True)
class Forecast:
    now: datetime
    start: datetime  # the first minute of the window (UTC, a whole minute)
    nominal: list[int]  # per minute: occurrences of schedules without jitter
    spread: list[float]  # per minute: jittered occurrences, spread over their jitter
    estimated: list[bool] = field(default_factory=list)  # minutes that count a dense timing
    # Per minute: the occurrences of timings that fire every minute or more often, which
    # nominal and spread leave out.
    frequent: list[float] = field(default_factory=list)
    schedules: int = 0  # counted
    groups: int = 0
    uncounted: int = 0  # schedules left out: a bound reached, or a timing that fails
    groups_capped: bool = False
    budget_spent: bool = False
    failed_timings: int = 0
    dense_timings: int = 0
    busiest: list[BusyMinute] = field(default_factory=list)
    frequent_shares: list[FrequentShare] = field(default_factory=list)
    frequent_schedules: int = 0  # schedules counted in frequent

    def __post_init__(self) -> None:
        if not self.frequent:
            self.frequent = [0.0] * len(self.nominal)

    @property
    def occasional(self) -> list[float]:
        """Per minute: the schedules that fire less often than every minute."""
        return [n + s for n, s in zip(self.nominal, self.spread, strict=True)]

    @property
    def totals(self) -> list[float]:
        """Per minute: every schedule counted."""
        return [o + f for o, f in zip(self.occasional, self.frequent, strict=True)]

    @property
    def peak(self) -> tuple[int, float]:
        """The busiest minute of the schedules that fire less often than every minute (the
        earliest of equals), and its count: the herds."""
        occasional = self.occasional
        best = max(range(len(occasional)), key=lambda i: (occasional[i], -i))
        return best, occasional[best]

    @property
    def mean(self) -> float:
        """The average a minute of the schedules that fire less often than every minute."""
        return sum(self.occasional) / len(self.nominal)

    def minute_at(self, minute: int) -> datetime:
        return self.start + timedelta(minutes=minute)


def forecast(
    now: datetime | None = None, *, using: str | None = None, scope: Scope = None
) -> Forecast:
    """The occurrences per minute of the next 24 hours from ``now`` (Redis TIME), of the
    schedules of ``scope``."""
    now = timing.truncate_ms(now or clock.now())
    start = now.replace(second=0, microsecond=0)
    end = start + timedelta(minutes=WINDOW_MINUTES)
    result = Forecast(
        now, start, [0] * WINDOW_MINUTES, [0.0] * WINDOW_MINUTES, [False] * WINDOW_MINUTES
    )
    rows = _group_rows(start, end, using, scope)
    if len(rows) > MAX_GROUPS:
        result.groups_capped = True
        rows = rows[:MAX_GROUPS]
        counted = sum(r["members"] for r in rows)
        result.uncounted += _eligible(start, end, using, scope).count() - counted
    timelines: dict[TimelineKey, Timeline | None] = {}
    budget: float = MAX_OCCURRENCES
    groups: list[Group] = []
    for row in rows:
        key = _timeline_key(row)
        if key not in timelines:
            if budget <= 0:
                result.budget_spent = True
                result.uncounted += row["members"]
                continue
            try:
                expanded: Timeline | None = _expand(key, start, end)
            except (TimingError, ValueError, OverflowError):
                expanded = None  # a zone gone from tzdata, a row written around the checks
                result.failed_timings += 1
            timelines[key] = expanded
            if expanded is not None:
                budget -= expanded.work(key.kind)
                if expanded.cut is not None:
                    result.dense_timings += 1
                    for minute in expanded.active:
                        result.estimated[minute] = True
        line = timelines[key]
        if line is None:
            result.uncounted += row["members"]
            continue
        group = _group(row, key, line, start, end)
        if group.stop > group.first:
            diff = line.diff.setdefault(group.family.jitter, [0] * (len(line.times) + 1))
            diff[group.first] += group.members
            diff[group.stop] -= group.members
        groups.append(group)
        result.schedules += group.members
    result.groups = len(groups)
    for line in timelines.values():
        if line is not None:
            _count(line, result, end)
    result.busiest = _busiest(result, groups, timelines)
    result.frequent_shares, result.frequent_schedules = _frequent(result, groups, timelines)
    return result


def _eligible(start: datetime, end: datetime, using: str | None, scope: Scope) -> Any:
    db = using or router.db_for_read(Schedule)
    return (
        schedules_in(scope, db)
        .filter(enabled=True, next_run_at__isnull=False, next_run_at__lt=end)
        .filter(Q(end_at__isnull=True) | Q(end_at__gte=start))
    )


def _group_rows(
    start: datetime, end: datetime, using: str | None, scope: Scope
) -> list[dict[str, Any]]:
    """The schedules by what decides their times, the largest groups first (one query)."""
    return list(
        _eligible(start, end, using, scope)
        .annotate(
            start_minute=TruncMinute("next_run_at", tzinfo=UTC),
            end_bound=Case(
                When(end_at__lt=end, then=F("end_at")),
                default=Value(None),
                output_field=DateTimeField(),
            ),
            left=Case(
                When(max_runs__isnull=False, then=F("max_runs") - F("run_count")),
                default=Value(None),
                output_field=BigIntegerField(),
            ),
        )
        .values(
            "kind",
            "cron",
            "timezone",
            "day_rule",
            "dst_gap",
            "dst_fold",
            "interval",
            "jitter",
            "calendars",
            "calendar_rule",
            "solar_event",
            "latitude",
            "longitude",
            "solar_offset",
            "start_minute",
            "end_bound",
            "left",
        )
        .annotate(members=Count("pk"))
        .order_by("-members", "kind", "cron", "timezone", "interval", "start_minute")[
            : MAX_GROUPS + 1
        ]
    )


def _timeline_key(row: dict[str, Any]) -> TimelineKey:
    kind = row["kind"]
    names = row["calendars"]
    calendars = tuple(names) if isinstance(names, list) else ()
    rule = row["calendar_rule"] if calendars else timing.CalendarRule.SKIP
    if kind == timing.Kind.CRON:
        key = TimelineKey(
            kind,
            cron=row["cron"],
            timezone=row["timezone"],
            day_rule=row["day_rule"],
            dst_gap=row["dst_gap"],
            dst_fold=row["dst_fold"],
        )
    elif kind == timing.Kind.SOLAR:
        key = TimelineKey(
            kind,
            timezone=row["timezone"],
            solar_event=row["solar_event"],
            latitude=row["latitude"],
            longitude=row["longitude"],
            solar_offset=row["solar_offset"],
        )
    elif kind == timing.Kind.INTERVAL:
        key = TimelineKey(kind, interval=row["interval"], anchor=row["start_minute"])
    else:
        key = TimelineKey(kind, anchor=row["start_minute"])
    return replace(key, calendars=calendars, calendar_rule=rule)


def _expand(key: TimelineKey, start: datetime, end: datetime) -> Timeline:
    """The timing's occurrences from ``start`` (or its anchor, the minute of an interval's
    or a one-off's next run) on, up to the first at or past ``end``. An overdue interval
    goes on on the grid of its next run, as the scheduler does."""
    spec = key.spec()
    after = max(start, key.anchor or start) - timing.ONE_MS
    times: list[int] = []
    for moment in timing.occurrences(spec, after, anchor=key.anchor):
        times.append(timing.to_ms(moment.at))
        if moment.at >= end:
            break
        if len(times) >= MAX_PER_TIMELINE:
            line = _probe(key, spec, times, start, end)
            line.frequent = True  # past MAX_PER_TIMELINE, more than the window's minutes
            return line
    within = bisect.bisect_left(times, timing.to_ms(end))
    return Timeline(times, frequent=within >= WINDOW_MINUTES)


def _probe(
    key: TimelineKey, spec: timing.Timing, times: list[int], start: datetime, end: datetime
) -> Timeline:
    """The rest of a dense timing's window, minute by minute: its first occurrence from the
    start of each minute on (one step of ``timing.following``), which finds the minutes it
    fires in and leaps over those it does not (a cron every second from 09:00 to 17:59 is
    estimated in those hours only). Each such minute counts as many occurrences as a
    minute had on average in the part expanded exactly (at most 60: cron's step is a
    second)."""
    start_ms = timing.to_ms(start)
    end_ms = timing.to_ms(end)
    cut = (times[-1] - start_ms) // MINUTE_MS  # that minute was expanded in part
    exact = [at for at in times if (at - start_ms) // MINUTE_MS < cut]
    minutes = {(at - start_ms) // MINUTE_MS for at in exact}
    line = Timeline(times, cut=cut, per_active=len(exact) / max(len(minutes), 1))
    minute = cut
    while minute < WINDOW_MINUTES:
        after = timing.from_ms(start_ms + minute * MINUTE_MS) - timing.ONE_MS
        found = timing.following(spec, after, key.anchor or after)
        if found is None or timing.to_ms(found.at) >= end_ms:
            break
        minute = (timing.to_ms(found.at) - start_ms) // MINUTE_MS
        line.active.append(minute)
        minute += 1
    return line


def _group(
    row: dict[str, Any], key: TimelineKey, line: Timeline, start: datetime, end: datetime
) -> Group:
    times = line.times
    # From the minute of its next run: a later start_at has moved it there.
    lower = max(start, row["start_minute"])
    first = bisect.bisect_left(times, timing.to_ms(lower))
    upper = row["end_bound"] or end
    stop = (
        bisect.bisect_right(times, timing.to_ms(upper))
        if row["end_bound"]
        else bisect.bisect_left(times, timing.to_ms(upper))
    )
    if row["left"] is not None:
        stop = min(stop, first + max(row["left"], 0))
    family = Family(key, row["jitter"] or None)
    return Group(family, row["members"], first, max(first, stop))


def _count(line: Timeline, result: Forecast, end: datetime) -> None:
    """Add the timeline's occurrences, times their members, to the minutes they fall in."""
    start_ms = timing.to_ms(result.start)
    end_ms = timing.to_ms(end)
    times = line.times
    # A dense timing is counted exactly up to the minute it was cut in, and estimated from
    # there on (that minute, counted in part, would show a dip).
    cut = line.cut
    nominal: list[Any] = result.frequent if line.frequent else result.nominal
    spread: list[float] = result.frequent if line.frequent else result.spread
    for jitter, diff in line.diff.items():
        members = 0
        for i, at in enumerate(times):
            members += diff[i]
            if at >= end_ms or (cut is not None and (at - start_ms) // MINUTE_MS >= cut):
                break
            if not members:
                continue
            if not jitter:
                nominal[(at - start_ms) // MINUTE_MS] += members
                continue
            # Jitter: the delay is below the gap to the next occurrence (timing.jitter_delay).
            span = jitter // timing.ONE_MS
            if i + 1 < len(times):
                span = min(span, times[i + 1] - at - 1)
            _spread(spread, at - start_ms, span, members)
        if cut is not None and members:
            series: list[Any] = spread if jitter else nominal
            value = members * line.per_active
            for minute in line.active:
                series[minute] += value if jitter else round(value)


def _spread(minutes: list[float], offset: int, span: int, amount: int) -> None:
    """``amount`` spread evenly over ``span`` ms from ``offset`` (ms into the window)."""
    if span <= 0:
        minutes[offset // MINUTE_MS] += amount
        return
    stop = offset + span
    position = offset
    while position < stop:
        minute = position // MINUTE_MS
        if minute >= len(minutes):
            return  # the rest falls past the window
        boundary = min(stop, (minute + 1) * MINUTE_MS)
        minutes[minute] += amount * (boundary - position) / span
        position = boundary


def _busiest(
    result: Forecast, groups: list[Group], timelines: dict[TimelineKey, Timeline | None]
) -> list[BusyMinute]:
    """The busiest minutes of the schedules that fire less often than every minute, each
    unlike those before it: a minute led by the same timings as one already listed (the next
    hour of an hourly herd) is named with it, not listed again."""
    occasional = result.occasional
    order = sorted(
        (i for i, total in enumerate(occasional) if total >= 0.5),
        key=lambda i: (-occasional[i], i),
    )
    start_ms = timing.to_ms(result.start)
    # The occurrences of each timing in each minute: each timeline walked once, over the
    # span of its groups (so bounded by the expansion's budget). Timelines and families are
    # numbered first: the counts below run per occurrence and per minute, and hashing a
    # key (a dataclass of a dozen fields) there was most of the picture's cost.
    spans: dict[TimelineKey, tuple[int, int]] = {}
    families: dict[TimelineKey, dict[Family, int]] = defaultdict(lambda: defaultdict(int))
    for group in groups:
        key = group.family.timeline
        low, high = spans.get(key, (group.first, group.stop))
        spans[key] = (min(low, group.first), max(high, group.stop))
        families[key][group.family] += group.members
    keys = list(spans)
    # A family's number is its place in the order of its repr: what breaks ties between
    # families of the same weight, so the listing does not depend on the groups' order.
    ranked = sorted({f for members in families.values() for f in members}, key=repr)
    rank = {family: number for number, family in enumerate(ranked)}
    members_of = [[(rank[f], m) for f, m in families[key].items()] for key in keys]
    by_minute: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for number, key in enumerate(keys):
        line = timelines[key]
        if line is None or line.frequent:
            continue
        low, high = spans[key]
        for at in itertools.islice(line.times, low, high):
            minute = (at - start_ms) // MINUTE_MS
            if 0 <= minute < WINDOW_MINUTES:
                by_minute[minute][number] += 1
    mean = max(result.mean, 1.0)
    # A minute is told by the families that lead it (as many as its row names): one led by
    # the same as a minute listed is named in that row, not listed again.
    listed: dict[frozenset[int], list[int]] = {}
    for minute in order:
        weighed = [
            (-count * members, family)
            for number, count in by_minute.get(minute, {}).items()
            for family, members in members_of[number]
        ]
        signature = frozenset(family for _weight, family in heapq.nsmallest(SHARES_SHOWN, weighed))
        if signature in listed:
            listed[signature].append(minute)
        elif len(listed) < BUSIEST_SHOWN:
            listed[signature] = [minute]
    busy = []
    for minute, *alike in listed.values():
        timings = frozenset(keys[number] for number in by_minute.get(minute, {}))
        shares = _shares_at(minute, timings, result, groups, timelines, mean)
        when = result.minute_at(minute)
        busy.append(BusyMinute(minute, when, occasional[minute], shares, sorted(alike)))
    return busy


def _shares_at(
    minute: int,
    signature: frozenset[TimelineKey],
    result: Forecast,
    groups: list[Group],
    timelines: dict[TimelineKey, Timeline | None],
    mean: float,
) -> list[Share]:
    """The families whose occurrences make ``minute``, the largest first."""
    low = timing.to_ms(result.start) + minute * MINUTE_MS
    counts: dict[Family, list[int]] = defaultdict(lambda: [0, 0])
    for group in groups:
        line = timelines[group.family.timeline]
        if line is None or group.family.timeline not in signature:
            continue
        first = max(group.first, bisect.bisect_left(line.times, low))
        stop = min(group.stop, bisect.bisect_left(line.times, low + MINUTE_MS))
        if stop > first:
            counts[group.family][0] += group.members
            counts[group.family][1] += group.members * (stop - first)
    ranked = sorted(counts.items(), key=lambda item: (-item[1][1], item[0].describe()))
    return [
        _share(family, members, occurrences, mean, timelines[family.timeline])
        for family, (members, occurrences) in ranked[:SHARES_SHOWN]
    ]


def _frequent(
    result: Forecast, groups: list[Group], timelines: dict[TimelineKey, Timeline | None]
) -> tuple[list[FrequentShare], int]:
    """The families that fire every minute or more often, the most occurrences first (at
    most FREQUENT_SHOWN), and how many schedules they have in all."""
    start_ms = timing.to_ms(result.start)
    end_ms = start_ms + WINDOW_MINUTES * MINUTE_MS
    found: dict[Family, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    schedules = 0
    for group in groups:
        line = timelines[group.family.timeline]
        if line is None or not line.frequent or group.stop <= group.first:
            continue
        schedules += group.members
        times = line.times
        # Exact up to the end of the window, or to the minute a dense timing is cut at.
        limit = end_ms if line.cut is None else start_ms + line.cut * MINUTE_MS
        stop = min(group.stop, bisect.bisect_left(times, limit))
        exact = max(stop - group.first, 0)
        estimated = line.per_active * len(line.active) if group.stop > stop else 0.0
        per_minute = max(
            float(_most_in_a_minute(times[group.first : stop], start_ms)),
            line.per_active if estimated else 0.0,
        )
        entry = found[group.family]
        entry[0] += group.members
        entry[1] += group.members * (exact + estimated)
        entry[2] += group.members * per_minute
    ranked = sorted(found.items(), key=lambda item: (-item[1][1], item[0].describe()))
    shares = [
        FrequentShare(family, family.describe(), int(members), occurrences, per_minute)
        for family, (members, occurrences, per_minute) in ranked[:FREQUENT_SHOWN]
    ]
    return shares, schedules


def _most_in_a_minute(times: list[int], start_ms: int) -> int:
    counts: dict[int, int] = defaultdict(int)
    for at in times:
        counts[(at - start_ms) // MINUTE_MS] += 1
    return max(counts.values(), default=0)


def _share(
    family: Family, members: int, occurrences: int, mean: float, line: Timeline | None
) -> Share:
    gap = line.shortest_gap() if line is not None else None
    longest = LONGEST_SUGGESTED
    if gap is not None:
        longest = min(longest, timedelta(milliseconds=gap) / 4)
    allowed = [j for j in NICE_JITTERS if j <= longest]
    needed = timedelta(minutes=occurrences / mean)
    suggested = next((j for j in allowed if j >= needed), allowed[-1] if allowed else None)
    note = ""
    if suggested is None:
        note = gettext("fires too often for jitter to help")
    elif family.jitter and family.jitter >= suggested:
        note = gettext("already jittered")
        suggested = None
    return Share(family, family.describe(), members, occurrences, suggested, note)
