"""Solar schedules' timing (``timing.solar``): hand-checked against published almanac times
(sunrise and sunset in London at midsummer and in Berlin at midwinter, to the minute),
against Celery's own ``solar`` (PyEphem, a separate implementation) for every event, and
through the polar night and the midnight sun in Tromsø, where the walk passes days without
the event over, says why in the preview, and never walks on for ever."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import solar as celery_solar
from hypothesis import example, given, settings
from hypothesis import strategies as st

from django_schedulinator import timing
from django_schedulinator.timing import solar

LONDON = (51.5074, -0.1278)
BERLIN = (52.52, 13.405)
TROMSO = (69.65, 18.96)
MINUTE = timedelta(minutes=1)


def at(event: str, place: tuple[float, float], after: datetime, **fields: Any) -> datetime:
    found = timing.solar_next(event, *place, fields.get("offset"), after)
    assert found is not None
    return found


def local(instant: datetime, zone: str) -> datetime:
    return instant.astimezone(ZoneInfo(zone))


def spec(event: str, place: tuple[float, float], **fields: Any) -> timing.Timing:
    return timing.Timing(
        kind="solar", solar_event=event, latitude=place[0], longitude=place[1], **fields
    )


@pytest.mark.parametrize(
    ("event", "place", "zone", "day", "published"),
    [
        # HM Nautical Almanac Office / timeanddate.com, the times every almanac prints.
        ("sunrise", LONDON, "Europe/London", date(2026, 6, 21), "04:43"),
        ("sunset", LONDON, "Europe/London", date(2026, 6, 21), "21:21"),
        ("sunrise", BERLIN, "Europe/Berlin", date(2026, 12, 21), "08:15"),
        ("sunset", BERLIN, "Europe/Berlin", date(2026, 12, 21), "15:54"),
    ],
)
def test_sunrise_and_sunset_are_the_almanacs_to_the_minute(
    event: str, place: tuple[float, float], zone: str, day: date, published: str
) -> None:
    midnight = datetime.combine(day, datetime.min.time(), tzinfo=ZoneInfo(zone))
    found = local(at(event, place, midnight), zone)
    hour, minute = map(int, published.split(":"))
    expected = midnight.replace(hour=hour, minute=minute)
    assert found.date() == day
    # An almanac rounds to the minute: within a minute of the printed one.
    assert abs(found - expected) <= MINUTE, found


@pytest.mark.parametrize("event", list(timing.SolarEvent))
@pytest.mark.parametrize(
    ("place", "after"),
    [
        (BERLIN, datetime(2026, 3, 10, tzinfo=UTC)),
        (LONDON, datetime(2026, 9, 1, 12, tzinfo=UTC)),
        ((-33.87, 151.21), datetime(2026, 1, 15, tzinfo=UTC)),  # Sydney, its summer
        ((40.71, -74.01), datetime(2026, 11, 3, 18, tzinfo=UTC)),  # New York
    ],
)
def test_every_event_agrees_with_celerys_solar_within_two_minutes(
    event: str, place: tuple[float, float], after: datetime
) -> None:
    """Celery computes its ``solar`` with PyEphem (its own ephemeris and refraction): an
    import keeps each schedule's times within a minute or two (the most apart here: 73 s,
    Sydney's summer sunrise)."""
    theirs = celery_solar(event, *place, nowfun=lambda: after)
    expected = after + theirs.remaining_estimate(after)
    assert abs(at(event, place, after) - expected) < 2 * MINUTE


