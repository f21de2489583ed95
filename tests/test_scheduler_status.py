"""``manage.py scheduler_status`` and ``health.cluster_status()``: each problem and warning,
the human and JSON output, and the exit codes (0 healthy, 1 unhealthy, 2 unreachable).
Real schedulers seen by the command are in test_heartbeat.py."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_schedulinator import resync_schedules, services
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run
from django_schedulinator.operations.health import cluster_status
from django_schedulinator.outcomes import AUTO_PAUSE_NOTE
from django_schedulinator.services import streaks

from .support.heartbeats import beat
from .support.processes import ROOT, subprocess_env
from .support.redis_server import free_port, lose_redis
from .support.schedules import make_due, make_schedule

pytestmark = pytest.mark.django_db

OPERATIONS_DOC = (ROOT / "docs" / "operations.md").read_text("utf-8")


def status(*argv: str) -> tuple[int, str]:
    """The command's exit code and what it printed."""
    out = io.StringIO()
    try:
        call_command("scheduler_status", *argv, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


def problems(*argv: str) -> list[str]:
    code, printed = status("--json", *argv)
    report = json.loads(printed)
    assert code == (0 if report["healthy"] else 1)
    return [p["code"] for p in report["problems"]]


def test_nothing_to_schedule_and_no_scheduler_is_healthy(built_index: DueIndex) -> None:
    code, printed = status()
    assert code == 0
    first = printed.splitlines()[0]
    assert re.fullmatch(r"Scheduler status at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: healthy", first)
    assert "Schedulers alive: 0" in printed
    assert "Problems" not in printed


def test_schedules_without_a_scheduler_are_unhealthy(built_index: DueIndex) -> None:
    make_schedule()
    code, printed = status()
    assert code == 1
    assert "UNHEALTHY (1 problem(s))" in printed
    assert "[no-scheduler] No scheduler is running" in printed
    assert "1 schedule(s) wait to fire" in printed
    assert "`run_scheduler`" in printed

    beat(built_index)
    assert status()[0] == 0


def test_a_scheduler_is_listed_in_aligned_columns_with_times_to_the_second(
    built_index: DueIndex, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    make_schedule()
    recorded = beat(built_index, "web-1", pass_ago=1.5)
    code, printed = status()
    assert code == 0, printed
    lines = printed.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("ID "))
    row = next(line for line in lines if line.lstrip().startswith("web-1 "))
    columns = ("HOST", "PID", "VERSION", "UP SINCE", "LAST PASS", "LANES WAITING", "TO RECORD")
    for column in (*columns, "STATE"):
        assert column in header
    # Each value starts under its heading.
    start = header.index("PID")
    assert row[start:].startswith(str(recorded.pid))
    start = header.index("UP SINCE")
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T ", row[start:]), row
    assert row[header.index("LANES WAITING") :].startswith("default 0")
    assert row[header.index("TO RECORD") :].startswith("0 ")
    assert row.rstrip().endswith("healthy")
    assert re.search(r"\d+\.\d s ago", row)
    assert "web-1: fired 1,234, repaired 2" in printed
    assert re.match(r"Scheduler status at .* CES?T: healthy", printed)


def test_a_stale_scheduler_is_a_problem(built_index: DueIndex, settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "PASS_STALE_SECONDS": 60}
    beat(built_index, "stuck", pass_ago=3600)
    beat(built_index, "failing", pass_ago=120, error="ConnectionError: Redis went away")
    beat(built_index, "new", pass_ago=None)  # started just now: not stale
    code, printed = status()
    assert code == 1
    stale = [line for line in printed.splitlines() if "[scheduler-stale]" in line]
    assert len(stale) == 2, printed
    assert any(
        re.search(r"Scheduler stuck \(host .+, pid \d+\) has not completed a pass for 3600 s", s)
        for s in stale
    )
    assert any("its passes fail: ConnectionError: Redis went away" in s for s in stale)
    assert "PASS_STALE_SECONDS is 60" in stale[0]
    report = json.loads(status("--json")[1])
    states = {s["id"]: s["state"] for s in report["schedulers"]}
    assert states == {"stuck": "stale", "failing": "stale", "new": "healthy"}


def test_a_stopping_scheduler_is_not_stale_nor_counted_as_running(built_index: DueIndex) -> None:
    make_schedule()
    beat(built_index, "leaving", pass_ago=3600, stopping=True)
    assert problems() == ["no-scheduler"]
    report = json.loads(status("--json")[1])
    assert report["schedulers"][0]["state"] == "stopping"


def test_an_oldest_due_entry_later_than_max_lag_is_a_problem(built_index: DueIndex) -> None:
    beat(built_index)
    (late,) = make_due(1, seconds_ago=120)
    resync_schedules([late])
    assert problems("--max-lag", "600") == []
    code, printed = status("--max-lag", "60")
    assert code == 1
    assert f"oldest due entry: schedule {late}, " in printed
    assert re.search(
        rf"\[due-lag\] The oldest due entry \(schedule {late}\) is 1\d\d\.\d s late", printed
    )
    assert "more than the 60 s allowed" in printed


def test_an_index_that_is_not_built_is_a_problem(index: DueIndex) -> None:
    beat(index)
    assert problems() == []  # nothing to fire: nothing waits for the build
    make_schedule()
    code, printed = status()
    assert code == 1
    assert "Due index: not built" in printed
    assert "[index-not-built]" in printed


def test_drift_is_a_problem_unless_the_check_is_skipped(built_index: DueIndex) -> None:
    beat(built_index)
    schedule = make_schedule()
    built_index.client.zrem(built_index.due_key, schedule.pk)
    assert problems() == ["drift"]
    code, printed = status("--no-drift")
    assert code == 0
    assert "drift: not checked (--no-drift)" in printed


def test_auto_paused_schedules_are_listed_and_warned_about(built_index: DueIndex) -> None:
    beat(built_index)
    failing = make_schedule("nightly-report")
    services.pause(make_schedule("paused-by-hand"), "maintenance")
    streaks.auto_pause([failing.pk], note=AUTO_PAUSE_NOTE, using="default")
    code, printed = status()
    assert code == 0  # a warning: the scheduling itself is healthy
    assert "Auto-paused schedules: 1" in printed
    assert re.search(rf"{failing.pk}\s+nightly-report\s+\d{{4}}-", printed)
    assert "[auto-paused] 1 schedule(s) were paused by the scheduler" in printed
    assert "paused-by-hand" not in printed
    report = json.loads(status("--json")[1])
    assert report["auto_paused"]["count"] == 1
    assert report["auto_paused"]["schedules"][0]["name"] == "nightly-report"
    assert [w["code"] for w in report["warnings"]] == ["auto-paused"]

    services.resume(failing)
    assert json.loads(status("--json")[1])["auto_paused"] == {"count": 0, "schedules": []}


def test_runs_never_reported_in_time_are_a_warning(built_index: DueIndex, settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"queue": {"BACKEND": "tests.support.dispatchers.HandOff", "OPTIONS": {}}},
    }
    beat(built_index)
    schedule = make_schedule(dispatcher="queue")
    now = timezone.now()
    for minutes, due_by in ((1, now + timedelta(hours=1)), (2, now - timedelta(minutes=1))):
        Run.objects.create(
            schedule=schedule,
            scheduled_for=now - timedelta(minutes=minutes),
            task=schedule.task,
            claimed_at=now,
            worker_id="t",
            dispatcher="queue",
            status="dispatched",
            outcome_due_by=due_by,
        )
    code, printed = status()
    assert code == 0
    assert re.search(r"queue\s+HandOff\s+1\s+1\s+0", printed), printed
    assert "[outcome-overdue] 1 run(s) handed to the dispatcher 'queue'" in printed


