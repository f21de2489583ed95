"""Django's tasks framework: ``django.tasks`` on Django 6, the django-tasks backport on 5.2.

A task defined with ``@task`` of django.tasks is registered for scheduling with the app's
``@django_schedulinator.task`` on top; this dispatcher enqueues it with
``.using(queue_name=..., priority=..., backend=...)`` where its backend supports them, and
stores the result id on the run. A task that declares an ``occurrence_key`` parameter
receives the key (the arguments of a Django task are JSON, so the key, not the Occurrence).

Outcomes come back through the framework's own signals, ``task_started`` and
``task_finished``, which backends with workers send in the worker (django-tasks-db's
``db_worker`` does); the handlers, connected when this app starts, find the run by its
result id. A backend that sends no signals leaves its runs ``dispatched``.

**On a database backend (django-tasks-db), a batch is one transaction.** Each ``enqueue()``
there is one ``INSERT``, which outside a transaction is its own commit; the dispatcher runs
the batch's enqueues (consecutive ones to the same database) inside one transaction and
records their hand-offs in the ledger at once after its commit, in one write. A worker sees
the tasks at the commit, as it saw each one at its own before, and finds each run by its
result id as soon as the hand-offs are recorded (it waits ``FIND_RUN_SECONDS`` for them, as
it did for each one before). A run that cannot be sent fails alone (a task no longer
registered, arguments it cannot take, a task the backend refuses), the rest of the batch
goes on; if the database refuses a statement or the commit, nothing of the transaction is
kept and the batch is enqueued one task at a time as before, so that a run the database
refuses is retried alone. Other backends (a broker, Django's immediate backend) are sent one
task at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from importlib import import_module
from types import ModuleType
from typing import Any

from django.core.checks import CheckMessage, Error
from django.db import DatabaseError, router, transaction

from django_schedulinator.dispatch.base import (
    MAX_ERROR_CHARS,
    BaseDispatcher,
    Call,
    Occurrence,
    Option,
    Outcome,
    Progress,
)
from django_schedulinator.statuses import OutcomeStatus, ReportedStatus

# A worker may start a task before the scheduler recorded its hand-off: the signal handlers
# look for the run this long before they give up (the run then waits for its deadline).
FIND_RUN_SECONDS = 5.0
# Set while this thread enqueues: a backend that runs the task inside enqueue() (Django's
# ImmediateBackend) sends its signals then, and the dispatcher reads the result instead.
_enqueuing = threading.local()


def framework() -> ModuleType | None:
    """``django.tasks`` (Django 6), else the ``django_tasks`` backport, else None."""
    for name in ("django.tasks", "django_tasks"):
        try:
            return import_module(name)
        except ImportError:
            continue
    return None


class TasksDispatcher(BaseDispatcher):
    """Enqueues each occurrence's Django task on a backend of ``TASKS``."""

    extra = "tasks"
    # Outcomes arrive where the backend sends task_started/task_finished.
    reports_outcomes = True
    # Recorded at once (a database backend's batch at its commit): the worker's signals find
    # the run by the result id.
    records_each_hand_off = True
    options = {
        "BACKEND_ALIAS": Option(
            str, "The TASKS backend used when a schedule names none.", default="default"
        ),
    }
    schedule_options = {
        "queue_name": Option(str, "A queue of the backend (its QUEUES)."),
        "priority": Option(
            int, "-100 to 100, where the backend supports priority.", minimum=-100, maximum=100
        ),
        "backend": Option(str, "A TASKS alias other than the dispatcher's."),
    }

    def _backend(self, name: str | None) -> Any:
        tasks = framework()
        assert tasks is not None
        return tasks.task_backends[name or self.settings["BACKEND_ALIAS"]]

    def schedule_option_errors(self, options: Any) -> list[str]:
        errors = super().schedule_option_errors(options)
        if errors or not isinstance(options, dict) or framework() is None:
            return errors
        name = options.get("backend") or self.settings["BACKEND_ALIAS"]
        try:
            backend = self._backend(name)
        except Exception as exc:
            return [f"the tasks backend {name!r} cannot be used: {str(exc).rstrip('.')}"]
        if "priority" in options and not backend.supports_priority:
            errors.append(
                f"the option 'priority' is not supported by the tasks backend {backend.alias!r} "
                f"({type(backend).__name__})"
            )
        queues = getattr(backend, "queues", None)
        queue = options.get("queue_name")
        if queue is not None and queues and queue not in queues:
            errors.append(
                f"the option 'queue_name' must be one of the backend's QUEUES "
                f"({', '.join(sorted(queues))}), got {queue!r}"
            )
        return errors

    def check(self, *, connect: bool = False) -> list[CheckMessage]:
        if framework() is None:
            return [
                Error(
                    f"The dispatcher {self.alias!r} needs Django's tasks framework: Django 6, "
                    "or the django-tasks backport.",
                    hint=f"pip install 'django-schedulinator[{self.extra}]'",
                    id="schedulinator.E024",
                )
            ]
        try:
            self._backend(None)
        except Exception as exc:
            return [
                Error(
                    f"The dispatcher {self.alias!r} uses the tasks backend "
                    f"{self.settings['BACKEND_ALIAS']!r}: {exc}",
                    hint="Name an alias of TASKS in OPTIONS['BACKEND_ALIAS'].",
                    id="schedulinator.E023",
                )
            ]
        return []

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        """Each run of consecutive occurrences whose backend writes to one database is
        enqueued in one transaction and reported at its commit; any other occurrence is
        handed off alone and reported at once (see the module)."""
        outcomes: list[Outcome] = []
        together: list[Occurrence] = []
        database: str | None = None
        databases: dict[str, str | None] = {}  # of each backend alias, for this batch

        def commit_together() -> None:
            if together:
                done = self._enqueue_together(together, database)
                together.clear()
                outcomes.extend(done)
                progress.finished(done)

        for occurrence in occurrences:
            if progress.stopped():
                break  # the rest stay pending: a take-over sends them later
            alias = self._alias(occurrence)
            if alias not in databases:
                databases[alias] = self._database_of(alias)
            if databases[alias] is None:
                commit_together()
                outcome = self.hand_off(occurrence)
                outcomes.append(outcome)
                progress.finished([outcome])
                continue
            if databases[alias] != database:
                commit_together()
                database = databases[alias]
            together.append(occurrence)
        commit_together()
        return outcomes

    def _alias(self, occurrence: Occurrence) -> str:
        return str(occurrence.dispatch_options.get("backend") or self.settings["BACKEND_ALIAS"])

    def _database_of(self, alias: str) -> str | None:
        """The database a backend alias enqueues to, when it is django-tasks-db's database
        backend; None for any other (or one that cannot be built: its runs fail alone)."""
        try:
            from django_tasks_db import DatabaseBackend
        except ImportError:
            return None
        try:
            backend = self._backend(alias)
        except Exception:
            return None
        if not isinstance(backend, DatabaseBackend):
            return None
        # Its models only once the backend is that one: a project may have the package
        # installed without the app in INSTALLED_APPS, where importing them raises.
        try:
            from django_tasks_db.models import DBTaskResult
        except (ImportError, RuntimeError):
            return None
        return router.db_for_write(DBTaskResult)

    def _enqueue_together(
        self, occurrences: list[Occurrence], database: str | None
    ) -> list[Outcome]:
        """Enqueue ``occurrences`` in one transaction on ``database``; if the database
        refuses anything, nothing of it is kept and each is enqueued alone, as ``send``
        does (a refused one is retried alone)."""
        try:
            with transaction.atomic(using=database):
                return [self._enqueue_in_transaction(o) for o in occurrences]
        except DatabaseError:
            return [self.hand_off(o) for o in occurrences]

    def _enqueue_in_transaction(self, occurrence: Occurrence) -> Outcome:
        """``hand_off`` inside the batch's transaction: a database error goes through (the
        transaction is lost with it); anything else fails this run alone."""
        try:
            call = Call.of(occurrence)
        except Exception as exc:
            return self.failure(occurrence, exc)
        try:
            return self._enqueue(occurrence, call)
        except DatabaseError:
            raise
        except Exception as exc:
            return self._refused(occurrence, exc)

    def send(self, occurrence: Occurrence, call: Call) -> Outcome:
        try:
            return self._enqueue(occurrence, call)
        except (DatabaseError, OSError) as exc:
            # Its database or broker is away: the dispatcher's backoff tries again.
            text = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            return Outcome(occurrence.run_id, OutcomeStatus.RETRY, f"Could not enqueue: {text}")
        except Exception as exc:
            return self._refused(occurrence, exc)

    def _refused(self, occurrence: Occurrence, exc: Exception) -> Outcome:
        """Refused (an unknown backend, a task it cannot run): trying again won't help."""
        text = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        return Outcome(occurrence.run_id, OutcomeStatus.FAILED, f"Could not enqueue: {text}")

    def _enqueue(self, occurrence: Occurrence, call: Call) -> Outcome:
        """Enqueue one occurrence's Django task; raises what the backend raised."""
        run_id = occurrence.run_id
        django_task = call.task.django_task
        if django_task is None:
            return Outcome(
                run_id,
                OutcomeStatus.FAILED,
                f"{occurrence.task!r} is not a Django task: register a function decorated "
                f"with @task of django.tasks to send it through {type(self).__name__}.",
            )
        options = occurrence.dispatch_options
        using: dict[str, Any] = {
            name: options[name] for name in ("queue_name", "priority") if name in options
        }
        using["backend"] = self._alias(occurrence)
        _enqueuing.active = True
        try:
            result = django_task.using(**using).enqueue(
                *call.args, **call.kwargs_with_key(occurrence)
            )
        finally:
            _enqueuing.active = False
        return _ended(run_id, result) or Outcome(
            run_id, OutcomeStatus.DISPATCHED, external_id=str(result.id)
        )


