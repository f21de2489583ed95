"""Retention: the ledger and the change log pruned in bounded batches, never a live row.

A schedule every second writes 86,400 runs a day. A prune deletes the runs that nothing waits
for any more (``RunQuerySet.done``) recorded before a cutoff, and the change log's entries
older than another. ``manage.py prune_runs`` runs one by hand; the schedulers run one every
``PRUNE_SECONDS`` themselves (one of them at a time, ``DueIndex.control.take_turn``), a slice of at
most ``PRUNE_MAX_SECONDS`` between two claim passes, slice after slice while behind.

What keeps it cheap on a ledger of millions of rows, and out of the schedulers' way:

- It walks the primary key, ``PRUNE_BATCH_SIZE`` rows at a time (at most 10,000): an index
  range read, never a sort or a scan of the table. Ids grow with time, so the old rows come
  first, and the walk ends at the first batch with no row that entered the ledger before
  the cutoff (rows after it are newer: the next prune's).
- Each batch is at most one DELETE, by id, of at most that many rows, in a transaction of its
  own: locks on old rows that no scheduler writes, held for milliseconds. The DELETE states
  again which rows may go, so a row that changed since it was read (a skipped run a
  backfill turned into a pending one) stays.
- A run that still guards an occurrence stays whatever its age (``guards_an_occurrence``:
  one ahead of what its schedule has fired through, a one-off's own run), read from each
  schedule's row once per prune, never joined to the ledger's rows (without statistics,
  the planner joined a fresh ledger row by row). What a batch deletes is recorded per
  schedule in its transaction (``PrunedRuns``), its schedules' rows held by a key share
  first, as a delete of a schedule takes them, so the two never wait for each other.
- A schedule's newest ``keep_last`` runs stay whatever their age. For each schedule with
  candidates in a batch, the nominal time of its ``keep_last``-th newest run is read through
  the unique (schedule, scheduled_for) index, a range read per schedule (never a window
  over the table), and its runs before that may go. It is remembered for the rest of the
  walk: a schedule's newest runs only get newer, so a remembered one keeps more, not fewer.

A run's age is from when it was last recorded: it ended (``finished_at``), else was handed
off (``dispatched_at``), else entered the ledger (``claimed_at``); never its nominal time.

The change log keeps, for every schedule that exists, its newest entry and the one that
created it (the sync of schedules declared in code reads it). The entries of deleted
schedules go by age alone.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import OperationalError, connections, router, transaction
from django.db.models import OuterRef, Q, Subquery

from django_schedulinator.conf import (
    MAX_KEEP_LAST,
    MAX_PRUNE_BATCH_SIZE,
    MAX_RETENTION_SECONDS,
    app_settings,
)
from django_schedulinator.models import PrunedRuns, Run, Schedule, ScheduleChange
from django_schedulinator.models.batches import (
    ids_param,
    is_lock_timeout,
    json_ids,
    json_rows,
    json_time,
)
from django_schedulinator.operations import partitions
from django_schedulinator.operations.stage import stage_thread

logger = logging.getLogger("django_schedulinator.retention")

AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}

# What the walks read of each run: enough for retention's rule (``Pruner._doomed``).
WALKED = ("pk", "schedule_id", "scheduled_for", "claimed_at", "trigger")
Walked = tuple[int, int, datetime, datetime, str]
_AGE = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")


def enabled() -> bool:
    """Whether the settings ask the schedulers to prune anything."""
    return (
        app_settings.RUN_RETENTION_SECONDS is not None
        or app_settings.CHANGE_RETENTION_SECONDS is not None
    )


def parse_age(text: str) -> timedelta:
    """An age as people write it: a whole number and a unit, ``30d``, ``12h``, ``90m`` or
    ``3600s``. A ValueError says what is wrong."""
    match = _AGE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"{text!r} is not an age: give a whole number and a unit (s, m, h or d), such as "
            f"30d, 12h, 90m or 3600s"
        )
    seconds = int(match[1]) * AGE_UNITS[match[2]]
    if not 1 <= seconds <= MAX_RETENTION_SECONDS:
        raise ValueError(f"{text!r} must be from 1 second to 36500 days (a century)")
    return timedelta(seconds=seconds)


@dataclass(slots=True)
class PruneReport:
    """What a prune (or one slice of it) did; with ``dry_run``, what it would have done."""

    runs: int = 0  # runs deleted (those of the days dropped included)
    days: int = 0  # days of a partitioned ledger dropped
    changes: int = 0  # change log entries deleted
    read: int = 0  # rows read by the walks (kept ones included)
    batches: int = 0
    seconds: float = 0.0
    caught_up: bool = False  # both walks reached their end: the prune is complete
    dry_run: bool = False

    def add(self, other: PruneReport) -> None:
        for name in ("runs", "days", "changes", "read", "batches", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.caught_up = other.caught_up

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Pruner:
    """One prune: a walk of the ledger, then one of the change log, each by primary key,
    resumable batch by batch (``step``). Its cutoffs are fixed when it is made."""

    def __init__(
        self,
        *,
        now: datetime,
        run_age: timedelta | None,
        keep_last: int,
        change_age: timedelta | None = None,
        batch_size: int | None = None,
        dry_run: bool = False,
        using: str | None = None,
    ) -> None:
        size = app_settings.PRUNE_BATCH_SIZE if batch_size is None else batch_size
        # The command validates its options too, but call_command() skips argparse.
        for name, value, maximum in (
            ("batch_size", size, MAX_PRUNE_BATCH_SIZE),
            ("keep_last", keep_last, MAX_KEEP_LAST),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
                raise ValueError(
                    f"{name} must be a whole number from 1 to {maximum}, got {value!r}"
                )
        for name, age in (("run_age", run_age), ("change_age", change_age)):
            if age is not None and age <= timedelta(0):
                raise ValueError(f"{name} must be positive, got {age!r}")
        self.now = now
        self.run_cutoff = now - run_age if run_age is not None else None
        self.change_cutoff = now - change_age if change_age is not None else None
        self.keep_last = keep_last
        self.batch_size = size
        self.dry_run = dry_run
        self.db = using or router.db_for_write(Run)
        self.total = PruneReport(dry_run=dry_run, caught_up=self.caught_up)
        self._run_cursor = 0  # the last id read
        self._change_cursor = 0
        # Each schedule's nominal time of its keep_last-th newest run (None: it has fewer,
        # or is gone), and the id of its newest change: read once per prune.
        self._kept_from: dict[int, datetime | None] = {}
        self._newest_change: dict[int, int | None] = {}
        # Each schedule's mark and kind, read once per prune (``guards_an_occurrence``).
        self._guards: dict[int, tuple[datetime | None, str]] = {}
        # A partitioned ledger (partitions.py): its expired days are dropped whole, and the
        # walk reads only the runs before its first day left (the default partition's).
        layout = partitions.layout(self.db)
        self._make_days = layout is not None and not dry_run
        self.paced = False  # rest between a day's batches (set by PruneThread)
        self._days: list[date] = []
        self._below: datetime | None = None
        if layout is not None and self.run_cutoff is not None:
            self._days = layout.expired(self.run_cutoff)
            left = layout.days[len(self._days) :]
            self._below = partitions.start_of(left[0]) if left else None

    @classmethod
    def from_settings(cls, now: datetime, *, using: str | None = None) -> Pruner | None:
        """The prune the settings ask for, or None when they keep everything."""
        if not enabled():
            return None
        run_age = app_settings.RUN_RETENTION_SECONDS
        change_age = app_settings.CHANGE_RETENTION_SECONDS
        return cls(
            now=now,
            run_age=None if run_age is None else timedelta(seconds=run_age),
            keep_last=app_settings.RUN_KEEP_LAST,
            change_age=None if change_age is None else timedelta(seconds=change_age),
            using=using,
        )

    @property
    def caught_up(self) -> bool:
        return self.run_cutoff is None and self.change_cutoff is None and not self._days

    def step(
        self,
        max_seconds: float | None = None,
        progress: Callable[[PruneReport], None] | None = None,
    ) -> PruneReport:
        """Prune batch after batch until done, or until ``max_seconds`` have passed on a
        monotonic clock (at least one batch); what this step did. ``progress`` is called
        with what each batch did."""
        started = time.monotonic()
        report = PruneReport(dry_run=self.dry_run)
        if self._make_days:
            partitions.ensure_days(today=self.now.astimezone(UTC).date(), using=self.db)
            self._make_days = False
        while not self.caught_up:
            batch_started = time.monotonic()
            batch = PruneReport(dry_run=self.dry_run, batches=1)
            if self._days:
                assert self.run_cutoff is not None
                self._drop_day(self._days[0], self.run_cutoff, batch)
                self._days.pop(0)
            elif self.run_cutoff is not None:
                self._run_batch(self.run_cutoff, batch)
            else:
                assert self.change_cutoff is not None
                self._change_batch(self.change_cutoff, batch)
            batch.seconds = time.monotonic() - batch_started
            batch.caught_up = self.caught_up
            report.add(batch)
            if progress is not None:
                progress(batch)
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                break
        report.caught_up = self.caught_up
        self.total.add(report)
        return report

    # -- the ledger ------------------------------------------------------------------------

    def _run_batch(self, cutoff: datetime, report: PruneReport) -> None:
        walked = Run.objects.using(self.db)
        if self._below is not None:  # a partitioned ledger: the default partition's old runs
            walked = walked.filter(scheduled_for__lt=self._below)
        rows = list(
            walked.filter(pk__gt=self._run_cursor)
            .order_by("pk")
            .values_list(*WALKED)[: self.batch_size]
        )
        report.read += len(rows)
        doomed, schedules, old = self._doomed(rows, cutoff)
        if doomed is not None:
            if self._below is not None:
                doomed = doomed.filter(scheduled_for__lt=self._below)
            if self.dry_run:
                report.runs += doomed.count()
            else:
                report.runs += self._delete(doomed, schedules)
        if rows:
            self._run_cursor = rows[-1][0]
        if len(rows) < self.batch_size or not old:
            self.run_cutoff = None  # the end of the table, or of the rows old enough

    def _doomed(self, rows: Sequence[Walked], cutoff: datetime) -> tuple[Any, set[int], bool]:
        """Which of ``rows`` (``WALKED``) may go: retention's rule, which every way of
        pruning goes through (a batch of the walk, a day of a partitioned ledger). Returns
        the runs that may go as a queryset (None: none), their schedules, and whether any
        of the rows entered the ledger before the cutoff.

        A run may go when it entered the ledger before the cutoff, is not among its
        schedule's newest ``keep_last``, guards no occurrence (``guards_an_occurrence``),
        and, read in the same statement as its delete, nothing waits for it
        (``RunQuerySet.done``) and it was last recorded before the cutoff."""
        # Entered the ledger before the cutoff: the rows that may have been recorded before it.
        old = [(pk, sid, at, trigger) for pk, sid, at, claimed_at, trigger in rows
               if claimed_at < cutoff]  # fmt: skip
        if not old:
            return None, set(), False
        schedules = {sid for _pk, sid, _at, _trigger in old}
        kept_from = self._kept_from_of(schedules)
        guards = self._guards_of(schedules)
        candidates = [
            (pk, sid)
            for pk, sid, at, trigger in old
            if (first_kept := kept_from.get(sid)) is not None
            and at < first_kept
            and not guards_an_occurrence(trigger, at, *guards.get(sid, (None, "")))
        ]
        if not candidates:
            return None, set(), True
        doomed = (
            Run.objects.using(self.db)
            .filter(pk__in=json_ids([pk for pk, _sid in candidates], self.db))
            .done(self.now)
            .recorded_before(cutoff)
        )
        return doomed, {sid for _pk, sid in candidates}, True

    def _drop_day(self, day: date, cutoff: datetime, report: PruneReport) -> None:
        """Drop a day of a partitioned ledger, its runs that may not go yet (``_doomed``)
        moved to the default partition first, in one transaction: the day's partition is
        held (no run of it changes meanwhile), read by primary key in batches, what it
        deletes recorded per schedule (``PrunedRuns``), then dropped."""
        first, end = partitions.start_of(day), partitions.start_of(day + partitions.DAY)
        in_day = Run.objects.using(self.db).filter(scheduled_for__gte=first, scheduled_for__lt=end)
        keep: list[int] = []
        going = 0
        with transaction.atomic(using=self.db):
            if not self.dry_run:
                partitions.hold_day(day, self.db)
            cursor = 0
            while True:
                started = time.monotonic()
                rows = list(
                    in_day.filter(pk__gt=cursor)
                    .order_by("pk")
                    .values_list(*WALKED)[: self.batch_size]
                )
                if not rows:
                    break
                report.read += len(rows)
                cursor = rows[-1][0]
                doomed, _schedules, _old = self._doomed(rows, cutoff)
                gone = (
                    set()
                    if doomed is None
                    else set(
                        doomed.filter(scheduled_for__gte=first, scheduled_for__lt=end).values_list(
                            "pk", flat=True
                        )
                    )
                )
                keep += [row[0] for row in rows if row[0] not in gone]
                going += len(gone)
                if self.paced:
                    # Beside a scheduler (PruneThread): a day is one transaction of many
                    # batches, so it rests after each as long as the batch took, as the
                    # slices do, leaving the CPU (the GIL) and the database to the fire path.
                    time.sleep(time.monotonic() - started)
            if not self.dry_run:
                self._record_day(day, keep)
                partitions.drop_day(day, keep=keep, using=self.db)
        if not self.dry_run:
            partitions.discard(using=self.db)  # its files, outside the ledger's locks
        report.runs += going
        report.days += 1
        (logger.info if (going or keep) and not self.dry_run else logger.debug)(
            "%s the ledger's partition of %s: %d run(s), %d kept (moved to the default partition).",
            "Would drop" if self.dry_run else "Dropped",
            day.isoformat(),
            going,
            len(keep),
        )

    def _record_day(self, day: date, keep: Sequence[int]) -> None:
        """Record, per schedule, the runs of ``day`` that go (all but ``keep``): one
        statement over the day's partition."""
        connection = connections[self.db]
        qn = connection.ops.quote_name
        source = (
            f"SELECT schedule_id, MAX(scheduled_for), COUNT(*), %s "
            f"FROM {qn(partitions.partition_name(day))} "
            f"WHERE NOT (id = ANY(%s::bigint[])) GROUP BY schedule_id"
        )
        ids = ids_param(connection, keep)
        now = connection.ops.adapt_datetimefield_value(self.now)
        with connection.cursor() as cursor:
            cursor.execute(_upsert_pruned(connection, source), [now, ids])

    def _delete(self, doomed: Any, schedule_ids: Collection[int]) -> int:
        """Delete the runs ``doomed`` selects (of ``schedule_ids``), and record in the same
        transaction how far each schedule's runs were pruned (``PrunedRuns``): what a
        backfill must not guess about. What is recorded is what was deleted.

        On PostgreSQL one statement, in the order every writer takes the locks: first a key
        share of the schedules' rows (which a delete of the schedule waits for, and a
        claim's advance does not), then the runs; a schedule deleted meanwhile is left out,
        its runs gone with it. Elsewhere (SQLite, whose writer holds the whole database) a
        read, the delete and the record, in a transaction."""
        if self._row_locks:
            return self._delete_in_one_statement(doomed, sorted(schedule_ids))
        with transaction.atomic(using=self.db):
            rows = list(doomed.values_list("pk", "schedule_id", "scheduled_for"))
            if not rows:
                return 0
            Run.objects.using(self.db).filter(
                pk__in=json_ids([pk for pk, *_ in rows], self.db)
            ).delete()
            pruned: dict[int, tuple[datetime, int]] = {}
            for _pk, sid, at in rows:
                through, count = pruned.get(sid, (at, 0))
                pruned[sid] = (max(through, at), count + 1)
            record_pruned(pruned, now=self.now, using=self.db)
        return len(rows)

    def _delete_in_one_statement(self, doomed: Any, schedule_ids: list[int]) -> int:
        """``_delete`` on PostgreSQL: the key share, the delete and the record of what it
        deleted, one round trip (a batch cost four before)."""
        connection = connections[self.db]
        qn = connection.ops.quote_name
        runs, schedules = qn(Run._meta.db_table), qn(Schedule._meta.db_table)
        selected, params = doomed.values("pk").query.get_compiler(using=self.db).as_sql()
        # A partitioned ledger: the delete planned over the walked partition only.
        bound, bound_params = ("", []) if self._below is None else (
            " AND scheduled_for < %s", [connection.ops.adapt_datetimefield_value(self._below)]
        )  # fmt: skip
        marks = _upsert_pruned(
            connection, "SELECT schedule_id, MAX(scheduled_for), COUNT(*), %s FROM d "
            "GROUP BY schedule_id"
        )  # fmt: skip
        sql = (
            f"WITH s AS (SELECT id FROM {schedules} WHERE id = ANY(%s) ORDER BY id "
            f"FOR KEY SHARE), "
            f"d AS (DELETE FROM {runs} WHERE id IN ({selected}) AND schedule_id IN "
            f"(SELECT id FROM s){bound} RETURNING schedule_id, scheduled_for), "
            f"m AS ({marks}) "
            f"SELECT COUNT(*) FROM d"
        )
        now = connection.ops.adapt_datetimefield_value(self.now)
        with transaction.atomic(using=self.db), connection.cursor() as cursor:
            cursor.execute(sql, [schedule_ids, *params, *bound_params, now])
            (deleted,) = cursor.fetchone()
        return int(deleted)

    def _guards_of(self, schedule_ids: Collection[int]) -> dict[int, tuple[datetime | None, str]]:
        """For each schedule, what tells which of its runs still guard an occurrence: how
        far it has fired and its kind (``guards_an_occurrence``), read once per prune for
        the schedules not read yet (a mark read earlier is lower: it keeps more, not
        fewer). A schedule gone meanwhile is left out: its runs went with it."""
        missing = sorted(set(schedule_ids) - self._guards.keys())
        if missing:
            found = (
                Schedule.objects.using(self.db)
                .filter(pk__in=json_ids(missing, self.db))
                .values_list("pk", "fired_through", "kind")
            )
            for sid, fired_through, kind in found:
                self._guards[sid] = (fired_through, kind)
        return self._guards

    @property
    def _row_locks(self) -> bool:
        # SQLite has none: a writer holds the whole database.
        return connections[self.db].vendor == "postgresql"

    def _kept_from_of(self, schedule_ids: Collection[int]) -> dict[int, datetime | None]:
        """For each schedule, the nominal time from which its runs are kept (None: all of
        them): one statement for those not read yet, a range read of the unique
        (schedule, scheduled_for) index per schedule."""
        newest = (
            Run.objects.filter(schedule_id=OuterRef("pk"))
            .order_by("-scheduled_for")
            .values("scheduled_for")[self.keep_last - 1 : self.keep_last]
        )
        return self._per_schedule(self._kept_from, schedule_ids, newest)

    def _per_schedule(
        self, known: dict[int, Any], schedule_ids: Collection[int], value: Any
    ) -> dict[int, Any]:
        """``known`` with the subquery ``value`` (of a schedule, ``OuterRef("pk")``) read
        for the schedules it lacks, in one statement; each is read once per prune."""
        missing = sorted(set(schedule_ids) - known.keys())
        if missing:
            found = dict(
                Schedule.objects.using(self.db)
                .filter(pk__in=json_ids(missing, self.db))
                .order_by()
                .annotate(value=Subquery(value))
                .values_list("pk", "value")
            )
            for sid in missing:
                # A schedule gone meanwhile: its rows go with it (the cascade), not here.
                known[sid] = found.get(sid)
        return known

    # -- the change log ----------------------------------------------------------------------

    def _change_batch(self, cutoff: datetime, report: PruneReport) -> None:
        rows = list(
            ScheduleChange.objects.using(self.db)
            .filter(pk__gt=self._change_cursor)
            .order_by("pk")
            .values_list("pk", "schedule_id", "at")[: self.batch_size]
        )
        report.read += len(rows)
        old = [(pk, sid) for pk, sid, at in rows if at < cutoff]
        if old:
            newest = self._newest_change_of({sid for _pk, sid in old if sid is not None})
            candidates = [pk for pk, sid in old if sid is None or newest.get(sid) not in (None, pk)]
            if candidates:
                doomed = (
                    ScheduleChange.objects.using(self.db)
                    .filter(pk__in=json_ids(candidates, self.db), at__lt=cutoff)
                    # What made an existing schedule: the sync of declared schedules reads it.
                    .exclude(Q(schedule__isnull=False) & Q(action=ScheduleChange.Action.CREATED))
                )
                report.changes += doomed.count() if self.dry_run else doomed.delete()[0]
        if rows:
            self._change_cursor = rows[-1][0]
        if len(rows) < self.batch_size or not old:
            self.change_cutoff = None

    def _newest_change_of(self, schedule_ids: Collection[int]) -> dict[int, int | None]:
        newest = (
            ScheduleChange.objects.filter(schedule_id=OuterRef("pk"))
            .order_by("-at", "-pk")
            .values("pk")[:1]
        )
        return self._per_schedule(self._newest_change, schedule_ids, newest)


