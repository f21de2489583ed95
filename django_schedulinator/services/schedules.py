"""Every change to a schedule, whoever makes it: the one write path.

The admin, the REST API, ``manage.py schedule``, the scheduler's auto-pause and code that
uses the app all change schedules through these functions. Each one takes who acts (an
``Origin``: the user, if any, and the source), locks the row it changes, validates with the
model's rules, writes, records the change in the change log, and has the due index follow
once the transaction commits (the model's signals for saves; ``sync.resync_on_commit`` for
bulk writes) — all in one transaction, so a change and its record commit together or not
at all.

Each function works on the row as it is now, locked until its transaction ends, not on the
caller's instance: that copy may predate a concurrent edit, which writing it back would undo
(and a run queued from it would carry stale arguments). The caller's instance then takes
what was written.

Failures in a row and the auto-pause they lead to are in ``streaks`` (a part of this
layer). Runs are written by ``ledger``. The model itself (``models.Schedule``) only
validates and writes: each function here decides the transition (a first run,
re-timing, pause, resume, a next run replaced) at the "now" it takes from the schedulers'
clock, sets the fields, and saves them with ``update_fields``, which moves the counters.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import reduce
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connections, router, transaction
from django.db.models import Case, F, Q, Value, When

from django_schedulinator import calendars, changelog, declared, ledger, signals, timing
from django_schedulinator.changelog import Origin
from django_schedulinator.conf import app_settings
from django_schedulinator.errors import (
    DeclaredInCode,
    OutdatedZoneRules,
    PrunedRange,
    ScheduleDeleted,
    ServiceError,
    TimingError,
    VersionConflict,
)
from django_schedulinator.index import clock, sync
from django_schedulinator.index.due import ApplyResult, get_index
from django_schedulinator.models import (
    Calendar,
    ExcludedDay,
    PrunedRuns,
    Run,
    Schedule,
    ScheduleChange,
    ZoneRules,
    load_calendars,
    new_stamp,
)
from django_schedulinator.querysets import (
    Advance,
    Advanced,
    ClaimedRuns,
    advances_in_one_statement,
    json_ids,
    json_time,
    per_row,
)
from django_schedulinator.registry import registry
from django_schedulinator.scopes import Scope, schedules_in
from django_schedulinator.timing import zonedata
from django_schedulinator.timing.days import LoadedCalendar
from django_schedulinator.validation import validate
from django_schedulinator.validators import MAX_DAYS

__all__ = [
    "PYTHON",
    "BackfillReport",
    "ZoneRulesReport",
    "advance",
    "backfill",
    "calendar_use",
    "calendar_users",
    "create",
    "delete",
    "delete_calendar",
    "delete_many",
    "fill_calendar",
    "lock_for_edit",
    "mark_missed",
    "mark_not_fired",
    "pause",
    "replan_for_zone_rules",
    "resume",
    "resync",
    "run_now",
    "save_calendar",
    "sync_declared",
    "update",
    "validate",
]

logger = logging.getLogger("django_schedulinator.services")

# Who acts when code calls a service without saying.
PYTHON = Origin(None, ScheduleChange.Source.PYTHON)
# The sync of the schedules declared in code.
CODE = Origin(None, ScheduleChange.Source.CODE)
# A re-plan after the time-zone database's rules changed.
TZDATA = Origin(None, ScheduleChange.Source.TZDATA)

# The index scores times as epoch milliseconds: nothing runs before it.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# What pause, resume and run now write to the row: the caller's instance takes these
# afterwards, and keeps its other values as they were (unsaved edits included).
WRITTEN_BY_ACTIONS = (
    "enabled", "pause_note", "paused_at", "next_run_at", "due_at", "fired_through",
    "revision", "version", "updated_at",
)  # fmt: skip
# What an update writes: every setting, and what follows from them.
WRITTEN_BY_UPDATE = (*Schedule.SETTINGS_FIELDS, *WRITTEN_BY_ACTIONS)


# -- create, update, delete ----------------------------------------------------------------


def create(
    schedule: Schedule | Mapping[str, Any], *, origin: Origin = PYTHON, using: str | None = None
) -> Schedule:
    """Create a schedule from an unsaved instance or from its fields; validated by the
    model (a ``ValidationError`` names each bad field). Returns the saved schedule."""
    instance = schedule if isinstance(schedule, Schedule) else Schedule(**schedule)
    if not instance._state.adding:  # documented by Django (Model._state)
        raise ServiceError("This schedule is saved already: update it instead.")
    db = using or _db(instance)
    now = clock.now()  # Redis TIME: what is due is the schedulers' clock's
    validate(instance, now=now)  # before its timing
    instance.set_first_run(now)
    with transaction.atomic(using=db):
        _lock_calendars(instance.calendars, db)
        instance.save(using=db)
        instance.jitter_first_run(db)
        instance.refresh_from_db(using=db)  # the values as stored, for the change log
        _record(
            instance,
            origin,
            ScheduleChange.Action.CREATED,
            changelog.diff({}, changelog.snapshot(instance)),
            db,
        )
    return instance


def update(
    schedule: Schedule,
    changes: Mapping[str, Any] | None = None,
    *,
    expected_version: int | None = None,
    origin: Origin = PYTHON,
    declared_in: str | None = None,
) -> bool:
    """Change a schedule's settings; returns whether anything changed.

    ``changes`` maps settings (``Schedule.SETTINGS_FIELDS``) to new values; without it, the
    settings of ``schedule`` as the caller edited them are written. With
    ``expected_version``, the edit is refused (``VersionConflict``) if the schedule's
    settings changed since the caller read that version. An edit that changes nothing
    writes nothing, and the version stays.

    Changed timing moves the next run to its first occurrence after now. Setting
    ``enabled`` again resumes like ``resume`` (the paused period recorded as skipped);
    clearing it pauses.

    A schedule declared in code (``declared``) keeps its definition: only its pause state
    changes here (``DeclaredInCode`` otherwise), except from the sync itself (source
    "code"), which also records where the code declares it (``declared_in``)."""
    values = (
        {name: getattr(schedule, name) for name in Schedule.SETTINGS_FIELDS}
        if changes is None
        else dict(changes)
    )
    unknown = sorted(set(values) - set(Schedule.SETTINGS_FIELDS))
    if unknown:
        raise ServiceError(f"Not settings of a schedule: {', '.join(unknown)}.")
    db = _db(schedule)
    with transaction.atomic(using=db):
        current = _locked(schedule, db)
        _check_version(current, expected_version)
        before = changelog.snapshot(current)
        paused_note = current.pause_note
        for name, value in values.items():
            setattr(current, name, value)
        asked = changelog.diff(before, changelog.snapshot(current))
        _check_not_declared(current, asked, origin)
        if declared_in is not None and declared_in != current.declared_in:
            asked["declared_in"] = [current.declared_in, declared_in]
            current.declared_in = declared_in
        if not asked:
            _adopt(schedule, current, WRITTEN_BY_UPDATE)
            return False
        now = clock.now()
        validate(current, now=now)  # before its timing
        if "calendars" in asked:
            _lock_calendars(current.calendars, db)
        written = _decide_edit(current, set(asked), now)
        current.save(using=db, update_fields=written.fields)
        _record_paused_over(current, written.passed, paused_note, db)
        current.refresh_from_db(using=db)
        changed = changelog.diff(before, changelog.snapshot(current))
        if "declared_in" in asked:
            changed["declared_in"] = asked["declared_in"]
        _record(current, origin, ScheduleChange.Action.CHANGED, changed, db)
    _adopt(schedule, current, WRITTEN_BY_UPDATE)
    return True


def lock_for_edit(schedule: Schedule, expected_version: int) -> None:
    """Lock the schedule's row until the caller's transaction ends, and check that its
    settings are still at ``expected_version`` (``VersionConflict``) and that it exists
    (``ScheduleDeleted``): for an edit validated in steps before its ``update`` (a form),
    inside one transaction, so that no other edit slips in between."""
    db = _db(schedule)
    with transaction.atomic(using=db):
        _check_version(_locked(schedule, db), expected_version)


def delete(
    schedule: Schedule, *, expected_version: int | None = None, origin: Origin = PYTHON
) -> None:
    """Delete a schedule with its runs; the change log keeps its last settings."""
    db = _db(schedule)
    with transaction.atomic(using=db):
        current = _locked(schedule, db)
        _check_version(current, expected_version)
        _check_not_declared(current, None, origin)
        _record_deleted([current], origin, db)
        current.delete(using=db)


def delete_many(schedules: Iterable[Schedule], *, origin: Origin = PYTHON) -> int:
    """Delete several schedules with their runs in one transaction; how many were deleted."""
    ids = sorted({s.pk for s in schedules if s.pk is not None})
    if not ids:
        return 0
    db = router.db_for_write(Schedule)
    with transaction.atomic(using=db):
        rows = Schedule.objects.using(db).filter(pk__in=ids)
        current = list(rows.order_by("pk").select_for_update())
        for row in current:
            _check_not_declared(row, None, origin)
        _record_deleted(current, origin, db)
        rows.delete()
        # A bulk delete sends no signals: the entries of the rows that are gone leave here.
        sync.resync_on_commit(ids, using=db)
    return len(current)


# -- pause, resume -------------------------------------------------------------------------


def pause(schedule: Schedule, note: str = "", *, origin: Origin = PYTHON) -> None:
    """Stop firing: the schedule leaves the index and keeps where it stood. Pausing a
    paused schedule with another note replaces the note.

    A note the model refuses (too long) raises its ValidationError; nothing is written and
    the instance is left as it was."""
    if not isinstance(note, str):
        raise ServiceError("The pause note must be text.")
    note = note.strip()
    db = _db(schedule)
    with transaction.atomic(using=db):
        current = _locked(schedule, db)
        if current.enabled or current.pause_note != note:
            if current.enabled:
                current.paused_at = clock.now()
            current.enabled, current.pause_note = False, note
            current.save(using=db, update_fields=["enabled", "pause_note", "paused_at"])
            _record(current, origin, ScheduleChange.Action.PAUSED, {"note": note}, db)
            signals.send_after_commit(
                signals.schedule_paused,
                Schedule,
                using=db,
                schedule_id=current.pk,
                note=note,
                auto=False,
            )
    _adopt(schedule, current, WRITTEN_BY_ACTIONS)


def resume(schedule: Schedule, *, catch_up: bool = False, origin: Origin = PYTHON) -> None:
    """Fire again. The occurrences of the paused period are recorded as skipped
    ("paused"), or, with ``catch_up``, left due so the catch-up policy handles them."""
    db = _db(schedule)
    with transaction.atomic(using=db):
        current = _locked(schedule, db)
        if not current.enabled:
            note = current.pause_note
            current.enabled, current.paused_at, current.pause_note = True, None, ""
            passed: list[timing.Moment] = []
            if not (catch_up and current.next_run_at):
                passed = _resume_moments(current, clock.now())
            current.due_at = current.due_at_for(current.next_run_at)
            current.save(
                using=db,
                update_fields=[
                    "enabled", "paused_at", "pause_note", "next_run_at", "due_at", "fired_through",
                ],
            )  # fmt: skip
            _record_paused_over(current, passed, note, db)
            _record(current, origin, ScheduleChange.Action.RESUMED, {"catch_up": catch_up}, db)
    _adopt(schedule, current, WRITTEN_BY_ACTIONS)


def advance(
    advances: Sequence[Advance],
    fired_at: datetime,
    *,
    using: str,
    skip_locked: bool = False,
    runs: ClaimedRuns | None = None,
) -> Advanced:
    """The scheduler's conditional advance of due schedules past what fired (next run, due
    time, run count, last run; never a setting, so the version stays and the change log is
    not written): each row moves only if it still holds the revision the claim read.

    With ``runs``, the runs of the schedules that moved enter the ledger in the same
    transaction (``inserted``): on PostgreSQL in the advance's own statement, one round
    trip (``querysets.advances_in_one_statement``); elsewhere ``ledger.record_claimed``
    after it, in a transaction of the two."""
    schedules = Schedule.objects.using(using)
    if runs is None:
        return schedules.advance(advances, fired_at, skip_locked=skip_locked)
    connection = transaction.get_connection(using)
    if advances_in_one_statement(connection):
        if not connection.in_atomic_block:
            return schedules.advance(advances, fired_at, skip_locked=skip_locked, runs=runs)
        with transaction.atomic(using=using):  # a savepoint: a lock wait that runs out
            return schedules.advance(advances, fired_at, skip_locked=skip_locked, runs=runs)
    with transaction.atomic(using=using):
        advanced = schedules.advance(advances, fired_at, skip_locked=skip_locked)
        inserted = ledger.record_claimed(
            [run for sid in advanced.moved for run in runs.runs.get(sid, ())],
            claimed_at=runs.claimed_at,
            worker_id=runs.worker_id,
            claim_token=runs.claim_token,
            lease_expires_at=runs.lease_expires_at,
            using=using,
        )
    return advanced._replace(inserted=inserted)


# -- missed runs ---------------------------------------------------------------------------


def mark_missed(missed: Mapping[int, datetime], *, using: str) -> int:
    """Record on each schedule the nominal time of an occurrence of it that was missed
    (``missed``: by schedule id), the mark the admin and the API show: only where it is
    later than the one recorded. A mark of the scheduler's, like ``advance``: no setting,
    so neither the version nor the change log moves; nor the revision (the index does not
    depend on it). One statement. How many schedules it marked."""
    if not missed:
        return 0
    later = {
        pk: Q(pk=pk) & (Q(missed_at__isnull=True) | Q(missed_at__lt=at))
        for pk, at in missed.items()
    }
    return (
        Schedule.objects.using(using)
        .filter(pk__in=sorted(missed))
        .filter(reduce(operator.or_, later.values()))
        .update(
            missed_at=Case(
                *(When(later[pk], then=Value(at)) for pk, at in missed.items()),
                default=F("missed_at"),
                output_field=Schedule._meta.get_field("missed_at"),
            )
        )
    )


def mark_not_fired(schedule_id: int, nominal: datetime, *, using: str) -> bool:
    """Record that the schedule's next occurrence, at ``nominal``, never fired within its
    grace, if it is still its next occurrence, it is enabled, and that occurrence was not
    recorded already: whether this call recorded it. Of several processes that check at
    once, exactly one does (the guard that raises it once)."""
    return bool(
        Schedule.objects.using(using)
        .filter(pk=schedule_id, enabled=True, next_run_at=nominal)
        .filter(Q(missed_at__isnull=True) | Q(missed_at__lt=nominal))
        .update(missed_at=nominal)
    )


# -- run now, backfill ---------------------------------------------------------------------


def run_now(schedule: Schedule, *, advance: bool = False, origin: Origin = PYTHON) -> Run:
    """Queue one run now, outside the timing, through the same dispatch path and ledger.

    Its nominal time is now, one millisecond later for each run already at that instant
    and for an occurrence of the schedule's own there (its next run, not claimed yet), so
    it has an idempotency key of its own. The regular next run stays where it is, unless
    ``advance``: then the run takes its place, and the regular occurrence is recorded as
    skipped ("replaced")."""
    db = _db(schedule)
    now = timing.truncate_ms(clock.now())  # Redis TIME, as the schedulers see it
    with transaction.atomic(using=db):
        current = _locked(schedule, db)
        _check_runnable(current)
        pruned = PrunedRuns.objects.using(db).filter(schedule=current).first()
        pruned_through = pruned.through if pruned is not None else None
        at = now
        for _attempt in range(1000):
            if _occurrence_at(current, at, pruned_through):
                at += timing.ONE_MS
                continue
            inserted = ledger.queue(
                current,
                [at],
                trigger=Run.Trigger.RUN_NOW,
                note="Queued by run now.",
                now=now,
                worker_id="run_now",
                using=db,
            )
            if inserted:
                break
            at += timing.ONE_MS
        else:
            raise ServiceError("Could not find a free instant for the run; try again.")
        if advance:
            _replace_next_run(current, at, now, db)
        run = Run.objects.using(db).get(pk=next(iter(inserted.values())))
        _record(
            current,
            origin,
            ScheduleChange.Action.RUN_NOW,
            {"run": run.pk, "key": run.idempotency_key, "advance": advance},
            db,
        )
    _adopt(schedule, current, WRITTEN_BY_ACTIONS)
    _wake_after_commit(db, schedule.pk)
    logger.info("Run now of schedule %s queued (key %s).", schedule.pk, run.idempotency_key)
    return run


@dataclass(frozen=True, slots=True)
class BackfillReport:
    dry_run: bool
    occurrences: int  # in the range
    queued: int  # new runs queued
    requeued: int  # skipped runs turned into runs
    already: int  # in the ledger and not skipped: fired, running or queued before
    # Of ``queued``: occurrences whose runs retention may have deleted, run again because
    # the caller said so (``rerun_pruned``).
    rerun_pruned: int = 0


def backfill(
    schedule: Schedule,
    start: datetime,
    end: datetime,
    *,
    dry_run: bool = False,
    rerun_pruned: bool = False,
    origin: Origin = PYTHON,
) -> BackfillReport:
    """Fire each occurrence of the schedule's timing in [start, end] that has not fired.

    The range must be in the past. An occurrence the ledger holds as skipped fires now; one
    that fired (or is queued) does not fire again, so running the same backfill twice
    fires nothing new. Each run has the occurrence's own key.

    The ledger is what tells, and retention deletes old runs: an occurrence the ledger
    lacks at or before how far the schedule's runs were pruned (``PrunedRuns``) may have
    run. Such a range is refused (``PrunedRange``, naming it) unless ``rerun_pruned`` says
    to run those occurrences again, knowing some may have run."""
    _check_runnable(schedule)  # before the checks of the range: the first thing to fix
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise ServiceError(f"The {name} must be a date and time with a time zone.")
    now = clock.now()  # "the past" is what the schedulers' clock has passed
    if start < EPOCH:
        raise ServiceError("A backfill cannot start before 1970-01-01 UTC.")
    if end < start:
        raise ServiceError("The end of a backfill must not be before its start.")
    if end > now:
        raise ServiceError("A backfill covers the past: its end must not be after now.")
    db = _db(schedule)
    with transaction.atomic(using=db):
        current = _locked(schedule, db)
        _check_runnable(current)
        moments = _occurrences_between(current, start, end)
        recorded = (
            Run.objects.using(db)
            .filter(schedule_id=schedule.pk, scheduled_for__gte=start, scheduled_for__lte=end)
            .values_list("scheduled_for", "status")
        )
        status_of = {timing.to_ms(at): status for at, status in recorded}
        new = [at for at in moments if timing.to_ms(at) not in status_of]
        skipped = [at for at in moments if status_of.get(timing.to_ms(at)) == Run.Status.SKIPPED]
        # Read after the ledger: a prune that commits between the two reads is then seen
        # here (its rows gone from the first read are covered by the second).
        pruned = PrunedRuns.objects.using(db).filter(schedule_id=schedule.pk).first()
        unknown = [at for at in new if pruned is not None and at <= pruned.through]
        if unknown and not rerun_pruned:
            assert pruned is not None
            raise PrunedRange(_pruned_message(unknown, pruned.through), through=pruned.through,
                              first=unknown[0], last=unknown[-1], count=len(unknown))  # fmt: skip
        report = BackfillReport(
            dry_run=dry_run,
            occurrences=len(moments),
            queued=len(new),
            requeued=len(skipped),
            already=len(moments) - len(new) - len(skipped),
            rerun_pruned=len(unknown),
        )
        if dry_run or not (new or skipped):
            return report
        note = f"Queued by a backfill of {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC."
        ledger.queue(
            current,
            new,
            trigger=Run.Trigger.BACKFILL,
            note=note,
            now=now,
            worker_id="backfill",
            using=db,
        )
        ledger.requeue_skipped(
            current, skipped, trigger=Run.Trigger.BACKFILL, note=note, now=now, using=db
        )
        _record(
            current,
            origin,
            ScheduleChange.Action.BACKFILL,
            {
                "start": start.isoformat(),
                "end": end.isoformat(),
                "queued": report.queued,
                "requeued": report.requeued,
                **({"rerun_pruned": report.rerun_pruned} if report.rerun_pruned else {}),
            },
            db,
        )
    _wake_after_commit(db, schedule.pk)
    logger.info(
        "Backfill of schedule %s queued %d run(s) (%d skipped before).",
        schedule.pk,
        report.queued + report.requeued,
        report.requeued,
    )
    return report


def _pruned_message(unknown: list[datetime], through: datetime) -> str:
    when = "%Y-%m-%d %H:%M:%S UTC"
    span = f"{unknown[0]:{when}}" + (f" to {unknown[-1]:{when}}" if len(unknown) > 1 else "")
    return (
        f"Retention deleted this schedule's runs up to {through:{when}}: {len(unknown)} "
        f"occurrence(s) of the range ({span}) are no longer in the ledger, and whether they "
        "ran cannot be told. Backfill from after that time, or say that running them again "
        'is wanted (rerun_pruned=True; --rerun-pruned; "rerun_pruned": true in the API).'
    )


# -- the index -----------------------------------------------------------------------------


def resync(schedules: Sequence[Schedule], *, origin: Origin = PYTHON) -> ApplyResult:
    """Write the schedules' index entries again from their committed rows, now, and record
    it. Raises Redis's error when Redis is unreachable (nothing is recorded then)."""
    if not schedules:
        return ApplyResult()
    db = router.db_for_write(Schedule)
    result = sync.resync_schedules([s.pk for s in schedules], using=db)
    with transaction.atomic(using=db):
        for schedule in schedules:
            _record(schedule, origin, ScheduleChange.Action.RESYNCED, None, db)
    return result


