"""The management commands (the system checks are in test_checks.py)."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_schedulinator import resync_schedules, signals
from django_schedulinator.index.due import SET, Change, DueIndex
from django_schedulinator.models import Run, Schedule, ScheduleChange
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import to_ms

from .support.processes import ROOT, subprocess_env
from .support.rejections import COMMAND_CASES, SUBPROCESS_CASES, assert_nothing_written
from .support.schedules import make_due, make_schedule
from .support.simulation import Simulation
from .support.walks import NEVER, NEVER_DENSE

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


def snapshot(index: DueIndex) -> tuple[list, list, bool]:
    client = index.client
    return (
        client.zrange(index.due_key, 0, -1, withscores=True),
        sorted(client.hgetall(index.revisions_key).items()),
        index.is_built(),
    )


@pytest.fixture
def drifted(index: DueIndex) -> dict[str, int]:
    """An index with one of each kind of drift."""
    ok = make_schedule()
    wrong = make_schedule()
    missing = make_due(1)[0]  # bulk-created: never synced
    paused = make_schedule()
    Schedule.objects.filter(pk=paused.pk).update(enabled=False)  # no signal: entry stays
    index.apply([Change(wrong.pk, wrong.revision, SET, 1_000)])
    index.apply([Change(987654321, 1, SET, 5_000)])  # a row that does not exist
    return {
        "ok": ok.pk,
        "wrong": wrong.pk,
        "missing": missing,
        "paused": paused.pk,
        "orphan": 987654321,
    }


def test_dry_run_reports_counts_and_changes_nothing(index: DueIndex, drifted) -> None:
    before = snapshot(index)
    out = io.StringIO()
    call_command("rebuild_due_index", "--dry-run", "--no-progress", stdout=out)
    text = out.getvalue()
    assert "Would scan 4 schedules" in text
    assert "add 1, fix 1, remove 1, remove orphans 1, unchanged 1" in text
    assert f"orphans: schedule ids [{drifted['orphan']}]" in text
    assert snapshot(index) == before


def test_rebuild_fixes_every_kind_of_drift_and_is_idempotent(index: DueIndex, drifted) -> None:
    call_command("rebuild_due_index", "--no-progress", stdout=io.StringIO())
    expected = {
        pk: to_ms(next_run_at)
        for pk, next_run_at in Schedule.objects.filter(enabled=True).values_list(
            "pk", "next_run_at"
        )
    }
    due = {int(m): int(s) for m, s in index.client.zrange(index.due_key, 0, -1, withscores=True)}
    assert due == expected
    assert index.is_built()

    out = io.StringIO()
    call_command("rebuild_due_index", "--no-progress", stdout=out)
    assert "add 0, fix 0, remove 0, remove orphans 0, unchanged 4" in out.getvalue()


def test_reset_rebuilds_an_index_holding_newer_revisions(index: DueIndex) -> None:
    schedule = make_schedule()
    # As after restoring the database from a backup: Redis knows a later revision.
    index.apply([Change(schedule.pk, 999, SET, 1_000)])
    err = io.StringIO()
    call_command("rebuild_due_index", "--dry-run", stdout=io.StringIO(), stderr=err)
    assert "1 entries would not be written" in err.getvalue()
    assert "--reset" in err.getvalue()
    err = io.StringIO()
    call_command("rebuild_due_index", "--no-progress", stdout=io.StringIO(), stderr=err)
    assert "1 entries were not written" in err.getvalue()
    assert "--reset" in err.getvalue()
    call_command("rebuild_due_index", "--reset", "--no-progress", stdout=io.StringIO())
    assert index.scores([schedule.pk])[schedule.pk] == to_ms(schedule.next_run_at)


def test_a_second_rebuild_is_refused_while_one_holds_the_lock(index: DueIndex) -> None:
    lock = index.control.rebuild_lock(30)
    assert lock.acquire(blocking=False)
    try:
        with pytest.raises(CommandError, match="Another rebuild"):
            call_command("rebuild_due_index", "--no-progress", stdout=io.StringIO())
    finally:
        lock.release()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-size", "0"], "must be at least 1"),
        (["--batch-size", "100000"], "at most 5000"),
        (["--batch-size", "ten"], "not a whole number"),
        (["--lease", "-3"], "positive number"),
        (["--lease", "nan"], "positive number"),
        (["--max-seconds", "0"], "positive number"),
        (["--max-runs", "-1"], "must be at least 1"),
        (["--worker-id", ""], "--worker-id"),
    ],
)
def test_run_scheduler_rejects_bad_options(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("run_scheduler", *argv)


def test_rebuild_rejects_dry_run_with_reset() -> None:
    with pytest.raises(CommandError, match="cannot be combined"):
        call_command("rebuild_due_index", "--dry-run", "--reset")


def test_run_scheduler_once_fires_what_is_due(index: DueIndex) -> None:
    ids = make_due(5)
    resync_schedules(ids)
    call_command("run_scheduler", "--once", verbosity=0)
    assert Schedule.objects.filter(run_count=1).count() == 5


def test_the_command_a_check_hint_prints_runs_as_printed(
    index: DueIndex, key_prefix: str, tmp_path: Path
) -> None:
    # The user is in a directory of their own, their virtualenv not activated: the hint must
    # name this interpreter and this manage.py, not "manage.py" or "python".
    make_schedule()  # a schedule the index, not built, keeps from firing: W011 says so
    env = subprocess_env(key_prefix)  # DJANGO_SETTINGS_MODULE=tests.settings
    check = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check", "--database", "default"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr
    printed = re.search(r"Run `([^`]+)` \(run_scheduler", check.stderr)
    assert printed, check.stderr
    assert printed[1].endswith("manage.py rebuild_due_index"), printed[1]

    rebuild = subprocess.run(
        printed[1], shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert rebuild.returncode == 0, rebuild.stdout + rebuild.stderr
    assert index.is_built()


@pytest.fixture
def scheduler_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The records of the package logger, whose level run_scheduler sets from -v (and which
    is put back after the test)."""
    package = logging.getLogger("django_schedulinator")
    level = package.level
    yield caplog
    package.setLevel(level)


