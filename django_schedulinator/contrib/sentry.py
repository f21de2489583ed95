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

What a schedule is in Sentry's terms (its monitor slug, its check-ins' id, its monitor
config) is ``sentry_monitors.py``'s; this module is the setting and the delivery.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, cast

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.db.models.signals import post_delete, post_save
from django.dispatch import Signal

from django_schedulinator import signals, timing
from django_schedulinator.conf import SETTING_NAME, SentryCrons, Setting, Settings, app_settings
from django_schedulinator.contrib.sentry_monitors import (
    FACT_FIELDS,
    Facts,
    Inexpressible,
    check_in_id,
    monitor_config,
    monitor_slug,
)

# The setting's bound, documented as this module's with its keys (docs/upgrading.md).
from django_schedulinator.contrib.sentry_monitors import SENTRY_MAX_MINUTES as SENTRY_MAX_MINUTES
from django_schedulinator.models import Schedule
from django_schedulinator.models.batches import json_ids
from django_schedulinator.operations.stage import Stage
from django_schedulinator.statuses import RunStatus

if TYPE_CHECKING:
    from sentry_sdk._types import MonitorConfig

    from django_schedulinator.dispatch import Occurrence

logger = logging.getLogger("django_schedulinator.sentry")

IN_PROGRESS, OK, ERROR = "in_progress", "ok", "error"
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


SENTRY_CRONS_KEYS = ("SCHEDULES", "EXCLUDE", "MONITOR_CONFIG")
# What MONITOR_CONFIG may add to the monitor config derived from each schedule. Sentry takes
# minutes up to 28 days (SENTRY_MAX_MINUTES) for the margin.
SENTRY_MONITOR_KEYS = ("checkin_margin", "failure_issue_threshold", "recovery_threshold", "owner")


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


# -- what a schedule's row says -------------------------------------------------------------


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


# The schedules whose timing was found inexpressible, told once per process.
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
    """The check-ins waiting to be sent, and the thread of this process that sends them: a
    ``Stage`` (the one way a thread runs beside the scheduler's loop), bounded at
    ``MAX_WAITING``, sending up to ``SEND_BATCH`` at a time.

    The stage starts with the first check-in (again in a forked child: a Celery or RQ
    worker), and its thread closes its database connections after each batch (a web or
    worker process keeps it for its life). ``flush`` waits until everything put so far was
    handed to the SDK; a process that exits waits for it up to ``EXIT_FLUSH_SECONDS``,
    before the SDK's own flush."""

    def __init__(self) -> None:
        self._pid = 0
        self.dropped = 0
        self._last_warning = -math.inf
        self._lock = threading.Lock()
        self._stage: Stage[CheckIn] | None = None

    def put(self, check_in: CheckIn) -> None:
        if not self._started().put(check_in, timeout=0):
            self._drop()

    def _started(self) -> Stage[CheckIn]:
        with self._lock:
            # Forked: the parent's thread is not ours; the child starts its own.
            if self._stage is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._stage = Stage(
                    "schedulinator-sentry", _send_batch, capacity=MAX_WAITING, take=SEND_BATCH
                )
                self._stage.start()
                atexit.register(self.flush, EXIT_FLUSH_SECONDS)
            return self._stage

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

    def flush(self, timeout: float) -> bool:
        """Wait until every check-in put so far was handed to the SDK; whether it was."""
        stage = self._stage
        if stage is None or self._pid != os.getpid():
            return True
        return stage.drain(time.monotonic() + timeout)


def _send_batch(batch: list[CheckIn]) -> None:
    """Send a batch (the outbox's stage): a failure is logged, the next batch goes."""
    try:
        send(batch)
    except Exception:
        logger.warning("%d Sentry check-in(s) were not sent.", len(batch), exc_info=True)
    finally:
        connections.close_all()  # this thread's own: it lives as long as the process


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
