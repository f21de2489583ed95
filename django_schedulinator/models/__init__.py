"""The app's rows: schedules (the truth of when each fires), runs (the ledger of
occurrences), calendars of excluded days, and what is kept beside them; with what belongs to
the rows below every other layer: their querysets, statuses, field validators, the
database's clock, the occurrence key and the readers' scopes.

Django finds the models here; every name below is importable from
``django_schedulinator.models`` as before the package was split.
"""

from django_schedulinator.models.calendar import (
    Calendar,
    ExcludedDay,
    day_calendar,
    default_timezone,
    default_weekend,
    load_calendars,
    new_stamp,
)
from django_schedulinator.models.records import (
    AlertStreak,
    Notification,
    ScheduleChange,
    ZoneRules,
)
from django_schedulinator.models.run import PrunedRuns, Run
from django_schedulinator.models.schedule import (
    DEFAULT_DISPATCHER,
    Schedule,
    SchedulerOperations,
    alert_time,
    catch_up_policy,
)

__all__ = [
    "DEFAULT_DISPATCHER",
    "AlertStreak",
    "Calendar",
    "ExcludedDay",
    "Notification",
    "PrunedRuns",
    "Run",
    "Schedule",
    "ScheduleChange",
    "SchedulerOperations",
    "ZoneRules",
    "alert_time",
    "catch_up_policy",
    "day_calendar",
    "default_timezone",
    "default_weekend",
    "load_calendars",
    "new_stamp",
]
