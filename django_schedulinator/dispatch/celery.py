"""Celery: each occurrence is sent to the Celery task of the same name, with ``send_task``.

The task id is derived from the occurrence key (``uuid5``), so every re-delivery of an
occurrence carries the same id, and the key itself travels in the ``schedulinator_key``
header. Outcomes come back from the workers through a small hook on Celery's signals
(``report_outcomes``), which the alias declares installed with ``REPORTS_OUTCOMES``.

A second send of the same occurrence (its scheduler died before recording the first): Celery
does not dedupe by task id, so the worker runs the task twice; the key lets the task (and
the hook: a second end report changes nothing) drop the repeat.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from django.core.checks import CheckMessage, Error, Warning
from django.utils.module_loading import import_string

from django_schedulinator.dispatch.base import (
    DEFAULT_ALIAS,
    BaseDispatcher,
    Call,
    Occurrence,
    Option,
    Outcome,
)
from django_schedulinator.errors import Unreachable
from django_schedulinator.statuses import OutcomeStatus, ReportedStatus

KEY_HEADER = "schedulinator_key"
# Task ids are uuid5 of the key in this namespace: the same key, the same id, everywhere.
TASK_ID_NAMESPACE = uuid.UUID("0b3c4b8e-6c0f-5b8e-9a57-5c6865647531")


def task_id(key: str) -> str:
    """The Celery task id of an occurrence."""
    return str(uuid.uuid5(TASK_ID_NAMESPACE, key))


class CeleryDispatcher(BaseDispatcher):
    """Sends each occurrence with ``app.send_task`` to the Celery task of its name."""

    extra = "celery"
    options = {
        "APP": Option(str, "The dotted path of your Celery app (settings are code)."),
        "REPORTS_OUTCOMES": Option(
            bool,
            "The workers run report_outcomes(app): runs end succeeded or failed.",
            default=False,
        ),
        "TASK_NAMES": Option(dict, "Registered task names to Celery task names."),
    }
    schedule_options = {
        "queue": Option(str, "The queue to send to."),
        "routing_key": Option(str, "The routing key."),
        "priority": Option(
            int, "The message priority (the broker's range).", minimum=0, maximum=255
        ),
        "expires": Option(
            float, "Seconds after the hand-off when a worker must drop it.", minimum=1
        ),
    }

    def __init__(self, alias: str = DEFAULT_ALIAS, options: Mapping[str, Any] | None = None):
        super().__init__(alias, options)
        self.task_names: dict[str, str] = dict(self.settings["TASK_NAMES"] or {})
        self._app: Any = None
        self._producer: Any = None  # the batch's, while one is sent

    @property
    def reports_outcomes(self) -> bool:  # type: ignore[override]
        """Its workers report outcomes when OPTIONS['REPORTS_OUTCOMES'] says they run
        ``report_outcomes(app)``."""
        return bool(self.settings["REPORTS_OUTCOMES"])

    @classmethod
    def option_problems(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().option_problems(options)
        if not options.get("APP"):
            problems.append("'APP' must name your Celery app, e.g. 'myproject.celery.app'")
        names = options.get("TASK_NAMES") or {}
        if not all(isinstance(k, str) and isinstance(v, str) and v for k, v in names.items()):
            problems.append("'TASK_NAMES' must map registered names to Celery task names")
        return problems

    @property
    def app(self) -> Any:
        if self._app is None:
            self._app = import_string(self.settings["APP"])
        return self._app

    def check(self, *, connect: bool = False) -> list[CheckMessage]:
        try:
            import celery  # noqa: F401
        except ImportError:
            return [
                Error(
                    f"The dispatcher {self.alias!r} sends to Celery, which is not installed.",
                    hint=f"pip install 'django-schedulinator[{self.extra}]'",
                    id="schedulinator.E021",
                )
            ]
        try:
            app = self.app
        except ImportError as exc:
            return [
                Error(
                    f"The dispatcher {self.alias!r}: OPTIONS['APP'] is "
                    f"{self.settings['APP']!r}, which cannot be imported: {exc}",
                    id="schedulinator.E025",
                )
            ]
        if not connect:
            return []
        try:
            with app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=3)
        except Exception as exc:
            return [
                Warning(
                    f"The Celery broker of the dispatcher {self.alias!r} cannot be reached: {exc}",
                    id="schedulinator.W021",
                )
            ]
        return []

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        # One producer (one broker connection) for the whole batch.
        with self.app.producer_or_acquire() as producer:
            self._producer = producer
            try:
                yield
            finally:
                self._producer = None

    def send(self, occurrence: Occurrence, call: Call) -> Outcome:
        from kombu.exceptions import OperationalError

        options = dict(occurrence.dispatch_options)
        if "expires" in options:
            options["expires"] = float(options["expires"])
        ident = task_id(occurrence.key)
        try:
            self.app.send_task(
                self.task_names.get(occurrence.task, occurrence.task),
                args=call.args,
                kwargs=call.kwargs,
                task_id=ident,
                headers={KEY_HEADER: occurrence.key},
                producer=self._producer,
                # Fail now and let the dispatcher's backoff retry: kombu's own retries
                # would hold the whole lane.
                retry=False,
                **options,
            )
        except (OperationalError, OSError) as exc:
            raise Unreachable(f"The Celery broker cannot be reached: {exc}") from exc
        return Outcome(occurrence.run_id, OutcomeStatus.DISPATCHED, external_id=ident)


# -- the workers' side --------------------------------------------------------------------


def occurrence_key(request: Any) -> str | None:
    """The occurrence key of the task being run (``self.request`` in a bound task), or None
    for a task that the scheduler did not send."""
    key = getattr(request, KEY_HEADER, None)
    if key is None:
        key = (getattr(request, "headers", None) or {}).get(KEY_HEADER)
    return str(key) if key else None


def report_outcomes(app: Any = None) -> None:
    """Report the start and the end of every task the scheduler sent, from Celery's signals,
    in the workers (call it where your Celery app is defined; the workers need this app's
    database). A task's own retry (``self.retry``) is not its end: the run stays running.

    Celery's signals are the process's, not one app's: ``app`` only says, where this is
    called, which app the hook is for."""
    from celery import signals

    def report_from_worker(key: str, status: str, error: str = "") -> None:
        # Imported when a task runs: the app's models are not loaded where this is called.
        from django_schedulinator.outcomes import report_from_worker

        report_from_worker(key, status, error)

    def started(sender: Any = None, **kwargs: Any) -> None:
        key = occurrence_key(sender.request) if sender is not None else None
        if key:
            report_from_worker(key, ReportedStatus.STARTED)

    def succeeded(sender: Any = None, **kwargs: Any) -> None:
        key = occurrence_key(sender.request) if sender is not None else None
        if key:
            report_from_worker(key, ReportedStatus.SUCCEEDED)

    def failed(sender: Any = None, einfo: Any = None, exception: Any = None, **kwargs: Any) -> None:
        key = occurrence_key(sender.request) if sender is not None else None
        if key:
            report_from_worker(key, ReportedStatus.FAILED, str(einfo or exception or "failed"))

    signals.task_prerun.connect(started, weak=False, dispatch_uid="schedulinator_started")
    signals.task_success.connect(succeeded, weak=False, dispatch_uid="schedulinator_succeeded")
    signals.task_failure.connect(failed, weak=False, dispatch_uid="schedulinator_failed")
