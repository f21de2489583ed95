"""A webhook receiver on 127.0.0.1 for the tests: it verifies every request the way the
Standard Webhooks specification's own library does (``standardwebhooks.Webhook.verify``),
records what it received, and answers with the statuses a test queues per path."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # 24 bytes, base64


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    verified: bool


@dataclass
class Receiver:
    url: str
    received: list[Received] = field(default_factory=list)
    # Statuses to answer per path, first come first served; then 204.
    answers: dict[str, list[int]] = field(default_factory=dict)
    # Extra headers per status (a Location for a redirect).
    redirect_to: str = ""

    def answer(self, path: str, *statuses: int) -> None:
        self.answers.setdefault(path, []).extend(statuses)

    def keys(self, path: str = "/hook") -> list[str]:
        return [r.headers["webhook-id"] for r in self.received if r.path == path]


@contextmanager
def webhook_receiver(secret: str = SECRET) -> Iterator[Receiver]:
    verifier = Webhook(secret)
    lock = threading.Lock()
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers.get("content-length", 0)))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                verifier.verify(data, headers)
                verified = True
            except WebhookVerificationError:
                verified = False
            with lock:
                receiver.received.append(Received(self.path, headers, json.loads(data), verified))
                queued = receiver.answers.get(self.path) or []
                status = queued.pop(0) if queued else 204
            self.send_response(status if verified else 401)
            if 300 <= status < 400:
                self.send_header("Location", receiver.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
