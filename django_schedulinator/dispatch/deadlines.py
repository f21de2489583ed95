"""Connections for httpcore's synchronous pools whose every wait ends at the deadline of the
request they carry, and that a close on another thread can cut (the webhook dispatcher's).

httpcore bounds each read and write of a connection on its own (a socket timeout), so a
receiver that sends a byte every half second would never time out. Through ``Deadlines``,
the backend of those pools, every wait of a request (the name's lookup, connecting, the TLS
handshake, each write and read) takes at most what is left of the deadline that the sending
thread set for it (``Deadlines.start``), and once that is past the request fails with
httpcore's own timeout. Every connection open is known, so ``cut_all`` wakes the threads
blocked on them: a socket's shutdown does, where closing it from another thread would not.

Imported by the webhook dispatcher when it starts sending: it needs httpcore (the
``[webhook]`` extra's httpx brings it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import httpcore

# What httpcore raises when a request goes wrong on the way, but its timeouts (its errors
# share no base of their own).
ERRORS = (
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    httpcore.ProxyError,
    httpcore.ConnectionNotAvailable,
)


class Deadlines(httpcore.NetworkBackend):
    """httpcore's synchronous backend, each wait within the calling thread's deadline."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[BoundedStream] = set()
        self._cut = False

    def start(self, seconds: float) -> None:
        """This thread's next request has ``seconds`` in all, from now."""
        self._local.deadline = time.monotonic() + seconds

    def left(self, timeout: float | None, error: type[Exception]) -> float:
        """How long a wait may last: its own timeout, within what is left of the
        deadline; ``error`` once nothing is left."""
        if self._cut:
            raise httpcore.NetworkError("The dispatcher closed.")
        left: float = self._local.deadline - time.monotonic()
        if left <= 0:
            raise error("The request's deadline is past.")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        # The name is looked up here, within the deadline (socket.create_connection would
        # wait for the resolver as long as it takes), then each address tried in turn.
        addresses = self._addresses(host, port, self.left(timeout, httpcore.ConnectTimeout))
        error: Exception = httpcore.ConnectError(f"No address for {host!r}.")
        for address in addresses:
            try:
                stream = self._backend.connect_tcp(
                    address,
                    port,
                    self.left(timeout, httpcore.ConnectTimeout),
                    local_address,
                    socket_options,
                )
            except httpcore.ConnectError as exc:
                error = exc
                continue
            return self._opened(stream)
        raise error

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        left = self.left(timeout, httpcore.ConnectTimeout)
        return self._opened(self._backend.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def cut_all(self) -> None:
        """Fail every request on these connections at once, and any started later."""
        with self._lock:
            self._cut = True
            streams = list(self._open)
        for stream in streams:
            stream.cut()

    def _addresses(self, host: str, port: int, within: float) -> list[str]:
        with contextlib.suppress(ValueError):
            return [str(ipaddress.ip_address(host))]  # no lookup to wait for
        found: Future[list[Any]] = Future()

        def look_up() -> None:
            try:
                found.set_result(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
            except Exception as exc:
                found.set_exception(exc)

        # A lookup cannot be interrupted: past the deadline it goes on in its thread, and
        # its answer is dropped.
        threading.Thread(target=look_up, name="schedulinator-webhook-lookup", daemon=True).start()
        try:
            infos = found.result(within)
        except FutureTimeout:
            raise httpcore.ConnectTimeout(f"Looking up {host!r} took too long.") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    def _opened(self, stream: httpcore.NetworkStream) -> BoundedStream:
        bounded = BoundedStream(stream, self)
        with self._lock:
            if not self._cut:
                self._open.add(bounded)
                return bounded
        stream.close()
        raise httpcore.ConnectError("Closed.")

    def _closed(self, stream: BoundedStream) -> None:
        with self._lock:
            self._open.discard(stream)


class BoundedStream(httpcore.NetworkStream):
    """One connection: each wait within its thread's deadline (``Deadlines.left``)."""

    def __init__(self, stream: httpcore.NetworkStream, deadlines: Deadlines) -> None:
        self._stream = stream
        self._deadlines = deadlines

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._deadlines.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._deadlines.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._deadlines._closed(self)
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = self._deadlines.left(timeout, httpcore.ConnectTimeout)
        self._deadlines._closed(self)  # the same socket, known as the TLS stream from now
        return self._deadlines._opened(self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)

    def cut(self) -> None:
        """Wake whatever thread waits on this connection: it fails at once."""
        sock = self._stream.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            # socket.socket's own shutdown: a TLS socket's would also drop its TLS object
            # under the thread that reads it.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
