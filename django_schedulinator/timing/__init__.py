"""When does a schedule fire: every rule lives in this package, and nothing here touches the
database or Redis, so each rule can be read and tested on its own. Its calendars' excluded
days come in as days (``days.DayCalendar.of``), never as rows.

Instants are timezone-aware UTC datetimes truncated to whole milliseconds, the unit of the
Redis index's scores, so the row and the index always compare equal.

The modules, in the order a reader meets the rules (each imports only those above it):

- ``vocabulary``: the words of the rules, each an enumeration (``Kind``, ``SolarEvent``,
  ``DstGap``, ``DstFold``, ``DayRule``, ``CalendarRule``, ``CatchUpMode``, ``Overlap``,
  ``SkipReason``, ``NotifyEvent``), from which the models' choices and the settings'
  values are built.
- ``instants``: instants, epoch milliseconds, and zones (``get_zone``).
- ``solar``: **solar** schedules: an event of the sun (``SolarEvent``: dawn, sunrise, solar
  noon, sunset, dusk) at a latitude and a longitude, plus an offset, computed by astral;
  days without the event (the polar night, the midnight sun) are passed over, looking at
  most ``SOLAR_REACH_DAYS`` ahead.
- ``cron``: cron expressions, read and validated; the **day rule** (``either`` day field
  may match, cron's rule, or ``both`` must, Celery's).
- ``moments``: a point of the timeline (``Moment``), and how a DST change or an excluded day
  touched it.
- ``walks``: **cron** on the *local wall clock* of the schedule's IANA zone, each matching
  wall time turned into a UTC instant by the schedule's DST policy: a wall time that does
  not exist is **shifted** forward by the gap, or **skipped**; one that occurs twice fires
  at the **first** instant, the **second**, or **both** (the defaults, shift and first,
  are PEP 495's ``fold=0``).
- ``days``: the excluded days of a schedule's calendars, as spans of UTC time.
- ``plain``: the timeline without calendars: **intervals** on a grid (``anchor + k *
  interval``), **one-offs** (``run_at``), crons, solar events, within **the window** (``start_at``,
  ``end_at``, to the millisecond).
- ``calendars``: an occurrence on an excluded day is **skipped** (recorded once a span,
  with the reason "calendar") or **moved** to the same local time on the next business day.
- ``spec``: the timing of a schedule (``Timing``), its validation, and its timeline
  (``following``, ``preceding``, ``occurrences``, ``first_run_at``).
- ``replan``: what a change of a calendar's days does to a schedule.
- ``jitter``: an occurrence's delay, derived from its key: its *due time*; its *nominal
  time* (its identity, its key) does not move.
- ``describe``: previews, notes and descriptions, for people.
- ``catchup``: which due occurrences fire when a scheduler comes to a schedule late
  (``plan_due``): the latest one (default), none more than the grace late (``skip``), or
  all within a window, capped (``all``); each one that does not fire is a ``Skip`` with its
  reason, for the ledger.
- ``zonedata``: the time-zone database in use, the offsets it gives each zone, and where a
  schedule's next run goes when the rules of its zone change (imported on its own:
  ``from django_schedulinator.timing import zonedata``).

The names below are the package's surface: ``from django_schedulinator import timing`` and
``timing.plan_due(...)``. Inside the app, a module imports a name from the module that
defines it.
"""

from __future__ import annotations

