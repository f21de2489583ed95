"""The change log, read-only: who changed which schedule, when, through what, and how."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema_view
from rest_framework import viewsets

from django_schedulinator.api.filters import FilterBackend, ScheduleChangeFilter
from django_schedulinator.api.negotiation import NegotiationMixin
from django_schedulinator.api.permissions import (
    ConfiguredPermissionsMixin,
    SchedulesFilteredByPermissionsMixin,
)
from django_schedulinator.api.schema import DescribedBySpectacular, extend_schema
from django_schedulinator.api.serializers.changes import ScheduleChangeSerializer
from django_schedulinator.api.serializers.errors import ErrorSerializer
from django_schedulinator.api.views.common import NewestFirstCursorPagination
from django_schedulinator.api.views.errors import INVALID, NO_PAGE, REFUSED
from django_schedulinator.models import ScheduleChange


@extend_schema(tags=["changes"])
@extend_schema_view(
    list=extend_schema(responses={200: ScheduleChangeSerializer, **INVALID, **NO_PAGE, **REFUSED}),
    retrieve=extend_schema(
        responses={
            200: ScheduleChangeSerializer,
            404: OpenApiResponse(ErrorSerializer, description="No such change-log entry."),
            **REFUSED,
        }
    ),
)
class ScheduleChangeViewSet(
    DescribedBySpectacular,
    NegotiationMixin,
    SchedulesFilteredByPermissionsMixin,
    ConfiguredPermissionsMixin,
    viewsets.ReadOnlyModelViewSet[ScheduleChange],
):
    """The change log: who changed which schedule, when, through what, and how."""

    queryset = ScheduleChange.objects.all()
    # Entries of deleted schedules have none: under a filter_schedules they are hidden.
    schedule_lookup = "schedule"
    serializer_class = ScheduleChangeSerializer
    pagination_class = NewestFirstCursorPagination
    filter_backends = [FilterBackend]
    filterset_class = ScheduleChangeFilter
