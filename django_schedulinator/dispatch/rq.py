"""RQ through django-rq: each occurrence becomes one job, its id derived from the key.

The job runs ``run_registered``, which looks the task up by its registered name in the
worker's registry (nothing from a schedule is ever imported) and calls it as the inline
dispatcher does (``Call.run``): with the occurrence or its key when the function asks for
them, an async function run to its end. The job reports its
start itself; RQ's success and failure callbacks report its end (``outcomes``), so a worker
needs nothing but this app installed.

**One round trip per queue and batch.** The batch's jobs are built with RQ's own
``Queue.create_job`` (its serializer, its default timeout, the callbacks), grouped by queue,
and written by one Lua script per queue (``ENQUEUE_NEW``): for each job, if its hash does not
exist, the hash as ``Job.save`` writes it, its TTL, and its id pushed on the queue; the
queue added to RQ's set of queues. A run that cannot be built (a task no longer registered,
arguments it cannot take, a queue not in RQ_QUEUES) fails alone and is left out of the
script; a queue whose Redis cannot be reached makes its jobs and the rest of the batch
RETRY (``Unreachable``), as ``BaseDispatcher.dispatch`` does. A queue with ``ASYNC: False``
(RQ runs the job inside the enqueue) is enqueued one job at a time, as before.

**Each occurrence runs once while its job's hash lives.** RQ alone, given the same id
twice, overwrites the hash and pushes the id again: the job runs twice. RQ's ``unique=True``
(a Lua script per job) refuses the second; the script here does the same check for every
job of the batch, inside one script, so the check and the write are one atomic step in
Redis for the whole batch (no WATCH to retry, nothing between the check and the push). What
holds:

- a re-delivery (the scheduler died before recording the hand-off, or its lease ran out and
  another took the run over) finds the hash, pushes nothing and is recorded as handed off;
- a take-over racing a slow first delivery: whichever script Redis runs first writes the job
  and pushes it, the other finds the hash: one push, whatever the order;
- a reply lost after the script ran (the connection dropped): the runs are retried, and the
  retry finds their hashes: handed off, not pushed again;
- the hash lives while the job is queued or running and ``KEEP_SECONDS`` after it ended
  (``result_ttl`` and ``failure_ttl``); a re-delivery after that runs the job again, as with
  ``unique=True``. A job deleted from RQ by hand (``Queue.empty``) is forgotten too.

The script touches the queue's keys and the jobs' keys together, as RQ's own unique script
does: like RQ, it needs them on one Redis (not a Redis Cluster with keys on several shards).
"""

from __future__ import annotations

import functools
import logging
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.checks import CheckMessage, Error, Warning

