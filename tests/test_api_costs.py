"""What a request of the API costs, in what can be counted (never in time): the statements a
read sends, the serializer fields built once per class and not per request, no FilterSet
built when the query string names no filter, and one URL reversal for a page of schedules.

The figures per request (CPU under gunicorn) are benchmarks/api.py's, in docs/benchmarks.md.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework import serializers as drf

from django_schedulinator import services
from django_schedulinator.api import filters as api_filters
from django_schedulinator.api import serializers as s
from django_schedulinator.api.serializers.fields import _copy_of
from django_schedulinator.models import Calendar, Schedule

from .support.commits import APIClient, committed
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db

API = "/api/schedulinator/"


@pytest.fixture
def api() -> APIClient:
    # A superuser, authenticated without a query: what is counted is the API's own work.
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("admin", "admin@example.com", None))
    return client


def test_a_get_of_one_schedule_reads_its_row_in_one_statement(
    api: APIClient, django_assert_num_queries: Any
) -> None:
    schedule = make_schedule(kind="cron", cron="0 6 * * 1-5", timezone="Europe/Berlin")
    with django_assert_num_queries(1):
        response = api.get(f"{API}schedules/{schedule.pk}/")
    assert response.status_code == 200
    assert response.json()["description"] == "At 06:00, Monday through Friday (Europe/Berlin)"


def test_a_page_of_schedules_is_a_count_and_a_page(
    api: APIClient, django_assert_num_queries: Any
) -> None:
    for _ in range(3):
        make_schedule()
    with django_assert_num_queries(2):
        assert api.get(f"{API}schedules/").status_code == 200


def test_schedules_that_name_calendars_cost_no_more(
    api: APIClient, django_assert_num_queries: Any
) -> None:
    # The description names the calendars: it reads neither them nor their days.
    with committed():
        services.save_calendar(Calendar(name="hols"), days=[(date(2099, 1, 1), "")])
    for _ in range(3):
        make_schedule(kind="cron", cron="0 6 * * *", calendars=["hols"])
    with django_assert_num_queries(2):
        page = api.get(f"{API}schedules/")
    assert page.json()["results"][0]["description"].endswith("; not on days excluded by hols")


def test_a_page_of_runs_is_one_statement(api: APIClient, django_assert_num_queries: Any) -> None:
    make_schedule()
    with django_assert_num_queries(1):  # a cursor: no count
        assert api.get(f"{API}runs/").status_code == 200


def test_each_schedule_of_a_page_links_its_own_runs(api: APIClient) -> None:
    ids = sorted(make_schedule(name=f"s{n}").pk for n in range(3))
    page = api.get(f"{API}schedules/?ordering=id").json()["results"]
    assert [item["runs_url"] for item in page] == [
        f"http://testserver{API}runs/?schedule={pk}" for pk in ids
    ]


def test_the_serializer_fields_are_built_once_per_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Built from the model once; each serializer binds copies of its own, so what one
    instance sets on its fields (the task's choices, its parent) is not another's."""
    built = []
    original = drf.ModelSerializer.get_fields

    def counted(self: Any) -> Any:
        built.append(type(self))
        return original(self)

    monkeypatch.setattr(drf.ModelSerializer, "get_fields", counted)
    monkeypatch.delattr(s.ScheduleSerializer, "_fields_built", raising=False)
    kept = make_schedule()
    gone = make_schedule()
    Schedule.objects.filter(pk=gone.pk).update(task="gone.task")
    gone.refresh_from_db()

    first, second = s.ScheduleSerializer(kept), s.ScheduleSerializer(gone)
    assert first.data["id"] == kept.pk
    assert second.data["task"] == "gone.task"
    assert built == [s.ScheduleSerializer]

    assert first.fields["name"] is not second.fields["name"]
    assert first.fields["name"].parent is first
    assert second.fields["name"].parent is second
    # The schedule whose task is gone keeps it as a choice; the other does not offer it.
    first_task, second_task = first.fields["task"], second.fields["task"]
    assert isinstance(first_task, drf.ChoiceField)
    assert isinstance(second_task, drf.ChoiceField)
    assert "gone.task" in second_task.choices
    assert "gone.task" not in first_task.choices
    refused = s.ScheduleSerializer(kept, data={"task": "gone.task"}, partial=True)
    assert not refused.is_valid()
    assert "task" in refused.errors


def test_no_filterset_is_built_when_no_filter_is_named(
    api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = []
    original = api_filters.ScheduleFilter.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append(kwargs.get("data"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(api_filters.ScheduleFilter, "__init__", counted)
    schedule = make_schedule(kind="cron")
    assert api.get(f"{API}schedules/{schedule.pk}/").status_code == 200
    assert api.get(f"{API}schedules/?page=1&ordering=name").status_code == 200
    assert made == []
    # A filter named still filters, on one schedule as on the list, and is still validated.
    assert api.get(f"{API}schedules/{schedule.pk}/?kind=interval").status_code == 404
    assert api.get(f"{API}schedules/{schedule.pk}/?kind=cron").status_code == 200
    assert api.get(f"{API}schedules/?kind=nonsense").status_code == 400
    assert len(made) == 3


def test_a_field_with_a_child_is_copied_with_its_child() -> None:
    """A plain field is copied shallowly; one with a child (a list field, a nested or
    many-related field) deeply, so the copy's child is bound to the copy, not the class's."""
    listed = drf.ListField(child=drf.IntegerField())
    copied = _copy_of(listed)
    assert copied.child is not listed.child
    assert copied.child.parent is copied
    plain = drf.CharField(max_length=5)
    shallow = _copy_of(plain)
    assert shallow is not plain
    assert shallow.max_length == 5
