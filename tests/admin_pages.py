"""Helpers for the tests that post the admin's schedule forms."""

from __future__ import annotations

from django.urls import reverse

from django_schedulinator.models import Schedule

from .conftest import form_data


def change_url(schedule: Schedule) -> str:
    return reverse("admin:django_schedulinator_schedule_change", args=[schedule.pk])


def edit_data(schedule: Schedule, version: int, **overrides: str) -> dict[str, str]:
    """The change form's POST data for ``schedule`` (a cron schedule in Berlin)."""
    data = form_data(name=schedule.name, cron=schedule.cron, version=str(version))
    if not schedule.enabled:
        data.pop("enabled")
        data["pause_note"] = schedule.pause_note
    data.update(overrides)
    return data
