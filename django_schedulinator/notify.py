"""Notifications: who is told when an occurrence is missed, a run fails, a schedule is
paused after failures in a row, or no scheduler is alive.

A missed run is told from the outbox (``outbox.py``): the check writes an entry for it in
the transaction that marks the miss, and the delivery step, ``deliver_outbox``, sends what
waits and marks it delivered once the notifier accepted it; refused, it is sent again after
a back-off. The step is the same wherever it runs: in a scheduler after its missed-run
check (on the background thread below), in ``scheduler_status --notify``, or called by a
job of your own. It sends at most ``NOTIFY_MESSAGES_PER_MINUTE`` messages a minute; when
more misses wait than that lets through one by one, they go as one digest (an ``Event`` of
kind "digest", which lists the first ``NOTIFY_DIGEST_SIZE`` and counts the rest). It stops
at its deadline (``NOTIFY_DELIVERY_SECONDS``), checked between two messages, and leaves the
rest to the next step.

The other events are told through the app's own signals, once each, from the process that
made them true: ``run_finished`` with the status "failed" ("failed"), ``schedule_paused``
with ``auto`` ("auto_paused") and ``schedulers_down`` ("no_scheduler"); a notifier that
fails them is logged, and they are not tried again. ``connect_receivers`` (called by
``ready()``, and again when the setting changes) connects only the signals of the events in
``EVENTS``: "failed" is left out by default, since a receiver of ``run_finished`` costs a
query per recorded batch.

A notifier never runs on a scheduler's claim path nor in a database transaction. In a
scheduler's own threads (its loop, its dispatcher lanes and its recorder,
``Courier.send_in_background``) an event, or a delivery step, is queued, and one background
thread sends the queue (bounded: an event over the bound is dropped, with a log; a stop
waits a few seconds for what is queued). Anywhere else (a web process that recorded a
reported outcome, ``scheduler_status --notify``) it is sent before the call returns.

Built in: ``MailNotifier`` (Django's ``mail_admins``) and ``WebhookNotifier`` (a named
target of a webhook dispatcher alias, signed like that alias's hand-offs). Your own:
subclass ``BaseNotifier`` and implement ``notify(event)``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.dispatch import Signal
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from django_schedulinator import signals, timing
from django_schedulinator.conf import (
    NOTIFY_EVENTS,
    SETTING_NAME,
    NotifyConfig,
    Setting,
    Settings,
    app_settings,
)
from django_schedulinator.dispatch.base import Option
from django_schedulinator.errors import NotifyError, TimingError
from django_schedulinator.index import clock
from django_schedulinator.models import Notification, Schedule
from django_schedulinator.operations import outbox
from django_schedulinator.operations.alerts import REASONS
from django_schedulinator.statuses import RunStatus
from django_schedulinator.timing.vocabulary import NotifyEvent

logger = logging.getLogger("django_schedulinator.notify")

# Events waiting for a scheduler's background thread; more are dropped (and logged).
QUEUE_SIZE = 1000
WHERE = f"{SETTING_NAME}['NOTIFY']"


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


class BaseNotifier:
    """Tells someone of an event. Built from NOTIFY's ``OPTIONS`` (checked against
    ``options`` first, by ``option_problems``); the constructor connects to nothing.
    ``notify`` may block for as long as its own timeout allows, and raise: either is logged,
    and nothing else changes."""

    #: The OPTIONS it accepts.
    options: ClassVar[Mapping[str, Option]] = {}
    #: OPTIONS it cannot do without.
    required: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        given = dict(options or {})
        self.settings = {name: given.get(name, spec.default) for name, spec in self.options.items()}

    @classmethod
    def option_problems(cls, options: Mapping[str, Any]) -> list[str]:
        """What is wrong with NOTIFY's ``OPTIONS`` for this notifier."""
        problems = [f"{name!r} is required" for name in cls.required if name not in options]
        for name, value in options.items():
            spec = cls.options.get(name)
            if spec is None:
                takes = ", ".join(sorted(cls.options)) or "none"
                problems.append(f"{name!r} is not an option of {cls.__name__} (it takes: {takes})")
            elif (problem := spec.problem(value)) is not None:
                problems.append(f"{name!r} {problem}")
        return problems

    def wants(self, event: Event) -> bool:
        """Whether anyone would be told of ``event``: asked before the event is completed
        with its schedule's name (a query), which is skipped when nobody would be."""
        return True

    def notify(self, event: Event) -> None:
        raise NotImplementedError


