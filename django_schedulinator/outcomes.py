"""What became of runs: outcomes a dispatcher returns, and reports from the worker side.

A scheduler records what its dispatcher returned for a batch (``record``). A run handed off
to another system (Celery, RQ, Django tasks) ends over there: the worker reports its start
and its end by the occurrence key (``report_started``, ``report_finished``), so overlap,
auto-pause, the ledger and the admin see real outcomes for handed-off work. The
integrations in ``dispatch/`` call these from their workers' hooks; anything else that
runs handed-off work may call them too, with the key it received. Both kinds go the same
way: the ledger, then each schedule's failures in a row (and auto-pause), then a buffered
run that was waiting.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple, ParamSpec, TypeVar

from django.db import InterfaceError, OperationalError, connections, router, transaction

from django_schedulinator import signals
from django_schedulinator.index import clock
from django_schedulinator.models import Run, Schedule
from django_schedulinator.models.batches import json_ids
from django_schedulinator.models.keys import occurrence_key, parse_key
from django_schedulinator.models.spans import Span
from django_schedulinator.operations import outbox
from django_schedulinator.services import ledger, streaks
from django_schedulinator.statuses import OutcomeStatus, ReportedStatus
from django_schedulinator.timing.vocabulary import NotifyEvent

if TYPE_CHECKING:
    from django_schedulinator.dispatch.base import BaseDispatcher, Outcome
    from django_schedulinator.index.due import DueIndex

logger = logging.getLogger("django_schedulinator.outcomes")

AUTO_PAUSE_NOTE = "Paused automatically: pause_after_failures runs in a row failed."
MAX_ERROR_CHARS = 4000
# Failed runs logged one by one per recorded batch (or report); beyond, one line counts
# the rest: a schedule that fails every second must not drown the log.
LOGGED_FAILURES = 20
# The most of an error's headline a log line (and an alert's reason) carries.
HEADLINE_CHARS = 300


P = ParamSpec("P")
R = TypeVar("R")


def through_a_dropped_connection(func: Callable[P, R]) -> Callable[P, R]:
    """Run ``func`` once more when it fails with a connection-level database error: the
    connection it used may have been dropped (a failover, a server restart, a terminated
    backend, an idle timeout) while a worker sat for hours between two jobs, and a report
    must not be lost to that. A closed or broken connection is replaced first. The drivers
    say "connection lost" in too many ways to tell it apart from a passing error, and a
    report may be repeated (it is idempotent), so any such error gets its one more try.
    Inside a caller's transaction nothing is retried: the transaction went with the
    connection, and it is the caller's to retry."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            used = [
                connections[alias] for alias in {router.db_for_read(Run), router.db_for_write(Run)}
            ]
            if any(conn.in_atomic_block for conn in used):
                raise
            for conn in used:
                if not conn.is_usable():
                    conn.close()
            logger.info("Database error (%s); trying once more.", exc)
        return func(*args, **kwargs)

    return wrapper


def retry_of(dispatcher: BaseDispatcher) -> ledger.Retry:
    options = dispatcher.settings
    return ledger.Retry(
        max_attempts=options["MAX_ATTEMPTS"],
        backoff=options["RETRY_BACKOFF_SECONDS"],
        backoff_max=options["RETRY_BACKOFF_MAX_SECONDS"],
    )


def outcome_timeout(alias: str) -> timedelta:
    """How long a handed-off run of ``alias`` counts as in progress without a report."""
    from django.core.exceptions import ImproperlyConfigured

    from django_schedulinator.dispatch import COMMON_OPTIONS, dispatchers

    try:
        seconds = dispatchers[alias].settings["OUTCOME_TIMEOUT_SECONDS"]
    except ImproperlyConfigured:  # the alias is gone from the settings: the default
        seconds = COMMON_OPTIONS["OUTCOME_TIMEOUT_SECONDS"].default
    return timedelta(seconds=seconds)


class Reported(NamedTuple):
    """What a dispatcher returned for one batch: the outcomes, the schedule of each run,
    when the batch was handed to it, and the span of its runs' nominal times (None: not
    known), which bounds every statement on them (``spans.py``)."""

    outcomes: Sequence[Outcome]
    schedule_of: Mapping[int, int]
    dispatched_at: datetime
    span: Span | None


