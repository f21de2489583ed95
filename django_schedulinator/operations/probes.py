"""What ``run_scheduler --metrics-port`` serves: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` (liveness) answers from what the loop records, with no I/O: 200 while the loop
moves on, 503 once it has been stuck for ``PASS_STALE_SECONDS``. A loop that backs off from
an outage of Redis or the database moves on (each attempt ends), so it stays live: a restart
would not end the outage, and restarting every scheduler at once during one only adds to it.
``/readyz`` (readiness) asks the dependencies: the database answers, Redis answers, the due
index is built; each check is bounded, so a probe never hangs on a dependency that does.

The server is the standard library's WSGI server with a thread per request; ``/metrics`` is
prometheus-client's own WSGI exposition of the process's registry (``metrics.py``). The
server's thread, each request's and each bounded check's are stage threads (``stage.py``):
each closes the database connections it opened as it ends.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from django.db import connections, router

from django_schedulinator.conf import app_settings
from django_schedulinator.errors import SchedulinatorError
from django_schedulinator.index.due import DueIndex
from django_schedulinator.operations.observed import Observed
from django_schedulinator.operations.stage import stage_thread

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment


logger = logging.getLogger("django_schedulinator.probes")

# How long /readyz waits for each dependency (and a scrape for the cluster-wide gauges): a
# Kubernetes probe's timeoutSeconds should be above it.
PROBE_TIMEOUT_SECONDS = 2.0
# A client that connects and sends nothing gives up its thread after this long.
REQUEST_TIMEOUT_SECONDS = 10.0
PATHS = ("/metrics", "/healthz", "/readyz")
# How long a close waits for the server's thread to end.
CLOSE_WAIT_SECONDS = 5.0

T = TypeVar("T")


class NoAnswer(SchedulinatorError, TimeoutError):
    """A dependency did not answer within the probe's bound."""


@dataclass(slots=True)
class _Call(Generic[T]):
    started: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    error: BaseException | None = None


class Bounded(Generic[T]):
    """``func`` called on a daemon thread of its own and waited for ``timeout`` at most: a
    dependency that hangs (a paused Redis, a database behind a dead link) makes the answer
    ``NoAnswer`` instead of a probe that hangs. One call at a time: while one still waits on
    a hung dependency, later callers wait on that same call instead of piling up threads.
    The thread (a stage thread) closes the database connections it opened."""

    def __init__(self, func: Callable[[], T], name: str) -> None:
        self._func = func
        self._name = name
        self._lock = threading.Lock()
        self._call: _Call[T] | None = None

    def __call__(self, timeout: float) -> T:
        return self.result(self.start(), timeout)

    def start(self) -> _Call[T]:
        """The call in progress, or a new one started now."""
        with self._lock:
            call = self._call
            if call is None or call.done.is_set():
                call = self._call = _Call()
                stage_thread(self._name, lambda: self._run(call))
        return call

    @staticmethod
    def result(call: _Call[T], timeout: float) -> T:
        """What ``call`` returned (or raised), once it has, within ``timeout``."""
        if not call.done.wait(timeout):
            waited = time.monotonic() - call.started
            raise NoAnswer(f"no answer for {waited:.1f} s")
        if call.error is not None:
            raise call.error
        return call.value  # type: ignore[return-value]  # set when done without an error

    def _run(self, call: _Call[T]) -> None:
        try:
            call.value = self._func()
        except BaseException as exc:  # handed to the caller
            call.error = exc
        finally:
            connections.close_all()  # the probe's own connection, before it is answered
            call.done.set()


def health(worker: Observed, *, since: float) -> tuple[bool, dict[str, Any]]:
    """Whether the loop is live, and what says so. ``since``: when serving began (monotonic),
    which stands in for the loop's progress before its first pass."""
    now = time.monotonic()
    stale = app_settings.PASS_STALE_SECONDS
    progress = worker.last_progress_at
    quiet = now - (since if progress is None else progress)
    pass_age = None if worker.last_pass_at is None else now - worker.last_pass_at
    live = worker.stopping or quiet < stale
    if worker.stopping:
        status = "stopping"
    elif not live:
        status = "stuck"
    elif worker.last_error:
        status = "backing off"  # from an outage: /readyz says of what
    elif pass_age is None:
        status = "starting"
    elif pass_age >= stale:
        status = "busy"  # a long step that moves on: building the due index
    else:
        status = "ok"
    return live, {
        "status": status,
        "worker_id": worker.worker_id,
        "pass_age_seconds": None if pass_age is None else round(pass_age, 3),
        "progress_age_seconds": round(quiet, 3),
        "stale_after_seconds": stale,
        "last_error": worker.last_error,
    }


