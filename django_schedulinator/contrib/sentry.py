"""Sentry Crons check-ins for the schedules, sent by receivers of the scheduler's signals.

Switched on by ``SCHEDULINATOR["SENTRY_CRONS"]`` (docs/sentry.md), in a process where
sentry-sdk (the "sentry" extra) is installed and initialised (``sentry_sdk.init`` in
settings.py). Each monitored occurrence makes one check-in that goes through two states:

- ``in_progress`` when it fires (``occurrence_fired``): the moment the scheduler commits to
  it, for every dispatcher (the inline one hands nothing off). It carries the monitor config
  derived from the schedule, which lets Sentry create or update the monitor;
- ``ok`` or ``error`` when its run ends (``run_finished``), or ``ok`` at the hand-off when
  the receiving system reports no outcome (``run_handed_off`` with ``awaits_outcome`` False):
  the hand-off is then all that will ever be known.

Every check-in of one occurrence carries the same id, a UUID derived from its occurrence
key, so the end a Celery worker reports in its own process closes the check-in the scheduler
opened, with nothing shared between the two.

The receivers run on the scheduler's path, so they only put the check-in in an outbox. A
thread of this process empties it: one query reads the rows of a whole batch (a row read is
kept for ``ROW_SECONDS``), and ``capture_checkin`` puts each envelope on the queue of the
SDK's own transport thread. Nothing on the scheduler's path reads the database for Sentry or
waits for the network.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import math
import os
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, cast

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.db.models.signals import post_delete, post_save
from django.dispatch import Signal
from django.utils.text import slugify

from django_schedulinator import signals, timing
from django_schedulinator.conf import SETTING_NAME, SentryCrons, Setting, Settings, app_settings
from django_schedulinator.dispatch import COMMON_OPTIONS, dispatchers
from django_schedulinator.errors import SchedulinatorError, TimingError, UnknownTask
from django_schedulinator.models import Schedule
from django_schedulinator.models.batches import json_ids
from django_schedulinator.registry import registry
from django_schedulinator.statuses import RunStatus

if TYPE_CHECKING:
    from sentry_sdk._types import MonitorConfig

    from django_schedulinator.dispatch import Occurrence

logger = logging.getLogger("django_schedulinator.sentry")

# The namespace of the check-in ids (uuid5 of the occurrence key). Never change it: an
# occurrence in progress across an upgrade would be closed under another id.
CHECK_IN_NAMESPACE = uuid.UUID("5c58bbb9-1b3e-467e-9209-7561d2cb5f87")
IN_PROGRESS, OK, ERROR = "in_progress", "ok", "error"
# Sentry keeps the first 50 characters of a monitor slug.
MAX_SLUG_LENGTH = 50
SLUG_HASH_LENGTH = 8
# What separates words in a name besides spaces and hyphens (slugify would drop it).
PUNCTUATION = re.compile(r"[^\w\s-]+")
# How long a schedule's row, once read, stands for it in this process: an edit made in
# another process reaches Sentry with the first check-in after this (one made in this
# process, at once).
ROW_SECONDS = 60.0
MAX_ROWS_KEPT = 10_000
# Check-ins waiting in the outbox at most (more are dropped, counted, and logged at most
# once a minute), the most sent per batch (one query), and how long a process that exits
# waits for those left.
MAX_WAITING = 50_000
SEND_BATCH = 500
EXIT_FLUSH_SECONDS = 2.0
DROP_WARNING_SECONDS = 60.0
# The SDK's transport drops an envelope that finds transport_queue_size (100 by default)
# waiting: the outbox hands it half that many at a time, and waits this long at most for
# its queue to drain between two.
PACE_SECONDS = 30.0
# A 5-field crontab field that every cron reads alike (names, L, W and # are translated to
# numbers or refused).
PLAIN_FIELD = frozenset("0123456789*/,-")
# Sentry's interval units that are exact durations (a month or a year is not).
INTERVAL_UNITS = (("week", 604_800), ("day", 86_400), ("hour", 3_600), ("minute", 60))


SENTRY_CRONS_KEYS = ("SCHEDULES", "EXCLUDE", "MONITOR_CONFIG")
# What MONITOR_CONFIG may add to the monitor config derived from each schedule. Sentry takes
# minutes up to 28 days (40,320) for the margin.
SENTRY_MONITOR_KEYS = ("checkin_margin", "failure_issue_threshold", "recovery_threshold", "owner")
SENTRY_MAX_MINUTES = 40_320


def parse_sentry_crons(setting: Setting[SentryCrons | None], value: Any) -> SentryCrons | None:
    """SCHEDULINATOR["SENTRY_CRONS"]: which schedules check in; None when it is off."""
    if value is False or value is None:
        return None
    if value is True:
        return SentryCrons()
    if not isinstance(value, dict):
        raise setting.error(
            f"must be False, True (every recurring schedule) or a dict with the keys "
            f"{', '.join(SENTRY_CRONS_KEYS)}, got {value!r}"
        )
    setting.refuse_unknown_keys(value, SENTRY_CRONS_KEYS)
    schedules = value.get("SCHEDULES", "all")
    chosen = None if schedules == "all" else _patterns(setting, "SCHEDULES", schedules)
    exclude = _patterns(setting, "EXCLUDE", value.get("EXCLUDE", []))
    extra = value.get("MONITOR_CONFIG", {})
    if not isinstance(extra, dict):
        raise setting.error(f"['MONITOR_CONFIG'] must be a dict, got {extra!r}")
    for key, item in extra.items():
        where = f"['MONITOR_CONFIG'][{key!r}]"
        if key not in SENTRY_MONITOR_KEYS:
            raise setting.error(
                f"{where} is not taken; the keys are {', '.join(SENTRY_MONITOR_KEYS)} (the "
                f"schedule, time zone and maximum runtime come from each schedule)"
            )
        if key == "owner":
            if not isinstance(item, str) or not item:
                raise setting.error(f"{where} must be 'user:<id>' or 'team:<id>', got {item!r}")
        elif (
            isinstance(item, bool)
            or not isinstance(item, int)
            or not 1 <= item <= SENTRY_MAX_MINUTES
        ):
            raise setting.error(
                f"{where} must be a whole number from 1 to {SENTRY_MAX_MINUTES}, got {item!r}"
            )
    return SentryCrons(chosen, exclude, dict(extra))


def _patterns(setting: Setting[Any], key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise setting.error(
            f"[{key!r}] must be a list of schedule names and fnmatch patterns (such as "
            f"'reports-*'), got {value!r}"
        )
    return tuple(value)


Settings.SENTRY_CRONS.parsed_by(parse_sentry_crons)


def available() -> bool:
    """Whether sentry-sdk is installed."""
    return find_spec("sentry_sdk") is not None


def switched_on() -> SentryCrons | None:
    """The setting, or None when it is off (or invalid: ``schedulinator.E001`` says so)."""
    try:
        return app_settings.SENTRY_CRONS
    except ImproperlyConfigured:
        return None


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


def _read(schedule_ids: Collection[int]) -> dict[int, Facts]:
    fields = ["pk", *FACT_FIELDS]
    fields += [
        name
        for name in ("grace", "calendars")
        if any(f.name == name for f in Schedule._meta.concrete_fields)
    ]
    # The database the scheduler writes to: a replica may not have the row yet.
    db = router.db_for_write(Schedule)
    found = Schedule.objects.using(db).filter(pk__in=json_ids(list(schedule_ids), db))
    return {values.pop("pk"): Facts(**values) for values in found.values(*fields)}


class Rows:
    """Each schedule's facts by id, read on first use and again after ``ROW_SECONDS``."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[float, Facts | None]] = {}
        self._lock = threading.Lock()

    def get_many(self, schedule_ids: Collection[int]) -> dict[int, Facts | None]:
        """The facts of these schedules (None: no such row), in one query for those not
        read within ``ROW_SECONDS``."""
        now = time.monotonic()
        found: dict[int, Facts | None] = {}
        with self._lock:
            for schedule_id in schedule_ids:
                kept = self._kept.get(schedule_id)
                if kept is not None and now - kept[0] < ROW_SECONDS:
                    found[schedule_id] = kept[1]
        missing = [schedule_id for schedule_id in schedule_ids if schedule_id not in found]
        if missing:
            read = _read(missing)
            with self._lock:
                if len(self._kept) + len(missing) > MAX_ROWS_KEPT:
                    self._kept.clear()
                for schedule_id in missing:
                    found[schedule_id] = read.get(schedule_id)
                    self._kept[schedule_id] = (now, found[schedule_id])
        return found

    def forget(self, schedule_id: int | None = None) -> None:
        with self._lock:
            if schedule_id is None:
                self._kept.clear()
            else:
                self._kept.pop(schedule_id, None)


