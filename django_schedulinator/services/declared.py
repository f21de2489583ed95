"""The sync of the schedules declared in code (``django_schedulinator.declared``) with the
table, through the schedules' services, with the source "code".
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from django_schedulinator import declared
from django_schedulinator.changelog import Origin
from django_schedulinator.errors import ServiceError
from django_schedulinator.models import Schedule, ScheduleChange
from django_schedulinator.services.schedules import create, pause, resume, update
from django_schedulinator.services.writes import _db

# The sync of the schedules declared in code.
CODE = Origin(None, ScheduleChange.Source.CODE)


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
