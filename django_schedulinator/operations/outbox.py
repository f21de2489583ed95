"""The outbox of alerts: a missed run or a failed run raised is an entry here
(``Notification``) until its notifier accepted it. Every read and write of those rows is
in this module (and in ``grouping``, which gives each its role in its schedule's streak).

Marking a miss and telling someone of it are two steps. The check (``alerts.check``) adds
the entries in the transaction that marks the misses (``add``): a miss is never marked
without them. A failed run's entry is added in the transaction that records the failure
(``add_failed``, from ``outcomes``). Either way the entry's role (sent, grouped into a
streak already told of, a reminder) is decided there too (``grouping.assign``).

The delivery step (``delivery.deliver_outbox``) sends them, and marks them
delivered only once the notifier accepted them. Whatever stops it between the two (a crash,
a kill at a deadline, a notifier that refuses or times out, a lock) leaves them waiting for
the next step, never a silent gap.

- **Claims.** A step takes what waits with one conditional ``UPDATE`` (``claim``): entries
  no step holds, or whose holder's claim ran out. Of several schedulers and cron checks
  delivering at once, each entry goes to one. A claim lasts ``LEASE_SECONDS`` and is
  renewed, on the same condition, just before each message goes (``start``); what a step
  does not send (its deadline came, or a stop) it gives back at once (``release``).
- **Messages.** ``start`` writes on the entries the id of the message they go out in. A
  step that dies while sending leaves that id behind; the step that takes the entries
  over sends the same message again, with the same id, for the receiver to drop.
- **Back-off.** An entry whose message the notifier refused waits before the next try, 10
  seconds doubling up to 15 minutes, half of it random (``RETRY``), and is never given
  up on: it is sent once the notifier accepts it.
- **Retention.** Delivered entries stay ``KEEP_DELIVERED`` (the rate limit counts the last
  minute's; the rest show what was told), then each step deletes a batch of them, and of
  the streaks that ended as long ago.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Count, F, Q

from django_schedulinator.conf import app_settings
from django_schedulinator.models import Notification
from django_schedulinator.operations import grouping
from django_schedulinator.services.ledger import Retry
from django_schedulinator.timing.vocabulary import NotifyEvent

# Entries one claim takes at most: one message carries at most that many misses.
CLAIM_BATCH = 5000
# The back-off after a failed message (max_attempts is not read: an entry is never given up on).
RETRY = Retry(max_attempts=0, backoff=10.0, backoff_max=900.0)
KEEP_DELIVERED = timedelta(days=7)
PRUNE_BATCH = 1000
# The rate limit's window.
MINUTE = timedelta(minutes=1)


def delivering() -> str | None:
    """The notifier the outbox is delivered to: NOTIFY's BACKEND when its EVENTS ask for
    missed or failed runs (the events that go through the outbox), else None."""
    try:
        config = app_settings.NOTIFY
    except ImproperlyConfigured:
        return None
    if config is None or not {NotifyEvent.MISSED, NotifyEvent.FAILED} & set(config.events):
        return None
    return config.backend


def notifier_for(kind: str) -> str | None:
    """The notifier that is told of ``kind`` (NOTIFY's BACKEND, the name its entries carry),
    or None: NOTIFY is None, does not ask for it, or is invalid (check E001 says so)."""
    try:
        config = app_settings.NOTIFY
    except ImproperlyConfigured:
        return None
    if config is None or kind not in config.events:
        return None
    return config.backend


@dataclass(frozen=True, slots=True)
class Missed:
    """One occurrence raised (``alerts.check``): no successful run within its schedule's
    grace."""

    schedule_id: int
    scheduled_for: datetime  # its nominal time
    run_id: int | None  # None: it never fired
    reason: str
    grace: timedelta


def add(missed: Sequence[Missed], *, notifier: str, raised_at: datetime, using: str) -> None:
    """An entry for each miss, to be told to ``notifier``, with its role in its schedule's
    streak of misses: call inside the transaction that marks them."""
    entries = [
        Notification(
            notifier=notifier,
            kind=NotifyEvent.MISSED,
            schedule_id=m.schedule_id,
            scheduled_for=m.scheduled_for,
            run_id=m.run_id,
            reason=m.reason,
            grace=m.grace,
            raised_at=raised_at,
        )
        for m in missed
    ]
    grouping.assign(entries, now=raised_at, using=using)
    Notification.objects.using(using).bulk_create(entries)


@dataclass(frozen=True, slots=True)
class Failure:
    """A run recorded as failed (``outcomes``)."""

    schedule_id: int
    scheduled_for: datetime
    run_id: int
    error: str


def add_failed(
    failed: Sequence[Failure], *, notifier: str, raised_at: datetime, using: str
) -> None:
    """An entry for each failed run, to be told to ``notifier``, with its role in its
    schedule's streak of failures: call inside the transaction that records them, which
    holds their schedules' rows."""
    entries = [
        Notification(
            notifier=notifier,
            kind=NotifyEvent.FAILED,
            schedule_id=f.schedule_id,
            scheduled_for=f.scheduled_for,
            run_id=f.run_id,
            reason="",
            error=f.error,
            raised_at=raised_at,
        )
        for f in failed
    ]
    grouping.assign(entries, now=raised_at, using=using)
    Notification.objects.using(using).bulk_create(entries)


def end_streaks(now: datetime, *, using: str) -> list[Notification]:
    """End the streaks whose schedule succeeded again, each with its entry for the
    notifier of its event (``grouping.end_streaks``): inside the check's transaction."""
    return grouping.end_streaks(now, using=using, notifier_for=notifier_for)


def _waiting(notifier: str) -> Q:
    return Q(notifier=notifier, delivered_at__isnull=True)


def retarget(notifier: str, *, using: str, only: Collection[str] | None = None) -> int:
    """Entries still waiting for a notifier that is no longer the one configured (``only``
    those waiting for one of these names) go to ``notifier``, the one that is: how many."""
    if only is not None and not only:
        return 0
    waiting = Notification.objects.using(using).filter(delivered_at__isnull=True)
    if only is not None:
        waiting = waiting.filter(notifier__in=sorted(only))
    return waiting.exclude(notifier=notifier).update(notifier=notifier)


def sent_since(notifier: str, since: datetime, *, using: str) -> int:
    """The messages ``notifier`` accepted since ``since`` (a digest is one)."""
    found = (
        Notification.objects.using(using)
        .filter(notifier=notifier, delivered_at__gte=since)
        .exclude(message="")
        .aggregate(messages=Count("message", distinct=True))
    )
    return int(found["messages"])


def waiting(notifier: str, *, using: str) -> int:
    return Notification.objects.using(using).filter(_waiting(notifier)).count()


def failing(*, using: str) -> tuple[int, str]:
    """How many entries wait after their notifier refused them (any notifier), and the
    latest error."""
    refused = Notification.objects.using(using).filter(delivered_at__isnull=True, attempts__gt=0)
    count = refused.exclude(last_error="").count()
    if not count:
        return 0, ""
    last = refused.exclude(last_error="").order_by("-pk").values_list("last_error", flat=True)
    return count, last.first() or ""


def claim(
    notifier: str, *, now: datetime, until: datetime, token: str, using: str
) -> list[Notification]:
    """Take what waits for ``notifier`` and is due at ``now`` (its back-off over), held by
    no step or by one whose claim ran out, for ``token`` until ``until``: the oldest
    ``CLAIM_BATCH``, in the order they were raised. A conditional UPDATE: of several steps
    at once, each entry goes to one."""
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lte=now)
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    rows = Notification.objects.using(using).filter(_waiting(notifier), free, due)
    candidates = list(rows.order_by("pk").values_list("pk", flat=True)[:CLAIM_BATCH])
    if not candidates:
        return []
    rows.filter(pk__in=candidates).update(claimed_by=token, claimed_until=until)
    return list(
        Notification.objects.using(using)
        .filter(pk__in=candidates, claimed_by=token, delivered_at__isnull=True)
        .order_by("pk")
    )


