"""The API's own fields: durations in seconds, dates read in the project's zone, JSON nested
at most so deep, a task chosen from the registry, lists whose errors are flat strings; how
drf-spectacular documents them; and the model serializers' fields built once per class."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import Direction
from rest_framework import serializers

from django_schedulinator.api.negotiation import too_deep_message
from django_schedulinator.models.validators import json_text_too_deep, json_too_deep

# Python's datetime and timedelta overflow past these: a clear error instead of a crash.
DURATION_LIMIT = timedelta(days=999_999)


class DurationField(serializers.DurationField):
    """Answered as a number of seconds (an integer when whole; exact to the microsecond).
    Taken as seconds (a number, or a string of one), "HH:MM:SS", "D HH:MM:SS" or ISO 8601
    ("PT1H30M", "P1DT2H")."""

    def to_representation(self, value: timedelta) -> int | float:  # type: ignore[override]
        if value.microseconds:
            return value.total_seconds()
        return value.days * 86_400 + value.seconds

    def to_internal_value(self, value: Any) -> timedelta:
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                parsed = timedelta(seconds=value)
            except (OverflowError, ValueError):
                self.fail("invalid", format="a number of seconds or [DD] [HH:[MM:]]ss[.uuuuuu]")
        else:
            try:
                parsed = super().to_internal_value(value)
            except OverflowError:
                self.fail("invalid", format="[DD] [HH:[MM:]]ss[.uuuuuu]")
        if abs(parsed) > DURATION_LIMIT:
            raise serializers.ValidationError(f"Enter a duration of at most {DURATION_LIMIT}.")
        return parsed


class JSONField(serializers.JSONField):
    """args and kwargs: nested at most MAX_JSON_DEPTH deep, measured before anything
    recurses through them (a form post's text is parsed here, by Python's json)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bytes | str) and (
            self.binary or getattr(data, "is_json_string", False)
        ):
            text = data.decode(errors="replace") if isinstance(data, bytes) else data
            too_deep = bool(json_text_too_deep(text))
        else:
            too_deep = json_too_deep(data)
        if too_deep:
            raise serializers.ValidationError(too_deep_message())
        return super().to_internal_value(data)


class DurationFieldSchema(OpenApiSerializerFieldExtension):
    """Answers: a number of seconds. Requests: that, or a string in one of the formats that
    DurationField takes."""

    target_class = DurationField

    def map_serializer_field(self, auto_schema: Any, direction: Direction) -> dict[str, Any]:
        seconds = {"type": "number", "description": "Seconds."}
        if direction == "response":
            return seconds
        text = {
            "type": "string",
            "description": 'Seconds ("90"), "HH:MM:SS", "D HH:MM:SS" or ISO 8601 ("PT1H30M").',
        }
        return {"oneOf": [seconds, text]}


class DateTimeField(serializers.DateTimeField):
    """ISO 8601; a time without an offset is read in the project's TIME_ZONE."""

    def to_internal_value(self, value: Any) -> Any:
        try:  # parses, then converts to the project's zone (which may overflow)
            return super().to_internal_value(value)
        except (OverflowError, ValueError):
            raise serializers.ValidationError(
                "Enter a date and time that can be converted to UTC."
            ) from None


class TaskField(serializers.ChoiceField):
    """A registered task's name; a schedule keeps one that is no longer registered."""


class TaskFieldSchema(OpenApiSerializerFieldExtension):
    """Requests choose from the registered tasks; responses may name a task that is no
    longer registered (a schedule keeps it), so there the task is any string."""

    target_class = TaskField

    def map_serializer_field(self, auto_schema: Any, direction: Direction) -> dict[str, Any]:
        if direction == "request":
            schema: dict[str, Any] = auto_schema._map_serializer_field(
                self.target, direction, bypass_extensions=True
            )
            return schema
        return {"type": "string", "description": self.target.help_text}


class FlatListField(serializers.ListField):
    """A list whose items' errors are one list of messages, each naming its item ("Item
    2: ..."): the documented error shape, where a field's errors are strings."""

    def to_representation(self, data: Any) -> list[Any]:
        return super().to_representation(data.all() if hasattr(data, "all") else data)

    def run_child_validation(self, data: list[Any]) -> list[Any]:
        try:
            return super().run_child_validation(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(list(_flat(exc.detail))) from None


def _flat(detail: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(detail, dict):
        for key, value in detail.items():
            label = f"Item {int(key) + 1}" if isinstance(key, int) or str(key).isdigit() else key
            yield from _flat(value, f"{prefix}{label}: ")
    elif isinstance(detail, list):
        for value in detail:
            yield from _flat(value, prefix)
    else:
        yield f"{prefix}{detail}"


class FieldsBuiltOnce:
    """A model serializer whose fields are built from the model once per class, not per
    instance: DRF's ``ModelSerializer.get_fields`` maps every model field again for each
    serializer (its labels, help texts, validators and lengths), which for a schedule's 30-odd
    fields was about 3 ms of CPU in every request that shows one (issue 23).

    What it builds depends on the class alone (Meta and the declared fields, never the
    instance, the data or the context), so each instance binds copies of the fields built
    first. A plain field is copied shallowly (binding sets the copy's own name and parent;
    its validators and messages are shared, as nothing changes them); a field with a child
    field or serializer is deep-copied, as DRF copies declared fields, so the child's
    parent is the copy."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        owner = type(self)
        built = owner.__dict__.get("_fields_built")
        if built is None:
            built = super().get_fields()  # type: ignore[misc]
            owner._fields_built = built  # type: ignore[attr-defined]
        return {name: _copy_of(field) for name, field in built.items()}


def _copy_of(field: serializers.Field[Any, Any, Any, Any]) -> Any:
    if isinstance(field, serializers.BaseSerializer) or any(
        hasattr(field, child) for child in ("child", "child_relation")
    ):
        return copy.deepcopy(field)
    # copy.copy, without its generic protocol (a third of this serializer's setup).
    clone = object.__new__(type(field))
    clone.__dict__ = field.__dict__.copy()
    return clone
