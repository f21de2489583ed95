"""The errors' bodies: a refusal as a whole (``detail``), and the 400 of invalid input, each
error under its field's name; and Django's validation errors put in that shape."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import build_array_type
from drf_spectacular.utils import Direction
from rest_framework import serializers


def as_drf_errors(exc: DjangoValidationError) -> dict[str, list[str]]:
    """Django's errors in the 400's shape: by field, the whole's under non_field_errors."""
    if not hasattr(exc, "error_dict"):
        return {"non_field_errors": exc.messages}
    return {
        ("non_field_errors" if field == "__all__" else field): messages
        for field, messages in exc.message_dict.items()
    }


class ErrorSerializer(serializers.Serializer[Any]):
    """A refusal of the request as a whole (401, 403, 404, 409, 412, 428, 503)."""

    detail = serializers.CharField(help_text="Why, in words.")


class ValidationErrorSerializer(serializers.Serializer[Any]):
    """Invalid input (400): each field's errors under its name, errors of the whole body
    under non_field_errors; a request that was refused as a whole (a body that does not
    parse, an action the schedule's state does not allow) has a detail instead."""

    detail = serializers.CharField(required=False, help_text="Why, when no field is to blame.")
    non_field_errors = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Errors of the whole body."
    )


class ValidationErrorSchema(OpenApiSerializerExtension):
    """Errors are keyed by field name, which a serializer cannot list: any other property
    is a field's list of errors."""

    target_class = ValidationErrorSerializer

    def map_serializer(self, auto_schema: Any, direction: Direction) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(
            self.target, direction, bypass_extensions=True
        )
        schema["additionalProperties"] = build_array_type({"type": "string"})
        return schema
