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
            "dst_gap",
            "dst_fold",
            "anchor_at",
            "start_at",
            "end_at",
            "max_runs",
            "jitter",
            "catch_up",
            "catch_up_window",
            "overlap",
            "pause_note",
            "pause_after_failures",
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
        "due_at",
        "last_run_at",
        "run_count",
        "failure_streak",
        "paused_at",
        "revision",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("name", "task", "args", "kwargs", "enabled", "pause_note")}),
        ("When", {"fields": ("kind", "cron", "interval", "run_at", "timezone", "anchor_at")}),
        ("Daylight saving time (cron)", {"fields": ("dst_gap", "dst_fold")}),
        ("Window and limits", {"fields": ("start_at", "end_at", "max_runs", "jitter")}),
        (
            "Missed runs, overlap and failures",
            {"fields": ("catch_up", "catch_up_window", "overlap", "pause_after_failures")},
        ),
        ("State", {"fields": readonly_fields}),
    )


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = (
        "schedule",
        "scheduled_for",
        "status",
        "trigger",
        "skip_reason",
        "attempts",
        "worker_id",
        "claimed_at",
        "finished_at",
    )
    list_filter = ("status", "trigger", "skip_reason")
    list_select_related = ("schedule",)
    search_fields = ("schedule__name", "task")
    date_hierarchy = "scheduled_for"

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