def record(
    batches: Sequence[Reported],
    *,
    dispatcher: BaseDispatcher,
    now: datetime,
    using: str,
    index: DueIndex | None = None,
) -> ledger.Recorded:
    """Store what ``dispatcher`` returned for one or more batches, in one transaction: the
    ledger, then the failure streaks of the schedules whose runs ended (their buffered run
    may go now). Several batches share the transaction's commit, its row locks and its
    streak reads (a recorder writes whatever waited for it together, ``recording.py``).
    Returns what the ledger recorded: those outcomes, and when the retries are due."""
    awaited = dispatcher.reports_outcomes and not dispatcher.runs_in_process
    due_by = now + timedelta(seconds=dispatcher.settings["OUTCOME_TIMEOUT_SECONDS"])
    schedule_of = {run_id: sid for b in batches for run_id, sid in b.schedule_of.items()}
    every = [o for b in batches for o in b.outcomes]
    retry = retry_of(dispatcher)
    recorded = ledger.Recorded()
    with transaction.atomic(using=using):
        # The schedules before their runs (streaks.lock_streaks says why).
        resets = streaks.lock_streaks(
            [schedule_of[o.run_id] for o in every if o.status == OutcomeStatus.SUCCEEDED],
            [
                schedule_of[o.run_id]
                for o in every
                if o.status in (OutcomeStatus.FAILED, OutcomeStatus.RETRY)
            ],
            using=using,
        )
        for batch in batches:
            part = ledger.record_outcomes(
                batch.outcomes,
                dispatched_at=batch.dispatched_at,
                now=now,
                using=using,
                outcome_due_by=due_by if awaited else None,
                retry=retry,
                span=batch.span,
            )
            recorded.ended += part.ended
            recorded.retry_at += part.retry_at
        span = Span.cover(b.span for b in batches)
        failed = [o for o in recorded.ended if o.status == OutcomeStatus.FAILED]
        of = _failed_runs([o.run_id for o in failed], using, span)
        _streaks(
            resets,
            {sid: [at for _, at, _ in runs] for sid, runs in _by_schedule(of).items()},
            using=using,
            index=index,
        )
        _alert_failures(
            [(of[o.run_id], o.run_id, o.error) for o in failed if o.run_id in of], now, using
        )
        if failed:
            transaction.on_commit(
                functools.partial(
                    _log_failures, [(of[o.run_id], o.error) for o in failed if o.run_id in of]
                ),
                using=using,
            )
        handed_off = [o for o in every if o.status == OutcomeStatus.DISPATCHED]
        _announce(handed_off, recorded.ended, dispatcher.alias, awaited, using=using, span=span)
    return recorded


def _announce(
    handed_off: Sequence[Outcome],
    ended: Sequence[Outcome],
    alias: str,
    awaited: bool,
    *,
    using: str,
    span: Span | None,
) -> None:
    """Send ``run_handed_off`` and ``run_finished`` once the caller's transaction commits.
    Their nominal times cost a query, made only when a receiver is connected."""
    if not (signals.run_handed_off.receivers or signals.run_finished.receivers):
        return
    run_ids = [o.run_id for o in (*handed_off, *ended)]
    of = {
        pk: (schedule_id, at)
        for pk, schedule_id, at in Run.objects.using(using)
        .within(span)
        .filter(pk__in=json_ids(run_ids, using))
        .values_list("pk", "schedule_id", "scheduled_for")
    }
    for o in handed_off:
        if o.run_id in of:
            schedule_id, at = of[o.run_id]
            signals.send_after_commit(
                signals.run_handed_off,
                Run,
                using=using,
                run_id=o.run_id,
                schedule_id=schedule_id,
                scheduled_for=at,
                key=occurrence_key(schedule_id, at),
                dispatcher=alias,
                awaits_outcome=awaited,
            )
    for o in ended:
        if o.run_id in of:
            schedule_id, at = of[o.run_id]
            _finished(o.run_id, schedule_id, at, o.status, o.error, using=using)


def _finished(
    run_id: int, schedule_id: int, at: datetime, status: str, error: str, *, using: str
) -> None:
    signals.send_after_commit(
        signals.run_finished,
        Run,
        using=using,
        run_id=run_id,
        schedule_id=schedule_id,
        scheduled_for=at,
        key=occurrence_key(schedule_id, at),
        status=status,
        error=error,
    )


