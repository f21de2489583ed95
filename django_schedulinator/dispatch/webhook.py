"""HTTP webhooks, signed the Standard Webhooks way (https://www.standardwebhooks.com/).

Each occurrence is one POST of a JSON body to a *target*: a name in the alias's
``OPTIONS["TARGETS"]`` that stands for a URL and its secret. A schedule picks a target by
name (``dispatch_options={"target": "billing"}``), never a URL, so nothing typed into the
admin or the API can make the scheduler reach another host. Redirects are not followed.

Headers: ``webhook-id`` is the occurrence key (the same on every retry: receivers dedupe on
it), ``webhook-timestamp`` the Unix time of this attempt, ``webhook-signature``
``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` with the target's ``whsec_`` secret.

A 2xx answer is success, except 202 Accepted: the receiver took the work and reports its end
later by the key (the REST API's ``runs/report/``). Network errors, timeouts, 408, 429 and
5xx are retried with backoff and jitter (the alias's ``MAX_ATTEMPTS``); other answers fail
the run at once. The status is stored on the run, with the start of an error answer.

One request has ``TIMEOUT_SECONDS`` in all, from looking up the target's name to the end of
what is read of the answer, however slowly a receiver sends it; of the answer's body, at most
``READ_LIMIT_BYTES`` are read (what an error keeps), the rest is never downloaded.

httpcore (brought by httpx, the ``[webhook]`` extra) sends the requests from
``MAX_CONCURRENCY`` daemon threads of the dispatcher's own, each with a kept-alive connection
to each target (a synchronous pool of one), all with one TLS context (httpx's default); every
wait of a request ends at its deadline (``deadlines.Deadlines``), and a close cuts the
requests in flight. No redirect is followed. A target that a proxy named in the environment
(``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``) may apply to is sent by httpx's async client
instead, on an event loop of the dispatcher's own, so that the proxy applies exactly as httpx
applies it (``NO_PROXY`` included). httpcore used so costs about a third of the CPU per request
of httpx's async client (docs/benchmarks.md). Outcomes are reported about once a second while
a batch is sent.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import queue
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from urllib.request import getproxies

from django.core.checks import CheckMessage, Error, Warning

from django_schedulinator.dispatch.base import (
    DEFAULT_ALIAS,
    REPORT_EVERY_SECONDS,
    BaseDispatcher,
    Call,
    Occurrence,
    Option,
    Outcome,
    Progress,
)
from django_schedulinator.statuses import OutcomeStatus
from django_schedulinator.timing.instants import to_ms

if TYPE_CHECKING:  # httpcore and httpx are the [webhook] extra's: imported when sending
    import httpcore

    from django_schedulinator.dispatch.deadlines import Deadlines

SECRET_PREFIX = "whsec_"
# Statuses that say "try again later" rather than "no".
RETRY_STATUSES = frozenset({408, 425, 429})
# What an error answer's body keeps on the run, and the most of the body read for it (a
# character of UTF-8 takes up to four bytes).
MAX_ERROR_CHARS = 2000
READ_LIMIT_BYTES = 4 * MAX_ERROR_CHARS
# How long closing waits for the requests in flight to be cancelled.
CLOSE_SECONDS = 5.0
# How long a connection may stay idle and still be reused (httpx's default).
KEEPALIVE_SECONDS = 5.0


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header's value for one message."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, content, hashlib.sha256).digest()
    return f"v1,{base64.b64encode(digest).decode()}"


def body_of(occurrence: Occurrence) -> bytes:
    return json.dumps(
        {
            "type": "schedule.occurrence",
            "key": occurrence.key,
            "schedule": occurrence.schedule_name,
            "schedule_id": occurrence.schedule_id,
            "task": occurrence.task,
            "scheduled_for": occurrence.scheduled_for.isoformat(),
            "scheduled_for_ms": to_ms(occurrence.scheduled_for),
            "attempt": occurrence.attempt,
            "args": occurrence.args,
            "kwargs": occurrence.kwargs,
        },
        separators=(",", ":"),
    ).encode()


class WebhookDispatcher(BaseDispatcher):
    """POSTs each occurrence to a named target; learns the outcome from the answer."""

    reports_outcomes = True
    extra = "webhook"
    options = {
        "TARGETS": Option(dict, 'Names of targets: {"billing": {"URL": ..., "SECRET": ...}}.'),
        "TIMEOUT_SECONDS": Option(
            float,
            "The longest one request may take, in all: connecting, sending the occurrence "
            "and reading the answer.",
            minimum=0.1,
            default=10.0,
        ),
        "MAX_CONCURRENCY": Option(
            int, "Requests in flight at once.", minimum=1, maximum=64, default=8
        ),
    }
    schedule_options = {
        "target": Option(str, "The name of a target in the alias's OPTIONS['TARGETS']."),
    }

    def __init__(self, alias: str = DEFAULT_ALIAS, options: Mapping[str, Any] | None = None):
        super().__init__(alias, options)
        self.targets: dict[str, dict[str, str]] = dict(self.settings["TARGETS"] or {})
        # Started with the first batch: the sending threads and their connections.
        self._senders: _Senders | None = None
        self._tls: Any = None  # one TLS context for every connection (each its own: ~20 ms)

    @classmethod
    def option_problems(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().option_problems(options)
        targets = options.get("TARGETS")
        if not isinstance(targets, dict) or not targets:
            return [*problems, "'TARGETS' must name at least one target"]
        for name, target in targets.items():
            problems += [f"TARGETS[{name!r}] {p}" for p in _target_problems(target)]
        return problems

    def schedule_option_errors(self, options: Any) -> list[str]:
        errors = super().schedule_option_errors(options)
        if errors or not isinstance(options, dict):
            return errors
        target = options.get("target")
        if target is None:
            return [f"the option 'target' is required: one of {', '.join(sorted(self.targets))}"]
        if target not in self.targets:
            return [
                f"the option 'target' must be one of {', '.join(sorted(self.targets))}, "
                f"got {target!r}"
            ]
        return []

    def check(self, *, connect: bool = False) -> list[CheckMessage]:
        try:
            import httpx  # noqa: F401
        except ImportError:
            return [
                Error(
                    f"The dispatcher {self.alias!r} sends webhooks with httpx, which is not "
                    "installed.",
                    hint=f"pip install 'django-schedulinator[{self.extra}]'",
                    id="schedulinator.E020",
                )
            ]
        if not connect:
            return []
        messages: list[CheckMessage] = []
        for name, target in sorted(self.targets.items()):
            url = urlsplit(target["URL"])
            port = url.port or (443 if url.scheme == "https" else 80)
            try:
                socket.create_connection((url.hostname or "", port), timeout=3).close()
            except OSError as exc:
                messages.append(
                    Warning(
                        f"The webhook target {name!r} of the dispatcher {self.alias!r} "
                        f"({url.hostname}:{port}) cannot be reached: {exc}",
                        id="schedulinator.W020",
                    )
                )
        return messages

    # -- sending --------------------------------------------------------------------------

    @property
    def hand_off_timeout(self) -> float:
        return float(self.settings["TIMEOUT_SECONDS"])

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        """Send the batch, MAX_CONCURRENCY requests at once. The outcomes that ended are
        reported through ``progress`` about once a second, as ``BaseDispatcher.dispatch``
        does (each report is a transaction: one per request that ended cost more CPU than
        the request); what ended since the last report is returned with the rest, and the
        recorder writes it. If waiting breaks off, what ended is reported first."""
        senders = self._started()
        batch = _Batch(len(occurrences), progress)
        for occurrence in occurrences:
            senders.queue.put((batch, occurrence))
        outcomes: list[Outcome] = []
        unreported: list[Outcome] = []
        next_report = time.monotonic() + REPORT_EVERY_SECONDS
        try:
            while True:
                ended = batch.done.wait(max(0.0, next_report - time.monotonic()))
                unreported += batch.take()
                batch.check()
                if ended:
                    return outcomes + unreported
                if unreported and time.monotonic() >= next_report:
                    outcomes += unreported
                    progress.finished(unreported)
                    unreported = []
                if time.monotonic() >= next_report:
                    next_report = time.monotonic() + REPORT_EVERY_SECONDS
        except BaseException:
            if unreported:
                progress.finished(unreported)
            raise

    def _serve(self, senders: _Senders) -> None:
        """One sending thread: the requests of its queue, one at a time, each to the
        thread's own connection to its target (kept alive between them)."""
        connections: dict[str, _Direct | _Proxied] = {}  # by target
        while (item := senders.queue.get()) is not None:
            batch, occurrence = item
            try:
                outcome = self._hand_off_in_turn(senders, connections, occurrence, batch.progress)
            except BaseException as exc:
                batch.end(None, exc)
            else:
                batch.end(None if senders.closed else outcome)

    def _hand_off_in_turn(
        self,
        senders: _Senders,
        connections: dict[str, _Direct | _Proxied],
        occurrence: Occurrence,
        progress: Progress,
    ) -> Outcome | None:
        """``hand_off`` on a sending thread: the occurrence's task and arguments checked and
        its request sent, any error failing this run alone. None: not sent, the scheduler
        is stopping (the run stays pending)."""
        if progress.stopped() or senders.closed:
            return None
        try:
            return self._post(senders, connections, occurrence, Call.of(occurrence))
        except Exception as exc:
            return self.failure(occurrence, exc)

    def _post(
        self,
        senders: _Senders,
        connections: dict[str, _Direct | _Proxied],
        occurrence: Occurrence,
        call: Call,
    ) -> Outcome:
        run_id = occurrence.run_id
        name = occurrence.dispatch_options.get("target")
        if not isinstance(name, str) or (target := self.targets.get(name)) is None:
            return Outcome(
                run_id,
                OutcomeStatus.FAILED,
                f"The webhook target {name!r} is not in the dispatcher {self.alias!r}'s "
                f"TARGETS ({', '.join(sorted(self.targets))}).",
            )
        body = body_of(occurrence)
        timestamp = int(time.time())
        headers = {
            "accept": "*/*",
            "content-type": "application/json",
            "user-agent": "django-schedulinator",
            "accept-encoding": "identity",  # what is read is what is kept: nothing to inflate
            "webhook-id": occurrence.key,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(target["SECRET"], occurrence.key, timestamp, body),
        }
        connection = connections.get(name)
        if connection is None:
            connection = connections[name] = senders.connect(target["URL"])
        if isinstance(connection, _Proxied):
            answer = senders.through_httpx(connection, target["URL"], headers, body)
        else:
            answer = senders.send(connection, headers, body)
        status, location, kept, error = answer
        if status is None:
            if error is None:
                text = f"The target {name!r} did not answer within {senders.deadline:g}s in all."
                return Outcome(run_id, OutcomeStatus.RETRY, text)
            return Outcome(run_id, OutcomeStatus.RETRY, error)
        # The status came: a body cut short by the deadline or the connection keeps what came.
        text = kept.decode("utf-8", errors="replace")[:MAX_ERROR_CHARS]
        return _outcome_of_answer(run_id, name, status, text, location)

    def _started(self) -> _Senders:
        if self._senders is None:
            import httpx

            from django_schedulinator.dispatch import deadlines

            if self._tls is None:
                self._tls = httpx.create_ssl_context()  # httpx's default: certifi, SSL_CERT_FILE
            senders = _Senders(
                self.alias, self.settings["TIMEOUT_SECONDS"], self._tls, deadlines.Deadlines()
            )
            for i in range(self.settings["MAX_CONCURRENCY"]):
                thread = threading.Thread(
                    target=self._serve,
                    args=(senders,),
                    name=f"schedulinator-webhook-{self.alias}-{i}",
                    daemon=True,
                )
                senders.threads.append(thread)
                thread.start()
            self._senders = senders
        return self._senders

    def close(self) -> None:
        """Cancel the requests in flight (their runs get no outcome from them), close the
        connections and end the sending threads."""
        senders, self._senders = self._senders, None
        if senders is not None:
            senders.close()


