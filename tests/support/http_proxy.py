"""An HTTP forward proxy on 127.0.0.1, as ``HTTP_PROXY`` names one: it takes each request in
absolute form (``POST http://host:port/path HTTP/1.1``), records its target, and passes it on
to that host with its headers and body, then relays the answer's status, headers and body."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te"}


@dataclass
class Proxy:
    url: str
    targets: list[str] = field(default_factory=list)  # each request's absolute URL


@contextmanager
def http_proxy() -> Iterator[Proxy]:
    lock = threading.Lock()
    proxy: Proxy

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps the client's connection open between requests

        def do_POST(self) -> None:
            with lock:
                proxy.targets.append(self.path)
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            target = urlsplit(self.path)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            upstream = http.client.HTTPConnection(target.hostname or "", target.port, timeout=30)
            try:
                path = target.path + (f"?{target.query}" if target.query else "")
                upstream.request("POST", path, body=body, headers=headers)
                answer = upstream.getresponse()
                content = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP_BY_HOP | {"content-length", "transfer-encoding"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)
            finally:
                upstream.close()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    proxy = Proxy(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
