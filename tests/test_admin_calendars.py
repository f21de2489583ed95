"""Calendars of excluded days in the admin: the days typed, read from the holidays package or
from an iCalendar file, through the services (a change re-plans the schedules that name
the calendar); a source that cannot be read is an error on its field; a calendar in use is
not deleted; the schedule form names calendars and its live preview shows their days."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_schedulinator import services
from django_schedulinator.models import Calendar, Schedule, ScheduleChange

from .support.admin_pages import change_url, form_data
from .support.commits import committed
from .support.rule_work import RuleWork
from .support.schedules import model_fields
from .test_calendars import ICAL
from .test_ical import SECONDLY

pytestmark = pytest.mark.django_db

ADD = reverse("admin:django_schedulinator_calendar_add")


def calendar_data(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "office",
        "description": "",
        "timezone": "Europe/Berlin",
        "weekend": ["6", "7"],
        "source": "manual",
        "country": "",
        "subdivision": "",
        "years": "",
        "days_text": "2099-12-24 Christmas Eve\n\n2099-12-31",
    }
    data.update(overrides)
    return data


def edit_url(calendar: Calendar) -> str:
    return reverse("admin:django_schedulinator_calendar_change", args=[calendar.pk])


def test_days_typed_by_hand(admin_client: Client) -> None:
    response = admin_client.post(ADD, calendar_data())
    assert response.status_code == 302, response.content.decode()[:3000]
    office = Calendar.objects.get(name="office")
    assert list(office.days.values_list("day", "name")) == [
        (date(2099, 12, 24), "Christmas Eve"),
        (date(2099, 12, 31), ""),
    ]
    assert office.weekend == [6, 7]
    page = admin_client.get(edit_url(office)).content.decode()
    assert "2099-12-24 Christmas Eve" in page
    assert "no schedule" in page


def test_a_day_that_is_not_a_date_is_an_error_on_its_line(admin_client: Client) -> None:
    response = admin_client.post(ADD, calendar_data(days_text="2099-12-24\nChristmas"))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert errors["days_text"] == ["Line 2: 'Christmas' is not a date (YYYY-MM-DD)."]
    assert not Calendar.objects.exists()


def test_public_holidays_with_the_countrys_weekend(admin_client: Client) -> None:
    data = calendar_data(name="israel", source="holidays", country="IL", years="2026",
                         weekend=[], days_text="")  # fmt: skip
    response = admin_client.post(ADD, data)
    assert response.status_code == 302
    israel = Calendar.objects.get(name="israel")
    assert israel.weekend == [5, 6]  # Friday and Saturday
    assert israel.days.filter(day__year=2026).count() >= 5
    response = admin_client.post(ADD, calendar_data(name="x", source="holidays", country="XX"))
    assert "does not know it" in str(response.context["adminform"].form.errors["country"])
    response = admin_client.post(ADD, calendar_data(name="y", source="holidays", years="20x6"))
    errors = response.context["adminform"].form.errors
    assert errors["years"] == ["Enter the years as 2026-2036, or one year."]


@pytest.mark.parametrize("country", ["JAN", "MON", "PUBLIC"])
def test_a_country_the_holidays_package_does_not_list_is_an_error_of_its_field(
    admin_client: Client, country: str
) -> None:
    data = calendar_data(name="x", source="holidays", country=country, years="2026")
    response = admin_client.post(ADD, data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["country"]
    assert "does not know it" in errors["country"][0]
    response = admin_client.post(ADD, {**data, "country": "GB", "subdivision": "PUBLIC"})
    assert list(response.context["adminform"].form.errors) == ["subdivision"]
    assert not Calendar.objects.exists()


def test_an_icalendar_file(admin_client: Client) -> None:
    upload = SimpleUploadedFile("school.ics", ICAL, content_type="text/calendar")
    data = calendar_data(name="school", source="ical", years="2026", icalendar_file=upload)
    assert admin_client.post(ADD, data).status_code == 302
    assert Calendar.objects.get(name="school").days.count() == 4
    bad = SimpleUploadedFile("bad.ics", b"hello", content_type="text/calendar")
    response = admin_client.post(ADD, calendar_data(name="bad", source="ical", icalendar_file=bad))
    errors = response.context["adminform"].form.errors
    assert "Not an iCalendar file" in errors["icalendar_file"][0]
    response = admin_client.post(ADD, calendar_data(name="none", source="ical"))
    assert response.context["adminform"].form.errors["icalendar_file"] == [
        "Choose the iCalendar file to read."
    ]


def test_an_icalendar_rule_that_would_run_unbounded_is_an_error_of_the_upload(
    admin_client: Client, rule_work: RuleWork
) -> None:
    upload = SimpleUploadedFile("seconds.ics", SECONDLY, content_type="text/calendar")
    response = admin_client.post(
        ADD, calendar_data(name="seconds", source="ical", icalendar_file=upload)
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "icalendar_file": [
            "The iCalendar event 'Every second' repeats more often than daily "
            "(FREQ=SECONDLY): a calendar of excluded days takes whole days."
        ]
    }
    assert rule_work.instants == 0
    assert not Calendar.objects.exists()


def test_a_change_re_plans_and_a_calendar_in_use_is_not_deleted(admin_client: Client) -> None:
    admin_client.post(ADD, calendar_data(days_text="2099-01-01"))
    office = Calendar.objects.get(name="office")
    with committed():
        daily = services.create(
            Schedule(**model_fields(name="daily", cron="0 9 * * *", timezone="UTC",
                                    calendars=["office"], calendar_rule="next_business_day",
                                    start_at=datetime(2098, 12, 31, 10, tzinfo=UTC)))
        )  # fmt: skip
    assert daily.next_run_at == datetime(2099, 1, 2, 9, tzinfo=UTC)  # 1 January moved
    response = admin_client.post(edit_url(office), calendar_data(days_text=""), follow=True)
    assert "Re-planned 1 schedule(s)" in response.content.decode()
    daily.refresh_from_db()
    assert daily.next_run_at == datetime(2099, 1, 1, 9, tzinfo=UTC)
    entry = ScheduleChange.objects.get(schedule=daily, action="replanned")
    assert (entry.source, entry.actor_name) == ("admin", "admin")

    response = admin_client.post(edit_url(office), calendar_data(name="renamed"))
    assert response.context["adminform"].form.errors["name"] == [
        "Schedules name this calendar (daily): it keeps its name."
    ]
    delete = reverse("admin:django_schedulinator_calendar_delete", args=[office.pk])
    page = admin_client.get(delete).content.decode()
    assert "Schedule daily names the calendar office." in page
    admin_client.post(delete, {"post": "yes"})
    assert Calendar.objects.filter(name="office").exists()


def test_the_schedule_form_names_calendars_and_its_preview_shows_them(
    admin_client: Client,
) -> None:
    admin_client.post(ADD, calendar_data(days_text="2099-01-01 New Year"))
    data = form_data(
        name="daily", cron="0 9 * * *", timezone="UTC", calendars="office",
        start_at_0="2098-12-31", start_at_1="12:00:00",
    )  # fmt: skip
    preview = reverse("admin:django_schedulinator_schedule_preview")
    answer = admin_client.post(preview, data).json()
    assert "not on days excluded by office" in answer["description"]
    assert "Excluded: New Year, 2099-01-01 (calendar office)." in answer["preview"]
    response = admin_client.post(reverse("admin:django_schedulinator_schedule_add"), data)
    assert response.status_code == 302
    daily = Schedule.objects.get(name="daily")
    assert daily.calendars == ["office"]
    page = admin_client.get(change_url(daily)).content.decode()
    assert 'name="calendars" value="office"' in page


def test_the_list_counts_the_days_in_its_one_query(admin_client: Client) -> None:
    for name in ("a", "b", "c"):
        admin_client.post(ADD, calendar_data(name=name, days_text="2099-01-01\n2099-01-02"))
    changelist = reverse("admin:django_schedulinator_calendar_changelist")
    with CaptureQueriesContext(connection) as captured:
        page = admin_client.get(changelist)
    one_each = '"django_schedulinator_excludedday"."calendar_id" = '
    assert not [q for q in captured.captured_queries if one_each in q["sql"]]
    assert page.context["cl"].result_list[0].day_total == 2


def test_the_schedule_form_labels_the_calendars_and_links_to_adding_one(
    admin_client: Client,
) -> None:
    add_schedule = reverse("admin:django_schedulinator_schedule_add")
    add_calendar = reverse("admin:django_schedulinator_calendar_add")
    html = admin_client.get(add_schedule).content.decode()
    # A label like the others (not "calendars:"), and no empty box while there is none.
    assert re.search(r">\s*Calendars:\s*<", html)
    assert "calendars:" not in html
    assert 'class="schedulinator-no-calendars"' in html
    assert "No calendar of excluded days exists yet." in html
    link = re.search(r'<a href="([^"]+)" id="schedulinator-add-calendar"[^>]*>([^<]+)</a>', html)
    assert link is not None
    assert link.groups() == (add_calendar, "Add a calendar")

    Calendar.objects.create(name="office", timezone="Europe/Berlin")
    html = admin_client.get(add_schedule).content.decode()
    assert 'value="office"' in html
    assert "schedulinator-no-calendars" not in html
    assert ">Add another calendar</a>" in html


def test_the_calendar_link_is_only_for_those_who_may_add_one(
    django_user_model: Any, client: Client
) -> None:
    user = django_user_model.objects.create_user("editor", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_schedulinator",
            codename__in=["add_schedule", "view_schedule", "view_calendar"],
        )
    )
    client.force_login(user)
    html = client.get(reverse("admin:django_schedulinator_schedule_add")).content.decode()
    assert "No calendar of excluded days exists yet." in html
    assert "schedulinator-add-calendar" not in html
