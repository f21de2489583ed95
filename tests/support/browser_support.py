"""Helpers for tests/test_browser.py: find Chromium, run the example project in subprocesses
on a database and Redis key prefix of its own, and save screenshots as artifacts."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "manage.py"

# Headless in containers and CI: no sandbox (often no user namespaces), no GPU, and no
# background traffic to Google's services (updates, sync, field trials), which would only
# slow the browser down or hang without a network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "browser-test-password"

COMMAND_TIMEOUT_SECONDS = 120.0
SERVER_START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0
# A safety net: a scheduler that escaped teardown (the test runner was SIGKILLed) exits alone.
SCHEDULER_MAX_SECONDS = 900


def find_chromium() -> str | None:
    """The system Chromium: $SCHEDULINATOR_CHROMIUM, else the first one on PATH or Debian's.

    Playwright is always given this path: the tests never download a browser.
    """
    configured = os.environ.get("SCHEDULINATOR_CHROMIUM")
    if configured:
        return configured
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    debian = Path("/usr/bin/chromium")
    return str(debian) if debian.exists() else None


def browser_required() -> bool:
    """CI sets SCHEDULINATOR_REQUIRE_BROWSER=1: a missing Chromium fails instead of skipping."""
    return os.environ.get("SCHEDULINATOR_REQUIRE_BROWSER", "") not in ("", "0")


def shared_redis_url() -> str:
    return os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def db_vendor() -> str:
    return os.environ.get("SCHEDULINATOR_TEST_DB", "sqlite")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Artifacts:
    """Where screenshots and logs go: $SCHEDULINATOR_ARTIFACTS or artifacts/browser.

    Names start with the database vendor: scripts/test runs the suite once per database, and
    the second run must not overwrite the first one's files.
    """

    def __init__(self) -> None:
        configured = os.environ.get("SCHEDULINATOR_ARTIFACTS")
        self.directory = (
            Path(configured).resolve() if configured else ROOT / "artifacts" / "browser"
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.prefix = db_vendor()

    def clear(self) -> None:
        """Remove this vendor's files of an earlier run (a stale failure.png would mislead)."""
        for path in self.directory.glob(f"{self.prefix}-*"):
            if path.suffix in (".png", ".log"):
                path.unlink()

    def path(self, name: str) -> Path:
        return self.directory / f"{self.prefix}-{name}"