def _status(task_result: Any) -> str:
    return str(getattr(task_result.status, "value", task_result.status))


def _error(task_result: Any) -> str:
    errors = getattr(task_result, "errors", None) or []
    text = errors[-1].traceback if errors else f"The task ended {_status(task_result)}."
    return str(text)[-MAX_ERROR_CHARS:]


def _ended(run_id: int, result: Any) -> Outcome | None:
    """The outcome of a task the backend already ran inside enqueue() (ImmediateBackend)."""
    status = _status(result)
    if status == "SUCCESSFUL":
        return Outcome(run_id, OutcomeStatus.SUCCEEDED, external_id=str(result.id))
    if status == "FAILED":
        return Outcome(run_id, OutcomeStatus.FAILED, _error(result), external_id=str(result.id))
    return None


# -- the workers' side: the framework's signals ----------------------------------------


def connect_signals() -> None:
    """Connect the outcome handlers (the app does it when it starts, if the framework is
    installed)."""
    tasks = framework()
    if tasks is None:
        return
    signals = import_module(f"{tasks.__name__}.signals")
    signals.task_started.connect(_started, dispatch_uid="schedulinator_task_started")
    signals.task_finished.connect(_finished, dispatch_uid="schedulinator_task_finished")


def _key_of(result_id: str) -> str | None:
    """The occurrence key of the run handed off as ``result_id``, waiting briefly for the
    scheduler to record it; None for a task the scheduler did not enqueue."""
    from django_schedulinator.models import Run

    deadline = time.monotonic() + FIND_RUN_SECONDS
    while True:
        found = (
            Run.objects.filter(external_id=result_id)
            .values_list("schedule_id", "scheduled_for")
            .first()
        )
        if found is not None:
            from django_schedulinator.models.keys import occurrence_key

            return occurrence_key(*found)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def _is_scheduled(task_result: Any) -> bool:
    """A task the scheduler may have enqueued (a registered Django task), not run inside a
    dispatcher's own enqueue()."""
    from django_schedulinator.registry import registry

    if getattr(_enqueuing, "active", False):
        return False
    return registry.is_scheduled_function(getattr(getattr(task_result, "task", None), "func", None))


def _started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    if _is_scheduled(task_result):
        _report(task_result, ReportedStatus.STARTED)


def _finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    if not _is_scheduled(task_result):
        return
    if _status(task_result) == "SUCCESSFUL":
        _report(task_result, ReportedStatus.SUCCEEDED)
    else:
        _report(task_result, ReportedStatus.FAILED, _error(task_result))


def _report(task_result: Any, status: str, error: str = "") -> None:
    """Report by the key of the run handed off as this result; never raises (the worker
    sends these signals with ``send``: an exception would reach its loop)."""
    from django_schedulinator.outcomes import report_from_worker, through_a_dropped_connection

    result_id = str(task_result.id)
    report_from_worker(lambda: through_a_dropped_connection(_key_of)(result_id), status, error)