# -- time-zone rule changes -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ZoneRulesReport:
    """What ``replan_for_zone_rules`` found: the database recorded before (None: none was)
    and the one in use, the zones whose offsets changed, and the schedules re-planned."""

    before: str | None
    now: str
    zones: list[str]
    replanned: int


def replan_for_zone_rules(*, using: str | None = None) -> ZoneRulesReport | None:
    """When the tz database in use is not the one recorded (``ZoneRules``), re-plan the
    enabled cron schedules of every zone whose offsets changed: each next run moves to the
    instant its local occurrence has under the new rules, recorded in the change log
    (origin "tzdata", action "replanned"); then record the database in use. None when
    nothing changed (the usual case: one small read), or when no database is installed.

    The schedulers call it when they start, and ``migrate`` when it is done; two at once
    take turns on the row, and the second finds the work done."""
    database = zonedata.in_use()
    if database is None:
        return None
    db = using or router.db_for_write(ZoneRules)
    recorded = ZoneRules.objects.using(db).filter(pk=1).first()
    if recorded is not None and (recorded.version, recorded.source) == (
        database.version,
        database.source,
    ):
        return None
    _refuse_older(recorded, database)
    now = clock.now()
    start, end = now - timedelta(days=1), now + zonedata.HORIZON
    offsets = zonedata.offsets(zonedata.zones(), start, end)
    with transaction.atomic(using=db):
        recorded = ZoneRules.objects.using(db).select_for_update().filter(pk=1).first()
        if recorded is not None and (recorded.version, recorded.source) == (
            database.version,
            database.source,
        ):
            return None  # another process recorded it meanwhile
        _refuse_older(recorded, database)
        changed = (
            set() if recorded is None else zonedata.changed_zones(recorded.offsets, offsets, now)
        )
        before = (
            None
            if recorded is None
            else str(zonedata.Database(recorded.version, recorded.source, recorded.location))
        )
        moved = 0
        if recorded is not None and changed:
            moved = _replan(recorded, changed, str(before), str(database), db)
        ZoneRules.objects.using(db).update_or_create(
            pk=1,
            defaults={
                "version": database.version,
                "source": database.source,
                "location": database.where,
                "start": start,
                "end": end,
                "offsets": offsets,
                "recorded_at": now,
            },
        )
    report = ZoneRulesReport(before, str(database), sorted(changed), moved)
    if recorded is None:
        logger.info(
            "Recorded the time-zone database the next runs are computed with: %s.", database
        )
    else:
        logger.warning(
            "The time-zone database changed from %s to %s: %d zone(s) changed their offsets "
            "(%s); re-planned %d cron schedule(s) in them.",
            report.before,
            report.now,
            len(report.zones),
            ", ".join(report.zones[:20]) + (", ..." if len(report.zones) > 20 else "") or "none",
            moved,
        )
    return report


