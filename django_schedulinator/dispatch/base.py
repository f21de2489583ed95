"""The dispatcher seam: what a dispatcher is told, what it returns, and what it declares.

A dispatcher is configured under an alias in ``SCHEDULINATOR['DISPATCHERS']`` (shaped like
``CACHES`` and ``TASKS``: ``BACKEND`` and ``OPTIONS``), built from that alias and those
options, and picked by each schedule (``Schedule.dispatcher``). It declares what it can do
with class attributes, which validation, the checks and the docs' table read; it never
imports anything named by data.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal

from django.core.checks import CheckMessage

from ..errors import InvalidArguments as InvalidArguments  # its home was here

# "retry": the hand-off failed in a way that may pass later (a broker down, a timeout, an
# HTTP 5xx); the run is dispatched again, with the same key, after a backoff.
OutcomeStatus = Literal["dispatched", "succeeded", "failed", "retry"]
DEFAULT_ALIAS = "default"


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
        from ..registry import OCCURRENCE_KEY_PARAMETER, OCCURRENCE_PARAMETER

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
    status: OutcomeStatus
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

    - ``keepalive()``, or calling the object: the batch is still being worked on (the
      scheduler renews its leases every third of a lease);
    - ``running(run_ids)``: these runs have started; they are recorded as ``running``;
    - ``finished(outcomes)``: these runs have ended. Their outcomes are recorded now rather
      than when the whole batch returns, which lets the overlap policies see that a run
      ended and leaves less to deliver again if the process dies.
    """

    def keepalive(self) -> None:
        """The batch is still being worked on."""

    def running(self, run_ids: Collection[int]) -> None:
        """These runs have started."""

    def finished(self, outcomes: Sequence[Outcome]) -> None:
        """These runs have ended (each outcome may also be returned by ``dispatch``)."""

    def __call__(self) -> None:
        self.keepalive()


class BaseDispatcher(ABC):
    """Hands occurrences to whatever runs them.

    ``dispatch`` receives a batch and returns one Outcome per occurrence: ``dispatched`` when
    it was handed off to another system, ``succeeded``/``failed`` when it ran it (or learnt
    the result at once, like a webhook's response), ``retry`` when the hand-off failed in a
    way that may pass. A run whose outcome is never recorded (the process died) is
    dispatched again with the same key after its lease expires. Dispatchers that block
    longer than a second report through ``progress`` about once a second (see
    ``Progress``); calling ``progress()`` alone keeps the leases alive.

    Built with its alias and the alias's ``OPTIONS`` (validated against ``options`` and
    ``COMMON_OPTIONS`` first); the constructor must not connect to anything: validation and
    the checks build one in web processes too.
    """

    #: It learns when each run ends: by running it, from the receiver's answer, or through
    #: reports from the worker side (``django_schedulinator.outcomes``). Overlap "skip" and
    #: "buffer" and ``pause_after_failures`` need it; a subclass whose reports depend on its
    #: configuration overrides ``reports_outcomes`` as a property.
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

    def check(self, *, connect: bool = False) -> list[CheckMessage]:
        """System check messages about this alias: missing dependencies, bad options and,
        with ``connect`` (``check --database``), a receiver that cannot be reached."""
        return []

    @abstractmethod
    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]: ...

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release resources (threads, connections) when the scheduler stops."""