@pytest.mark.parametrize("verbosity", [1, 2])
def test_run_scheduler_summarizes_what_it_fired_and_lists_occurrences_at_v2(
    index: DueIndex, settings, scheduler_logs: pytest.LogCaptureFixture, verbosity: int
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "LOG_STATS_SECONDS": 0.001}
    names = sorted(Schedule.objects.get(pk=pk).name for pk in make_due(3))

    call_command("run_scheduler", "--once", "--worker-id", "w1", verbosity=verbosity)

    messages = [r.getMessage() for r in scheduler_logs.records]
    summaries = [m for m in messages if m.startswith("Scheduler w1: fired ")]
    # At the default verbosity: a periodic line that says what was fired.
    assert summaries, messages
    assert summaries[-1].startswith("Scheduler w1: fired 3 (+3 in the last "), summaries
    fired = sorted(m.split()[1] for m in messages if m.startswith("Fired "))
    # One line per occurrence, at -v 2 only.
    assert fired == (names if verbosity == 2 else []), messages


def test_the_summary_of_a_once_run_counts_what_its_last_commit_fired(
    index: DueIndex, settings, scheduler_logs: pytest.LogCaptureFixture
) -> None:
    """The batch commits on the commit stage's thread (pipeline.py) while the loop goes on:
    a slow commit ended after the pass's summary line, which said "fired 0"."""
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "LOG_STATS_SECONDS": 0.001}
    make_due(3)

    def slow_commit(**kwargs: object) -> None:  # sent by the commit, before it returns
        time.sleep(0.1)

    signals.occurrence_fired.connect(slow_commit)
    try:
        call_command("run_scheduler", "--once", "--worker-id", "w1")
    finally:
        signals.occurrence_fired.disconnect(slow_commit)

    messages = [r.getMessage() for r in scheduler_logs.records]
    summaries = [m for m in messages if m.startswith("Scheduler w1: fired ")]
    assert summaries, messages
    assert summaries[-1].startswith("Scheduler w1: fired 3 (+3 in the last "), summaries


