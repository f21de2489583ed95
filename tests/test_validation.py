"""Bad input gets a ValidationError that names the field, and nothing is written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_schedulinator.index import DueIndex
from django_schedulinator.models import Schedule

from .conftest import model_fields

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"cron": "61 * * * *"}, "cron", "Bad minute"),
        ({"cron": "* * *"}, "cron", "has 3"),
        ({"cron": ""}, "cron", "Enter a cron expression"),
        ({"cron": "@fortnightly"}, "cron", "Unknown cron alias"),
        ({"cron": "0 0 30 2 *"}, "cron", "Bad day-of-month"),
        ({"cron": "* * */20 * 1L"}, "cron", "never matches"),
        ({"cron": "* " * 300}, "cron", "at most 200"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", "Unknown time zone"),
        ({"timezone": "../../etc/passwd"}, "timezone", "Unknown time zone"),
        ({"task": "os.system"}, "task", "not a registered task"),
        ({"task": "tests.nope"}, "task", "not a registered task"),
        ({"args": {"a": 1}}, "args", "JSON list"),
        ({"args": "[1, 2"}, "args", "JSON list"),
        ({"args": [object()]}, "args", "valid JSON"),
        ({"kwargs": [1]}, "kwargs", "JSON object"),
        ({"kwargs": {"occurrence": 1}}, "kwargs", "reserved"),
        ({"kind": "interval", "interval": timedelta(0)}, "interval", "at least"),
        ({"kind": "interval", "interval": None}, "interval", "needs an interval"),
        ({"kind": "once", "run_at": None}, "run_at", "needs a time"),
        ({"kind": "once", "run_at": timezone.now() - timedelta(days=1)}, "run_at", "future"),
        ({"kind": "weekly"}, "kind", "not a valid choice"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(
    overrides: dict[str, Any], field: str, fragment: str, index: DueIndex
) -> None:
    with pytest.raises(ValidationError) as caught:
        Schedule(**model_fields(**overrides)).save()
    errors = caught.value.message_dict
    assert field in errors, errors
    assert any(fragment in message for message in errors[field]), errors
    assert not Schedule.objects.exists()
    assert index.client.zcard(index.due_key) == 0


def test_valid_schedule_is_saved_with_its_next_run() -> None:
    schedule = Schedule(**model_fields())
    schedule.save()
    schedule.refresh_from_db()
    assert schedule.next_run_at is not None
    assert schedule.next_run_at > timezone.now()
    assert schedule.revision == 1
