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

The runs are written by ``services.ledger`` (the run ledger: every write of a ``Run``);
failures in a row and the auto-pause they lead to by ``services.streaks``; the change log by
``services.changelog``; every rule of a schedule is checked by ``services.validation``
before a write. The model itself (``models.Schedule``) only
validates and writes: each function here decides the transition (a first run,
re-timing, pause, resume, a next run replaced) at the "now" it takes from the schedulers'
clock, sets the fields, and saves them with ``update_fields``, which moves the counters.

The functions live in a module by subject (``services.schedules``: create, update,
delete, pause, resume, resync; ``services.runs``: the scheduler's advance and its marks of
missed runs, run now, backfill; ``services.calendars``; ``services.zones``: re-plans after
a change of the time-zone rules; ``services.declared``: the sync of the schedules declared
in code), with what they share in ``services.writes`` and ``services.replans``; the
package is where they are called from: ``services.create(...)``.
"""

from __future__ import annotations

from django_schedulinator.errors import ServiceError as ServiceError
from django_schedulinator.errors import VersionConflict as VersionConflict
from django_schedulinator.services.calendars import (
    calendar_use,
    calendar_users,
    delete_calendar,
    fill_calendar,
    save_calendar,
)
from django_schedulinator.services.changelog import Origin
from django_schedulinator.services.declared import sync_declared, validated_declarations
from django_schedulinator.services.runs import (
    BackfillReport,
    advance,
    backfill,
    mark_missed,
    mark_not_fired,
    run_now,
)
from django_schedulinator.services.schedules import (
    create,
    delete,
    delete_many,
    lock_for_edit,
    pause,
    resume,
    resync,
    update,
)
from django_schedulinator.services.validation import outside_errors, validate
from django_schedulinator.services.writes import PYTHON
from django_schedulinator.services.zones import ZoneRulesReport, replan_for_zone_rules

# The errors are documented with the services (docs/python-api.md), as before they moved to
# errors; they are not the package's own names.
__all__ = [
    "PYTHON",
    "BackfillReport",
    "Origin",
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
    "outside_errors",
    "pause",
    "replan_for_zone_rules",
    "resume",
    "resync",
    "run_now",
    "save_calendar",
    "sync_declared",
    "update",
    "validate",
    "validated_declarations",
]