def _refuse_older(recorded: ZoneRules | None, database: zonedata.Database) -> None:
    """An older database never replaces a newer one (a process of the old release during
    a rolling restart would plan the runs back to the old rules)."""
    if recorded is not None and zonedata.newer(recorded.version, database.version):
        raise OutdatedZoneRules(zonedata.outdated_message(recorded.version, database.version))


def _replan(recorded: ZoneRules, zones: set[str], before: str, after: str, db: str) -> int:
    """Move the next run of each enabled cron schedule in ``zones`` to where its local
    occurrence is under the rules in use, never at or before what it fired through; how
    many moved. A next run past the span the old offsets were recorded for cannot be read
    back to its local time: it is left, and logged.

    Every schedule whose plan reads those zones' rules (a cron in one of them, or one that
    names a calendar whose days are drawn in one) changes revision, moved or not: a claim
    of a process still on the old rules that read the row before this commits loses its
    conditional advance (and each pass of such a process then refuses: ``Claimer``)."""
    candidates = Schedule.objects.using(db).filter(
        enabled=True, kind=Schedule.Kind.CRON, timezone__in=zones, next_run_at__isnull=False
    )
    beyond = candidates.filter(next_run_at__gt=recorded.end).count()
    if beyond:
        logger.warning(
            "%d cron schedule(s) in the zones whose rules changed have a next run after %s, "
            "past the span the old offsets were recorded for: left as they are.",
            beyond,
            recorded.end.isoformat(),
        )
    replanned: list[_Replanned] = []
    within = candidates.filter(next_run_at__lte=recorded.end).select_for_update().order_by("pk")
    for current in within.iterator(chunk_size=500):
        entries = recorded.offsets.get(current.timezone)
        if entries is None or current.next_run_at is None:
            continue
        try:
            new = zonedata.replanned(
                current.timing_spec,
                current.next_run_at,
                entries,
                not_before=current.fired_through or current.last_run_at,
            )
        except TimingError as exc:
            logger.warning("Schedule %s could not be re-planned: %s", current.pk, exc)
            continue
        if new is None or new == current.next_run_at:
            continue
        replanned.append(
            _Replanned(
                current,
                {"next_run_at": new, "due_at": current.due_at_for(new)},
                {
                    "next_run_at": [changelog.as_json(current.next_run_at), changelog.as_json(new)],
                    "tz_database": [before, after],
                },
            )
        )
    reading = set(
        Schedule.objects.using(db)
        .filter(kind=Schedule.Kind.CRON, timezone__in=zones)
        .values_list("pk", flat=True)
    )
    for calendar_name in (
        Calendar.objects.using(db).filter(timezone__in=zones).values_list("name", flat=True)
    ):
        reading.update(_ids_naming(calendar_name, db))
    return _write_replanned(replanned, reading, TZDATA, db)


