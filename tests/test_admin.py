"""The admin offers registered tasks only and writes through the same validation and sync."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_schedulinator.index import DueIndex
from django_schedulinator.models import Schedule
from django_schedulinator.timing import to_ms

from .conftest import form_data

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def admin_client() -> Client:
    user = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_the_task_field_lists_registered_tasks_only(admin_client: Client) -> None:
    page = admin_client.get(reverse("admin:django_schedulinator_schedule_add"))
    assert page.status_code == 200
    html = page.content.decode()
    assert '<option value="tests.record">' in html
    assert "os.system" not in html


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"task": "os.system"}, "task"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"timezone": "Nowhere/Land"}, "timezone"),
        ({"args": "[1, 2"}, "args"),
        ({"kwargs": "[1]"}, "kwargs"),
    ],
)
def test_bad_input_is_a_form_error_and_nothing_is_written(
    admin_client: Client, overrides: dict[str, str], field: str, index: DueIndex
) -> None:
    page = admin_client.post(
        reverse("admin:django_schedulinator_schedule_add"), form_data(**overrides)
    )
    assert page.status_code == 200  # the form again, with errors
    assert field in page.context["adminform"].form.errors
    assert not Schedule.objects.exists()
    assert index.client.zcard(index.due_key) == 0


def test_a_schedule_added_in_the_admin_is_indexed(admin_client: Client, index: DueIndex) -> None:
    page = admin_client.post(reverse("admin:django_schedulinator_schedule_add"), form_data())
    assert page.status_code == 302, page.content.decode()[:2000]
    schedule = Schedule.objects.get(name="nightly")
    assert index.scores([schedule.pk])[schedule.pk] == to_ms(schedule.next_run_at)