class MailNotifier(BaseNotifier):
    """Mails ``ADMINS`` (Django's ``mail_admins``: its subject prefix, its sender, the
    project's email backend). Without ADMINS, nothing is sent."""

    def wants(self, event: Event) -> bool:
        from django.conf import settings

        return bool(settings.ADMINS)

    def notify(self, event: Event) -> None:
        from django.core.mail import mail_admins

        # The project's own email configuration, its timeout included (EMAIL_TIMEOUT, or
        # a mailer's "timeout" on Django 6.1+): a connection of our own would need the API
        # that Django 6.1 deprecates, get_connection().
        mail_admins(event.subject, event.text())


class WebhookNotifier(BaseNotifier):
    """POSTs the event as JSON (``Event.as_dict``) to a target of a webhook dispatcher
    alias: the URL and the secret stay in that alias's settings. Signed like its
    hand-offs (Standard Webhooks: ``webhook-id`` is the event's id, the same on a second
    notification of it); the alias's ``TIMEOUT_SECONDS`` bounds each phase of the request.
    A 2xx answer is success; anything else raises (and is logged)."""

    options = {
        "DISPATCHER": Option(str, "A webhook dispatcher alias in SCHEDULINATOR['DISPATCHERS']."),
        "TARGET": Option(str, "The name of one of that alias's TARGETS."),
    }
    required = ("DISPATCHER", "TARGET")

    @classmethod
    def option_problems(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().option_problems(options)
        if problems:
            return problems
        try:
            _target(options["DISPATCHER"], options["TARGET"])
        except ImproperlyConfigured as exc:
            return [str(exc)]
        return []

    def notify(self, event: Event) -> None:
        import httpx

        from django_schedulinator.dispatch.webhook import sign

        target, timeout = _target(self.settings["DISPATCHER"], self.settings["TARGET"])
        body = json.dumps(event.as_dict(), separators=(",", ":")).encode()
        timestamp = int(time.time())
        headers = {
            "content-type": "application/json",
            "user-agent": "django-schedulinator",
            "webhook-id": event.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(target["SECRET"], event.id, timestamp, body),
        }
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            answer = client.post(target["URL"], content=body, headers=headers)
        if not 200 <= answer.status_code < 300:
            raise NotifyError(
                f"The webhook target {self.settings['TARGET']!r} answered HTTP "
                f"{answer.status_code}: {answer.text[:200]}"
            )


def _target(alias: str, name: str) -> tuple[dict[str, str], float]:
    """The URL and secret of the target ``name`` of the webhook alias ``alias``, and the
    alias's timeout; ImproperlyConfigured, saying what is missing, otherwise."""
    from django_schedulinator.dispatch import dispatchers
    from django_schedulinator.dispatch.webhook import WebhookDispatcher

    dispatcher = dispatchers[alias]  # an alias that is not configured says so
    if not isinstance(dispatcher, WebhookDispatcher):
        raise ImproperlyConfigured(
            f"'DISPATCHER' {alias!r} is not a webhook dispatcher (its BACKEND is "
            f"{type(dispatcher).__name__}, not "
            "django_schedulinator.dispatch.webhook.WebhookDispatcher)"
        )
    target = dispatcher.targets.get(name)
    if target is None:
        raise ImproperlyConfigured(
            f"'TARGET' {name!r} is not one of the TARGETS of the dispatcher {alias!r} "
            f"({', '.join(sorted(dispatcher.targets))})"
        )
    return target, float(dispatcher.settings["TIMEOUT_SECONDS"])


# -- the setting ------------------------------------------------------------------------------

NOTIFY_KEYS = ("BACKEND", "OPTIONS", "EVENTS", "BASE_URL")


def parse_notify(setting: Setting[NotifyConfig | None], value: Any) -> NotifyConfig | None:
    """SCHEDULINATOR["NOTIFY"]: the notifier's configuration, the defaults filled in; None:
    no notifier."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - set(NOTIFY_KEYS):
        raise setting.error(f"must be None or a dict with {', '.join(NOTIFY_KEYS)}, got {value!r}")
    default = setting.default
    backend = value.get("BACKEND", default["BACKEND"])
    if not isinstance(backend, str) or not backend:
        raise setting.error(f"['BACKEND'] must be a dotted path, got {backend!r}")
    options = value.get("OPTIONS", {})
    if not isinstance(options, dict):
        raise setting.error(f"['OPTIONS'] must be a dict, got {options!r}")
    events = value.get("EVENTS", default["EVENTS"])
    if (
        not isinstance(events, list | tuple)
        or not all(isinstance(e, str) for e in events)
        or set(events) - set(NOTIFY_EVENTS)
    ):
        raise setting.error(
            f"['EVENTS'] must be a list of {', '.join(NOTIFY_EVENTS)}, got {events!r}"
        )
    base_url = value.get("BASE_URL", "")
    if not isinstance(base_url, str) or (
        base_url and not re.match(r"^https?://[^/\s]+(/\S*)?$", base_url)
    ):
        raise setting.error(
            f"['BASE_URL'] must be an http:// or https:// address (the site's, for links "
            f"to the admin) or empty, got {base_url!r}"
        )
    return NotifyConfig(backend, options, tuple(events), base_url.rstrip("/"))


Settings.NOTIFY.parsed_by(parse_notify)


# -- the notifier of the settings ------------------------------------------------------------

_built: dict[str, BaseNotifier] = {}
_built_lock = threading.Lock()


def backend_class(config: NotifyConfig) -> type[BaseNotifier]:
    """The class NOTIFY's BACKEND names (a path from the settings, never from data)."""
    try:
        cls = import_string(config.backend)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"{WHERE}['BACKEND'] is {config.backend!r}, which cannot be imported: {exc}"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, BaseNotifier)):
        raise ImproperlyConfigured(
            f"{WHERE}['BACKEND'] is {config.backend!r}, which is not a "
            "django_schedulinator.notify.BaseNotifier."
        )
    return cls


