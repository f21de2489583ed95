"""The validators of a schedule's fields live in their own module (validators.py), where the
model's fields and the migration name them."""

from __future__ import annotations

import importlib
import inspect

import pytest
from django.core.exceptions import ValidationError

from django_schedulinator import models
from django_schedulinator.models import Schedule, validators

MOVED = (
    "validate_registered_task", "validate_name", "validate_json_list", "validate_json_object",
    "validate_json_depth", "json_too_deep", "json_text_too_deep", "json_too_deep_error",
    "JSON_TOO_DEEP", "payload_errors", "grace_errors", "MAX_GRACE",
)  # fmt: skip


def test_the_fields_name_the_validators_of_their_module() -> None:
    for field, validator in (
        ("name", validators.validate_name),
        ("task", validators.validate_registered_task),
        ("args", validators.validate_json_list),
        ("kwargs", validators.validate_json_object),
    ):
        assert validator in Schedule._meta.get_field(field).validators


def test_the_migration_names_the_validators_by_their_new_path() -> None:
    initial = importlib.import_module("django_schedulinator.migrations.0001_initial")
    create = next(
        op for op in initial.Migration.operations if getattr(op, "name", "") == "Schedule"
    )
    fields = dict(create.fields)
    assert validators.validate_name in fields["name"].validators
    assert validators.validate_registered_task in fields["task"].validators
    assert validators.validate_json_list in fields["args"].validators
    assert validators.validate_json_object in fields["kwargs"].validators


def test_they_are_defined_in_their_module() -> None:
    # Never released: moved without a compatibility alias (docs/upgrading.md lists them).
    source = inspect.getsource(models)
    for name in MOVED:
        assert hasattr(validators, name)
        assert f"def {name}(" not in source
        assert f"\n{name} = " not in source


def test_a_name_of_spaces_is_refused() -> None:
    with pytest.raises(ValidationError) as raised:
        validators.validate_name(" \u200b ")
    assert raised.value.code == "blank_name"
