"""Dispatchers for the tests of the dispatch seam: real subclasses of BaseDispatcher that
hand occurrences to a list in this process (the scheduler's worker runs in it too), so a
test can see what each was given. Those that send one occurrence at a time implement
``send`` (the base class hands each off through its guard); those that act on a whole
batch override ``dispatch``. They stand for a system that runs the work elsewhere;
the integrations with real brokers are tested against those brokers."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from django_schedulinator.dispatch import (
    BaseDispatcher,
    Call,
    Occurrence,
    Option,
    Outcome,
    Progress,
)


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

    def send(self, occurrence: Occurrence, call: Call) -> Outcome:
        self.received.append((self.alias, occurrence))
        return Outcome(occurrence.run_id, "dispatched", external_id=f"ext-{occurrence.key}")


class Flaky(BaseDispatcher):
    """Fails to hand off (outcome "retry") the first ``failures`` times per occurrence."""

    failures: ClassVar[int] = 2
    attempts: ClassVar[list[tuple[str, int]]] = []  # (key, attempt)
    reports_outcomes = True

    def send(self, occurrence: Occurrence, call: Call) -> Outcome:
        self.attempts.append((occurrence.key, occurrence.attempt))
        if occurrence.attempt <= self.failures:
            return Outcome(
                occurrence.run_id, "retry", f"broker down (attempt {occurrence.attempt})"
            )
        return Outcome(occurrence.run_id, "succeeded")


class Blocking(BaseDispatcher):
    """Blocks every batch until ``release`` is set: a dispatcher whose broker hangs."""

    entered = threading.Event()
    release = threading.Event()
    reports_outcomes = True

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        self.entered.set()
        self.release.wait()
        return [Outcome(o.run_id, "succeeded") for o in occurrences]


class Slow(BaseDispatcher):
    """Takes ``seconds`` per batch: a dispatcher slower than the claims."""

    seconds: ClassVar[float] = 1.5
    reports_outcomes = True

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        time.sleep(self.seconds)
        return [Outcome(o.run_id, "succeeded") for o in occurrences]


class Breaks(BaseDispatcher):
    """Hands off the runs of schedules named "ok-...", each reported at once, and raises at
    the first other: a dispatcher that breaks the promise to return one outcome each."""

    reports_outcomes = True

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        for o in occurrences:
            if not o.schedule_name.startswith("ok-"):
                raise RuntimeError("the broker client broke")
            progress.finished([Outcome(o.run_id, "dispatched", external_id=f"ext-{o.key}")])
        return []