@dataclass(slots=True)
class _Replanned:
    """What a re-plan decided for one schedule, locked: the fields to write, and the
    change-log entry's changes when its next run moved (None: no entry)."""

    schedule: Schedule
    fields: dict[str, Any]
    logged: dict[str, Any] | None = None


def _write_replanned(
    replanned: Sequence[_Replanned], reading: Iterable[int], origin: Origin, db: str
) -> int:
    """Write what re-plans decided, in a few statements whatever their number (a calendar
    that thousands of schedules name): the fields of those that change, each row its own
    values, in one UPDATE that moves their counters as a save does (``change``); the
    revision alone of the other schedules whose plan reads what changed (``reading``), so
    that a claim that planned with the old input loses its conditional advance; the
    change-log entries, in one insert; and the index follows on commit. How many next runs
    moved."""
    written = [r for r in replanned if r.fields]
    if written:
        ids = [r.schedule.pk for r in written]
        connection = connections[db]
        names = sorted({name for r in written for name in r.fields})
        values = {
            name: per_row(
                Schedule,
                name,
                {
                    r.schedule.pk: _json_value(
                        connection, r.fields.get(name, getattr(r.schedule, name))
                    )
                    for r in written
                },
                db,
            )
            for name in names
        }
        Schedule.objects.using(db).filter(pk__in=json_ids(ids, db)).change(**values)
        sync.resync_on_commit(ids, using=db)
        for r in written:  # as the rows hold them now (the lock is still ours)
            for name, value in r.fields.items():
                setattr(r.schedule, name, value)
            r.schedule.version += 1
            r.schedule.revision += 1
    others = sorted(set(reading) - {r.schedule.pk for r in written})
    if others:
        Schedule.objects.using(db).filter(pk__in=json_ids(others, db)).update(
            revision=F("revision") + 1
        )
    logged = [(r.schedule, r.logged) for r in written if r.logged is not None]
    changelog.record_many(logged, origin, ScheduleChange.Action.REPLANNED, using=db)
    return len(logged)


