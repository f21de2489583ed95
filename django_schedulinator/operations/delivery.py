"""The outbox's delivery step, ``deliver_outbox``: what waits in the outbox (``outbox.py``,
a missed or failed run each, written with its mark, or the end of a streak of them) is sent
to the notifier of the settings, and marked delivered once the notifier accepted it;
refused, it is sent again after a back-off. An alert grouped into its schedule's streak
(``grouping.py``: its role, decided when it was raised) is marked delivered unsent.

The step is the same wherever it runs: in a scheduler after its missed-run check (on the
courier's thread), in ``scheduler_status --notify``, or called by a job of your own. It
sends at most ``NOTIFY_MESSAGES_PER_MINUTE`` messages a minute; when more misses wait than
that lets through one by one, they go as one digest (an ``Event`` of kind "digest", which
lists the first ``NOTIFY_DIGEST_SIZE`` and counts the rest). It stops at its deadline
(``NOTIFY_DELIVERY_SECONDS``), checked between two messages, and leaves the rest to the
next step.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import router

from django_schedulinator.conf import app_settings
from django_schedulinator.index import clock
from django_schedulinator.models import Notification
from django_schedulinator.operations import grouping, outbox
from django_schedulinator.operations.events import Event, admin_url, complete, complete_many
from django_schedulinator.operations.notifiers import BaseNotifier, former_paths, get_notifier
from django_schedulinator.timing.vocabulary import AlertRole

logger = logging.getLogger("django_schedulinator.notify")


@dataclass(slots=True)
class Delivery:
    """What one delivery step did."""

    notifier: str = ""  # NOTIFY's BACKEND; "": nobody is told of missed or failed runs
    messages: int = 0  # the notifier accepted them
    told: int = 0  # alerts in those messages
    grouped: int = 0  # alerts grouped into their schedule's streak, told of in its reminders
    failed: int = 0  # messages refused (or raising): sent again after a back-off
    waiting: int = 0  # misses still waiting when it ended
    rate_limited: bool = False  # the minute's messages were spent: the rest wait for the next
    stopped: bool = False  # its deadline (or a stop) came before everything due was sent

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        if not self.notifier:
            return "nobody is told (NOTIFY is None, or its EVENTS leave out 'missed' and 'failed')"
        text = (
            f"{self.messages} message(s) sent ({self.told} alert(s)), {self.grouped} grouped "
            f"into a streak already told of, {self.failed} refused, {self.waiting} waiting"
        )
        if self.rate_limited:
            text += " (the minute's messages are spent: NOTIFY_MESSAGES_PER_MINUTE)"
        if self.stopped:
            text += " (stopped at the deadline: the next step sends the rest)"
        return text


def deliver_outbox(
    *,
    seconds: float | None = None,
    using: str | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Delivery:
    """The delivery step: send what waits in the outbox for the notifier of the settings
    (at Redis time, ``clock.now()``; this host's while Redis is away), and mark each entry
    delivered once the notifier accepted its message. At most NOTIFY_MESSAGES_PER_MINUTE
    messages a minute: when more misses are due than the minute has messages left, they go
    as one digest. It sends for ``seconds`` at most (default NOTIFY_DELIVERY_SECONDS),
    checked between two messages, as ``should_stop`` is; what it has not sent by then is
    given back for the next step. Nothing it meets is raised: a notifier that fails is
    logged, and its entries tried again after a back-off."""
    db = using or router.db_for_write(Notification)
    budget_seconds = app_settings.NOTIFY_DELIVERY_SECONDS if seconds is None else seconds
    deadline = time.monotonic() + budget_seconds
    report = Delivery()
    name = outbox.delivering()
    if name is None:
        return report  # nobody is told of missed or failed runs: what waits, waits
    report.notifier = name
    try:
        notifier = get_notifier()
    except ImproperlyConfigured:
        logger.exception("Could not build the notifier: the alerts raised wait for it.")
        report.waiting = outbox.waiting(name, using=db)
        return report
    assert notifier is not None  # notifier_for() found NOTIFY
    # What waits under the notifier's former path (before it moved) is its own: no news.
    outbox.retarget(name, using=db, only=former_paths(name))
    moved = outbox.retarget(name, using=db)
    if moved:
        logger.warning(
            "%d alert(s) waited for a notifier that is no longer configured: they go to %s.",
            moved,
            name,
        )
    step = _Step(notifier, name, db, uuid.uuid4().hex, deadline, should_stop, report)
    outbox.prune_delivered(step.now(), using=db)
    while step.send_batch():
        pass
    report.waiting = outbox.waiting(name, using=db)
    return report


class _Step:
    """One delivery step's state: its claim token, its deadline, its report."""

    def __init__(
        self,
        notifier: BaseNotifier,
        name: str,
        db: str,
        token: str,
        deadline: float,
        should_stop: Callable[[], bool] | None,
        report: Delivery,
    ) -> None:
        self.notifier, self.name, self.db, self.token = notifier, name, db, token
        self.deadline, self.should_stop, self.report = deadline, should_stop, report
        self.lease = timedelta(seconds=app_settings.LEASE_SECONDS)
        # Redis TIME once (this host's clock while Redis is away), then the time since:
        # a Redis that does not answer costs its timeout once, not once per message.
        self._read_at, self._started = clock.now(), time.monotonic()

    def now(self) -> datetime:
        return self._read_at + timedelta(seconds=time.monotonic() - self._started)

    def time_is_up(self) -> bool:
        return time.monotonic() >= self.deadline or (
            self.should_stop is not None and self.should_stop()
        )

    def send_batch(self) -> bool:
        """Claim what is due and send it as the minute's messages allow: whether a full
        claim went out whole (more may wait)."""
        now = self.now()
        left = app_settings.NOTIFY_MESSAGES_PER_MINUTE - outbox.sent_since(
            self.name, now - outbox.MINUTE, using=self.db
        )
        if left <= 0:
            self.report.rate_limited = True
            return False
        if self.time_is_up():
            self.report.stopped = True
            return False
        claimed = outbox.claim(
            self.name, now=now, until=now + self.lease, token=self.token, using=self.db
        )
        # Grouped into a streak already told of: its reminders and its end count them.
        grouped = [e.pk for e in claimed if e.role == AlertRole.GROUPED]
        if grouped:
            outbox.delivered(grouped, token=self.token, now=now, using=self.db, told=False)
            self.report.grouped += len(grouped)
        told = [e for e in claimed if e.role != AlertRole.GROUPED]
        messages, held_back = _messages(told, left)
        if held_back:
            self.report.rate_limited = True
            outbox.release([e.pk for e in held_back], token=self.token, using=self.db)
        for n, entries in enumerate(messages):
            if self.time_is_up():
                self.report.stopped = True
                rest = [e.pk for group in messages[n:] for e in group]
                outbox.release(rest, token=self.token, using=self.db)
                return False
            if not self.send(entries):
                rest = [e.pk for group in messages[n + 1 :] for e in group]
                # The notifier failed: the rest wait as long as the message it refused.
                again = min((e.next_attempt_at for e in entries if e.next_attempt_at), default=None)
                outbox.release(rest, token=self.token, using=self.db, not_before=again)
                return False
        return len(claimed) >= outbox.CLAIM_BATCH and not held_back

    def send(self, entries: list[Notification]) -> bool:
        """One message: a miss alone, or a digest of them. Whether the notifier took it
        (or wants none of it)."""
        event = _event(entries)
        ids = [e.pk for e in entries]
        until = self.now() + self.lease
        if not outbox.start(ids, message=event.id, token=self.token, until=until, using=self.db):
            # Another step took some of them over (this one outlived its claim): it sends them.
            outbox.release(ids, token=self.token, using=self.db)
            return True
        try:
            if not self.notifier.wants(event):
                outbox.delivered(ids, token=self.token, now=self.now(), using=self.db, told=False)
                return True
            self.notifier.notify(_completed(event))
        except Exception as exc:
            attempts = max(e.attempts for e in entries) + 1
            again = outbox.failed(
                ids,
                attempts=attempts,
                token=self.token,
                now=self.now(),
                error=f"{type(exc).__name__}: {exc}",
                using=self.db,
            )
            for e in entries:
                e.next_attempt_at = again
            self.report.failed += 1
            logger.error(
                "Could not notify of %s (%s): the notifier failed (%s: %s). Tried again "
                "from %s (attempt %d so far).",
                event.kind,
                event.id,
                type(exc).__name__,
                exc,
                again.isoformat(),
                attempts,
            )
            return False
        outbox.delivered(ids, token=self.token, now=self.now(), using=self.db)
        self.report.messages += 1
        self.report.told += len(ids)
        return True


def _messages(
    claimed: list[Notification], left: int
) -> tuple[list[list[Notification]], list[Notification]]:
    """The messages ``claimed`` goes out in, at most ``left`` of them, and what waits for
    the next minute. First, as they were, the messages whose sender died while sending them;
    then the rest: each alone if the minute has a message left for each, else one digest."""
    again: dict[str, list[Notification]] = {}
    fresh = []
    for entry in claimed:
        if entry.message:
            again.setdefault(entry.message, []).append(entry)
        else:
            fresh.append(entry)
    messages = list(again.values())[:left]
    held_back = [e for group in list(again.values())[left:] for e in group]
    left -= len(messages)
    if fresh and left <= 0:
        held_back += fresh
    elif len(fresh) <= left:
        messages += [[entry] for entry in fresh]
    else:
        messages.append(fresh)
    return messages, held_back


def _alert(entry: Notification) -> Event:
    return Event(
        entry.kind,
        entry.raised_at,
        schedule_id=entry.schedule_id,
        scheduled_for=entry.scheduled_for,
        run_id=entry.run_id,
        reason=entry.reason,
        grace=entry.grace,
        error=entry.error,
        role=entry.role,
        count=entry.count if entry.role in (AlertRole.REPEAT, AlertRole.RECOVERED) else 0,
        since=entry.since,
        repeat=grouping.repeat_after() if entry.role == AlertRole.FIRST else None,
    )


def _event(entries: list[Notification]) -> Event:
    """An alert alone, or a digest of many: the first NOTIFY_DIGEST_SIZE listed, the rest
    counted (names not read yet: ``_completed`` reads them once the notifier wants it)."""
    if len(entries) == 1:
        return _alert(entries[0])
    listed = tuple(_alert(e) for e in entries[: app_settings.NOTIFY_DIGEST_SIZE])
    noticed = min(e.raised_at for e in entries)
    return Event("digest", noticed, listed=listed, count=len(entries))


def _completed(event: Event) -> Event:
    if event.kind != "digest":
        return complete(event)
    config = app_settings.NOTIFY
    base = config.base_url if config is not None else ""
    url = admin_url(base, "admin:django_schedulinator_schedule_changelist")
    return dataclasses.replace(
        event,
        listed=tuple(complete_many(event.listed)),
        admin_url=f"{url}?missed=yes" if url else "",
    )