def guards_an_occurrence(
    trigger: str, nominal: datetime, fired_through: datetime | None, kind: str
) -> bool:
    """Whether a run still guards its occurrence, which its deletion would let fire again:
    one ahead of what its schedule has fired through (a backfilled run the scheduler has
    not reached, whose key it would take), and a one-off's own run, the record of its one
    occurrence. A run now's never does (its key is no occurrence of the timeline); one at
    or before the mark does not either: the mark stops that occurrence without the row."""
    if trigger == Run.Trigger.RUN_NOW:
        return False
    if kind == Schedule.Kind.ONCE and trigger == Run.Trigger.SCHEDULE:
        return True
    return fired_through is None or nominal > fired_through


def record_pruned(pruned: dict[int, tuple[datetime, int]], *, now: datetime, using: str) -> None:
    """Record, by schedule, the latest nominal time of the runs just deleted and how many
    (``{schedule id: (through, count)}``): each schedule's ``PrunedRuns`` moves up to it,
    never back. One statement on PostgreSQL and SQLite."""
    connection = connections[using]
    if connection.vendor not in ("postgresql", "sqlite"):
        for sid, (through, count) in pruned.items():
            mark, created = (
                PrunedRuns.objects.using(using)
                .select_for_update()
                .get_or_create(
                    schedule_id=sid, defaults={"through": through, "runs": count, "pruned_at": now}
                )
            )
            if not created:
                mark.through, mark.runs = max(mark.through, through), mark.runs + count
                mark.pruned_at = now
                mark.save(using=using)
        return
    rows = json.dumps(
        [[sid, json_time(connection, at), count] for sid, (at, count) in pruned.items()]
    )
    values = json_rows(connection, "bigint", "timestamp", "bigint")
    # WHERE true: SQLite's parser, for an INSERT ... SELECT with an ON CONFLICT clause.
    sql = f"WITH v(sid, thr, n) AS ({values}) " + _upsert_pruned(
        connection, "SELECT v.sid, v.thr, v.n, %s FROM v WHERE true"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [rows, connection.ops.adapt_datetimefield_value(now)])