class ExampleProject:
    """The example project (example_project.settings, SQLite) served by `runserver`, with a
    `run_scheduler` beside it, in a temporary DEMO_DIR and under a Redis key prefix of its own.
    """

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="schedulinator-browser-"))
        self.key_prefix = f"browser-{uuid.uuid4().hex[:12]}"
        self.redis_url = shared_redis_url()
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # DEMO_DB unset: SQLite under DEMO_DIR, whatever database the suite itself runs on.
        env.pop("DEMO_DB", None)
        env.update(
            DJANGO_SETTINGS_MODULE="example_project.settings",
            DEMO_DIR=str(self.directory),
            DEMO_KEY_PREFIX=self.key_prefix,
            REDIS_URL=self.redis_url,
            # Logs reach the files as they are written, so a failure can show them.
            PYTHONUNBUFFERED="1",
            DJANGO_SUPERUSER_USERNAME=ADMIN_USERNAME,
            DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD,
            DJANGO_SUPERUSER_EMAIL="admin@example.com",
        )
        return env

    def manage(self, *args: str) -> str:
        """Run a management command to completion; its output, or an error showing it."""
        result = subprocess.run(
            [sys.executable, str(MANAGE), *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"manage.py {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result.stdout

    def start(self, name: str, *args: str) -> None:
        """Start a long-running command, its output going to <DEMO_DIR>/<name>.log.

        A file, not a pipe: nobody reads a pipe while the test runs, and a full one would
        block the server.
        """
        with self.log_path(name).open("wb") as log:
            self.processes[name] = subprocess.Popen(
                [sys.executable, str(MANAGE), *args],
                cwd=ROOT,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def log_path(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def log(self, name: str) -> str:
        path = self.log_path(name)
        text = path.read_text(errors="replace") if path.exists() else "(no log)"
        proc = self.processes.get(name)
        state = "not started" if proc is None else f"exit code {proc.poll()}"
        return f"--- {name} ({state}) ---\n{text}"

    def set_up(self) -> None:
        self.manage("migrate", "--noinput")
        self.manage("createsuperuser", "--noinput")
        self.start("runserver", "runserver", f"127.0.0.1:{self.port}", "--noreload")
        self.wait_until_serving()
        self.start(
            "scheduler",
            "run_scheduler",
            "--worker-id",
            "browser-test",
            "--max-seconds",
            str(SCHEDULER_MAX_SECONDS),
        )

    def wait_until_serving(self) -> None:
        """Poll the login page until the server answers (bounded), or fail with its log."""
        deadline = time.monotonic() + SERVER_START_TIMEOUT_SECONDS
        server = self.processes["runserver"]
        while True:
            try:
                with urllib.request.urlopen(f"{self.base_url}/admin/login/", timeout=2):
                    return
            except urllib.error.HTTPError as exc:
                exc.close()
                return  # an HTTP error is still an answer: the server is up
            except OSError:
                pass  # not listening yet
            if server.poll() is not None:
                raise RuntimeError(f"runserver exited before answering\n{self.log('runserver')}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"runserver did not answer on {self.base_url} within "
                    f"{SERVER_START_TIMEOUT_SECONDS:.0f}s\n{self.log('runserver')}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Terminate the processes (kill after a timeout), drop the Redis keys and the files."""
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.processes.values():
            try:
                proc.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_SECONDS)
        try:
            self.delete_redis_keys()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def delete_redis_keys(self) -> None:
        # Every index key holds the hash tag "{<prefix>}"; the prefix is this run's own.
        with redis.Redis.from_url(self.redis_url) as client:
            keys = list(client.scan_iter(match=f"*{{{self.key_prefix}}}*", count=1000))
            if keys:
                client.delete(*keys)

    def keep_logs(self, artifacts: Artifacts) -> None:
        """Copy the processes' logs next to the screenshots (they go with the temp dir)."""
        for name in self.processes:
            if self.log_path(name).exists():
                shutil.copyfile(self.log_path(name), artifacts.path(f"{name}.log"))


# Schedules for the pictures (tests/test_browser.py::test_admin_pictures): herds at :00 and
# :15, jittered, daily and dense schedules, three that fire every second from two hours on,
# and one schedule that fires every 2 seconds
# through every status a strip shows (succeeded; failed, its zone argument made unknown;
# skipped while paused; succeeded again), paused at the end. Run with `manage.py shell -c`,
# through the service layer; prints the strip schedule's id.
PICTURES_SCRIPT = """
import time
from datetime import timedelta
from django.utils import timezone
from django_schedulinator import services
from django_schedulinator.models import Run

def make(name, **fields):
    fields.setdefault("task", "demo.heartbeat")
    fields.setdefault("kind", "cron")
    return services.create({"name": name, **fields})

for n in range(40):
    make(f"pictures: hourly report {n:02d}", cron="0 * * * *")
for n in range(15):
    make(f"pictures: quarter-hourly sync {n:02d}", cron="*/15 * * * *", timezone="Europe/Berlin")
for n in range(30):
    make(f"pictures: jittered hourly {n:02d}", cron="0 * * * *", jitter=timedelta(minutes=10))
for n in range(3):  # 1,620 a day: estimated past 1,500, in those hours only
    make(f"pictures: business hours {n}", cron="*/20 * 9-17 * * *", timezone="Europe/Berlin")
for n in range(25):
    make(f"pictures: nightly {n:02d}", cron="30 2 * * *", timezone="Europe/Berlin")
for n in range(5):
    make(f"pictures: every 7 minutes {n}", kind="interval", interval=timedelta(minutes=7))
# Every second from two hours on (so not while the test runs): a steady load the forecast
# draws apart from the herds.
later = timezone.now() + timedelta(hours=2)
for n in range(3):
    make(
        f"pictures: every second {n}", kind="interval", interval=timedelta(seconds=1),
        start_at=later,
    )
strip = make(
    "pictures: every 2 seconds", task="demo.report", kind="interval",
    interval=timedelta(seconds=2), kwargs={"zone": "UTC"},
)

def wait_for(status, count, timeout=90):
    deadline = time.monotonic() + timeout
    while Run.objects.filter(schedule=strip, status=status).count() < count:
        if time.monotonic() > deadline:
            seen = list(Run.objects.filter(schedule=strip).values_list("status", flat=True))
            raise SystemExit(f"no {count} {status} runs within {timeout} s: {seen}")
        time.sleep(0.5)

wait_for("succeeded", 6)
services.update(strip, {"kwargs": {"zone": "Nowhere/Land"}})
wait_for("failed", 4)
services.pause(strip, "pictures")
time.sleep(5)
services.resume(strip)
wait_for("skipped", 1)
services.update(strip, {"kwargs": {"zone": "UTC"}})
wait_for("succeeded", 12)
# Paused: its 30 runs a minute would hide the herds in the forecast.
services.pause(strip, "pictures taken")
print(strip.pk)
"""
