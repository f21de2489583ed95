"""How healthy the scheduling is, as a whole: the picture (``cluster_status``) that
``scheduler_status``, the API and the operations page show, and the problems and warnings
it finds in it (stable codes, with what to do).

The parts it puts together have modules of their own: the due index's health and the drift
check in ``index_health``, the dispatchers' waiting runs in ``dispatcher_health``, the
schedulers' heartbeats in ``heartbeat``. Their public names are importable from here too,
where they were before the split.

Under a ``scope`` (``models/scopes.py``) the picture counts and names the scope's schedules only,
and leaves out (None, empty) what only the whole fleet has: the index's entries, the rows of
the last rebuild, the schedulers' counters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import router

from django_schedulinator import timing
from django_schedulinator.conf import app_settings
from django_schedulinator.index.due import DueIndex, get_index
from django_schedulinator.management import run_command
from django_schedulinator.models.scopes import Scope, schedules_in
from django_schedulinator.operations import outbox
from django_schedulinator.operations.dispatcher_health import DispatcherStatus, dispatcher_status
from django_schedulinator.operations.heartbeat import Heartbeat, alive
from django_schedulinator.operations.index_health import (
    EVICTING_POLICIES,
    DriftReport,
    IndexStatus,
    check_drift,
    eviction_risk,
    index_status,
    record_drift,
)

# The names of before the split, still importable from here (docs/reliability.md imports
# check_drift from this module).
__all__ = [
    "AUTO_PAUSED_LISTED",
    "DEFAULT_MAX_LAG_SECONDS",
    "EVICTING_POLICIES",
    "LISTED_IDS",
    "AutoPaused",
    "ClusterStatus",
    "DispatcherStatus",
    "DriftReport",
    "Finding",
    "IndexStatus",
    "check_drift",
    "cluster_status",
    "dispatcher_status",
    "eviction_risk",
    "index_status",
    "record_drift",
    "schedulers_as_dicts",
]

DEFAULT_MAX_LAG_SECONDS = 60.0
AUTO_PAUSED_LISTED = 20  # the most recently auto-paused schedules named; all are counted
LISTED_IDS = 10  # schedule ids named in one message


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem (the scheduling is unhealthy) or a warning: a stable code and what it means
    for the operator, with what to do."""

    code: str
    message: str

    def __str__(self) -> str:
        return self.message

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class AutoPaused:
    """A schedule the scheduler paused after ``pause_after_failures`` failures in a row."""

    id: int
    name: str
    paused_at: datetime | None
    failure_streak: int


