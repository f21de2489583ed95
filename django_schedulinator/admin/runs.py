"""The run ledger in the admin: read-only, it records what happened."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from django_schedulinator.admin.filters import MissedRunFilter
from django_schedulinator.admin.pagination import ReadOnlyAdmin
from django_schedulinator.models import Run


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    # What fits a laptop's screen (1,366 px wide, with the filters beside it); the dispatcher,
    # the attempts, the worker, the claim and the missed mark are on the run's page (and the
    # dispatcher and the missed mark are filters).
    list_display = (
        "schedule",
        "scheduled_for",
        "status_text",
        "trigger",
        "finished_at",
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

    @admin.display(description=_("status"), ordering="status")
    def status_text(self, obj: Run) -> str:
        """The status, and why for a skipped run (the skip reason's own column no more)."""
        if obj.status == Run.Status.SKIPPED and obj.skip_reason:
            return format_html(
                '<span class="schedulinator-status schedulinator-status-{}">{}</span><br>'
                '<span class="schedulinator-relative">{}</span>',
                obj.status,
                obj.get_status_display(),
                obj.get_skip_reason_display(),
            )
        return format_html(
            '<span class="schedulinator-status schedulinator-status-{}">{}</span>',
            obj.status,
            obj.get_status_display(),
        )

    @admin.display(description=_("note"))
    def short_note(self, obj: Run) -> str:
        return Truncator(obj.note).chars(80)
