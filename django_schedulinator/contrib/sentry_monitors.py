"""A schedule in Sentry Crons' terms: its monitor's slug, the id of its check-ins, and its
monitor config (the crontab or interval that Sentry reads as this app reads the timing, the
margin and the maximum runtime), or ``Inexpressible`` saying why there is none.

Pure translation, from what a schedule's row says (``Facts``): no Sentry SDK, no database.
``sentry.py`` sends the check-ins that use it.
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.text import slugify

from django_schedulinator import timing
from django_schedulinator.conf import SentryCrons, app_settings
from django_schedulinator.dispatch import COMMON_OPTIONS, dispatchers
from django_schedulinator.errors import SchedulinatorError, TimingError, UnknownTask
from django_schedulinator.registry import registry

# The namespace of the check-in ids (uuid5 of the occurrence key). Never change it: an
# occurrence in progress across an upgrade would be closed under another id.
CHECK_IN_NAMESPACE = uuid.UUID("5c58bbb9-1b3e-467e-9209-7561d2cb5f87")
# Sentry keeps the first 50 characters of a monitor slug.
MAX_SLUG_LENGTH = 50
SLUG_HASH_LENGTH = 8
# What separates words in a name besides spaces and hyphens (slugify would drop it).
PUNCTUATION = re.compile(r"[^\w\s-]+")
# A 5-field crontab field that every cron reads alike (names, L, W and # are translated to
# numbers or refused).
PLAIN_FIELD = frozenset("0123456789*/,-")
# Sentry's interval units that are exact durations (a month or a year is not).
INTERVAL_UNITS = (("week", 604_800), ("day", 86_400), ("hour", 3_600), ("minute", 60))
# Sentry takes minutes up to 28 days for the margin and the maximum runtime.
SENTRY_MAX_MINUTES = 40_320


def monitor_slug(name: str) -> str:
    """The monitor slug of the schedule called ``name``: its name slugified, when that fits
    Sentry's 50 characters; otherwise (or when nothing of the name is left) the start of it
    and a hash of the whole name, so that it stays unique and never changes."""
    slug = slugify(PUNCTUATION.sub(" ", name))  # "reports.weekly" is reports-weekly
    if slug and len(slug) <= MAX_SLUG_LENGTH:
        return slug
    digest = hashlib.sha256(name.encode()).hexdigest()[:SLUG_HASH_LENGTH]
    head = slug[: MAX_SLUG_LENGTH - SLUG_HASH_LENGTH - 1].rstrip("-_") or "schedule"
    return f"{head}-{digest}"


def check_in_id(key: str) -> str:
    """The id of every check-in of the occurrence with this key, in any process."""
    return uuid.uuid5(CHECK_IN_NAMESPACE, key).hex


def minutes(seconds: float) -> int:
    """Whole minutes, rounded up, within what Sentry takes (1 to 28 days)."""
    return min(SENTRY_MAX_MINUTES, max(1, math.ceil(seconds / 60)))


# -- what a schedule's row says -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Facts:
    """What the check-ins of a schedule need from its row."""

    name: str
    kind: str
    cron: str
    interval: timedelta | None
    timezone: str
    day_rule: str
    jitter: timedelta | None
    task: str
    dispatcher: str
    # Schedule.grace, where the model has it (missed-run alerts): the checkin margin.
    grace: timedelta | None = None
    # Schedule.calendars, where the model has them: days it keeps away from.
    calendars: tuple[str, ...] | list[str] = ()


FACT_FIELDS = (
    "name",
    "kind",
    "cron",
    "interval",
    "timezone",
    "day_rule",
    "jitter",
    "task",
    "dispatcher",
)


# -- the monitor config ---------------------------------------------------------------------


class Inexpressible(SchedulinatorError):
    """The schedule's timing has no Sentry monitor schedule that means the same (caught in
    ``sentry.py``: the schedule then checks in without a monitor config, with a warning)."""


def crontab(expr: str, day_rule: str) -> str:
    """The 5-field crontab Sentry reads (with croniter) as this app reads ``expr`` (with
    cronsim), or Inexpressible saying why there is none."""
    exprs = timing.cron_expressions(expr)
    if len(exprs) > 1:
        raise Inexpressible("it has several cron expressions; a Sentry monitor has one")
    fields = exprs[0].split(" ")  # aliases expanded
    if len(fields) == 6:
        seconds = fields.pop(0)
        if not seconds.isdigit():
            raise Inexpressible("it fires more than once a minute; Sentry checks minutes")
    day, weekday = fields[2], fields[4]
    if day != "*" and weekday != "*":
        # Both day fields restricted: croniter takes either, cronsim takes both when a field
        # starts with "*" ("*/2 * 1"), and the day rule "both" always does.
        if day.startswith("*") or weekday.startswith("*"):
            raise Inexpressible(f"croniter reads the day fields {day!r} and {weekday!r} apart")
        if day_rule == timing.DayRule.BOTH:
            raise Inexpressible("its day rule 'both' has no crontab form")
    plain = []
    for position, field in enumerate(fields):
        if set(field) <= PLAIN_FIELD:
            plain.append(field)
            continue
        values = timing.cron_field_values(field, position)
        if values is None:
            raise Inexpressible(f"its field {field!r} has no plain crontab form")
        plain.append(",".join(str(value) for value in sorted(values)))
    return " ".join(plain)


def interval(every: timedelta | None) -> dict[str, Any]:
    """Sentry's interval schedule for ``every``, or Inexpressible."""
    seconds = every.total_seconds() if every is not None else 0
    if seconds < 60 or seconds % 60:
        raise Inexpressible("Sentry takes intervals of whole minutes")
    for unit, length in INTERVAL_UNITS:
        if seconds % length == 0:
            return {"type": "interval", "value": int(seconds // length), "unit": unit}
    raise AssertionError("a whole number of minutes")  # pragma: no cover


def _runtime_seconds(facts: Facts) -> float:
    """How long a run may take before the scheduler calls it over: the inline task's
    timeout, or how long the dispatcher awaits a reported outcome."""
    try:
        dispatcher = dispatchers[facts.dispatcher]
    except ImproperlyConfigured:
        return float(COMMON_OPTIONS["OUTCOME_TIMEOUT_SECONDS"].default)
    if dispatcher.runs_in_process:
        try:
            timeout = registry.get(facts.task).timeout
        except UnknownTask:
            timeout = None
        own = getattr(dispatcher, "default_timeout", None)
        return float(timeout or own or app_settings.TASK_TIMEOUT_SECONDS)
    return float(dispatcher.settings["OUTCOME_TIMEOUT_SECONDS"])


def monitor_config(facts: Facts, options: SentryCrons) -> dict[str, Any]:
    """The monitor config of a recurring schedule, or Inexpressible."""
    config: dict[str, Any] = {}
    if facts.calendars:
        raise Inexpressible(
            "it skips or moves the days its calendars exclude, which a monitor's schedule "
            "cannot say"
        )
    try:
        if facts.kind == timing.Kind.CRON:
            timing.get_zone(facts.timezone)
            config["schedule"] = {"type": "crontab", "value": crontab(facts.cron, facts.day_rule)}
            config["timezone"] = facts.timezone
        elif facts.kind == timing.Kind.INTERVAL:
            config["schedule"] = interval(facts.interval)
        elif facts.kind == timing.Kind.SOLAR:
            raise Inexpressible(
                "a solar schedule's time moves from day to day, which a monitor's crontab or "
                "interval cannot say"
            )
        else:
            raise Inexpressible("a one-off has no schedule to watch")
    except TimingError as exc:
        raise Inexpressible(str(exc)) from None
    margin = options.monitor_config.get("checkin_margin")
    if facts.grace:
        margin = minutes(facts.grace.total_seconds())
    if facts.jitter:
        # A jittered run fires up to the jitter after its nominal time, which Sentry expects.
        margin = max(int(margin or 0), minutes(facts.jitter.total_seconds()) + 1)
    if margin:
        config["checkin_margin"] = min(int(margin), SENTRY_MAX_MINUTES)
    # A minute more than the scheduler's own limit: its verdict arrives first.
    config["max_runtime"] = min(minutes(_runtime_seconds(facts)) + 1, SENTRY_MAX_MINUTES)
    for key in ("failure_issue_threshold", "recovery_threshold", "owner"):
        if key in options.monitor_config:
            config[key] = options.monitor_config[key]
    return config