def _upsert_pruned(connection: Any, source: str) -> str:
    """The statement that moves each schedule's ``PrunedRuns`` up by the rows of ``source``
    (a SELECT of schedule id, the latest nominal time pruned, how many, and when): never
    back, counts added. PostgreSQL and SQLite."""
    qn = connection.ops.quote_name
    meta = PrunedRuns._meta
    table = qn(meta.db_table)
    column = {f.name: qn(f.column or "") for f in meta.concrete_fields}
    later = "GREATEST" if connection.vendor == "postgresql" else "MAX"
    highest, runs = column["through"], column["runs"]
    return (
        f"INSERT INTO {table} ({column['schedule']}, {highest}, {runs}, {column['pruned_at']}) "
        f"{source} ON CONFLICT ({column['schedule']}) DO UPDATE SET "
        f"{highest} = {later}({table}.{highest}, excluded.{highest}), "
        f"{runs} = {table}.{runs} + excluded.{runs}, "
        f"{column['pruned_at']} = excluded.{column['pruned_at']}"
    )


def prune(
    *,
    now: datetime,
    run_age: timedelta | None,
    keep_last: int,
    change_age: timedelta | None = None,
    batch_size: int | None = None,
    dry_run: bool = False,
    using: str | None = None,
    progress: Callable[[PruneReport], None] | None = None,
) -> PruneReport:
    """A whole prune at once (``manage.py prune_runs``): see ``Pruner``."""
    pruner = Pruner(
        now=now,
        run_age=run_age,
        keep_last=keep_last,
        change_age=change_age,
        batch_size=batch_size,
        dry_run=dry_run,
        using=using,
    )
    return pruner.step(progress=progress)