def _held(ids: Sequence[int], token: str) -> Q:
    return Q(pk__in=list(ids), claimed_by=token, delivered_at__isnull=True)


def start(ids: Sequence[int], *, message: str, token: str, until: datetime, using: str) -> bool:
    """About to send the message ``message`` of these entries: record it on them, count
    the attempt and renew the claim, if ``token`` still holds every one (whether it does;
    if not, another step took them over and sends them)."""
    updated = (
        Notification.objects.using(using)
        .filter(_held(ids, token))
        .update(message=message, attempts=F("attempts") + 1, claimed_until=until)
    )
    return updated == len(ids)


def delivered(
    ids: Sequence[int], *, token: str, now: datetime, using: str, told: bool = True
) -> int:
    """The notifier accepted them (``told``), or nobody is told of them on their own (its
    ``wants`` said so, or they are grouped into a streak already told of: not a message of
    the rate limit's)."""
    extra = {} if told else {"message": ""}
    return (
        Notification.objects.using(using)
        .filter(_held(ids, token))
        .update(delivered_at=now, claimed_by="", claimed_until=None, last_error="", **extra)
    )


def failed(
    ids: Sequence[int], *, attempts: int, token: str, now: datetime, error: str, using: str
) -> datetime:
    """The notifier refused their message (or raised): they wait for the back-off of their
    ``attempts``-th try, and may go in another message then. When they are due again."""
    again = now + RETRY.delay(attempts)
    Notification.objects.using(using).filter(_held(ids, token)).update(
        next_attempt_at=again,
        last_error=error[:2000],
        message="",
        claimed_by="",
        claimed_until=None,
    )
    return again


def release(
    ids: Sequence[int], *, token: str, using: str, not_before: datetime | None = None
) -> int:
    """Give back entries this step will not send: at once, for any step to take, or (after
    a failure of the notifier) not before ``not_before``."""
    if not ids:
        return 0
    extra = {} if not_before is None else {"next_attempt_at": not_before}
    return (
        Notification.objects.using(using)
        .filter(_held(ids, token))
        .update(claimed_by="", claimed_until=None, **extra)
    )


def prune_delivered(now: datetime, *, using: str) -> int:
    """Delete a batch of the entries delivered more than ``KEEP_DELIVERED`` ago, and one of
    the streaks (``grouping``) that ended as long ago."""
    grouping.prune_ended(now - KEEP_DELIVERED, batch=PRUNE_BATCH, using=using)
    old = list(
        Notification.objects.using(using)
        .filter(delivered_at__lt=now - KEEP_DELIVERED)
        .order_by("delivered_at")
        .values_list("pk", flat=True)[:PRUNE_BATCH]
    )
    if not old:
        return 0
    return Notification.objects.using(using).filter(pk__in=old).delete()[0]
