"""Which schedules a reader may see, for what counts or names schedules: the status and the
index health (``operations/health.py``, ``operations/index_health.py``), the operations
page's figures and pictures, a calendar's users.

A scope is a queryset of the schedules a reader may see, used as one SQL subquery wherever
it applies, or None: every schedule. The API takes it from its permission classes
(``filter_schedules``: ``api.permissions.visible_schedules``), the admin from the schedule
admin's ``get_queryset`` when that filters (``of_admin``). What counts or names schedules
reads its rows through ``schedules_in`` and ``runs_in``, and the ids it would name through
``shown``, so it counts and names only what the reader may see. A figure that only exists
for every schedule at once (the due index's entries, a scheduler's counters) is left out
under a scope; what describes the machinery alone (a scheduler alive, the lag of the
earliest due entry, the index's build) is the same for every reader.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

from django.db.models import QuerySet

if TYPE_CHECKING:
    from django.http import HttpRequest

    from django_schedulinator.models import Run, Schedule

Scope: TypeAlias = "QuerySet[Schedule] | None"


def schedules_in(scope: Scope, using: str) -> QuerySet[Schedule]:
    """The schedules of ``scope`` on the database ``using``."""
    from django_schedulinator.models import Schedule

    rows = Schedule.objects.using(using)
    return rows if scope is None else rows.filter(pk__in=scope.values("pk"))


def runs_in(scope: Scope, using: str) -> QuerySet[Run]:
    """The runs of the schedules of ``scope`` on the database ``using``."""
    from django_schedulinator.models import Run

    rows = Run.objects.using(using)
    return rows if scope is None else rows.filter(schedule__in=scope.values("pk"))


def shown(scope: Scope, ids: Iterable[int], using: str) -> list[int]:
    """Those of the schedule ids ``ids`` that ``scope`` shows, in their order (one query)."""
    ids = list(ids)
    if scope is None or not ids:
        return ids
    visible = set(schedules_in(scope, using).filter(pk__in=ids).values_list("pk", flat=True))
    return [pk for pk in ids if pk in visible]


def of_admin(model_admin: Any, request: HttpRequest) -> Scope:
    """The schedules the schedule admin shows ``request``'s user: its ``get_queryset``,
    where Django's admin restricts rows; None when it restricts nothing."""
    queryset: QuerySet[Schedule] = model_admin.get_queryset(request)
    return queryset if queryset.query.has_filters() else None