@pytest.mark.parametrize("verbosity", [0, 1])
def test_run_scheduler_logs_each_failed_run_once_and_counts_failures(
    index: DueIndex, settings, scheduler_logs: pytest.LogCaptureFixture, verbosity: int
) -> None:
    """A task that raised logged nothing from run_scheduler at any verbosity, and the summary
    had no failed count (issue 35, item 8): each failed run is logged once, at WARNING, with
    its schedule, its key and what its error says; the summary counts the failures."""
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "LOG_STATS_SECONDS": 0.001}
    failing = make_schedule(
        "nightly-report", task="tests.boom", next_run_at=timezone.now() - timedelta(seconds=1)
    )
    make_schedule(next_run_at=timezone.now() - timedelta(seconds=1))

    call_command("run_scheduler", "--once", "--worker-id", "w1", verbosity=verbosity)

    run = Run.objects.get(schedule=failing)
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("Traceback (most recent call last)")
    failures = [r for r in scheduler_logs.records if "failed:" in r.getMessage()]
    assert [(r.levelno, r.name, r.getMessage()) for r in failures] == [
        (
            logging.WARNING,
            "django_schedulinator.outcomes",
            f"Run of 'nightly-report' (key {run.idempotency_key}) failed: RuntimeError: boom",
        )
    ]
    stopped = [r.getMessage() for r in scheduler_logs.records if "stopped:" in r.getMessage()]
    if verbosity:
        assert "'fired': 2" in stopped[-1], stopped
        assert "'failed': 1" in stopped[-1], stopped


def test_the_summary_line_counts_failed_runs(
    index: DueIndex, scheduler_logs: pytest.LogCaptureFixture
) -> None:
    """The periodic summary says how many runs failed, beside what fired and was missed."""
    make_schedule(task="tests.boom", next_run_at=timezone.now() - timedelta(seconds=1))
    make_schedule(next_run_at=timezone.now() - timedelta(seconds=1))
    worker = Worker(once=True, worker_id="w1", index=index)
    worker.run()  # its recorder has written every outcome when it returns
    assert worker.counters.failed == 1
    scheduler_logs.clear()
    with scheduler_logs.at_level(logging.INFO, logger="django_schedulinator"):
        worker.chores._log_summary(time.monotonic())
    [line] = [r.getMessage() for r in scheduler_logs.records]
    assert re.fullmatch(
        r"Scheduler w1: fired 2 \(\+2 in the last \d+ s\), claimed 2, failed 1\.", line
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"lease": -1.0}, "lease_seconds"),
        ({"max_runs": 0}, "max_runs"),
    ],
)
def test_run_scheduler_validates_options_given_through_call_command(options, message) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("run_scheduler", **options)


@pytest.mark.parametrize(("value", "message"), [("0", "at least 1"), ("50001", "at most 50000")])
def test_rebuild_rejects_bad_chunk_sizes(value: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("rebuild_due_index", "--chunk-size", value)


# -- manage.py schedule, on a controlled clock (tests/support/simulation.py) ---------------------


def test_the_schedule_command(sim: Simulation, capsys: pytest.CaptureFixture[str]) -> None:
    schedule = make_schedule(
        name="nightly", kind="cron", cron="30 2 * * *", timezone="Europe/Berlin"
    )
    call_command("schedule", "preview", "nightly", "--count", "2")
    out = capsys.readouterr().out
    assert "At 02:30 (Europe/Berlin)" in out
    assert "2026-03-29 03:30:00 CEST" in out
    assert "does not exist" in out

    call_command("schedule", "pause", "nightly", "--note", "upgrade")
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    call_command("schedule", "resume", str(schedule.pk))
    assert Schedule.objects.get(pk=schedule.pk).enabled
    call_command("schedule", "run-now", "nightly")
    assert Run.objects.filter(trigger="run_now").count() == 1
    call_command("schedule", "backfill", "nightly", "--from", "2026-03-20T00:00", "--to",
                 "2026-03-22T00:00", "--dry-run")  # fmt: skip
    assert "Would queue 2 new" in capsys.readouterr().out

    call_command("schedule", "grace", "nightly", "PT30M")
    assert Schedule.objects.get(pk=schedule.pk).grace == timedelta(minutes=30)
    assert capsys.readouterr().out == "nightly: grace 0:30:00.\n"
    changed = ScheduleChange.objects.filter(schedule=schedule, source="command").order_by("-pk")
    assert changed[0].changes["grace"] == [None, 1800.0]
    Schedule.objects.filter(pk=schedule.pk).update(
        missed_at=datetime(2026, 3, 29, 0, 30, tzinfo=UTC)
    )
    call_command("schedule", "grace", "nightly")  # shows it
    assert capsys.readouterr().out == (
        "nightly: grace 0:30:00.\nLatest occurrence missed: 2026-03-29 01:30:00 CET.\n"
    )
    call_command("schedule", "grace", "nightly", "off")
    assert Schedule.objects.get(pk=schedule.pk).grace is None


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["preview", "no-such-schedule"], "No schedule is named 'no-such-schedule'"),
        (["backfill", "nightly", "--from", "yesterday", "--to", "2026-03-20T00:00"],
         "--from 'yesterday' is not an ISO 8601 date and time"),
        (["backfill", "nightly", "--from", "2026-03-20T00:00", "--to", "2026-04-20T00:00"],
         "must not be after now"),
        (["preview", "nightly", "--count", "5000"], "--count must be at most 1000"),
        (["pause", "nightly", "--note", "n" * 501],
         "pause_note: Ensure this value has at most 500"),
        (["grace", "nightly", "soon"], "'soon' is not a duration: give seconds (300)"),
        (["grace", "nightly", "0.5"], "grace: The grace must be at least 1 second."),
        (["grace", "nightly", "P40D"], "grace: The grace must be at most 31 days."),
    ],
)  # fmt: skip
def test_the_schedule_command_reports_mistakes(
    sim: Simulation, argv: list[str], fragment: str
) -> None:
    from django.core.management.base import CommandError

    make_schedule(name="nightly", kind="cron", cron="30 2 * * *", timezone="Europe/Berlin")
    with pytest.raises(CommandError, match=re.escape(fragment)):
        call_command("schedule", *argv)
    assert not Run.objects.exists()
    assert Schedule.objects.get(name="nightly").enabled  # a refused pause changes nothing