def _json_value(connection: Any, value: Any) -> Any:
    """A field's value as ``per_row`` carries it: instants as the database reads them."""
    if isinstance(value, datetime):
        return json_time(connection, value)
    return value


# -- calendars of excluded days ---------------------------------------------------------------


def save_calendar(
    calendar: Calendar,
    *,
    days: Iterable[tuple[date, str]] | None = None,
    origin: Origin = PYTHON,
    scope: Scope = None,
) -> int:
    """Create or change a calendar (validated by the model), and with ``days`` replace its
    excluded days; the schedules that name it are re-planned in the same transaction: each
    next run moves to where the new days put it, recorded in its change log (action
    "re-planned"). Returns how many moved. A rename under schedules that name it is refused,
    naming those of ``scope`` (the schedules the caller may see)."""
    calendar.full_clean(validate_unique=True, validate_constraints=False)
    chosen = None if days is None else dict(sorted(days))
    if chosen is not None and len(chosen) > MAX_DAYS:
        raise ValidationError(f"A calendar holds at most {MAX_DAYS} days.")
    db = router.db_for_write(Calendar, instance=calendar)
    with transaction.atomic(using=db):
        adding = calendar._state.adding
        before: LoadedCalendar | None = None
        if not adding:  # its row, locked: two edits of one calendar take turns
            locked = Calendar.objects.using(db).select_for_update().filter(pk=calendar.pk)
            old_name = locked.values_list("name", flat=True).first()
            if old_name is not None and old_name != calendar.name:
                _check_unused(old_name, db, "renamed", scope)
            # Its days as the schedules were planned with them: a re-plan keeps what they
            # decided under them.
            before = load_calendars([calendar.name], using=db).get(calendar.name)
        calendar.stamp = new_stamp()
        calendar.save(using=db)
        if chosen is not None:
            ExcludedDay.objects.using(db).filter(calendar=calendar).delete()
            ExcludedDay.objects.using(db).bulk_create(
                ExcludedDay(calendar=calendar, day=day, name=(name or "")[:200])
                for day, name in chosen.items()
            )
        moved = 0 if adding else _replan_for_calendar(calendar.name, before, origin, db)
    if moved:
        logger.info("Calendar %r changed: re-planned %d schedule(s).", calendar.name, moved)
    return moved


def fill_calendar(
    calendar: Calendar,
    *,
    years: range | None = None,
    icalendar: bytes | str | None = None,
    origin: Origin = PYTHON,
) -> int:
    """Replace a calendar's days from its source: the public holidays of its country and
    subdivision (source "holidays", whose weekend it takes too), or the iCalendar file
    given (source "ical"), over ``years`` (default: the last one to ten ahead). Saved
    with ``save_calendar``; returns how many schedules were re-planned."""
    span = years or calendars.default_years(clock.now().date())
    days = calendars.days_from_source(calendar, years=span, icalendar=icalendar)
    return save_calendar(calendar, days=days, origin=origin)


