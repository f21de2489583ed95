"""Calendars of excluded days: written with their days when kept by hand, read from their
source (holidays, an iCalendar text) otherwise."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from django_schedulinator.api.serializers.fields import FlatListField
from django_schedulinator.models import Calendar
from django_schedulinator.models.validators import MAX_DAYS


class ExcludedDaySerializer(serializers.Serializer[Any]):
    day = serializers.DateField()
    name = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")


class CalendarSerializer(serializers.ModelSerializer[Calendar]):
    """A calendar of excluded days. Its days are written with it when it is kept by hand
    (``days``), read from its source otherwise (``years``; ``icalendar``, the file's text)."""

    days = FlatListField(
        child=ExcludedDaySerializer(),
        required=False,
        max_length=MAX_DAYS,
        help_text="Read: every excluded day. Write (source manual): the days, replacing "
        "the ones it had.",
    )
    years = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=9,
        help_text="Source holidays or ical: the years to fill, such as 2026-2036 (default: "
        "last year to ten years ahead).",
    )
    icalendar = serializers.CharField(
        write_only=True,
        required=False,
        max_length=1_000_000,
        trim_whitespace=False,
        help_text="Source ical: the iCalendar file's text to read the days from.",
    )
    weekend = FlatListField(
        child=serializers.IntegerField(min_value=1, max_value=7),
        required=False,
        max_length=6,
        help_text="ISO weekdays (1 Monday ... 7 Sunday) no occurrence is moved onto; "
        "source holidays takes the country's.",
    )

    class Meta:
        model = Calendar
        fields = (
            "id", "name", "description", "timezone", "weekend", "source", "country",
            "subdivision", "days", "years", "icalendar", "updated_at",
        )  # fmt: skip
        read_only_fields = ("updated_at",)
