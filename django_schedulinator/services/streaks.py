"""Each schedule's failures in a row, and the auto-pause they lead to: a part of the service
layer (with ``services``, the only modules that write a schedule), reached from the
outcome path (``outcomes.record`` and the worker-side reports), in the transaction that
records the outcomes.

``lock_streaks`` before the runs are written, ``record_streaks`` after, then
``auto_pause`` of the schedules whose count reached their ``pause_after_failures``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from django_schedulinator import signals
from django_schedulinator.index import sync
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule, ScheduleChange
from django_schedulinator.models.batches import json_ids


def lock_streaks(succeeded: Collection[int], failing: Collection[int], *, using: str) -> list[int]:
    """Lock the schedules whose failures in a row an outcome may change (``failing``: a run
    may have failed; ``succeeded``: a run succeeded, and the count is above zero), in one
    statement in primary key order, before the caller writes their runs. Every writer that
    holds a schedule and its runs takes the schedule first (a claim advances it, then inserts
    runs; a delete locks it, then deletes them), so none waits for a schedule while holding
    a run that another waits for. Returns the succeeded schedules that have a count above
    zero (usually none: a success of a schedule at zero changes nothing)."""
    if not succeeded and not failing:
        return []
    # One IN over all of them (an index lookup per id), the rest a filter: an OR of two INs
    # makes PostgreSQL scan the whole table (15 ms a batch at 100,000 schedules).
    everyone = json_ids(sorted(set(failing) | set(succeeded)), using)
    rows = Schedule.objects.using(using).filter(
        Q(pk__in=everyone) & (Q(failure_streak__gt=0) | Q(pk__in=sorted(set(failing))))
    )
    locked = rows.order_by("pk").select_for_update(no_key=True).values_list("pk", "failure_streak")
    succeeded = set(succeeded)
    return [pk for pk, streak in locked if pk in succeeded and streak > 0]


# How many of a schedule's newest ended runs ``record_streaks`` reads.
STREAK_WINDOW = 10


def record_streaks(
    succeeded: Collection[int], failed: Mapping[int, Collection[datetime]], *, using: str
) -> list[int]:
    """Each schedule's count of failures in a row, after outcomes were recorded in the
    caller's transaction (the schedules locked by ``lock_streaks``): ``succeeded``, the
    schedules with a run that succeeded and a count above zero; ``failed``, the nominal
    times of the runs that failed, by schedule. Returns the schedules whose count reached
    their ``pause_after_failures`` (for ``auto_pause``, in the same transaction).

    "In a row" is the ledger's order: the count is the number of the schedule's newest
    ended (succeeded or failed) runs, by nominal time, that failed, whatever order their
    outcomes came in. So several failures recorded together each count, and a late success
    of an older run does not reset the failures of newer ones."""
    succeeded = set(succeeded)
    changed = sorted(succeeded | set(failed))
    if not changed:
        return []
    schedules = Schedule.objects.using(using).filter(pk__in=json_ids(changed, using))
    before = {
        pk: (streak, limit, enabled)
        for pk, streak, limit, enabled in schedules.values_list(
            "pk", "failure_streak", "pause_after_failures", "enabled"
        )
    }
    streaks = {
        pk: _failures_in_a_row(pk, streak, failed.get(pk, ()), pk in succeeded, using)
        for pk, (streak, _limit, _enabled) in before.items()
    }
    moved = {pk: n for pk, n in streaks.items() if n != before[pk][0]}
    if moved:
        schedules.filter(pk__in=sorted(moved)).update(
            failure_streak=Case(
                *(When(pk=pk, then=Value(n)) for pk, n in moved.items()),
                default=F("failure_streak"),
                output_field=Schedule._meta.get_field("failure_streak"),
            )
        )
    return [
        pk
        for pk, (_streak, limit, enabled) in before.items()
        if enabled and limit is not None and streaks[pk] >= limit
    ]


def _failures_in_a_row(
    schedule_id: int, stored: int, failed: Collection[datetime], succeeded: bool, using: str
) -> int:
    """The schedule's failures in a row, from its newest ended runs. ``stored`` is the count
    before the outcomes just recorded (``failed``, and a success if ``succeeded``)."""
    runs = Run.objects.using(using).filter(
        schedule_id=schedule_id, status__in=(Run.Status.SUCCEEDED, Run.Status.FAILED)
    )
    newest = list(
        runs.order_by("-scheduled_for").values_list("scheduled_for", "status")[:STREAK_WINDOW]
    )
    leading = next(
        (i for i, (_at, status) in enumerate(newest) if status != Run.Status.FAILED), len(newest)
    )
    if leading < len(newest):
        return leading  # a success among the newest
    if leading < STREAK_WINDOW:
        # No success left in the ledger: its failures, and any that retention deleted
        # (it keeps a schedule's newest runs, not its streak), which the stored count has.
        return max(leading, stored + len(failed))
    # At least STREAK_WINDOW in a row, and the last success older than all of them. If the
    # failures just recorded are all among these, they come after it: the stored count,
    # which counted every failure since it, gains them. A success just recorded, or a
    # failure older than these, may have moved the last success: count from it.
    if not succeeded and all(at >= newest[-1][0] for at in failed):
        return stored + len(failed)
    last_success = runs.filter(status=Run.Status.SUCCEEDED).order_by("-scheduled_for").first()
    failures = runs.filter(status=Run.Status.FAILED)
    if last_success is not None:
        failures = failures.filter(scheduled_for__gt=last_success.scheduled_for)
    return failures.count()


def auto_pause(
    schedule_ids: Sequence[int], *, note: str, using: str, index: DueIndex | None = None
) -> list[int]:
    """Pause the schedules whose failures in a row reached ``pause_after_failures`` (the
    scheduler's own change, recorded with the source "scheduler"); the ids paused. One
    statement for the batch: the outcome path must stay cheap."""
    if not schedule_ids:
        return []
    now = timezone.now()
    with transaction.atomic(using=using):
        rows = Schedule.objects.using(using).filter(pk__in=sorted(schedule_ids), enabled=True)
        paused = list(rows.values_list("pk", flat=True))
        if not paused:
            return []
        Schedule.objects.using(using).filter(pk__in=paused).change(
            enabled=False, paused_at=now, pause_note=note
        )
        ScheduleChange.objects.using(using).bulk_create(
            ScheduleChange(
                schedule_id=pk,
                schedule_name=name,
                source=ScheduleChange.Source.SCHEDULER,
                action=ScheduleChange.Action.PAUSED,
                changes={"enabled": [True, False], "pause_note": note},
                version=version,
                at=now,
            )
            for pk, name, version in Schedule.objects.using(using)
            .filter(pk__in=paused)
            .values_list("pk", "name", "version")
        )
        sync.resync_on_commit(paused, using=using, index=index)
        for pk in paused:
            signals.send_after_commit(
                signals.schedule_paused, Schedule, using=using, schedule_id=pk, note=note, auto=True
            )
    return paused