def delete_calendar(calendar: Calendar, *, origin: Origin = PYTHON, scope: Scope = None) -> None:
    """Delete a calendar no schedule names (a ``ValidationError`` lists those of ``scope``
    that do: the schedules the caller may see). No schedule changes, so no change-log entry:
    the log line says who deleted it."""
    db = router.db_for_write(Calendar, instance=calendar)
    with transaction.atomic(using=db):
        # Locked before the check: a schedule being saved with this name holds a share of
        # the lock (``_lock_calendars``), so one of the two waits, then sees the other.
        Calendar.objects.using(db).select_for_update().filter(pk=calendar.pk).exists()
        _check_unused(calendar.name, db, "deleted", scope)
        calendar.delete(using=db)
    who = getattr(origin.user, "username", None) or "nobody signed in"
    logger.info("Calendar %r deleted through %s by %s.", calendar.name, origin.source, who)


def _lock_calendars(names: Sequence[str], db: str) -> None:
    """Hold the calendars that a schedule being saved names until its transaction ends,
    and refuse names that are gone (a ``ValidationError`` of ``calendars``): a calendar
    deleted meanwhile, after the schedule was validated. ``delete_calendar`` locks the
    calendar before it looks for the schedules that name it, so of the two, one waits and
    then sees the other. On PostgreSQL a key share: schedules saved at once do not wait
    for each other, only for a change of the calendar."""
    if not names:
        return
    connection = connections[db]
    calendars = Calendar.objects.using(db)
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(Calendar._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT name FROM {table} WHERE name = ANY(%s) FOR KEY SHARE", [list(names)]
            )
            found = {row[0] for row in cursor.fetchall()}
    else:  # SQLite's write lock is held from the transaction's start
        found = set(
            calendars.select_for_update().filter(name__in=names).values_list("name", flat=True)
        )
    missing = [name for name in names if name not in found]
    if missing:
        raise ValidationError({"calendars": f"No calendar is named {', '.join(missing)}."})


def _check_unused(name: str, db: str, done: str, scope: Scope = None) -> None:
    """A ``ValidationError`` naming the schedules that name calendar ``name``, if any: it
    cannot be deleted or renamed under them. Of those out of ``scope``, it says only that
    there are some."""
    users, others = calendar_use(name, using=db, scope=scope)
    if not users and not others:
        return
    listed = ", ".join(users[:10]) + (", ..." if len(users) > 10 else "")
    if not others:
        whom = f"{len(users)} schedule(s): {listed}"
    elif users:
        whom = f"{len(users)} schedule(s) you can see ({listed}) and by schedules you cannot see"
    else:
        whom = "schedules you cannot see"
    message = f"The calendar {name!r} is used by {whom}. Take it out of them before it is {done}."
    raise ValidationError({"name": message})


def calendar_users(name: str, *, using: str | None = None) -> list[str]:
    """The names of the schedules that name calendar ``name``, in order."""
    return calendar_use(name, using=using)[0]


def calendar_use(
    name: str, *, using: str | None = None, scope: Scope = None
) -> tuple[list[str], bool]:
    """The names of the schedules of ``scope`` (those a reader may see) that name calendar
    ``name``, in order, and whether schedules out of the scope name it too."""
    db = using or router.db_for_write(Schedule)
    ids = _ids_naming(name, db)
    rows = schedules_in(scope, db).filter(pk__in=ids)
    names = list(rows.order_by("name").values_list("name", flat=True))
    return names, len(names) < len(ids)


def _ids_naming(name: str, db: str) -> list[int]:
    """The ids of the schedules whose calendars include ``name``: a JSON containment query
    where the database has one (PostgreSQL), else read in Python."""
    rows = Schedule.objects.using(db)
    if connections[db].features.supports_json_field_contains:
        return list(rows.filter(calendars__contains=[name]).values_list("pk", flat=True))
    named = rows.exclude(calendars=[]).values_list("pk", "calendars")
    return [pk for pk, names in named.iterator(chunk_size=2000) if name in (names or ())]


def _replan_for_calendar(name: str, before: LoadedCalendar | None, origin: Origin, db: str) -> int:
    """Re-plan each schedule that names calendar ``name``, whose days were ``before``
    (``timing.replan_calendar``): what a schedule decided under the old days stays decided
    (an occurrence that ran is not run again where the new days would move it: its move is
    kept in ``decided_moves``), what it did not follows the new days (its next run moves; a
    moved occurrence the change puts in the past is late, for the catch-up policy). The
    change-log entry holds the next run before and after, and the calendar.

    Every schedule that names it changes revision, moved or not: a claim that read the
    row before this commits, and planned with the old days, then loses its conditional
    advance instead of committing that plan. The rows are read in one query, the days once,
    and written in a few statements (``_write_replanned``). How many moved."""
    ids = _ids_naming(name, db)
    if not ids or before is None:
        _write_replanned([], ids, origin, db)
        return 0
    now = clock.now()
    rows = list(
        Schedule.objects.using(db)
        .filter(pk__in=json_ids(ids, db))
        .select_for_update()
        .order_by("pk")
    )
    loaded = load_calendars({n for row in rows for n in row.calendars or ()}, using=db)
    replanned: list[_Replanned] = []
    for current in rows:
        if not current.enabled or current.next_run_at is None:
            continue
        try:
            replanned.append(_replan_one(current, name, before, loaded, now, db))
        except TimingError as exc:
            logger.warning("Schedule %s could not be re-planned: %s", current.pk, exc)
    return _write_replanned(replanned, ids, origin, db)


