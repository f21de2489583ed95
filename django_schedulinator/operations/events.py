"""What a notifier is told: an ``Event`` (a missed run, a failed run, an auto-pause, no
scheduler alive, or a digest of many misses), in words (``subject``, ``text``) and as JSON
(``as_dict``, what the webhook notifier sends). ``complete`` adds its schedule's name and
zone, and a link to the admin, where it is sent rather than on the path that raised it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import router
from django.urls import NoReverseMatch, reverse

from django_schedulinator import timing
from django_schedulinator.conf import app_settings
from django_schedulinator.errors import TimingError
from django_schedulinator.models import Schedule
from django_schedulinator.operations.alerts import REASONS
from django_schedulinator.timing.vocabulary import NotifyEvent


@dataclass(frozen=True, slots=True)
class Event:
    """What a notifier is told. ``kind`` is "missed", "failed", "auto_paused",
    "no_scheduler" or "digest"; the schedule's fields are empty for "no_scheduler", whose
    ``noticed_at`` is when the outage was noticed, and for "digest": many misses in one
    message, ``count`` of them, the first of which it lists (``listed``, each a "missed"
    event)."""

    kind: str
    noticed_at: datetime
    schedule_id: int | None = None
    schedule_name: str = ""
    timezone: str = "UTC"  # the schedule's
    scheduled_for: datetime | None = None  # the occurrence's nominal time
    run_id: int | None = None
    reason: str = ""  # missed: why (alerts.REASONS)
    grace: timedelta | None = None
    error: str = ""  # failed: what went wrong
    note: str = ""  # auto_paused: the pause note
    admin_url: str = ""  # with NOTIFY's BASE_URL: the schedule's page (the operations page)
    listed: tuple[Event, ...] = ()  # digest: the misses it lists
    count: int = 0  # digest: the misses it stands for, listed or not

    @property
    def id(self) -> str:
        """The same for every notification of this event: receivers dedupe on it. A
        digest's names its first miss and how many more it counts."""
        if self.kind == NotifyEvent.NO_SCHEDULER:
            return f"{NotifyEvent.NO_SCHEDULER}:{timing.to_ms(self.noticed_at)}"
        if self.kind == "digest":
            first = self.listed[0].id if self.listed else "none"
            return f"digest:{first}+{self.count - 1}"
        at = self.scheduled_for if self.scheduled_for is not None else self.noticed_at
        return f"{self.kind}:{self.schedule_id}:{timing.to_ms(at)}"

    def local(self, moment: datetime | None) -> str:
        """A moment in the schedule's zone, to the second, with the zone's abbreviation."""
        if moment is None:
            return ""
        try:
            zone: Any = timing.get_zone(self.timezone)
        except TimingError:
            zone = UTC
        return f"{moment.astimezone(zone):%Y-%m-%d %H:%M:%S %Z}"

    @property
    def subject(self) -> str:
        name, at = self.schedule_name, self.local(self.scheduled_for)
        if self.kind == "digest":
            names = list(dict.fromkeys(repr(e.schedule_name) for e in self.listed))
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            return f"{self.count} missed runs: {shown}"
        if self.kind == NotifyEvent.MISSED:
            return f"Missed run of {name!r}, {at} ({self.reason})"
        if self.kind == NotifyEvent.FAILED:
            return f"Failed run of {name!r}, {at}"
        if self.kind == NotifyEvent.AUTO_PAUSED:
            return f"{name!r} was paused after failures in a row"
        return f"No scheduler is running (noticed at {self.local(self.noticed_at)})"

    def text(self) -> str:
        """The notification in words: what happened, when, why, and where to look."""
        name, at = self.schedule_name, self.scheduled_for
        utc = f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if at is not None else ""
        utc = f" ({utc})" if utc and utc != self.local(at) else ""
        if self.kind == "digest":
            lines = [
                f"{self.count} occurrences had no successful run within their schedule's "
                "grace (more than the rate limit lets through one message each):",
                "",
                *(
                    f"- {e.schedule_name!r}, {e.local(e.scheduled_for)}: "
                    f"{REASONS.get(e.reason, e.reason)} ({e.reason})"
                    for e in self.listed
                ),
            ]
            if self.count > len(self.listed):
                lines.append(f"... and {self.count - len(self.listed)} more.")
        elif self.kind == NotifyEvent.MISSED:
            lines = [
                f"The schedule {name!r} had no successful run within its grace of {self.grace}.",
                "",
                f"Occurrence: {self.local(at)}{utc}",
                f"Reason: {REASONS.get(self.reason, self.reason)} ({self.reason})",
            ]
        elif self.kind == NotifyEvent.FAILED:
            lines = [
                f"A run of the schedule {name!r} failed.",
                "",
                f"Occurrence: {self.local(at)}{utc}",
                "Error:",
                self.error.rstrip(),
            ]
        elif self.kind == NotifyEvent.AUTO_PAUSED:
            lines = [
                f"The schedule {name!r} was paused: its runs failed too many times in a row "
                "(pause_after_failures). It fires again once someone resumes it.",
                "",
                f"Note: {self.note}",
            ]
        else:
            lines = [
                "No scheduler (manage.py run_scheduler) is alive: no schedule fires until one "
                "runs again.",
                "",
                f"Noticed at: {self.local(self.noticed_at)}",
            ]
        if self.run_id is not None:
            lines.append(f"Run: {self.run_id}")
        if self.admin_url:
            lines.append(f"In the admin: {self.admin_url}")
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, Any]:
        """The event as JSON (what the webhook notifier sends)."""
        if self.kind == "digest":
            return {
                "type": "alert.digest",
                "id": self.id,
                "count": self.count,
                "more": self.count - len(self.listed),
                "listed": [
                    {k: v for k, v in e.as_dict().items() if k not in ("subject", "text")}
                    for e in self.listed
                ],
                "noticed_at": self.noticed_at.isoformat(),
                "admin_url": self.admin_url or None,
                "subject": self.subject,
                "text": self.text(),
            }
        at = self.scheduled_for
        return {
            "type": f"alert.{self.kind}",
            "id": self.id,
            "schedule": self.schedule_name or None,
            "schedule_id": self.schedule_id,
            "scheduled_for": at.isoformat() if at is not None else None,
            "scheduled_for_ms": timing.to_ms(at) if at is not None else None,
            "timezone": self.timezone if self.schedule_id is not None else None,
            "run_id": self.run_id,
            "reason": self.reason or None,
            "grace_seconds": self.grace.total_seconds() if self.grace is not None else None,
            "error": self.error or None,
            "note": self.note or None,
            "noticed_at": self.noticed_at.isoformat(),
            "admin_url": self.admin_url or None,
            "subject": self.subject,
            "text": self.text(),
        }


