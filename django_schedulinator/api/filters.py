"""Query-string filters of the API (django-filter)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import filters, serializers
from rest_framework.request import Request

from django_schedulinator.models import Run, Schedule, ScheduleChange


class FilterBackend(DjangoFilterBackend):
    """django-filter's backend, which leaves the queryset alone when the query string names
    none of the filters: building a FilterSet (its filters copied, a form class made and
    validated) cost more than the rest of a GET of one schedule, and with no filter named
    every filter lets the queryset through unchanged anyway."""

    def filter_queryset(self, request: Request, queryset: Any, view: Any) -> Any:
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is None or not _names_a_filter(request, filterset_class):
            return queryset
        return super().filter_queryset(request, queryset, view)


def _names_a_filter(request: Request, filterset_class: Any) -> bool:
    names = filterset_class.base_filters
    # A filter whose form field has several parts reads "<name>_<part>".
    return any(
        key in names or any(key.startswith(f"{name}_") for name in names)
        for key in request.query_params
    )


class SearchFilter(filters.SearchFilter):
    """DRF's search, whose refusal (a NUL in the term) names the parameter like every other
    400 of the API, instead of a bare list."""

    def get_search_terms(self, request: Request) -> list[str]:
        try:
            return list(super().get_search_terms(request))
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({self.search_param: exc.detail}) from None


class ScheduleFilter(django_filters.FilterSet):
    missed = django_filters.BooleanFilter(
        method="filter_missed",
        label="Its latest missed occurrence (missed_at) is not yet followed by a success "
        "(true), or it is (false): the admin's mark",
    )

    class Meta:
        model = Schedule
        fields = ("kind", "enabled", "task", "timezone", "overlap", "catch_up", "missed")

    def filter_missed(self, queryset: Any, name: str, value: bool) -> Any:
        return queryset.with_missed_mark().filter(missed_open=value)


class UTCDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, converted to UTC before it reaches the database: offsets PostgreSQL
    refuses (16 hours and more) work, and a time UTC cannot hold is a 400, not a 500."""

    def to_python(self, value: Any) -> datetime | None:
        try:
            parsed = super().to_python(value)
            return None if parsed is None else parsed.astimezone(UTC)
        except (OverflowError, ValueError):
            raise ValidationError(
                "Enter a date and time that can be converted to UTC.", code="invalid"
            ) from None


class UTCDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCDateTimeField


class RunFilter(django_filters.FilterSet):
    scheduled_after = UTCDateTimeFilter(
        field_name="scheduled_for", lookup_expr="gte", label="Nominal time at or after"
    )
    scheduled_before = UTCDateTimeFilter(
        field_name="scheduled_for", lookup_expr="lte", label="Nominal time at or before"
    )

    missed = django_filters.BooleanFilter(
        field_name="missed_at",
        lookup_expr="isnull",
        exclude=True,
        label="Raised as missed (true), or not (false)",
    )

    class Meta:
        model = Run
        fields = ("schedule", "status", "trigger", "skip_reason", "task", "missed")


class ScheduleChangeFilter(django_filters.FilterSet):
    class Meta:
        model = ScheduleChange
        fields = ("schedule", "source", "action", "actor")
