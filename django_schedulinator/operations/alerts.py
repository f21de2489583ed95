"""Missed-run alerts: occurrences with no successful run within their schedule's grace.

A schedule with a ``grace`` expects each of its occurrences to have succeeded by its
nominal time plus the grace. ``check`` finds those that did not, in two places, each read
through a bounded query:

- **Runs.** A run of such a schedule enters the ledger with the time it is missed at
  (``Run.alert_at``: its nominal time plus the grace; for a run now or a backfill, the time
  it was queued plus the grace), and the UPDATE that records its success clears it. The
  runs whose time has come are recorded as missed by one conditional UPDATE
  (``ledger.record_missed``): of several processes that check at once, each run is raised
  by exactly one. The reason is what the run was at (``REASON_OF_STATUS``).
- **Occurrences that never fired.** Enabled schedules whose next run plus the grace has
  passed: every scheduler down, a dispatcher lane stuck, an index entry lost. Raised once
  per occurrence: the schedule's ``missed_at`` records it, set conditionally
  (``services.mark_not_fired``). The time counts from the nominal time, or from the last
  change of the schedule if that is later (a resume that hands the paused period to
  catch-up is not a miss).

Each occurrence raised is marked on its schedule (``Schedule.missed_at``, the admin's and
the API's mark) and added to the outbox for the notifier (``outbox.py``), in one
transaction with the marks on the runs: a miss is never marked without its pending
notification. It is then announced with the ``run_missed`` signal once that commits,
logged, and counted by the scheduler that raised it (``Counters.missed``); the delivery
step (``delivery.deliver_outbox``) tells the notifier. A scheduler runs ``check`` between its
passes, one scheduler of the fleet per period (``MISSED_CHECK_SECONDS``), then a delivery
step. When every scheduler is down nothing runs them: ``no_scheduler_alive`` raises that
once per outage, and ``scheduler_status --notify`` runs all three from a plain process (a
cron job, a Kubernetes CronJob); the check and the delivery need only SQL, so it runs them
during a Redis outage too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import router, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Q
from django.db.models.functions import Greatest

from django_schedulinator import services, signals
from django_schedulinator.index import clock
from django_schedulinator.index.due import DueIndex, get_index
from django_schedulinator.models import Run, Schedule
from django_schedulinator.models.spans import Span
from django_schedulinator.operations import outbox
from django_schedulinator.operations.outbox import Missed
from django_schedulinator.services import ledger

logger = logging.getLogger("django_schedulinator.alerts")

# Runs, and schedules, read per kind in one check: the rest wait for the next.
CHECK_BATCH = 500

NOT_FIRED = "not_fired"
# The reason of a missed run, from its status when it was found.
REASON_OF_STATUS: dict[str, str] = {
    Run.Status.PENDING: "not_handed_off",
    Run.Status.BUFFERED: "buffered",
    Run.Status.RUNNING: "running",
    Run.Status.DISPATCHED: "no_outcome",
    Run.Status.FAILED: "failed",
}
# Each reason in words, a sentence of its own (docs/alerts.md lists them).
REASONS = {
    NOT_FIRED: "It never fired: no scheduler claimed it in time.",
    "not_handed_off": "It fired, but was not handed off in time (its dispatcher's lane "
    "stuck, or hand-offs failing and waiting to be retried).",
    "buffered": "It waited for the previous run to end (overlap 'buffer').",
    "running": "It started and had not ended.",
    "no_outcome": "It was handed off and its end was never reported.",
    "failed": "Its run failed (the task raised, or its hand-offs were given up on).",
}


def check(
    now: datetime | None = None, *, using: str | None = None, limit: int = CHECK_BATCH
) -> list[Missed]:
    """Raise the occurrences missed at ``now`` (default: Redis TIME) that nobody raised
    yet: each is marked, added to the outbox for the notifier, announced and logged once,
    in one transaction (the announcement after its commit). Returns those this call raised.

    It waits on no row lock: the runs and schedules another transaction holds (an admin
    edit, a migration) are skipped (``FOR UPDATE SKIP LOCKED`` on PostgreSQL), and their
    misses are raised by a check after the lock ends. Should anything fail, nothing of the
    call is kept: the next check raises it all. Telling the notifier is the delivery
    step's (``delivery.deliver_outbox``)."""
    db = using or router.db_for_write(Run)
    now = now or clock.now()
    notifier = outbox.notifier_for("missed")
    with transaction.atomic(using=db):
        runs = _due_runs(now, db, limit)
        late = _late_schedules(now, db, limit)
        wanted = {sid for _, sid, _ in runs} | {sid for sid, _, _ in late}
        free = _lock_schedules(wanted, db)
        missed = _missed_runs(runs, free, now, db) + _not_fired(late, free, db)
        # Schedules that succeeded again end their streak of alerts (after the misses raised
        # now, which keep a streak going).
        outbox.end_streaks(now, using=db)
        if missed:
            latest: dict[int, datetime] = {}
            for m in missed:
                latest[m.schedule_id] = max(
                    m.scheduled_for, latest.get(m.schedule_id, m.scheduled_for)
                )
            services.mark_missed(latest, using=db)
            if notifier is not None:
                outbox.add(missed, notifier=notifier, raised_at=now, using=db)
            for m in missed:
                signals.send_after_commit(
                    signals.run_missed,
                    Schedule,
                    using=db,
                    schedule_id=m.schedule_id,
                    scheduled_for=m.scheduled_for,
                    run_id=m.run_id,
                    reason=m.reason,
                    grace=m.grace,
                )
    held = wanted - free.keys()
    if held:
        logger.info(
            "%d schedule(s) held by another transaction (e.g. %s): their missed runs are "
            "raised by a check after the lock ends.",
            len(held),
            sorted(held)[:10],
        )
    if not missed:
        return []
    shown = ", ".join(
        f"schedule {m.schedule_id} at {m.scheduled_for.isoformat()} ({m.reason})"
        for m in missed[:10]
    )
    logger.warning(
        "%d occurrence(s) had no successful run within their schedule's grace: %s%s.",
        len(missed),
        shown,
        f" and {len(missed) - 10} more" if len(missed) > 10 else "",
    )
    return missed


