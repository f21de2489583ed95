"""What python-dateutil does while an iCalendar file's recurring events are expanded, counted
by wrapping its own methods (which still run): the instants its rules produce, and the
periods (years, months, weeks, days) it examines, matched or not. Counted, never timed: the
``rule_work`` fixture (``conftest.py``) stops an expansion that passes a far bound
(``TooMuchWork``), so a regression fails at once instead of running for minutes.

A ``FREQ=SECONDLY`` rule with no end produced 4 million instants in 20 seconds, with hundreds
of millions to come; ``FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30`` (never) examined every day up to
the year 9999 (seconds of CPU for a rule of 40 bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dateutil import rrule

from .walks import TooMuchWork

# Far past what a bounded expansion does, far short of what an unbounded one would.
INSTANTS_BOUND = 2_000_000
PERIODS_BOUND = 10_000_000


@dataclass
class RuleWork:
    instants: int = 0
    periods: int = 0


def counting(work: RuleWork) -> dict[tuple[Any, str], Any]:
    """The wrappers of dateutil's methods, by (class, name), counting into ``work``."""
    produce = rrule.rrule._iter

    def instants(self: rrule.rrule) -> Iterator[Any]:
        for instant in produce(self):
            work.instants += 1
            if work.instants > INSTANTS_BOUND:
                raise TooMuchWork(f"produced more than {INSTANTS_BOUND} instants")
            yield instant

    wrappers: dict[tuple[Any, str], Any] = {(rrule.rrule, "_iter"): instants}
    for name in ("ydayset", "mdayset", "wdayset", "ddayset"):
        examine = getattr(rrule._iterinfo, name)

        def period(self: Any, *args: Any, _examine: Any = examine) -> Any:
            work.periods += 1
            if work.periods > PERIODS_BOUND:
                raise TooMuchWork(f"examined more than {PERIODS_BOUND} periods")
            return _examine(self, *args)

        wrappers[(rrule._iterinfo, name)] = period
    return wrappers
