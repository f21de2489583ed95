"""Property-based tests of ``django_schedulinator.timing``: the rules of when a schedule fires.

Every property below is checked on random schedules in random IANA zones, with starting
instants drawn either anywhere in 2010-2035 or within hours or days of one of the zone's
UTC offset changes (where the DST policies matter), and on daily times in the small hours
started just before a change. No database, no Redis: plain functions.

1. **Order.** ``occurrences`` yields strictly increasing instants, all after ``after``, inside
   the ``start_at``/``end_at`` window, for cron and interval timings. Each cron moment's
   ``wall`` is a wall time the expression matches, and reads on the zone's clock as its
   instant says (or, shifted/skipped, does not exist there).
2. **Mirror.** ``occurrences_before`` is the exact mirror image of ``occurrences``: the ``k``
   moments before ``X``, reversed, are the ``k`` moments from the first of them on, and the
   ``k`` moments after ``X`` are, reversed, the ``k`` moments before the last of them (plus
   one millisecond). Nothing lies between the last moment before ``X`` and the first after.
3. **Minimum spacing.** Intervals are exactly ``interval`` apart. For cron expressions whose
   matching wall times form a lattice of period ``P`` (``*/k`` seconds or minutes with
   ``k | 60``, ``m */h`` with ``h | 24``, a fixed daily time), consecutive UTC instants are
   ``P`` apart away from offset changes (always, in UTC), and never closer than the bound
   derived in ``lattice_spacing_bound`` from the zone's gap and fold lengths and the DST
   policy (for example: a daily time is at least 23 h from the next under any gap policy
   and fold "first"/"second"; under fold "both" a wall time repeated by a 1 h fold fires
   twice, 1 h apart).
4. **Reference.** Away from offset changes, cron results equal an independent brute-force
   enumeration of matching wall times (and ``cronsim`` iterating an aware datetime of the
   zone), converted with the zone's constant offset.
5. **Jitter.** ``jitter_delay`` is deterministic, whole milliseconds, within ``[0, jitter]``
   and strictly less than the gap; ``due_time`` of consecutive occurrences strictly
   increases; one moment has one due time: the due times of ``preview`` (computed as
   ``plan_due`` computes them) equal ``due_time``'s (what a saved schedule row gets), and a
   skipped-time marker is due at its own instant.
6. **Catch-up.** ``plan_due`` fires at most ``max_runs`` (modes all/skip), 1 (latest) and
   ``runs_left``; only due occurrences of the schedule, most recent first; fired and skipped
   occurrences are each looked at once; with "latest" the most recent due occurrence fires;
   the next run is after everything handled and not yet due; the skips never outnumber
   ``skips_recorded``; small backlogs are handled exactly as the policy says; a backlog of
   millions of occurrences is planned in bounded steps (they are counted), and so is a
   per-second cron a minute late near an offset change.
7. **First run.** ``first_run_at(t, now)`` is never before ``now`` (a one-off's is its
   ``run_at``), never before ``start_at``, never after ``end_at`` (``None`` once past it),
   and is the first moment of the schedule from then on.

A last pair of tests feeds sub-millisecond inputs (an ``anchor_at`` or a ``now`` with
microseconds, as a Django ``DateTimeField`` and ``timezone.now()`` give them).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from itertools import islice, pairwise
from typing import NamedTuple
from zoneinfo import ZoneInfo

from cronsim import CronSim
from hypothesis import Phase, assume, example, given, settings
from hypothesis import strategies as st

from django_schedulinator.timing import (
    DST_FIRST,
    DST_SECOND,
    DST_SHIFT,
    DST_SKIP,
    MAX_JITTER,
    ONE_MS,
    CatchUp,
    CatchUpMode,
    DayRule,
    DstFold,
    DstGap,
    Kind,
    Moment,
    SkipReason,
    Timing,
    due_time,
    first_run_at,
    from_ms,
    jitter_delay,
    normalize_cron,
    occurrences,
    occurrences_before,
    plan_due,
    preview,
    to_ms,
    truncate_ms,
    walks,
)

from .support.timing_calls import replaced

# -- zones and their offset changes ----------------------------------------------------------

ZONES = [
    "UTC",
    "America/New_York",
    "America/St_Johns",  # -03:30/-02:30; changed at 00:01 local until 2011
    "Europe/London",
    "Europe/Berlin",
    "Europe/Moscow",  # +03 -> +04 (2011, a gap), +04 -> +03 (2014, a fold), no DST since
    "Asia/Kolkata",  # +05:30, no changes
    "Australia/Sydney",
    "Australia/Lord_Howe",  # 30-minute DST, the clocks change at 02:00 (gap) or 02:00 -> 01:30
    "Pacific/Apia",  # skipped 30 December 2011 (a 24 h gap), DST 2010-2021
    "Pacific/Chatham",  # +12:45/+13:45, the clocks change at 02:45 / 03:45 local
]
FIRST_YEAR, LAST_YEAR = 2010, 2035
SPAN_START = datetime(FIRST_YEAR, 1, 1, tzinfo=UTC)
SPAN_END = datetime(LAST_YEAR + 1, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
# Far enough from an offset change that no wall time near the change maps this close to an
# instant: the longest gap or fold in the zones above is a day (Apia, 2011).
CLEAR_OF_CHANGES = 2 * DAY


class Transition(NamedTuple):
    at: datetime  # the first instant with the new offset
    before: timedelta  # UTC offset before
    after: timedelta  # UTC offset after

    @property
    def change(self) -> timedelta:
        """Positive: a gap (clocks jump forward) of this length; negative: a fold."""
        return self.after - self.before


def _offset(zone: ZoneInfo, at: datetime) -> timedelta:
    offset = at.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


@functools.cache
def transitions(zone_name: str) -> tuple[Transition, ...]:
    """Every UTC offset change of the zone from 2009 to 2036 (to the second)."""
    zone = ZoneInfo(zone_name)
    found = []
    at, end, step = datetime(2009, 1, 1, tzinfo=UTC), datetime(2037, 1, 1, tzinfo=UTC), 12 * HOUR
    before = _offset(zone, at)
    while at < end:
        following = at + step
        after = _offset(zone, following)
        if after != before:
            low, high = at, following  # offset(low) == before, offset(high) == after
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                middle = middle.replace(microsecond=0)
                if _offset(zone, middle) == before:
                    low = middle
                else:
                    high = middle
            found.append(Transition(high, before, after))
        at, before = following, after
    return tuple(found)


def transition_times(zone_name: str) -> list[datetime]:
    return [t.at for t in transitions(zone_name)]


def changes_between(zone_name: str, low: datetime, high: datetime) -> list[Transition]:
    """The offset changes at instants in ``(low, high]``."""
    times = transition_times(zone_name)
    lo, hi = bisect.bisect_right(times, low), bisect.bisect_right(times, high)
    return list(transitions(zone_name)[lo:hi])


def gap_lengths(zone_name: str) -> set[timedelta]:
    return {t.change for t in transitions(zone_name) if t.change > timedelta(0)}


def fold_lengths(zone_name: str) -> set[timedelta]:
    return {-t.change for t in transitions(zone_name) if t.change < timedelta(0)}


# -- cron expressions with their meaning ---------------------------------------------------


@dataclass(frozen=True)
class CronSpec:
    """A cron expression and, independently of any parser, the wall times it matches."""

    text: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday ... 6 = Saturday
    # Debian cron: day of month and day of week are ANDed when either field starts with a
    # star, ORed otherwise; always ANDed under the day rule "both".
    days_and: bool

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_day = day.day in self.days
        by_weekday = (day.weekday() + 1) % 7 in self.weekdays
        return by_day and by_weekday if self.days_and else by_day or by_weekday

    def matches(self, wall: datetime) -> bool:
        return (
            self.matches_day(wall.date())
            and wall.hour in self.hours
            and wall.minute in self.minutes
            and wall.second in self.seconds
            and wall.microsecond == 0
        )

    def walls(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """The matching wall times in ``(after, until)``, ascending (brute force, per day)."""
        day = after.date()
        while day <= until.date():
            if self.matches_day(day):
                for hour in sorted(self.hours):
                    if (day, hour) < (after.date(), after.hour):
                        continue
                    for minute in sorted(self.minutes):
                        for second in sorted(self.seconds):
                            wall = datetime.combine(day, time(hour, minute, second))
                            if wall >= until:
                                return
                            if wall > after:
                                yield wall
            day += timedelta(days=1)


Field = tuple[str, frozenset[int]]


def _weekdays(values: frozenset[int]) -> frozenset[int]:
    return frozenset(v % 7 for v in values)


def spec_of(text: str, fields: list[Field]) -> CronSpec:
    """The spec of a 5- or 6-field expression built from ``fields`` (seconds first or not)."""
    if len(fields) == 5:
        fields = [("0", frozenset({0})), *fields]
    second, minute, hour, day, month, weekday = fields
    return CronSpec(
        text=text,
        seconds=second[1],
        minutes=minute[1],
        hours=hour[1],
        days=day[1],
        months=month[1],
        weekdays=_weekdays(weekday[1]),
        days_and=day[0].startswith("*") or weekday[0].startswith("*"),
    )


def _every(low: int, high: int) -> Field:
    return "*", frozenset(range(low, high + 1))


ALIASES = {
    "@yearly": ("0", "0", "1", "1", "*"),
    "@annually": ("0", "0", "1", "1", "*"),
    "@monthly": ("0", "0", "1", "*", "*"),
    "@weekly": ("0", "0", "*", "*", "0"),
    "@daily": ("0", "0", "*", "*", "*"),
    "@midnight": ("0", "0", "*", "*", "*"),
    "@hourly": ("0", "*", "*", "*", "*"),
}
RANGES = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def _alias_spec(alias: str) -> CronSpec:
    fields: list[Field] = []
    for text, (low, high) in zip(ALIASES[alias], RANGES[1:], strict=True):
        fields.append(_every(low, high) if text == "*" else (text, frozenset({int(text)})))
    return spec_of(alias, fields)


@st.composite
def cron_field(
    draw: st.DrawFn,
    low: int,
    high: int,
    *,
    steps: list[int],
    values: st.SearchStrategy[int] | None = None,
    star_weight: int = 1,
) -> Field:
    """One field: ``*``, ``*/k``, ``a``, ``a-b``, ``a-b/k``, ``a/k`` or a list ``a,b,c``."""
    value = values if values is not None else st.integers(low, high)
    kind = draw(st.sampled_from(["*"] * star_weight + ["*/k", "a", "a-b", "a-b/k", "a/k", "list"]))
    if kind == "*":
        return _every(low, high)
    if kind == "*/k":
        k = draw(st.sampled_from(steps))
        return f"*/{k}", frozenset(range(low, high + 1, k))
    if kind == "a":
        a = draw(value)
        return str(a), frozenset({a})
    if kind in ("a-b", "a-b/k"):
        a, b = sorted(draw(st.lists(value, min_size=2, max_size=2, unique=True)))
        if kind == "a-b":
            return f"{a}-{b}", frozenset(range(a, b + 1))
        k = draw(st.sampled_from(steps))
        return f"{a}-{b}/{k}", frozenset(range(a, b + 1, k))
    if kind == "a/k":
        a, k = draw(value), draw(st.sampled_from(steps))
        return f"{a}/{k}", frozenset(range(a, high + 1, k))
    items = sorted(draw(st.lists(value, min_size=2, max_size=4, unique=True)))
    return ",".join(map(str, items)), frozenset(items)


def _valid(spec: CronSpec) -> bool:
    try:
        normalize_cron(spec.text)
    except ValueError:
        return False
    return True


SECOND_FIELDS: list[Field] = [
    ("0", frozenset({0})),
    ("30", frozenset({30})),
    ("0,30", frozenset({0, 30})),
    ("15-20", frozenset(range(15, 21))),
    ("5/20", frozenset({5, 25, 45})),
    ("*/7", frozenset(range(0, 60, 7))),
    ("*/10", frozenset(range(0, 60, 10))),
    ("*/15", frozenset(range(0, 60, 15))),
    ("10-50/20", frozenset({10, 30, 50})),
]


@st.composite
def _field_cron(draw: st.DrawFn) -> CronSpec:
    fields: list[Field] = []
    if draw(st.integers(0, 4)) == 0:  # a leading seconds field, now and then
        # Not a dense one ("*", "0-59"): near an offset change a per-second expression costs
        # seconds per occurrence (see test_a_dense_cron_near_an_offset_change_is_quick).
        fields.append(draw(st.sampled_from(SECOND_FIELDS)))
    # Hours around the usual change times (00:00-03:59) come up more often.
    hours = st.one_of(st.integers(0, 23), st.integers(0, 3))
    fields.append(draw(cron_field(0, 59, steps=[2, 5, 7, 10, 15, 20, 25, 30, 45])))
    fields.append(draw(cron_field(0, 23, steps=[2, 3, 4, 5, 6, 7, 8, 12], values=hours)))
    months = draw(cron_field(1, 12, steps=[2, 3, 4, 6], star_weight=8))
    # A restricted month with a late day of month could match too rarely: keep days <= 28.
    day_high = 31 if months[0] == "*" else 28
    days = draw(
        cron_field(1, 31, steps=[2, 3, 5, 10], values=st.integers(1, day_high), star_weight=8)
    )
    weekdays = draw(cron_field(0, 7, steps=[2, 3, 7], star_weight=6))
    fields += [days, months, weekdays]
    return spec_of(" ".join(text for text, _ in fields), fields)


@st.composite
def _early_daily_cron(draw: st.DrawFn) -> CronSpec:
    """One or two daily times between 00:00 and 03:59, where the clocks change: on a gap
    day such a time does not exist, and unlike with an hourly expression, no later wall
    time need land on its instant (so skipped-time markers show)."""
    minute = draw(st.integers(0, 59))
    hours = sorted(draw(st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True)))
    hour_text = ",".join(map(str, hours))
    fields = [(str(minute), frozenset({minute})), (hour_text, frozenset(hours))]
    fields += [_every(1, 31), _every(1, 12), _every(0, 7)]
    return spec_of(f"{minute} {hour_text} * * *", fields)


def cron_specs() -> st.SearchStrategy[CronSpec]:
    """Realistic cron expressions: built from field pieces, an ``@`` alias, or a daily time
    in the small hours."""
    return st.one_of(
        _field_cron().filter(_valid),
        st.sampled_from(sorted(ALIASES)).map(_alias_spec),
        _early_daily_cron(),
    )


# -- instants and timings ------------------------------------------------------------------

GRAINS = [ONE_MS, timedelta(seconds=1), MINUTE, HOUR]


@st.composite
def instants(
    draw: st.DrawFn,
    zone_name: str = "UTC",
    near_changes: bool = True,
    largest_change: timedelta = DAY,
) -> datetime:
    """A UTC instant in 2010-2035 (whole milliseconds), often close before or after one of
    the zone's offset changes (at most ``largest_change`` long), and often on a whole second,
    minute or hour."""
    changes = [
        t
        for t in transitions(zone_name)
        if SPAN_START <= t.at < SPAN_END and abs(t.change) <= largest_change
    ]
    if near_changes and changes and draw(st.booleans()):
        change = draw(st.sampled_from(changes))
        around = draw(
            st.one_of(
                st.integers(-3 * 86_400_000, 86_400_000),  # days before, a day after
                st.integers(-3 * 3_600_000, 3 * 3_600_000),  # hours either side
            )
        )
        at = change.at + timedelta(milliseconds=around)
    else:
        at = from_ms(draw(st.integers(to_ms(SPAN_START), to_ms(SPAN_END) - 1)))
    grain = draw(st.sampled_from(GRAINS))
    return at - (at - SPAN_START) % grain


def intervals() -> st.SearchStrategy[timedelta]:
    """Whole milliseconds, at least a second: short ones, long ones and round ones."""
    return st.one_of(
        st.integers(1_000, 120_000).map(lambda ms: timedelta(milliseconds=ms)),
        st.integers(1_000, 14 * 86_400_000).map(lambda ms: timedelta(milliseconds=ms)),
        st.sampled_from([1, 5, 60, 300, 3600, 86400, 7 * 86400]).map(
            lambda s: timedelta(seconds=s)
        ),
    )


gap_policies = st.sampled_from([DstGap.SHIFT, DstGap.SKIP])
day_rules = st.sampled_from([DayRule.EITHER, DayRule.BOTH])


def under_day_rule(spec: CronSpec, day_rule: str) -> CronSpec:
    """The spec under ``day_rule`` (assumed to match some day: "both" can match none)."""
    if day_rule == DayRule.EITHER:
        return spec
    assume("cron" not in Timing(kind=Kind.CRON, cron=spec.text, day_rule=day_rule).validate())
    return replace(spec, days_and=True)


fold_policies = st.sampled_from([DstFold.FIRST, DstFold.SECOND, DstFold.BOTH])


class Case(NamedTuple):
    """A timing, the spec of its cron (or None), a starting instant and an interval anchor."""

    timing: Timing
    spec: CronSpec | None
    start: datetime
    anchor: datetime | None


@st.composite
def cron_cases(draw: st.DrawFn, window: bool = True) -> Case:
    zone = draw(st.sampled_from(ZONES))
    day_rule = draw(day_rules)
    spec = under_day_rule(draw(cron_specs()), day_rule)
    # Seconds fields only near the ordinary changes (an hour or less), not Apia's lost day:
    # see SECOND_FIELDS.
    largest = HOUR if len(spec.text.split()) == 6 else DAY
    start = draw(instants(zone, largest_change=largest))
    timing = Timing(
        kind=Kind.CRON,
        cron=spec.text,
        timezone=zone,
        dst_gap=draw(gap_policies),
        dst_fold=draw(fold_policies),
        day_rule=day_rule,
    )
    if window and draw(st.integers(0, 3)) == 0:
        low = start + timedelta(seconds=draw(st.integers(-86_400, 30 * 86_400)))
        high = low + timedelta(seconds=draw(st.integers(1, 60 * 86_400)))
        timing = replace(
            timing,
            start_at=draw(st.sampled_from([None, low])),
            end_at=draw(st.sampled_from([None, high])),
        )
    return Case(timing, spec, start, None)


@st.composite
def interval_cases(draw: st.DrawFn, window: bool = True) -> Case:
    """An interval timing; the grid's anchor is ``anchor_at``, ``start_at`` or the ``anchor``
    argument (the schedule's nominal time), whichever the draw picks."""
    interval = draw(intervals())
    start = draw(instants())
    anchor = start + timedelta(milliseconds=draw(st.integers(-(10**11), 10**11)))
    where = draw(st.sampled_from(["anchor_at", "start_at", "argument"]))
    timing = Timing(kind=Kind.INTERVAL, interval=interval, timezone=draw(st.sampled_from(ZONES)))
    if where == "anchor_at":
        timing = replace(timing, anchor_at=anchor)
    elif where == "start_at":
        timing = replace(timing, start_at=anchor)
    if window and draw(st.integers(0, 3)) == 0:
        end = start + timedelta(milliseconds=draw(st.integers(1, 10**10)))
        timing = replace(timing, end_at=end)
        if where == "argument" and draw(st.booleans()):
            timing = replace(timing, start_at=anchor - interval * draw(st.integers(0, 5)))
    return Case(timing, None, start, anchor)


CHANGING_ZONES = [zone for zone in ZONES if transitions(zone)]


@st.composite
def dst_cron_cases(draw: st.DrawFn) -> Case:
    """Daily times in the small hours, starting a few days or hours before a change of the
    zone's offset: the shifted, skipped and repeated local times come up here."""
    zone = draw(st.sampled_from(CHANGING_ZONES))
    change = draw(st.sampled_from([t for t in transitions(zone) if t.at >= SPAN_START]))
    # Hours to days before (hypothesis favours small numbers: count days, not milliseconds).
    before = timedelta(days=draw(st.integers(0, 3)), milliseconds=draw(st.integers(0, 10**8)))
    if draw(st.booleans()):
        spec = draw(_early_daily_cron())
    else:
        # A wall time the change skips or repeats (for Apia's lost day, any time), and
        # maybe the hour before it too.
        first_wall = (change.at + min(change.before, change.after)).replace(tzinfo=None)
        length = min(abs(change.change), DAY - MINUTE)
        wall = first_wall + timedelta(minutes=draw(st.integers(0, length // MINUTE - 1)))
        hours = sorted({wall.hour, (wall.hour - draw(st.sampled_from([0, 1]))) % 24})
        hour_text = ",".join(map(str, hours))
        fields = [(str(wall.minute), frozenset({wall.minute})), (hour_text, frozenset(hours))]
        fields += [_every(1, 31), _every(1, 12), _every(0, 7)]
        spec = spec_of(f"{wall.minute} {hour_text} * * *", fields)
    timing = Timing(
        kind=Kind.CRON,
        cron=spec.text,
        timezone=zone,
        dst_gap=draw(gap_policies),
        dst_fold=draw(fold_policies),
    )
    return Case(timing, spec, change.at - before, None)


def timing_cases(window: bool = True) -> st.SearchStrategy[Case]:
    return st.one_of(cron_cases(window=window), interval_cases(window=window), dst_cron_cases())


def _local(at: datetime, zone_name: str) -> datetime:
    return at.astimezone(ZoneInfo(zone_name)).replace(tzinfo=None)


def _exists(wall: datetime, zone_name: str) -> bool:
    aware = wall.replace(tzinfo=ZoneInfo(zone_name))
    return aware.astimezone(UTC).astimezone(aware.tzinfo).replace(tzinfo=None) == wall


# -- 1. order ------------------------------------------------------------------------------


@settings(max_examples=250, deadline=None, database=None)
@given(case=timing_cases(), count=st.integers(1, 30), include_skipped=st.booleans())
def test_occurrences_strictly_increase(case: Case, count: int, include_skipped: bool) -> None:
    timing = case.timing
    moments = list(
        islice(
            occurrences(timing, case.start, anchor=case.anchor, include_skipped=include_skipped),
            count,
        )
    )
    instants_ = [m.at for m in moments]
    assert all(a < b for a, b in pairwise(instants_)), instants_
    assert all(at > case.start for at in instants_)
    assert all(at == truncate_ms(at) for at in instants_)
    if timing.start_at is not None:
        assert all(at >= timing.start_at for at in instants_)
    if timing.end_at is not None:
        assert all(at <= timing.end_at for at in instants_)
    if not include_skipped:
        assert not any(m.skipped for m in moments)
    if case.spec is not None:
        for moment in moments:
            assert moment.wall is not None, moment
            assert case.spec.matches(moment.wall), moment
            local = _local(moment.at, timing.timezone)
            if moment.dst in ("", DST_FIRST, DST_SECOND):
                assert local == moment.wall, moment
            else:  # a shifted or skipped wall time does not exist: it is read later
                assert moment.dst in (DST_SHIFT, DST_SKIP)
                assert not _exists(moment.wall, timing.timezone), moment
                assert local > moment.wall, moment
    else:
        # The grid: anchor + k * interval for whole k.
        assert timing.interval is not None
        anchor = timing.anchor_at or timing.start_at or case.anchor
        assert anchor is not None
        assert all((at - anchor) % timing.interval == timedelta(0) for at in instants_)


# -- 2. mirror -----------------------------------------------------------------------------


def _new_york_hourly(gap: str) -> Case:
    """Hourly in New York just after 02:00 was skipped (14 March 2010): the 02:00 marker
    and 03:00 share the instant 07:00 UTC."""
    timing = Timing(kind=Kind.CRON, cron="@hourly", timezone="America/New_York", dst_gap=gap)
    return Case(timing, None, datetime(2010, 3, 14, 7, 30, tzinfo=UTC), None)


@settings(max_examples=250, deadline=None, database=None)
@given(case=timing_cases(), count=st.integers(1, 8), include_skipped=st.booleans())
@example(case=_new_york_hourly(DstGap.SKIP), count=1, include_skipped=False)
@example(case=_new_york_hourly(DstGap.SHIFT), count=1, include_skipped=False)
def test_occurrences_before_mirrors_occurrences(
    case: Case, count: int, include_skipped: bool
) -> None:
    timing, x, anchor = case.timing, case.start, case.anchor
    kwargs = {"anchor": anchor, "include_skipped": include_skipped}

    # Backwards from X, then forwards from just before the earliest of them.
    backwards = list(islice(occurrences_before(timing, x, **kwargs), count))[::-1]
    assert all(m.at < x for m in backwards)
    if backwards:
        forwards = list(
            islice(occurrences(timing, backwards[0].at - ONE_MS, **kwargs), len(backwards))
        )
        assert [m.at for m in forwards] == [m.at for m in backwards]
        assert forwards == backwards  # the same moments: DST flags and wall times too
        # Nothing between the last moment before X and X.
        following = next(occurrences(timing, backwards[-1].at, **kwargs), None)
        assert following is None or following.at >= x

    # Forwards from X, then backwards from just after the latest of them.
    forwards = list(islice(occurrences(timing, x, **kwargs), count))
    if forwards:
        backwards = list(
            islice(occurrences_before(timing, forwards[-1].at + ONE_MS, **kwargs), len(forwards))
        )[::-1]
        assert [m.at for m in backwards] == [m.at for m in forwards]
        assert backwards == forwards
        preceding = next(occurrences_before(timing, forwards[0].at, **kwargs), None)
        assert preceding is None or preceding.at <= x


# -- 3. minimum spacing --------------------------------------------------------------------


def lattice_spacing_bound(period: timedelta, zone_name: str, gap: str, fold: str) -> timedelta:
    """The least UTC distance between consecutive instants of a cron whose matching wall
    times form a lattice ``w0 + n * period`` (whatever ``w0``), in ``zone_name``.

    Between offset changes a wall time ``w`` is the instant ``w - offset``: consecutive
    instants are exactly ``P = period`` apart. Transitions of these zones are months apart,
    so a pair of consecutive instants straddles at most one change, of length ``D``; with
    ``r = D mod P``:

    - **fold** (the wall times in ``[F, F + D)`` occur twice). "first" maps them with the
      old offset, later ones with the new: each wall time maps ``D`` later from there on,
      so the one pair spanning the change is ``P + D`` apart. "second" likewise. "both"
      fires the lattice points of the fold twice: the first copies, then the second copies
      ``D`` later. The step from the last first copy to the first second copy is
      ``D - (span of the lattice points in the fold)``: ``P`` when ``P`` divides ``D`` (the
      fold holds exactly ``D / P`` points), else at least ``r`` (``D`` itself when
      ``P > D``: one point, fired twice, ``D`` apart).
    - **gap** (the wall times in ``[G, G + D)`` do not exist, change at instant ``T``).
      Wall times after it map ``D`` earlier than the old offset would say.
      "skip": consecutive instants come from lattice points ``w1 < G`` and ``w2 >= G + D``,
      so ``w2 - w1`` is a multiple of ``P`` greater than ``D``: the distance is at least
      ``P - r`` (``P`` when ``P`` divides ``D``).
      "shift": the gap's lattice points move forward by ``D`` into ``[T, T + D)``, where the
      lattice points after the gap also start, ``D`` earlier: two lattices offset by
      ``-D mod P``. Equal instants fire once (``P`` divides ``D``: every shifted time
      coincides with a later wall time, distance ``P``); otherwise two different lattices
      are at least ``min(r, P - r)`` apart. With ``P > D`` at most one point is shifted and
      the distances are ``P`` then ``P - D``.

    So a daily time is at least 24 h - 1 h = 23 h from the next under a 1 h gap (23 h 30
    under Lord Howe's 30 minutes, 24 h across Apia's skipped day, where the skipped day's
    shifted time is the next day's time), and at least 1 h under fold "both".
    """
    p = period
    bound = p
    for d in gap_lengths(zone_name):
        r = d % p
        if not r:
            continue
        if p > d:
            bound = min(bound, p - d)
        elif gap == DstGap.SKIP:
            bound = min(bound, p - r)
        else:
            bound = min(bound, r, p - r)
    if fold == DstFold.BOTH:
        for d in fold_lengths(zone_name):
            r = d % p
            if r:
                bound = min(bound, r)
    return bound


class Lattice(NamedTuple):
    expr: str
    period: timedelta


DIVISORS_60 = [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60]


@st.composite
def lattice_crons(draw: st.DrawFn) -> Lattice:
    kind = draw(st.sampled_from(["seconds", "minutes", "offset-minutes", "hours", "daily"]))
    if kind == "seconds":  # not denser than every 10 s: see SECOND_FIELDS
        k = draw(st.sampled_from([10, 12, 15, 20, 30]))
        return Lattice(f"*/{k} * * * * *", timedelta(seconds=k))
    if kind == "minutes":
        k = draw(st.sampled_from(DIVISORS_60))
        return Lattice(f"*/{k} * * * *", timedelta(minutes=k))
    if kind == "offset-minutes":  # a/k with a < k and k | 60 is the lattice a + n * k
        k = draw(st.sampled_from(DIVISORS_60[1:]))
        return Lattice(f"{draw(st.integers(0, k - 1))}/{k} * * * *", timedelta(minutes=k))
    if kind == "hours":
        h = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12]))
        minute = draw(st.sampled_from([0, draw(st.integers(0, 59))]))
        return Lattice(f"{minute} */{h} * * *", timedelta(hours=h))
    if draw(st.booleans()):
        return Lattice("@daily", DAY)
    hour = draw(st.one_of(st.integers(0, 23), st.integers(0, 3)))
    return Lattice(f"{draw(st.integers(0, 59))} {hour} * * *", DAY)


@st.composite
def lattice_cases(draw: st.DrawFn) -> tuple[Timing, Lattice, datetime, int]:
    zone = draw(st.sampled_from(ZONES))
    lattice = draw(lattice_crons())
    count = 12 if lattice.period >= DAY else 20 if lattice.period < MINUTE else 40
    largest = HOUR if lattice.period < MINUTE else DAY
    changes = [
        t for t in transitions(zone) if SPAN_START <= t.at < SPAN_END and abs(t.change) <= largest
    ]
    if changes and draw(st.integers(0, 3)) > 0:
        # Start a few periods before a change, so that the instants run across it.
        change = draw(st.sampled_from(changes))
        before = lattice.period * draw(st.integers(0, count - 2))
        spread = min(7200, int(lattice.period.total_seconds()) * count)
        start = change.at - before - timedelta(seconds=draw(st.integers(-spread, spread)))
    else:
        start = draw(instants(zone, near_changes=False))
    timing = Timing(
        kind=Kind.CRON,
        cron=lattice.expr,
        timezone=zone,
        dst_gap=draw(gap_policies),
        dst_fold=draw(fold_policies),
    )
    return timing, lattice, start, count


@settings(max_examples=300, deadline=None, database=None)
@given(case=lattice_cases())
def test_cron_instants_are_never_closer_than_the_period_allows(
    case: tuple[Timing, Lattice, datetime, int],
) -> None:
    timing, lattice, start, count = case
    bound = lattice_spacing_bound(lattice.period, timing.timezone, timing.dst_gap, timing.dst_fold)
    instants_ = [m.at for m in islice(occurrences(timing, start), count)]
    assert len(instants_) == count
    for a, b in pairwise(instants_):
        assert b - a >= bound, (a, b, bound)
        # Away from offset changes (a day either side covers every gap and fold), the
        # distance is exactly the period; in UTC, always.
        if not changes_between(timing.timezone, a - 25 * HOUR, b + 25 * HOUR):
            assert b - a == lattice.period, (a, b)


@settings(max_examples=200, deadline=None, database=None)
@given(case=interval_cases(), count=st.integers(2, 30))
def test_interval_instants_are_exactly_the_interval_apart(case: Case, count: int) -> None:
    instants_ = [
        m.at for m in islice(occurrences(case.timing, case.start, anchor=case.anchor), count)
    ]
    for a, b in pairwise(instants_):
        assert b - a == case.timing.interval


# -- 4. reference evaluation ---------------------------------------------------------------


@settings(max_examples=250, deadline=None, database=None)
@given(
    zone=st.sampled_from(ZONES),
    spec=cron_specs(),
    data=st.data(),
    gap=gap_policies,
    fold=fold_policies,
    day_rule=day_rules,
)
def test_cron_agrees_with_a_reference_away_from_offset_changes(
    zone: str, spec: CronSpec, data: st.DataObject, gap: str, fold: str, day_rule: str
) -> None:
    spec = under_day_rule(spec, day_rule)
    start = data.draw(instants(zone, near_changes=False))
    before = changes_between(zone, start - CLEAR_OF_CHANGES, start)
    assume(not before)
    # The stretch where the offset is constant, less the margin before the next change.
    limit = start + 400 * DAY
    following = changes_between(zone, start, start + 400 * DAY + CLEAR_OF_CHANGES)
    if following:
        limit = min(limit, following[0].at - CLEAR_OF_CHANGES)
    assume(limit > start + HOUR)
    count = 12
    timing = Timing(
        kind=Kind.CRON, cron=spec.text, timezone=zone, dst_gap=gap, dst_fold=fold, day_rule=day_rule
    )
    ours = []
    for moment in occurrences(timing, start):
        if moment.at >= limit or len(ours) == count:
            break
        ours.append(moment.at)

    offset = _offset(ZoneInfo(zone), start)
    walls = spec.walls((start + offset).replace(tzinfo=None), (limit + offset).replace(tzinfo=None))
    reference = [(wall - offset).replace(tzinfo=UTC) for wall in islice(walls, count)]
    assert ours == reference

    aware = CronSim(normalize_cron(spec.text), start.astimezone(ZoneInfo(zone)))
    aware.day_and = spec.days_and  # cronsim's own switch, as the day rule sets it
    by_cronsim: list[datetime] = []
    for local in islice(aware, count):
        if local.astimezone(UTC) >= limit:
            break
        by_cronsim.append(local.astimezone(UTC))
    assert ours == by_cronsim


# -- 5. jitter -----------------------------------------------------------------------------

jitters = st.one_of(
    st.none(),
    st.just(timedelta(0)),
    st.integers(0, 5_000).map(lambda us: timedelta(microseconds=us)),
    st.integers(1, 86_400_000).map(lambda ms: timedelta(milliseconds=ms)),
    st.just(MAX_JITTER),
)


# Jitter as configured: minutes, whole hours, up to the largest allowed (a day).
jitter_lengths = st.one_of(
    st.integers(1, 3_600_000).map(lambda ms: timedelta(milliseconds=ms)),
    st.integers(1, 24).map(lambda h: timedelta(hours=h)),
    st.just(MAX_JITTER),
)


@settings(max_examples=500, deadline=None, database=None)
@given(
    schedule_id=st.integers(1, 2**63 - 1),
    nominal=instants(),
    jitter=jitters,
    gap=st.one_of(
        st.none(),
        st.integers(1, 10).map(lambda ms: timedelta(milliseconds=ms)),
        st.integers(1, 30 * 86_400_000).map(lambda ms: timedelta(milliseconds=ms)),
    ),
)
def test_jitter_delay_is_deterministic_and_bounded(
    schedule_id: int, nominal: datetime, jitter: timedelta | None, gap: timedelta | None
) -> None:
    delay = jitter_delay(schedule_id, nominal, jitter, gap)
    assert delay == jitter_delay(schedule_id, nominal, jitter, gap)
    assert delay % ONE_MS == timedelta(0)
    assert timedelta(0) <= delay <= (jitter or timedelta(0))
    if gap is not None:
        assert delay < gap


@st.composite
def jittered_cases(draw: st.DrawFn) -> Case:
    case = draw(timing_cases(window=False))
    jitter = draw(jitter_lengths)
    timing = replace(case.timing, jitter=jitter)
    if timing.kind == Kind.INTERVAL and case.anchor is not None and timing.anchor_at is None:
        # due_time only knows the timing: give the grid its anchor.
        timing = replace(timing, anchor_at=timing.start_at or case.anchor)
    return case._replace(timing=timing)


# 01:30 New York time fires on 8 March 2026; 02:30 does not exist and is skipped, which
# leaves a marker an hour after 01:30 but the next occurrence 23 hours after it.
NEW_YORK_SKIPPED_0230 = Case(
    Timing(
        kind=Kind.CRON,
        cron="30 1,2 * * *",
        timezone="America/New_York",
        dst_gap=DstGap.SKIP,
        jitter=timedelta(hours=2),
    ),
    None,
    datetime(2026, 3, 7, tzinfo=UTC),
    None,
)


@settings(max_examples=200, deadline=None, database=None)
@given(case=jittered_cases(), schedule_id=st.integers(1, 10**9), count=st.integers(2, 15))
def test_due_times_strictly_increase(case: Case, schedule_id: int, count: int) -> None:
    timing = case.timing
    nominals = [m.at for m in islice(occurrences(timing, case.start), count)]
    dues = [due_time(timing, schedule_id, at) for at in nominals]
    assert dues == [due_time(timing, schedule_id, at) for at in nominals]  # deterministic
    for (nominal, due), following in zip(
        zip(nominals, dues, strict=True), nominals[1:], strict=False
    ):
        assert nominal <= due < following
        assert due - nominal <= (timing.jitter or timedelta(0))
    assert all(a < b for a, b in pairwise(dues))


@settings(max_examples=300, deadline=None, database=None)
@given(case=jittered_cases(), schedule_id=st.integers(1, 10**9), count=st.integers(2, 15))
@example(case=NEW_YORK_SKIPPED_0230, schedule_id=1, count=4)
def test_preview_and_plan_due_times_are_due_time(case: Case, schedule_id: int, count: int) -> None:
    """preview() and plan_due() compute due times with _with_due_times; a schedule's row
    gets its due_at from due_time() (Schedule._due_at_of, also for a first run that is a
    skipped-time marker). One moment, one due time: an occurrence's nominal time plus its
    jitter, a skipped-time marker's own instant (nothing fires there to spread out)."""
    timing = case.timing
    items = preview(timing, start=case.start + ONE_MS, count=count, schedule_id=schedule_id)
    for item in items:
        if item.skipped:
            assert item.due_at == item.at, item
            assert due_time(timing, schedule_id, item.at) == item.at, item
        else:
            assert item.due_at == due_time(timing, schedule_id, item.at), item


# -- 6. catch-up ---------------------------------------------------------------------------


class PlanCase(NamedTuple):
    timing: Timing
    catch_up: CatchUp
    schedule_id: int
    nominal: datetime
    due_at: datetime | None
    now: datetime
    runs_left: int | None
    skips_recorded: int


def moment_of(timing: Timing, at: datetime, anchor: datetime) -> Moment | None:
    """The moment at instant ``at`` as the forward walk (which plan_due uses) sees it."""
    found = next(occurrences(timing, at - ONE_MS, anchor=anchor, include_skipped=True), None)
    return found if found is not None and found.at == at else None


def moments_before(timing: Timing, before: datetime, anchor: datetime, count: int) -> list[Moment]:
    """Up to ``count`` moments before ``before``, latest first (occurrences_before's
    instants, each read by the forward walk)."""
    found = []
    for m in islice(occurrences_before(timing, before, anchor=anchor, include_skipped=True), count):
        moment = moment_of(timing, m.at, anchor)
        found.append(moment if moment is not None else m)
    return found


@st.composite
def plan_cases(draw: st.DrawFn) -> PlanCase:
    kind = draw(st.sampled_from([Kind.CRON, Kind.CRON, Kind.INTERVAL, Kind.ONCE]))
    schedule_id = draw(st.integers(1, 10**6))
    if kind == Kind.ONCE:
        zone = draw(st.sampled_from(ZONES))
        run_at = draw(instants(zone))
        timing = Timing(kind=Kind.ONCE, run_at=run_at, timezone=zone)
        nominal = run_at
    else:
        if kind == Kind.CRON:
            case = draw(st.one_of(cron_cases(window=False), dst_cron_cases()))
        else:
            case = draw(interval_cases(window=False))
        timing = case.timing
        if kind == Kind.INTERVAL and timing.anchor_at is None and timing.start_at is None:
            anchor = case.anchor  # a schedule's own nominal time anchors its grid
        else:
            anchor = None
        first = next(occurrences(timing, case.start, anchor=anchor, include_skipped=True))
        nominal = first.at
        if draw(st.integers(0, 3)) == 0 and timing.start_at is None:
            if kind == Kind.CRON:
                back = timedelta(seconds=draw(st.integers(0, 10 * 86_400)))
            else:  # on the grid: a start_at without anchor_at anchors it
                back = timing.interval * draw(st.integers(0, 5))  # type: ignore[operator]
            timing = replace(timing, start_at=nominal - back)
        if draw(st.integers(0, 3)) == 0:
            ahead = timedelta(milliseconds=draw(st.integers(0, 14 * 86_400_000)))
            timing = replace(timing, end_at=nominal + ahead)
    if draw(st.booleans()):
        timing = replace(timing, jitter=draw(jitter_lengths))
    due_at = due_time(timing, schedule_id, nominal) if draw(st.booleans()) else None
    late = draw(
        st.one_of(
            st.integers(0, 10_000),
            st.integers(0, 3_600_000),
            st.integers(0, 21 * 86_400_000),
        )
    )
    now = (due_at or due_time(timing, schedule_id, nominal)) + timedelta(milliseconds=late)
    catch_up = CatchUp(
        mode=draw(st.sampled_from([CatchUpMode.LATEST, CatchUpMode.SKIP, CatchUpMode.ALL])),
        window=timedelta(seconds=draw(st.integers(1, 2 * 86_400))),
        max_runs=draw(st.integers(1, 20)),
        grace=timedelta(milliseconds=draw(st.integers(0, 3_600_000))),
    )
    return PlanCase(
        timing=timing,
        catch_up=catch_up,
        schedule_id=schedule_id,
        nominal=nominal,
        due_at=due_at,
        now=now,
        runs_left=draw(st.one_of(st.none(), st.integers(0, 5))),
        skips_recorded=draw(st.integers(0, 30)),
    )


def _threshold(catch_up: CatchUp) -> timedelta | None:
    """How late an occurrence may fire: None for "latest" (any lateness)."""
    if catch_up.mode == CatchUpMode.SKIP:
        return catch_up.grace
    if catch_up.mode == CatchUpMode.ALL:
        return catch_up.window
    return None


@settings(max_examples=300, deadline=None, database=None)
@given(case=plan_cases())
def test_catch_up_fires_within_the_caps_and_only_due_occurrences(case: PlanCase) -> None:
    timing, catch_up, sid, n0, now = (
        case.timing,
        case.catch_up,
        case.schedule_id,
        case.nominal,
        case.now,
    )
    plan = plan_due(
        timing,
        catch_up,
        schedule_id=sid,
        nominal=n0,
        due_at=case.due_at,
        now=now,
        runs_left=case.runs_left,
        skips_recorded=case.skips_recorded,
    )

    def due(moment: Moment) -> datetime:
        if moment.at == n0 and case.due_at is not None:
            return case.due_at
        if moment.skipped:
            return moment.at
        return due_time(timing, sid, moment.at, anchor=n0)

    # The caps.
    cap = 1 if catch_up.mode == CatchUpMode.LATEST else catch_up.max_runs
    if case.runs_left is not None:
        cap = min(cap, case.runs_left)
    assert len(plan.fire) <= cap
    assert len(plan.skips) <= case.skips_recorded

    # Everything fired is a due occurrence of the schedule, from the nominal time on.
    fired = []
    for at in plan.fire:
        moment = moment_of(timing, at, n0)
        assert moment is not None, at
        assert not moment.skipped, at
        assert n0 <= at <= now
        assert due(moment) <= now, (at, due(moment))
        fired.append(moment)
    threshold = _threshold(catch_up)
    if threshold is not None:
        assert all(now - due(m) <= threshold for m in fired)

    # Each occurrence is handled once: fired, or skipped for one reason.
    handled = plan.fire + [s.at for s in plan.skips]
    assert len(set(handled)) == len(handled)
    assert plan.fire == sorted(plan.fire)
    assert [s.at for s in plan.skips] == sorted(s.at for s in plan.skips)
    for skip in plan.skips:
        assert n0 <= skip.at <= now
        moment = moment_of(timing, skip.at, n0)
        assert moment is not None, skip
        assert due(moment) <= now, skip
        if moment.skipped:
            assert skip.reason == SkipReason.DST, skip
        else:
            assert skip.reason == (
                SkipReason.EXPIRED if timing.kind == Kind.ONCE else SkipReason.MISSED
            ), skip

    # Fired: the most recent due occurrences (a run of consecutive ones).
    candidates = [
        m for m in moments_before(timing, now + ONE_MS, n0, 6) if not m.skipped and m.at >= n0
    ]
    latest = next((m for m in candidates if due(m) <= now), None)
    for a, b in zip(plan.fire, plan.fire[1:], strict=False):
        assert next(occurrences(timing, a, anchor=n0)).at == b
    if plan.fire:
        assert latest is not None
        assert plan.fire[-1] == latest.at
    elif case.runs_left != 0 and latest is not None:
        assert threshold is not None
        assert now - due(latest) > threshold
    if 0 < len(plan.fire) < cap:
        previous = next(
            (m for m in moments_before(timing, plan.fire[0], n0, 6) if not m.skipped), None
        )
        if previous is not None and previous.at >= n0:
            assert threshold is not None
            assert now - due(previous) > threshold

    # The next run: after everything handled, not due yet, and the moment that follows.
    finished = case.runs_left is not None and case.runs_left - len(plan.fire) <= 0
    if plan.next_run_at is None:
        assert (
            finished
            or timing.kind == Kind.ONCE
            or next(occurrences(timing, now, anchor=n0, include_skipped=True), None) is None
        )
    else:
        assert not finished
        assert timing.kind != Kind.ONCE
        assert all(at < plan.next_run_at for at in handled)
        assert plan.due_at is not None
        assert plan.due_at > now
        upcoming = moment_of(timing, plan.next_run_at, n0)
        assert upcoming is not None
        assert plan.due_at == due(upcoming)
        previous_moment = next(iter(moments_before(timing, plan.next_run_at, n0, 1)), None)
        if previous_moment is not None and previous_moment.at >= n0:
            assert due(previous_moment) <= now

    # A small backlog is handled exactly: every due moment once, picked by the policy.
    first = moment_of(timing, n0, n0) or Moment(n0)
    walk = [first, *islice(occurrences(timing, n0, anchor=n0, include_skipped=True), 60)]
    due_moments = [m for m in walk if due(m) <= now]
    if len(due_moments) == len(walk) == 61 or len(due_moments) > case.skips_recorded:
        return  # a longer backlog: the checks above are what can be said
    assert sorted(handled) == [m.at for m in due_moments]
    occurred = [m for m in due_moments if not m.skipped]
    if threshold is None:
        expected = occurred[-1:]
    else:
        expected = [m for m in occurred if now - due(m) <= threshold][-catch_up.max_runs :]
    if case.runs_left is not None:
        expected = expected[-case.runs_left :] if case.runs_left > 0 else []
    assert plan.fire == [m.at for m in expected]


@settings(
    max_examples=25,
    deadline=None,  # work is counted, not timed: a timing threshold is a flaky test
    database=None,
)
@given(
    timing=st.one_of(
        st.builds(
            Timing,
            kind=st.just(Kind.CRON),
            cron=st.sampled_from(["* * * * * *", "*/2 * * * * *", "* * * * *"]),
            timezone=st.sampled_from(ZONES),
            dst_gap=gap_policies,
            dst_fold=fold_policies,
            jitter=st.sampled_from([None, timedelta(milliseconds=500)]),
        ),
        st.builds(
            Timing,
            kind=st.just(Kind.INTERVAL),
            interval=st.sampled_from([timedelta(seconds=1), timedelta(seconds=3)]),
        ),
    ),
    nominal=instants(near_changes=False),
    outage=st.integers(7 * 86_400, 30 * 86_400).map(lambda s: timedelta(seconds=s)),
    mode=st.sampled_from([CatchUpMode.LATEST, CatchUpMode.SKIP, CatchUpMode.ALL]),
    max_runs=st.integers(1, 1000),
    skips_recorded=st.integers(0, 1000),
)
def test_a_huge_backlog_is_planned_quickly(
    timing: Timing,
    nominal: datetime,
    outage: timedelta,
    mode: str,
    max_runs: int,
    skips_recorded: int,
) -> None:
    """Millions of due occurrences (a per-second cron down for weeks), away from offset
    changes (near one, see the next test): the plan is bounded by the caps, not the backlog.
    The steps it takes (occurrences looked up, forwards or backwards) are the check."""
    now = nominal + outage
    for at in (nominal, now):
        assume(not changes_between(timing.timezone, at - CLEAR_OF_CHANGES, at + CLEAR_OF_CHANGES))
    nominal = next(occurrences(timing, nominal, anchor=nominal, include_skipped=True)).at
    catch_up = CatchUp(mode=mode, window=DAY, max_runs=max_runs)
    steps = 0

    def counted(step: Callable[..., Moment | None]) -> Callable[..., Moment | None]:
        def count(*args: object, **kwargs: object) -> Moment | None:
            nonlocal steps
            steps += 1
            return step(*args, **kwargs)

        return count

    with replaced("following", counted), replaced("preceding", counted):
        plan = plan_due(
            timing,
            catch_up,
            schedule_id=7,
            nominal=nominal,
            due_at=None,
            now=now,
            skips_recorded=skips_recorded,
        )
    # About two walks of the caps (forwards until "too many", then back from now), never
    # the backlog (at least 200,000 occurrences here).
    assert steps <= 3 * (max_runs + skips_recorded + 1) + 10
    assert len(plan.fire) <= (1 if mode == CatchUpMode.LATEST else max_runs)
    assert len(plan.skips) <= skips_recorded
    # The most recent occurrence (at most a period and the jitter ago) fires, except under
    # "skip" when it is more than the grace (a minute) late.
    assert (plan.fire and now - plan.fire[-1] < 2 * MINUTE) or mode == CatchUpMode.SKIP
    assert plan.next_run_at is not None
    assert plan.due_at is not None
    assert plan.due_at > now
    assert plan.next_run_at - now <= MINUTE


# The ordinary changes (an hour or less). Across Apia's lost day (24 h) it is worse still:
# about 3 s per occurrence of a per-second cron.
DENSE_CHANGES = [
    (zone, t)
    for zone in ZONES
    for t in transitions(zone)
    if t.at >= SPAN_START and abs(t.change) <= HOUR
]


def _dense_change(zone: str, at: datetime) -> tuple[str, Transition]:
    """The transition of DENSE_CHANGES in ``zone`` at ``at``."""
    return next(c for c in DENSE_CHANGES if c[0] == zone and c[1].at == at)


# Wall times examined by one plan of a per-second cron a minute late: under a hundred away
# from changes, at most about 7,300 near them (an hour after a spring forward in New York,
# a minute late). In the hour before a fall-back each occurrence used to walk the hour of
# wall times behind it, which map to instants already past: up to 190,000 walls (0.9 s)
# for one plan. The walk this guards against examined an hour of seconds for each of the
# ~100 occurrences.
MAX_WALLS_PER_PLAN = 20_000


@settings(
    max_examples=10,
    deadline=None,  # work is counted, not timed: a timing threshold is a flaky test
    database=None,
    phases=[Phase.explicit, Phase.generate],  # a failing example is slow: do not shrink
)
# Found by CI (2026-11-26): planned about 40 minutes before Apia's fall-back, each of the
# 53 late occurrences walked the hour of wall times behind it (130,491 in all, about 0.6 s).
@example(
    change=_dense_change("Pacific/Apia", datetime(2021, 4, 3, 14, 0, tzinfo=UTC)),
    around=timedelta(seconds=-2389),
    outage=timedelta(seconds=53),
    cron="* * * * * *",
)
@example(  # the worst spot found in New York: just under an hour before the fall-back
    change=_dense_change("America/New_York", datetime(2030, 11, 3, 6, 0, tzinfo=UTC)),
    around=timedelta(seconds=-3506),
    outage=timedelta(seconds=60),
    cron="* * * * * *",
)
@given(
    change=st.sampled_from(DENSE_CHANGES),
    around=st.integers(-26 * 3600, 26 * 3600).map(lambda s: timedelta(seconds=s)),
    outage=st.integers(10, 60).map(lambda s: timedelta(seconds=s)),
    cron=st.sampled_from(["* * * * * *", "*/2 * * * * *"]),
)
def test_a_dense_cron_near_an_offset_change_is_quick(
    change: tuple[str, Transition], around: timedelta, outage: timedelta, cron: str
) -> None:
    """A per-second cron claimed up to a minute late, within a day of an offset change:
    planning it must not take seconds. (Under gap "shift" and fold "both" every
    whole UTC second is an occurrence, so the nominal time costs nothing to find.)"""
    zone, transition = change
    walks.cron_next.cache_clear()  # a claim meets new instants: a cold cache
    walks.cron_prev.cache_clear()
    timing = Timing(
        kind=Kind.CRON, cron=cron, timezone=zone, dst_gap=DstGap.SHIFT, dst_fold=DstFold.BOTH
    )
    now = transition.at + around
    step = 2 if cron.startswith("*/2") else 1
    nominal = now - outage
    nominal -= timedelta(seconds=nominal.second % step, microseconds=nominal.microsecond)
    examined = 0

    def counter(moments_of_wall: Callable[..., object]) -> Callable[..., object]:
        def counting(*args: object, **kwargs: object) -> object:
            nonlocal examined
            examined += 1
            return moments_of_wall(*args, **kwargs)

        return counting

    with replaced("moments_of_wall", counter):
        plan = plan_due(timing, CatchUp(), schedule_id=7, nominal=nominal, due_at=None, now=now)
    assert plan.fire
    assert len(plan.skips) <= 100
    assert examined <= MAX_WALLS_PER_PLAN


# -- 7. first run --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, database=None)
@given(data=st.data(), kind=st.sampled_from([Kind.CRON, Kind.INTERVAL, Kind.INTERVAL, Kind.ONCE]))
def test_first_run_respects_now_and_the_window(data: st.DataObject, kind: str) -> None:
    if kind == Kind.ONCE:
        zone = data.draw(st.sampled_from(ZONES))
        run_at = data.draw(instants(zone))
        now = data.draw(instants(zone))
        timing = Timing(kind=Kind.ONCE, run_at=run_at, timezone=zone)
        assert first_run_at(timing, now) == run_at
        return
    case = data.draw(
        cron_cases(window=False) if kind == Kind.CRON else interval_cases(window=False)
    )
    timing, now = case.timing, case.start
    if data.draw(st.booleans()):
        timing = replace(timing, anchor_at=None, start_at=None)  # an interval's plain grid
    if data.draw(st.booleans()):
        start_at = now + timedelta(milliseconds=data.draw(st.integers(-(10**10), 10**10)))
        timing = replace(timing, start_at=start_at)
    if data.draw(st.booleans()):
        low = max(now, timing.start_at or now)
        end_at = low + timedelta(milliseconds=data.draw(st.integers(-(10**10), 10**10)))
        if timing.start_at is None or end_at > timing.start_at:
            timing = replace(timing, end_at=end_at)

    first = first_run_at(timing, now)
    start_at, end_at = timing.start_at, timing.end_at
    # The end only cuts: without it, the first run is the same or after the end.
    unbounded = first_run_at(replace(timing, end_at=None), now)
    assert unbounded is not None
    if first is None:
        assert end_at is not None
        assert unbounded > end_at
        return
    assert first == unbounded
    assert first >= now
    if kind == Kind.CRON and (start_at is None or start_at <= now):
        assert first > now  # a cron starts at its first match *after* now
    if start_at is not None:
        assert first >= start_at
    if end_at is not None:
        assert first <= end_at
    assert end_at is None or end_at >= now  # None once past the end

    # It is a moment of the schedule, and the first from then on.
    floor = max(now, start_at) if start_at is not None else now
    if kind == Kind.INTERVAL and timing.anchor_at is None and timing.start_at is None:
        assert first == truncate_ms(now + timing.interval)  # type: ignore[operator]
        return
    assert moment_of(timing, first, first) is not None
    previous = next(occurrences_before(timing, first, include_skipped=True), None)
    if previous is not None:
        if kind == Kind.CRON and floor == now:
            assert previous.at <= now
        else:
            assert previous.at < floor


@settings(max_examples=100, deadline=None, database=None)
@given(case=interval_cases(window=False))
def test_first_run_past_the_end_is_none(case: Case) -> None:
    timing = case.timing
    end_at = case.start - timedelta(milliseconds=1)
    if timing.start_at is not None and timing.start_at >= end_at:
        timing = replace(timing, start_at=None)
    assert first_run_at(replace(timing, end_at=end_at), case.start) is None


# -- sub-millisecond inputs ----------------------------------------------------------------


@settings(max_examples=100, deadline=None, database=None)
@given(
    case=interval_cases(window=False),
    microseconds=st.integers(1, 999),
    where=st.sampled_from(["anchor_at", "start_at"]),
)
def test_interval_grid_with_a_sub_millisecond_anchor_stays_strictly_after(
    case: Case, microseconds: int, where: str
) -> None:
    """An ``anchor_at``/``start_at`` with microseconds (a DateTimeField keeps them): the
    grid's instants are truncated to milliseconds, yet must stay strictly after ``after``."""
    anchor = (case.anchor or case.start) + timedelta(microseconds=microseconds)
    timing = replace(case.timing, anchor_at=None, start_at=None)
    timing = (
        replace(timing, anchor_at=anchor)
        if where == "anchor_at"
        else replace(timing, start_at=anchor)
    )
    after = truncate_ms(anchor) + timing.interval * 3  # type: ignore[operator]
    instants_ = [m.at for m in islice(occurrences(timing, after), 3)]
    assert all(at > after for at in instants_), (after, instants_)


@settings(max_examples=100, deadline=None, database=None)
@given(case=timing_cases(window=False), microseconds=st.integers(1, 999))
def test_first_run_is_not_before_a_sub_millisecond_now(case: Case, microseconds: int) -> None:
    """``now`` from ``timezone.now()`` has microseconds."""
    now = case.start + timedelta(microseconds=microseconds)
    first = first_run_at(case.timing, now)
    assert first is None or first >= now, (first, now)
