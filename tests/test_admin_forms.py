"""The admin's add form (``django_schedulinator/admin/forms.py``) against the bad-input matrix
(``tests/support/rejections.py``): a field-named error, the form shown again, nothing
written. The rest of the admin is in ``test_admin.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

from django_schedulinator.conf import MAX_JSON_DEPTH
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Schedule
from django_schedulinator.timing import to_ms

from .support.admin_pages import form_data
from .support.commits import Client
from .support.rejections import (
    ADMIN_CASES,
    DEEP,
    assert_field_error,
    assert_nothing_written,
    deep_value,
)
from .support.schedules import model_fields

# pytest-django's admin_client creates a superuser: hash its password cheaply.
pytestmark = pytest.mark.usefixtures("fast_password_hashing")

ADD_URL = "admin:django_schedulinator_schedule_add"


@pytest.mark.django_db
@pytest.mark.usefixtures("small_payload_limit")
@pytest.mark.parametrize(("overrides", "field", "fragment"), ADMIN_CASES)
def test_admin_form_rejects_bad_input(
    admin_client: Client,
    overrides: dict[str, str],
    field: str,
    fragment: str,
    key_prefix: str,
    redis_client: Any,
) -> None:
    page = admin_client.post(reverse(ADD_URL), form_data(**overrides))
    assert page.status_code == 200  # the form again: not a redirect, not a 500
    assert_field_error(page.context["adminform"].form.errors, field, fragment)
    assert_nothing_written(redis_client, key_prefix)


@pytest.mark.django_db
def test_admin_form_rejects_a_duplicate_name(
    admin_client: Client, key_prefix: str, redis_client: Any
) -> None:
    Schedule.objects.bulk_create([Schedule(**model_fields())])  # no signal: nothing indexed
    page = admin_client.post(reverse(ADD_URL), form_data(cron="0 4 * * *"))
    assert page.status_code == 200
    assert_field_error(page.context["adminform"].form.errors, "name", "already exists")
    assert_nothing_written(redis_client, key_prefix, schedules=1)


# -- positive controls: odd names are data, never part of a Redis key or script ---------------


@pytest.mark.django_db
def test_an_odd_name_added_in_the_admin_is_indexed(admin_client: Client, index: DueIndex) -> None:
    name = "{tag} über *?"
    page = admin_client.post(reverse(ADD_URL), form_data(name=name))
    assert page.status_code == 302
    schedule = Schedule.objects.get(name=name)
    assert index.scores([schedule.pk]) == {schedule.pk: to_ms(schedule.next_run_at)}


# -- JSON nested deeper than Python's json (and the databases) can take -----------------------


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["args", "kwargs"])
@pytest.mark.parametrize("levels", [DEEP, MAX_JSON_DEPTH + 1])
def test_admin_form_names_args_nested_too_deep(
    admin_client: Client, key_prefix: str, redis_client: Any, field: str, levels: int
) -> None:
    text = json.dumps(deep_value(field, min(levels, 500)))
    if levels > 500:  # json.dumps itself cannot write it: spell it out
        text = (
            "[" * levels + "]" * levels
            if field == "args"
            else '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)
        )
    page = admin_client.post(reverse(ADD_URL), form_data(**{field: text}))
    assert page.status_code == 200  # the form again: not a redirect, not a 500
    assert_field_error(page.context["adminform"].form.errors, field, f"{MAX_JSON_DEPTH} levels")
    assert_nothing_written(redis_client, key_prefix)
