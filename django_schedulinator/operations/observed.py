"""What the operations read of a running scheduler: the heartbeat, the probes and the
metrics each take an ``Observed``, which ``scheduler.worker.Worker`` satisfies.

A protocol here, not the worker's class, keeps the layers one way: the loop imports the
operations (it reports to them), and the operations never import the loop. Everything is
read from another thread than the loop's: attributes the loop sets and snapshots of plain
values, never a lock the loop takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from django_schedulinator.index.due import DueIndex


class Counted(Protocol):
    """A scheduler's counters (``scheduler.claiming.Counters``)."""

    def as_dict(self) -> dict[str, int]: ...


class Observed(Protocol):
    @property
    def worker_id(self) -> str: ...

    @property
    def index(self) -> DueIndex: ...

    @property
    def counters(self) -> Counted: ...

    @property
    def skipped_by_reason(self) -> Mapping[str, int]: ...

    @property
    def started_at(self) -> datetime | None: ...

    @property
    def last_pass_at(self) -> float | None:  # time.monotonic()
        ...

    @property
    def last_progress_at(self) -> float | None:  # time.monotonic()
        ...

    @property
    def last_error(self) -> str: ...

    @property
    def stopping(self) -> bool:  # told to stop
        ...

    @property
    def metrics_port(self) -> int | None: ...

    def lane_depths(self) -> dict[str, tuple[int, float | None]]:
        """Each dispatcher's batches waiting, and how long the oldest has waited."""
        ...

    def recorder_backlog(self) -> tuple[int, int, float | None]:
        """Batches and outcomes not written yet, and how long ago the oldest was handed."""
        ...

    def is_stopping(self) -> bool:
        """Told to stop, or its loop ended and what it holds is being finished."""
        ...
