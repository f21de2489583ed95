"""Helpers for the tests that run real processes (or a scheduler's loop in a thread): waiting
for what they do, and reading what they said."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import httpx

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
