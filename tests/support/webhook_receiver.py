"""A webhook receiver on 127.0.0.1 for the tests: it verifies every request the way the
Standard Webhooks specification's own library does (``standardwebhooks.Webhook.verify``),
records what it received, and answers with the statuses a test queues per path.

A path may also be answered the ways that hold a sender: late (``delays``, or ``hold`` for its
next requests), with headers that trickle in one byte at a time for as long as the sender
reads (``trickle``: a read timeout never fires), or with a huge error body streamed as fast
as the sender reads it (``huge``); ``sent`` counts the bytes that went out on each path."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # 24 bytes, base64
TRICKLE_SECONDS = 0.2  # between two bytes of trickled headers
TRICKLE_BYTES = 10_000  # their length: half an hour of trickling
HUGE_BODY_BYTES = 64 * 1024 * 1024
CHUNK = b"x" * 65536


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
    # Seconds to wait before answering, per path.
    delays: dict[str, float] = field(default_factory=dict)
    # Seconds to hold the next requests of a path, first come first served (``hold``);
    # then ``delays``.
    holds: dict[str, list[float]] = field(default_factory=dict)
    trickle: set[str] = field(default_factory=set)
    huge: set[str] = field(default_factory=set)
    sent: Counter[str] = field(default_factory=Counter)
    # Answers still being written (a trickle the sender has not hung up on).
    answering: int = 0
    closed: threading.Event = field(default_factory=threading.Event)

    def answer(self, path: str, *statuses: int) -> None:
        self.answers.setdefault(path, []).extend(statuses)

    def hold(self, path: str, *seconds: float) -> None:
        """Hold the next requests of ``path`` this long each before answering."""
        self.holds.setdefault(path, []).extend(seconds)

    def keys(self, path: str = "/hook") -> list[str]:
        return [r.headers["webhook-id"] for r in self.received if r.path == path]


@contextmanager
def webhook_receiver(secret: str = SECRET, tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """The receiver, over TLS with ``tls`` (a server's context): its URL is then https."""
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
                held = receiver.holds.get(self.path) or []
                delay = held.pop(0) if held else receiver.delays.get(self.path, 0)
            receiver.closed.wait(delay)
            if self.path in receiver.trickle:
                self._stream(b"HTTP/1.1 200 OK\r\nX-Slow: ", TRICKLE_BYTES, b"a", TRICKLE_SECONDS)
                return
            if self.path in receiver.huge:
                head = f"HTTP/1.1 500 Oops\r\nContent-Length: {HUGE_BODY_BYTES}\r\n\r\n"
                self._stream(head.encode(), HUGE_BODY_BYTES, CHUNK, 0)
                return
            self.send_response(status if verified else 401)
            if 300 <= status < 400:
                self.send_header("Location", receiver.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _stream(self, head: bytes, length: int, chunk: bytes, pause: float) -> None:
            """Write ``head``, then ``length`` bytes ``chunk`` by ``chunk``, until the sender
            hangs up or the receiver closes."""
            with lock:
                receiver.answering += 1
            try:
                self.wfile.write(head)
                left = length
                while left > 0 and not receiver.closed.is_set():
                    part = chunk[:left]
                    self.wfile.write(part)
                    self.wfile.flush()
                    with lock:
                        receiver.sent[self.path] += len(part)
                    left -= len(part)
                    if pause:
                        time.sleep(pause)
            except OSError:
                pass  # the sender hung up
            finally:
                with lock:
                    receiver.answering -= 1

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    scheme = "http"
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    receiver = Receiver(url=f"{scheme}://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.closed.set()
        server.shutdown()
        server.server_close()
