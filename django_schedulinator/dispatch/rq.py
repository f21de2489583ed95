"""RQ through django-rq: each occurrence becomes one job, its id derived from the key.

The job runs ``run_registered``, which looks the task up by its registered name in the
worker's registry (nothing from a schedule is ever imported) and calls it as the inline
dispatcher does (``Call.run``): with the occurrence or its key when the function asks for
them, an async function run to its end. The job reports its
start itself; RQ's success and failure callbacks report its end (``outcomes``), so a worker
needs nothing but this app installed.

A second enqueue of the same id: RQ alone overwrites the job's hash and pushes the id onto
the queue again, so the job runs twice. This dispatcher enqueues with ``unique=True``
instead: while the job's hash lives (queued, running, and ``KEEP_SECONDS`` after it ended)
a re-delivery of the occurrence is refused by RQ (``DuplicateJobError``) and recorded as
handed off, so it runs once.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.core.checks import CheckMessage, Error, Warning

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

logger = logging.getLogger("django_schedulinator.dispatch.rq")

RUNNER = "django_schedulinator.dispatch.rq.run_registered"


def job_id(key: str) -> str:
    """The RQ job id of an occurrence (RQ takes A-Z a-z 0-9 _ - only)."""
    return "schedulinator-" + key.replace(":", "-")


class RQDispatcher(BaseDispatcher):
    """Enqueues each occurrence on an RQ queue of django-rq's ``RQ_QUEUES``."""

    reports_outcomes = True
    dedupes_by_key = True
    extra = "rq"
    options = {
        "QUEUE": Option(
            str, "The RQ_QUEUES name used when a schedule names none.", default="default"
        ),
        "KEEP_SECONDS": Option(
            int,
            "How long RQ keeps an ended job (result_ttl and failure_ttl): a re-delivery of "
            "the occurrence within it is dropped.",
            minimum=1,
            default=86_400,
        ),
    }
    schedule_options = {
        "queue": Option(str, "A queue of RQ_QUEUES."),
        "timeout": Option(int, "The job's timeout in seconds (RQ's job_timeout).", minimum=1),
    }

    def __init__(self, alias: str = DEFAULT_ALIAS, options: Mapping[str, Any] | None = None):
        super().__init__(alias, options)
        # The queues sent to, by name, each with its Redis client: ``django_rq.get_queue``
        # builds a new client (and pool) on every call, which per job meant a new connection
        # per hand-off. Built on first use (the constructor connects to nothing).
        self._queues: dict[str, Any] = {}

    def schedule_option_errors(self, options: Any) -> list[str]:
        errors = super().schedule_option_errors(options)
        queue = options.get("queue") if isinstance(options, dict) else None
        if not errors and isinstance(queue, str) and queue not in _queues():
            errors.append(
                f"the option 'queue' must be one of RQ_QUEUES ({', '.join(sorted(_queues()))}), "
                f"got {queue!r}"
            )
        return errors

    def check(self, *, connect: bool = False) -> list[CheckMessage]:
        try:
            import django_rq
        except ImportError:
            return [
                Error(
                    f"The dispatcher {self.alias!r} enqueues with django-rq, which is not "
                    "installed.",
                    hint=f"pip install 'django-schedulinator[{self.extra}]'",
                    id="schedulinator.E022",
                )
            ]
        queue = self.settings["QUEUE"]
        if queue not in _queues():
            return [
                Error(
                    f"The dispatcher {self.alias!r} uses the RQ queue {queue!r}, which is not in "
                    f"RQ_QUEUES ({', '.join(sorted(_queues())) or 'none'}).",
                    id="schedulinator.E026",
                )
            ]
        if connect:
            try:
                django_rq.get_queue(queue).connection.ping()
            except Exception as exc:
                return [
                    Warning(
                        f"The Redis of the RQ queue {queue!r} (dispatcher {self.alias!r}) "
                        f"cannot be reached: {exc}",
                        id="schedulinator.W022",
                    )
                ]
        return []

    def send(self, occurrence: Occurrence, call: Call) -> Outcome:
        import django_rq
        from redis.exceptions import ConnectionError, TimeoutError
        from rq import Callback
        from rq.exceptions import DuplicateJobError

        keep = self.settings["KEEP_SECONDS"]
        options = occurrence.dispatch_options
        queue_name = options.get("queue") or self.settings["QUEUE"]
        ident = job_id(occurrence.key)
        queue = self._queues.get(queue_name)
        try:
            if queue is None:
                # Enqueued at once, whatever the project's RQ COMMIT_MODE: deferred to a
                # commit or to the end of a request (a scheduler has none), the run would be
                # recorded as handed off while its job waited, and a broker error would
                # come too late to retry it.
                queue = self._queues[queue_name] = django_rq.get_queue(
                    queue_name, commit_mode="auto"
                )
        except KeyError:
            return Outcome(
                occurrence.run_id,
                OutcomeStatus.FAILED,
                f"The RQ queue {queue_name!r} is not in RQ_QUEUES.",
            )
        try:
            queue.enqueue_call(
                RUNNER,
                args=[_payload(occurrence, call)],
                job_id=ident,
                timeout=options.get("timeout"),
                result_ttl=keep,
                failure_ttl=keep,
                on_success=Callback(report_success),
                on_failure=Callback(report_failure),
                unique=True,
            )
        except DuplicateJobError:
            # Handed off before (the scheduler died before recording it, or its lease ran
            # out): the job is there, and RQ runs it once.
            logger.info("Job %s is in RQ already; not enqueued twice.", ident)
        except (ConnectionError, TimeoutError) as exc:
            raise Unreachable(
                f"The Redis of the RQ queue {queue_name!r} cannot be reached: {exc}"
            ) from exc
        return Outcome(occurrence.run_id, OutcomeStatus.DISPATCHED, external_id=ident)

    def close(self) -> None:
        """Close the queues' connections."""
        queues, self._queues = self._queues, {}
        for queue in queues.values():
            queue.connection.close()


