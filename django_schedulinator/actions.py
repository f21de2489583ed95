"""What people do to a schedule by hand: pause, resume, run now, backfill.

Runs queued here take the scheduler's own path: each is a pending ``Run`` whose lease has
already expired, so the next pass of any scheduler takes it over and dispatches it, with
the same ledger, key and outcome recording as a scheduled occurrence. A wake flag in Redis
makes that pass take them at once instead of at its next periodic look.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django.db import router, transaction
from django.db.models import F
from django.utils import timezone

from . import clock, timing
from .changelog import Origin, record
from .conf import app_settings
from .index import DueIndex
from .querysets import NewRun
from .registry import registry

if TYPE_CHECKING:
    from .models import Run, Schedule

logger = logging.getLogger("django_schedulinator.actions")

# The index scores times as epoch milliseconds: nothing runs before it.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ActionError(ValueError):
    """A manual operation cannot be done as asked; the message says why."""


# Each action takes an optional ``origin`` (who, through what): given, the action is
# recorded in the change log in its own transaction.
#
# Each action works on the row as it is now, locked until its transaction ends, not on the
# caller's instance: that copy may predate a concurrent edit, which saving it would undo
# (and a run queued from it would carry stale arguments). Only what the action is about is
# written; other changes made to the instance are not saved (save() them first). The
# instance then takes what the action wrote (see _adopt) and keeps the rest as it was.

# What an action writes to the row: the caller's instance takes these afterwards.
WRITTEN_BY_ACTIONS = (
    "enabled", "pause_note", "paused_at", "next_run_at", "due_at", "revision", "version",
    "updated_at",
)  # fmt: skip


def pause(schedule: Schedule, note: str = "", *, origin: Origin | None = None) -> None:
    """Stop firing: the schedule leaves the index and keeps where it stood. Pausing a
    paused schedule with another note replaces the note.

    A note the model refuses (too long) raises its ValidationError; nothing is written and
    the instance is left as it was."""
    if not isinstance(note, str):
        raise ActionError("The pause note must be text.")
    note = note.strip()
    db = _db(schedule)
    with transaction.atomic(using=db):
        current = _current(schedule, db)
        if current.enabled or current.pause_note != note:
            current.enabled, current.pause_note = False, note
            current.save(using=db, update_fields=["enabled", "pause_note"])
            if origin is not None:
                record(current, origin, "paused", {"note": note}, using=db)
    _adopt(schedule, current)


def resume(schedule: Schedule, *, catch_up: bool = False, origin: Origin | None = None) -> None:
    """Fire again. The occurrences of the paused period are recorded as skipped
    ("paused"), or, with ``catch_up``, left due so the catch-up policy handles them."""
    db = _db(schedule)
    with transaction.atomic(using=db):
        current = _current(schedule, db)
        if not current.enabled:
            current.enabled = True
            current._catch_up_on_resume = catch_up
            current.save(using=db, update_fields=["enabled"])
            if origin is not None:
                record(current, origin, "resumed", {"catch_up": catch_up}, using=db)
    _adopt(schedule, current)


def run_now(schedule: Schedule, *, advance: bool = False, origin: Origin | None = None) -> Run:
    """Queue one run now, outside the timing.

    Its nominal time is now (one millisecond later for each occurrence already at that
    instant), so it has an idempotency key of its own. The regular next run stays where
    it is, unless ``advance``: then the run takes its place, and the regular occurrence is
    recorded as skipped ("replaced").
    """
    from .models import Run

    db = _db(schedule)
    now = timing.truncate_ms(clock.now())  # Redis TIME, as the schedulers see it
    with transaction.atomic(using=db):
        current = _current(schedule, db)
        _check_runnable(current)
        at = now
        for _attempt in range(1000):
            inserted = Run.objects.using(db).insert_runs(
                [_queued(current, at, Run.Trigger.RUN_NOW, "Queued by run now.")],
                claimed_at=now,
                worker_id="run_now",
            )
            if inserted:
                break
            at += timing.ONE_MS
        else:
            raise ActionError("Could not find a free instant for the run; try again.")
        if advance:
            _replace_next_run(current, at, db)
        run = Run.objects.using(db).get(pk=next(iter(inserted.values())))
        if origin is not None:
            record(
                current,
                origin,
                "run_now",
                {"run": run.pk, "key": run.idempotency_key, "advance": advance},
                using=db,
            )
    _adopt(schedule, current)
    _wake_after_commit(db)
    logger.info("Run now of schedule %s queued (key %s).", schedule.pk, run.idempotency_key)
    return run


def _replace_next_run(schedule: Schedule, replaced_by: datetime, db: str) -> None:
    """Move the schedule past its next occurrence, recorded as replaced by a run now."""
    from .models import Run

    nominal = schedule.next_run_at
    if not schedule.enabled or nominal is None:
        return
    spec = schedule.timing_spec
    following = next(timing.occurrences(spec, nominal, anchor=nominal, include_skipped=True), None)
    Run.objects.using(db).insert_runs(
        [
            NewRun.of(
                schedule,
                nominal,
                status=Run.Status.SKIPPED,
                skip_reason=timing.REPLACED,
                note=f"Replaced by the run now at {replaced_by:%Y-%m-%d %H:%M:%S.%f}"[:-3]
                + " UTC.",
            )
        ],
        claimed_at=timezone.now(),
        worker_id="run_now",
    )
    schedule.next_run_at = following.at if following else None
    schedule.save()


@dataclass(frozen=True, slots=True)
class BackfillReport:
    dry_run: bool
    occurrences: int  # in the range
    queued: int  # new runs queued
    requeued: int  # skipped runs turned into runs
    already: int  # in the ledger and not skipped: fired, running or queued before


def backfill(
    schedule: Schedule,
    start: datetime,
    end: datetime,
    *,
    dry_run: bool = False,
    origin: Origin | None = None,
) -> BackfillReport:
    """Fire each occurrence of the schedule's timing in [start, end] that has not fired.

    The range must be in the past. An occurrence the ledger holds as skipped fires now; one
    that fired (or is queued) does not fire again, so running the same backfill twice
    fires nothing new. Each run has the occurrence's own key.
    """
    from .models import Run

    _check_runnable(schedule)  # before the checks of the range: the first thing to fix
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise ActionError(f"The {name} must be a date and time with a time zone.")
    now = clock.now()  # "the past" is what the schedulers' clock has passed
    if start < EPOCH:
        raise ActionError("A backfill cannot start before 1970-01-01 UTC.")
    if end < start:
        raise ActionError("The end of a backfill must not be before its start.")
    if end > now:
        raise ActionError("A backfill covers the past: its end must not be after now.")
    db = _db(schedule)
    with transaction.atomic(using=db):
        current = _current(schedule, db)
        _check_runnable(current)
        moments = _occurrences_between(current, start, end)
        recorded = dict(
            Run.objects.using(db)
            .filter(schedule_id=schedule.pk, scheduled_for__gte=start, scheduled_for__lte=end)
            .values_list("scheduled_for", "status")
        )
        status_of = {timing.to_ms(at): status for at, status in recorded.items()}
        new = [at for at in moments if timing.to_ms(at) not in status_of]
        skipped = [at for at in moments if status_of.get(timing.to_ms(at)) == Run.Status.SKIPPED]
        report = BackfillReport(
            dry_run=dry_run,
            occurrences=len(moments),
            queued=len(new),
            requeued=len(skipped),
            already=len(moments) - len(new) - len(skipped),
        )
        if dry_run or not (new or skipped):
            return report
        note = f"Queued by a backfill of {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC."
        Run.objects.using(db).insert_runs(
            [_queued(current, at, Run.Trigger.BACKFILL, note) for at in new],
            claimed_at=now,
            worker_id="backfill",
        )
        if skipped:
            Run.objects.using(db).filter(
                schedule_id=schedule.pk, scheduled_for__in=skipped, status=Run.Status.SKIPPED
            ).update(
                status=Run.Status.PENDING,
                trigger=Run.Trigger.BACKFILL,
                attempts=0,
                # Expired already by any clock: the occurrence lies in the past.
                lease_expires_at=F("scheduled_for"),
                claim_token="",
                worker_id="backfill",
                note=note,
                task=current.task,
                args=current.args,
                kwargs=current.kwargs,
            )
        if origin is not None:
            record(
                current,
                origin,
                "backfill",
                {
                    "start": start.isoformat(),
                    "end": end.isoformat(),
                    "queued": report.queued,
                    "requeued": report.requeued,
                },
                using=db,
            )
    _wake_after_commit(db)
    logger.info(
        "Backfill of schedule %s queued %d run(s) (%d skipped before).",
        schedule.pk,
        report.queued + report.requeued,
        report.requeued,
    )
    return report


def _occurrences_between(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """The occurrences of the schedule's timing in [start, end], at most MAX_BACKFILL_RUNS.

    The walk steps over local times the DST policy skips one by one, so that the range
    bounds it (and the same limit caps them): it never looks past ``end`` for an
    occurrence, which for a cron whose matches are all skipped meant the year 9999."""
    limit = app_settings.MAX_BACKFILL_RUNS
    anchor = schedule.next_run_at or start
    moments: list[datetime] = []
    skipped = 0
    for moment in timing.occurrences(
        schedule.timing_spec, start - timing.ONE_MS, anchor=anchor, include_skipped=True
    ):
        if moment.at > end:
            break
        if moment.skipped:
            skipped += 1
            if skipped > limit:
                raise ActionError(
                    f"The range holds more than {limit:,} local times skipped by the DST "
                    "policy (they do not exist in the schedule's zone; "
                    "SCHEDULINATOR['MAX_BACKFILL_RUNS']); backfill a shorter range at a time."
                )
            continue
        moments.append(moment.at)
        if len(moments) > limit:
            raise ActionError(
                f"The range holds more than {limit:,} occurrences "
                "(SCHEDULINATOR['MAX_BACKFILL_RUNS']); backfill a shorter range at a time."
            )
    return moments


def _db(schedule: Schedule) -> str:
    return router.db_for_write(type(schedule), instance=schedule)


def _adopt(schedule: Schedule, current: Schedule) -> None:
    """The caller's instance takes what the action wrote to the row, as saved."""
    for name in WRITTEN_BY_ACTIONS:
        setattr(schedule, name, getattr(current, name))
    schedule._loaded = {
        **getattr(schedule, "_loaded", {}),
        **{f: getattr(current, f) for f in WRITTEN_BY_ACTIONS if f in schedule.LOADED_FIELDS},
    }


def _current(schedule: Schedule, db: str) -> Schedule:
    """The schedule's row as it is now, locked until the transaction ends."""
    if schedule.pk is None:
        raise ActionError("Save the schedule first.")
    return type(schedule).objects.using(db).select_for_update().get(pk=schedule.pk)


def _queued(schedule: Schedule, at: datetime, trigger: str, note: str) -> NewRun:
    """A run for any scheduler to take: pending, its lease over already, no attempt yet."""
    return NewRun.of(schedule, at, trigger=trigger, attempts=0, lease_expires_at=at, note=note)


def _check_runnable(schedule: Schedule) -> None:
    if schedule.pk is None:
        raise ActionError("Save the schedule first.")
    if schedule.task not in registry:
        raise ActionError(
            f"{schedule.task!r} is not a registered task here, so it cannot be run. Register "
            "it with @django_schedulinator.task."
        )


def _wake_after_commit(db: str) -> None:
    def wake() -> None:
        try:
            DueIndex().wake()
        except Exception:  # the runs are committed; a periodic take-over finds them anyway
            logger.warning(
                "Could not wake the schedulers; the queued runs start within a quarter of a lease.",
                exc_info=True,
            )

    transaction.on_commit(wake, using=db)