# -- bad options: the bad-input matrix (tests/support/rejections.py) -----------------------------


@pytest.mark.django_db  # the commands write to Redis directly, not on commit
@pytest.mark.parametrize(("command", "argv", "kw", "named", "fragment"), COMMAND_CASES)
def test_command_rejects_bad_options(
    command: str,
    argv: tuple[str, ...],
    kw: dict[str, Any],
    named: str,
    fragment: str,
    key_prefix: str,
    redis_client: Any,
) -> None:
    with pytest.raises(CommandError) as caught:
        call_command(command, *argv, **kw)
    message = str(caught.value)
    assert named in message, message
    assert fragment in message, message
    assert_nothing_written(redis_client, key_prefix)


def run_manage(key_prefix: str, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *argv],
        cwd=ROOT,
        env=subprocess_env(key_prefix, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the subprocess sees the test database
@pytest.mark.parametrize(("argv", "env", "expected"), SUBPROCESS_CASES)
def test_command_line_rejects_bad_options_without_a_traceback(
    argv: list[str],
    env: dict[str, str],
    expected: list[str],
    key_prefix: str,
    redis_client: Any,
) -> None:
    done = run_manage(key_prefix, *argv, **env)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    for fragment in expected:
        assert fragment in done.stderr, output
    assert "Traceback" not in output
    assert_nothing_written(redis_client, key_prefix)


# -- backfills of crons whose matches are all skipped (tests/support/walks.py) -------------------


@pytest.mark.django_db
def test_the_command_answers_a_backfill_of_skipped_times_at_once(walls: list[int]) -> None:
    schedule = make_schedule(kind="cron", cron=NEVER.cron, timezone=NEVER.timezone, dst_gap="skip")
    out = io.StringIO()
    call_command(
        "schedule",
        "backfill",
        schedule.name,
        "--from",
        "2000-01-01T00:00:00Z",
        "--to",
        (timezone.now() - timedelta(minutes=1)).isoformat(),
        stdout=out,
    )
    assert out.getvalue().startswith("0 occurrence(s)")


@pytest.mark.django_db
def test_the_command_refuses_a_backfill_over_too_many_skipped_times(
    walls: list[int], settings: Any
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MAX_BACKFILL_RUNS": 1000}
    schedule = make_schedule(
        kind="cron", cron=NEVER_DENSE.cron, timezone=NEVER_DENSE.timezone, dst_gap="skip"
    )
    with pytest.raises(CommandError, match="skipped local times"):
        call_command(
            "schedule",
            "backfill",
            schedule.name,
            "--from",
            "2000-01-01T00:00:00Z",
            "--to",
            (timezone.now() - timedelta(minutes=1)).isoformat(),
            stdout=io.StringIO(),
        )