@through_a_dropped_connection
def report_started(key: str) -> bool:
    """Record that the run of occurrence ``key`` started on a worker. Returns whether a
    run changed (False: unknown key, or the run is no longer awaited)."""
    schedule_id, at = parse_key(key)
    db = router.db_for_write(Run)
    alias = (
        Run.objects.using(db)
        .filter(schedule_id=schedule_id, scheduled_for=at)
        .values_list("dispatcher", flat=True)
        .first()
    )
    if alias is None:
        logger.warning("A start was reported for %s, which is not in the ledger.", key)
        return False
    due_by = clock.now() + outcome_timeout(alias)
    return bool(ledger.record_started(schedule_id, at, outcome_due_by=due_by, using=db))


@through_a_dropped_connection
def report_finished(key: str, *, succeeded: bool, error: str = "") -> bool:
    """Record that the run of occurrence ``key`` ended on a worker, ``succeeded`` or not
    (``error``: what went wrong, its last 4,000 characters kept). Returns whether this
    ended the run: a second report of the same run, or a report for an unknown key or a
    run that is not awaited, changes nothing and returns False."""
    schedule_id, at = parse_key(key)
    db = router.db_for_write(Run)
    now = clock.now()
    with transaction.atomic(using=db):
        # The schedule before its run (streaks.lock_streaks says why).
        resets = streaks.lock_streaks(
            [schedule_id] if succeeded else [], [] if succeeded else [schedule_id], using=db
        )
        ended = ledger.record_reported_end(
            schedule_id,
            at,
            succeeded=succeeded,
            error=str(error)[-MAX_ERROR_CHARS:],
            now=now,
            using=db,
        )
        if ended:
            _streaks(resets, {} if succeeded else {schedule_id: [at]}, using=db)
            if not succeeded:
                run = FailedRun(schedule_id, at, _name_of(schedule_id, db))
                if outbox.notifier_for(NotifyEvent.FAILED) is not None:
                    run_id = _run_id(schedule_id, at, db)
                    _alert_failures([(run, run_id, str(error)[-MAX_ERROR_CHARS:])], now, db)
                transaction.on_commit(
                    functools.partial(_log_failures, [(run, str(error))]), using=db
                )
            if signals.run_finished.receivers:
                run_id = _run_id(schedule_id, at, db)
                status = Run.Status.SUCCEEDED if succeeded else Run.Status.FAILED
                _finished(run_id, schedule_id, at, status, str(error), using=db)
    if not ended:
        logger.info("An end was reported for %s, which is not awaited; nothing changed.", key)
        return False
    release_buffered({schedule_id}, now=now, using=db)
    return True


def _alert_failures(
    failed: Sequence[tuple[FailedRun, int, str]], now: datetime, using: str
) -> None:
    """The failed runs' alerts, into the outbox in the caller's transaction (which holds
    their schedules' rows), when NOTIFY asks for "failed": each is sent, or grouped into its
    schedule's streak of failures (``operations.grouping``), and never lost."""
    notifier = outbox.notifier_for(NotifyEvent.FAILED)
    if notifier is None or not failed:
        return
    outbox.add_failed(
        [
            outbox.Failure(
                run.schedule_id,
                run.scheduled_for,
                run_id,
                ledger.storable(error[-MAX_ERROR_CHARS:]),
            )
            for run, run_id, error in failed
        ],
        notifier=notifier,
        raised_at=now,
        using=using,
    )


def _run_id(schedule_id: int, at: datetime, using: str) -> int:
    return (
        Run.objects.using(using)
        .filter(schedule_id=schedule_id, scheduled_for=at)
        .values_list("pk", flat=True)
        .get()
    )


def _name_of(schedule_id: int, using: str) -> str:
    name = Schedule.objects.using(using).filter(pk=schedule_id).values_list("name", flat=True)
    return name.first() or f"#{schedule_id}"


def release_buffered(
    schedule_ids: set[int] | None, *, now: datetime, using: str, index: DueIndex | None = None
) -> int:
    """Queue the buffered runs of these schedules (of all: None) that no longer wait for a
    run in progress, and tell the schedulers; how many."""
    released = ledger.release_buffered(schedule_ids, now=now, using=using)
    if released:
        from django_schedulinator.index.due import get_index

        (index or get_index()).wake(schedule_ids)
    return released


