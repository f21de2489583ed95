"""Helpers for the tests that run real processes: waiting for what they do, and reading what
they said."""

from __future__ import annotations

import subprocess
import time


def wait_for(condition, timeout: float = 60.0, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {condition.__doc__}")
        time.sleep(interval)


def output(proc: subprocess.Popen[str]) -> str:
    return proc.stdout.read() if proc.stdout else ""
