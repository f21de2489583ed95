"""Notifiers for the tests (``SCHEDULINATOR["NOTIFY"]["BACKEND"]`` names them): real
subclasses of BaseNotifier that keep what they are told in this process, and ones that
fail the ways a notifier can (raising, hanging)."""

from __future__ import annotations

import threading
from typing import ClassVar

from django_schedulinator.operations.events import Event
from django_schedulinator.operations.notifiers import BaseNotifier


class Keep(BaseNotifier):
    """Keeps each event it is told of (in ``told``), and the thread it was told in."""

    told: ClassVar[list[Event]] = []
    threads: ClassVar[list[str]] = []

    def notify(self, event: Event) -> None:
        self.told.append(event)
        self.threads.append(threading.current_thread().name)


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
