"""From Celery beat: django-celery-beat's tables, and the ``CELERY_BEAT_SCHEDULE`` setting.

Each periodic task becomes one schedule of its registered task (``TaskNames``), sent through
the dispatcher alias given (a Celery dispatcher keeps sending to the same Celery tasks, so
the workers need no change). What maps, and what does not:

- crontab (with its time zone), interval (seconds to days), clocked (a one-off at that time),
  solar (the same event of the sun at the same place: ``kind="solar"``; Celery computes it
  with PyEphem, this app with astral: they agree to about a minute, but for the first
  event after the polar night or the midnight sun, which may fall a day apart);
- a crontab keeps Celery's meaning: a day must match both day fields (``day_rule="both"``
  where both are restricted; cron alone would fire on either), and each field is written
  as Celery wrote it where cron reads it the same, else as the values Celery reads (a list
  of hours, a range that wraps around such as ``22-1`` or ``fri-mon``);
- ``one_off`` on a crontab or interval: ``max_runs=1``; ``start_time``: ``start_at``;
  ``expires``: ``end_at``; ``enabled=False``: imported paused, with a note;
- a task with no run left is imported finished (no next run): its ``expires`` has passed
  (or, for a clocked one, came before its time), or it is a one-off that ran (beat disables
  those after their run: imported with its one run used, ``max_runs=1``, ``run_count=1``,
  not paused); a clocked task whose time has passed and that beat has not run is left out
  (beat would run it at its next start; an import fires no missed run);
- ``args`` and ``kwargs`` (JSON text in the tables, Python values in the setting: a list or
  tuple, a dict);
- ``celery.backend_cleanup``, beat's own housekeeping, is listed as left out;
- whatever is wrong with one entry (a schedule of ``1e20`` or ``nan`` seconds, args that
  are not a list, an unknown key, ``relative=True``) leaves that entry out with the reason,
  never the rest;
- ``queue``, ``routing_key``, ``priority`` and ``expire_seconds`` (or the setting's
  ``options``): the schedule's dispatch options, checked by its dispatcher (an option it does
  not take leaves the entry out, with the dispatcher's message); an ``exchange`` or
  ``headers`` have no counterpart: left out;
- ``last_run_at`` of an interval: the anchor, so the cadence goes on where it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django_schedulinator import timing
from django_schedulinator.errors import SchedulinatorError
from django_schedulinator.importers import Found, TaskNames
from django_schedulinator.index import clock
from django_schedulinator.timing.solar import is_event

# The values of each cron field as Celery's crontab reads them (day of the week: Sunday 0).
CRON_FIELD_RANGES = (range(60), range(24), range(1, 32), range(1, 13), range(7))
# django-celery-beat's interval periods: timedelta's argument names.
PERIODS = ("days", "hours", "minutes", "seconds", "microseconds")
# The keys of a CELERY_BEAT_SCHEDULE entry, as Celery beat reads them.
ENTRY_KEYS = ("task", "schedule", "args", "kwargs", "options", "relative")
BACKEND_CLEANUP = "celery.backend_cleanup"
BACKEND_CLEANUP_REASON = (
    "celery beat's own housekeeping (it deletes expired task results from a result backend "
    "that does not expire them itself), not your work: not imported"
)
# The options of a periodic task that become dispatch options, by the name there.
DISPATCH_OPTIONS = ("queue", "routing_key", "priority", "expires")
PAUSED_NOTE = "Imported paused: it was disabled in {source}."


def from_tables(names: TaskNames, dispatcher: str) -> Iterator[Found]:
    """The periodic tasks of django-celery-beat, read through its own models."""
    from django.apps import apps

    if not apps.is_installed("django_celery_beat"):
        raise LookupError("django_celery_beat is not in INSTALLED_APPS: its tables cannot be read.")
    periodic_task = apps.get_app_config("django_celery_beat").get_model("PeriodicTask")
    related = ("crontab", "interval", "clocked", "solar")
    rows: Any = periodic_task._default_manager.select_related(*related).order_by("pk")
    for row in rows:
        source = f"periodic task {row.pk} {row.name!r}"
        if row.name == BACKEND_CLEANUP:
            yield Found(source, None, BACKEND_CLEANUP_REASON)
        else:
            yield _found(source, partial(_fields_of_row, row, names, dispatcher))


def from_setting(
    schedule: Mapping[str, Any], names: TaskNames, dispatcher: str, timezone: str
) -> Iterator[Found]:
    """The entries of a ``CELERY_BEAT_SCHEDULE`` dict (``timezone``: Celery's, for crontabs)."""
    for name, entry in schedule.items():
        source = f"CELERY_BEAT_SCHEDULE[{name!r}]"
        yield _found(source, partial(_fields_of_entry, name, entry, names, dispatcher, timezone))


class Unmapped(SchedulinatorError):
    """An entry that has no counterpart here; the message says why (caught in this module:
    the entry is left out and listed)."""


def _found(source: str, fields_of: Callable[[], dict[str, Any]]) -> Found:
    """One entry: the fields of its schedule, or why it is left out. Whatever is wrong with
    an entry leaves that entry out, listed, and never stops the others."""
    try:
        return Found(source, fields_of())
    except Unmapped as exc:
        return Found(source, None, str(exc))
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
        # A value odder than the checks foresee: still this entry's problem alone.
        return Found(source, None, f"it cannot be read ({type(exc).__name__}: {exc})")


def _fields_of_row(row: Any, names: TaskNames, dispatcher: str) -> dict[str, Any]:
    task = _task(row.task, names)
    fields: dict[str, Any] = {"name": row.name, "task": task, "dispatcher": dispatcher}
    if row.solar is not None:
        fields.update(_solar(row.solar.event, row.solar.latitude, row.solar.longitude))
    elif row.crontab is not None:
        try:
            celery_crontab = row.crontab.schedule  # django-celery-beat's own Celery crontab
        except Exception as exc:  # Celery's parser raises ValueError and its ParseException
            raise Unmapped(f"Celery cannot read its crontab: {exc}") from None
        fields.update(_cron(celery_crontab, str(row.crontab.timezone)))
    elif row.interval is not None:
        fields.update(kind="interval", interval=_interval(row.interval.every, row.interval.period))
        if row.last_run_at is not None:
            fields["anchor_at"] = row.last_run_at
    elif row.clocked is not None:
        fields.update(kind="once", run_at=row.clocked.clocked_time)
    else:
        raise Unmapped("it has no schedule")
    # Beat disables a one-off after its run: one that ran is imported finished (its one run
    # used), not paused, so that resuming or editing it does not run it again.
    ran = row.one_off and (row.last_run_at is not None or (row.total_run_count or 0) > 0)
    if row.one_off and (fields["kind"] != "once" or ran):
        fields["max_runs"] = 1
    if ran:
        fields["run_count"] = 1
    fields["args"] = _json(row.args, "args", list)
    fields["kwargs"] = _json(row.kwargs, "kwargs", dict)
    if row.exchange:
        raise Unmapped(f"exchange {row.exchange!r}: the Celery dispatcher sends by queue only")
    if _json(row.headers or "{}", "headers", dict):
        raise Unmapped("headers: the Celery dispatcher sends its own (the occurrence key)")
    options = {
        "queue": row.queue or None,
        "routing_key": row.routing_key or None,
        "priority": row.priority,
        "expires": row.expire_seconds,
    }
    fields["dispatch_options"] = {k: v for k, v in options.items() if v is not None}
    if row.start_time is not None:
        fields["start_at"] = row.start_time
    if row.expires is not None:
        fields["end_at"] = row.expires
    if not row.enabled and not ran:
        fields.update(enabled=False, pause_note=PAUSED_NOTE.format(source="django-celery-beat"))
    if fields["kind"] == "once" and not ran:
        _check_not_missed(fields, clock.now())
    return fields


def _check_not_missed(fields: dict[str, Any], now: datetime) -> None:
    """A clocked task whose time has passed, that beat has not run and whose expiry has not
    come: beat would run it at its next start, but an import fires no missed run."""
    run_at, end_at = fields["run_at"], fields.get("end_at")
    if run_at is None or run_at >= now or (end_at is not None and end_at < now):
        return  # to come, or ended (imported finished)
    raise Unmapped(
        f"its time ({run_at.isoformat()}) has passed and beat has not run it: an import "
        "fires no missed run (run the task by hand, or create a one-off, if it should "
        "still run)"
    )


def _fields_of_entry(
    name: Any, entry: Any, names: TaskNames, dispatcher: str, timezone: str
) -> dict[str, Any]:
    if not isinstance(name, str):
        raise Unmapped(f"the name must be text, not {type(name).__name__}")
    if not isinstance(entry, Mapping) or "task" not in entry or "schedule" not in entry:
        raise Unmapped("an entry needs 'task' and 'schedule'")
    unknown = sorted(map(str, set(entry) - set(ENTRY_KEYS)))
    if unknown:
        raise Unmapped(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (an entry "
            f"takes {', '.join(ENTRY_KEYS)})"
        )
    if entry.get("relative"):
        raise Unmapped("relative: no counterpart here (times are not rounded to the period)")
    if not isinstance(entry["task"], str):
        raise Unmapped(f"task must be a task name, not {type(entry['task']).__name__}")
    fields: dict[str, Any] = {
        "name": name,
        "task": _task(entry["task"], names),
        "dispatcher": dispatcher,
        **_timing(entry["schedule"], timezone),
        "args": list(_of_type(entry, "args", (list, tuple), "a list or a tuple", ())),
        "kwargs": dict(_of_type(entry, "kwargs", Mapping, "a dict", {})),
    }
    options = dict(_of_type(entry, "options", Mapping, "a dict", {}))
    unknown = sorted(set(options) - set(DISPATCH_OPTIONS))
    if unknown:
        raise Unmapped(f"options {', '.join(unknown)}: no counterpart here")
    fields["dispatch_options"] = {k: v for k, v in options.items() if v is not None}
    return fields


def _timing(schedule: Any, timezone: str) -> dict[str, Any]:
    """The timing fields of a beat schedule: Celery's crontab, solar, a timedelta or a
    number of seconds."""
    from celery.schedules import crontab, solar

    if isinstance(schedule, solar):
        return {**_solar(schedule.event, schedule.lat, schedule.lon), "timezone": timezone}
    if isinstance(schedule, crontab):
        return _cron(schedule, timezone)
    if isinstance(schedule, timedelta):
        return {"kind": "interval", "interval": schedule}
    if isinstance(schedule, int | float) and not isinstance(schedule, bool):
        try:
            return {"kind": "interval", "interval": timedelta(seconds=schedule)}
        except (OverflowError, ValueError):  # 1e20, inf, nan
            raise Unmapped(
                f"the schedule {schedule!r} is not a number of seconds an interval can hold"
            ) from None
    raise Unmapped(f"the schedule {schedule!r} is of a kind this importer does not know")


def _cron(schedule: Any, timezone: str) -> dict[str, Any]:
    """The cron timing of a Celery crontab, with Celery's meaning: each field as written
    where cron reads it as Celery does, else the values Celery reads (``*`` for all of them:
    a day field with every value restricts nothing in Celery); a day matches when both day
    fields do."""
    written = (
        schedule._orig_minute,
        schedule._orig_hour,
        schedule._orig_day_of_month,
        schedule._orig_month_of_year,
        schedule._orig_day_of_week,
    )
    read = (
        schedule.minute,
        schedule.hour,
        schedule.day_of_month,
        schedule.month_of_year,
        schedule.day_of_week,
    )
    fields = []
    for position, (text, values) in enumerate(zip(written, read, strict=True)):
        text = str(text) if isinstance(text, int | str) else ""
        full = CRON_FIELD_RANGES[position]
        same = timing.cron_field_values(text, position) == frozenset(values)
        fields.append(text if same and set(values) != set(full) else _values_text(values, full))
    cron = " ".join(fields)
    both = timing.both_days_restricted(cron)
    return {
        "kind": "cron",
        "cron": cron,
        "day_rule": timing.DayRule.BOTH if both else timing.DayRule.EITHER,
        "timezone": timezone,
    }


def _solar(event: Any, latitude: Any, longitude: Any) -> dict[str, Any]:
    """The solar timing of Celery's ``solar`` or django-celery-beat's ``SolarSchedule``: the
    same event (the names are Celery's) at the same place."""
    if not is_event(event):
        raise Unmapped(f"the solar event {event!r} is not one Celery has")
    return {
        "kind": "solar",
        "solar_event": str(event),
        "latitude": float(latitude),  # a Decimal in django-celery-beat's table
        "longitude": float(longitude),
    }


def _values_text(values: Any, full: range) -> str:
    """Numbers as a cron field: ``*`` for all of them, else ranges (``0-1,22-23``)."""
    numbers = sorted(values)
    if numbers == list(full):
        return "*"
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _interval(every: int, period: str) -> timedelta:
    if period not in PERIODS:
        raise Unmapped(f"the interval period {period!r} is not one django-celery-beat has")
    return timedelta(**{period: every})


def _of_type(entry: Mapping[str, Any], key: str, kind: Any, expected: str, default: Any) -> Any:
    """``entry[key]`` when it is of ``kind``; ``default`` when it is absent or None."""
    value = entry.get(key)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise Unmapped(f"{key} must be {expected}, not {type(value).__name__}")
    return value


def _task(name: str, names: TaskNames) -> str:
    registered, why = names.registered(name)
    if registered is None:
        raise Unmapped(why)
    return registered


def _json(text: str, what: str, kind: type) -> Any:
    try:
        value = json.loads(text or ("[]" if kind is list else "{}"))
    except ValueError as exc:
        raise Unmapped(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, kind):
        raise Unmapped(f"{what} must be a JSON {'list' if kind is list else 'object'}")
    return value
