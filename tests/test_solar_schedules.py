"""Solar schedules end to end: created through the service, the API and the admin, then
fired by real scheduler passes (the claim script on a real Redis, the re-check, the ledger)
at the times ``timing.solar`` gives: through the midnight sun, on a calendar's excluded
day, with an offset. The rules of the walk are in ``test_timing_solar.py``."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from django_schedulinator import services, timing
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Calendar, ExcludedDay, Schedule

from .support.admin_pages import form_data
from .support.commits import Client, committed
from .support.simulation import Simulation, fired, skipped, utc

pytestmark = pytest.mark.django_db

TROMSO = {"latitude": 69.65, "longitude": 18.96}
BERLIN = {"latitude": 52.52, "longitude": 13.405}
API = "/api/schedulinator/"


def solar(name: str, **fields: Any) -> Schedule:
    with committed():
        return services.create({"name": name, "task": "tests.record", "kind": "solar", **fields})


def sunsets(
    place: dict[str, float], after: datetime, before: datetime, **kw: Any
) -> list[datetime]:
    spec = timing.Timing(kind="solar", solar_event="sunset", **place, **kw)
    found = []
    for moment in timing.occurrences(spec, after):
        if moment.at > before:
            break
        found.append(moment.at)
    return found


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_a_solar_schedule_fires_at_each_sunset_through_the_midnight_sun(
    sim: Simulation,
) -> None:
    """Created through the service in Tromsø in mid-May, run by the scheduler into August:
    one run a sunset, none while the sun does not set (18 May to 26 July), and the first
    sunset after it fires on its night."""
    sim.at(utc("2026-05-14T12:00"))
    schedule = solar("tromso-sunset", solar_event="sunset", timezone="Europe/Oslo", **TROMSO)
    assert schedule.description == "Sunset at 69.65, 18.96"
    assert schedule.next_run_at == utc("2026-05-14T21:35:00.634")

    sim.run_until(utc("2026-07-29T12:00"))

    runs = fired(schedule)
    assert runs == sunsets(TROMSO, utc("2026-05-14T12:00"), utc("2026-07-29T12:00"))
    assert [f"{r:%m-%d %H:%M}" for r in runs] == [
        "05-14 21:35", "05-15 21:46", "05-16 21:59", "05-17 22:20",
        "07-26 22:10", "07-27 21:56", "07-28 21:45",
    ]  # fmt: skip
    assert skipped(schedule) == []  # days without a sunset are no occurrences to skip
    schedule.refresh_from_db()
    assert f"{schedule.next_run_at:%m-%d %H:%M}" == "07-29 21:36"


@pytest.mark.django_db(transaction=True)
def test_an_offset_and_a_calendar_apply_as_for_any_schedule(sim: Simulation) -> None:
    """Half an hour before sunset in Berlin, not on the days a calendar excludes."""
    calendar = Calendar.objects.create(name="holidays", timezone="Europe/Berlin")
    ExcludedDay.objects.create(calendar=calendar, day=date(2026, 3, 28), name="a holiday")
    offset = timedelta(minutes=-30)
    schedule = solar(
        "berlin-dusk",
        solar_event="sunset",
        solar_offset=offset,
        calendars=["holidays"],
        timezone="Europe/Berlin",
        **BERLIN,
    )
    assert schedule.description == (
        "Sunset at 52.52, 13.405, -30 min; not on days excluded by holidays"
    )
    # Each sunset less the offset, but the one on the excluded day, recorded as skipped.

    sim.run_until(utc("2026-03-31T00:00"))

    expected = [s + offset for s in sunsets(BERLIN, START_SUNSET, utc("2026-03-31T00:00"))]
    holiday = [at for at in expected if at.date().isoformat() == "2026-03-28"]
    assert fired(schedule) == [at for at in expected if at not in holiday]
    assert skipped(schedule) == [(holiday[0], "calendar")]


START_SUNSET = utc("2026-03-27T12:30")  # simulation.START, less the offset


def test_the_service_names_each_bad_field() -> None:
    with pytest.raises(ValidationError) as raised:
        services.create(
            {
                "name": "nowhere",
                "task": "tests.record",
                "kind": "solar",
                "solar_event": "moonrise",
                "latitude": 95,
                "longitude": 13.4,
            }
        )
    errors = raised.value.message_dict
    assert errors["solar_event"][-1:] == [
        "Unknown solar event 'moonrise'; use one of dawn_astronomical, dawn_nautical, "
        "dawn_civil, sunrise, solar_noon, sunset, dusk_civil, dusk_nautical, dusk_astronomical."
    ]
    assert errors["latitude"] == ["The latitude must be between -90 and 90 degrees."]
    assert not Schedule.objects.exists()


def test_the_api_creates_and_previews_a_solar_schedule(admin_user: Any, index: DueIndex) -> None:
    api = APIClient()
    api.force_authenticate(admin_user)
    body = {
        "kind": "solar",
        "solar_event": "sunset",
        "timezone": "Europe/Oslo",
        **TROMSO,
    }
    preview = api.post(  # from a start in a May to come: the last sunset, then July's
        f"{API}schedules/preview/",
        {**body, "start_at": f"{datetime.now(UTC).year + 1}-05-17T12:00:00Z", "count": 2},
        format="json",
    )
    assert preview.status_code == 200, preview.content
    answer = preview.json()
    assert answer["description"] == "Sunset at 69.65, 18.96"
    last, first = answer["occurrences"]
    assert (last["local"][5:10], last["note"]) == ("05-18", "")
    assert first["local"][5:7] == "07"
    assert "days without one" in first["note"]
    assert "the midnight sun" in first["note"]

    with committed():
        created = api.post(
            f"{API}schedules/",
            {**body, "name": "at-sunset", "task": "tests.record", "solar_offset": -900},
            format="json",
        )
    assert created.status_code == 201, created.content
    made = created.json()
    assert (made["solar_event"], made["latitude"], made["solar_offset"]) == ("sunset", 69.65, -900)
    assert made["description"] == "Sunset at 69.65, 18.96, -15 min"
    schedule = Schedule.objects.get(pk=made["id"])
    assert index.scores([schedule.pk]) == {schedule.pk: timing.to_ms(schedule.due_at)}

    refused = api.post(
        f"{API}schedules/",
        {**body, "name": "nowhere", "task": "tests.record", "latitude": 91},
        format="json",
    )
    assert refused.status_code == 400
    assert refused.json()["latitude"] == ["Ensure this value is less than or equal to 90."]


@pytest.mark.usefixtures("fast_password_hashing")
def test_the_admin_adds_a_solar_schedule_and_previews_it(admin_client: Client) -> None:
    data = form_data(
        name="dawn",
        kind="solar",
        cron="",
        solar_event="dawn_civil",
        latitude="52.52",
        longitude="13.405",
        solar_offset="-00:10:00",
    )
    preview = admin_client.post(reverse("admin:django_schedulinator_schedule_preview"), data)
    assert preview.json()["description"] == "Civil dawn at 52.52, 13.405, -10 min"
    assert "schedulinator-preview" in preview.json()["preview"]

    page = admin_client.post(reverse("admin:django_schedulinator_schedule_add"), data)
    assert page.status_code == 302, page.context["adminform"].form.errors
    schedule = Schedule.objects.get(name="dawn")
    assert (schedule.kind, schedule.solar_offset) == ("solar", timedelta(minutes=-10))
    change = admin_client.get(
        reverse("admin:django_schedulinator_schedule_change", args=[schedule.pk])
    )
    assert 'value="-00:10:00"' in change.content.decode()  # as typed, not "-1 23:50:00"
    now = datetime.now(UTC)
    assert schedule.next_run_at is not None
    assert now < schedule.next_run_at < now + timedelta(days=1, minutes=10)


def test_moving_the_place_moves_the_next_run() -> None:
    schedule = solar("moved", solar_event="sunrise", **BERLIN)
    with committed():
        services.update(schedule, {"latitude": 40.71, "longitude": -74.01})  # New York
    schedule.refresh_from_db()
    assert schedule.description == "Sunrise at 40.71, -74.01"
    assert schedule.fired_through is not None
    expected = timing.solar_next("sunrise", 40.71, -74.01, None, schedule.fired_through)
    assert schedule.next_run_at == expected
