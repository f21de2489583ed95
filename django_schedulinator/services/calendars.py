"""Calendars of excluded days: save (with its days), fill from a source, delete, the
schedules that name one; and the re-plan of those schedules when its days change, in the
same transaction. The lock a schedule being saved takes on the calendars it names is here
too (``_lock_calendars``), beside the delete it waits for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connections, router, transaction

from django_schedulinator import timing
from django_schedulinator.errors import TimingError
from django_schedulinator.importers import days as calendars
from django_schedulinator.index import clock
from django_schedulinator.models import (
    Calendar,
    ExcludedDay,
    Run,
    Schedule,
    load_calendars,
    new_stamp,
)
from django_schedulinator.models.batches import json_ids
from django_schedulinator.models.scopes import Scope, schedules_in
from django_schedulinator.models.validators import MAX_DAYS
from django_schedulinator.services import changelog, ledger
from django_schedulinator.services.changelog import Origin
from django_schedulinator.services.replans import _ids_naming, _Replanned, _write_replanned
from django_schedulinator.services.writes import PYTHON, _wake_after_commit, logger
from django_schedulinator.timing.days import LoadedCalendar


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