# What a request got: the status (None: no answer), the Location, the start of the body, and
# the error that cut it short before a status (None with no status: the deadline passed).
Answer = tuple[int | None, str, bytearray, str | None]


class _Batch:
    """The requests of one ``dispatch``: what the sending threads ended of them, taken by
    ``dispatch`` as it reports (a Future each cost more CPU than the rest of the wait)."""

    def __init__(self, size: int, progress: Progress) -> None:
        self.progress = progress
        self.done = threading.Event()
        self._left = size
        self._ended: list[Outcome] = []
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        if not size:
            self.done.set()

    def end(self, outcome: Outcome | None, error: BaseException | None = None) -> None:
        """One request ended: its outcome (None: none, it was not sent), or what it raised
        (``check`` raises it: the batch breaks off as a whole, its runs left pending)."""
        with self._lock:
            if outcome is not None:
                self._ended.append(outcome)
            if error is not None and self._error is None:
                self._error = error
            self._left -= 1
            if not self._left:
                self.done.set()

    def take(self) -> list[Outcome]:
        """The outcomes ended since the last take."""
        with self._lock:
            ended, self._ended = self._ended, []
        return ended

    def check(self) -> None:
        """Raise what a request raised, if one did."""
        if self._error is not None:
            raise self._error


class _Senders:
    """The sending threads of one start of the dispatcher and what they share: the queue of
    requests, the connections' backend (``deadlines.Deadlines``: every wait within the
    request's deadline), and, for targets a proxy of the environment may apply to, httpx's
    async client on an event loop of its own."""

    def __init__(self, alias: str, deadline: float, tls: Any, deadlines: Deadlines) -> None:
        self.alias = alias
        self.deadline = deadline
        self.tls = tls
        self.deadlines = deadlines
        self.queue: queue.SimpleQueue[tuple[_Batch, Occurrence] | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.closed = False
        self.pools: list[httpcore.ConnectionPool] = []  # every one made, to close
        self.timeouts = dict.fromkeys(("connect", "read", "write", "pool"), deadline)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._clients: list[Any] = []  # every httpx client made, to close

    def connect(self, url: str) -> _Direct | _Proxied:
        """A sending thread's own connection to a target: an httpcore pool of one
        connection, or httpx's client where a proxy of the environment may apply."""
        if may_be_proxied(url):
            return _Proxied(self._new_client())
        import httpcore

        pool = httpcore.ConnectionPool(
            ssl_context=self.tls,
            max_connections=1,
            keepalive_expiry=KEEPALIVE_SECONDS,
            network_backend=self.deadlines,
        )
        self.pools.append(pool)
        return _Direct(pool, *_as_httpx_sends(url))

    def send(self, direct: _Direct, headers: dict[str, str], body: bytes) -> Answer:
        """POST with httpcore, on this thread: within the deadline, in all."""
        import httpcore

        from django_schedulinator.dispatch.deadlines import ERRORS

        self.deadlines.start(self.deadline)
        status: int | None = None
        location = ""
        kept = bytearray()
        raw = [*direct.headers, *((k.encode(), v.encode()) for k, v in headers.items())]
        limits = {"timeout": self.timeouts}
        try:
            with direct.pool.stream(
                "POST", direct.url, headers=raw, content=body, extensions=limits
            ) as r:
                status = r.status
                location = next(
                    (v.decode("latin-1") for k, v in r.headers if k.lower() == b"location"), ""
                )
                for chunk in r.iter_stream():
                    kept += chunk[: READ_LIMIT_BYTES - len(kept)]
                    if len(kept) >= READ_LIMIT_BYTES:
                        break  # the rest of the body is never downloaded
        except httpcore.TimeoutException:
            pass
        except ERRORS as exc:
            return status, location, kept, f"{type(exc).__name__}: {exc or 'no detail'}"
        return status, location, kept, None

    def through_httpx(
        self, proxied: _Proxied, url: str, headers: dict[str, str], body: bytes
    ) -> Answer:
        """POST with httpx's async client, on the event loop; this thread waits."""
        loop = self._started_loop()
        sent = asyncio.run_coroutine_threadsafe(
            self._send_with_httpx(proxied.client, url, headers, body), loop
        )
        try:
            return sent.result()
        except CancelledError:  # by a close: no outcome comes of it
            return None, "", bytearray(), "The dispatcher closed."

    async def _send_with_httpx(
        self, client: Any, url: str, headers: dict[str, str], body: bytes
    ) -> Answer:
        import httpx

        status: int | None = None
        location = ""
        kept = bytearray()
        try:
            async with (
                asyncio.timeout(self.deadline),
                client.stream("POST", url, content=body, headers=headers) as r,
            ):
                status, location = r.status_code, r.headers.get("location", "")
                async for chunk in r.aiter_raw():
                    kept += chunk[: READ_LIMIT_BYTES - len(kept)]
                    if len(kept) >= READ_LIMIT_BYTES:
                        break  # the rest of the body is never downloaded
        except TimeoutError:
            pass
        except httpx.HTTPError as exc:
            return status, location, kept, f"{type(exc).__name__}: {exc or 'no detail'}"
        return status, location, kept, None

    def _new_client(self) -> Any:
        """httpx's async client of one kept-alive connection, which applies the proxies
        named in the environment as httpx always does (NO_PROXY included)."""
        import httpx

        client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.deadline),
            follow_redirects=False,
            limits=httpx.Limits(max_connections=1),
            verify=self.tls,
        )
        self._clients.append(client)
        return client

    def _started_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._loop_thread = threading.Thread(
                    target=loop.run_forever,
                    name=f"schedulinator-webhook-{self.alias}-httpx",
                    daemon=True,
                )
                self._loop_thread.start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Cancel the requests not started, cut those in flight (on both paths), end the
        threads and close the connections."""
        self.closed = True
        with contextlib.suppress(queue.Empty):
            while True:
                if (item := self.queue.get_nowait()) is not None:
                    item[0].end(None, CancelledError())
        self.deadlines.cut_all()
        self._close_loop()
        for _ in self.threads:
            self.queue.put(None)
        ends = time.monotonic() + CLOSE_SECONDS
        for thread in self.threads:
            thread.join(max(0.0, ends - time.monotonic()))
        for pool in self.pools:
            with contextlib.suppress(Exception):
                pool.close()

    def _close_loop(self) -> None:
        with self._lock:
            loop, thread, clients = self._loop, self._loop_thread, self._clients
            self._loop = self._loop_thread = None
        if loop is None or thread is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for client in clients:
                with contextlib.suppress(Exception):
                    await client.aclose()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(CLOSE_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_SECONDS)
        if not thread.is_alive():
            loop.close()


@dataclass(frozen=True)
class _Proxied:
    """A sending thread's httpx client to a target that a proxy may apply to."""

    client: Any


