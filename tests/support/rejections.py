"""The bad-input matrix's tables: every way in (model, admin, commands, settings) rejects bad
values.

Each rejected case proves three things: the error names the field, option or setting key and
says what is wrong; nothing reached SQL or Redis (``assert_nothing_written``); and no traceback
reached the user. Each table is run by a test in the file of the module it reaches:

- ``MODEL_CASES``: ``test_models.py::test_model_rejects_bad_input`` (``services.create``
  and ``services.validate``);
- ``ADMIN_CASES``: ``test_admin_forms.py::test_admin_form_rejects_bad_input`` (the add form);
- ``COMMAND_CASES`` and ``SUBPROCESS_CASES``: ``test_commands.py::test_command_rejects_bad_options``
  and ``test_commands.py::test_command_line_rejects_bad_options_without_a_traceback``;
- ``SETTINGS_CASES``: ``test_checks.py::test_system_checks_reject_bad_settings``.

``ODD_NAMES`` are positive controls: odd but valid names are stored and indexed by id only
(``test_models.py::test_odd_but_valid_names_are_saved_and_indexed_by_id``). ``deep_value``
builds JSON nested deeper than Python's json (and the databases) can take.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_schedulinator.models import Run, Schedule

PAYLOAD_LIMIT = 1024  # SCHEDULINATOR['MAX_PAYLOAD_BYTES'] while the matrix runs
HUGE = "x" * 2000  # more than PAYLOAD_LIMIT bytes of JSON
PAST = timezone.now() - timedelta(days=1)
START = datetime(2100, 1, 1, tzinfo=UTC)
LAST_HOUR = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)


def assert_nothing_written(client: Any, key_prefix: str, schedules: int = 0) -> None:
    assert Schedule.objects.count() == schedules
    assert Run.objects.count() == 0
    assert client.keys(f"{{{key_prefix}}}*") == []


def assert_field_error(errors: dict[str, list[str]], field: str, fragment: str) -> None:
    assert field in errors, errors
    assert any(fragment in str(message) for message in errors[field]), errors[field]


def bad(case_id: str, field: str, fragment: str, **overrides: Any) -> Any:
    """One row of a field-level table: overrides that must fail on ``field`` with ``fragment``."""
    return pytest.param(overrides, field, fragment, id=case_id)


# -- 1. the model: save() and full_clean() ----------------------------------------------------


def interval(value: Any) -> dict[str, Any]:
    return {"kind": "interval", "interval": value}


def once(value: Any) -> dict[str, Any]:
    return {"kind": "once", "run_at": value}


def sun(**fields: Any) -> dict[str, Any]:
    """A solar timing (sunset in Berlin) with ``fields`` instead."""
    return {"kind": "solar", "solar_event": "sunset", "latitude": 52.52, "longitude": 13.4,
            **fields}  # fmt: skip


MODEL_CASES = [
    # cron
    bad("cron-minute-60", "cron", "Bad minute", cron="60 * * * *"),
    bad("cron-hour-24", "cron", "Bad hour", cron="0 24 * * *"),
    bad("cron-day-32", "cron", "Bad day-of-month", cron="0 0 32 * *"),
    bad("cron-month-13", "cron", "Bad month", cron="0 0 1 13 *"),
    bad("cron-weekday-8", "cron", "Bad day-of-week", cron="0 0 * * 8"),
    bad("cron-second-60", "cron", "Bad second", cron="60 0 0 * * *"),
    bad("cron-4-fields", "cron", "has 4", cron="* * * *"),
    bad("cron-7-fields", "cron", "has 7", cron="* * * * * * *"),
    bad("cron-empty", "cron", "Enter a cron expression", cron=""),
    bad("cron-whitespace", "cron", "Enter a cron expression", cron=" \t  "),
    bad("cron-none", "cron", "as text", cron=None),
    bad("cron-too-long", "cron", "at most 200", cron="* " * 150),
    bad("cron-garbage", "cron", "Bad minute", cron="a b c d e"),
    bad("cron-alias-every5m", "cron", "Unknown cron alias", cron="@every5m"),
    bad("cron-alias-reboot", "cron", "Unknown cron alias", cron="@reboot"),
    bad("cron-step-0", "cron", "Bad minute", cron="*/0 * * * *"),
    bad("cron-feb-31", "cron", "Bad day-of-month", cron="0 0 31 2 *"),
    bad("cron-never-matches", "cron", "never matches", cron="* * */20 * 1L"),
    # solar
    bad("solar-event-unknown", "solar_event", "Unknown solar event", **sun(solar_event="dusk")),
    bad("solar-event-missing", "solar_event", "needs an event", **sun(solar_event="")),
    bad("solar-latitude-91", "latitude", "between -90 and 90", **sun(latitude=91)),
    bad("solar-latitude-nan", "latitude", "between -90 and 90", **sun(latitude=float("nan"))),
    bad("solar-latitude-missing", "latitude", "needs a latitude", **sun(latitude=None)),
    bad("solar-longitude-181", "longitude", "between -180 and 180", **sun(longitude=-181)),
    bad("solar-longitude-text", "longitude", "must be a float", **sun(longitude="east")),
    bad(
        "solar-offset-13h",
        "solar_offset",
        "between -12:00:00",
        **sun(solar_offset=timedelta(hours=13)),
    ),
    bad("solar-offset-number", "solar_offset", "a duration", **sun(solar_offset=900)),
    # timezone
    bad("tz-mars", "timezone", "Unknown time zone", timezone="Mars/Olympus"),
    bad("tz-empty", "timezone", "not an IANA time zone", timezone=""),
    bad("tz-none", "timezone", "not an IANA time zone", timezone=None),
    bad("tz-trailing-space", "timezone", "Unknown time zone", timezone="Europe/Berlin "),
    bad("tz-path-traversal", "timezone", "Unknown time zone", timezone="../../etc/passwd"),
    bad("tz-absolute-path", "timezone", "Unknown time zone", timezone="/etc/localtime"),
    bad("tz-100-chars", "timezone", "at most 64", timezone="A" * 100),
    # task
    bad("task-unknown", "task", "not a registered task", task="nope.task"),
    bad("task-os-system", "task", "not a registered task", task="os.system"),
    bad("task-subprocess-call", "task", "not a registered task", task="subprocess.call"),
    bad("task-builtins-eval", "task", "not a registered task", task="builtins.eval"),
    bad(
        "task-model-path",
        "task",
        "not a registered task",
        task="django_schedulinator.models.Schedule",
    ),
    bad("task-wrong-case", "task", "not a registered task", task="Tests.Record"),
    bad("task-padded", "task", "not a registered task", task=" tests.record"),
    bad("task-empty", "task", "cannot be blank", task=""),
    # args
    bad("args-dict", "args", "JSON list", args={"a": 1}),
    bad("args-empty-dict", "args", "JSON list", args={}),
    bad("args-json-text", "args", "JSON list", args="[1, 2]"),
    bad("args-number", "args", "JSON list", args=5),
    bad("args-none", "args", "JSON list", args=None),
    bad("args-python-set", "args", "valid JSON", args={1, 2}),
    bad("args-python-object", "args", "valid JSON", args=[object()]),
    bad("args-nan", "args", "NaN and Infinity", args=[float("nan")]),
    bad("args-too-big", "args", "MAX_PAYLOAD_BYTES", args=[HUGE]),
    # kwargs
    bad("kwargs-list", "kwargs", "JSON object", kwargs=[1]),
    bad("kwargs-empty-list", "kwargs", "JSON object", kwargs=[]),
    bad("kwargs-json-text", "kwargs", "JSON object", kwargs='{"a": 1}'),
    bad("kwargs-number", "kwargs", "JSON object", kwargs=5),
    bad("kwargs-none", "kwargs", "JSON object", kwargs=None),
    bad("kwargs-reserved-occurrence", "kwargs", "reserved", kwargs={"occurrence": 1}),
    bad("kwargs-python-set", "kwargs", "valid JSON", kwargs={"a": {1}}),
    bad("kwargs-infinity", "kwargs", "NaN and Infinity", kwargs={"a": float("inf")}),
    bad("kwargs-too-big", "kwargs", "MAX_PAYLOAD_BYTES", kwargs={"a": HUGE}),
    # interval
    bad("interval-zero", "interval", "at least", **interval(timedelta(0))),
    bad("interval-negative", "interval", "at least", **interval(timedelta(seconds=-5))),
    bad("interval-half-second", "interval", "at least", **interval(timedelta(seconds=0.5))),
    bad("interval-missing", "interval", "needs an interval", **interval(None)),
    bad("interval-int", "interval", "Enter a duration", **interval(3600)),
    bad("interval-garbage", "interval", "invalid format", **interval("soon")),
    bad("interval-overflow", "interval", "too long", **interval(timedelta(days=999_999_999))),
    # one-offs
    bad("once-missing-run-at", "run_at", "needs a time", **once(None)),
    bad("once-in-the-past", "run_at", "future", **once(PAST)),  # services.validate's
    bad("once-naive", "run_at", "with a time zone", **once(datetime(2100, 1, 1))),
    bad("once-garbage", "run_at", "invalid format", **once("tomorrow")),
    bad("once-int", "run_at", "Enter a date and time", **once(1234)),
    # kind
    bad("kind-weekly", "kind", "not a valid choice", kind="weekly"),
    bad("kind-empty", "kind", "cannot be blank", kind=""),
    # window
    bad("end-before-start", "end_at", "later than", start_at=START, end_at=START - timedelta(1)),
    bad("end-equals-start", "end_at", "later than", start_at=START, end_at=START),
    bad("start-naive", "start_at", "with a time zone", start_at=datetime(2100, 1, 1)),
    bad("start-too-late", "start_at", "too late", start_at=LAST_HOUR),
    # name
    bad("name-empty", "name", "cannot be blank", name=""),
    bad("name-only-spaces", "name", "only spaces", name="   "),
    bad("name-only-line-separator", "name", "only spaces", name="\u2028"),
    bad("name-only-zero-width-space", "name", "invisible characters", name="\u200b\u200b"),
    bad("name-nul", "name", "control characters", name="a\x00b"),
    bad("name-newline", "name", "control characters", name="a\nb"),
    bad("name-tab", "name", "control characters", name="tab\there"),
    bad("name-del", "name", "control characters", name="a\x7fb"),
    bad("name-line-separator", "name", "U+2028", name="a\u2028b"),
    bad("name-201-chars", "name", "at most 200", name="x" * 201),
    # enabled
    bad("enabled-maybe", "enabled", "either True or False", enabled="maybe"),
    # DST policies
    bad("dst-gap-sometimes", "dst_gap", "not a valid choice", dst_gap="sometimes"),
    bad("dst-gap-empty", "dst_gap", "cannot be blank", dst_gap=""),
    bad("dst-fold-third", "dst_fold", "not a valid choice", dst_fold="third"),
    bad("dst-fold-none", "dst_fold", "cannot be null", dst_fold=None),
    # cron's day rule
    bad("day-rule-and", "day_rule", "not a valid choice", day_rule="and"),
    bad("day-rule-both-never", "cron", "never matches", cron="0 0 30 2 1", day_rule="both"),
    # calendars of excluded days
    bad("calendars-unknown", "calendars", "No calendar is named nope", calendars=["nope"]),
    bad("calendars-not-a-list", "calendars", "list of calendar names", calendars="uk"),
    bad("calendars-twice", "calendars", "named twice", calendars=["a", "a"]),
    bad("calendars-bad-name", "calendars", "Not a calendar name", calendars=["a b"]),
    bad("calendars-eleven", "calendars", "At most 10", calendars=[f"c{n}" for n in range(11)]),
    bad("calendar-rule-sometimes", "calendar_rule", "not a valid choice", calendar_rule="maybe"),
    # interval anchor
    bad("anchor-on-cron", "anchor_at", "interval schedules only", anchor_at=START),
    bad(
        "anchor-naive",
        "anchor_at",
        "with a time zone",
        **interval(timedelta(hours=1)),
        anchor_at=datetime(2100, 1, 1),
    ),
    bad("anchor-int", "anchor_at", "Enter a date and time", anchor_at=5),
    # limits
    bad("max-runs-0", "max_runs", "greater than or equal to 1", max_runs=0),
    bad("max-runs-negative", "max_runs", "greater than or equal to", max_runs=-3),
    bad("max-runs-text", "max_runs", "must be an integer", max_runs="many"),
    bad("jitter-negative", "jitter", "between 0 and", jitter=timedelta(seconds=-1)),
    bad("jitter-two-days", "jitter", "between 0 and 1 day", jitter=timedelta(days=2)),
    bad("jitter-int", "jitter", "Enter a duration", jitter=30),
    # catch-up and overlap
    bad("catch-up-sometimes", "catch_up", "not a valid choice", catch_up="sometimes"),
    bad("catch-up-window-0", "catch_up_window", "at least 1 second", catch_up_window=timedelta(0)),
    bad("catch-up-window-int", "catch_up_window", "Enter a duration", catch_up_window=60),
    bad("overlap-queue", "overlap", "not a valid choice", overlap="queue"),
    bad(
        "pause-after-0",
        "pause_after_failures",
        "greater than or equal to 1",
        pause_after_failures=0,
    ),
    bad("pause-note-501", "pause_note", "at most 500", pause_note="n" * 501),
    # missed-run alerts
    bad("grace-half-second", "grace", "at least 1 second", grace=timedelta(milliseconds=500)),
    bad("grace-negative", "grace", "at least 1 second", grace=timedelta(seconds=-60)),
    bad("grace-32-days", "grace", "at most 31 days", grace=timedelta(days=32)),
    bad("grace-int", "grace", "Enter a duration", grace=300),
    bad(
        "grace-within-jitter",
        "grace",
        "longer than the jitter",
        grace=timedelta(minutes=1),
        jitter=timedelta(minutes=2),
    ),
]


# -- 2. the admin add form --------------------------------------------------------------------


def at(field: str, date: str, time: str = "00:00:00") -> dict[str, str]:
    """The two inputs of the admin's split date/time widget."""
    return {f"{field}_0": date, f"{field}_1": time}