def test_the_events_of_a_day_come_in_their_order() -> None:
    """Dawn is the sun 18, 12, then 6 degrees below the horizon; dusk the same after sunset."""
    after = datetime(2026, 3, 20, tzinfo=UTC)
    times = [at(event, BERLIN, after) for event in timing.SolarEvent]
    assert times == sorted(times)
    assert times[-1] - times[0] < timedelta(hours=17)
    # Civil twilight lasts about 35 minutes at 52.5 degrees at the equinox; each depression
    # of 6 degrees more, about 40 more.
    dawn = dict(zip(timing.SolarEvent, times, strict=True))
    sunrise = dawn[timing.SolarEvent.SUNRISE]
    assert (
        timedelta(minutes=30) < sunrise - dawn[timing.SolarEvent.DAWN_CIVIL] < timedelta(minutes=40)
    )
    assert (
        timedelta(minutes=35)
        < dawn[timing.SolarEvent.DAWN_CIVIL] - dawn[timing.SolarEvent.DAWN_NAUTICAL]
        < timedelta(minutes=45)
    )


def test_tromso_at_midsummer_the_next_sunset_is_the_first_after_the_midnight_sun() -> None:
    """69.65 N: the sun does not set from the night of 17-18 May to that of 26-27 July
    (published: the midnight sun lasts "from about 18 May to 26 July"). PyEphem puts the first
    sunset a day earlier: so near the threshold, the sun's lowest point grazes the horizon
    for days, and the models' refraction tells them apart by a day."""
    midsummer = datetime(2026, 6, 21, 12, tzinfo=UTC)
    sunset = at("sunset", TROMSO, midsummer)
    assert local(sunset, "Europe/Oslo").strftime("%Y-%m-%d %H:%M") == "2026-07-27 00:10"
    theirs = celery_solar("sunset", *TROMSO, nowfun=lambda: midsummer)
    ephem = midsummer + theirs.remaining_estimate(midsummer)
    assert abs(sunset - ephem) < timedelta(days=1, hours=1)
    # The last one before it, the other way.
    last = timing.solar_prev("sunset", *TROMSO, None, midsummer)
    assert last is not None
    assert local(last, "Europe/Oslo").strftime("%Y-%m-%d %H:%M") == "2026-05-18 00:20"


def test_tromso_at_midwinter_the_next_sunrise_ends_the_polar_night() -> None:
    """Published: the sun stays below the horizon "from about 26 November to 15 January"."""
    midwinter = datetime(2026, 12, 21, 12, tzinfo=UTC)
    sunrise = at("sunrise", TROMSO, midwinter)
    assert local(sunrise, "Europe/Oslo").strftime("%Y-%m-%d %H:%M") == "2027-01-16 11:19"
    # The civil dawn goes on all winter: the sun is never more than 6 degrees down at noon.
    dawn = at("dawn_civil", TROMSO, midwinter)
    assert dawn - midwinter < timedelta(days=1)


def test_the_preview_says_why_days_were_passed_over() -> None:
    tromso = spec("sunset", TROMSO, timezone="Europe/Oslo")
    items = timing.preview(tromso, start=datetime(2026, 5, 16, tzinfo=UTC), count=3)
    assert [f"{i.local:%m-%d %H:%M}" for i in items] == [
        "05-16 23:59",
        "05-18 00:20",
        "07-27 00:10",
    ]
    assert [bool(i.note) for i in items] == [False, False, True]
    assert items[2].note == (
        "The first sunset here after 69 days without one (since 2026-05-17): the sun stays "
        "above the horizon all day, the midnight sun in between."
    )
    assert not items[2].skipped
    night = spec("sunrise", TROMSO, timezone="Europe/Oslo")
    first = timing.preview(night, start=datetime(2026, 12, 1, tzinfo=UTC), count=1)[0]
    assert "the sun stays below the horizon all day, the polar night" in first.note
    london = spec("dusk_astronomical", LONDON, timezone="Europe/London")
    summer = timing.preview(london, start=datetime(2026, 6, 21, tzinfo=UTC), count=1)[0]
    assert "the sun does not sink 18° below the horizon" in summer.note