class FailedRun(NamedTuple):
    """Which run failed: its schedule, its nominal time, its schedule's name."""

    schedule_id: int
    scheduled_for: datetime
    name: str


def _failed_runs(run_ids: Sequence[int], using: str, span: Span | None) -> dict[int, FailedRun]:
    """These runs' schedules, nominal times and schedule names, by run: one query, made only
    when runs failed."""
    if not run_ids:
        return {}
    return {
        pk: FailedRun(schedule_id, at, name)
        for pk, schedule_id, at, name in Run.objects.using(using)
        .within(span)
        .filter(pk__in=json_ids(run_ids, using))
        .values_list("pk", "schedule_id", "scheduled_for", "schedule__name")
    }


def _by_schedule(runs: Mapping[int, FailedRun]) -> dict[int, list[FailedRun]]:
    grouped: dict[int, list[FailedRun]] = {}
    for run in runs.values():
        grouped.setdefault(run.schedule_id, []).append(run)
    return grouped


def headline(error: str) -> str:
    """What an error says, in one line: the exception and its message where ``error`` is a
    traceback (its last line that is not indented: the exception raised, after any chained
    ones), else its first line that is not blank; ``HEADLINE_CHARS`` at most."""
    lines = [line.rstrip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return ""
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        unindented = [line for line in lines if not line[0].isspace()]
        line = unindented[-1] if unindented else lines[-1]
    else:
        line = lines[0]
    line = line.strip()
    return line if len(line) <= HEADLINE_CHARS else line[: HEADLINE_CHARS - 3] + "..."


def _log_failures(failed: Sequence[tuple[FailedRun, str]]) -> None:
    """Each failed run once, at WARNING, once its end is committed: its schedule, its key and
    what its error says (the whole error is on the run, in the admin and the API); beyond
    ``LOGGED_FAILURES``, one line counts the rest."""
    for run, error in failed[:LOGGED_FAILURES]:
        logger.warning(
            "Run of %r (key %s) failed: %s",
            run.name,
            occurrence_key(run.schedule_id, run.scheduled_for),
            headline(error) or "no error was reported",
        )
    if len(failed) > LOGGED_FAILURES:
        names = sorted({repr(run.name) for run, _ in failed[LOGGED_FAILURES:]})
        logger.warning(
            "%d more runs failed (of %s%s); each run's error is on the run.",
            len(failed) - LOGGED_FAILURES,
            ", ".join(names[:5]),
            ", ..." if len(names) > 5 else "",
        )


def _streaks(
    succeeded: Sequence[int],
    failed: Mapping[int, Sequence[datetime]],
    *,
    using: str,
    index: DueIndex | None = None,
) -> None:
    """Each schedule's failures in a row (``succeeded``: those with a success and a count
    above zero, from ``streaks.lock_streaks``; ``failed``: the nominal times of the runs
    that failed, by schedule); those that reach ``pause_after_failures`` pause (through the
    service layer, in the caller's transaction)."""
    reached = streaks.record_streaks(succeeded, failed, using=using)
    paused = streaks.auto_pause(reached, note=AUTO_PAUSE_NOTE, using=using, index=index)
    if paused:
        logger.warning(
            "Paused %d schedule(s) after failures in a row (pause_after_failures): %s",
            len(paused),
            paused[:20],
        )


def report_from_worker(key: str | Callable[[], str | None], status: str, error: str = "") -> None:
    """What the hooks in workers call (Celery's signals, RQ's callbacks, Django tasks'
    signals): ``status`` is "started", "succeeded" or "failed"; ``key`` is the occurrence
    key, or a function that finds it (None: the task is not a run the scheduler handed off).
    A connection dropped since the last report is reopened; a report that still cannot be
    made (the database away) is logged and never fails the task: the run's outcome stays
    unknown until its deadline. The worker's database connection is closed if it is stale."""
    from django.db import close_old_connections

    try:
        found = key() if callable(key) else key
        if found is None:
            return
        if status == ReportedStatus.STARTED:
            report_started(found)
        else:
            report_finished(found, succeeded=status == ReportedStatus.SUCCEEDED, error=error)
    except Exception:
        logger.exception(
            "Could not report that %s %s.", key if isinstance(key, str) else "a run", status
        )
    finally:
        close_old_connections()
