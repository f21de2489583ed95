"""The schedule changelist's filters."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_schedulinator.admin.pictures.families import Family
from django_schedulinator.models import Run
from django_schedulinator.registry import registry

UNREGISTERED = "__unregistered__"
NEVER_RUN = "never"


class TaskFilter(admin.SimpleListFilter):
    """The registered tasks (the dispatcher is process-wide: the task is what differs)."""

    title = _("task")
    parameter_name = "task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [*registry.choices(), (UNREGISTERED, _("Not registered (cannot run)"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == UNREGISTERED:
            return queryset.exclude(task__in=registry.names())
        if value:
            return queryset.filter(task=value)
        return queryset


class LastRunStatusFilter(admin.SimpleListFilter):
    """The status of each schedule's most recent run (an annotation of the changelist)."""

    title = _("status of last run")
    parameter_name = "last_run_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [*Run.Status.choices, (NEVER_RUN, _("Never run"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == NEVER_RUN:
            return queryset.filter(last_run_status__isnull=True)
        if value:
            return queryset.filter(last_run_status=value)
        return queryset


class MissedFilter(admin.SimpleListFilter):
    """Schedules whose latest missed occurrence is not yet followed by a success (the
    changelist's ``missed_open`` annotation), or the others."""

    title = _("missed runs")
    parameter_name = "missed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Missed, no success since")), ("no", _("No missed run open"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in ("yes", "no"):
            return queryset.filter(missed_open=value == "yes")
        return queryset


class MissedRunFilter(admin.SimpleListFilter):
    """Runs the missed-run check raised (they had no success within the grace)."""

    title = _("missed")
    parameter_name = "missed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Missed")), ("no", _("Not missed"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in ("yes", "no"):
            return queryset.filter(missed_at__isnull=value == "no")
        return queryset


class TimingGroupFilter(admin.SimpleListFilter):
    """The schedules behind a busy minute of the operations page's forecast: those with the
    same timing and jitter. Shown only when a link from there sets it."""

    title = _("timing group")
    parameter_name = "timing_group"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        value = request.GET.get(self.parameter_name)
        if not value:
            return []
        try:
            family = Family.from_token(value)
        except ValueError as exc:
            raise IncorrectLookupParameters(str(exc)) from None
        return [(value, family.label())]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        try:
            return queryset.filter(Family.from_token(value).members())
        except ValueError as exc:
            raise IncorrectLookupParameters(str(exc)) from None