@dataclass(frozen=True)
class _Direct:
    """A sending thread's httpcore pool of one connection to a target, and the target's
    URL and headers as httpx would send them (``_as_httpx_sends``)."""

    pool: httpcore.ConnectionPool
    url: httpcore.URL
    headers: list[tuple[bytes, bytes]]


def _as_httpx_sends(url: str) -> tuple[httpcore.URL, list[tuple[bytes, bytes]]]:
    """A target's URL as httpx sends it: httpcore's URL (the host IDNA-encoded, the path
    and query quoted), and for credentials in it their basic Authorization."""
    import httpcore
    import httpx

    parsed = httpx.URL(url)
    headers = []
    if parsed.username or parsed.password:
        auth = httpx.BasicAuth(parsed.username, parsed.password)
        request = next(auth.sync_auth_flow(httpx.Request("POST", parsed)))
        headers.append((b"authorization", request.headers["authorization"].encode()))
    raw = httpcore.URL(
        scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port, target=parsed.raw_path
    )
    return raw, headers


def may_be_proxied(url: str) -> bool:
    """Whether a proxy named in the environment (``HTTP_PROXY``, ``HTTPS_PROXY``,
    ``ALL_PROXY``, or their lowercase) may apply to ``url``, read as httpx reads them
    (``urllib.request.getproxies``: its scheme's or ``all``; ``NO_PROXY=*`` turns them all
    off). Whether another entry of ``NO_PROXY`` exempts it is httpx's to say: such a target
    is sent by httpx's own client, which applies them all."""
    proxies = getproxies()
    if "*" in (host.strip() for host in proxies.get("no", "").split(",")):
        return False
    return bool(proxies.get(urlsplit(url).scheme) or proxies.get("all"))


