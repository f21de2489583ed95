"""The run ledger in the admin: read-only, it records what happened."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from django_schedulinator.admin.filters import MissedRunFilter
from django_schedulinator.admin.pagination import ReadOnlyAdmin
from django_schedulinator.models import Run


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "schedule",
        "scheduled_for",
        "status",
        "trigger",
        "skip_reason",
        "dispatcher",
        "attempts",
        "worker_id",
        "claimed_at",
        "finished_at",
        "missed_at",
        "short_note",
    )
    list_filter = ("status", "skip_reason", "trigger", "dispatcher", MissedRunFilter)
    list_select_related = ("schedule",)
    search_fields = ("schedule__name", "task", "=external_id")

    def get_ordering(self, request: HttpRequest) -> tuple[str, ...]:
        # Orders an index can serve, so a page never sorts the whole ledger: one schedule's
        # runs by time (the unique (schedule, scheduled_for) index), all runs newest first
        # by id. An index on scheduled_for alone would cost every run insert.
        if "schedule__id__exact" in request.GET:
            return ("-scheduled_for",)
        return ("-id",)

    @admin.display(description=_("note"))
    def short_note(self, obj: Run) -> str:
        return Truncator(obj.note).chars(80)
