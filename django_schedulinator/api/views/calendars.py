"""Calendars of excluded days: each change goes through the service layer, which re-plans
the schedules that name the calendar."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from drf_spectacular.utils import OpenApiResponse, extend_schema_view
from rest_framework import viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError

from django_schedulinator import services
from django_schedulinator.api.negotiation import NegotiationMixin
from django_schedulinator.api.permissions import (
    ConfiguredPermissionsMixin,
    ScopedByPermissionsMixin,
)
from django_schedulinator.api.schema import DescribedBySpectacular, extend_schema
from django_schedulinator.api.serializers.calendars import CalendarSerializer
from django_schedulinator.api.serializers.errors import ErrorSerializer, as_drf_errors
from django_schedulinator.api.views.common import PageNumberPagination, api_origin
from django_schedulinator.api.views.errors import (
    INVALID,
    NO_CALENDAR,
    NO_PAGE,
    REFUSED,
    Conflict,
)
from django_schedulinator.importers import days as calendars
from django_schedulinator.index import clock
from django_schedulinator.models import Calendar, Schedule
from django_schedulinator.models.scopes import Scope


def _on_field(field: str, read: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``read(...)``, its error without a field of its own put on ``field`` (the years not
    understood, an iCalendar text that cannot be read): each error names its field."""
    try:
        return read(*args, **kwargs)
    except DjangoValidationError as exc:
        if hasattr(exc, "error_dict"):
            raise
        raise DjangoValidationError({field: exc.messages}) from None


@extend_schema(tags=["calendars"])
@extend_schema_view(
    list=extend_schema(responses={200: CalendarSerializer, **NO_PAGE, **REFUSED}),
    retrieve=extend_schema(responses={200: CalendarSerializer, **NO_CALENDAR, **REFUSED}),
    create=extend_schema(responses={201: CalendarSerializer, **INVALID, **REFUSED}),
    update=extend_schema(responses={200: CalendarSerializer, **INVALID, **NO_CALENDAR, **REFUSED}),
    partial_update=extend_schema(
        responses={200: CalendarSerializer, **INVALID, **NO_CALENDAR, **REFUSED}
    ),
    destroy=extend_schema(
        responses={
            204: None,
            409: OpenApiResponse(
                ErrorSerializer, description="Schedules name it: take it out of them first."
            ),
            **NO_CALENDAR,
            **REFUSED,
        }
    ),
)
class CalendarViewSet(
    DescribedBySpectacular,
    NegotiationMixin,
    ScopedByPermissionsMixin,
    ConfiguredPermissionsMixin,
    viewsets.ModelViewSet[Calendar],
):
    """Calendars of excluded days (holidays) that schedules name. Each change goes through
    the service layer, which re-plans the schedules that name the calendar. A rename or a
    delete under schedules that name it is refused, naming those the user may see."""

    queryset = Calendar.objects.all().prefetch_related("days").order_by("name")
    serializer_class = CalendarSerializer
    pagination_class = PageNumberPagination

    def _users_scope(self) -> Scope:
        """The schedules a refusal may name; none when the permission classes refuse
        schedules without saying which (an edit of a calendar is not refused for that)."""
        try:
            return self.scope()
        except PermissionDenied:
            return Schedule.objects.none()

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = self._save(Calendar(), serializer.validated_data, adding=True)

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = self._save(serializer.instance, serializer.validated_data)

    def _save(self, calendar: Calendar, data: dict[str, Any], *, adding: bool = False) -> Calendar:
        data = dict(data)
        typed = data.pop("days", None)
        years_text = data.pop("years", "")
        ical = data.pop("icalendar", None)
        for name, value in data.items():
            setattr(calendar, name, value)
        origin = api_origin(self.request)
        try:
            days: list[tuple[Any, str]] | None = None
            if calendar.source == Calendar.Source.MANUAL:
                if typed is not None or adding:
                    days = [(d["day"], d.get("name", "")) for d in typed or ()]
            elif ical is not None or adding or calendar.source == Calendar.Source.HOLIDAYS:
                years = _on_field("years", calendars.parse_years, years_text or "",
                                  clock.now().date())  # fmt: skip
                days = _on_field(
                    "icalendar", calendars.days_from_source, calendar, years=years, icalendar=ical
                )
            services.save_calendar(calendar, days=days, origin=origin, scope=self._users_scope())
        except DjangoValidationError as exc:
            raise ValidationError(as_drf_errors(exc)) from None
        except IntegrityError:  # a concurrent create took the name
            raise ValidationError({"name": ["A calendar with this name already exists."]}) from None
        return Calendar.objects.prefetch_related("days").get(pk=calendar.pk)

    def perform_destroy(self, instance: Calendar) -> None:
        try:
            services.delete_calendar(
                instance,
                origin=api_origin(self.request),
                scope=self._users_scope(),
            )
        except DjangoValidationError as exc:
            raise Conflict(" ".join(exc.messages)) from None