class PruneThread:
    """A prune running beside a scheduler's claim loop, on a thread and a database
    connection of its own: firing never waits for it. It deletes a slice of batches (at
    most PRUNE_MAX_SECONDS), then rests as long as the slice took, so it holds the ledger
    for at most half the time and leaves the database room for the fire path; until it has
    caught up, a stop is asked for, or a batch fails (the next period starts again)."""

    def __init__(
        self,
        pruner: Pruner,
        *,
        on_batch: Callable[[PruneReport], None],
    ) -> None:
        self.pruner = pruner
        pruner.paced = True
        self._on_batch = on_batch
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        # A stage thread (stage.py): lock waits bounded, connections closed as it ends.
        self._thread = stage_thread("schedulinator-prune", self._run)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self, timeout: float) -> None:
        """Stop after the batch in progress (each is its own short transaction)."""
        self._stopping.set()
        self.join(timeout)

    def _run(self) -> None:
        try:
            while not self.pruner.caught_up and not self._stopping.is_set():
                started = time.monotonic()
                self.pruner.step(
                    max_seconds=app_settings.PRUNE_MAX_SECONDS, progress=self._on_batch
                )
                self._stopping.wait(time.monotonic() - started)
            if self.pruner.caught_up:
                self._log_done()
        except OperationalError as exc:
            if not is_lock_timeout(exc):
                logger.warning("The prune failed (%s); the next period tries again.", exc)
                return
            # A transaction holds old runs (a schedule with many runs being deleted): the
            # prune gives way until the next period rather than wait on it.
            logger.info(
                "The prune waited longer than LOCK_TIMEOUT_SECONDS on a row lock; it starts "
                "again at the next period."
            )
        except Exception:
            logger.exception("The prune failed; the next period tries again.")

    def _log_done(self) -> None:
        total = self.pruner.total
        log = logger.info if total.runs or total.changes else logger.debug
        log(
            "Pruned %d run(s) and %d change log entr%s past their retention (read %d rows in "
            "%d batch(es), %.2fs of work).",
            total.runs,
            total.changes,
            "y" if total.changes == 1 else "ies",
            total.read,
            total.batches,
            total.seconds,
        )
