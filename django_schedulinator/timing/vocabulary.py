"""The vocabularies of a schedule's rules, each spelled once, as an enumeration: the kinds
of timing, the events of the sun, the DST policies, the day rule, what a calendar's
excluded day does, the catch-up modes, the overlap policies, why an occurrence did not
fire, and what a notifier may be told of.

The models' choices (``Schedule.Kind``, ``Schedule.SolarEvent``, ``Schedule.CatchUp``,
``Run.SkipReason``, ...) are built from these, with their labels, and so are the values
the settings accept (``conf.CATCH_UP_MODES``, ``conf.NOTIFY_EVENTS``). A member is a
``str`` (``Kind.CRON == "cron"``): rows, settings and JSON hold the plain values, and a
value read from any of them compares equal to its member.

The notify events are not about time, but they are a vocabulary the settings check: here
they sit below the settings (``conf``) with the others.
"""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """What kind of timing a schedule has."""

    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"
    SOLAR = "solar"  # an event of the sun at a place: sunrise, sunset, dawn, dusk, noon


class SolarEvent(StrEnum):
    """Which event of the sun a solar schedule fires at: Celery's names (``solar(...)``,
    django-celery-beat's ``SolarSchedule``), so an import keeps them as they are. Dawn and
    dusk are the sun's centre 6 (civil), 12 (nautical) or 18 (astronomical) degrees below
    the horizon; sunrise and sunset its upper edge on the horizon, refraction included."""

    DAWN_ASTRONOMICAL = "dawn_astronomical"
    DAWN_NAUTICAL = "dawn_nautical"
    DAWN_CIVIL = "dawn_civil"
    SUNRISE = "sunrise"
    SOLAR_NOON = "solar_noon"
    SUNSET = "sunset"
    DUSK_CIVIL = "dusk_civil"
    DUSK_NAUTICAL = "dusk_nautical"
    DUSK_ASTRONOMICAL = "dusk_astronomical"


class DstGap(StrEnum):
    """What to do with a local time that does not exist (the clocks spring forward over it)."""

    SHIFT = "shift"  # forward by the length of the gap
    SKIP = "skip"


class DstFold(StrEnum):
    """What to do with a local time that occurs twice (the clocks fall back over it)."""

    FIRST = "first"
    SECOND = "second"
    BOTH = "both"


class DayRule(StrEnum):
    """Which days a cron matches when both day fields are restricted."""

    EITHER = "either"  # the day of the month or the day of the week (cron's rule)
    BOTH = "both"  # the day of the month and the day of the week (Celery's)


class CalendarRule(StrEnum):
    """What a schedule does with an occurrence on an excluded day."""

    SKIP = "skip"
    MOVE = "next_business_day"


class CatchUpMode(StrEnum):
    """Which of several due occurrences fire when a schedule is claimed late."""

    SKIP = "skip"  # none more than the grace late
    LATEST = "latest"  # the most recent one
    ALL = "all"  # each one within the catch-up window, capped


class Overlap(StrEnum):
    """What an occurrence does while the schedule's previous run is still running."""

    ALLOW = "allow"
    SKIP = "skip"
    BUFFER = "buffer"  # one waits, and runs when the previous run ends


class SkipReason(StrEnum):
    """Why an occurrence did not fire (stored on its skipped Run)."""

    MISSED = "missed"  # the catch-up policy passed it over
    EXPIRED = "expired"  # a one-off that was too late for the catch-up policy
    DST = "dst"  # its local time does not exist and the DST policy skips it
    OVERLAP = "overlap"  # the previous run was still running
    PAUSED = "paused"  # the schedule was paused at the time
    REPLACED = "replaced"  # a "run now" took its place
    CALENDAR = "calendar"  # its day is excluded by one of the schedule's calendars


class NotifyEvent(StrEnum):
    """What a notifier may be told of (``SCHEDULINATOR["NOTIFY"]["EVENTS"]``)."""

    MISSED = "missed"  # a run not succeeded within its schedule's grace
    FAILED = "failed"  # a run failed
    AUTO_PAUSED = "auto_paused"  # a schedule paused after failures in a row
    NO_SCHEDULER = "no_scheduler"  # no scheduler is alive


class AlertRole(StrEnum):
    """What an alert of the outbox is in its schedule's streak of one event (``grouping``):
    the throttle of a schedule that keeps failing."""

    ALONE = "alone"  # a message of its own (NOTIFY_REPEAT_SECONDS None, or no streak)
    FIRST = "first"  # opened a streak: sent, and says the next ones are grouped
    GROUPED = "grouped"  # in a streak already told of: counted, not sent
    REPEAT = "repeat"  # a reminder, NOTIFY_REPEAT_SECONDS after the last message: counts them
    RECOVERED = "recovered"  # a run succeeded again: the streak is over
