"""The receivers of the app's signals for the events a notifier is told of, once each,
from the process that made them true: ``schedule_paused`` with ``auto`` ("auto_paused") and
``schedulers_down`` ("no_scheduler"); a notifier that fails them is logged, and they are not
tried again. ``connect_receivers`` (called by ``ready()``, and again when the setting
changes) connects only the signals of the events in NOTIFY's ``EVENTS``. A missed run and a
failed run are told from the outbox (``delivery.py``), where their streaks are grouped
(``grouping.py``), not from their signals.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.dispatch import Signal
from django.utils import timezone

from django_schedulinator import signals
from django_schedulinator.conf import SETTING_NAME, app_settings
from django_schedulinator.operations.courier import courier
from django_schedulinator.operations.events import Event
from django_schedulinator.timing.vocabulary import NotifyEvent


def _auto_paused(sender: Any, *, schedule_id: int, note: str, auto: bool, **kwargs: Any) -> None:
    if auto:
        courier.put(
            Event(NotifyEvent.AUTO_PAUSED, timezone.now(), schedule_id=schedule_id, note=note)
        )


def _schedulers_down(sender: Any, *, since: datetime, **kwargs: Any) -> None:
    courier.put(Event(NotifyEvent.NO_SCHEDULER, since))


# "missed" and "failed" are told from the outbox (deliver_outbox), not from their signals.
RECEIVERS: dict[str, tuple[Signal, Callable[..., None]]] = {
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
