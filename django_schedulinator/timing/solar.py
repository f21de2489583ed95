"""Solar schedules: an event of the sun at a place (``SolarEvent``: dawn, sunrise, solar
noon, sunset, dusk, at a latitude and a longitude), plus an offset, computed by astral.

- **The events** are Celery's: sunrise and sunset are the sun's upper edge on the horizon,
  refraction included (what almanacs print); civil, nautical and astronomical dawn and dusk
  its centre 6, 12 and 18 degrees below it; solar noon its highest point.
- **A solar day** is the day around one solar noon: its rising events (dawn, sunrise) lie
  in the 12 hours before that noon, its setting events (sunset, dusk) in the 12 hours
  after. astral computes an event for a date in UTC and may hand it back a day off where
  the event lies near midnight UTC (at high latitudes, near the midnight sun); each one is
  put back in its own solar day, so the events are one a day, in order, never twice.
- **Days without the event**: near the poles the sun may not set for weeks (the midnight
  sun) or not rise (the polar night), and stays above or below the depression of a dawn or
  a dusk. astral says so (ValueError) and such days are passed over: the next occurrence
  is the next real event. A walk looks at most SOLAR_REACH ahead (or back), past a whole
  year: a place and an event with none in that long has none in any year, and the walk
  says so (None) instead of walking on.
- **The offset** moves every occurrence by the same signed amount (at most
  MAX_SOLAR_OFFSET either way): ``sunset`` with ``-00:30:00`` fires half an hour before
  sunset.

The instants are UTC, to the millisecond, like every instant here; a solar schedule has no
local wall time, so the DST policies do not apply to it. Its zone says in which zone its
previews show it and its calendars' days are read.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta

from astral import Observer, SunDirection
from astral import sun as astral_sun

from django_schedulinator.timing.instants import ONE_DAY, ONE_MS, truncate_ms
from django_schedulinator.timing.vocabulary import SolarEvent

# How far a walk looks for the next (or the previous) event: past a year, so every event
# that happens at a place in any year is found, and the search ends.
SOLAR_REACH_DAYS = 370
SOLAR_REACH = timedelta(days=SOLAR_REACH_DAYS)
MAX_SOLAR_OFFSET = timedelta(hours=12)
HALF_DAY = timedelta(hours=12)
QUARTER_DAY = timedelta(hours=6)
# The sun's elevation at each event (degrees; sunrise and sunset: its upper edge, with
# refraction, as astral and the almanacs reckon them).
SUNRISE_ELEVATION = -0.833
DEPRESSIONS: dict[str, float] = {
    SolarEvent.DAWN_ASTRONOMICAL: 18.0,
    SolarEvent.DAWN_NAUTICAL: 12.0,
    SolarEvent.DAWN_CIVIL: 6.0,
    SolarEvent.DUSK_CIVIL: 6.0,
    SolarEvent.DUSK_NAUTICAL: 12.0,
    SolarEvent.DUSK_ASTRONOMICAL: 18.0,
}
RISING = frozenset(
    {
        SolarEvent.DAWN_ASTRONOMICAL,
        SolarEvent.DAWN_NAUTICAL,
        SolarEvent.DAWN_CIVIL,
        SolarEvent.SUNRISE,
    }
)
EVENT_NAMES: dict[str, str] = {
    SolarEvent.DAWN_ASTRONOMICAL: "Astronomical dawn",
    SolarEvent.DAWN_NAUTICAL: "Nautical dawn",
    SolarEvent.DAWN_CIVIL: "Civil dawn",
    SolarEvent.SUNRISE: "Sunrise",
    SolarEvent.SOLAR_NOON: "Solar noon",
    SolarEvent.SUNSET: "Sunset",
    SolarEvent.DUSK_CIVIL: "Civil dusk",
    SolarEvent.DUSK_NAUTICAL: "Nautical dusk",
    SolarEvent.DUSK_ASTRONOMICAL: "Astronomical dusk",
}


def is_event(event: object) -> bool:
    return isinstance(event, str) and event in EVENT_NAMES


def event_on(event: str, latitude: float, longitude: float, day: date) -> datetime | None:
    """The event of the solar day around ``day``'s solar noon, to the millisecond; None
    when the sun does not reach the event's elevation that day."""
    return _event_on(str(event), float(latitude), float(longitude), day)


@functools.lru_cache(maxsize=65_536)
def _event_on(event: str, latitude: float, longitude: float, day: date) -> datetime | None:
    observer = Observer(latitude, longitude)
    noon = astral_sun.noon(observer, day, tzinfo=UTC)
    if event == SolarEvent.SOLAR_NOON:
        return truncate_ms(noon)
    rising = event in RISING
    direction = SunDirection.RISING if rising else SunDirection.SETTING
    if event in DEPRESSIONS:
        zenith = 90.0 + DEPRESSIONS[event]
    else:  # sunrise, sunset: the upper edge (astral adds the refraction)
        zenith = 90.0 + astral_sun.SUN_APPARENT_RADIUS
    try:
        at = astral_sun.time_of_transit(observer, day, zenith, direction)
    except ValueError:  # the sun does not reach that elevation: no such event that day
        return None
    # In its own solar day: a rising event in the 12 hours before noon, a setting one in
    # the 12 hours after (astral's answer may be a whole day off near midnight UTC).
    middle = noon - QUARTER_DAY if rising else noon + QUARTER_DAY
    at += round((middle - at) / ONE_DAY) * ONE_DAY
    return truncate_ms(at.astimezone(UTC))


