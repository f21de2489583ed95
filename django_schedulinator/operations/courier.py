"""The courier: where events go, and the outbox's delivery steps run. From a scheduler's
threads (its loop, and every stage thread beside it: ``stage.on_stage_thread``) they are
queued for the courier's own thread, a ``Stage``, so that no notifier runs on the claim
path: the queue is bounded (an event over the bound is dropped, with a log), and a stop
waits a few seconds for what is queued. Anywhere else (a web process that paused a
schedule after a reported failure, ``scheduler_status --notify``) they are sent before the
call returns, and
so are those raised on the courier's own thread: it never queues to itself, nor waits on
itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from django_schedulinator.operations.delivery import Delivery, deliver_outbox
from django_schedulinator.operations.events import Event
from django_schedulinator.operations.notifiers import deliver
from django_schedulinator.operations.stage import Stage, on_stage_thread

logger = logging.getLogger("django_schedulinator.notify")

# Events waiting for the courier's thread; more are dropped (and logged).
QUEUE_SIZE = 1000


# An item of the queue: what it is (for the logs), and how to send it.
Item = tuple[str, Callable[[], None]]


class Courier:
    """Where events go, and delivery steps run: queued for its stage when they come from a
    scheduler's threads, sent at once anywhere else (see the module's docstring)."""

    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self._stage: Stage[Item] = Stage(
            "schedulinator-notify",
            self._send,
            capacity=size,
            on_error=self._failed,
            # Its own thread sends at once what it raises: it never queues to itself.
            on_start=lambda: self.send_in_background(False),
        )
        self._local = threading.local()
        self._lock = threading.Lock()
        self._step_queued = False
        # A stop stopped waiting: a delivery step ends after the message it sends.
        self._hurry = threading.Event()
        self.dropped = 0

    def send_in_background(self, enabled: bool = True) -> None:
        """From now on, events raised by this thread are queued (``enabled``: a scheduler's
        loop), or sent at once (False). Unsaid, a stage thread queues them, and any other
        thread sends them at once."""
        self._local.background = enabled
        if enabled:
            self._hurry.clear()

    def _in_background(self) -> bool:
        said: bool | None = getattr(self._local, "background", None)
        return on_stage_thread() if said is None else said

    def put(self, event: Event) -> None:
        if not self._in_background():
            deliver(event)
            return
        self._enqueue(event.id, lambda: deliver(event))

    def deliver_outbox(self, using: str | None = None) -> Delivery | None:
        """A delivery step of the outbox (``deliver_outbox``): queued for the courier's
        thread from a scheduler's threads (at most one waits there), run now elsewhere."""
        if not self._in_background():
            return deliver_outbox(using=using)
        with self._lock:
            if self._step_queued:
                return None
            self._step_queued = True
        self._enqueue("a delivery step of the outbox", lambda: self._step(using))
        return None

    def _step(self, using: str | None) -> None:
        with self._lock:
            self._step_queued = False
        deliver_outbox(using=using, should_stop=self._hurry.is_set)

    def _enqueue(self, what: str, send: Callable[[], None]) -> None:
        self._start()
        if self._stage.put((what, send), timeout=0):
            return
        with self._lock:
            self.dropped += 1
            dropped = self.dropped
            if what.startswith("a delivery step"):
                self._step_queued = False  # the next chore queues another
        if dropped == 1 or dropped % 100 == 0:
            logger.error(
                "%d notification(s) dropped so far: %d wait to be sent already (the "
                "notifier is slow or hangs). Dropped: %s.",
                dropped,
                len(self._stage.waiting()),
                what,
            )

    def drain(self, timeout: float) -> bool:
        """Wait, ``timeout`` seconds at most, until what is queued is sent; whether it all
        was. Past the wait, a delivery step in progress ends after its message: what it
        has not sent waits in the outbox for another. The thread goes on (for the next
        scheduler of this process, if any: it is the process's)."""
        if self._stage.drain(time.monotonic() + timeout):
            return True
        self._hurry.set()
        logger.warning(
            "Stopped waiting for %d notification(s) still to be sent.",
            len(self._stage.waiting()) + len(self._stage.handling()),
        )
        return False

    def _start(self) -> None:
        with self._lock:
            if not self._stage.alive:
                self._stage.start()

    # -- on the courier's thread ----------------------------------------------------------

    def _send(self, items: list[Item]) -> None:
        try:
            for _what, send in items:
                send()
        finally:
            connections.close_all()  # this thread's, after each: it may wait long for the next

    def _failed(self, items: list[Item], exc: Exception) -> bool:
        # The thread outlives anything (the stage goes on): the next one may work.
        logger.error("Sending %s failed.", items[0][0], exc_info=exc)
        return True


courier = Courier()