def complete(event: Event) -> Event:
    """The event with its schedule's name and zone, and a link to the admin when NOTIFY
    has a BASE_URL: read where it is sent, not on the path that raised it."""
    config = app_settings.NOTIFY
    base = config.base_url if config is not None else ""
    if event.schedule_id is None:
        return dataclasses.replace(
            event, admin_url=admin_url(base, "admin:django_schedulinator_schedule_operations")
        )
    row = (
        Schedule.objects.using(router.db_for_read(Schedule))
        .filter(pk=event.schedule_id)
        .values_list("name", "timezone")
        .first()
    )
    name, zone = row if row is not None else (f"#{event.schedule_id} (deleted)", "UTC")
    return dataclasses.replace(
        event,
        schedule_name=name,
        timezone=zone,
        admin_url=admin_url(
            base, "admin:django_schedulinator_schedule_change", [event.schedule_id]
        ),
    )


def complete_many(events: Sequence[Event]) -> list[Event]:
    """``complete`` for many events of schedules, their names read in one query."""
    config = app_settings.NOTIFY
    base = config.base_url if config is not None else ""
    ids = {e.schedule_id for e in events if e.schedule_id is not None}
    rows = {
        pk: (name, zone)
        for pk, name, zone in Schedule.objects.using(router.db_for_read(Schedule))
        .filter(pk__in=sorted(ids))
        .values_list("pk", "name", "timezone")
    }
    completed = []
    for event in events:
        sid = event.schedule_id
        name, zone = rows.get(sid, (f"#{sid} (deleted)", "UTC")) if sid is not None else ("", "UTC")
        url = admin_url(base, "admin:django_schedulinator_schedule_change", [sid])
        completed.append(
            dataclasses.replace(event, schedule_name=name, timezone=zone, admin_url=url)
        )
    return completed


def admin_url(base: str, name: str, args: list[Any] | None = None) -> str:
    """The admin's page ``name`` under ``base`` (NOTIFY's BASE_URL); "" without one."""
    if not base:
        return ""
    try:
        return base + reverse(name, args=args)
    except NoReverseMatch:  # the admin is not installed, or not under this name
        return ""