def test_astronomical_dusk_in_london_skips_the_white_nights() -> None:
    """At 51.5 N the sun stays within 18 degrees of the horizon all night around midsummer:
    the next astronomical dusk is in late July (PyEphem's within a day)."""
    midsummer = datetime(2026, 6, 21, 12, tzinfo=UTC)
    dusk = at("dusk_astronomical", LONDON, midsummer)
    assert dusk.date() == date(2026, 7, 22)
    theirs = celery_solar("dusk_astronomical", *LONDON, nowfun=lambda: midsummer)
    assert abs(dusk - (midsummer + theirs.remaining_estimate(midsummer))) < timedelta(days=1)


@pytest.mark.parametrize("minutes", [15, -30, 720, -720])
def test_the_offset_moves_every_occurrence(minutes: int) -> None:
    offset = timedelta(minutes=minutes)
    after = datetime(2026, 6, 21, 12, tzinfo=UTC)
    plain = spec("sunset", LONDON)
    shifted = spec("sunset", LONDON, solar_offset=offset)
    base = [m.at for m in _take(timing.occurrences(plain, after - offset), 4)]
    moved = [m.at for m in _take(timing.occurrences(shifted, after), 4)]
    assert moved == [b + offset for b in base]
    assert moved[0] > after


def test_an_offset_before_the_event_already_passed_today_fires_tomorrow() -> None:
    sunset = at("sunset", LONDON, datetime(2026, 6, 21, tzinfo=UTC))
    half_hour_before = timedelta(minutes=-30)
    found = at("sunset", LONDON, sunset - timedelta(minutes=10), offset=half_hour_before)
    tomorrow = at("sunset", LONDON, sunset)
    assert found == tomorrow + half_hour_before


def _take(moments: Any, count: int) -> list[timing.Moment]:
    return [m for _, m in zip(range(count), moments, strict=False)]