ADMIN_CASES = [
    bad("name-empty", "name", "required", name=""),
    bad("name-only-spaces", "name", "required", name="   "),
    bad("name-nul", "name", "Null characters", name="a\x00b"),
    bad("name-newline", "name", "control characters", name="a\nb"),
    bad("name-201-chars", "name", "at most 200", name="x" * 201),
    bad("task-os-system", "task", "Select a valid choice", task="os.system"),
    bad("task-builtins-eval", "task", "Select a valid choice", task="builtins.eval"),
    bad("task-subprocess-call", "task", "Select a valid choice", task="subprocess.call"),
    bad("task-unknown", "task", "Select a valid choice", task="nope.task"),
    bad("task-empty", "task", "required", task=""),
    bad("args-object", "args", "JSON list", args='{"a": 1}'),
    bad("args-json-text", "args", "JSON list", args='"[1, 2]"'),
    bad("args-broken-json", "args", "valid JSON", args="[1, 2"),
    bad("args-empty", "args", "JSON list", args=""),
    bad("args-null", "args", "JSON list", args="null"),
    bad("args-nan", "args", "NaN and Infinity", args="[NaN]"),
    bad("args-too-big", "args", "MAX_PAYLOAD_BYTES", args=json.dumps([HUGE])),
    bad("kwargs-list", "kwargs", "JSON object", kwargs="[1]"),
    bad("kwargs-empty-list", "kwargs", "JSON object", kwargs="[]"),
    bad("kwargs-empty", "kwargs", "JSON object", kwargs=""),
    bad("kwargs-reserved-occurrence", "kwargs", "reserved", kwargs='{"occurrence": 1}'),
    bad("kwargs-infinity", "kwargs", "NaN and Infinity", kwargs='{"a": Infinity}'),
    bad("kwargs-too-big", "kwargs", "MAX_PAYLOAD_BYTES", kwargs=json.dumps({"a": HUGE})),
    bad("cron-minute-61", "cron", "Bad minute", cron="61 * * * *"),
    bad("cron-3-fields", "cron", "has 3", cron="* * *"),
    bad("cron-empty", "cron", "Enter a cron expression", cron=""),
    bad("cron-alias-reboot", "cron", "Unknown cron alias", cron="@reboot"),
    bad("tz-mars", "timezone", "Unknown time zone", timezone="Mars/Olympus"),
    bad("tz-empty", "timezone", "required", timezone=""),
    bad("tz-path-traversal", "timezone", "Unknown time zone", timezone="../../etc/passwd"),
    bad("tz-100-chars", "timezone", "at most 64", timezone="A" * 100),
    bad("kind-weekly", "kind", "Select a valid choice", kind="weekly"),
    bad("interval-zero", "interval", "at least", kind="interval", interval="0"),
    bad("interval-negative", "interval", "at least", kind="interval", interval="-5"),
    bad("interval-half-second", "interval", "at least", kind="interval", interval="0.5"),
    bad("interval-garbage", "interval", "valid duration", kind="interval", interval="soon"),
    bad("interval-missing", "interval", "needs an interval", kind="interval", interval=""),
    bad("interval-overflow", "interval", "too long", kind="interval", interval="999999999 0:0"),
    bad(
        "interval-days-out-of-range", "interval", "days", kind="interval", interval="1000000000 0:0"
    ),
    bad("once-missing-run-at", "run_at", "needs a time", kind="once"),
    bad(
        "solar-event-unknown",
        "solar_event",
        "Select a valid choice",
        kind="solar",
        solar_event="dusk",
        latitude="52.52",
        longitude="13.4",
    ),
    bad(
        "solar-latitude-95",
        "latitude",
        "between -90 and 90",
        kind="solar",
        solar_event="sunset",
        latitude="95",
        longitude="13.4",
    ),
    bad(
        "solar-longitude-missing",
        "longitude",
        "needs a longitude",
        kind="solar",
        solar_event="sunset",
        latitude="52.52",
        longitude="",
    ),
    bad(
        "solar-longitude-text",
        "longitude",
        "Enter a number",
        kind="solar",
        solar_event="sunset",
        latitude="52.52",
        longitude="east",
    ),
    bad(
        "solar-offset-13h",
        "solar_offset",
        "between -12:00:00",
        kind="solar",
        solar_event="sunset",
        latitude="52.52",
        longitude="13.4",
        solar_offset="-13:00:00",
    ),
    bad("once-in-the-past", "run_at", "future", kind="once", **at("run_at", "2020-01-01")),
    bad("once-bad-date", "run_at", "valid date", kind="once", **at("run_at", "2030-13-45")),
    bad(
        "once-bad-time", "run_at", "valid time", kind="once", **at("run_at", "2030-01-01", "25:61")
    ),
    bad(
        "end-before-start",
        "end_at",
        "later than",
        **at("start_at", "2100-01-02"),
        **at("end_at", "2100-01-01"),
    ),
    bad(
        "end-equals-start",
        "end_at",
        "later than",
        **at("start_at", "2100-01-01"),
        **at("end_at", "2100-01-01"),
    ),
    bad("start-too-late", "start_at", "too late", **at("start_at", "9999-12-31", "23:00")),
    bad("dst-gap-sometimes", "dst_gap", "Select a valid choice", dst_gap="sometimes"),
    bad("dst-fold-empty", "dst_fold", "required", dst_fold=""),
    bad("day-rule-empty", "day_rule", "required", day_rule=""),
    bad("day-rule-both-never", "cron", "never matches", cron="0 0 30 2 mon", day_rule="both"),
    bad("calendars-unknown", "calendars", "Select a valid choice", calendars="nope"),
    bad("calendar-rule-empty", "calendar_rule", "required", calendar_rule=""),
    bad("anchor-on-cron", "anchor_at", "interval schedules only", **at("anchor_at", "2026-01-01")),
    bad("max-runs-0", "max_runs", "greater than or equal to 1", max_runs="0"),
    bad("max-runs-text", "max_runs", "whole number", max_runs="many"),
    bad("jitter-two-days", "jitter", "between 0 and 1 day", jitter="2 00:00:00"),
    bad("jitter-garbage", "jitter", "valid duration", jitter="a while"),
    bad("catch-up-sometimes", "catch_up", "Select a valid choice", catch_up="sometimes"),
    bad("catch-up-window-0", "catch_up_window", "at least 1 second", catch_up_window="0"),
    bad("overlap-queue", "overlap", "Select a valid choice", overlap="queue"),
    bad(
        "pause-after-0",
        "pause_after_failures",
        "greater than or equal to 1",
        pause_after_failures="0",
    ),
    bad("grace-0", "grace", "at least 1 second", grace="0"),
    bad("grace-32-days", "grace", "at most 31 days", grace="32 00:00:00"),
    bad("grace-garbage", "grace", "valid duration", grace="a while"),
    bad("grace-within-jitter", "grace", "longer than the jitter", grace="60", jitter="120"),
]


