"""The nominal times a statement on runs by id is bounded by (``Span``).

The ledger may be partitioned by range of ``scheduled_for`` (PostgreSQL). A statement that
reaches runs by id alone is then planned over every partition; one that also names a range
of ``scheduled_for`` is planned over the partitions in range only. Whoever writes runs by id
knows their nominal times (the occurrences carry them; the read that found the ids can
return them), so it says so: ``RunQuerySet.within(span)``, and the prepared queries' bound
(``batches.PreparedQuery``). The bound is exact and inclusive: it never leaves out a run
whose time it was built from, however far apart those times are. ``None`` stands for "not
known": no bound, the statement as it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Span:
    """The earliest and the latest nominal time of a set of runs, both included."""

    first: datetime
    last: datetime

    @classmethod
    def of(cls, times: Iterable[datetime]) -> Span | None:
        """The span of ``times``; None for no times."""
        first = last = None
        for at in times:
            if first is None or last is None:
                first = last = at
            elif at < first:
                first = at
            elif at > last:
                last = at
        return None if first is None or last is None else cls(first, last)

    @classmethod
    def cover(cls, spans: Iterable[Span | None]) -> Span | None:
        """One span over ``spans``; None (no bound) if any of them is None, or none is given."""
        first = last = None
        for span in spans:
            if span is None:
                return None
            if first is None or span.first < first:
                first = span.first
            if last is None or span.last > last:
                last = span.last
        return None if first is None or last is None else cls(first, last)
