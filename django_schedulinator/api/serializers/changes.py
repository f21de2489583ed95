"""The change log's entries: who changed which schedule, when, through what, and how."""

from __future__ import annotations

from rest_framework import serializers

from django_schedulinator.api.serializers.fields import FieldsBuiltOnce
from django_schedulinator.models import ScheduleChange


class ScheduleChangeSerializer(FieldsBuiltOnce, serializers.ModelSerializer[ScheduleChange]):
    class Meta:
        model = ScheduleChange
        fields = (
            "id",
            "schedule",
            "schedule_name",
            "actor",
            "actor_name",
            "source",
            "action",
            "changes",
            "version",
            "at",
        )
        read_only_fields = fields