def _due_runs(now: datetime, db: str, limit: int) -> list[tuple[int, int, datetime]]:
    """Runs whose alert time has come (id, schedule, nominal time), locked, those another
    transaction holds left out."""
    due = (
        Run.objects.using(db)
        .filter(alert_at__lte=now)
        .order_by("alert_at")
        .select_for_update(skip_locked=True)
    )
    return list(due.values_list("pk", "schedule_id", "scheduled_for")[:limit])


def _late_schedules(now: datetime, db: str, limit: int) -> list[tuple[int, datetime, timedelta]]:
    """Enabled schedules whose next occurrence is past its grace, not raised yet (id,
    nominal time, grace)."""
    deadline = ExpressionWrapper(
        Greatest("next_run_at", "updated_at") + F("grace"), output_field=DateTimeField()
    )
    late = (
        Schedule.objects.using(db)
        # next_run_at first: an index serves it, and the rows due now are few.
        .filter(next_run_at__lt=now, enabled=True, grace__isnull=False)
        .filter(Q(missed_at__isnull=True) | Q(missed_at__lt=F("next_run_at")))
        .alias(deadline=deadline)
        .filter(deadline__lte=now)
        .order_by("next_run_at")
        .values_list("pk", "next_run_at", "grace")[:limit]
    )
    return [(pk, nominal, grace) for pk, nominal, grace in late if nominal and grace]


def _lock_schedules(ids: set[int], db: str) -> dict[int, tuple[timedelta | None, datetime | None]]:
    """Lock the schedules ``ids`` (in id order, those another transaction holds skipped):
    the grace and the mark of each one locked, by id."""
    if not ids:
        return {}
    locked = (
        Schedule.objects.using(db)
        .filter(pk__in=sorted(ids))
        .order_by("pk")
        .select_for_update(skip_locked=True)
        .values_list("pk", "grace", "missed_at")
    )
    return {pk: (grace, marked) for pk, grace, marked in locked}


def _missed_runs(
    runs: list[tuple[int, int, datetime]],
    free: dict[int, tuple[timedelta | None, datetime | None]],
    now: datetime,
    db: str,
) -> list[Missed]:
    """Of the runs whose alert time has come, those of the schedules locked: recorded as
    missed, each by one process."""
    mine = [(pk, sid, at) for pk, sid, at in runs if sid in free]
    forgotten = [(pk, at) for pk, sid, at in mine if free[sid][0] is None]
    wanted = [(pk, at) for pk, sid, at in mine if free[sid][0] is not None]
    # Their schedule's grace was cleared since: nobody wants to hear of them any more.
    ledger.forget_alerts(
        [pk for pk, _ in forgotten], using=db, span=Span.of(at for _, at in forgotten)
    )
    recorded = ledger.record_missed(
        [pk for pk, _ in wanted], now=now, using=db, span=Span.of(at for _, at in wanted)
    )
    missed = []
    for pk, sid, at in mine:
        status = recorded.get(pk)
        grace, marked = free[sid]
        if status is None or grace is None:
            continue  # another process recorded it, or it succeeded meanwhile
        if marked == at:
            # Raised already as never fired: a scheduler fired it just as that was noticed.
            continue
        missed.append(Missed(sid, at, pk, REASON_OF_STATUS.get(status, status), grace))
    return missed


def _not_fired(
    late: list[tuple[int, datetime, timedelta]],
    free: dict[int, tuple[timedelta | None, datetime | None]],
    db: str,
) -> list[Missed]:
    """Of the schedules whose next occurrence is past its grace, those locked: each
    occurrence raised once."""
    return [
        Missed(sid, nominal, None, NOT_FIRED, grace)
        for sid, nominal, grace in late
        if sid in free and services.mark_not_fired(sid, nominal, using=db)
    ]


def no_scheduler_alive(
    alive: bool | Callable[[], bool],
    *,
    index: DueIndex | None = None,
    now: datetime | None = None,
) -> bool:
    """Raise "no scheduler is alive" once per outage. ``alive`` says whether any scheduler
    is alive now (or is a function that finds out: the heartbeats'). While none is, the
    first caller records the outage in Redis (SET NX, with when it was noticed) and sends
    ``schedulers_down``; later callers, in any process, do nothing until a scheduler is
    seen alive again, which ends the outage. Returns whether this call raised it."""
    index = index or get_index()
    if alive() if callable(alive) else alive:
        since = index.control.end_outage()
        if since:
            logger.warning("A scheduler is alive again (none was since %s).", since)
        return False
    noticed = now or clock.now()
    if not index.control.begin_outage(noticed.isoformat()):
        return False
    logger.error(
        "No scheduler is alive (noticed at %s): nothing fires until one runs again.",
        noticed.isoformat(),
    )
    signals.send(signals.schedulers_down, DueIndex, since=noticed)
    return True
