"""Whether a thread closed the database connections it opened: ``Opened`` runs a real query
on the thread that calls it and keeps that thread and its connection, to be looked at once
the thread is done (Django's connections are a thread's own)."""

from __future__ import annotations

import threading

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper


class Opened:
    def __init__(self) -> None:
        self.seen: list[tuple[threading.Thread, BaseDatabaseWrapper]] = []
        self._lock = threading.Lock()

    def __call__(self) -> None:
        connection = connections[DEFAULT_DB_ALIAS]
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        with self._lock:
            self.seen.append((threading.current_thread(), connection))

    def thread_names(self) -> set[str]:
        with self._lock:
            return {thread.name for thread, _connection in self.seen}

    def still_open(self, wait: float = 10.0) -> list[str]:
        """The threads that opened a connection and left it open once they ended (each
        waited for ``wait`` seconds at most); a thread still running is named too."""
        with self._lock:
            seen = list(self.seen)
        assert seen, "no thread opened a connection"
        left = []
        for thread, connection in seen:
            thread.join(wait)
            if thread.is_alive() or connection.connection is not None:
                left.append(thread.name)
        return left
