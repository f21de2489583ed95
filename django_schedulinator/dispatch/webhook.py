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
the run at once. The status is stored on the run. httpx (the ``[webhook]`` extra) sends
them: explicit timeouts for connect, read and write, connection reuse, and no redirects
unless asked.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import socket
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any
from urllib.parse import urlsplit

from django.core.checks import CheckMessage, Error, Warning

from ..timing import to_ms
from .base import DEFAULT_ALIAS, BaseDispatcher, Occurrence, Option, Outcome, Progress

SECRET_PREFIX = "whsec_"
# Statuses that say "try again later" rather than "no".
RETRY_STATUSES = frozenset({408, 425, 429})
MAX_ERROR_CHARS = 2000


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
            float, "Connect, write and read timeout of one request.", minimum=0.1, default=10.0
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
        self._client: Any = None
        self._pool: ThreadPoolExecutor | None = None

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
                    hint="pip install 'django-schedulinator[webhook]'",
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

    def dispatch(self, occurrences: Sequence[Occurrence], progress: Progress) -> list[Outcome]:
        if self._pool is None:
            import httpx

            timeout = self.settings["TIMEOUT_SECONDS"]
            self._client = httpx.Client(
                timeout=httpx.Timeout(timeout),
                follow_redirects=False,
                limits=httpx.Limits(max_connections=self.settings["MAX_CONCURRENCY"]),
            )
            self._pool = ThreadPoolExecutor(
                self.settings["MAX_CONCURRENCY"], thread_name_prefix="schedulinator-webhook"
            )
        pool = self._pool
        pending: dict[Future[Outcome], Occurrence] = {
            pool.submit(self._send, o): o for o in occurrences
        }
        outcomes: list[Outcome] = []
        while pending:
            done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            ended = [future.result() for future in done]
            for future in done:
                del pending[future]
            outcomes += ended
            if ended and pending:
                progress.finished(ended)
            progress.keepalive()
        return outcomes

    def _send(self, occurrence: Occurrence) -> Outcome:
        import httpx

        run_id = occurrence.run_id
        name = occurrence.dispatch_options.get("target")
        target = self.targets.get(name) if isinstance(name, str) else None
        if target is None:
            return Outcome(
                run_id,
                "failed",
                f"The webhook target {name!r} is not in the dispatcher {self.alias!r}'s "
                f"TARGETS ({', '.join(sorted(self.targets))}).",
            )
        body = body_of(occurrence)
        timestamp = int(time.time())
        headers = {
            "content-type": "application/json",
            "user-agent": "django-schedulinator",
            "webhook-id": occurrence.key,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(target["SECRET"], occurrence.key, timestamp, body),
        }
        try:
            response = self._client.post(target["URL"], content=body, headers=headers)
        except httpx.HTTPError as exc:
            return Outcome(run_id, "retry", f"{type(exc).__name__}: {exc or 'no detail'}")
        status = response.status_code
        if status == 202:
            # Accepted, not done: the receiver reports the end later (POST runs/report/ of
            # the REST API, or outcomes.report_finished), by the key.
            return Outcome(run_id, "dispatched", response_status=status)
        if 200 <= status < 300:
            return Outcome(run_id, "succeeded", response_status=status)
        text = f"The target {name!r} answered HTTP {status}: {response.text[:MAX_ERROR_CHARS]}"
        if status >= 500 or status in RETRY_STATUSES:
            return Outcome(run_id, "retry", text, response_status=status)
        if 300 <= status < 400:
            where = response.headers.get("location", "")
            text = (
                f"The target {name!r} answered HTTP {status} (to {where}); redirects are "
                f"not followed."
            )
        return Outcome(run_id, "failed", text, response_status=status)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None


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
