"""Notifiers: who is told of an event. ``BaseNotifier`` (subclass it and implement
``notify(event)``), and the built-in ``MailNotifier`` (Django's ``mail_admins``) and
``WebhookNotifier`` (a named target of a webhook dispatcher alias, signed like that alias's
hand-offs); the parser of ``SCHEDULINATOR["NOTIFY"]``, the notifier it names
(``get_notifier``), and ``deliver``, which tells it of one event.

A notifier never runs on a scheduler's claim path nor in a database transaction: the
courier (``courier.py``) sends what a scheduler's threads raise; the outbox's delivery step
(``delivery.py``) sends the missed runs.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from django_schedulinator.conf import (
    NOTIFY_EVENTS,
    SETTING_NAME,
    NotifyConfig,
    Setting,
    Settings,
    app_settings,
)
from django_schedulinator.dispatch.base import Option
from django_schedulinator.errors import NotifyError
from django_schedulinator.operations.events import Event, complete

# The logger of every part of the notifications (events, notifiers, delivery, courier).
logger = logging.getLogger("django_schedulinator.notify")

WHERE = f"{SETTING_NAME}['NOTIFY']"


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
# The built-in notifiers' former paths (before they moved from django_schedulinator.notify):
# a BACKEND that names one still works, as the path it names now.
FORMER_PATHS = {
    "django_schedulinator.notify.MailNotifier": f"{__name__}.MailNotifier",
    "django_schedulinator.notify.WebhookNotifier": f"{__name__}.WebhookNotifier",
}


def former_paths(backend: str) -> list[str]:
    """The former paths of the notifier ``backend`` names (none for most)."""
    return [old for old, new in FORMER_PATHS.items() if new == backend]


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
    backend = FORMER_PATHS.get(backend, backend)
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
            f"{WHERE}['BACKEND'] is {config.backend!r}, which is not a {__name__}.BaseNotifier."
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


def deliver(event: Event) -> None:
    """Tell the notifier of the settings; whatever goes wrong is logged, never raised."""
    try:
        notifier = get_notifier()
        if notifier is not None and notifier.wants(event):
            notifier.notify(complete(event))
    except Exception:
        logger.exception("Could not notify of %s (%s): the notifier failed.", event.kind, event.id)
