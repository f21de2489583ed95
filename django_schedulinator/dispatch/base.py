"""What a dispatcher receives and returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ..errors import InvalidArguments as InvalidArguments  # its home was here

OutcomeStatus = Literal["dispatched", "succeeded", "failed"]


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

    def call_arguments(self) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments to call the task with, checked.

        The model validates them, but rows written around it (``QuerySet.update``,
        ``bulk_create``, raw SQL) may hold any JSON: such a run fails on its own, with an
        error that says what is wrong, instead of breaking whatever runs it.
        """
        from ..registry import OCCURRENCE_PARAMETER

        if not isinstance(self.args, list):
            raise InvalidArguments(
                f"The schedule's args must be a JSON list, not {_json_type(self.args)}."
            )
        if not isinstance(self.kwargs, dict):
            raise InvalidArguments(
                f"The schedule's kwargs must be a JSON object, not {_json_type(self.kwargs)}."
            )
        if OCCURRENCE_PARAMETER in self.kwargs:
            raise InvalidArguments(
                f"The schedule's kwargs hold {OCCURRENCE_PARAMETER!r}, which is reserved: the "
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
    run_id: int
    status: OutcomeStatus
    error: str = ""


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
    it was handed off to another system, ``succeeded``/``failed`` when the dispatcher ran it.
    A run whose outcome is never recorded (the process died) is dispatched again with the
    same key after its lease expires. Dispatchers that block longer than a second report
    through ``progress`` about once a second (see ``Progress``); calling ``progress()`` alone
    keeps the leases alive.
    """

    @abstractmethod
    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]: ...

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release resources (threads, connections) when the scheduler stops."""