def _replan_one(
    current: Schedule,
    name: str,
    before: LoadedCalendar,
    loaded: dict[str, LoadedCalendar],
    now: datetime,
    db: str,
) -> _Replanned:
    """``_replan_for_calendar`` for one locked schedule: what to write (its next run under
    the new days, the mark it planned from, the moves it decided), and in the ledger what
    the change decides: late moved occurrences (fired or passed over by the catch-up
    policy), and moved ones that can no longer move (skipped)."""
    new = current.timing_with(loaded)
    old = current.timing_with({**loaded, name: before})
    assert current.next_run_at is not None
    fields: dict[str, Any] = {}
    if current.fired_through is None:
        # Written without a mark (a bulk path, or before migration 0009): decided through
        # now, or through just before its next run when that is due (a backlog stays).
        current.passed_over(now)
        fields["fired_through"] = current.fired_through
    mark = current.fired_through
    assert mark is not None
    plan = timing.replan_calendar(old, new, fired_through=mark, now=now, anchor=current.next_run_at)
    moves = timing.stored_moves(plan.decided)
    if moves != current.decided_moves:
        fields["decided_moves"] = moves
    skipped = [(m.at, timing.SkipReason.CALENDAR, timing.calendar_note(m)) for m in plan.excluded]
    if plan.late:
        policy = current.catch_up_policy
        fire = timing.late_to_fire(policy, plan.late, now)
        note = f"Moved by a change of calendar {name!r} to before now: late."
        ledger.queue(current, fire, trigger=Run.Trigger.SCHEDULE, note=note, now=now,
                     worker_id="calendar", using=db)  # fmt: skip
        passed = f"{note} The catch-up policy ({policy.mode}) passed it over."
        if plan.late_before is not None:
            passed += (
                f" Earlier ones, back to {plan.late_before:%Y-%m-%d %H:%M:%S} UTC, were "
                "passed over too."
            )
        fired = set(fire)
        skipped += [(at, timing.SkipReason.MISSED, passed) for at in plan.late if at not in fired]
        if fire:
            _wake_after_commit(db, current.pk)
    if skipped:
        ledger.record_skipped(current, skipped, now=now, worker_id="calendar", using=db)
    logged = None
    if plan.next_run_at != current.next_run_at:
        fields["next_run_at"] = plan.next_run_at
        fields["due_at"] = current.due_at_for(plan.next_run_at)
        logged = {
            "next_run_at": [
                changelog.as_json(current.next_run_at),
                changelog.as_json(plan.next_run_at),
            ],
            "calendar": name,
        }
    return _Replanned(current, fields, logged)


# -- schedules declared in code -------------------------------------------------------------


def sync_declared(*, dry_run: bool = False) -> declared.Plan:
    """Make the table match the schedules declared in code (``declared``): create, update,
    resume and pause, each in a transaction of its own, recorded with the source "code".
    Returns the plan carried out (``dry_run``: only computed); its problems (an invalid
    declaration, a name clash) are logged as errors and left out."""
    log = declared.logger
    result = declared.plan()
    for problem in result.problems:
        log.error("Schedules in code: %s", problem)
    if dry_run:
        return result
    for schedule in result.create:
        try:
            create(schedule, origin=CODE)
        except IntegrityError:  # another process created it first, from the same code
            log.info("Schedule %r was created by another process meanwhile.", schedule.name)
            continue
        log.info("Created schedule %r, declared in %s.", schedule.name, schedule.declared_in)
    owned = declared.definition_fields()
    for row, schedule, diff in result.change:
        changes = {name: getattr(schedule, name) for name in owned if name in diff}
        where = schedule.declared_in
        if _synced(result, row, update, row, changes, origin=CODE, declared_in=where):
            log.info("Updated schedule %r, declared in %s.", row.name, schedule.declared_in)
    for row in result.resume:
        if _synced(result, row, resume, row, origin=CODE):
            log.info("Resumed schedule %r: it is declared in code again.", row.name)
    for row in result.disable:
        where = row.declared_in
        if _synced(result, row, _leave_code, row):
            log.warning(
                "Paused schedule %r: no code declares it any more (it was in %s). It is kept "
                "with its runs, an ordinary schedule now: resume it, or delete it by hand if "
                "it is gone for good.",
                row.name,
                where,
            )
    for row in result.release:
        where = row.declared_in
        if _synced(result, row, _leave_code, row):
            log.info(
                "Schedule %r is no longer declared in code (it was in %s); it stays paused, "
                "an ordinary schedule now.",
                row.name,
                where,
            )
    return result


def _leave_code(row: Schedule) -> None:
    """A schedule the code no longer declares leaves it, once, in one transaction: it is
    no longer marked as declared (an ordinary schedule, which later syncs leave alone unless
    the code declares its name anew), and paused with a note saying so if it runs. A row
    that left already (another process synced first) is left as it is."""
    note = declared.REMOVED_NOTE.format(where=row.declared_in)
    with transaction.atomic(using=_db(row)):
        if update(row, {}, origin=CODE, declared_in="") and row.enabled:
            pause(row, note, origin=CODE)


def _synced(result: declared.Plan, row: Schedule, service: Any, *args: Any, **kwargs: Any) -> bool:
    """One step of the sync; a schedule deleted or edited meanwhile is a problem of the
    plan, logged, and the sync goes on with the others."""
    try:
        service(*args, **kwargs)
    except ServiceError as exc:
        problem = f"The schedule {row.name!r} could not be synced: {exc}"
        result.problems.append(problem)
        declared.logger.error("Schedules in code: %s", problem)
        return False
    return True


# -- helpers -------------------------------------------------------------------------------


def _db(schedule: Schedule) -> str:
    return router.db_for_write(type(schedule), instance=schedule)


def _locked(schedule: Schedule, db: str) -> Schedule:
    """The schedule's row as it is now, locked until the transaction ends."""
    if schedule.pk is None:
        raise ScheduleDeleted("Save the schedule first.")
    try:
        return type(schedule).objects.using(db).select_for_update().get(pk=schedule.pk)
    except Schedule.DoesNotExist:
        raise ScheduleDeleted("The schedule was deleted.") from None


def _check_not_declared(
    current: Schedule, changes: Mapping[str, Any] | None, origin: Origin
) -> None:
    """Refuse to change the definition of a schedule the code declares (``changes``: the
    settings changed; None: a delete), unless the sync of the declarations asks."""
    if not current.declared_in or origin.source == ScheduleChange.Source.CODE:
        return
    if changes is not None and not set(changes) - set(declared.PAUSE_STATE):
        return  # its pause state: anyone's
    if current.name not in declared.declared_names():
        return  # no longer declared: paused by the sync, and an ordinary schedule now
    what = "deleted" if changes is None else f"changed ({', '.join(sorted(changes))})"
    raise DeclaredInCode(
        f"The schedule {current.name!r} is declared in code ({current.declared_in}) and "
        f"cannot be {what} here: change it in the code. Pause, resume and run now work here."
    )


def _check_version(current: Schedule, expected: int | None) -> None:
    if expected is not None and current.version != expected:
        raise VersionConflict(
            f"The schedule changed since you read it: it is at version {current.version}, "
            f"not {expected}. Read it again and apply your change to it.",
            current=current.version,
        )


def _adopt(schedule: Schedule, current: Schedule, written: Sequence[str]) -> None:
    """The caller's instance takes what was written to the row, as saved."""
    if schedule is not current:
        schedule.take_saved(current, written)


def _record(
    schedule: Schedule, origin: Origin, action: str, changes: dict[str, Any] | None, db: str
) -> None:
    changelog.record(schedule, origin, action, changes, using=db)


