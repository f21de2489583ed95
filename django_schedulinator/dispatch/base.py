"""What a dispatcher receives and returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

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


@dataclass(frozen=True, slots=True)
class Outcome:
    run_id: int
    status: OutcomeStatus
    error: str = ""


class BaseDispatcher(ABC):
    """Hands occurrences to whatever runs them.

    ``dispatch`` receives a batch and returns one Outcome per occurrence: ``dispatched`` when
    it was handed off to another system, ``succeeded``/``failed`` when the dispatcher ran it.
    A run whose outcome is never recorded (the process died) is dispatched again with the
    same key after its lease expires. Dispatchers that block longer than a second call
    ``keepalive()`` about once a second; it is cheap (the worker renews the leases of the
    batch only every third of a lease).
    """

    @abstractmethod
    def dispatch(
        self, occurrences: Sequence[Occurrence], keepalive: Callable[[], None]
    ) -> list[Outcome]: ...

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release resources (threads, connections) when the scheduler stops."""
