"""Helpers for the tests that run real processes (or a scheduler's loop in a thread): waiting
for what they do, and reading what they said."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from django.db import connection

from .handoff import run_in_thread

if TYPE_CHECKING:
    from django_schedulinator.scheduler.worker import Worker


def wait_for(condition, timeout: float = 60.0, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {condition.__doc__}")
        time.sleep(interval)


def output(proc: subprocess.Popen[str]) -> str:
    return proc.stdout.read() if proc.stdout else ""


def read_until(proc: subprocess.Popen[str], text: str) -> str:
    """What ``proc`` printed up to the first line that holds ``text``, read as it comes: a
    condition to wait on where a fixed sleep would race a loaded machine (``output`` reads
    the rest). Fails if ``proc`` ends first."""
    assert proc.stdout is not None
    seen: list[str] = []
    while line := proc.stdout.readline():
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never came; it printed:\n{''.join(seen)}")


@contextmanager
def looping(worker: Worker) -> Iterator[None]:
    """``worker.run()`` in a thread of its own, as ``run_scheduler`` runs it (its database
    connections closed when it ends); stopped, and its end awaited, on leaving."""

    loop = run_in_thread(worker)
    try:
        yield
    finally:
        worker.stopping = True
        loop.join(60)
    assert not loop.is_alive(), "the loop did not stop"


class Lines:
    """Reads what a process prints, line by line, on a thread of its own from now on (a pipe
    nobody reads fills up and stalls the process): a test waits for a line it needs (a port
    logged at start) and shows the rest when it fails. Takes ``proc.stdout`` over."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        stream, proc.stdout = proc.stdout, None  # Schedulers.stop_all leaves it to us
        assert stream is not None, "the process was started without stdout=PIPE"
        self._stream = stream
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.append(line)
        self._stream.close()

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """The first match of ``pattern`` in a line printed so far or within ``timeout``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.lines):
                if found := regex.search(line):
                    return found
            if time.monotonic() > deadline or (
                self.proc.poll() is not None and not self._thread.is_alive()
            ):
                raise AssertionError(
                    f"no line matched {pattern!r} (exit {self.proc.poll()}):\n{self.text()}"
                )
            time.sleep(0.05)


# What run_scheduler --metrics-port logs once it serves, and a request to what it serves.
SERVING = r"Serving /metrics, /healthz and /readyz on http://127\.0\.0\.1:(\d+)/"


def get(port: int, path: str, timeout: float = 10) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=timeout)


# The clone: the working directory of the subprocesses, on their PYTHONPATH.
ROOT = Path(__file__).resolve().parents[2]


def subprocess_env(key_prefix: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        SCHEDULINATOR_TEST_DB_NAME=str(connection.settings_dict["NAME"]),
        SCHEDULINATOR_TEST_PREFIX=key_prefix,
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        **extra,
    )
    return env


class Schedulers:
    """Starts real `manage.py run_scheduler` processes and makes sure none outlives a test."""

    def __init__(self, key_prefix: str) -> None:
        self.key_prefix = key_prefix
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return self.popen([sys.executable, "-m", "django", "run_scheduler", *args], env=env)

    def popen(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env or subprocess_env(self.key_prefix),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for n, proc in enumerate(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            if proc.stdout:
                # Shown by pytest when the test failed: what each scheduler logged.
                if not proc.stdout.closed:
                    print(f"--- scheduler {n} (exit {proc.returncode})", proc.stdout.read())
                proc.stdout.close()