# -- 3. management command options ------------------------------------------------------------


def option(case_id: str, command: str, named: str, fragment: str, *argv: str, **kw: Any) -> Any:
    """One command case: argv (parsed like a shell's) and/or options given as call_command()
    keywords (which skip argparse), and what the CommandError must say."""
    return pytest.param(command, argv, kw, named, fragment, id=case_id)


RUN = "run_scheduler"


REBUILD = "rebuild_due_index"


PRUNE = "prune_runs"
AGE = ("--older-than", "30d")
STATUS = "scheduler_status"


COMMAND_CASES = [
    option("fill-years-garbage", "fill_calendars", "--years", "Enter the years", "--years", "20x6"),
    option("fill-unknown", "fill_calendars", "nope", "No calendar is named", "nope"),
    option(
        "fill-ical-two",
        "fill_calendars",
        "--icalendar",
        "fills one calendar",
        "a",
        "b",
        "--icalendar",
        "x.ics",
    ),
    option(
        "fill-ical-missing",
        "fill_calendars",
        "x.ics",
        "Cannot read",
        "a",
        "--icalendar",
        "/nonexistent/x.ics",
    ),
    option("batch-size-0", RUN, "--batch-size", "at least 1", "--batch-size", "0"),
    option("batch-size-negative", RUN, "--batch-size", "at least 1", "--batch-size", "-5"),
    option("batch-size-too-big", RUN, "--batch-size", "at most 5000", "--batch-size", "5001"),
    option("batch-size-nan", RUN, "--batch-size", "not a whole number", "--batch-size", "nan"),
    option("batch-size-fraction", RUN, "--batch-size", "not a whole number", "--batch-size=1.5"),
    option("lease-0", RUN, "--lease", "positive number", "--lease", "0"),
    option("lease-negative", RUN, "--lease", "positive number", "--lease", "-1"),
    option("lease-nan", RUN, "--lease", "positive number", "--lease", "nan"),
    option("lease-inf", RUN, "--lease", "positive number", "--lease", "inf"),
    option("lease-text", RUN, "--lease", "not a number", "--lease", "soon"),
    option("max-runs-0", RUN, "--max-runs", "at least 1", "--max-runs", "0"),
    option("max-runs-negative", RUN, "--max-runs", "at least 1", "--max-runs", "-1"),
    option("max-runs-fraction", RUN, "--max-runs", "not a whole number", "--max-runs", "2.5"),
    option("max-seconds-0", RUN, "--max-seconds", "positive number", "--max-seconds", "0"),
    option("max-seconds-nan", RUN, "--max-seconds", "positive number", "--max-seconds", "nan"),
    option("max-seconds-minus-inf", RUN, "--max-seconds", "positive number", "--max-seconds=-inf"),
    option("max-seconds-missing-value", RUN, "--max-seconds", "expected one", "--max-seconds"),
    option("worker-id-empty", RUN, "--worker-id", "1-200 printable", "--worker-id", ""),
    option("worker-id-newline", RUN, "--worker-id", "1-200 printable", "--worker-id", "a\nb"),
    option("worker-id-201-chars", RUN, "--worker-id", "1-200 printable", "--worker-id", "w" * 201),
    option("unknown-option", RUN, "--bogus", "unrecognized arguments", "--bogus"),
    option("metrics-port-negative", RUN, "--metrics-port", "0-65535", "--metrics-port=-1"),
    option("metrics-port-too-big", RUN, "--metrics-port", "0-65535", "--metrics-port", "65536"),
    option("metrics-port-text", RUN, "--metrics-port", "not a port", "--metrics-port", "web"),
    option("metrics-addr-alone", RUN, "--metrics-addr", "needs --metrics", "--metrics-addr=::"),
    option(
        "metrics-addr-not-here",
        RUN,
        "192.0.2.1:0",
        "Cannot assign requested address",
        *("--metrics-port", "0", "--metrics-addr", "192.0.2.1"),
    ),
    option(
        "metrics-addr-empty",
        RUN,
        "--metrics-addr",
        "host name or an IP",
        *("--metrics-port", "0", "--metrics-addr", " "),
    ),
    option("kw-batch-size-0", RUN, "batch_size", "1-5000", batch_size=0),
    option("kw-batch-size-too-big", RUN, "batch_size", "1-5000", batch_size=10_000),
    option("kw-batch-size-text", RUN, "--batch-size", "whole number", batch_size="10"),
    option("kw-batch-size-bool", RUN, "--batch-size", "whole number", batch_size=True),
    option("kw-lease-nan", RUN, "lease", "must be positive", lease=float("nan")),
    option("kw-lease-negative", RUN, "lease", "must be positive", lease=-1.0),
    option("kw-lease-text", RUN, "--lease", "must be a number", lease="soon"),
    option("kw-max-runs-0", RUN, "max_runs", "must be positive", max_runs=0),
    option("kw-max-seconds-inf", RUN, "max_seconds", "must be positive", max_seconds=float("inf")),
    option("kw-worker-id-number", RUN, "--worker-id", "1-200 printable", worker_id=7),
    option("kw-metrics-port-text", RUN, "--metrics-port", "whole number", metrics_port="9108"),
    option("kw-metrics-port-too-big", RUN, "--metrics-port", "0-65535", metrics_port=70_000),
    option(
        "kw-metrics-addr-number", RUN, "--metrics-addr", "host name", metrics_port=0, metrics_addr=7
    ),
    option("chunk-size-0", REBUILD, "--chunk-size", "at least 1", "--chunk-size", "0"),
    option("chunk-size-negative", REBUILD, "--chunk-size", "at least 1", "--chunk-size", "-3"),
    option("chunk-size-too-big", REBUILD, "--chunk-size", "at most 50000", "--chunk-size", "50001"),
    option(
        "chunk-size-text", REBUILD, "--chunk-size", "not a whole number", "--chunk-size", "lots"
    ),
    option("kw-chunk-size-0", REBUILD, "--chunk-size", "1 to 50000", chunk_size=0),
    option("kw-chunk-size-negative", REBUILD, "--chunk-size", "1 to 50000", chunk_size=-5),
    option("kw-chunk-size-text", REBUILD, "--chunk-size", "whole number", chunk_size="100"),
    option(
        "dry-run-with-reset", REBUILD, "--dry-run and --reset", "cannot", "--dry-run", "--reset"
    ),
    option("max-lag-negative", STATUS, "--max-lag", "0 or more", "--max-lag=-1"),
    option("max-lag-nan", STATUS, "--max-lag", "0 or more", "--max-lag", "nan"),
    option("max-lag-inf", STATUS, "--max-lag", "0 or more", "--max-lag", "inf"),
    option("max-lag-text", STATUS, "--max-lag", "not a number", "--max-lag", "soon"),
    option("kw-max-lag-text", STATUS, "--max-lag", "0 or more", max_lag="60"),
    option("kw-max-lag-negative", STATUS, "--max-lag", "0 or more", max_lag=-1),
    option("kw-max-lag-bool", STATUS, "--max-lag", "0 or more", max_lag=True),
    option("older-than-no-unit", PRUNE, "--older-than", "'30' is not an age", "--older-than", "30"),
    option("older-than-unit", PRUNE, "--older-than", "(s, m, h or d)", "--older-than", "30x"),
    option("older-than-fraction", PRUNE, "--older-than", "not an age", "--older-than", "1.5d"),
    option("older-than-negative", PRUNE, "--older-than", "not an age", "--older-than=-3d"),
    option(
        "older-than-0", PRUNE, "--older-than", "from 1 second to 36500 days", "--older-than", "0s"
    ),
    option(
        "older-than-huge", PRUNE, "--older-than", "from 1 second", "--older-than", "9" * 40 + "d"
    ),
    option("keep-last-0", PRUNE, "--keep-last", "at least 1", *AGE, "--keep-last", "0"),
    option("keep-last-too-big", PRUNE, "--keep-last", "at most 1000", *AGE, "--keep-last", "1001"),
    option(
        "keep-last-text", PRUNE, "--keep-last", "not a whole number", *AGE, "--keep-last", "all"
    ),
    option(
        "prune-batch-too-big", PRUNE, "--batch-size", "at most 10000", *AGE, "--batch-size", "10001"
    ),
    option(
        "changes-older-than-year",
        PRUNE,
        "--changes-older-than",
        "'1y' is not an age",
        *AGE,
        "--changes-older-than",
        "1y",
    ),
    option("kw-keep-last-0", PRUNE, "keep_last", "from 1 to 1000, got 0", *AGE, keep_last=0),
    option("kw-keep-last-text", PRUNE, "keep_last", "got '3'", *AGE, keep_last="3"),
    option("kw-prune-batch-0", PRUNE, "batch_size", "from 1 to 10000", *AGE, batch_size=0),
    option(
        "kw-changes-text",
        PRUNE,
        "--changes-older-than",
        "'soon' is not an age",
        *AGE,
        changes_older_than="soon",
    ),
    option(
        "kw-changes-number",
        PRUNE,
        "--changes-older-than",
        "an age such as 30d, got 30",
        *AGE,
        changes_older_than=30,
    ),
    option(
        "kw-changes-negative",
        PRUNE,
        "--changes-older-than",
        "must be positive",
        *AGE,
        changes_older_than=-timedelta(days=1),
    ),
]


