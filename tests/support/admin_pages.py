"""Helpers for the tests that post the admin's schedule forms."""

from __future__ import annotations

from django.urls import reverse

from django_schedulinator.models import Schedule


def form_data(**overrides: str) -> dict[str, str]:
    """The POST data of a valid admin add form, with ``overrides``."""
    data = {
        "name": "nightly",
        "task": "tests.record",
        "args": "[]",
        "kwargs": "{}",
        "enabled": "on",
        "kind": "cron",
        "cron": "0 3 * * *",
        "day_rule": "either",
        "calendar_rule": "skip",
        "interval": "",
        "run_at_0": "",
        "run_at_1": "",
        "timezone": "Europe/Berlin",
        "dst_gap": "shift",
        "dst_fold": "first",
        "anchor_at_0": "",
        "anchor_at_1": "",
        "start_at_0": "",
        "start_at_1": "",
        "end_at_0": "",
        "end_at_1": "",
        "max_runs": "",
        "jitter": "",
        "catch_up": "",
        "catch_up_window": "",
        "overlap": "allow",
        "pause_note": "",
        "pause_after_failures": "",
        "grace": "",
        "dispatcher": "default",
        "dispatch_options": "{}",
    }
    data.update(overrides)
    return data


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
