"""A private redis-server for tests that stop, restart, flush or reconfigure Redis.

Such tests must not touch the shared Redis on 127.0.0.1:6379, which other tests (and other
projects) use: each gets a server of its own on a free port, with its data in a temporary
directory (append-only file, so a stop and start keeps the data, like a production restart).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/services installs it)")
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def start(self) -> None:
        self.start_with()

    def start_with(self, *extra: str) -> None:
        """Start it with ``extra`` arguments after the usual ones (a cluster node's)."""
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--dir", str(self.directory), "--logfile", str(self.directory / "redis.log")]
        argv += ["--save", "", "--appendonly", "yes", "--appendfsync", "always", *extra]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.client().ping():
                    return
            except redis.ConnectionError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"redis-server on port {self.port} did not start; its log ends:\n"
                    + self._log_tail()
                )
            time.sleep(0.05)

    def _log_tail(self) -> str:
        try:
            return "\n".join((self.directory / "redis.log").read_text().splitlines()[-5:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """A clean shutdown: the data is on disk and comes back with start()."""
        if self.proc is None:
            return
        with contextlib.suppress(redis.ConnectionError):  # it hangs up as it exits
            self.client().shutdown(nosave=False)
        self.proc.wait(timeout=30)
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None


def lose_redis(settings: Any) -> None:
    """From now on the app's Redis is a port where nothing listens: every connection is
    refused at once, a real error from a real client (no mock)."""
    settings.CACHES = {
        **settings.CACHES,
        "down": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
        },
    }
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "CACHE_ALIAS": "down"}