SUBPROCESS_CASES = [
    pytest.param(
        [RUN, "--batch-size", "0"], {}, ["--batch-size", "at least 1"], id="run-batch-size-0"
    ),
    pytest.param([RUN, "--lease", "nan"], {}, ["--lease", "positive number"], id="run-lease-nan"),
    pytest.param(
        [RUN, "--max-runs", "-1"], {}, ["--max-runs", "at least 1"], id="run-max-runs-negative"
    ),
    pytest.param(
        [RUN, "--once", "--worker-id", ""], {}, ["--worker-id", "printable"], id="run-worker-id"
    ),
    pytest.param(
        [RUN, "--metrics-port", "65536"], {}, ["--metrics-port", "0-65535"], id="run-metrics-port"
    ),
    pytest.param(
        [RUN, "--metrics-addr", "0.0.0.0"], {}, ["needs --metrics-port"], id="run-metrics-addr"
    ),
    pytest.param(
        [REBUILD, "--chunk-size", "0"], {}, ["--chunk-size", "at least 1"], id="rebuild-chunk-0"
    ),
    pytest.param(
        [REBUILD, "--dry-run", "--reset"], {}, ["--dry-run and --reset"], id="rebuild-dry-reset"
    ),
    pytest.param(
        ["import_schedules", "--from", "celery-beat-schedule", "--grace", "soon"],
        {},
        ["argument --grace", "'soon' is not a duration"],
        id="import-grace-soon",
    ),
    pytest.param(
        ["schedule", "grace", "nightly", "soon"],
        {},
        ["'soon' is not a duration"],
        id="schedule-grace-soon",
    ),
    pytest.param(
        [PRUNE, "--older-than", "30"], {}, ["--older-than", "is not an age"], id="prune-age"
    ),
    pytest.param(
        [RUN, "--once"],
        {"SCHEDULINATOR_TEST_LEASE": "nan"},
        ["schedulinator.E001", "SCHEDULINATOR['LEASE_SECONDS']", "finite"],
        id="run-setting-lease-nan",
    ),
]


