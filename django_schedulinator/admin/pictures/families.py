"""The admin's groups of schedules that share their times and their jitter ("families"):
what the forecast counts together, what its busiest minutes name, and what the schedule
list's "timing group" filter selects (``Family.token`` is the filter's value,
``Family.members`` its query).

A group is told by what decides its times (``TimelineKey``: a cron expression with its zone,
day rule and DST policies; an interval with the minute of its next run; a one-off with its
minute; the calendars of excluded days it names), the same key making the same occurrences.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import router
from django.db.models import Q
from django.utils.translation import gettext

from django_schedulinator import timing
from django_schedulinator.admin.display import duration_text, exact_time
from django_schedulinator.errors import TimingError
from django_schedulinator.models import Schedule, day_calendar


@dataclass(frozen=True, slots=True)
class TimelineKey:
    """What decides a group's times: the same key, the same occurrences."""

    kind: str
    cron: str = ""
    timezone: str = "UTC"
    day_rule: str = timing.DayRule.EITHER
    dst_gap: str = timing.DstGap.SHIFT
    dst_fold: str = timing.DstFold.FIRST
    interval: timedelta | None = None
    # Intervals and one-offs: the minute of their next run (the phase of an interval).
    anchor: datetime | None = None
    # The calendars of excluded days it names, and what it does on their days.
    calendars: tuple[str, ...] = ()
    calendar_rule: str = timing.CalendarRule.SKIP
    # Solar: the event of the sun, the place and the offset.
    solar_event: str = ""
    latitude: float | None = None
    longitude: float | None = None
    solar_offset: timedelta | None = None

    def spec(self) -> timing.Timing:
        calendar = None
        if self.calendars:
            db = router.db_for_read(Schedule)
            calendar = day_calendar(self.calendars, self.calendar_rule, using=db)
        return timing.Timing(
            kind=self.kind,
            cron=self.cron,
            interval=self.interval,
            run_at=self.anchor if self.kind == timing.Kind.ONCE else None,
            timezone=self.timezone,
            dst_gap=self.dst_gap,
            dst_fold=self.dst_fold,
            day_rule=self.day_rule,
            calendar=calendar,
            solar_event=self.solar_event,
            latitude=self.latitude,
            longitude=self.longitude,
            solar_offset=self.solar_offset,
        )


@dataclass(frozen=True, slots=True)
class Family:
    """Schedules with the same times and jitter: what the busiest minutes list and link to."""

    timeline: TimelineKey
    jitter: timedelta | None

    def describe(self) -> str:
        key = self.timeline
        try:
            return timing.describe(key.spec())
        except (TimingError, ValueError, OverflowError):
            return key.cron or key.solar_event or str(key.interval or key.anchor)

    def label(self) -> str:
        """The family in words, as the schedule list's filter names it."""
        parts = [self.describe()]
        key = self.timeline
        if key.kind == timing.Kind.INTERVAL and key.anchor is not None:
            parts.append(
                gettext("next run in the minute from %(time)s") % {"time": exact_time(key.anchor)}
            )
        if self.jitter:
            parts.append(gettext("jitter %(jitter)s") % {"jitter": duration_text(self.jitter)})
        else:
            parts.append(gettext("no jitter"))
        return ", ".join(parts)

    def token(self) -> str:
        """The family as one query-string value (``TimingGroupFilter`` reads it back)."""
        key = self.timeline
        return json.dumps(
            [
                key.kind, key.cron, key.timezone, key.day_rule, key.dst_gap, key.dst_fold,
                _ms(key.interval), timing.to_ms(key.anchor) if key.anchor else None,
                _ms(self.jitter), list(key.calendars), key.calendar_rule, _solar(key),
            ],
            separators=(",", ":"),
        )  # fmt: skip

    @classmethod
    def from_token(cls, text: str) -> Family:
        """The family a ``token()`` names; ValueError for anything else."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            raise ValueError(f"not a timing group: {text!r}") from None
        if not isinstance(value, list) or len(value) != 12:
            raise ValueError(f"not a timing group: {text!r}")
        *words, interval, anchor, jitter, calendars, calendar_rule, solar = value
        if not isinstance(calendars, list) or not all(isinstance(c, str) for c in calendars):
            raise ValueError(f"not a timing group: {text!r}")
        if not isinstance(calendar_rule, str):
            raise ValueError(f"not a timing group: {text!r}")
        if not all(isinstance(word, str) for word in words):
            raise ValueError(f"not a timing group: {text!r}")
        if not all(
            v is None or (isinstance(v, int) and v >= 0) for v in (interval, anchor, jitter)
        ):
            raise ValueError(f"not a timing group: {text!r}")
        kind, cron, zone, day_rule, gap, fold = words
        try:
            moment = timing.from_ms(anchor) if anchor is not None else None
        except (OverflowError, ValueError):
            raise ValueError(f"not a timing group: {text!r}") from None
        key = TimelineKey(
            kind, cron, zone, day_rule, gap, fold,
            timedelta(milliseconds=interval) if interval is not None else None, moment,
            tuple(calendars), calendar_rule, *_solar_fields(solar, text),
        )  # fmt: skip
        return cls(key, timedelta(milliseconds=jitter) if jitter else None)

    def members(self) -> Q:
        """The enabled schedules of this family (as ``forecast`` groups them)."""
        key = self.timeline
        found = Q(enabled=True, kind=key.kind)
        if key.kind == timing.Kind.CRON:
            found &= Q(
                cron=key.cron,
                timezone=key.timezone,
                day_rule=key.day_rule,
                dst_gap=key.dst_gap,
                dst_fold=key.dst_fold,
            )
        if key.kind == timing.Kind.SOLAR:
            found &= Q(
                solar_event=key.solar_event,
                latitude=key.latitude,
                longitude=key.longitude,
                solar_offset=key.solar_offset,
            )
        if key.interval is not None:
            found &= Q(interval=key.interval)
        if key.anchor is not None:
            minute = key.anchor + timedelta(minutes=1)
            found &= Q(next_run_at__gte=key.anchor, next_run_at__lt=minute)
        found &= Q(calendars=list(key.calendars))
        if key.calendars:
            found &= Q(calendar_rule=key.calendar_rule)
        if self.jitter:
            found &= Q(jitter=self.jitter)
        else:
            found &= Q(jitter__isnull=True) | Q(jitter=timedelta(0))
        return found


def _ms(value: timedelta | None) -> int | None:
    return value // timing.ONE_MS if value else None


def _solar(key: TimelineKey) -> list[object] | None:
    """A solar key's event, place and offset (ms) as the token has them; None otherwise."""
    if key.kind != timing.Kind.SOLAR:
        return None
    return [key.solar_event, key.latitude, key.longitude, _ms(key.solar_offset)]


def _solar_fields(
    value: object, text: str
) -> tuple[str, float | None, float | None, timedelta | None]:
    """The solar fields of a token's last item (``_solar``); ValueError for anything else."""
    if value is None:
        return "", None, None, None
    if not isinstance(value, list) or len(value) != 4:
        raise ValueError(f"not a timing group: {text!r}")
    event, latitude, longitude, offset = value
    numbers = (latitude, longitude)
    if not isinstance(event, str) or not all(
        isinstance(n, int | float) and not isinstance(n, bool) for n in numbers
    ):
        raise ValueError(f"not a timing group: {text!r}")
    if offset is not None and (not isinstance(offset, int) or isinstance(offset, bool)):
        raise ValueError(f"not a timing group: {text!r}")
    shift = timedelta(milliseconds=offset) if offset is not None else None
    return event, float(latitude), float(longitude), shift
