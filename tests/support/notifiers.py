"""Notifiers for the tests (``SCHEDULINATOR["NOTIFY"]["BACKEND"]`` names them): real
subclasses of BaseNotifier that keep what they are told in this process, and ones that
fail the ways a notifier can (raising, hanging)."""

from __future__ import annotations

import threading
from typing import ClassVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_schedulinator.operations.events import Event
from django_schedulinator.operations.notifiers import BaseNotifier


class Keep(BaseNotifier):
    """Keeps each event it is told of (in ``told``), the thread it was told in, and that
    thread's database connection (in which the event was completed)."""

    told: ClassVar[list[Event]] = []
    threads: ClassVar[list[str]] = []
    connections: ClassVar[list[BaseDatabaseWrapper]] = []

    def notify(self, event: Event) -> None:
        self.told.append(event)
        self.threads.append(threading.current_thread().name)
        self.connections.append(connections[DEFAULT_DB_ALIAS])


class Relay(BaseNotifier):
    """Told of an event with a schedule, raises one without (through the courier, as a
    receiver of a signal would, from whatever thread it is told in); keeps the kinds as it
    is told of them (``told``) and as it is done with them (``done``)."""

    told: ClassVar[list[str]] = []
    done: ClassVar[list[str]] = []
    threads: ClassVar[list[str]] = []

    def notify(self, event: Event) -> None:
        from django_schedulinator.operations.courier import courier

        self.told.append(event.kind)
        self.threads.append(threading.current_thread().name)
        if event.schedule_id is not None:
            courier.put(Event("no_scheduler", event.noticed_at))
        self.done.append(event.kind)


class Broken(BaseNotifier):
    """Raises, as a notifier whose service is down does."""

    def notify(self, event: Event) -> None:
        raise ConnectionError("the pager service is down")


class Hang(BaseNotifier):
    """Blocks until ``release`` is set (a mail server that never answers)."""

    release: ClassVar[threading.Event] = threading.Event()
    entered: ClassVar[threading.Event] = threading.Event()

    def notify(self, event: Event) -> None:
        self.entered.set()
        self.release.wait(120)
