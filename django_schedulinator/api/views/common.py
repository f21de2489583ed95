"""What the views share: pages sized from the settings, and the origin that the change log
records for a change made through the API."""

from __future__ import annotations

from typing import Any

from rest_framework import pagination
from rest_framework.exceptions import NotFound
from rest_framework.request import Request

from django_schedulinator.changelog import Origin
from django_schedulinator.conf import app_settings
from django_schedulinator.models import ScheduleChange


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


def api_origin(request: Request) -> Origin:
    """The origin the change log records for a change made through the API: its user."""
    return Origin(request.user, ScheduleChange.Source.API)