@dataclass(slots=True)
class ClusterStatus:
    """Everything ``scheduler_status`` reports, read in one go (a few queries and Redis
    calls, whatever the size). Unhealthy when it has a problem; warnings do not count."""

    checked_at: datetime  # Redis time
    schedulers: list[Heartbeat]  # alive, newest beat first
    index: IndexStatus
    dispatchers: list[DispatcherStatus]
    auto_paused: list[AutoPaused]  # the most recently paused, at most AUTO_PAUSED_LISTED
    auto_paused_count: int
    max_lag_seconds: float
    pass_stale_seconds: float
    problems: list[Finding]
    warnings: list[Finding]
    # Missed runs waiting in the alerts' outbox after their notifier refused them, and the
    # last error (the warning "alerts-undelivered" says so).
    alerts_failing: int = 0
    alerts_error: str = ""

    @property
    def healthy(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        """As JSON types, with the keys docs/operations.md documents (stable)."""
        return {
            "healthy": self.healthy,
            "checked_at": self.checked_at.isoformat(),
            "problems": [p.as_dict() for p in self.problems],
            "warnings": [w.as_dict() for w in self.warnings],
            "max_lag_seconds": self.max_lag_seconds,
            "pass_stale_seconds": self.pass_stale_seconds,
            "schedulers": schedulers_as_dicts(
                self.schedulers, self.checked_at, scoped=self.index.scoped
            ),
            "index": self.index.as_dict(),
            "dispatchers": [
                {
                    "alias": d.alias,
                    "backend": d.backend,
                    "reports_outcomes": d.reports_outcomes,
                    "awaiting": d.awaiting,
                    "past_deadline": d.past_deadline,
                    "retrying": d.retrying,
                }
                for d in self.dispatchers
            ],
            "auto_paused": {
                "count": self.auto_paused_count,
                "schedules": [
                    {
                        "id": a.id,
                        "name": a.name,
                        "paused_at": None if a.paused_at is None else a.paused_at.isoformat(),
                        "failure_streak": a.failure_streak,
                    }
                    for a in self.auto_paused
                ],
            },
        }


def cluster_status(
    index: DueIndex | None = None,
    *,
    drift: bool = True,
    max_lag: float | None = None,
    using: str | None = None,
    scope: Scope = None,
) -> ClusterStatus:
    """The schedulers alive (heartbeats), the index's health and drift (unless ``drift`` is
    false), the oldest due entry's lag (a problem past ``max_lag`` seconds, default
    DEFAULT_MAX_LAG_SECONDS), the dispatchers' waiting runs and the auto-paused schedules,
    with the problems and warnings they make; under a ``scope``, of its schedules. Raises
    what Redis or the database raise when they cannot be reached."""
    from django_schedulinator.models import Schedule
    from django_schedulinator.outcomes import AUTO_PAUSE_NOTE

    index = index or get_index()
    db = using or router.db_for_write(Schedule)
    schedulers = alive(index)
    now = timing.from_ms(index.now_ms())
    status = index_status(index, drift=drift, using=db, scope=scope)
    dispatchers = dispatcher_status(now, using=db, scope=scope)
    # Paused by the scheduler and not touched since: a resume clears the note, a pause by
    # someone else replaces it.
    paused = schedules_in(scope, db).filter(enabled=False, pause_note=AUTO_PAUSE_NOTE)
    listed = [
        AutoPaused(*row)
        for row in paused.order_by("-paused_at", "-pk").values_list(
            "pk", "name", "paused_at", "failure_streak"
        )[:AUTO_PAUSED_LISTED]
    ]
    report = ClusterStatus(
        checked_at=now,
        schedulers=schedulers,
        index=status,
        dispatchers=dispatchers,
        auto_paused=listed,
        auto_paused_count=len(listed) if len(listed) < AUTO_PAUSED_LISTED else paused.count(),
        max_lag_seconds=DEFAULT_MAX_LAG_SECONDS if max_lag is None else max_lag,
        pass_stale_seconds=app_settings.PASS_STALE_SECONDS,
        problems=[],
        warnings=[],
    )
    report.alerts_failing, report.alerts_error = outbox.failing(using=db)
    report.problems, report.warnings = _problems(report), _warnings(report)
    return report


def _problems(report: ClusterStatus) -> list[Finding]:
    status, found = report.index, []
    running = [beat for beat in report.schedulers if not beat.stopping]
    if not running and (status.indexable or status.runs_in_flight):
        due_now = "" if status.due_now is None else f" ({status.due_now} due now)"
        found.append(
            Finding(
                "no-scheduler",
                f"No scheduler is running (none has a heartbeat in Redis) while "
                f"{status.indexable} schedule(s) wait to fire{due_now} and "
                f"{status.runs_in_flight} run(s) are in flight: nothing fires until one runs. "
                f"Start {run_command('run_scheduler')}.",
            )
        )
    for beat in running:
        if beat.healthy(report.checked_at):
            continue
        since = beat.last_pass_at or beat.started_at
        age = (report.checked_at - since).total_seconds()
        what = "completed a pass" if beat.last_pass_at else "completed a pass since it started"
        why = (
            f"its passes fail: {beat.last_error}"
            if beat.last_error
            else "its loop is stuck in a call, or the process is stopped (SIGSTOP, a frozen "
            "container)"
        )
        found.append(
            Finding(
                "scheduler-stale",
                f"Scheduler {beat.id} (host {beat.host}, pid {beat.pid}) has not {what} for "
                f"{age:.0f} s (PASS_STALE_SECONDS is {report.pass_stale_seconds:g}): {why}.",
            )
        )
    if status.other_layout is not None:
        found.append(
            Finding(
                "index-layout",
                f"The due index was built for {status.other_layout} shard(s), and "
                f"INDEX_SHARDS is {status.shard_count}: schedulers with INDEX_SHARDS "
                f"{status.shard_count} claim nothing until it is rebuilt. Give every process "
                f"the same INDEX_SHARDS, then run {run_command('rebuild_due_index')}.",
            )
        )
    elif status.last_rebuild is None and status.indexable:
        running_now = "; a rebuild is running now" if status.rebuild_running else ""
        missing = [str(row["shard"]) for row in status.shards if not row["built"]]
        which = (
            f"Shard(s) {', '.join(missing)} of the due index are not built (their build "
            f"markers are missing), so nothing fires until they are"
            if status.shard_count > 1 and missing
            else "The due index is not built (its build marker is missing), so nothing fires "
            "until it is"
        )
        found.append(
            Finding(
                "index-not-built",
                f"{which}{running_now}. A running scheduler builds it at its next pass; or run "
                f"{run_command('rebuild_due_index')}.",
            )
        )
    lag = status.oldest_due_lag_seconds
    if lag is not None and lag > report.max_lag_seconds:
        oldest = status.oldest_due_schedule
        of = "" if oldest is None else f" (schedule {oldest})"  # None: out of the scope
        found.append(
            Finding(
                "due-lag",
                f"The oldest due entry{of} is {lag:.1f} s "
                f"late, more than the {report.max_lag_seconds:g} s allowed: the schedulers are "
                f"down, stuck, or cannot keep up.",
            )
        )
    if status.drift is not None and not status.drift.ok:
        late = status.drift.late_or_missing
        more = " ..." if len(late) > LISTED_IDS else ""
        found.append(
            Finding(
                "drift",
                f"Of {status.drift.sampled} schedules sampled, {len(late)} have an index entry "
                f"later than their row, or none (ids {late[:LISTED_IDS]}{more}): they fire late "
                f"or never until the schedulers' reconcile (rows changed recently) or "
                f"{run_command('rebuild_due_index')} fixes them.",
            )
        )
    return found


def _warnings(report: ClusterStatus) -> list[Finding]:
    found = []
    for d in report.dispatchers:
        if d.reports_outcomes is None:
            found.append(
                Finding(
                    "dispatcher-unavailable",
                    f"The dispatcher {d.alias!r} cannot be built, so its runs fail: {d.backend}",
                )
            )
        if d.past_deadline:
            found.append(
                Finding(
                    "outcome-overdue",
                    f"{d.past_deadline} run(s) handed to the dispatcher {d.alias!r} were never "
                    f"reported within its OUTCOME_TIMEOUT_SECONDS: do its workers report "
                    f"outcomes (is the hook installed), and do they run?",
                )
            )
    if report.auto_paused_count:
        named = report.auto_paused[:LISTED_IDS]
        names = ", ".join(repr(a.name) for a in named)
        more = ", ..." if report.auto_paused_count > len(named) else ""
        found.append(
            Finding(
                "auto-paused",
                f"{report.auto_paused_count} schedule(s) were paused by the scheduler after "
                f"failing pause_after_failures times in a row ({names}{more}): fix the cause, "
                f"then resume them.",
            )
        )
    if report.alerts_failing:
        found.append(
            Finding(
                "alerts-undelivered",
                f"{report.alerts_failing} alert(s) (missed or failed runs) wait in the "
                f"alerts' outbox: their notifier refused them (last error: "
                f"{report.alerts_error[:300]}). They go again after a back-off, until it "
                f"accepts them: fix what the error names (NOTIFY, the webhook target, the "
                f"mail server).",
            )
        )
    if report.index.eviction_warning:
        found.append(Finding("eviction-risk", report.index.eviction_warning))
    ids = [beat.id for beat in report.schedulers]
    for shared in sorted({i for i in ids if ids.count(i) > 1}):
        found.append(
            Finding(
                "shared-worker-id",
                f"{ids.count(shared)} schedulers run with the worker id {shared!r}: their runs "
                f"and logs cannot be told apart. Give each its own --worker-id (or leave the "
                f"default, host:pid).",
            )
        )
    return found


def schedulers_as_dicts(
    beats: list[Heartbeat], now: datetime, *, scoped: bool
) -> list[dict[str, Any]]:
    """The heartbeats as the API shows them at ``now``; under a scope without their
    counters, which count the occurrences of every schedule."""
    found = [beat.status_dict(now) for beat in beats]
    if scoped:
        for record in found:
            record["counters"] = {}
    return found
