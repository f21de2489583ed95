"""What the scheduler's threads share about the services they wait on: the errors that pass
(a connection that drops comes back), and a bound on how long a row lock holds them up."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from django.db import InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_schedulinator.conf import app_settings
from django_schedulinator.index.health import NODE_ERRORS
from django_schedulinator.operations.stage import on_stage_thread

# Connections that drop come back, a Redis that is loading its data or failing over becomes
# writable again (index.health.NODE_ERRORS: a Redis Cluster between two masters of a slot
# too); a missing table or bad SQL does not, and must surface.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (*NODE_ERRORS, OperationalError, InterfaceError)

# The loop's thread (claiming, not the tasks), and every stage thread beside it (marked by
# operations.stage): their PostgreSQL connections wait at most LOCK_TIMEOUT_SECONDS on
# another transaction's row lock.
_loop_threads = threading.local()


def _set_lock_timeout(connection: BaseDatabaseWrapper, reset: bool = False) -> None:
    if connection.vendor != "postgresql":
        return  # SQLite has no row locks: its writers wait on the database's own timeout
    with connection.cursor() as cursor:
        if reset:
            cursor.execute("RESET lock_timeout")
        else:
            ms = max(1, round(app_settings.LOCK_TIMEOUT_SECONDS * 1000))
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [f"{ms}ms"])


def bound_new_connections(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """``connection_created`` (connected in ``AppConfig.ready``): a connection the loop's
    thread or a stage thread opens waits on row locks for ``LOCK_TIMEOUT_SECONDS`` at most,
    as those it had."""
    if getattr(_loop_threads, "bounded", False) or on_stage_thread():
        _set_lock_timeout(connection)


def bound_lock_waits(enabled: bool = True) -> None:
    """Bound (or stop bounding) how long this thread's database connections wait on row
    locks: those open now and those it opens later. A user's transaction that holds a row
    (an edit, a migration) must not stall the scheduler behind it for longer. For the
    loop's thread: a stage thread's are bounded from its start to its end."""
    _loop_threads.bounded = enabled  # and those it opens later: bound_new_connections
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None:
            # Best effort: a dead connection reconnects (bounded then), and one in a failed
            # transaction is closed or rolled back by its owner.
            with contextlib.suppress(Exception):
                _set_lock_timeout(connection, reset=not enabled)
