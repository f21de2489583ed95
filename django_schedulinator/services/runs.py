"""What fires, and what did not: the scheduler's conditional advance past what it fired
(with the runs it enters in the ledger), its marks of missed occurrences, a run now, and a
backfill of a past range.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import reduce

from django.db import transaction
from django.db.models import Case, F, Q, Value, When

from django_schedulinator import timing
from django_schedulinator.conf import app_settings
from django_schedulinator.errors import PrunedRange, ScheduleDeleted, ServiceError, TimingError
from django_schedulinator.index import clock
from django_schedulinator.models import PrunedRuns, Run, Schedule, ScheduleChange
from django_schedulinator.models.batches import (
    Advance,
    Advanced,
    ClaimedRuns,
    advances_in_one_statement,
)
from django_schedulinator.models.spans import Span
from django_schedulinator.registry import registry
from django_schedulinator.services import ledger
from django_schedulinator.services.changelog import Origin
from django_schedulinator.services.writes import (
    PYTHON,
    WRITTEN_BY_ACTIONS,
    _adopt,
    _db,
    _locked,
    _record,
    _wake_after_commit,
    logger,
)

# The index scores times as epoch milliseconds: nothing runs before it.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# -- the scheduler's advance ---------------------------------------------------------------


def advance(
    advances: Sequence[Advance],
    fired_at: datetime,
    *,
    using: str,
    skip_locked: bool = False,
    runs: ClaimedRuns | None = None,
) -> Advanced:
    """The scheduler's conditional advance of due schedules past what fired (next run, due
    time, run count, last run; never a setting, so the version stays and the change log is
    not written): each row moves only if it still holds the revision the claim read.

    With ``runs``, the runs of the schedules that moved enter the ledger in the same
    transaction (``inserted``): on PostgreSQL in the advance's own statement, one round
    trip (``batches.advances_in_one_statement``); elsewhere ``ledger.record_claimed``
    after it, in a transaction of the two."""
    schedules = Schedule.objects.using(using)
    if runs is None:
        return schedules.advance(advances, fired_at, skip_locked=skip_locked)
    connection = transaction.get_connection(using)
    if advances_in_one_statement(connection):
        if not connection.in_atomic_block:
            return schedules.advance(advances, fired_at, skip_locked=skip_locked, runs=runs)
        with transaction.atomic(using=using):  # a savepoint: a lock wait that runs out
            return schedules.advance(advances, fired_at, skip_locked=skip_locked, runs=runs)
    with transaction.atomic(using=using):
        advanced = schedules.advance(advances, fired_at, skip_locked=skip_locked)
        inserted = ledger.record_claimed(
            [run for sid in advanced.moved for run in runs.runs.get(sid, ())],
            claimed_at=runs.claimed_at,
            worker_id=runs.worker_id,
            claim_token=runs.claim_token,
            lease_expires_at=runs.lease_expires_at,
            using=using,
        )
    return advanced._replace(inserted=inserted)


# -- missed runs ---------------------------------------------------------------------------


def mark_missed(missed: Mapping[int, datetime], *, using: str) -> int:
    """Record on each schedule the nominal time of an occurrence of it that was missed
    (``missed``: by schedule id), the mark the admin and the API show: only where it is
    later than the one recorded. A mark of the scheduler's, like ``advance``: no setting,
    so neither the version nor the change log moves; nor the revision (the index does not
    depend on it). One statement. How many schedules it marked."""
    if not missed:
        return 0
    later = {
        pk: Q(pk=pk) & (Q(missed_at__isnull=True) | Q(missed_at__lt=at))
        for pk, at in missed.items()
    }
    return (
        Schedule.objects.using(using)
        .filter(pk__in=sorted(missed))
        .filter(reduce(operator.or_, later.values()))
        .update(
            missed_at=Case(
                *(When(later[pk], then=Value(at)) for pk, at in missed.items()),
                default=F("missed_at"),
                output_field=Schedule._meta.get_field("missed_at"),
            )
        )
    )


def mark_not_fired(schedule_id: int, nominal: datetime, *, using: str) -> bool:
    """Record that the schedule's next occurrence, at ``nominal``, never fired within its
    grace, if it is still its next occurrence, it is enabled, and that occurrence was not
    recorded already: whether this call recorded it. Of several processes that check at
    once, exactly one does (the guard that raises it once)."""
    return bool(
        Schedule.objects.using(using)
        .filter(pk=schedule_id, enabled=True, next_run_at=nominal)
        .filter(Q(missed_at__isnull=True) | Q(missed_at__lt=nominal))
        .update(missed_at=nominal)
    )


# -- run now, backfill ---------------------------------------------------------------------


def run_now(schedule: Schedule, *, advance: bool = False, origin: Origin = PYTHON) -> Run:
    """Queue one run now, outside the timing, through the same dispatch path and ledger.

    Its nominal time is now, one millisecond later for each run already at that instant
    and for an occurrence of the schedule's own there (its next run, not claimed yet), so
    it has an idempotency key of its own. The regular next run stays where it is, unless
    ``advance``: then the run takes its place, and the regular occurrence is recorded as
    skipped ("replaced")."""
    db = _db(schedule)
    now = timing.truncate_ms(clock.now())  # Redis TIME, as the schedulers see it
    with transaction.atomic(using=db):
        current = _locked(schedule, db)
        _check_runnable(current)
        pruned = PrunedRuns.objects.using(db).filter(schedule=current).first()
        pruned_through = pruned.through if pruned is not None else None
        at = now
        for _attempt in range(1000):
            if _occurrence_at(current, at, pruned_through):
                at += timing.ONE_MS
                continue
            inserted = ledger.queue(
                current,
                [at],
                trigger=Run.Trigger.RUN_NOW,
                note="Queued by run now.",
                now=now,
                worker_id="run_now",
                using=db,
            )
            if inserted:
                break
            at += timing.ONE_MS
        else:
            raise ServiceError("Could not find a free instant for the run; try again.")
        if advance:
            _replace_next_run(current, at, now, db)
        run = Run.objects.using(db).within(Span(at, at)).get(pk=next(iter(inserted.values())))
        _record(
            current,
            origin,
            ScheduleChange.Action.RUN_NOW,
            {"run": run.pk, "key": run.idempotency_key, "advance": advance},
            db,
        )
    _adopt(schedule, current, WRITTEN_BY_ACTIONS)
    _wake_after_commit(db, schedule.pk)
    logger.info("Run now of schedule %s queued (key %s).", schedule.pk, run.idempotency_key)
    return run


@dataclass(frozen=True, slots=True)
class BackfillReport:
    dry_run: bool
    occurrences: int  # in the range
    queued: int  # new runs queued
    requeued: int  # skipped runs turned into runs
    already: int  # in the ledger and not skipped: fired, running or queued before
    # Of ``queued``: occurrences whose runs retention may have deleted, run again because
    # the caller said so (``rerun_pruned``).
    rerun_pruned: int = 0


def backfill(
    schedule: Schedule,
    start: datetime,
    end: datetime,
    *,
    dry_run: bool = False,
    rerun_pruned: bool = False,
    origin: Origin = PYTHON,
) -> BackfillReport:
    """Fire each occurrence of the schedule's timing in [start, end] that has not fired.

    The range must be in the past. An occurrence the ledger holds as skipped fires now; one
    that fired (or is queued) does not fire again, so running the same backfill twice
    fires nothing new. Each run has the occurrence's own key.

    The ledger is what tells, and retention deletes old runs: an occurrence the ledger
    lacks at or before how far the schedule's runs were pruned (``PrunedRuns``) may have
    run. Such a range is refused (``PrunedRange``, naming it) unless ``rerun_pruned`` says
    to run those occurrences again, knowing some may have run."""
    _check_runnable(schedule)  # before the checks of the range: the first thing to fix
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise ServiceError(f"The {name} must be a date and time with a time zone.")
    now = clock.now()  # "the past" is what the schedulers' clock has passed
    if start < EPOCH:
        raise ServiceError("A backfill cannot start before 1970-01-01 UTC.")
    if end < start:
        raise ServiceError("The end of a backfill must not be before its start.")
    if end > now:
        raise ServiceError("A backfill covers the past: its end must not be after now.")
    db = _db(schedule)
    with transaction.atomic(using=db):
        current = _locked(schedule, db)
        _check_runnable(current)
        moments = _occurrences_between(current, start, end)
        recorded = (
            Run.objects.using(db)
            .filter(schedule_id=schedule.pk, scheduled_for__gte=start, scheduled_for__lte=end)
            .values_list("scheduled_for", "status")
        )
        status_of = {timing.to_ms(at): status for at, status in recorded}
        new = [at for at in moments if timing.to_ms(at) not in status_of]
        skipped = [at for at in moments if status_of.get(timing.to_ms(at)) == Run.Status.SKIPPED]
        # Read after the ledger: a prune that commits between the two reads is then seen
        # here (its rows gone from the first read are covered by the second).
        pruned = PrunedRuns.objects.using(db).filter(schedule_id=schedule.pk).first()
        unknown = [at for at in new if pruned is not None and at <= pruned.through]
        if unknown and not rerun_pruned:
            assert pruned is not None
            raise PrunedRange(_pruned_message(unknown, pruned.through), through=pruned.through,
                              first=unknown[0], last=unknown[-1], count=len(unknown))  # fmt: skip
        report = BackfillReport(
            dry_run=dry_run,
            occurrences=len(moments),
            queued=len(new),
            requeued=len(skipped),
            already=len(moments) - len(new) - len(skipped),
            rerun_pruned=len(unknown),
        )
        if dry_run or not (new or skipped):
            return report
        note = f"Queued by a backfill of {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC."
        ledger.queue(
            current,
            new,
            trigger=Run.Trigger.BACKFILL,
            note=note,
            now=now,
            worker_id="backfill",
            using=db,
        )
        ledger.requeue_skipped(
            current, skipped, trigger=Run.Trigger.BACKFILL, note=note, now=now, using=db
        )
        _record(
            current,
            origin,
            ScheduleChange.Action.BACKFILL,
            {
                "start": start.isoformat(),
                "end": end.isoformat(),
                "queued": report.queued,
                "requeued": report.requeued,
                **({"rerun_pruned": report.rerun_pruned} if report.rerun_pruned else {}),
            },
            db,
        )
    _wake_after_commit(db, schedule.pk)
    logger.info(
        "Backfill of schedule %s queued %d run(s) (%d skipped before).",
        schedule.pk,
        report.queued + report.requeued,
        report.requeued,
    )
    return report


def _pruned_message(unknown: list[datetime], through: datetime) -> str:
    when = "%Y-%m-%d %H:%M:%S UTC"
    span = f"{unknown[0]:{when}}" + (f" to {unknown[-1]:{when}}" if len(unknown) > 1 else "")
    return (
        f"Retention deleted this schedule's runs up to {through:{when}}: {len(unknown)} "
        f"occurrence(s) of the range ({span}) are no longer in the ledger, and whether they "
        "ran cannot be told. Backfill from after that time, or say that running them again "
        'is wanted (rerun_pruned=True; --rerun-pruned; "rerun_pruned": true in the API).'
    )


# -- helpers -------------------------------------------------------------------------------


def _occurrence_at(schedule: Schedule, at: datetime, pruned_through: datetime | None) -> bool:
    """Whether ``at`` is the nominal time of an occurrence whose key a run now must not
    take: one the schedule has yet to reach (its next run or later: the claim that reaches
    it records it under its key), or one it passed whose run retention may have deleted
    (at or before ``pruned_through``). The others it passed are in the ledger, fired or
    skipped, where the insert of the run finds them."""
    nominal = schedule.next_run_at
    ahead = nominal is not None and at >= timing.truncate_ms(nominal)
    pruned = pruned_through is not None and at <= pruned_through
    if not (ahead or pruned):
        return False
    anchor = timing.truncate_ms(nominal or schedule.fired_through or at)
    try:
        return timing.is_moment(schedule.timing_spec, at, anchor=anchor)
    except TimingError:  # a row a bulk path wrote: the claim cannot evaluate it either
        return at == nominal


def _replace_next_run(schedule: Schedule, replaced_by: datetime, now: datetime, db: str) -> None:
    """Move the schedule past its next occurrence, recorded as replaced by a run now."""
    nominal = schedule.next_run_at
    if not schedule.enabled or nominal is None:
        return
    spec = schedule.timing_spec
    following = next(timing.occurrences(spec, nominal, anchor=nominal, include_skipped=True), None)
    note = f"Replaced by the run now at {replaced_by:%Y-%m-%d %H:%M:%S.%f}"[:-3] + " UTC."
    ledger.record_skipped(
        schedule,
        [(nominal, timing.SkipReason.REPLACED, note)],
        now=now,
        worker_id="run_now",
        using=db,
    )
    schedule.next_run_at = following.at if following else None
    schedule.due_at = schedule.due_at_for(schedule.next_run_at)
    schedule.advance_mark(nominal)  # decided: replaced
    schedule.save(using=db, update_fields=["next_run_at", "due_at", "fired_through"])


def _occurrences_between(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """The occurrences of the schedule's timing in [start, end], at most MAX_BACKFILL_RUNS.

    The walk steps over local times the DST policy skips (and days a calendar excludes)
    one by one, so that the range bounds it (and the same limit caps them): it never looks
    past ``end`` for an occurrence, which for a cron whose matches are all skipped meant
    the year 9999."""
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
                raise ServiceError(
                    f"The range holds more than {limit:,} skipped local times (that do not "
                    "exist in the schedule's zone, or on days its calendars exclude; "
                    "SCHEDULINATOR['MAX_BACKFILL_RUNS']); backfill a shorter range at a time."
                )
            continue
        moments.append(moment.at)
        if len(moments) > limit:
            raise ServiceError(
                f"The range holds more than {limit:,} occurrences "
                "(SCHEDULINATOR['MAX_BACKFILL_RUNS']); backfill a shorter range at a time."
            )
    return moments


def _check_runnable(schedule: Schedule) -> None:
    if schedule.pk is None:
        raise ScheduleDeleted("Save the schedule first.")
    if schedule.task not in registry:
        raise ServiceError(
            f"{schedule.task!r} is not a registered task here, so it cannot be run. Register "
            "it with @django_schedulinator.task."
        )