def _outcome_of_answer(
    run_id: int, name: object, status: int | None, text: str, location: str
) -> Outcome:
    """What an answer's status (and the start of its body) makes of the run."""
    assert status is not None
    if status == 202:
        # Accepted, not done: the receiver reports the end later (POST runs/report/ of the
        # REST API, or outcomes.report_finished), by the key.
        return Outcome(run_id, OutcomeStatus.DISPATCHED, response_status=status)
    if 200 <= status < 300:
        return Outcome(run_id, OutcomeStatus.SUCCEEDED, response_status=status)
    error = f"The target {name!r} answered HTTP {status}: {text}"
    if status >= 500 or status in RETRY_STATUSES:
        return Outcome(run_id, OutcomeStatus.RETRY, error, response_status=status)
    if 300 <= status < 400:
        error = (
            f"The target {name!r} answered HTTP {status} (to {location}); redirects are not "
            "followed."
        )
    return Outcome(run_id, OutcomeStatus.FAILED, error, response_status=status)


def _target_problems(target: Any) -> list[str]:
    if not isinstance(target, dict) or set(target) != {"URL", "SECRET"}:
        return ["must be a dict with URL and SECRET"]
    problems = []
    url = urlsplit(str(target["URL"]))
    if url.scheme not in ("http", "https") or not url.hostname:
        problems.append(f"URL must be an http:// or https:// URL, got {target['URL']!r}")
    secret = target["SECRET"]
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        problems.append("SECRET must be a 'whsec_' secret (whsec_ and base64)")
    else:
        try:
            key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if not 24 <= len(key) <= 64:
            problems.append("SECRET must hold 24 to 64 bytes in base64 after 'whsec_'")
    return problems
