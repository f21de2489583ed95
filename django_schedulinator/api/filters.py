"""Query-string filters of the API (django-filter)."""

from __future__ import annotations

import django_filters

from ..models import Run, Schedule, ScheduleChange


class ScheduleFilter(django_filters.FilterSet):
    class Meta:
        model = Schedule
        fields = ("kind", "enabled", "task", "timezone", "overlap", "catch_up")


class RunFilter(django_filters.FilterSet):
    scheduled_after = django_filters.IsoDateTimeFilter(
        field_name="scheduled_for", lookup_expr="gte", label="Nominal time at or after"
    )
    scheduled_before = django_filters.IsoDateTimeFilter(
        field_name="scheduled_for", lookup_expr="lte", label="Nominal time at or before"
    )

    class Meta:
        model = Run
        fields = ("schedule", "status", "trigger", "skip_reason", "task")


class ScheduleChangeFilter(django_filters.FilterSet):
    class Meta:
        model = ScheduleChange
        fields = ("schedule", "source", "action", "actor")
