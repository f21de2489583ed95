"""The words of the timing rules: the values a schedule's fields, the settings and the
ledger hold for each of its choices.
"""

from __future__ import annotations

CRON = "cron"
INTERVAL = "interval"
ONCE = "once"

# What to do with a local time that does not exist (the clocks spring forward over it).
GAP_SHIFT = "shift"
GAP_SKIP = "skip"
# What to do with a local time that occurs twice (the clocks fall back over it).
FOLD_FIRST = "first"
FOLD_SECOND = "second"
FOLD_BOTH = "both"
# Which days a cron matches when both day fields are restricted.
DAYS_EITHER = "either"  # the day of the month or the day of the week (cron's rule)
DAYS_BOTH = "both"  # the day of the month and the day of the week (Celery's)

# Catch-up: which of several due occurrences fire when a schedule is claimed late.
CATCH_UP_SKIP = "skip"
CATCH_UP_LATEST = "latest"
CATCH_UP_ALL = "all"

# Why an occurrence did not fire (stored on its skipped Run).
MISSED = "missed"  # the catch-up policy passed it over
EXPIRED = "expired"  # a one-off that was too late for the catch-up policy
DST_SKIPPED = "dst"  # its local time does not exist and the DST policy skips it
OVERLAP = "overlap"  # the previous run was still running
PAUSED = "paused"  # the schedule was paused at the time
REPLACED = "replaced"  # a "run now" took its place
CALENDAR = "calendar"  # its day is excluded by one of the schedule's calendars

# What a schedule does with an occurrence on an excluded day.
CALENDAR_SKIP = "skip"
CALENDAR_MOVE = "next_business_day"