# -- 4. settings, through the system checks ---------------------------------------------------


NOT_A_DICT = object()  # marks the cases that replace SCHEDULINATOR itself


def setting(case_id: str, key: str, value: Any, fragment: str, check_id: str = "E001") -> Any:
    return pytest.param(key, value, fragment, f"schedulinator.{check_id}", id=case_id)


SETTINGS_CASES = [
    setting("batch-size-0", "BATCH_SIZE", 0, "positive integer"),
    setting("batch-size-too-big", "BATCH_SIZE", 5001, "at most 5000"),
    setting("batch-size-bool", "BATCH_SIZE", True, "positive integer"),
    setting("batch-size-text", "BATCH_SIZE", "500", "positive integer"),
    setting("batch-size-float", "BATCH_SIZE", 1.5, "positive integer"),
    setting("lease-negative", "LEASE_SECONDS", -1, "positive, finite"),
    setting("lease-nan", "LEASE_SECONDS", float("nan"), "positive, finite"),
    setting("lease-inf", "LEASE_SECONDS", float("inf"), "positive, finite"),
    setting("lease-text", "LEASE_SECONDS", "soon", "positive, finite"),
    setting("key-prefix-open-brace", "KEY_PREFIX", "a{b", "no braces"),
    setting("key-prefix-close-brace", "KEY_PREFIX", "a}b", "no braces"),
    setting("key-prefix-space", "KEY_PREFIX", "a b", "no braces or spaces"),
    setting("key-prefix-newline", "KEY_PREFIX", "a\nb", "1-64 characters"),
    setting("key-prefix-star", "KEY_PREFIX", "a*", "1-64 characters"),
    setting("key-prefix-question-mark", "KEY_PREFIX", "a?b", "1-64 characters"),
    setting("key-prefix-non-ascii", "KEY_PREFIX", "zürich", "1-64 characters"),
    setting("key-prefix-empty", "KEY_PREFIX", "", "non-empty string"),
    setting("key-prefix-number", "KEY_PREFIX", 7, "non-empty string"),
    setting("key-prefix-65-chars", "KEY_PREFIX", "k" * 65, "1-64 characters"),
    setting("max-payload-0", "MAX_PAYLOAD_BYTES", 0, "positive integer"),
    setting("max-payload-too-big", "MAX_PAYLOAD_BYTES", 17 * 1024 * 1024, "at most"),
    setting("task-timeout-0", "TASK_TIMEOUT_SECONDS", 0, "positive, finite"),
    setting("reconcile-batch-0", "RECONCILE_BATCH_SIZE", 0, "positive integer"),
    setting("reconcile-batch-too-big", "RECONCILE_BATCH_SIZE", 50_001, "at most 50000"),
    setting("reconcile-seconds-nan", "RECONCILE_SECONDS", float("nan"), "positive, finite"),
    setting("lookback-negative", "RECONCILE_LOOKBACK_SECONDS", -1, "positive, finite"),
    setting("reconcile-max-seconds-0", "RECONCILE_MAX_SECONDS", 0, "positive, finite"),
    setting("drift-check-0", "DRIFT_CHECK_SECONDS", 0, "positive, finite"),
    setting("drift-sample-0", "DRIFT_SAMPLE_SIZE", 0, "positive integer"),
    setting("log-stats-inf", "LOG_STATS_SECONDS", float("inf"), "positive, finite"),
    setting("max-sleep-0", "MAX_SLEEP_SECONDS", 0, "positive, finite"),
    setting("rebuild-chunk-0", "REBUILD_CHUNK_SIZE", 0, "positive integer"),
    setting("inline-workers-too-many", "INLINE_MAX_WORKERS", 257, "at most 256"),
    setting("tasks-module-empty", "TASKS_MODULE", "", "non-empty string"),
    setting("cache-alias-empty", "CACHE_ALIAS", "", "non-empty string"),
    setting("cache-alias-unknown", "CACHE_ALIAS", "nope", "not in CACHES", "E002"),
    setting(
        "dispatchers-os-system",
        "DISPATCHERS",
        {"default": {"BACKEND": "os.system"}},
        "not a BaseDispatcher",
        "E004",
    ),
    setting(
        "dispatchers-missing",
        "DISPATCHERS",
        {"default": {"BACKEND": "no.such.Dispatcher"}},
        "cannot be imported",
        "E004",
    ),
    setting("dispatchers-empty", "DISPATCHERS", {"x": {"BACKEND": ""}}, "must be a dotted path"),
    setting("dispatchers-none", "DISPATCHERS", None, "must be a dict of aliases"),
    setting("dispatcher-replaced", "DISPATCHER", "my.Dispatcher", "replaced by DISPATCHERS"),
    setting("commands-list", "COMMANDS", ["clearsessions"], "is a list; it is now a dict"),
    setting("commands-text", "COMMANDS", "clearsessions", "must be a dict of management command"),
    setting("commands-entry-list", "COMMANDS", {"dumpdata": ["auth"]}, "must be a dict of what"),
    setting("commands-unknown-key", "COMMANDS", {"dumpdata": {"arg": []}}, "unknown keys arg"),
    setting("commands-args-text", "COMMANDS", {"dumpdata": {"args": "auth"}}, "a list of text"),
    setting(
        "commands-option-in-args", "COMMANDS", {"dumpdata": {"args": ["-o"]}}, "starts with '-'"
    ),
    setting(
        "commands-short-option",
        "COMMANDS",
        {"dumpdata": {"options": {"-o": ["x.json"]}}},
        "name each option in full",
    ),
    setting(
        "commands-option-with-value",
        "COMMANDS",
        {"dumpdata": {"options": {"--indent=2": True}}},
        "name each option in full",
    ),
    setting(
        "commands-no-values",
        "COMMANDS",
        {"dumpdata": {"options": {"--indent": []}}},
        "True (a flag) or a non-empty list",
    ),
    setting(
        "commands-flag-false",
        "COMMANDS",
        {"dumpdata": {"options": {"--natural-foreign": False}}},
        "True (a flag) or a non-empty list",
    ),
    setting(
        "commands-keep-output-text",
        "COMMANDS",
        {"dumpdata": {"keep_output": "no"}},
        "True or False",
    ),
    setting("catch-up-sometimes", "CATCH_UP", "sometimes", "one of skip, latest, all"),
    setting("catch-up-none", "CATCH_UP", None, "one of skip, latest, all"),
    setting("catch-up-window-0", "CATCH_UP_WINDOW_SECONDS", 0, "positive, finite"),
    setting("catch-up-max-runs-0", "CATCH_UP_MAX_RUNS", 0, "positive integer"),
    setting("catch-up-max-runs-too-big", "CATCH_UP_MAX_RUNS", 5001, "at most 5000"),
    setting("misfire-grace-nan", "MISFIRE_GRACE_SECONDS", float("nan"), "positive, finite"),
    setting("max-skips-negative", "MAX_SKIPS_RECORDED", -1, "from 0 to 5000"),
    setting("max-skips-float", "MAX_SKIPS_RECORDED", 1.5, "from 0 to 5000"),
    setting("max-backfill-0", "MAX_BACKFILL_RUNS", 0, "positive integer"),
    setting("missed-check-0", "MISSED_CHECK_SECONDS", 0, "positive, finite"),
    setting("notify-text", "NOTIFY", "mail", "must be None or a dict"),
    setting("notify-unknown-key", "NOTIFY", {"BACKENDS": "x"}, "must be None or a dict"),
    setting("notify-backend-empty", "NOTIFY", {"BACKEND": ""}, "must be a dotted path"),
    setting("notify-options-list", "NOTIFY", {"OPTIONS": []}, "['OPTIONS'] must be a dict"),
    setting("notify-event-unknown", "NOTIFY", {"EVENTS": ["late"]}, "['EVENTS'] must be a list"),
    setting("notify-events-text", "NOTIFY", {"EVENTS": "missed"}, "['EVENTS'] must be a list"),
    setting("notify-base-url-path", "NOTIFY", {"BASE_URL": "/admin"}, "http:// or https://"),
    setting("notify-rate-0", "NOTIFY_MESSAGES_PER_MINUTE", 0, "positive integer"),
    setting("notify-rate-too-big", "NOTIFY_MESSAGES_PER_MINUTE", 10_001, "at most 10000"),
    setting("notify-digest-float", "NOTIFY_DIGEST_SIZE", 2.5, "positive integer"),
    setting("notify-digest-too-big", "NOTIFY_DIGEST_SIZE", 1001, "at most 1000"),
    setting("notify-delivery-0", "NOTIFY_DELIVERY_SECONDS", 0, "positive, finite"),
    setting(
        "notify-backend-os-system", "NOTIFY", {"BACKEND": "os.system"}, "not a", check_id="E050"
    ),
    setting(
        "notify-backend-missing",
        "NOTIFY",
        {"BACKEND": "no.such.Notifier"},
        "cannot be imported",
        check_id="E050",
    ),
    setting(
        "notify-mail-unknown-option",
        "NOTIFY",
        {"OPTIONS": {"TO": "ops@example.com"}},
        "'TO' is not an option of MailNotifier",
        check_id="E051",
    ),
    setting(
        "notify-webhook-no-target",
        "NOTIFY",
        {"BACKEND": "django_schedulinator.operations.notifiers.WebhookNotifier", "OPTIONS": {}},
        "'DISPATCHER' is required",
        check_id="E051",
    ),
    setting(
        "notify-webhook-unknown-alias",
        "NOTIFY",
        {
            "BACKEND": "django_schedulinator.operations.notifiers.WebhookNotifier",
            "OPTIONS": {"DISPATCHER": "hooks", "TARGET": "ops"},
        },
        "'hooks' is not a dispatcher alias",
        check_id="E051",
    ),
    setting("sentry-crons-text", "SENTRY_CRONS", "all", "must be False, True"),
    setting("sentry-crons-unknown-key", "SENTRY_CRONS", {"SLUGS": {}}, "unknown keys SLUGS"),
    setting("sentry-crons-one-name", "SENTRY_CRONS", {"SCHEDULES": "nightly"}, "a list of"),
    setting("sentry-crons-empty-pattern", "SENTRY_CRONS", {"EXCLUDE": [""]}, "a list of"),
    setting(
        "sentry-crons-schedule-config",
        "SENTRY_CRONS",
        {"MONITOR_CONFIG": {"schedule": "0 * * * *"}},
        "['MONITOR_CONFIG']['schedule'] is not taken",
    ),
    setting(
        "sentry-crons-margin-0",
        "SENTRY_CRONS",
        {"MONITOR_CONFIG": {"checkin_margin": 0}},
        "from 1 to 40320",
    ),
    setting(
        "sentry-crons-margin-float",
        "SENTRY_CRONS",
        {"MONITOR_CONFIG": {"checkin_margin": 1.5}},
        "from 1 to 40320",
    ),
    setting("sentry-crons-owner-empty", "SENTRY_CRONS", {"MONITOR_CONFIG": {"owner": ""}}, "team:"),
    setting("run-retention-0", "RUN_RETENTION_SECONDS", 0, "None (keep everything) or a number"),
    setting("run-retention-text", "RUN_RETENTION_SECONDS", "30d", "None (keep everything)"),
    setting("run-retention-nan", "RUN_RETENTION_SECONDS", float("nan"), "None (keep everything)"),
    setting("change-retention-bool", "CHANGE_RETENTION_SECONDS", True, "None (keep everything)"),
    setting("change-retention-huge", "CHANGE_RETENTION_SECONDS", 10**12, "(a century)"),
    setting("keep-last-0", "RUN_KEEP_LAST", 0, "positive integer"),
    setting("keep-last-too-big", "RUN_KEEP_LAST", 1001, "at most 1000"),
    setting("prune-batch-too-big", "PRUNE_BATCH_SIZE", 10_001, "at most 10000"),
    setting("prune-seconds-0", "PRUNE_SECONDS", 0, "positive, finite"),
    setting("prune-max-seconds-negative", "PRUNE_MAX_SECONDS", -1, "positive, finite"),
    setting("not-a-dict-list", NOT_A_DICT, ["BATCH_SIZE", 10], "must be a dict, got list"),
    setting("not-a-dict-none", NOT_A_DICT, None, "must be a dict, got NoneType"),
]


# -- positive controls: odd names are data, never part of a Redis key or script ---------------


ODD_NAMES = [
    pytest.param("Bericht über Zürich 📅", id="unicode"),
    pytest.param("{tag}", id="hash-tag-braces"),
    pytest.param("a*b?", id="glob-characters"),
    pytest.param("--[[x]]", id="lua-comment"),
    pytest.param("'; DROP TABLE schedulinator_schedule; --", id="sql-quote"),
    pytest.param("%s %d %(name)s", id="format-specifiers"),
]


# -- JSON nested deeper than Python's json (and the databases) can take -----------------------


DEEP = 50_000


def deep_value(field: str, levels: int) -> Any:
    value: Any = [] if field == "args" else {}
    for _ in range(levels - 1):
        value = [value] if field == "args" else {"a": value}
    return value
