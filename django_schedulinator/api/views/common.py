"""What the views share: pages sized from the settings, the logs of the schedules' history
(the ledger and the change log), and the origin that the change log records for a change
made through the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import models
from drf_spectacular.utils import OpenApiResponse, extend_schema_view
from rest_framework import pagination, serializers, viewsets
from rest_framework.exceptions import NotFound
from rest_framework.request import Request

from django_schedulinator.api.filters import FilterBackend
from django_schedulinator.api.negotiation import NegotiationMixin
from django_schedulinator.api.permissions import (
    ConfiguredPermissionsMixin,
    SchedulesFilteredByPermissionsMixin,
)
from django_schedulinator.api.schema import DescribedBySpectacular, extend_schema
from django_schedulinator.api.serializers.errors import ErrorSerializer
from django_schedulinator.api.views.errors import INVALID, NO_PAGE, REFUSED
from django_schedulinator.conf import app_settings
from django_schedulinator.models import ScheduleChange
from django_schedulinator.services import Origin

Entry = TypeVar("Entry", bound=models.Model)
View = TypeVar("View", bound=Callable[..., Any])


class SizedFromSettings:
    """Page sizes read from the settings per request (so override_settings works)."""

    page_size_query_param: str | None = "page_size"
    page_size: int | None
    max_page_size: int | None

    def __init__(self) -> None:
        self.page_size = app_settings.API_PAGE_SIZE
        self.max_page_size = app_settings.API_MAX_PAGE_SIZE


class PageNumberPagination(SizedFromSettings, pagination.PageNumberPagination):
    pass


class NewestFirstCursorPagination(SizedFromSettings, pagination.CursorPagination):
    """The ledger and the change log grow without end: a cursor costs the same on any page,
    where page numbers would count and skip rows. Newest (highest id) first."""

    ordering = "-id"

    def decode_cursor(self, request: Request) -> Any:
        # DRF trusts the position inside a well-formed cursor; one that is not an id would
        # reach the query. Any bad cursor is "Invalid cursor" (404), as DRF answers others.
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            try:
                int(cursor.position)
            except (TypeError, ValueError):
                raise NotFound(self.invalid_cursor_message) from None
        return cursor


class ScheduleLogViewSet(
    DescribedBySpectacular,
    NegotiationMixin,
    SchedulesFilteredByPermissionsMixin,
    ConfiguredPermissionsMixin,
    viewsets.ReadOnlyModelViewSet[Entry],
):
    """A log of the schedules' history, read-only: its entries of the schedules the user
    may see (by their ``schedule``), filtered by its ``filterset_class``, newest first."""

    schedule_lookup = "schedule"
    pagination_class = NewestFirstCursorPagination
    filter_backends = [FilterBackend]


def log_schema(
    serializer: type[serializers.Serializer[Any]], missing: str
) -> Callable[[View], View]:
    """The answers a log documents: its list and one entry (``missing``: the 404's words)."""
    return extend_schema_view(
        list=extend_schema(responses={200: serializer, **INVALID, **NO_PAGE, **REFUSED}),
        retrieve=extend_schema(
            responses={
                200: serializer,
                404: OpenApiResponse(ErrorSerializer, description=missing),
                **REFUSED,
            }
        ),
    )


def api_origin(request: Request) -> Origin:
    """The origin the change log records for a change made through the API: its user."""
    return Origin(request.user, ScheduleChange.Source.API)
