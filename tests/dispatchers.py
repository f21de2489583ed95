"""Dispatchers for the tests of the dispatch seam: real subclasses of BaseDispatcher that
hand occurrences to a list in this process (the scheduler's worker runs in it too), so a
test can see what each was given. They stand for a system that runs the work elsewhere;
the integrations with real brokers are tested against those brokers."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from django_schedulinator.dispatch import BaseDispatcher, Occurrence, Option, Outcome, Progress


class HandOff(BaseDispatcher):
    """Hands each occurrence off (outcome "dispatched", an external id of its own).
    ``OPTIONS["REPORTS"]``: whether the worker side reports outcomes back."""

    received: ClassVar[list[tuple[str, Occurrence]]] = []  # (alias, occurrence)
    options = {"REPORTS": Option(bool, "The worker side reports outcomes.", default=False)}
    schedule_options = {
        "queue": Option(str, "A queue."),
        "priority": Option(int, "A priority.", minimum=0, maximum=9),
    }

    def __init__(self, alias: str = "default", options: Mapping[str, Any] | None = None):
        super().__init__(alias, options)
        self.reports_outcomes = bool(self.settings["REPORTS"])

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        self.received.extend((self.alias, o) for o in occurrences)
        return [Outcome(o.run_id, "dispatched", external_id=f"ext-{o.key}") for o in occurrences]


class Flaky(BaseDispatcher):
    """Fails to hand off (outcome "retry") the first ``failures`` times per occurrence."""

    failures: ClassVar[int] = 2
    attempts: ClassVar[list[tuple[str, int]]] = []  # (key, attempt)
    reports_outcomes = True

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        outcomes = []
        for o in occurrences:
            self.attempts.append((o.key, o.attempt))
            if o.attempt <= self.failures:
                outcomes.append(Outcome(o.run_id, "retry", f"broker down (attempt {o.attempt})"))
            else:
                outcomes.append(Outcome(o.run_id, "succeeded"))
        return outcomes


class Blocking(BaseDispatcher):
    """Blocks every batch until ``release`` is set: a dispatcher whose broker hangs."""

    entered = threading.Event()
    release = threading.Event()
    reports_outcomes = True

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        self.entered.set()
        while not self.release.wait(0.05):
            progress.keepalive()
        return [Outcome(o.run_id, "succeeded") for o in occurrences]


class Slow(BaseDispatcher):
    """Takes ``seconds`` per batch: a dispatcher slower than the claims."""

    seconds: ClassVar[float] = 1.5
    reports_outcomes = True

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            progress.keepalive()
            time.sleep(0.05)
        return [Outcome(o.run_id, "succeeded") for o in occurrences]