def _offset(offset: timedelta | None) -> timedelta:
    """The offset in whole milliseconds, like every instant here."""
    return timedelta(milliseconds=(offset or timedelta(0)) // ONE_MS)


def solar_next(
    event: str, latitude: float, longitude: float, offset: timedelta | None, after: datetime
) -> datetime | None:
    """The first occurrence (the event plus the offset) strictly after ``after``; None when
    there is none within SOLAR_REACH (or before the year 9999)."""
    shift = _offset(offset)
    base = after - shift
    limit = base + SOLAR_REACH
    try:
        # The events of a day lie within 36 hours of its start (UTC): the day before
        # yesterday's are all at or before ``base``.
        day = base.astimezone(UTC).date() - timedelta(days=2)
        while datetime(day.year, day.month, day.day, tzinfo=UTC) <= limit:
            at = event_on(event, latitude, longitude, day)
            if at is not None and at > base:
                return at + shift
            day += ONE_DAY
    except OverflowError:  # past the year 9999
        return None
    return None


def solar_prev(
    event: str, latitude: float, longitude: float, offset: timedelta | None, before: datetime
) -> datetime | None:
    """The last occurrence strictly before ``before`` (the mirror image of
    ``solar_next``)."""
    shift = _offset(offset)
    base = before - shift
    limit = base - SOLAR_REACH
    try:
        day = base.astimezone(UTC).date() + timedelta(days=2)
        while datetime(day.year, day.month, day.day, tzinfo=UTC) + ONE_DAY >= limit:
            at = event_on(event, latitude, longitude, day)
            if at is not None and at < base:
                return at + shift
            day -= ONE_DAY
    except OverflowError:  # before the year 1
        return None
    return None


def _always(event: str, latitude: float, longitude: float, day: date) -> str:
    """Why ``event`` does not happen on the solar day ``day``: where the sun stays."""
    observer = Observer(float(latitude), float(longitude))
    noon = astral_sun.noon(observer, day, tzinfo=UTC)
    highest = astral_sun.elevation(observer, noon)
    depression = DEPRESSIONS.get(event)
    if depression is None:
        if highest < SUNRISE_ELEVATION:
            return "the sun stays below the horizon all day, the polar night"
        return "the sun stays above the horizon all day, the midnight sun"
    if highest < -depression:
        return f"the sun stays more than {depression:g}° below the horizon all day"
    return f"the sun does not sink {depression:g}° below the horizon"


def gap_note(
    event: str, latitude: float, longitude: float, offset: timedelta | None, at: datetime
) -> str:
    """A sentence for the occurrence at ``at`` when days without the event come before it
    (the polar night, the midnight sun), else ""."""
    before = solar_prev(event, latitude, longitude, offset, at)
    if before is not None and at - before < ONE_DAY + HALF_DAY:
        return ""
    shift = _offset(offset)
    name = EVENT_NAMES.get(event, event).lower()
    if before is None:
        why = _always(event, latitude, longitude, (at - shift - ONE_DAY).date())
        return f"The first {name} here for more than {SOLAR_REACH_DAYS} days: {why} until then."
    # Where the sun stays, read in the middle of the days without the event (at their
    # edges it grazes the elevation).
    middle = (before + (at - before) / 2 - shift).date()
    why = _always(event, latitude, longitude, middle)
    days = (at - before) // ONE_DAY
    return (
        f"The first {name} here after {days} days without one "
        f"(since {before - shift:%Y-%m-%d}): {why} in between."
    )


def never_text(event: str, latitude: float, longitude: float, now: datetime) -> str:
    """Why a solar schedule has no occurrence at all: the event does not happen at the
    place on any day within SOLAR_REACH of ``now``."""
    name = EVENT_NAMES.get(event, event).lower()
    why = _always(event, latitude, longitude, now.astimezone(UTC).date())
    return (
        f"There is no {name} at {place_text(latitude, longitude)} on any day within "
        f"{SOLAR_REACH_DAYS} days: the schedule would never fire (today {why})."
    )


def coordinate_text(value: float) -> str:
    """A coordinate as given, with at least two decimals: 13.4 is "13.40"."""
    text = f"{float(value):.6f}".rstrip("0")
    whole, _, decimals = text.partition(".")
    return f"{whole}.{decimals.ljust(2, '0')}"


def place_text(latitude: float, longitude: float) -> str:
    return f"{coordinate_text(latitude)}, {coordinate_text(longitude)}"


def offset_text(offset: timedelta | None) -> str:
    """The offset in words, signed: "+15 min", "-1 h 30 min", "" for none."""
    if not offset:
        return ""
    sign = "-" if offset < timedelta(0) else "+"
    seconds = abs(offset).total_seconds()
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h"] if hours else []
    if minutes:
        parts.append(f"{minutes} min")
    fraction = seconds - whole
    if secs or fraction:
        parts.append(f"{secs + fraction:g} s")
    return sign + " ".join(parts)


def describe_solar(
    event: str, latitude: float | None, longitude: float | None, offset: timedelta | None
) -> str:
    """ "Sunset at 52.52, 13.40, +15 min"."""
    name = EVENT_NAMES.get(event, str(event))
    if latitude is None or longitude is None:
        return name
    text = f"{name} at {place_text(latitude, longitude)}"
    words = offset_text(offset)
    return f"{text}, {words}" if words else text
