"""The dispatcher seam: what a dispatcher is told, what it returns, and what it declares.

A dispatcher is configured under an alias in ``SCHEDULINATOR['DISPATCHERS']`` (shaped like
``CACHES`` and ``TASKS``: ``BACKEND`` and ``OPTIONS``), built from that alias and those
options, and picked by each schedule (``Schedule.dispatcher``). It declares what it can do
once, with class attributes (its capabilities), which ``validate_schedule``, the checks, the
scheduler and the docs' table read; it never imports anything named by data.

Every occurrence is handed off through ``BaseDispatcher.hand_off``: its task looked up, its
arguments checked and its send made inside one guard, so a run that cannot be sent fails on
its own and the rest of its batch goes on. A dispatcher implements ``send`` (one occurrence);
one that sends concurrently also overrides ``dispatch``, and hands each occurrence off
through the same guard.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from django.core.checks import CheckMessage
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from django_schedulinator.errors import InvalidArguments, TaskTimedOut, UnknownTask, Unreachable
from django_schedulinator.registry import (
    OCCURRENCE_KEY_PARAMETER,
    OCCURRENCE_PARAMETER,
    RegisteredTask,
    registry,
)
from django_schedulinator.statuses import OutcomeStatus

if TYPE_CHECKING:
    from django_schedulinator.models import Schedule

logger = logging.getLogger("django_schedulinator.dispatch")


DEFAULT_ALIAS = "default"
# What is kept of an error (the ledger keeps the same).
MAX_ERROR_CHARS = 4000
# How often a dispatcher that blocks reports what it knows so far.
REPORT_EVERY_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One firing of a schedule, as handed to a dispatcher and to the task.

    ``key`` is the idempotency key: the same for every (re-)dispatch of this occurrence, so a
    receiver that records it can drop duplicates.
    """

    key: str
    run_id: int
    schedule_id: int
    schedule_name: str
    task: str
    scheduled_for: datetime
    attempt: int
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    # The schedule's dispatcher alias and its options (queue, priority, ...), as they were
    # when the run was claimed: a re-dispatch goes where the first one went.
    dispatcher: str = DEFAULT_ALIAS
    dispatch_options: dict[str, Any] = field(default_factory=dict)

    def call_arguments(self) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments to call the task with, checked.

        The model validates them, but rows written around it (``QuerySet.update``,
        ``bulk_create``, raw SQL) may hold any JSON: such a run fails on its own, with an
        error that says what is wrong, instead of breaking whatever runs it.
        """
        if not isinstance(self.args, list):
            raise InvalidArguments(
                f"The schedule's args must be a JSON list, not {_json_type(self.args)}."
            )
        if not isinstance(self.kwargs, dict):
            raise InvalidArguments(
                f"The schedule's kwargs must be a JSON object, not {_json_type(self.kwargs)}."
            )
        for reserved in (OCCURRENCE_PARAMETER, OCCURRENCE_KEY_PARAMETER):
            if reserved in self.kwargs:
                raise InvalidArguments(
                    f"The schedule's kwargs hold {reserved!r}, which is reserved: the "
                    "scheduler passes the occurrence itself."
                )
        return list(self.args), dict(self.kwargs)


@dataclass(frozen=True, slots=True)
class Call:
    """What one occurrence calls: its registered task and its arguments, checked."""

    task: RegisteredTask
    args: list[Any]
    kwargs: dict[str, Any]

    @classmethod
    def of(cls, occurrence: Occurrence) -> Call:
        """Only a registered task is ever called (``UnknownTask`` otherwise, for a task
        removed from the code), with arguments a task can take (``InvalidArguments``)."""
        task = registry.get(occurrence.task)
        args, kwargs = occurrence.call_arguments()
        return cls(task, args, kwargs)

    def kwargs_with_key(self, occurrence: Occurrence) -> dict[str, Any]:
        """The keyword arguments, with the occurrence key when the function asks for it."""
        if self.task.takes_key:
            return {**self.kwargs, OCCURRENCE_KEY_PARAMETER: occurrence.key}
        return self.kwargs

    def run(self, occurrence: Occurrence, *, timeout: float | None = None) -> Any:
        """Call the task here, in this process (the inline dispatcher, RQ's runner): with the
        Occurrence and its key where the function asks for them, an async function run to
        its end (see ``RegisteredTask.call``)."""
        kwargs = self.kwargs_with_key(occurrence)
        if self.task.takes_occurrence:
            kwargs = {**kwargs, OCCURRENCE_PARAMETER: occurrence}
        return self.task.call(self.args, kwargs, timeout=timeout)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number" if isinstance(value, int | float) else "that")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one occurrence handed to ``dispatch``.

    ``external_id`` is the id the receiving system gave it (a task result id, a job id);
    ``response_status`` what a receiver answered (an HTTP status); ``output`` what the task
    returned as text. All are stored on the run.
    """

    run_id: int
    status: OutcomeStatus | Literal["dispatched", "succeeded", "failed", "retry"]
    error: str = ""
    external_id: str = ""
    response_status: int | None = None
    output: str = ""


@dataclass(frozen=True, slots=True)
class Option:
    """One option: of a dispatcher alias (``OPTIONS``) or of a schedule
    (``Schedule.dispatch_options``). ``kind`` is str, int, float (an int is accepted) or
    bool; numbers may be bounded, strings may be limited to ``choices``."""

    kind: type
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    default: Any = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not acceptable, or None."""
        kind = self.kind
        if kind is bool:
            return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
        if isinstance(value, bool) or not isinstance(value, int | float if kind is float else kind):
            noun = {str: "a string", int: "a whole number", float: "a number", dict: "a dict"}
            return f"must be {noun.get(kind, kind.__name__)}, got {value!r}"
        if isinstance(value, str):
            if not value:
                return "must not be empty"
            if self.choices is not None and value not in self.choices:
                return f"must be one of {', '.join(self.choices)}, got {value!r}"
            if len(value) > 200:
                return "must be at most 200 characters"
            return None
        if not isinstance(value, int | float):
            return None  # a structure: the dispatcher checks its contents
        if not math.isfinite(value):
            return f"must be a finite number, got {value!r}"
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {self.minimum:g}, got {value!r}"
        if self.maximum is not None and value > self.maximum:
            return f"must be at most {self.maximum:g}, got {value!r}"
        return None


# Options every dispatcher alias accepts: how hand-off failures are retried, and how long a
# handed-off run counts as in progress while its outcome has not been reported.
COMMON_OPTIONS: Mapping[str, Option] = {
    "MAX_ATTEMPTS": Option(
        int,
        "Hand-offs of one occurrence before its run is recorded as failed (the first included).",
        minimum=1,
        maximum=100,
        default=5,
    ),
    "RETRY_BACKOFF_SECONDS": Option(
        float,
        "The first retry's delay; each retry doubles it, with full jitter.",
        minimum=0.01,
        default=1.0,
    ),
    "RETRY_BACKOFF_MAX_SECONDS": Option(
        float, "The longest delay between two hand-offs.", minimum=0.01, default=300.0
    ),
    "OUTCOME_TIMEOUT_SECONDS": Option(
        float,
        "How long a handed-off run whose outcome was not reported counts as in progress "
        "(for overlap); it then stays 'dispatched'.",
        minimum=1,
        default=3600.0,
    ),
}


class Progress:
    """What a dispatcher may report while a batch runs; the scheduler passes one to
    ``dispatch``. Each method is cheap to call about once a second; the defaults do nothing.

    - ``running(run_ids)``: these runs have started; they are recorded as ``running``;
    - ``finished(outcomes)``: these runs have ended. Their outcomes are recorded now rather
      than when the whole batch returns, which lets the overlap policies see that a run
      ended and leaves less to deliver again if the process dies;
    - ``stopped()``: the scheduler is stopping and its grace is over: start no more
      hand-offs. The runs left without an outcome stay pending and are taken over later.

    The scheduler keeps the batch's leases itself while ``dispatch`` runs, however long it
    blocks; ``keepalive()`` (or calling the object) is left for dispatchers written before.
    """

    def keepalive(self) -> None:
        """Nothing to do: the scheduler renews the leases of a batch being dispatched."""

    def running(self, run_ids: Collection[int]) -> None:
        """These runs have started."""

    def finished(self, outcomes: Sequence[Outcome]) -> None:
        """These runs have ended (each outcome may also be returned by ``dispatch``)."""

    def stopped(self) -> bool:
        """Whether to start no more hand-offs (the scheduler's stop grace is over)."""
        return False

    def __call__(self) -> None:
        self.keepalive()


class BaseDispatcher:
    """Hands occurrences to whatever runs them.

    ``send`` hands off one occurrence, its ``Call`` (task and arguments) already checked, and
    returns its Outcome: ``dispatched`` when it was handed off to another system,
    ``succeeded``/``failed`` when it ran it (or learnt the result at once, like a webhook's
    response), ``retry`` when the hand-off failed in a way that may pass. It raises
    ``Unreachable`` when what it sends to is down. ``dispatch`` hands a batch off, each
    occurrence through ``hand_off``, the guard in which a run that cannot be sent fails on
    its own; it returns one Outcome per occurrence it handed off. A run whose outcome is
    never recorded (the process died) is dispatched again with the same key after its
    lease expires; the scheduler keeps the leases while ``dispatch`` runs.

    Built with its alias and the alias's ``OPTIONS`` (validated against ``options`` and
    ``COMMON_OPTIONS`` first); the constructor must not connect to anything: validation and
    the checks build one in web processes too.

    Its capabilities are the class attributes below, declared once on the class and read
    from there by everything else (nothing works them out again).
    """

    #: It learns when each run ends: by running it, from the receiver's answer, or through
    #: reports from the worker side (``django_schedulinator.outcomes``). Overlap "skip" and
    #: "buffer" and ``pause_after_failures`` need it (``validate_schedule``). A dispatcher
    #: whose reports depend on its ``OPTIONS`` overrides it with a property (Celery's).
    reports_outcomes: bool = False
    #: The receiving system itself drops a second hand-off with the same occurrence key.
    dedupes_by_key: bool = False
    #: It runs the task in the scheduler process rather than handing it off.
    runs_in_process: ClassVar[bool] = False
    #: The alias ``OPTIONS`` it accepts, besides ``COMMON_OPTIONS``.
    options: ClassVar[Mapping[str, Option]] = {}
    #: What a schedule may set in ``dispatch_options`` (queue, priority, ...).
    schedule_options: ClassVar[Mapping[str, Option]] = {}
    #: The optional dependency it needs, as the extra that installs it ("celery").
    extra: ClassVar[str | None] = None
    #: Report each outcome as soon as it is known, rather than about once a second (its
    #: workers look the run up by the id it was handed off with).
    records_each_hand_off: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.send is BaseDispatcher.send and cls.dispatch is BaseDispatcher.dispatch:
            raise TypeError(f"{cls.__name__} must implement send() (or dispatch()).")

    def __init__(self, alias: str = DEFAULT_ALIAS, options: Mapping[str, Any] | None = None):
        self.alias = alias
        given = dict(options or {})
        accepted = {**COMMON_OPTIONS, **self.options}
        self.settings = {name: given.get(name, spec.default) for name, spec in accepted.items()}

    @classmethod
    def option_problems(cls, options: Mapping[str, Any]) -> list[str]:
        """What is wrong with an alias's ``OPTIONS`` (unknown names, bad values)."""
        accepted = {**COMMON_OPTIONS, **cls.options}
        problems = []
        for name, value in options.items():
            spec = accepted.get(name)
            if spec is None:
                problems.append(
                    f"{name!r} is not an option of {cls.__name__} (it takes: "
                    f"{', '.join(sorted(accepted))})"
                )
            elif (problem := spec.problem(value)) is not None:
                problems.append(f"{name!r} {problem}")
        return problems

    def schedule_option_errors(self, options: Any) -> list[str]:
        """Why a schedule's ``dispatch_options`` cannot be sent through this dispatcher;
        each message names the option."""
        if not isinstance(options, dict):
            return ['must be a JSON object of options, for example {"queue": "reports"}']
        errors = []
        for name, value in options.items():
            spec = self.schedule_options.get(name)
            if spec is None:
                takes = ", ".join(sorted(self.schedule_options)) or "none"
                errors.append(
                    f"the dispatcher {self.alias!r} ({type(self).__name__}) has no option "
                    f"{name!r} (options it takes: {takes})"
                )
            elif (problem := spec.problem(value)) is not None:
                errors.append(f"the option {name!r} {problem}")
        return errors

    def validate_schedule(self, schedule: Schedule) -> None:
        """Refuse a schedule this dispatcher cannot serve, with ``ValidationError`` by field
        (as django-tasks' ``validate_task``): options it does not take, or policies that
        need outcomes it never learns. ``Schedule.clean()`` calls it through
        ``dispatchers.validate_schedule``; a subclass adds its own checks after these."""
        errors: dict[str, Any] = {}
        problems = self.schedule_option_errors(schedule.dispatch_options)
        if problems:
            text = "; ".join(problems)
            errors["dispatch_options"] = text[:1].upper() + text[1:] + "."
        if not self.reports_outcomes:
            params = {"alias": self.alias, "backend": type(self).__name__}
            if schedule.overlap != schedule.Overlap.ALLOW:
                errors["overlap"] = _(
                    "Overlap %(overlap)r needs to know when the previous run ended, and the "
                    "dispatcher %(alias)r (%(backend)s) never learns when a run ends; use "
                    "'allow', or a dispatcher that reports outcomes."
                ) % {**params, "overlap": schedule.overlap}
            if schedule.pause_after_failures:
                errors["pause_after_failures"] = (
                    _(
                        "Pause after failures needs to know how runs ended, and the dispatcher "
                        "%(alias)r (%(backend)s) never learns when a run ends; leave it blank, or "
                        "use a dispatcher that reports outcomes."
                    )
                    % params
                )
        if errors:
            raise ValidationError(errors)

    def check(self, *, connect: bool = False) -> list[CheckMessage]:
        """System check messages about this alias: missing dependencies, bad options and,
        with ``connect`` (``check --database``), a receiver that cannot be reached."""
        return []

    @property
    def hand_off_timeout(self) -> float | None:
        """The longest one hand-off may take once started (the inline dispatcher's task
        timeout, a webhook request's deadline), or None when it has no bound of its own: a
        stop waits that much longer for the hand-offs in progress after its grace."""
        return None

    def send(self, occurrence: Occurrence, call: Call) -> Outcome:
        """Hand off one occurrence (see the class); called through ``hand_off`` only."""
        raise NotImplementedError

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Held around the sends of one batch (Celery: one producer for all of them)."""
        yield

    def hand_off(self, occurrence: Occurrence) -> Outcome:
        """Send one occurrence inside the guard every hand-off goes through: a task that is
        no longer registered, arguments it cannot take, and any error of the send itself
        fail this run alone, with its error. Only ``Unreachable`` goes through, for the
        caller to retry the rest of the batch."""
        try:
            return self.send(occurrence, Call.of(occurrence))
        except Unreachable:
            raise
        except Exception as exc:
            return self.failure(occurrence, exc)

    def failure(self, occurrence: Occurrence, exc: Exception) -> Outcome:
        """The outcome of a hand-off that raised ``exc``: failed, with what went wrong."""
        if isinstance(exc, UnknownTask | InvalidArguments | TaskTimedOut):
            return Outcome(occurrence.run_id, OutcomeStatus.FAILED, str(exc))
        logger.exception(
            "Handing off run %s (%s, key %s) through %r failed.",
            occurrence.run_id,
            occurrence.task,
            occurrence.key,
            self.alias,
        )
        text = f"{type(exc).__name__}: {exc}"
        return Outcome(occurrence.run_id, OutcomeStatus.FAILED, text[:MAX_ERROR_CHARS])

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        """Hand each occurrence off in turn, through ``hand_off``. Once ``send`` raised
        ``Unreachable``, the rest are retried without being tried now. Outcomes are
        reported through ``progress`` about once a second (each at once with
        ``records_each_hand_off``); if the batch breaks off, what was sent is reported
        before the error goes on."""
        outcomes: list[Outcome] = []
        unreported: list[Outcome] = []
        next_report = time.monotonic() + REPORT_EVERY_SECONDS
        down = ""
        try:
            with self.batch():
                for occurrence in occurrences:
                    if progress.stopped():
                        break  # the rest stay pending: a take-over sends them later
                    if down:
                        outcome = Outcome(occurrence.run_id, OutcomeStatus.RETRY, down)
                    else:
                        try:
                            outcome = self.hand_off(occurrence)
                        except Unreachable as exc:
                            down = str(exc)[:MAX_ERROR_CHARS]
                            outcome = Outcome(occurrence.run_id, OutcomeStatus.RETRY, down)
                    outcomes.append(outcome)
                    unreported.append(outcome)
                    if self.records_each_hand_off or time.monotonic() >= next_report:
                        progress.finished(unreported)
                        unreported = []
                        next_report = time.monotonic() + REPORT_EVERY_SECONDS
        except BaseException:
            if unreported:
                progress.finished(unreported)
            raise
        return outcomes

    def close(self) -> None:
        """Release resources (threads, connections) when the scheduler stops."""
