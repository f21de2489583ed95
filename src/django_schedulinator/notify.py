"""Notifications: who is told when an occurrence is missed, a run fails, a schedule is
paused after failures in a row, or no scheduler is alive.

The notifier of ``SCHEDULINATOR["NOTIFY"]`` is told through the app's own signals, so
nothing is wired twice and each event reaches it once, from the process that made it true:
``run_missed`` ("missed"), ``run_finished`` with the status "failed" ("failed"),
``schedule_paused`` with ``auto`` ("auto_paused") and ``schedulers_down``
("no_scheduler"). ``connect_receivers`` (called by ``ready()``, and again when the setting
changes) connects only the signals of the events in ``EVENTS``: "failed" is left out by
default, since a receiver of ``run_finished`` costs a query per recorded batch.

A notifier never runs on a scheduler's claim path nor in a database transaction. Signals
are sent after the commit; in a scheduler's own threads (its loop, its dispatcher lanes
and its recorder, ``Outbox.send_in_background``) an event is queued, and one background
thread sends the queue (bounded: an event over the bound is dropped, with a log; a stop waits a few
seconds for what is queued). Anywhere else (a web process that recorded a reported outcome,
``scheduler_status --notify``) it is sent before the signal returns. A notifier that raises
or times out is logged, and nothing else changes.

Built in: ``MailNotifier`` (Django's ``mail_admins``) and ``WebhookNotifier`` (a named
target of a webhook dispatcher alias, signed like that alias's hand-offs). Your own:
subclass ``BaseNotifier`` and implement ``notify(event)``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.dispatch import Signal
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from . import signals, timing
from .alerts import REASONS
from .conf import SETTING_NAME, NotifyConfig, app_settings
from .dispatch.base import Option
from .errors import NotifyError, TimingError
from .models import Schedule
from .statuses import RunStatus

logger = logging.getLogger("django_schedulinator.notify")

# Events waiting for a scheduler's background thread; more are dropped (and logged).
QUEUE_SIZE = 1000
WHERE = f"{SETTING_NAME}['NOTIFY']"


@dataclass(frozen=True, slots=True)
class Event:
    """What a notifier is told. ``kind`` is "missed", "failed", "auto_paused" or
    "no_scheduler"; the schedule's fields are empty for "no_scheduler", whose
    ``noticed_at`` is when the outage was noticed."""

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

    @property
    def id(self) -> str:
        """The same for every notification of this event: receivers dedupe on it."""
        if self.kind == "no_scheduler":
            return f"no_scheduler:{timing.to_ms(self.noticed_at)}"
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
        if self.kind == "missed":
            return f"Missed run of {name!r}, {at} ({self.reason})"
        if self.kind == "failed":
            return f"Failed run of {name!r}, {at}"
        if self.kind == "auto_paused":
            return f"{name!r} was paused after failures in a row"
        return f"No scheduler is running (noticed at {self.local(self.noticed_at)})"

    def text(self) -> str:
        """The notification in words: what happened, when, why, and where to look."""
        name, at = self.schedule_name, self.scheduled_for
        utc = f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if at is not None else ""
        utc = f" ({utc})" if utc and utc != self.local(at) else ""
        if self.kind == "missed":
            lines = [
                f"The schedule {name!r} had no successful run within its grace of {self.grace}.",
                "",
                f"Occurrence: {self.local(at)}{utc}",
                f"Reason: {self.reason}: {REASONS.get(self.reason, self.reason)}",
            ]
        elif self.kind == "failed":
            lines = [
                f"A run of the schedule {name!r} failed.",
                "",
                f"Occurrence: {self.local(at)}{utc}",
                "Error:",
                self.error.rstrip(),
            ]
        elif self.kind == "auto_paused":
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

        from .dispatch.webhook import sign

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
    from .dispatch import dispatchers
    from .dispatch.webhook import WebhookDispatcher

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


class Outbox:
    """Where events go: queued for one background thread when they are raised in a
    scheduler's own threads, sent at once anywhere else."""

    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self._queue: queue.Queue[Event] = queue.Queue(size)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def send_in_background(self, enabled: bool = True) -> None:
        """From now on, events raised by this thread are queued (a scheduler's loop and
        lanes), or sent at once (``enabled=False``)."""
        self._local.background = enabled

    def put(self, event: Event) -> None:
        if not getattr(self._local, "background", False):
            deliver(event)
            return
        self._start()
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            with self._lock:
                self.dropped += 1
                dropped = self.dropped
            if dropped == 1 or dropped % 100 == 0:
                logger.error(
                    "%d notification(s) dropped so far: %d wait to be sent already (the "
                    "notifier is slow or hangs). Dropped: %s.",
                    dropped,
                    self._queue.qsize(),
                    event.id,
                )

    def drain(self, timeout: float) -> bool:
        """Wait, ``timeout`` seconds at most, until the queued events are sent; whether
        they all were."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
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
            event = self._queue.get()
            try:
                deliver(event)
            finally:
                connections.close_all()  # this thread's
                self._queue.task_done()


outbox = Outbox()


# -- the receivers of the signals --------------------------------------------------------------


def _missed(
    sender: Any,
    *,
    schedule_id: int,
    scheduled_for: datetime,
    run_id: int | None,
    reason: str,
    grace: timedelta,
    **kwargs: Any,
) -> None:
    outbox.put(
        Event(
            "missed",
            timezone.now(),
            schedule_id=schedule_id,
            scheduled_for=scheduled_for,
            run_id=run_id,
            reason=reason,
            grace=grace,
        )
    )


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
        outbox.put(
            Event(
                "failed",
                timezone.now(),
                schedule_id=schedule_id,
                scheduled_for=scheduled_for,
                run_id=run_id,
                error=error,
            )
        )


def _auto_paused(sender: Any, *, schedule_id: int, note: str, auto: bool, **kwargs: Any) -> None:
    if auto:
        outbox.put(Event("auto_paused", timezone.now(), schedule_id=schedule_id, note=note))


def _schedulers_down(sender: Any, *, since: datetime, **kwargs: Any) -> None:
    outbox.put(Event("no_scheduler", since))


RECEIVERS: dict[str, tuple[Signal, Callable[..., None]]] = {
    "missed": (signals.run_missed, _missed),
    "failed": (signals.run_finished, _failed),
    "auto_paused": (signals.schedule_paused, _auto_paused),
    "no_scheduler": (signals.schedulers_down, _schedulers_down),
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
