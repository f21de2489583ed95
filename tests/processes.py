"""Helpers for the tests that run real processes (or a scheduler's loop in a thread): waiting
for what they do, and reading what they said."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .handoff import run_in_thread

if TYPE_CHECKING:
    from django_schedulinator.worker import Worker


def wait_for(condition, timeout: float = 60.0, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {condition.__doc__}")
        time.sleep(interval)


def output(proc: subprocess.Popen[str]) -> str:
    return proc.stdout.read() if proc.stdout else ""


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