def option_problems(config: NotifyConfig) -> list[str]:
    """What is wrong with NOTIFY's OPTIONS for its BACKEND (which must import)."""
    return backend_class(config).option_problems(config.options)


def get_notifier() -> BaseNotifier | None:
    """The notifier of the settings now (None: NOTIFY is None), built once per
    configuration. ImproperlyConfigured when it cannot be built."""
    config = app_settings.NOTIFY
    if config is None:
        return None
    key = repr(config)
    with _built_lock:
        found = _built.get(key)
        if found is None:
            cls = backend_class(config)
            problems = cls.option_problems(config.options)
            if problems:
                raise ImproperlyConfigured(f"{WHERE}['OPTIONS']: {'; '.join(problems)}.")
            found = cls(config.options)
            _built.clear()  # the settings changed (tests): the old one is not needed
            _built[key] = found
        return found


def complete(event: Event) -> Event:
    """The event with its schedule's name and zone, and a link to the admin when NOTIFY
    has a BASE_URL: read where it is sent, not on the path that raised it."""
    config = app_settings.NOTIFY
    base = config.base_url if config is not None else ""
    if event.schedule_id is None:
        return dataclasses.replace(
            event, admin_url=_admin_url(base, "admin:django_schedulinator_schedule_operations")
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
        admin_url=_admin_url(
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
        url = _admin_url(base, "admin:django_schedulinator_schedule_change", [sid])
        completed.append(
            dataclasses.replace(event, schedule_name=name, timezone=zone, admin_url=url)
        )
    return completed


def _admin_url(base: str, name: str, args: list[Any] | None = None) -> str:
    if not base:
        return ""
    try:
        return base + reverse(name, args=args)
    except NoReverseMatch:  # the admin is not installed, or not under this name
        return ""


def deliver(event: Event) -> None:
    """Tell the notifier of the settings; whatever goes wrong is logged, never raised."""
    try:
        notifier = get_notifier()
        if notifier is not None and notifier.wants(event):
            notifier.notify(complete(event))
    except Exception:
        logger.exception("Could not notify of %s (%s): the notifier failed.", event.kind, event.id)


# -- the outbox's delivery step -----------------------------------------------------------------


@dataclass(slots=True)
class Delivery:
    """What one delivery step did."""

    notifier: str = ""  # NOTIFY's BACKEND; "": nobody is told of missed runs
    messages: int = 0  # the notifier accepted them
    told: int = 0  # misses in those messages
    failed: int = 0  # messages refused (or raising): sent again after a back-off
    waiting: int = 0  # misses still waiting when it ended
    rate_limited: bool = False  # the minute's messages were spent: the rest wait for the next
    stopped: bool = False  # its deadline (or a stop) came before everything due was sent

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        if not self.notifier:
            return "nobody is told (NOTIFY is None, or its EVENTS leave out 'missed')"
        text = (
            f"{self.messages} message(s) sent ({self.told} missed run(s)), {self.failed} "
            f"refused, {self.waiting} waiting"
        )
        if self.rate_limited:
            text += " (the minute's messages are spent: NOTIFY_MESSAGES_PER_MINUTE)"
        if self.stopped:
            text += " (stopped at the deadline: the next step sends the rest)"
        return text


def deliver_outbox(
    *,
    seconds: float | None = None,
    using: str | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Delivery:
    """The delivery step: send what waits in the outbox for the notifier of the settings
    (at Redis time, ``clock.now()``; this host's while Redis is away), and mark each entry
    delivered once the notifier accepted its message. At most NOTIFY_MESSAGES_PER_MINUTE
    messages a minute: when more misses are due than the minute has messages left, they go
    as one digest. It sends for ``seconds`` at most (default NOTIFY_DELIVERY_SECONDS),
    checked between two messages, as ``should_stop`` is; what it has not sent by then is
    given back for the next step. Nothing it meets is raised: a notifier that fails is
    logged, and its entries tried again after a back-off."""
    db = using or router.db_for_write(Notification)
    budget_seconds = app_settings.NOTIFY_DELIVERY_SECONDS if seconds is None else seconds
    deadline = time.monotonic() + budget_seconds
    report = Delivery()
    name = outbox.notifier_for(NotifyEvent.MISSED)
    if name is None:
        return report  # nobody is told of misses: what waits, waits
    report.notifier = name
    try:
        notifier = get_notifier()
    except ImproperlyConfigured:
        logger.exception("Could not build the notifier: the missed runs raised wait for it.")
        report.waiting = outbox.waiting(name, using=db)
        return report
    assert notifier is not None  # notifier_for() found NOTIFY
    moved = outbox.retarget(name, using=db)
    if moved:
        logger.warning(
            "%d missed run(s) waited for a notifier that is no longer configured: they go to %s.",
            moved,
            name,
        )
    step = _Step(notifier, name, db, uuid.uuid4().hex, deadline, should_stop, report)
    outbox.prune_delivered(step.now(), using=db)
    while step.send_batch():
        pass
    report.waiting = outbox.waiting(name, using=db)
    return report


class _Step:
    """One delivery step's state: its claim token, its deadline, its report."""

    def __init__(
        self,
        notifier: BaseNotifier,
        name: str,
        db: str,
        token: str,
        deadline: float,
        should_stop: Callable[[], bool] | None,
        report: Delivery,
    ) -> None:
        self.notifier, self.name, self.db, self.token = notifier, name, db, token
        self.deadline, self.should_stop, self.report = deadline, should_stop, report
        self.lease = timedelta(seconds=app_settings.LEASE_SECONDS)
        # Redis TIME once (this host's clock while Redis is away), then the time since:
        # a Redis that does not answer costs its timeout once, not once per message.
        self._read_at, self._started = clock.now(), time.monotonic()

    def now(self) -> datetime:
        return self._read_at + timedelta(seconds=time.monotonic() - self._started)

    def time_is_up(self) -> bool:
        return time.monotonic() >= self.deadline or (
            self.should_stop is not None and self.should_stop()
        )

    def send_batch(self) -> bool:
        """Claim what is due and send it as the minute's messages allow: whether a full
        claim went out whole (more may wait)."""
        now = self.now()
        left = app_settings.NOTIFY_MESSAGES_PER_MINUTE - outbox.sent_since(
            self.name, now - outbox.MINUTE, using=self.db
        )
        if left <= 0:
            self.report.rate_limited = True
            return False
        if self.time_is_up():
            self.report.stopped = True
            return False
        claimed = outbox.claim(
            self.name, now=now, until=now + self.lease, token=self.token, using=self.db
        )
        messages, held_back = _messages(claimed, left)
        if held_back:
            self.report.rate_limited = True
            outbox.release([e.pk for e in held_back], token=self.token, using=self.db)
        for n, entries in enumerate(messages):
            if self.time_is_up():
                self.report.stopped = True
                rest = [e.pk for group in messages[n:] for e in group]
                outbox.release(rest, token=self.token, using=self.db)
                return False
            if not self.send(entries):
                rest = [e.pk for group in messages[n + 1 :] for e in group]
                # The notifier failed: the rest wait as long as the message it refused.
                again = min((e.next_attempt_at for e in entries if e.next_attempt_at), default=None)
                outbox.release(rest, token=self.token, using=self.db, not_before=again)
                return False
        return len(claimed) >= outbox.CLAIM_BATCH and not held_back

    def send(self, entries: list[Notification]) -> bool:
        """One message: a miss alone, or a digest of them. Whether the notifier took it
        (or wants none of it)."""
        event = _event(entries)
        ids = [e.pk for e in entries]
        until = self.now() + self.lease
        if not outbox.start(ids, message=event.id, token=self.token, until=until, using=self.db):
            # Another step took some of them over (this one outlived its claim): it sends them.
            outbox.release(ids, token=self.token, using=self.db)
            return True
        try:
            if not self.notifier.wants(event):
                outbox.delivered(ids, token=self.token, now=self.now(), using=self.db, told=False)
                return True
            self.notifier.notify(_completed(event))
        except Exception as exc:
            attempts = max(e.attempts for e in entries) + 1
            again = outbox.failed(
                ids,
                attempts=attempts,
                token=self.token,
                now=self.now(),
                error=f"{type(exc).__name__}: {exc}",
                using=self.db,
            )
            for e in entries:
                e.next_attempt_at = again
            self.report.failed += 1
            logger.error(
                "Could not notify of %s (%s): the notifier failed (%s: %s). Tried again "
                "from %s (attempt %d so far).",
                event.kind,
                event.id,
                type(exc).__name__,
                exc,
                again.isoformat(),
                attempts,
            )
            return False
        outbox.delivered(ids, token=self.token, now=self.now(), using=self.db)
        self.report.messages += 1
        self.report.told += len(ids)
        return True


def _messages(
    claimed: list[Notification], left: int
) -> tuple[list[list[Notification]], list[Notification]]:
    """The messages ``claimed`` goes out in, at most ``left`` of them, and what waits for
    the next minute. First, as they were, the messages whose sender died while sending them;
    then the rest: each alone if the minute has a message left for each, else one digest."""
    again: dict[str, list[Notification]] = {}
    fresh = []
    for entry in claimed:
        if entry.message:
            again.setdefault(entry.message, []).append(entry)
        else:
            fresh.append(entry)
    messages = list(again.values())[:left]
    held_back = [e for group in list(again.values())[left:] for e in group]
    left -= len(messages)
    if fresh and left <= 0:
        held_back += fresh
    elif len(fresh) <= left:
        messages += [[entry] for entry in fresh]
    else:
        messages.append(fresh)
    return messages, held_back


def _miss(entry: Notification) -> Event:
    return Event(
        NotifyEvent.MISSED,
        entry.raised_at,
        schedule_id=entry.schedule_id,
        scheduled_for=entry.scheduled_for,
        run_id=entry.run_id,
        reason=entry.reason,
        grace=entry.grace,
    )


def _event(entries: list[Notification]) -> Event:
    """A miss alone, or a digest of many: the first NOTIFY_DIGEST_SIZE listed, the rest
    counted (names not read yet: ``_completed`` reads them once the notifier wants it)."""
    if len(entries) == 1:
        return _miss(entries[0])
    listed = tuple(_miss(e) for e in entries[: app_settings.NOTIFY_DIGEST_SIZE])
    noticed = min(e.raised_at for e in entries)
    return Event("digest", noticed, listed=listed, count=len(entries))


def _completed(event: Event) -> Event:
    if event.kind != "digest":
        return complete(event)
    config = app_settings.NOTIFY
    base = config.base_url if config is not None else ""
    url = _admin_url(base, "admin:django_schedulinator_schedule_changelist")
    return dataclasses.replace(
        event,
        listed=tuple(complete_many(event.listed)),
        admin_url=f"{url}?missed=yes" if url else "",
    )


# -- where events are sent from -----------------------------------------------------------------


class Courier:
    """Where events go, and delivery steps run: queued for one background thread when they
    come from a scheduler's own threads, sent at once anywhere else."""

    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self._queue: queue.Queue[tuple[str, Callable[[], None]]] = queue.Queue(size)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._step_queued = False
        # A stop stopped waiting: a delivery step ends after the message it sends.
        self._hurry = threading.Event()
        self.dropped = 0

    def send_in_background(self, enabled: bool = True) -> None:
        """From now on, events raised by this thread are queued (a scheduler's loop and
        lanes), or sent at once (``enabled=False``)."""
        self._local.background = enabled
        if enabled:
            self._hurry.clear()

    def _in_background(self) -> bool:
        return bool(getattr(self._local, "background", False))

    def put(self, event: Event) -> None:
        if not self._in_background():
            deliver(event)
            return
        self._enqueue(event.id, lambda: deliver(event))

    def deliver_outbox(self, using: str | None = None) -> Delivery | None:
        """A delivery step of the outbox (``deliver_outbox``): queued for the background
        thread from a scheduler's threads (at most one waits there), run now elsewhere."""
        if not self._in_background():
            return deliver_outbox(using=using)
        with self._lock:
            if self._step_queued:
                return None
            self._step_queued = True
        self._enqueue("a delivery step of the outbox", lambda: self._step(using))
        return None

    def _step(self, using: str | None) -> None:
        with self._lock:
            self._step_queued = False
        deliver_outbox(using=using, should_stop=self._hurry.is_set)

    def _enqueue(self, what: str, send: Callable[[], None]) -> None:
        self._start()
        try:
            self._queue.put_nowait((what, send))
        except queue.Full:
            with self._lock:
                self.dropped += 1
                dropped = self.dropped
                if what.startswith("a delivery step"):
                    self._step_queued = False  # the next chore queues another
            if dropped == 1 or dropped % 100 == 0:
                logger.error(
                    "%d notification(s) dropped so far: %d wait to be sent already (the "
                    "notifier is slow or hangs). Dropped: %s.",
                    dropped,
                    self._queue.qsize(),
                    what,
                )

    def drain(self, timeout: float) -> bool:
        """Wait, ``timeout`` seconds at most, until what is queued is sent; whether it all
        was. Past the wait, a delivery step in progress ends after its message: what it
        has not sent waits in the outbox for another."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._hurry.set()
                    logger.warning(
                        "Stopped waiting for %d notification(s) still to be sent.",
                        self._queue.unfinished_tasks,
                    )
                    return False
                self._queue.all_tasks_done.wait(left)
        return True

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="schedulinator-notify", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            what, send = self._queue.get()
            try:
                send()
            except Exception:  # the thread must outlive anything: the next one may work
                logger.exception("Sending %s failed.", what)
            finally:
                connections.close_all()  # this thread's
                self._queue.task_done()


courier = Courier()


# -- the receivers of the signals --------------------------------------------------------------


def _failed(
    sender: Any,
    *,
    run_id: int,
    schedule_id: int,
    scheduled_for: datetime,
    status: str,
    error: str,
    **kwargs: Any,
) -> None:
    if status == RunStatus.FAILED:
        courier.put(
            Event(
                NotifyEvent.FAILED,
                timezone.now(),
                schedule_id=schedule_id,
                scheduled_for=scheduled_for,
                run_id=run_id,
                error=error,
            )
        )


def _auto_paused(sender: Any, *, schedule_id: int, note: str, auto: bool, **kwargs: Any) -> None:
    if auto:
        courier.put(
            Event(NotifyEvent.AUTO_PAUSED, timezone.now(), schedule_id=schedule_id, note=note)
        )


def _schedulers_down(sender: Any, *, since: datetime, **kwargs: Any) -> None:
    courier.put(Event(NotifyEvent.NO_SCHEDULER, since))


# "missed" is told from the outbox (deliver_outbox), not from its signal.
RECEIVERS: dict[str, tuple[Signal, Callable[..., None]]] = {
    NotifyEvent.FAILED: (signals.run_finished, _failed),
    NotifyEvent.AUTO_PAUSED: (signals.schedule_paused, _auto_paused),
    NotifyEvent.NO_SCHEDULER: (signals.schedulers_down, _schedulers_down),
}


def connect_receivers() -> None:
    """Connect the receivers of the events NOTIFY asks for, and disconnect the others
    (none with NOTIFY None, or invalid: check E001 says so)."""
    try:
        config = app_settings.NOTIFY
    except ImproperlyConfigured:
        config = None
    events = set(config.events) if config is not None else set()
    for kind, (signal, receiver) in RECEIVERS.items():
        uid = f"schedulinator-notify-{kind}"
        if kind in events:
            signal.connect(receiver, dispatch_uid=uid)
        else:
            signal.disconnect(dispatch_uid=uid)


def settings_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` (override_settings): follow NOTIFY's EVENTS."""
    if setting == SETTING_NAME:
        connect_receivers()
