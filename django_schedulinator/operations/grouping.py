"""The throttle of a schedule that keeps failing: its alerts of one event in a row are a
streak (``AlertStreak``), told of in a few messages, not one each.

A failing 20-second schedule used to send a "Missed run" and a "Failed run" for every
occurrence: eight messages in 80 seconds. Now, per schedule and event ("missed", "failed"):

- the **first** alert of a streak is sent, and says that the next ones are grouped;
- the next ones are **grouped**: counted on the streak, never sent on their own;
- a **reminder** goes with the alert that comes ``NOTIFY_REPEAT_SECONDS`` (an hour) or more
  after the streak's last message, and counts the alerts since its first;
- the streak **ends** when a run of the schedule at or after its latest alert succeeds
  (``end_streaks``, in the missed-run check): one message says so.

Each decision is made in the transaction that raises the alert (``assign``, called by
``outbox.add``), under the lock its raiser holds on the schedule's row, and written with the
alert's outbox entry as its ``role``: what is decided is as durable as the alert, and a
restart, a crash or another process changes nothing of it. The delivery step only follows
the roles: it sends the first, the reminders and the ends (again after a failure, never
given up on) and marks the grouped ones delivered without a message.
``NOTIFY_REPEAT_SECONDS`` None turns the grouping off: each alert is a message of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Subquery

from django_schedulinator.conf import app_settings
from django_schedulinator.models import AlertStreak, Notification, Run, Schedule
from django_schedulinator.statuses import RunStatus
from django_schedulinator.timing.vocabulary import AlertRole

logger = logging.getLogger("django_schedulinator.alerts")

# Streaks one check looks at for their end; the rest wait for the next check.
END_BATCH = 500


def repeat_after() -> timedelta | None:
    """How long after a streak's last message the next alert of it is a reminder (None: no
    grouping, each alert a message of its own)."""
    seconds = app_settings.NOTIFY_REPEAT_SECONDS
    return None if seconds is None else timedelta(seconds=seconds)


def assign(entries: Sequence[Notification], *, now: datetime, using: str) -> None:
    """Give each new outbox entry its role in its schedule's streak of its event, and move
    the streaks on: call in the transaction that raises them, under their schedules' row
    locks (one raiser at a time per schedule). Entries not saved yet."""
    repeat = repeat_after()
    if repeat is None or not entries:
        return
    ids = sorted({e.schedule_id for e in entries})
    kinds = sorted({e.kind for e in entries})
    streaks = {
        (s.schedule_id, s.kind): s
        for s in AlertStreak.objects.using(using)
        .select_for_update()
        .filter(schedule_id__in=ids, kind__in=kinds, ended_at__isnull=True)
        .order_by("pk")
    }
    changed: dict[int, AlertStreak] = {}
    opened: list[AlertStreak] = []
    for entry in sorted(entries, key=lambda e: e.scheduled_for):
        streak = streaks.get((entry.schedule_id, entry.kind))
        if streak is None:
            streak = AlertStreak(
                schedule_id=entry.schedule_id,
                kind=entry.kind,
                first_at=entry.scheduled_for,
                last_at=entry.scheduled_for,
                count=1,
                told_at=now,
                told=1,
                opened_at=now,
            )
            streaks[(entry.schedule_id, entry.kind)] = streak
            opened.append(streak)
            entry.role = AlertRole.FIRST
            continue
        streak.count += 1
        streak.last_at = max(streak.last_at, entry.scheduled_for)
        if now - streak.told_at >= repeat:
            entry.role = AlertRole.REPEAT
            entry.count, entry.since = streak.count, streak.first_at
            streak.told_at, streak.told = now, streak.count
        else:
            entry.role = AlertRole.GROUPED
        if streak.pk is not None:
            changed[streak.pk] = streak
    AlertStreak.objects.using(using).bulk_create(opened)
    if changed:
        AlertStreak.objects.using(using).bulk_update(
            list(changed.values()), ["count", "last_at", "told_at", "told"]
        )


def end_streaks(
    now: datetime, *, using: str, notifier_for: Callable[[str], str | None]
) -> list[Notification]:
    """End the streaks in progress whose schedule has succeeded since (a run at or after the
    streak's latest alert, recorded as succeeded), each with an outbox entry for its
    notifier (``notifier_for(kind)``; None: nobody is told any more, it just ends); a
    streak whose schedule is gone ends with no message. Call inside the check's transaction.
    Each end is a conditional UPDATE on the streak's latest alert: an alert raised meanwhile
    keeps it going, and of two checks at once, one ends it."""
    success = Run.objects.using(using).filter(
        schedule_id=OuterRef("schedule_id"),
        status=RunStatus.SUCCEEDED,
        scheduled_for__gt=OuterRef("last_at"),
    )
    first_success = success.order_by("scheduled_for")
    rows = list(
        AlertStreak.objects.using(using)
        .filter(ended_at__isnull=True)
        .annotate(
            success_id=Subquery(first_success.values("pk")[:1]),
            success_at=Subquery(first_success.values("scheduled_for")[:1]),
            exists=Exists(Schedule.objects.using(using).filter(pk=OuterRef("schedule_id"))),
        )
        .order_by("pk")
        .values_list(
            "pk", "schedule_id", "kind", "first_at", "last_at", "count", "success_id",
            "success_at", "exists",
        )[:END_BATCH]
    )  # fmt: skip
    told = []
    for pk, schedule_id, kind, first_at, last_at, count, run_id, at, exists in rows:
        if exists and run_id is None:
            continue  # still failing
        ended = (
            AlertStreak.objects.using(using)
            .filter(pk=pk, ended_at__isnull=True, last_at=last_at, count=count)
            .update(ended_at=now)
        )
        notifier = notifier_for(kind)
        if not ended or not exists or notifier is None:
            continue
        told.append(
            Notification(
                notifier=notifier,
                kind=kind,
                role=AlertRole.RECOVERED,
                schedule_id=schedule_id,
                scheduled_for=at,
                run_id=run_id,
                reason="",
                count=count,
                since=first_at,
                raised_at=now,
            )
        )
    Notification.objects.using(using).bulk_create(told)
    if told:
        logger.info(
            "%d schedule(s) succeeded again after a streak of alerts: %s.",
            len(told),
            ", ".join(f"schedule {n.schedule_id} ({n.kind}, {n.count})" for n in told[:10]),
        )
    return told


def prune_ended(before: datetime, *, batch: int, using: str) -> int:
    """Delete a batch of the streaks that ended before ``before``: how many."""
    old = list(
        AlertStreak.objects.using(using)
        .filter(ended_at__lt=before)
        .order_by("ended_at")
        .values_list("pk", flat=True)[:batch]
    )
    if not old:
        return 0
    return AlertStreak.objects.using(using).filter(pk__in=old).delete()[0]
