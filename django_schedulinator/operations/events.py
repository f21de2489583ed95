"""What a notifier is told: an ``Event`` (a missed run, a failed run, an auto-pause, no
scheduler alive, or a digest of many alerts), in words (``subject``, ``text``) and as JSON
(``as_dict``, what the webhook notifier sends). A missed or failed run's event carries its
``role`` in its schedule's streak of that event (``grouping``): the first, a reminder that
counts them, or the end of the streak. ``complete`` adds its schedule's name and zone, and
a link to the admin, where it is sent rather than on the path that raised it."""

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
from django_schedulinator.models import Run, Schedule
from django_schedulinator.models.spans import Span
from django_schedulinator.operations.alerts import REASONS
from django_schedulinator.outcomes import headline
from django_schedulinator.timing.vocabulary import AlertRole, NotifyEvent


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
    listed: tuple[Event, ...] = ()  # digest: the alerts it lists
    # A digest: the alerts it stands for, listed or not. A reminder (role "repeat") or the
    # end of a streak ("recovered"): the alerts of the streak, since ``since``.
    count: int = 0
    # "missed" and "failed": its place in its schedule's streak (AlertRole): "alone",
    # "first", "repeat" or "recovered" (for "recovered", ``scheduled_for`` and ``run_id``
    # are the run that succeeded).
    role: str = AlertRole.ALONE
    since: datetime | None = None  # a reminder or an end: the streak's first occurrence
    repeat: timedelta | None = None  # "first": how often reminders go (NOTIFY_REPEAT_SECONDS)

    @property
    def id(self) -> str:
        """The same for every notification of this event: receivers dedupe on it. A
        digest's names its first miss and how many more it counts."""
        if self.kind == NotifyEvent.NO_SCHEDULER:
            return f"{NotifyEvent.NO_SCHEDULER}:{timing.to_ms(self.noticed_at)}"
        if self.kind == "digest":
            first = self.listed[0].id if self.listed else "none"
            return f"digest:{first}+{self.count - 1}"
        if self.role == AlertRole.RECOVERED:  # one per streak: named by its first occurrence
            since = self.since or self.noticed_at
            return f"recovered:{self.kind}:{self.schedule_id}:{timing.to_ms(since)}"
        at = self.scheduled_for if self.scheduled_for is not None else self.noticed_at
        return f"{self.kind}:{self.schedule_id}:{timing.to_ms(at)}"

    @property
    def what(self) -> str:
        """The event's runs in words: "missed runs" or "failed runs"."""
        return "failed runs" if self.kind == NotifyEvent.FAILED else "missed runs"

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
            plain_misses = all(
                e.kind == NotifyEvent.MISSED and e.role in (AlertRole.ALONE, AlertRole.FIRST)
                for e in self.listed
            )
            return f"{self.count} {'missed runs' if plain_misses else 'alerts'}: {shown}"
        if self.role == AlertRole.REPEAT:
            return (
                f"{'Still failing' if self.kind == NotifyEvent.FAILED else 'Still missing runs'}: "
                f"{name!r}, {self.count} {self.what} since {self.local(self.since)}"
            )
        if self.role == AlertRole.RECOVERED:
            return f"Recovered: {name!r} succeeded again, {at}"
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
                f"{self.count} alerts came at once (more than the rate limit lets through "
                "one message each):",
                "",
                *(f"- {e.line()}" for e in self.listed),
            ]
            if self.count > len(self.listed):
                lines.append(f"... and {self.count - len(self.listed)} more.")
        elif self.role == AlertRole.REPEAT:
            lines = [
                f"The schedule {name!r} has had {self.count} {self.what} in a row since "
                f"{self.local(self.since)}, and goes on. The latest:",
                "",
                f"Occurrence: {self.local(at)}{utc}",
                *self._why(),
                "",
                "Its next reminder comes no sooner than NOTIFY_REPEAT_SECONDS from now; one "
                "message says when a run succeeds again.",
            ]
        elif self.role == AlertRole.RECOVERED:
            lines = [
                f"A run of the schedule {name!r} succeeded again, after {self.count} "
                f"{self.what} in a row since {self.local(self.since)}.",
                "",
                f"Occurrence: {self.local(at)}{utc}",
            ]
        elif self.kind == NotifyEvent.MISSED:
            lines = [
                f"The schedule {name!r} had no successful run within its grace of {self.grace}.",
                "",
                f"Occurrence: {self.local(at)}{utc}",
                *self._why(),
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
        if self.role == AlertRole.FIRST and self.kind != "digest":
            every = f" every {self.repeat}" if self.repeat else ""
            lines += [
                "",
                f"While its {self.what} go on, they are not sent one by one: a reminder counts "
                f"them{every} (NOTIFY_REPEAT_SECONDS), and one message says when a run "
                "succeeds again.",
            ]
        if self.run_id is not None:
            lines.append(f"Run: {self.run_id}")
        if self.admin_url:
            lines.append(f"In the admin: {self.admin_url}")
        return "\n".join(lines) + "\n"

    def _why(self) -> list[str]:
        """Why the run is missed (its reason in words), or what the failed run said."""
        if self.kind == NotifyEvent.FAILED:
            return [f"Error: {headline(self.error)}"] if self.error else []
        lines = [f"Why: {REASONS.get(self.reason, self.reason)}"]
        if self.error:  # a missed run that failed: what it said
            lines.append(f"Error: {headline(self.error)}")
        return lines

    def line(self) -> str:
        """The event on one line, as a digest lists it."""
        at = self.local(self.scheduled_for)
        if self.role in (AlertRole.REPEAT, AlertRole.RECOVERED):
            return self.subject
        if self.kind == NotifyEvent.FAILED:
            return f"{self.schedule_name!r}, {at}: failed: {headline(self.error)}"
        return f"{self.schedule_name!r}, {at}: {self.reason} ({REASONS.get(self.reason, '')})"

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
        kind = "recovered" if self.role == AlertRole.RECOVERED else self.kind
        return {
            "type": f"alert.{kind}",
            "event": self.kind,
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
            "role": self.role if self.kind in (NotifyEvent.MISSED, NotifyEvent.FAILED) else None,
            "count": self.count if self.role in (AlertRole.REPEAT, AlertRole.RECOVERED) else None,
            "since": self.since.isoformat() if self.since is not None else None,
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
        error=event.error or _errors([event]).get(event.run_id or 0, ""),
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
    errors = _errors(events)
    completed = []
    for event in events:
        sid = event.schedule_id
        name, zone = rows.get(sid, (f"#{sid} (deleted)", "UTC")) if sid is not None else ("", "UTC")
        url = admin_url(base, "admin:django_schedulinator_schedule_change", [sid])
        error = event.error or errors.get(event.run_id or 0, "")
        completed.append(
            dataclasses.replace(
                event, schedule_name=name, timezone=zone, admin_url=url, error=error
            )
        )
    return completed


def _errors(events: Sequence[Event]) -> dict[int, str]:
    """The errors of the runs of missed events whose reason is "failed", by run: what the
    message says the run failed with (one query, only for such events)."""
    wanted = [
        e
        for e in events
        if e.kind == NotifyEvent.MISSED and e.reason == "failed" and e.run_id and not e.error
    ]
    if not wanted:
        return {}
    ids = sorted({e.run_id for e in wanted if e.run_id})
    # Their nominal times bound the read (spans.py); each such event carries its own.
    times = [e.scheduled_for for e in wanted]
    span = None if None in times else Span.of(t for t in times if t is not None)
    runs = Run.objects.using(router.db_for_read(Run)).within(span).filter(pk__in=ids)
    return dict(runs.values_list("pk", "error"))


def admin_url(base: str, name: str, args: list[Any] | None = None) -> str:
    """The admin's page ``name`` under ``base`` (NOTIFY's BASE_URL); "" without one."""
    if not base:
        return ""
    try:
        return base + reverse(name, args=args)
    except NoReverseMatch:  # the admin is not installed, or not under this name
        return ""
