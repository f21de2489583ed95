"""The change log, read-only: who changed which schedule, when, through what, and how."""

from __future__ import annotations

from django_schedulinator.api.filters import ScheduleChangeFilter
from django_schedulinator.api.schema import extend_schema
from django_schedulinator.api.serializers.changes import ScheduleChangeSerializer
from django_schedulinator.api.views.common import ScheduleLogViewSet, log_schema
from django_schedulinator.models import ScheduleChange


@extend_schema(tags=["changes"])
@log_schema(ScheduleChangeSerializer, "No such change-log entry.")
class ScheduleChangeViewSet(ScheduleLogViewSet[ScheduleChange]):
    """The change log: who changed which schedule, when, through what, and how."""

    # Entries of deleted schedules have no schedule: under a filter_schedules they are hidden.
    queryset = ScheduleChange.objects.all()
    serializer_class = ScheduleChangeSerializer
    filterset_class = ScheduleChangeFilter