def _queues() -> dict[str, Any]:
    from django.conf import settings

    return dict(getattr(settings, "RQ_QUEUES", None) or {})


def _payload(occurrence: Occurrence, call: Call) -> dict[str, Any]:
    """What the job carries: the occurrence, as plain values (its arguments checked)."""
    return {
        "key": occurrence.key,
        "run_id": occurrence.run_id,
        "schedule_id": occurrence.schedule_id,
        "schedule_name": occurrence.schedule_name,
        "task": occurrence.task,
        "scheduled_for": occurrence.scheduled_for.isoformat(),
        "attempt": occurrence.attempt,
        "args": call.args,
        "kwargs": call.kwargs,
    }


# -- the worker's side -------------------------------------------------------------------


def run_registered(payload: dict[str, Any]) -> Any:
    """The job: report the start, then call the registered task by its name, the way the
    inline dispatcher calls it (``Call.run``: the occurrence or its key where the function
    asks for them, an async function run to its end). A task no longer registered here,
    or arguments it cannot take, fail the job, saying so."""
    from django_schedulinator import outcomes

    occurrence = Occurrence(
        key=payload["key"],
        run_id=payload["run_id"],
        schedule_id=payload["schedule_id"],
        schedule_name=payload["schedule_name"],
        task=payload["task"],
        scheduled_for=datetime.fromisoformat(payload["scheduled_for"]),
        attempt=payload["attempt"],
        args=payload["args"],
        kwargs=payload["kwargs"],
    )
    outcomes.report_from_worker(occurrence.key, ReportedStatus.STARTED)  # never fails the job
    return Call.of(occurrence).run(occurrence)


def report_success(job: Any, connection: Any, result: Any, *args: Any, **kwargs: Any) -> None:
    from django_schedulinator.outcomes import report_from_worker

    report_from_worker(job.args[0]["key"], ReportedStatus.SUCCEEDED)


def report_failure(
    job: Any, connection: Any, kind: Any, value: Any, tb: Any, *args: Any, **kwargs: Any
) -> None:
    from django_schedulinator.outcomes import report_from_worker

    error = "".join(traceback.format_exception(kind, value, tb))
    report_from_worker(job.args[0]["key"], ReportedStatus.FAILED, error)