def test_a_place_without_the_event_has_no_next_run_and_the_walk_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A place where the event never happens: the walk looks a little more than a year
    ahead (or back), then says there is none, and validation says why."""
    calls: list[date] = []

    def never(event: str, latitude: float, longitude: float, day: date) -> None:
        calls.append(day)

    monkeypatch.setattr(solar, "event_on", never)
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert timing.solar_next("sunset", 89.0, 0.0, None, after) is None
    assert len(calls) <= timing.SOLAR_REACH_DAYS + 4
    calls.clear()
    assert timing.solar_prev("sunset", 89.0, 0.0, None, after) is None
    assert len(calls) <= timing.SOLAR_REACH_DAYS + 4
    assert timing.following(spec("sunset", (89.0, 0.0)), after, after) is None
    errors = spec("sunset", (89.0, 0.0)).validate()
    assert list(errors) == ["solar_event"]
    assert errors["solar_event"].startswith(
        "There is no sunset at 89.00, 0.00 on any day within 370 days: the schedule would "
        "never fire (today the sun stays "
    )


def test_the_real_poles_walk_a_bounded_number_of_days() -> None:
    """At the pole the sun rises and sets about once a year: whether the day-by-day model
    finds that day or not, each look ends within the reach."""
    after = datetime(2026, 1, 1, tzinfo=UTC)
    for event in ("sunset", "sunrise", "dusk_civil"):
        found = timing.solar_next(event, 90.0, 0.0, None, after)
        assert found is None or after < found <= after + timedelta(days=timing.SOLAR_REACH_DAYS)


@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        (
            {"solar_event": "sunst"},
            {"solar_event": "Unknown solar event 'sunst'; use one of dawn_astronomical, "
             "dawn_nautical, dawn_civil, sunrise, solar_noon, sunset, dusk_civil, "
             "dusk_nautical, dusk_astronomical."},
        ),
        (
            {"solar_event": ""},
            {"solar_event": "A solar schedule needs an event: one of dawn_astronomical, "
             "dawn_nautical, dawn_civil, sunrise, solar_noon, sunset, dusk_civil, "
             "dusk_nautical, dusk_astronomical."},
        ),
        ({"latitude": 90.5}, {"latitude": "The latitude must be between -90 and 90 degrees."}),
        (
            {"latitude": float("nan")},
            {"latitude": "The latitude must be between -90 and 90 degrees."},
        ),
        ({"longitude": -181}, {"longitude": "The longitude must be between -180 and 180 degrees."}),
        ({"longitude": None}, {"longitude": "A solar schedule needs a longitude."}),
        ({"latitude": "north"}, {"latitude": "Enter the latitude as a number of degrees."}),
        (
            {"solar_offset": timedelta(hours=-13)},
            {"solar_offset": "The offset must be between -12:00:00 and 12:00:00."},
        ),
    ],
)  # fmt: skip
def test_validation_names_each_bad_field(fields: dict[str, Any], errors: dict[str, str]) -> None:
    values: dict[str, Any] = {"solar_event": "sunset", "latitude": 52.52, "longitude": 13.4}
    assert timing.Timing(kind="solar", **{**values, **fields}).validate() == errors


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"solar_offset": timedelta(minutes=15)}, "Sunset at 52.52, 13.40, +15 min"),
        ({"solar_offset": timedelta(minutes=-90)}, "Sunset at 52.52, 13.40, -1 h 30 min"),
        ({"solar_event": "dawn_civil"}, "Civil dawn at 52.52, 13.40"),
        ({"latitude": -33.8688, "longitude": 151.2093}, "Sunset at -33.8688, 151.2093"),
    ],
)
def test_the_description(fields: dict[str, Any], text: str) -> None:
    values: dict[str, Any] = {"solar_event": "sunset", "latitude": 52.52, "longitude": 13.4}
    assert timing.describe(timing.Timing(kind="solar", **{**values, **fields})) == text


@settings(max_examples=60, deadline=None)
@given(
    latitude=st.floats(-89.9, 89.9),
    longitude=st.floats(-180, 180),
    event=st.sampled_from(list(timing.SolarEvent)),
    day=st.integers(0, 3 * 365),
)
# Near the pole the sun grazes -18 degrees for days: astral puts one dusk six hours after a
# solar noon and the next just after the following noon, 18 hours apart (found by CI).
@example(latitude=89.875, longitude=85.0, event=timing.SolarEvent.DUSK_ASTRONOMICAL, day=0)
def test_occurrences_are_one_a_day_in_order_and_the_walks_mirror_each_other(
    latitude: float, longitude: float, event: str, day: int
) -> None:
    """Anywhere, near the date line and the polar circles too: each occurrence is later
    than the one before and in a solar day of its own, and walking back from one finds the
    one before it. A day's rising event lies in the 12 hours before its noon, a setting one
    in the 12 hours after: two days' events are at least 12 hours apart (less a minute, as
    noon drifts), not 24, where the sun grazes the event's elevation near the poles."""
    after = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=day, hours=day % 24)
    found = _take(timing.occurrences(spec(event, (latitude, longitude)), after), 5)
    instants = [m.at for m in found]
    assert instants == sorted(set(instants))
    for earlier, later in itertools.pairwise(instants):
        assert later - earlier > solar.HALF_DAY - MINUTE
        assert timing.solar_prev(event, latitude, longitude, None, later) == earlier
        assert timing.solar_next(event, latitude, longitude, None, earlier) == later


def test_a_days_event_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim's hot path asks for the next run of many schedules at one place and event:
    a day's event is computed once."""
    calls: list[date] = []
    inner: Callable[..., Any] = solar._event_on.__wrapped__

    def counting(*args: Any) -> Any:
        calls.append(args[-1])
        return inner(*args)

    monkeypatch.setattr(solar, "_event_on", solar.functools.lru_cache(maxsize=64)(counting))
    after = datetime(2026, 4, 1, tzinfo=UTC)
    for _ in range(100):
        timing.solar_next("sunrise", *BERLIN, None, after)
    assert len(calls) == len(set(calls)) <= 4
