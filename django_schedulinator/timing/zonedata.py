"""The time-zone database the app reads, and what to do when its rules change.

A cron schedule's next run is a UTC instant computed from a local wall time with the rules
of the tz database that Python's ``zoneinfo`` reads: the system's (the first directory of
``zoneinfo.TZPATH`` that has zone files), else the ``tzdata`` package. When a country
changes its rules (drops daylight saving time, moves a change) and a new database arrives,
the stored instants were computed with the old rules and would fire an hour off.

So the app records the database it computed with, and the offsets it gave each zone over
the next years (``ZoneRules``, one row). When a scheduler starts or ``migrate`` runs with
another database, the zones whose offsets changed are found by comparing those offsets,
and each enabled cron schedule in them is re-planned (``services.replan_for_zone_rules``):
its next run moves to the instant the same local occurrence has under the new rules. This
module is the pure part: which database, the offsets, the comparison, the new instant.
"""

from __future__ import annotations

import bisect
import functools
import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path

from django_schedulinator.errors import TimingError
from django_schedulinator.timing.instants import ONE_MS, get_zone
from django_schedulinator.timing.spec import Timing, occurrences
from django_schedulinator.timing.walks import MAX_WALL_STEPS

SYSTEM = "system"
PACKAGE = "tzdata"
# Offsets are recorded this far ahead: past it, a rule change goes unseen until the next
# database records further (a database comes out several times a year).
HORIZON = timedelta(days=3 * 366)
# Offsets are sampled a week apart, and each change found is narrowed to the second: two
# changes less than a week apart that undo each other would go unseen (none in tzdata).
SAMPLE = timedelta(days=7)

# zone -> [[epoch seconds, UTC offset in seconds from then on], ...], the first entry at
# the start of the recorded span.
Offsets = dict[str, list[list[int]]]


@dataclass(frozen=True, slots=True)
class Database:
    """A tz database: its release (``2025b``), whose it is, and where it lives."""

    version: str
    source: str  # SYSTEM or PACKAGE
    where: str

    def __str__(self) -> str:
        whose = "the system's" if self.source == SYSTEM else "the tzdata package's"
        return f"{self.version} ({whose}, {self.where})"


def in_use() -> Database | None:
    """The database ``zoneinfo`` reads zones from: the system's, if ``TZPATH`` has one,
    else the ``tzdata`` package's; None when there is neither."""
    return system() or package()


def system() -> Database | None:
    """The first database on ``zoneinfo.TZPATH``, or None."""
    for directory in zoneinfo.TZPATH:
        path = Path(directory)
        if (path / "UTC").is_file():
            return Database(_version_in(path), SYSTEM, str(path))
    return None


def package() -> Database | None:
    """The ``tzdata`` package's database, or None when it is not installed."""
    try:
        import tzdata
    except ImportError:
        return None
    where = Path(tzdata.__file__).parent / "zoneinfo"
    return Database(
        str(getattr(tzdata, "IANA_VERSION", "")) or _version_in(where), PACKAGE, str(where)
    )


def _version_in(path: Path) -> str:
    """The release a database directory says it is (the first line of ``tzdata.zi``, or
    ``+VERSION``), or "unknown"."""
    try:
        with open(path / "tzdata.zi", encoding="utf-8") as zi:
            first = zi.readline()
        if first.startswith("# version "):
            return first.removeprefix("# version ").strip()
    except OSError:
        pass
    try:
        return (path / "+VERSION").read_text(encoding="utf-8").strip() or "unknown"
    except OSError:
        return "unknown"


_RELEASE = re.compile(r"^(\d{4})([a-z]+)$")


def newer(release: str | None, than: str | None) -> bool:
    """Whether tz database release ``release`` ("2025a") came out after ``than`` ("2024b").
    A release that does not read as one ("unknown", None) is newer than nothing, and
    nothing is newer than it."""
    first = _RELEASE.match(release or "")
    second = _RELEASE.match(than or "")
    if first is None or second is None:
        return False
    return (first[1], len(first[2]), first[2]) > (second[1], len(second[2]), second[2])


@functools.cache
def release_in_use() -> str | None:
    """The release of the database this process reads zones from, read once: ``zoneinfo``
    keeps the rules of a zone it has loaded, whatever is installed later."""
    database = in_use()
    return database.version if database is not None else None


