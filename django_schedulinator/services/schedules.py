"""A schedule's own life: create, update, delete (one or many), pause, resume, and a resync
of its index entry; the checks and decisions they share (a schedule the code declares, what
an edit implies, the occurrences of a paused period).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import router, transaction

from django_schedulinator import declared, signals, timing
from django_schedulinator.errors import DeclaredInCode, ServiceError
from django_schedulinator.index import clock, sync
from django_schedulinator.index.due import ApplyResult
from django_schedulinator.models import Schedule, ScheduleChange
from django_schedulinator.services import changelog, ledger
from django_schedulinator.services.calendars import _lock_calendars
from django_schedulinator.services.changelog import Origin
from django_schedulinator.services.validation import validate
from django_schedulinator.services.writes import (
    PYTHON,
    WRITTEN_BY_ACTIONS,
    WRITTEN_BY_UPDATE,
    _adopt,
    _check_version,
    _db,
    _locked,
    _record,
)

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


# -- helpers -------------------------------------------------------------------------------


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