def _database() -> str:
    from django_schedulinator.models import Schedule

    with connections[router.db_for_write(Schedule)].cursor() as cursor:
        cursor.execute("SELECT 1")
    return "ok"


def _redis(index: DueIndex) -> bool:
    """Redis answers; whether the index is built."""
    index.client.ping()
    return index.is_built()


class Readiness:
    """The checks behind ``/readyz``, each bounded by ``PROBE_TIMEOUT_SECONDS``."""

    def __init__(self, worker: Observed) -> None:
        self.worker = worker
        self._database = Bounded(_database, "schedulinator-probe-database")
        self._redis = Bounded(lambda: _redis(worker.index), "schedulinator-probe-redis")

    def __call__(self, timeout: float = PROBE_TIMEOUT_SECONDS) -> tuple[bool, dict[str, Any]]:
        # Both checks start before either is waited for: a probe takes one bound at most.
        checks: dict[str, tuple[Bounded[Any], _Call[Any]]] = {
            name: (check, check.start())
            for name, check in (("database", self._database), ("redis", self._redis))
        }
        deadline = time.monotonic() + timeout
        results: dict[str, Any] = {}
        for name, (check, call) in checks.items():
            try:
                results[name] = check.result(call, max(0.0, deadline - time.monotonic()))
            except NoAnswer as exc:
                results[name] = str(exc)
            except Exception as exc:
                results[name] = f"{type(exc).__name__}: {exc}"
        database, redis = results["database"], results["redis"]
        if isinstance(redis, bool):
            index = "built" if redis else "not built (the scheduler builds it)"
            redis = "ok"
        else:
            index = "unknown (Redis does not answer)"
        stopping = self.worker.stopping
        ready = database == "ok" and redis == "ok" and index == "built" and not stopping
        body: dict[str, Any] = {"ready": ready, "database": database, "redis": redis}
        body["index"] = index
        if stopping:
            body["stopping"] = True
        return ready, body


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a probe every few seconds is not news


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def process_request(self, request: Any, client_address: Any) -> None:
        # ThreadingMixIn's, on a stage thread: a daemon one, never joined by a close.
        stage_thread(
            "schedulinator-metrics-request",
            lambda: self.process_request_thread(request, client_address),
        )

    def server_bind(self) -> None:
        # HTTPServer's would look the address up in DNS (getfqdn), which may hang a start.
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])
        self.setup_environ()

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("A request to the metrics port failed.", exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class ProbeServer:
    """Binds ``addr``:``port`` when made (``OSError`` if it cannot: in use, not an address of
    this host, a privileged port); ``start`` serves from a stage thread; ``close`` stops,
    waiting ``CLOSE_WAIT_SECONDS`` at most for the thread to end."""

    def __init__(self, worker: Observed, metrics_app: WSGIApplication, *, port: int, addr: str):
        self.worker = worker
        self.since = time.monotonic()
        self.readiness = Readiness(worker)
        self._metrics_app = metrics_app
        family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]
        server_class = _Server6 if family == socket.AF_INET6 else _Server
        self._httpd = server_class((addr, port), _Handler)
        self._httpd.set_app(self._app)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._httpd.server_address[0])
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    def start(self) -> None:
        self._thread = stage_thread(
            "schedulinator-metrics", lambda: self._httpd.serve_forever(poll_interval=0.5)
        )

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(CLOSE_WAIT_SECONDS)
        self._httpd.server_close()

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return self._metrics_app(environ, start_response)
        if path == "/healthz":
            ok, body = health(self.worker, since=self.since)
        elif path == "/readyz":
            ok, body = self.readiness()
        else:
            text = f"Not found. This port serves {', '.join(PATHS)}.\n".encode()
            start_response("404 Not Found", _headers("text/plain; charset=utf-8", text))
            return [text]
        data = json.dumps(body).encode()
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(status, _headers("application/json", data))
        return [data]


def _headers(content_type: str, body: bytes) -> list[tuple[str, str]]:
    return [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
    ]