def test_the_json_keys_are_the_documented_ones(built_index: DueIndex) -> None:
    beat(built_index)
    streaks.auto_pause([make_schedule().pk], note=AUTO_PAUSE_NOTE, using="default")
    report = json.loads(status("--json")[1])
    nested = {
        "": report,
        "schedulers[]": report["schedulers"][0],
        "schedulers[].lanes.*": report["schedulers"][0]["lanes"]["default"],
        "schedulers[].recorder": report["schedulers"][0]["recorder"],
        "index": report["index"],
        "index.drift": report["index"]["drift"],
        "index.shards[]": report["index"]["shards"][0],
        "dispatchers[]": report["dispatchers"][0],
        "auto_paused": report["auto_paused"],
        "auto_paused.schedules[]": report["auto_paused"]["schedules"][0],
    }
    for where, data in nested.items():
        for key in data:
            assert f"`{key}`" in OPERATIONS_DOC, f"{where}.{key} is not documented"
    assert set(report) == {
        "healthy",
        "checked_at",
        "problems",
        "warnings",
        "max_lag_seconds",
        "pass_stale_seconds",
        "schedulers",
        "index",
        "dispatchers",
        "auto_paused",
    }
    codes = set(re.findall(r"^\| `([a-z-]+)` \|", OPERATIONS_DOC, re.M))
    assert {"no-scheduler", "scheduler-stale", "due-lag", "index-not-built", "drift"} <= codes
    assert {"auto-paused", "outcome-overdue", "eviction-risk", "shared-worker-id"} <= codes
    assert "dispatcher-unavailable" in codes


def test_cluster_status_is_one_report_for_the_api_and_the_page(built_index: DueIndex) -> None:
    beat(built_index, "same")
    beat(built_index, "same")
    report = cluster_status(built_index, drift=False)
    assert report.healthy
    assert [w.code for w in report.warnings] == ["shared-worker-id"]
    assert report.index.drift is None
    assert report.checked_at >= report.schedulers[0].beat_at


def test_an_unreachable_redis_exits_2(settings: Any) -> None:
    lose_redis(settings)
    code, printed = status()
    assert code == 2
    with pytest.raises(CommandError, match="Redis cannot be reached, so the status is unknown"):
        call_command("scheduler_status", stdout=io.StringIO())
    assert printed == ""


def run_status(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", "scheduler_status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the subprocess sees the test database
def test_the_command_line_exits_2_with_the_error_when_redis_or_the_database_is_away(
    key_prefix: str, tmp_path: Path
) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    done = run_status(subprocess_env(key_prefix, SCHEDULINATOR_TEST_REDIS_URL=closed))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "CommandError: Redis cannot be reached, so the status is unknown" in done.stderr
    assert "Traceback" not in done.stderr

    from django.db import connection

    env = subprocess_env(key_prefix)
    env["SCHEDULINATOR_TEST_DB_NAME"] = str(tmp_path / "no" / "such" / "dir.sqlite3")
    if connection.vendor == "postgresql":
        env["SCHEDULINATOR_TEST_DB_NAME"] = "schedulinator_no_such_database"
    done = run_status(env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "CommandError: The database cannot be read, so the status is unknown" in done.stderr
    assert "Traceback" not in done.stderr