def outdated_message(recorded: str, mine: str | None) -> str:
    return (
        f"The next runs were planned with time-zone database {recorded}, newer than the "
        f"{mine or 'unknown'} this process reads: its plans would follow the old rules "
        "(early or late runs in the zones whose rules changed). This scheduler does not "
        f"claim: install {recorded} or newer here (the tzdata package, or the system's "
        "zoneinfo) and start it again."
    )


def zones() -> set[str]:
    """Every zone the database in use has."""
    return set(zoneinfo.available_timezones()) | {"UTC"}


def offsets(names: set[str], start: datetime, end: datetime) -> Offsets:
    """Each zone's UTC offsets over [start, end]: where each one starts, to the second."""
    first, last = int(start.timestamp()), int(end.timestamp())
    step = int(SAMPLE.total_seconds())
    found: Offsets = {}
    for name in sorted(names):
        try:
            zone = get_zone(name)
        except TimingError:
            continue
        entries = [[first, _offset(zone, first)]]
        at = first
        while at < last:
            following = min(at + step, last)
            if _offset(zone, following) != entries[-1][1]:
                changed = _first_change(zone, at, following)
                entries.append([changed, _offset(zone, changed)])
                at = changed
            else:
                at = following
        found[name] = entries
    return found


def _offset(zone: zoneinfo.ZoneInfo, epoch: int) -> int:
    offset = datetime.fromtimestamp(epoch, zone).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def _first_change(zone: zoneinfo.ZoneInfo, low: int, high: int) -> int:
    """The first second in (low, high] whose offset differs from ``low``'s."""
    before = _offset(zone, low)
    while high - low > 1:
        middle = (low + high) // 2
        if _offset(zone, middle) == before:
            low = middle
        else:
            high = middle
    return high


def changed_zones(old: Offsets, new: Offsets, since: datetime) -> set[str]:
    """The zones whose offsets from ``since`` on differ between two records (over the span
    both cover); a zone only one of them has counts as changed."""
    moment = int(since.timestamp())
    end = min(_end(old), _end(new))
    return {
        name
        for name in old.keys() | new.keys()
        if name not in old
        or name not in new
        or _from(old[name], moment, end) != _from(new[name], moment, end)
    }


def _end(record: Offsets) -> int:
    return max((entries[-1][0] for entries in record.values()), default=0)


def _from(entries: list[list[int]], moment: int, end: int) -> list[tuple[int, int]]:
    """The offset in force at ``moment``, then each change after it up to ``end``."""
    index = max(bisect.bisect_right([at for at, _ in entries], moment) - 1, 0)
    later = [(at, offset) for at, offset in entries[index + 1 :] if at <= end]
    return [(moment, entries[index][1]), *later]


def _entry_at(entries: list[list[int]], at: datetime) -> int:
    return max(bisect.bisect_right([start for start, _ in entries], int(at.timestamp())) - 1, 0)


def replanned(
    spec: Timing,
    next_run_at: datetime,
    old_entries: list[list[int]],
    *,
    not_before: datetime | None,
) -> datetime | None:
    """The instant that the local occurrence ``next_run_at`` stood for under the old rules
    has under the rules in use: the first moment whose local time is not earlier than the
    old one's, and after ``not_before`` (the last fire: nothing fires twice).

    Under the old rules ``next_run_at`` may sit just after a gap, shifted there from a wall
    time inside it: the local times of the gap did not exist, so nothing fired in them, and
    the new moment may be as early as the wall time it was shifted from."""
    zone = get_zone(spec.timezone)
    index = _entry_at(old_entries, next_run_at)
    changed_at, offset = old_entries[index]
    wall = (next_run_at + timedelta(seconds=offset)).replace(tzinfo=None)
    if index > 0:
        gap = offset - old_entries[index - 1][1]
        since_change = next_run_at.timestamp() - changed_at
        if gap > 0 and since_change < gap:  # within a gap's length after it: maybe shifted
            wall -= timedelta(seconds=gap)
    # The earliest instant whose local time under the rules in use is ``wall`` or later
    # (before a gap that swallows it, the first of two in a fold): the walk starts there,
    # or after the last fire, and takes the first moment at or past that local time.
    earliest = min(wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))
    after = earliest - ONE_MS
    if not_before is not None:
        after = max(after, not_before)
    walk = occurrences(spec, after, anchor=next_run_at)
    for moment in islice(walk, MAX_WALL_STEPS):
        if moment.at.astimezone(zone).replace(tzinfo=None) >= wall:
            return moment.at
    return None
