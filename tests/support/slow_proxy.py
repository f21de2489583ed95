"""A slow network in front of a real server, for tests of a hand-off that takes its time: a
TCP relay on 127.0.0.1 that passes every byte on, and holds each chunk of the server's
answers for ``delay`` seconds first. A client that waits for its answers (Redis, for RQ's
enqueue) then takes that much longer per round trip; nothing else about the server changes."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from .redis_server import free_port


class SlowProxy:
    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port = target_port
        self.delay = delay
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{database}"

    def close(self) -> None:
        self._closed = True
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, 0.0), daemon=True).start()
            threading.Thread(
                target=self._pump, args=(server, client, self.delay), daemon=True
            ).start()

    def _pump(self, source: socket.socket, target: socket.socket, delay: float) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                time.sleep(delay)
                target.sendall(chunk)
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