def _record_deleted(schedules: Iterable[Schedule], origin: Origin, db: str) -> None:
    for schedule in schedules:
        changes = changelog.diff(changelog.snapshot(schedule), {})
        _record(schedule, origin, ScheduleChange.Action.DELETED, changes, db)


def _resume_moments(current: Schedule, now: datetime) -> list[timing.Moment]:
    """Move a schedule being resumed past ``now`` on its grid; the occurrences passed over
    (what it fired through follows)."""
    passed, current.next_run_at = current.resume_plan(now)
    current.due_at = current.due_at_for(current.next_run_at)
    current.passed_over(now)
    return passed


@dataclass(frozen=True, slots=True)
class _Edit:
    fields: list[str]  # what the update writes
    passed: list[timing.Moment]  # a resume's paused period, recorded as skipped


def _decide_edit(current: Schedule, asked: set[str], now: datetime) -> _Edit:
    """What an edit of the settings ``asked`` implies at ``now``, set on ``current``: changed
    timing moves the next run to its first occurrence after now; clearing ``enabled``
    pauses (the next run is kept); setting it again resumes as ``resume`` does (past now on
    the same grid, the paused period passed over), or, with the timing changed too, from
    the new timing's first occurrence."""
    fields = [*Schedule.SETTINGS_FIELDS, "declared_in", "paused_at"]
    retimed = bool(asked & (set(Schedule.TIMING_FIELDS) - {"enabled"}))
    passed: list[timing.Moment] = []
    if "enabled" in asked and not current.enabled:
        current.paused_at = now
    elif "enabled" in asked:
        current.paused_at, current.pause_note = None, ""
        if not retimed:
            passed = _resume_moments(current, now)
            fields += ["next_run_at", "due_at", "fired_through"]
    if retimed:
        current.next_run_at = current.first_run_at(now)
        current.due_at = current.due_at_for(current.next_run_at)
        current.passed_over(now)
        fields += ["next_run_at", "due_at", "fired_through"]
    return _Edit(fields, passed)


def _record_paused_over(
    schedule: Schedule, passed: list[timing.Moment], pause_note: str, db: str
) -> None:
    """The occurrences of a paused period, recorded as skipped ("paused", or the DST
    policy's own reason for a local time that does not exist)."""
    if not passed:
        return
    note = f"Paused: {pause_note}" if pause_note else "Paused."
    spec = schedule.timing_spec
    ledger.record_skipped(
        schedule,
        [
            (m.at, timing.SkipReason.DST, timing.dst_note(spec, m))
            if m.skipped
            else (m.at, timing.SkipReason.PAUSED, note)
            for m in passed
        ],
        now=clock.now(),
        worker_id="resume",
        using=db,
    )


def _occurrence_at(schedule: Schedule, at: datetime, pruned_through: datetime | None) -> bool:
    """Whether ``at`` is the nominal time of an occurrence whose key a run now must not
    take: one the schedule has yet to reach (its next run or later: the claim that reaches
    it records it under its key), or one it passed whose run retention may have deleted
    (at or before ``pruned_through``). The others it passed are in the ledger, fired or
    skipped, where the insert of the run finds them."""
    nominal = schedule.next_run_at
    ahead = nominal is not None and at >= timing.truncate_ms(nominal)
    pruned = pruned_through is not None and at <= pruned_through
    if not (ahead or pruned):
        return False
    anchor = timing.truncate_ms(nominal or schedule.fired_through or at)
    try:
        return timing.is_moment(schedule.timing_spec, at, anchor=anchor)
    except TimingError:  # a row a bulk path wrote: the claim cannot evaluate it either
        return at == nominal


def _replace_next_run(schedule: Schedule, replaced_by: datetime, now: datetime, db: str) -> None:
    """Move the schedule past its next occurrence, recorded as replaced by a run now."""
    nominal = schedule.next_run_at
    if not schedule.enabled or nominal is None:
        return
    spec = schedule.timing_spec
    following = next(timing.occurrences(spec, nominal, anchor=nominal, include_skipped=True), None)
    note = f"Replaced by the run now at {replaced_by:%Y-%m-%d %H:%M:%S.%f}"[:-3] + " UTC."
    ledger.record_skipped(
        schedule,
        [(nominal, timing.SkipReason.REPLACED, note)],
        now=now,
        worker_id="run_now",
        using=db,
    )
    schedule.next_run_at = following.at if following else None
    schedule.due_at = schedule.due_at_for(schedule.next_run_at)
    schedule.advance_mark(nominal)  # decided: replaced
    schedule.save(using=db, update_fields=["next_run_at", "due_at", "fired_through"])


def _occurrences_between(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """The occurrences of the schedule's timing in [start, end], at most MAX_BACKFILL_RUNS.

    The walk steps over local times the DST policy skips (and days a calendar excludes)
    one by one, so that the range bounds it (and the same limit caps them): it never looks
    past ``end`` for an occurrence, which for a cron whose matches are all skipped meant
    the year 9999."""
    limit = app_settings.MAX_BACKFILL_RUNS
    anchor = schedule.next_run_at or start
    moments: list[datetime] = []
    skipped = 0
    for moment in timing.occurrences(
        schedule.timing_spec, start - timing.ONE_MS, anchor=anchor, include_skipped=True
    ):
        if moment.at > end:
            break
        if moment.skipped:
            skipped += 1
            if skipped > limit:
                raise ServiceError(
                    f"The range holds more than {limit:,} skipped local times (that do not "
                    "exist in the schedule's zone, or on days its calendars exclude; "
                    "SCHEDULINATOR['MAX_BACKFILL_RUNS']); backfill a shorter range at a time."
                )
            continue
        moments.append(moment.at)
        if len(moments) > limit:
            raise ServiceError(
                f"The range holds more than {limit:,} occurrences "
                "(SCHEDULINATOR['MAX_BACKFILL_RUNS']); backfill a shorter range at a time."
            )
    return moments


def _check_runnable(schedule: Schedule) -> None:
    if schedule.pk is None:
        raise ScheduleDeleted("Save the schedule first.")
    if schedule.task not in registry:
        raise ServiceError(
            f"{schedule.task!r} is not a registered task here, so it cannot be run. Register "
            "it with @django_schedulinator.task."
        )


def _wake_after_commit(db: str, schedule_id: int) -> None:
    def wake() -> None:
        try:
            get_index().wake([schedule_id])  # its shard's schedulers' next claim
        except Exception:  # the runs are committed; a periodic take-over finds them anyway
            logger.warning(
                "Could not wake the schedulers; the queued runs start within a quarter of a lease.",
                exc_info=True,
            )

    transaction.on_commit(wake, using=db)
