"""Admin for schedules and their runs. Tasks are chosen from the registry, never typed."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from .models import Run, Schedule
from .registry import registry


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = (
            "name",
            "task",
            "args",
            "kwargs",
            "enabled",
            "kind",
            "cron",
            "interval",
            "run_at",
            "timezone",
            "start_at",
            "end_at",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A choice list from the registry: a dotted path typed into the admin can never
        # reach the scheduler.
        self.fields["task"] = forms.ChoiceField(
            choices=[("", "---------"), *registry.choices()],
            help_text=Schedule._meta.get_field("task").help_text,
        )


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "task",
        "kind",
        "cron",
        "interval",
        "timezone",
        "enabled",
        "next_run_at",
        "last_run_at",
        "run_count",
    )
    list_filter = ("kind", "enabled")
    search_fields = ("name", "task")
    readonly_fields = (
        "next_run_at",
        "last_run_at",
        "run_count",
        "revision",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("name", "task", "args", "kwargs", "enabled")}),
        (
            "When",
            {"fields": ("kind", "cron", "interval", "run_at", "timezone", "start_at", "end_at")},
        ),
        ("State", {"fields": readonly_fields}),
    )


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = (
        "schedule",
        "scheduled_for",
        "status",
        "attempts",
        "worker_id",
        "claimed_at",
        "finished_at",
    )
    list_filter = ("status",)
    list_select_related = ("schedule",)
    search_fields = ("schedule__name", "task")
    date_hierarchy = "scheduled_for"

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
