"""A Sentry ingest endpoint on 127.0.0.1 for the tests: it takes the envelopes a real
sentry-sdk posts to ``/api/<project>/envelope/`` (gzipped or not), and records the items of
each (check-ins, and anything else the SDK sends).

``hold()`` makes it keep every request waiting, unanswered, until ``release()``: what a
Sentry that has stopped answering looks like to the SDK's transport."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class SentryReceiver:
    dsn: str
    # Every item of every envelope received: its type, and its payload (JSON).
    items: list[tuple[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    # Requests that arrived while held, still unanswered.
    waiting: int = 0
    answered: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.answered.set()

    def check_ins(self) -> list[dict[str, Any]]:
        with self.lock:
            return [payload for kind, payload in self.items if kind == "check_in"]

    def check_ins_of(self, slug: str) -> list[dict[str, Any]]:
        return [c for c in self.check_ins() if c["monitor_slug"] == slug]

    def hold(self) -> None:
        self.answered.clear()

    def release(self) -> None:
        self.answered.set()


def parse_envelope(body: bytes) -> list[tuple[str, Any]]:
    """The items of an envelope: a header line, then for each item a header line and its
    payload (``length`` bytes when the header says, else up to the end of the line)."""
    _, _, rest = body.partition(b"\n")
    items = []
    while rest.strip():
        header_line, _, rest = rest.partition(b"\n")
        header = json.loads(header_line)
        if "length" in header:
            payload, rest = rest[: header["length"]], rest[header["length"] + 1 :]
        else:
            payload, _, rest = rest.partition(b"\n")
        try:
            items.append((header["type"], json.loads(payload)))
        except ValueError:
            items.append((header["type"], payload))
    return items


@contextmanager
def sentry_receiver() -> Iterator[SentryReceiver]:
    receiver: SentryReceiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            with receiver.lock:
                receiver.paths.append(self.path)
                receiver.items.extend(parse_envelope(body))
                receiver.waiting += 1
            receiver.answered.wait(120)
            with receiver.lock:
                receiver.waiting -= 1
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = SentryReceiver(f"http://public@127.0.0.1:{server.server_address[1]}/1")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release()
        server.shutdown()
        server.server_close()