from django_schedulinator.timing.calendars import MAX_MOVE_DAYS, MOVE_REACH, calendar_note
from django_schedulinator.timing.catchup import CatchUp, DuePlan, Skip, late_to_fire, plan_due
from django_schedulinator.timing.cron import (
    CRON_ALIASES,
    CRON_SEPARATORS,
    MAX_CRON_EXPRESSIONS,
    MAX_CRON_LENGTH,
    MAX_CRON_TEXT_LENGTH,
    both_days_restricted,
    cron_expressions,
    cron_field_values,
    normalize_cron,
)
from django_schedulinator.timing.days import DayCalendar, ExcludedSpan, decided_moves, stored_moves
from django_schedulinator.timing.describe import (
    DAY_RULE_TEXT,
    PreviewItem,
    describe,
    dst_note,
    preview,
)
from django_schedulinator.timing.instants import (
    EPOCH,
    LAST_INSTANT,
    ONE_DAY,
    ONE_MS,
    ONE_SECOND,
    ceil_ms,
    from_ms,
    get_zone,
    to_ms,
    truncate_ms,
)
from django_schedulinator.timing.jitter import due_time, jitter_delay, stored_due_at
from django_schedulinator.timing.moments import (
    CAL_MOVED,
    CAL_SKIPPED,
    DST_FIRST,
    DST_SECOND,
    DST_SHIFT,
    DST_SKIP,
    Moment,
)
from django_schedulinator.timing.plain import MAX_SKIPPED_SPAN, MIN_INTERVAL
from django_schedulinator.timing.replan import LATE_RECORDED, Replan, replan_calendar
from django_schedulinator.timing.solar import (
    MAX_SOLAR_OFFSET,
    SOLAR_REACH_DAYS,
    describe_solar,
    event_on,
    solar_next,
    solar_prev,
)
from django_schedulinator.timing.spec import (
    MAX_JITTER,
    Timing,
    TimingFields,
    first_run_at,
    following,
    is_moment,
    moment_at,
    occurrences,
    occurrences_before,
    preceding,
)
from django_schedulinator.timing.vocabulary import (
    CalendarRule,
    CatchUpMode,
    DayRule,
    DstFold,
    DstGap,
    Kind,
    NotifyEvent,
    Overlap,
    SkipReason,
    SolarEvent,
)
from django_schedulinator.timing.walks import MAX_WALL_STEPS, OFFSET_SPAN

__all__ = [
    "CAL_MOVED",
    "CAL_SKIPPED",
    "CRON_ALIASES",
    "CRON_SEPARATORS",
    "DAY_RULE_TEXT",
    "DST_FIRST",
    "DST_SECOND",
    "DST_SHIFT",
    "DST_SKIP",
    "EPOCH",
    "LAST_INSTANT",
    "LATE_RECORDED",
    "MAX_CRON_EXPRESSIONS",
    "MAX_CRON_LENGTH",
    "MAX_CRON_TEXT_LENGTH",
    "MAX_JITTER",
    "MAX_MOVE_DAYS",
    "MAX_SKIPPED_SPAN",
    "MAX_SOLAR_OFFSET",
    "MAX_WALL_STEPS",
    "MIN_INTERVAL",
    "MOVE_REACH",
    "OFFSET_SPAN",
    "ONE_DAY",
    "ONE_MS",
    "ONE_SECOND",
    "SOLAR_REACH_DAYS",
    "CalendarRule",
    "CatchUp",
    "CatchUpMode",
    "DayCalendar",
    "DayRule",
    "DstFold",
    "DstGap",
    "DuePlan",
    "ExcludedSpan",
    "Kind",
    "Moment",
    "NotifyEvent",
    "Overlap",
    "PreviewItem",
    "Replan",
    "Skip",
    "SkipReason",
    "SolarEvent",
    "Timing",
    "TimingFields",
    "both_days_restricted",
    "calendar_note",
    "ceil_ms",
    "cron_expressions",
    "cron_field_values",
    "decided_moves",
    "describe",
    "describe_solar",
    "dst_note",
    "due_time",
    "event_on",
    "first_run_at",
    "following",
    "from_ms",
    "get_zone",
    "is_moment",
    "jitter_delay",
    "late_to_fire",
    "moment_at",
    "normalize_cron",
    "occurrences",
    "occurrences_before",
    "plan_due",
    "preceding",
    "preview",
    "replan_calendar",
    "solar_next",
    "solar_prev",
    "stored_due_at",
    "stored_moves",
    "to_ms",
    "truncate_ms",
]
