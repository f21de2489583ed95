"""A moment: one point of a schedule's timeline, with how a daylight-saving change or an
excluded day touched it, and the order of two moments on one instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# How a daylight-saving change touched an occurrence (Moment.dst).
DST_SHIFT = "shifted"  # the local time did not exist; moved forward by the gap
DST_SKIP = "skipped"  # the local time did not exist; not an occurrence (a marker)
DST_FIRST = "first"  # the first of two instants with this local time
DST_SECOND = "second"  # the second of two instants with this local time

# How a calendar of excluded days touched an occurrence (Moment.calendar).
CAL_SKIPPED = "skipped"  # on an excluded day: not an occurrence (a marker, one a span)
CAL_MOVED = "moved"  # moved from an excluded day to the next business day


@dataclass(frozen=True, slots=True)
class Moment:
    """One point of a schedule's timeline.

    ``at`` is the nominal UTC instant. A ``skipped`` moment is not an occurrence: it marks a
    local time the DST policy skips, at the instant a shift would have given it, so that the
    skip can be recorded when the schedule passes it.
    """

    at: datetime
    dst: str = ""  # DST_SHIFT, DST_SKIP, DST_FIRST, DST_SECOND, or "" when untouched
    wall: datetime | None = None  # the local wall time a cron matched (naive)
    calendar: str = ""  # CAL_SKIPPED, CAL_MOVED, or "" when no excluded day touched it
    excluded: str = ""  # the excluded day(s) it was on, as ExcludedSpan.label says them

    @property
    def skipped(self) -> bool:
        return self.dst == DST_SKIP or self.calendar == CAL_SKIPPED


def touched(moment: Moment) -> tuple[bool, bool, bool]:
    # Two wall times on one instant fire once, as the one a DST change touched least: an
    # untouched time wins over a shifted one, and any occurrence over a skipped-time marker.
    return moment.skipped, bool(moment.dst), bool(moment.calendar)


def earlier(a: Moment, b: Moment) -> bool:
    """``a`` comes first going forward (on one instant: the less touched one)."""
    return (a.at, touched(a)) < (b.at, touched(b))


def later(a: Moment, b: Moment) -> bool:
    """``a`` comes first going backward (on one instant: still the less touched one)."""
    return a.at > b.at or (a.at == b.at and touched(a) < touched(b))
