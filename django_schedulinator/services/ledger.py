"""The run ledger: every write of ``Run`` rows, named for what happened.

A ``Run`` is one occurrence of a schedule. The unique (schedule, scheduled_for) constraint
makes an occurrence impossible to record twice, and the idempotency key derives from the
same pair, so the ledger is what makes "fired exactly once" decidable. Runs enter it when a
claim fires, buffers or skips occurrences (``record_claimed``), when a resume or a run now
passes occurrences over (``record_skipped``), and when someone queues work by hand
(``queue``, ``requeue_skipped``). A scheduler takes them over (``take_over``) and counts
each hand-off (``count_hand_offs``). They leave ``pending`` when a scheduler starts them
(``mark_running``), cancels them (``cancel_paused``) or records
their outcome (``record_outcomes``; a hand-off that failed goes back to pending after a
backoff), and when a worker reports on a handed-off run by its key (``record_started``,
``record_reported_end``); buffered runs are released by ``release_buffered``. Runs of a
schedule with a grace carry the time they are missed at unless they succeed (``alert_at``,
cleared by the success); the missed-run check records those it raises (``record_missed``).

Nothing else in the app writes runs (retention, ``retention.py``, deletes old ones), and the
ledger writes nothing else (the schedules' counters are the services' ``record_streaks``). The
SQL of the batched insert lives in ``RunQuerySet.insert_runs``; the functions here say when
and why it is called.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db.models import Exists, F, OuterRef, Q, Value
from django.db.models.functions import Coalesce

from django_schedulinator import timing
from django_schedulinator.models import Run, Schedule, alert_time
from django_schedulinator.models.batches import NewRun, json_ids, per_row
from django_schedulinator.models.spans import Span
from django_schedulinator.statuses import OutcomeStatus

if TYPE_CHECKING:
    from django_schedulinator.dispatch.base import Outcome


def record_claimed(
    runs: Sequence[NewRun],
    *,
    claimed_at: datetime,
    worker_id: str,
    claim_token: str,
    lease_expires_at: datetime,
    using: str,
) -> dict[tuple[int, int], int]:
    """The runs of a claim: fired ones pending under this claim's lease, buffered and
    skipped ones as such. Occurrences already in the ledger are left out; returns
    ``{(schedule_id, epoch ms): run_id}`` of those inserted."""
    return Run.objects.using(using).insert_runs(
        runs,
        claimed_at=claimed_at,
        worker_id=worker_id,
        claim_token=claim_token,
        lease_expires_at=lease_expires_at,
    )


def record_skipped(
    schedule: Any,
    skipped: Iterable[tuple[datetime, str, str]],
    *,
    now: datetime,
    worker_id: str,
    using: str,
) -> dict[tuple[int, int], int]:
    """Occurrences that did not fire, each ``(nominal time, reason, note)``: the paused
    period at a resume, the regular run a run now replaced."""
    return Run.objects.using(using).insert_runs(
        [
            NewRun.of(schedule, at, status=Run.Status.SKIPPED, skip_reason=reason, note=note)
            for at, reason, note in skipped
        ],
        claimed_at=now,
        worker_id=worker_id,
    )


def queue(
    schedule: Schedule,
    moments: Iterable[datetime],
    *,
    trigger: str,
    note: str,
    now: datetime,
    worker_id: str,
    using: str,
) -> dict[tuple[int, int], int]:
    """Runs queued for any scheduler to take (run now, backfill): pending, their lease over
    already (at ``now``, for a run now a millisecond or two ahead of it), no attempt yet, so
    the next take-over dispatches them with ``attempt == 1``. Occurrences already in the
    ledger are left out. With a grace, each is missed that long after it was queued (a
    backfilled occurrence's nominal time has long passed)."""
    return Run.objects.using(using).insert_runs(
        [
            NewRun.of(
                schedule,
                at,
                trigger=trigger,
                attempts=0,
                lease_expires_at=min(at, now),
                note=note,
                alert_at=alert_time(schedule.grace, max(at, now)),
            )
            for at in moments
        ],
        claimed_at=now,
        worker_id=worker_id,
    )


def requeue_skipped(
    schedule: Schedule,
    moments: Sequence[datetime],
    *,
    trigger: str,
    note: str,
    now: datetime,
    using: str,
) -> int:
    """Turn skipped occurrences into queued runs (a backfill), with the schedule's task and
    arguments as they are now (and, with a grace, missed that long after ``now``). Returns
    how many were requeued."""
    if not moments:
        return 0
    return (
        Run.objects.using(using)
        .filter(schedule_id=schedule.pk, scheduled_for__in=moments, status=Run.Status.SKIPPED)
        .update(
            status=Run.Status.PENDING,
            trigger=trigger,
            attempts=0,
            # Expired already by any clock: the occurrence lies in the past.
            lease_expires_at=F("scheduled_for"),
            claim_token="",
            worker_id="backfill",
            note=note,
            task=schedule.task,
            args=schedule.args,
            kwargs=schedule.kwargs,
            dispatcher=schedule.dispatcher,
            dispatch_options=schedule.dispatch_options,
            alert_at=alert_time(schedule.grace, now),
        )
    )


def take_over(
    candidates: Sequence[int],
    *,
    now: datetime,
    lease_expires_at: datetime,
    claim_token: str,
    worker_id: str,
    using: str,
    span: Span | None,
) -> int:
    """Lease the runs among ``candidates`` whose lease expired to this process under a new
    claim token. Conditional: of two processes taking over the same run, exactly one
    matches. Returns how many it took. Taking a run is not handing it off: its attempts
    stay (``count_hand_offs`` counts them).

    ``span``, here and in every function of this module that reaches runs by id: the
    nominal times of those runs (``spans.Span``; None where the caller cannot know), so
    that a ledger partitioned by them is searched in those partitions only."""
    return (
        Run.objects.using(using)
        .within(span)
        .filter(pk__in=candidates)
        .lease_expired(now)
        .update(
            status=Run.Status.PENDING,
            claim_token=claim_token,
            worker_id=worker_id,
            lease_expires_at=lease_expires_at,
        )
    )


def count_hand_offs(
    run_ids: Sequence[int], claim_token: str, *, using: str, span: Span | None
) -> int:
    """One attempt more for each run among ``run_ids`` that ``claim_token`` still holds and
    that is about to be handed off: queued by hand, or of a schedule not paused since its
    claim (``cancel_paused`` takes those). How many were counted.

    ``attempts`` counts hand-offs: a run taken over (or queued) is counted here, just
    before the dispatcher is called; a freshly claimed one when it was inserted, under the
    lease it is handed off in (``give_back_hand_offs`` returns the count of one that waited
    instead). So a run that waits (a full lane, a stop) is taken over lease after lease
    without using any up; one whose process died between its claim and its hand-off is
    counted once more than it was handed off."""
    enabled = Schedule.objects.using(using).filter(pk=OuterRef("schedule_id"), enabled=True)
    return (
        Run.objects.using(using)
        .within(span)
        .held_by(claim_token, json_ids(run_ids, using))
        # Exists, not a join: an UPDATE with a join becomes "id IN (a subquery)", whose
        # outer statement no bound reaches (planned over every partition).
        .filter(Q(Exists(enabled)) | ~Q(trigger=Run.Trigger.SCHEDULE))
        .update(attempts=F("attempts") + 1)
    )


def attempts_held(
    run_ids: Sequence[int], claim_token: str, *, using: str, span: Span | None
) -> dict[int, int]:
    """The attempts of the runs among ``run_ids`` that ``claim_token`` still holds."""
    runs = Run.objects.using(using).within(span)
    held = runs.held_by(claim_token, json_ids(list(run_ids), using))
    return dict(held.values_list("pk", "attempts"))


def give_back_hand_offs(
    run_ids: Sequence[int], *, claim_token: str | None = None, using: str, span: Span | None
) -> int:
    """One attempt less for each run among ``run_ids`` whose counted hand-off did not
    happen: a claimed batch (counted when its runs were inserted) that a stuck lane refused
    or a stop gave up on (those ``claim_token`` still holds), or whose runs another process
    took over before this one handed them off. How many."""
    runs = Run.objects.using(using).within(span)
    if claim_token is None:
        waiting = runs.filter(pk__in=json_ids(list(run_ids), using))
    else:
        waiting = runs.held_by(claim_token, json_ids(list(run_ids), using))
    return waiting.filter(attempts__gt=0).update(attempts=F("attempts") - 1)


def renew_leases(
    run_ids: Sequence[int], claim_token: str, *, until: datetime, using: str, span: Span | None
) -> set[int]:
    """Extend the leases of the runs ``claim_token`` still holds; their ids."""
    runs = Run.objects.using(using).within(span)
    held = runs.held_by(claim_token, json_ids(run_ids, using))
    held.update(lease_expires_at=until)
    return set(held.values_list("pk", flat=True))


def cancel_paused(
    run_ids: Sequence[int], claim_token: str, *, using: str, span: Span | None
) -> int:
    """Scheduled runs whose schedule was paused between their claim and their dispatch are
    recorded as skipped ("paused") instead of dispatched."""
    if not run_ids:
        return 0
    return (
        Run.objects.using(using)
        .within(span)
        .held_by(claim_token, json_ids(run_ids, using))
        .update(
            status=Run.Status.SKIPPED,
            skip_reason=timing.SkipReason.PAUSED,
            note="The schedule was paused after this run was claimed, before its dispatch.",
            lease_expires_at=None,
            alert_at=None,  # not missed: paused on purpose
        )
    )


def record_missed(
    run_ids: Sequence[int], *, now: datetime, using: str, span: Span | None
) -> dict[int, str]:
    """The runs among ``run_ids`` whose alert time has come without a success, recorded as
    missed at ``now`` (``missed_at``; their ``alert_at`` cleared, so nothing raises them
    again). Returns the status of each run this call recorded, by id: of several processes
    that check at once, each run is recorded by exactly one."""
    return Run.objects.using(using).mark_missed(run_ids, now, span=span)


def forget_alerts(run_ids: Sequence[int], *, using: str, span: Span | None) -> int:
    """Stop waiting for a success of these runs without raising them (their schedule's grace
    was cleared since they entered the ledger). How many."""
    if not run_ids:
        return 0
    runs = Run.objects.using(using).within(span).filter(pk__in=json_ids(run_ids, using))
    return runs.exclude(alert_at=None).update(alert_at=None)


def mark_running(
    run_ids: Collection[int], claim_token: str, *, using: str, span: Span | None
) -> int:
    """The dispatcher started these runs (those ``claim_token`` still holds)."""
    return (
        Run.objects.using(using)
        .within(span)
        .pending()
        .filter(pk__in=json_ids(list(run_ids), using), claim_token=claim_token)
        .update(status=Run.Status.RUNNING)
    )


@dataclass(frozen=True, slots=True)
class Retry:
    """How a failed hand-off is tried again: ``max_attempts`` in all, each delay doubling
    from ``backoff`` up to ``backoff_max`` seconds, half of it random (so that runs failed
    together do not all come back at once)."""

    max_attempts: int
    backoff: float
    backoff_max: float

    def delay(self, attempt: int) -> timedelta:
        ceiling = min(self.backoff_max, self.backoff * 2 ** max(0, attempt - 1))
        return timedelta(seconds=ceiling / 2 + random.uniform(0, ceiling / 2))


NO_RETRY = Retry(max_attempts=1, backoff=1.0, backoff_max=1.0)


@dataclass(slots=True)
class Recorded:
    """What ``record_outcomes`` did: the outcomes that ended runs (for the failure
    streaks), and when the runs it sent back to pending for a retry are due again."""

    ended: list[Outcome] = field(default_factory=list)
    retry_at: list[datetime] = field(default_factory=list)


def record_outcomes(
    outcomes: Sequence[Outcome],
    *,
    dispatched_at: datetime,
    now: datetime,
    using: str,
    outcome_due_by: datetime | None = None,
    retry: Retry = NO_RETRY,
    span: Span | None,
) -> Recorded:
    """Store what the dispatcher said of each run (those still unfinished), in one
    transaction (the caller's). Returns the outcomes that ended runs (succeeded or failed,
    the hand-offs given up on included), for the schedules' failure streaks, and when the
    retries are due.

    - ``dispatched``: handed off. A run a report already moved on (started, or ended) keeps
      that status. ``outcome_due_by`` (when the dispatcher learns outcomes) is how long it
      counts as in progress for overlap.
    - ``retry``: the hand-off may pass later. Below ``retry.max_attempts`` the run goes back
      to pending, no process holding it, with a lease that ends after the backoff: a
      take-over dispatches it again then (the caller plans one for that moment), with
      the same key. At the limit it fails. A run
      a worker reported started meanwhile keeps that status: its hand-off arrived.
    - ``succeeded``/``failed``: ended.

    ``span``: the nominal times of the outcomes' runs; every statement here is bounded by
    it (one span for the batch: a run's own time lies within it).
    """
    runs = Run.objects.using(using).within(span)
    outcomes = [_storable(o) for o in outcomes]
    recorded = Recorded()
    ended = recorded.ended
    handed_off: list[Outcome] = []
    succeeded: list[Outcome] = []
    failed: list[Outcome] = []
    retries: list[Outcome] = []
    groups: dict[str, list[Outcome]] = {
        OutcomeStatus.DISPATCHED: handed_off,
        OutcomeStatus.SUCCEEDED: succeeded,
        OutcomeStatus.FAILED: failed,
    }
    for o in outcomes:  # "retry", and a status no dispatcher should return: tried again
        groups.get(o.status, retries).append(o)
    # Each run is written once here (a row written twice in a transaction has its foreign key
    # checked at commit, which locks its schedule's row: see _receipts).
    if handed_off:
        handed = json_ids([o.run_id for o in handed_off], using)
        receipts = _receipts(handed_off, using)
        # A dispatcher that never learns outcomes: the hand-off is all that will be known,
        # and what the grace waits for.
        unawaited = {} if outcome_due_by is not None else {"alert_at": None}
        runs.pending().filter(pk__in=handed).update(
            status=Run.Status.DISPATCHED,
            dispatched_at=dispatched_at,
            outcome_due_by=outcome_due_by,
            lease_expires_at=None,
            error="",
            **unawaited,
            **receipts,
        )
        # Reported started before this was recorded: no longer leased, and awaited.
        runs.filter(pk__in=handed, status=Run.Status.RUNNING).update(
            dispatched_at=dispatched_at, lease_expires_at=None, **receipts
        )
        if receipts:  # reported ended already: what the receiver said of it, still
            told = [o.run_id for o in handed_off if _said_something(o)]
            runs.filter(
                pk__in=json_ids(told, using),
                status__in=(Run.Status.SUCCEEDED, Run.Status.FAILED),
                external_id="",
                response_status__isnull=True,
            ).update(**receipts)
    if succeeded:
        ended += succeeded
        runs.unfinished().filter(pk__in=json_ids([o.run_id for o in succeeded], using)).update(
            status=Run.Status.SUCCEEDED,
            dispatched_at=dispatched_at,
            finished_at=now,
            lease_expires_at=None,
            alert_at=None,  # in time, or not raised yet: not missed
            error="",
            **_receipts(succeeded, using),
        )
    if retries:
        retried = json_ids([o.run_id for o in retries], using)
        # A run reported started has no lease: its hand-off reached a worker whatever the
        # dispatcher says, and it waits for its reported end like any hand-off.
        runs.filter(pk__in=retried, status=Run.Status.RUNNING, lease_expires_at=None).update(
            dispatched_at=dispatched_at
        )
        leased = runs.unfinished().exclude(lease_expires_at=None)
        attempts = dict(leased.filter(pk__in=retried).values_list("pk", "attempts"))
        for o in retries:
            attempt = attempts.get(o.run_id)
            if attempt is None:
                continue  # reported started, or ended, meanwhile
            if attempt >= retry.max_attempts:
                failed.append(
                    replace(
                        o,
                        status=OutcomeStatus.FAILED,
                        error=f"Handed off {attempt} time(s) without success; the last "
                        f"error: {o.error}",
                    )
                )
                continue
            again_at = now + retry.delay(attempt)
            if leased.filter(pk=o.run_id).update(
                status=Run.Status.PENDING,
                claim_token="",
                lease_expires_at=again_at,
                error=o.error,
                response_status=o.response_status,
            ):
                recorded.retry_at.append(again_at)
    for o in failed:  # one statement each: failures carry their own error text
        if (
            runs.unfinished()
            .filter(pk=o.run_id)
            .update(
                status=Run.Status.FAILED,
                error=o.error,
                dispatched_at=dispatched_at,
                finished_at=now,
                lease_expires_at=None,
                **_receipts([o], using),
            )
        ):
            ended.append(o)
    return recorded


def _receipts(outcomes: Sequence[Outcome], using: str) -> dict[str, Any]:
    """What the receivers said of these runs (their ids, HTTP statuses, the tasks' output),
    as the fields of the one UPDATE that also sets the runs' status ({} when they said
    nothing): each run's own values, looked up by its pk (``batches.per_row``).

    A row is written once per transaction: PostgreSQL checks the foreign key of a row the
    transaction already wrote, at commit, by locking the schedule's row. A schedule being
    deleted holds that lock while it waits for its runs, which would be a deadlock."""
    told = [o for o in outcomes if _said_something(o)]
    if not told:
        return {}
    said: dict[str, dict[int, Any]] = {
        "external_id": {o.run_id: o.external_id[:255] for o in told},
        "response_status": {o.run_id: o.response_status for o in told},
        "output": {o.run_id: o.output for o in told},
    }
    return {name: per_row(Run, name, values, using) for name, values in said.items()}


# PostgreSQL stores no NUL character in text; one in a task's output or error failed the
# whole batch's write (every run of it then dispatched again), or a worker's report.
NUL = "\x00"


def storable(text: str) -> str:
    """``text`` with any NUL character replaced (U+FFFD), as every database stores it."""
    return text.replace(NUL, "\ufffd") if NUL in text else text


def _storable(outcome: Outcome) -> Outcome:
    text = (outcome.error, outcome.external_id, outcome.output)
    if not any(NUL in t for t in text):
        return outcome
    error, external_id, output = map(storable, text)
    return replace(outcome, error=error, external_id=external_id, output=output)


def _said_something(outcome: Outcome) -> bool:
    return bool(outcome.external_id or outcome.output) or outcome.response_status is not None


# -- outcomes reported from the worker side, by occurrence key ---------------------------

# A report changes these runs: not yet ended, and not skipped or waiting (buffered).
REPORTABLE = (Run.Status.PENDING, Run.Status.RUNNING, Run.Status.DISPATCHED)


def record_started(
    schedule_id: int, scheduled_for: datetime, *, outcome_due_by: datetime, using: str
) -> int:
    """A worker started the run: it is running, no longer leased to a scheduler (which
    would hand it off again), and counts as in progress until ``outcome_due_by``."""
    return (
        Run.objects.using(using)
        .filter(
            schedule_id=schedule_id,
            scheduled_for=scheduled_for,
            status__in=(Run.Status.PENDING, Run.Status.DISPATCHED),
        )
        .update(status=Run.Status.RUNNING, lease_expires_at=None, outcome_due_by=outcome_due_by)
    )


def record_reported_end(
    schedule_id: int, scheduled_for: datetime, *, succeeded: bool, error: str, now: datetime,
    using: str,
) -> bool:  # fmt: skip
    """A worker finished the run; whether this report ended it (a second report of the
    same end, or one for a run that is not awaited, changes nothing)."""
    return bool(
        Run.objects.using(using)
        .filter(schedule_id=schedule_id, scheduled_for=scheduled_for, status__in=REPORTABLE)
        .update(
            status=Run.Status.SUCCEEDED if succeeded else Run.Status.FAILED,
            error="" if succeeded else storable(error),
            finished_at=now,
            lease_expires_at=None,
            dispatched_at=Coalesce("dispatched_at", Value(now)),
            # A success ends the wait for one; a failure leaves it for the check to raise.
            **({"alert_at": None} if succeeded else {}),
        )
    )


def release_buffered(schedule_ids: Collection[int] | None, *, now: datetime, using: str) -> int:
    """Queue the buffered runs of schedules with no run in progress at ``now`` (of
    ``schedule_ids``, or of all); any scheduler's next take-over dispatches them. Returns
    how many."""
    runs = Run.objects.using(using)
    waiting = runs.filter(status=Run.Status.BUFFERED)
    if schedule_ids is not None:
        if not schedule_ids:
            return 0
        waiting = waiting.filter(schedule_id__in=json_ids(sorted(schedule_ids), using))
    # Read first (the buffered runs' own index; usually none), then write those found, by
    # id and bounded by their nominal times: an UPDATE that finds its rows itself would lock
    # every partition of a partitioned ledger for writing, the dropped day's included.
    found = list(waiting.values_list("pk", "scheduled_for"))
    if not found:
        return 0
    waiting = runs.within(Span.of(at for _pk, at in found)).filter(
        pk__in=json_ids([pk for pk, _at in found], using), status=Run.Status.BUFFERED
    )
    busy = runs.in_progress(now).exclude(status=Run.Status.BUFFERED).values("schedule_id")
    return waiting.exclude(schedule_id__in=busy).update(
        status=Run.Status.PENDING,
        attempts=0,
        claim_token="",  # queued: held by no process (the claim that buffered it is over)
        lease_expires_at=F("scheduled_for"),  # already expired: any scheduler takes it
    )