from django_schedulinator.dispatch.base import (
    DEFAULT_ALIAS,
    MAX_ERROR_CHARS,
    BaseDispatcher,
    Call,
    Occurrence,
    Option,
    Outcome,
    Progress,
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
        self._scripts: dict[str, Any] = {}

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

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        """Build every job of the batch (a run that cannot be built fails alone), then write
        each queue's jobs with one script (see the module). Once a queue's Redis cannot be
        reached, its jobs and those of the queues after it are retried without being tried
        now."""
        outcomes: list[Outcome] = []
        by_queue: dict[str, list[_Job]] = {}
        for occurrence in occurrences:
            if progress.stopped():
                break  # the rest stay pending: a take-over sends them later
            try:
                built = self._job(occurrence, Call.of(occurrence))
            except Exception as exc:
                outcomes.append(self.failure(occurrence, exc))
                continue
            if isinstance(built, Outcome):
                outcomes.append(built)
            else:
                by_queue.setdefault(built.queue.name, []).append(built)
        down = ""
        for jobs in by_queue.values():
            if not down:
                try:
                    outcomes += self._enqueue(jobs)
                    continue
                except Unreachable as exc:
                    down = str(exc)[:MAX_ERROR_CHARS]
            outcomes += [Outcome(j.occurrence.run_id, OutcomeStatus.RETRY, down) for j in jobs]
        return outcomes

    def send(self, occurrence: Occurrence, call: Call) -> Outcome:
        """One occurrence (``hand_off``): a batch of one."""
        built = self._job(occurrence, call)
        return built if isinstance(built, Outcome) else self._enqueue([built])[0]

    @functools.cached_property
    def _callbacks(self) -> tuple[Any, Any]:
        """RQ's success and failure callbacks (the same for every job; built once)."""
        from rq import Callback

        return Callback(report_success), Callback(report_failure)

    def _queue(self, name: str) -> Any:
        """The queue ``name`` of RQ_QUEUES, kept with its client (KeyError: not there)."""
        queue = self._queues.get(name)
        if queue is None:
            import django_rq

            # Enqueued at once, whatever the project's RQ COMMIT_MODE: deferred to a commit
            # or to the end of a request (a scheduler has none), the run would be recorded
            # as handed off while its job waited, and a broker error would come too late to
            # retry it.
            queue = self._queues[name] = django_rq.get_queue(name, commit_mode="auto")
        return queue

    def _job(self, occurrence: Occurrence, call: Call) -> _Job | Outcome:
        """The occurrence's job, built by its queue as RQ's ``enqueue_call`` builds it (not
        written yet), or the outcome of a run that cannot be sent."""
        from rq.utils import now

        keep = self.settings["KEEP_SECONDS"]
        options = occurrence.dispatch_options
        queue_name = options.get("queue") or self.settings["QUEUE"]
        try:
            queue = self._queue(queue_name)
        except KeyError:
            return Outcome(
                occurrence.run_id,
                OutcomeStatus.FAILED,
                f"The RQ queue {queue_name!r} is not in RQ_QUEUES.",
            )
        job = queue.create_job(
            RUNNER,
            args=[_payload(occurrence, call)],
            job_id=job_id(occurrence.key),
            timeout=options.get("timeout"),
            result_ttl=keep,
            failure_ttl=keep,
            on_success=self._callbacks[0],
            on_failure=self._callbacks[1],
        )
        job.enqueued_at = now()  # what RQ's enqueue sets before it saves the job
        return _Job(occurrence, queue, job, _hash_fields(job) if queue.is_async else [])

    def _enqueue(self, jobs: list[_Job]) -> list[Outcome]:
        """Write the jobs of one queue: one script (see the module), or one ``unique``
        enqueue each on a queue that runs its jobs inside the enqueue (``ASYNC: False``)."""
        from redis.exceptions import ConnectionError, TimeoutError
        from rq.exceptions import DuplicateJobError

        queue = jobs[0].queue
        try:
            if queue.is_async:
                added = self._script(queue)(
                    keys=[queue.redis_queues_keys, queue.key, *(j.job.key for j in jobs)],
                    args=[queue.key, *(v for j in jobs for v in j.arguments())],
                )
            else:
                added = []
                for j in jobs:
                    try:
                        queue.enqueue_job(j.job, unique=True)
                        added.append(1)
                    except DuplicateJobError:
                        added.append(0)
        except (ConnectionError, TimeoutError) as exc:
            raise Unreachable(
                f"The Redis of the RQ queue {queue.name!r} cannot be reached: {exc}"
            ) from exc
        except Exception as exc:
            # Refused by Redis (out of memory, a read-only replica): as each send would be.
            return [self.failure(j.occurrence, exc) for j in jobs]
        for j, new in zip(jobs, added, strict=True):
            if not new:
                # Handed off before (the scheduler died before recording it, or its lease ran
                # out): the job is there, and RQ runs it once.
                logger.info("Job %s is in RQ already; not enqueued twice.", j.job.id)
        return [
            Outcome(j.occurrence.run_id, OutcomeStatus.DISPATCHED, external_id=j.job.id)
            for j in jobs
        ]

    def _script(self, queue: Any) -> Any:
        """``ENQUEUE_NEW`` registered on the queue's client (redis-py loads it once)."""
        script = self._scripts.get(queue.name)
        if script is None:
            script = self._scripts[queue.name] = queue.connection.register_script(ENQUEUE_NEW)
        return script

    def close(self) -> None:
        """Close the queues' connections."""
        queues, self._queues, self._scripts = self._queues, {}, {}
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


# Writes the jobs of one queue that are not in RQ yet (see the module): KEYS are RQ's set of
# queues, the queue, then each job's hash; ARGV the queue's key, then for each job its id,
# its TTL (-1: none), the count of its hash's fields and values, and them. Returns 1 for each
# job written and pushed, 0 for each whose hash was there.
ENQUEUE_NEW = """
redis.call("SADD", KEYS[1], ARGV[1])
local added = {}
local at = 2
for i = 3, #KEYS do
    local n = tonumber(ARGV[at + 2])
    if redis.call("EXISTS", KEYS[i]) == 1 then
        added[#added + 1] = 0
    else
        redis.call("HSET", KEYS[i], unpack(ARGV, at + 3, at + 2 + n))
        local ttl = tonumber(ARGV[at + 1])
        if ttl > 0 then
            redis.call("EXPIRE", KEYS[i], ttl)
        end
        redis.call("RPUSH", KEYS[2], ARGV[at])
        added[#added + 1] = 1
    end
    at = at + 3 + n
end
return added
"""


@dataclass(frozen=True, slots=True)
class _Job:
    """One occurrence's job, built and not written yet, with its hash's fields and values."""

    occurrence: Occurrence
    queue: Any
    job: Any
    fields: list[Any]

    def arguments(self) -> list[Any]:
        """Its part of ``ENQUEUE_NEW``'s ARGV."""
        ttl = self.job.ttl if self.job.ttl is not None else -1
        return [self.job.id, ttl, len(self.fields), *self.fields]


def _hash_fields(job: Any) -> list[Any]:
    """The job's hash as ``Job.save`` writes it (``Job.to_dict``), flat, as RQ's unique
    script takes it: None left out, numbers as text."""
    flat: list[Any] = []
    for name, value in job.to_dict().items():
        if value is not None:
            flat += [name, value if isinstance(value, bytes | str) else str(value)]
    return flat


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
