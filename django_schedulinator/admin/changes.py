"""The change log in the admin: read-only, written by the changes themselves."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from django_schedulinator.admin.display import summarise_changes
from django_schedulinator.admin.pagination import ReadOnlyAdmin
from django_schedulinator.models import Schedule, ScheduleChange


@admin.register(ScheduleChange)
class ScheduleChangeAdmin(ReadOnlyAdmin):
    list_display = ("at", "schedule_link", "actor_name", "source", "action", "summary")
    list_filter = ("source", "action")
    search_fields = ("schedule_name", "actor_name")
    date_hierarchy = "at"

    @admin.display(description=_("schedule"), ordering="schedule_name")
    def schedule_link(self, obj: ScheduleChange) -> str:
        # Not named schedule_name: the model field of that name would take its place.
        if obj.schedule_id is None:  # deleted since
            return obj.schedule_name
        url = reverse(
            f"admin:{Schedule._meta.app_label}_{Schedule._meta.model_name}_change",
            args=(quote(obj.schedule_id),),
        )
        return format_html('<a href="{}">{}</a>', url, obj.schedule_name)

    @admin.display(description=_("changes"))
    def summary(self, obj: ScheduleChange) -> str:
        return summarise_changes(obj.action, obj.changes)
