"""The API's views: schedules (CRUD and actions), runs, the change log, calendars of
excluded days, index health, the schedulers alive and the scheduling's status.

By subject, one module each: ``schedules`` (with ``preconditions``, the version an edit
starts from), ``runs``, ``changes``, ``calendars`` and ``operations``; ``errors`` holds
the refusals and the errors each operation documents, ``common`` the pages. Every name is
here too, as it was when this was one module.
"""

from __future__ import annotations

from django_schedulinator.api.views.calendars import CalendarViewSet
from django_schedulinator.api.views.changes import ScheduleChangeViewSet
from django_schedulinator.api.views.common import (
    NewestFirstCursorPagination,
    PageNumberPagination,
    SizedFromSettings,
)
from django_schedulinator.api.views.errors import (
    INDEX_UNAVAILABLE,
    INVALID,
    NO_CALENDAR,
    NO_PAGE,
    NO_SCHEDULE,
    REFUSED,
    Conflict,
    IndexUnavailable,
    PreconditionFailed,
    PreconditionRequired,
)
from django_schedulinator.api.views.operations import (
    IndexHealthView,
    SchedulersView,
    StatusView,
    flag,
)
from django_schedulinator.api.views.preconditions import (
    ETAG,
    IF_MATCH,
    PRECONDITION_RESPONSES,
    etag,
)
from django_schedulinator.api.views.runs import OutcomeReportView, RunViewSet
from django_schedulinator.api.views.schedules import (
    CHANGE,
    LOCATION,
    ON_ONE_SCHEDULE,
    VIEW,
    ScheduleViewSet,
)

__all__ = [
    "CHANGE",
    "ETAG",
    "IF_MATCH",
    "INDEX_UNAVAILABLE",
    "INVALID",
    "LOCATION",
    "NO_CALENDAR",
    "NO_PAGE",
    "NO_SCHEDULE",
    "ON_ONE_SCHEDULE",
    "PRECONDITION_RESPONSES",
    "REFUSED",
    "VIEW",
    "CalendarViewSet",
    "Conflict",
    "IndexHealthView",
    "IndexUnavailable",
    "NewestFirstCursorPagination",
    "OutcomeReportView",
    "PageNumberPagination",
    "PreconditionFailed",
    "PreconditionRequired",
    "RunViewSet",
    "ScheduleChangeViewSet",
    "ScheduleViewSet",
    "SchedulersView",
    "SizedFromSettings",
    "StatusView",
    "etag",
    "flag",
]