rows = Rows()


# -- the monitor config ---------------------------------------------------------------------


class Inexpressible(SchedulinatorError):
    """The schedule's timing has no Sentry monitor schedule that means the same (caught in
    this module: the schedule is then left unmonitored, with a warning)."""


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


_told: set[int] = set()


def _config_of(schedule_id: int, facts: Facts, options: SentryCrons) -> dict[str, Any] | None:
    try:
        return monitor_config(facts, options)
    except Inexpressible as why:
        if schedule_id not in _told:  # once per schedule and process
            _told.add(schedule_id)
            logger.warning(
                "The schedule %r checks in with Sentry without a monitor config: %s. Its "
                "check-ins count only for a monitor with the slug %r made in Sentry by hand.",
                facts.name,
                why,
                monitor_slug(facts.name),
            )
        return None


# -- sending ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckIn:
    """A check-in to send: the occurrence (its schedule and key), and its status."""

    schedule_id: int
    key: str
    status: str


def send(batch: Collection[CheckIn]) -> None:
    """Send each check-in whose schedule is monitored, with the monitor config on an
    ``in_progress``; one that fails is logged, and the others still go."""
    import sentry_sdk
    from sentry_sdk.crons import capture_checkin

    options = switched_on()
    client = sentry_sdk.get_client()
    if options is None or not client.is_active():
        return
    room = max(1, int(client.options.get("transport_queue_size") or 100) // 2)
    facts_of = rows.get_many({check_in.schedule_id for check_in in batch})
    handed = 0
    for check_in in batch:
        facts = facts_of.get(check_in.schedule_id)
        if facts is None or facts.kind == timing.Kind.ONCE or not options.monitors(facts.name):
            continue
        if handed and handed % room == 0:
            sentry_sdk.flush(timeout=PACE_SECONDS)  # off the scheduler's path: it may wait
        handed += 1
        try:
            config = None
            if check_in.status == IN_PROGRESS:
                config = _config_of(check_in.schedule_id, facts, options)
            capture_checkin(
                monitor_slug=monitor_slug(facts.name),
                check_in_id=check_in_id(check_in.key),
                status=check_in.status,
                monitor_config=cast("MonitorConfig | None", config),
            )
        except Exception:
            logger.warning(
                "The Sentry check-in %r of %s was not sent.",
                check_in.status,
                check_in.key,
                exc_info=True,
            )


class Outbox:
    """The check-ins waiting to be sent, and the thread of this process that sends them.

    The thread starts with the first check-in (again in a forked child: a Celery or RQ
    worker), and closes its database connection after each batch. ``flush`` waits until
    everything put so far was handed to the SDK; a process that exits waits for it up to
    ``EXIT_FLUSH_SECONDS``, before the SDK's own flush."""

    def __init__(self) -> None:
        self._pid = 0
        self.dropped = 0
        self._last_warning = -math.inf
        self._start()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._changed = threading.Condition()
        self._waiting: deque[CheckIn] = deque()
        self._sending = 0
        self._thread: threading.Thread | None = None

    def put(self, check_in: CheckIn) -> None:
        if self._pid != os.getpid():  # forked: the parent's thread and lock are not ours
            self._start()
        with self._changed:
            if len(self._waiting) >= MAX_WAITING:
                self._drop()
                return
            self._waiting.append(check_in)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="schedulinator-sentry", daemon=True
                )
                self._thread.start()
                atexit.register(self.flush, EXIT_FLUSH_SECONDS)
            self._changed.notify_all()

    def _drop(self) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._last_warning >= DROP_WARNING_SECONDS:
            self._last_warning = now
            logger.warning(
                "%d Sentry check-in(s) dropped so far: %d are waiting to be sent already.",
                self.dropped,
                MAX_WAITING,
            )

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waiting:
                    self._changed.wait()
                batch = [
                    self._waiting.popleft() for _ in range(min(SEND_BATCH, len(self._waiting)))
                ]
                self._sending = len(batch)
            try:
                send(batch)
            except Exception:
                logger.warning("%d Sentry check-in(s) were not sent.", len(batch), exc_info=True)
            finally:
                connections.close_all()  # this thread's own
                with self._changed:
                    self._sending = 0
                    self._changed.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every check-in put so far was handed to the SDK; whether it was."""
        if self._pid != os.getpid():
            return True
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._waiting or self._sending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True


outbox = Outbox()


# -- the receivers ----------------------------------------------------------------------------


def _active() -> bool:
    import sentry_sdk

    return sentry_sdk.get_client().is_active()


def on_occurrence_fired(sender: Any, *, occurrence: Occurrence, **kwargs: Any) -> None:
    options = switched_on()
    # The name on the occurrence leaves out an unmonitored schedule here, at no cost.
    if options is not None and options.monitors(occurrence.schedule_name) and _active():
        outbox.put(CheckIn(occurrence.schedule_id, occurrence.key, IN_PROGRESS))


def on_run_handed_off(
    sender: Any, *, schedule_id: int, key: str, awaits_outcome: bool, **kwargs: Any
) -> None:
    if not awaits_outcome and _active():
        outbox.put(CheckIn(schedule_id, key, OK))


def on_run_finished(sender: Any, *, schedule_id: int, key: str, status: str, **kwargs: Any) -> None:
    if _active():
        outbox.put(CheckIn(schedule_id, key, OK if status == RunStatus.SUCCEEDED else ERROR))


def on_schedule_saved(sender: Any, instance: Schedule, **kwargs: Any) -> None:
    rows.forget(instance.pk)  # an edit in this process counts at once


RECEIVERS: tuple[tuple[Signal, Any, type | None, str], ...] = (
    (signals.occurrence_fired, on_occurrence_fired, None, "schedulinator_sentry_fired"),
    (signals.run_handed_off, on_run_handed_off, None, "schedulinator_sentry_handed_off"),
    (signals.run_finished, on_run_finished, None, "schedulinator_sentry_finished"),
    (post_save, on_schedule_saved, Schedule, "schedulinator_sentry_saved"),
    (post_delete, on_schedule_saved, Schedule, "schedulinator_sentry_deleted"),
)


def connect(**kwargs: Any) -> None:
    """Connect the receivers when SENTRY_CRONS is on and sentry-sdk is installed, disconnect
    them otherwise. ``ready()`` calls it, and ``setting_changed`` (override_settings)."""
    if kwargs.get("setting", SETTING_NAME) != SETTING_NAME:
        return
    rows.forget()
    _told.clear()
    on = switched_on() is not None and available()
    for signal, receiver, sender, uid in RECEIVERS:
        if on:
            signal.connect(receiver, sender=sender, weak=False, dispatch_uid=uid)
        else:
            signal.disconnect(sender=sender, dispatch_uid=uid)
