"""The one way a thread runs beside a scheduler's loop: ``stage_thread``, the thread every
one of them runs on (the commit stage, the lanes, the recorder, the lease keeper, the prune,
the heartbeat, the probe server with its requests and checks, the notifications' courier,
the Sentry check-ins' sender, the probe of a due index's shard that is away); and
``Stage``, such a thread that handles what is put in its bounded queue, in order.

Every such thread is set up and torn down the same way, which is why there is one place for
it: it is marked as a stage thread (``on_stage_thread``), so that its database connections
wait on row locks for ``LOCK_TIMEOUT_SECONDS`` at most (``scheduler.transient``: a user's
transaction must not stall the scheduler) and the notifications it raises go to the
courier's thread (``operations.courier``: it never waits on a notifier); and when it ends it
closes its database connections and its instances of the dispatcher aliases (each thread
has its own).

Why here, and why a mark: the scheduler imports the operations, whose heartbeat, probes and
courier run threads too, so the primitive sits below both and imports neither (not even the
notifications it routes); what is decided per thread is decided by whoever reads the mark,
and the primitive calls into nobody. Handing a thread factory down from the scheduler
instead would not reach the courier, a module-wide object that every stage thread hands
notifications to and that is itself a stage, nor the probes, which the command starts.

A stage is bounded: ``put`` waits for room (or says there is none), so a stage that falls
behind holds back the one that feeds it, and through it the claim. ``stop`` takes nothing
more, lets the thread handle what waits, and waits for it until a deadline: a thread still
busy then is left to end on its own (its owner says what becomes of its work); ``drain``
waits, until a deadline too, for what waits to be handled, the thread going on. A
handler's error ends neither the thread nor the batch after it: the stage closes the
thread's connections (a broken one stays broken) and either keeps the error for its owner,
raised by the next ``put`` or ``drain`` (``raise_errors``: the commit stage, whose failures
the loop backs off from), or logs it.

Two kinds of thread are not stages, on purpose: the inline dispatcher's task threads run
the user's tasks, which must see Django's ordinary connections (no bound on their lock
waits, which would fail a task that waits on a row lock of its own), and the webhook
dispatcher's sending threads, with the event loop of its targets behind a proxy and the name
lookups it gives up at a deadline (``dispatch.deadlines``), send requests: they touch no
database, each request has its own deadline, and closing the dispatcher cuts them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from django.db import connections

from django_schedulinator.dispatch import dispatchers

logger = logging.getLogger("django_schedulinator.worker")

T = TypeVar("T")


# Set on each stage thread as it starts: what ``on_stage_thread`` reads.
_marked = threading.local()


def on_stage_thread() -> bool:
    """Whether this code runs on a stage thread (one ``stage_thread`` started)."""
    return bool(getattr(_marked, "stage", False))


def stage_thread(name: str, target: Callable[[], None]) -> threading.Thread:
    """A started daemon thread that runs ``target`` set up and torn down as every thread
    beside the loop is (see the module's docstring)."""

    def run() -> None:
        _marked.stage = True  # before it opens a connection or raises a notification
        try:
            target()
        finally:
            connections.close_all()  # this thread's
            dispatchers.close_all()  # and its instances of the aliases

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


class Stage(Generic[T]):
    """A thread that hands what is put, up to ``take`` items at a time in the order they
    came, to ``handle``; at most ``capacity`` items wait (those being handled not counted).

    ``on_error(items, exc)`` is told of a failed ``handle`` first (to give the items back,
    to log in words of its own); then the error is kept for the owner (``raise_errors``) or
    logged, unless ``on_error`` returned True (handled). ``on_start()`` runs on the thread
    before it handles anything, ``on_end()`` as it ends."""

    def __init__(
        self,
        name: str,
        handle: Callable[[list[T]], None],
        *,
        capacity: int,
        take: int = 1,
        on_error: Callable[[list[T], Exception], bool] | None = None,
        raise_errors: bool = False,
        on_start: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        if capacity < 1 or take < 1:
            raise ValueError("A stage holds and takes one item at least.")
        self.name = name
        self._handle = handle
        self.capacity = capacity
        self._take = take
        self._on_error = on_error
        self._raise_errors = raise_errors
        self._on_start = on_start
        self._on_end = on_end  # on the thread, as it ends (however late a stop left it)
        self._waiting: deque[tuple[T, float]] = deque()  # (item, time.monotonic() when put)
        self._handling: list[tuple[T, float]] = []
        self._error: Exception | None = None
        self._accepting = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    # -- the owner's side -------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Started, and not stopped since."""
        return self._accepting

    @property
    def alive(self) -> bool:
        """Its thread runs (busy, waiting for work, or ending after a stop)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        with self._changed:
            self._accepting = True
            self._error = None
        self._thread = stage_thread(self.name, self._run)

    def put(self, item: T, *, timeout: float | None = None) -> bool:
        """Queue ``item``, waiting for room (for ``timeout`` seconds at most; None: as long
        as it takes). False when there was no room in time, or the stage is not running:
        the caller keeps the item. Raises a kept error first (``raise_errors``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            self._raise_kept()
            while self._accepting and len(self._waiting) >= self.capacity:
                if not self._wait(deadline):
                    return False
            if not self._accepting:
                return False
            self._waiting.append((item, time.monotonic()))
            self._changed.notify_all()
            return True

    def wait_below(self, depth: int, timeout: float) -> bool:
        """Wait (``timeout`` seconds at most) until fewer than ``depth`` items wait: how a
        feeder slows down for a stage that is behind before its queue is full."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._accepting and len(self._waiting) >= depth:
                if not self._wait(deadline):
                    return False
            return True

    def drain(self, deadline: float | None = None) -> bool:
        """Wait until nothing waits and nothing is being handled, or until ``deadline``
        (``time.monotonic()``; None: as long as it takes); then raise a kept error
        (``raise_errors``). Returns whether nothing is left; the thread goes on."""
        with self._changed:
            while self._waiting or self._handling:
                if self._thread is None or not self._thread.is_alive():
                    break  # nothing left to handle them
                if not self._wait(deadline):
                    break
            self._raise_kept()
            return not (self._waiting or self._handling)

    def stop(self, deadline: float | None = None) -> bool:
        """Take nothing more; the thread handles what waits, then ends. Waits for it until
        ``deadline`` (``time.monotonic()``; None: as long as it takes). Returns whether it
        ended; a kept error is logged."""
        with self._changed:
            self._accepting = False
            self._changed.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return False
            self._thread = None
        with self._changed:
            error, self._error = self._error, None
        if error is not None:
            logger.warning(
                "%s: the last work failed (%s: %s).", self.name, type(error).__name__, error
            )
        return True

    def waiting(self) -> list[tuple[T, float]]:
        """The items waiting, each with when it was put (``time.monotonic()``): a snapshot,
        read from any thread (heartbeats, metrics)."""
        with self._changed:
            return list(self._waiting)

    def handling(self) -> list[tuple[T, float]]:
        """The items being handled now, each with when it was put: a snapshot."""
        with self._changed:
            return list(self._handling)

    # -- the thread's side ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self._on_start is not None:
                self._on_start()
            self._handle_all()
        finally:
            if self._on_end is not None:
                self._on_end()

    def _handle_all(self) -> None:
        while items := self._next():
            try:
                self._handle(items)
            except Exception as exc:
                connections.close_all()  # a broken connection stays broken: reconnect
                if self._on_error is not None and self._on_error(items, exc):
                    pass  # said and done by the owner
                elif self._raise_errors:
                    with self._changed:
                        self._error = exc
                else:
                    logger.exception("%s: handling %d item(s) failed.", self.name, len(items))
            finally:
                with self._changed:
                    self._handling = []
                    self._changed.notify_all()

    def _next(self) -> list[T]:
        """What waits (up to ``take`` items), once something does; [] once the stage
        stopped and nothing is left."""
        with self._changed:
            while not self._waiting and self._accepting:
                self._changed.wait()
            taken = [self._waiting.popleft() for _ in range(min(self._take, len(self._waiting)))]
            self._handling = taken
            self._changed.notify_all()  # room for a feeder that waits
            return [item for item, _put in taken]

    def _wait(self, deadline: float | None) -> bool:
        """Wait for a change (until ``deadline``); False once the deadline has passed."""
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        self._changed.wait(left)
        return True

    def _raise_kept(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def oldest(puts: Sequence[tuple[object, float]]) -> float | None:
    """How long ago the oldest of these items was put (seconds), or None for none."""
    first = min((put for _item, put in puts), default=None)
    return None if first is None else time.monotonic() - first
