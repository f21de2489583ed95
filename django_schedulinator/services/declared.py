"""The sync of the schedules declared in code (``django_schedulinator.declared``) with the
table: each declaration validated (``candidate``), the plan of what differs (``plan``), and
its changes made through the schedules' services, with the source "code".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from django_schedulinator import declared
from django_schedulinator.declared import REMOVED_PREFIX, Declaration, Declared, definition_fields
from django_schedulinator.errors import ServiceError, validation_message
from django_schedulinator.index import clock
from django_schedulinator.models import Schedule, ScheduleChange
from django_schedulinator.services import changelog
from django_schedulinator.services.changelog import Origin
from django_schedulinator.services.schedules import create, pause, resume, update
from django_schedulinator.services.validation import validate
from django_schedulinator.services.writes import _db


def candidate(declaration: Declaration) -> Schedule:
    """The schedule a declaration stands for, validated (``ValidationError`` or
    ``ImproperlyConfigured`` says what is wrong)."""
    schedule = Schedule(
        name=declaration.name, declared_in=declaration.declared_in, **declaration.fields()
    )
    # Validated as a definition, not as a new row: a declared one-off stays valid after its
    # time has passed (the sync does not create one whose time has passed).
    schedule._state.adding = False
    validate(schedule)
    schedule._state.adding = True
    return schedule


def validated_declarations(found: Declared | None = None) -> tuple[dict[str, Schedule], list[str]]:
    """The schedules declared (``found``, or what ``declared()`` finds), by name, each
    validated (``validation.validate``); and the problems of those left out (the system
    check reports them as W030)."""
    usable, problems, _names = found or declared.declared()
    problems = list(problems)
    wanted: dict[str, Schedule] = {}
    for declaration in usable:
        try:
            wanted[declaration.name] = candidate(declaration)
        except ImproperlyConfigured as exc:
            problems.append(str(exc))
        except ValidationError as exc:
            problems.append(f"{declaration} is not valid: {validation_message(exc)}")
    return wanted, problems


@dataclass
class Plan:
    """What a sync does (or, dry, would do); ``problems`` were left out and need a person."""

    create: list[Schedule] = field(default_factory=list)
    # The row, the declared schedule, and {field: [now, declared]}.
    change: list[tuple[Schedule, Schedule, dict[str, list[Any]]]] = field(default_factory=list)
    resume: list[Schedule] = field(default_factory=list)
    # Declared rows the code no longer declares: they leave the code (``declared_in``
    # cleared), paused if they run (``disable``), or kept paused as they are (``release``).
    disable: list[Schedule] = field(default_factory=list)
    release: list[Schedule] = field(default_factory=list)
    # One-offs whose time passed before they were ever created: nothing to run.
    passed: list[Schedule] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.create or self.change or self.resume or self.disable or self.release)

    def lines(self) -> list[str]:
        """What the plan does, one line each, for a log or the command's output."""
        lines = [f"create {s.name!r} ({s.declared_in})" for s in self.create]
        for row, _, diff in self.change:
            changes = ", ".join(f"{name} {a!r} -> {b!r}" for name, (a, b) in diff.items())
            lines.append(f"change {row.name!r}: {changes}")
        lines += [f"resume {s.name!r}: declared again" for s in self.resume]
        lines += [
            f"pause {s.name!r}: no longer declared (it was in {s.declared_in})"
            for s in self.disable
        ]
        lines += [
            f"keep {s.name!r} paused: no longer declared (it was in {s.declared_in})"
            for s in self.release
        ]
        lines += [f"skip {s.name!r}: a one-off whose time has passed" for s in self.passed]
        return lines


def plan() -> Plan:
    """Compare the declarations with the table (read only)."""

    result = Plan()
    found = declared.declared()
    wanted, result.problems = validated_declarations(found)
    rows = {
        row.name: row
        for row in Schedule.objects.filter(Q(name__in=list(wanted)) | ~Q(declared_in=""))
    }
    owned = definition_fields()
    now = clock.now()
    for name, schedule in wanted.items():
        row = rows.get(name)
        if row is None:
            if schedule.kind == Schedule.Kind.ONCE and (schedule.run_at or now) <= now:
                result.passed.append(schedule)
            else:
                result.create.append(schedule)
            continue
        if not row.declared_in and not _created_by_code(row):
            result.problems.append(
                f"The schedule {name!r} declared in {schedule.declared_in} has the name of a "
                f"schedule {_made_by(row)} (id {row.pk}): rename one of them (or delete the "
                "other) and sync again."
            )
            continue
        stored, declared_as = changelog.snapshot(row), changelog.snapshot(schedule)
        diff = {f: [stored[f], declared_as[f]] for f in owned if stored[f] != declared_as[f]}
        if row.declared_in != schedule.declared_in:
            diff["declared_in"] = [row.declared_in, schedule.declared_in]
        if diff:
            result.change.append((row, schedule, diff))
        if not row.enabled and row.pause_note.startswith(REMOVED_PREFIX):
            result.resume.append(row)
    # Gone only when the code no longer names it: a broken declaration is a problem above.
    # Once gone, the row is no longer declared: the next sync does not pause it again.
    gone = [row for name, row in rows.items() if row.declared_in and name not in found.names]
    result.disable = [row for row in gone if row.enabled]
    result.release = [row for row in gone if not row.enabled]
    return result


def _created_by_code(row: Schedule) -> bool:
    """Whether the sync created this row, which is not declared now: it left the code,
    and a declaration of its name brings it back (one made by hand is a conflict)."""
    return ScheduleChange.objects.filter(
        schedule=row, action=ScheduleChange.Action.CREATED, source=ScheduleChange.Source.CODE
    ).exists()


def _made_by(row: Schedule) -> str:
    """How a schedule made by hand came to be, from its change log: "made in the admin by
    alice on 2026-11-25"."""
    created = (
        ScheduleChange.objects.filter(schedule=row, action=ScheduleChange.Action.CREATED)
        .order_by("pk")
        .first()
    )
    if created is None:
        return "made outside code"
    by = f" by {created.actor_name}" if created.actor_name else ""
    return f"made through {created.get_source_display()}{by} on {created.at:%Y-%m-%d}"


# The sync of the schedules declared in code.
CODE = Origin(None, ScheduleChange.Source.CODE)


def sync_declared(*, dry_run: bool = False) -> Plan:
    """Make the table match the schedules declared in code (``declared``): create, update,
    resume and pause, each in a transaction of its own, recorded with the source "code".
    Returns the plan carried out (``dry_run``: only computed); its problems (an invalid
    declaration, a name clash) are logged as errors and left out."""
    log = declared.logger
    result = plan()
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


def _synced(result: Plan, row: Schedule, service: Any, *args: Any, **kwargs: Any) -> bool:
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
