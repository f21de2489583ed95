"""How healthy the scheduling is: the due index against the rows, Redis's eviction policy,
the dispatchers' waiting runs, and the whole picture (``cluster_status``) that
``scheduler_status``, the API and the operations page show.

The drift check is cheap enough to run every few minutes on a million schedules: two counts
and a random sample compared in both directions (entries against their rows, rows against
their entries). What it flags is re-read once before it is reported, so a row that merely
fired between the two reads is not called drift.

Each report takes a ``scope`` (``scopes.py``): the schedules its reader may see. Under one,
it counts and names those only, and leaves out (None) the figures only the whole fleet has:
the index's entries (due, due now, in flight, per shard), the rows of the last rebuild, the
schedulers' counters.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from django.db import router
from django.db.models import Max, Min

from django_schedulinator import timing
from django_schedulinator.conf import app_settings
from django_schedulinator.index.due import DueIndex, get_index
from django_schedulinator.index.sync import IN_INDEX, change_for_row
from django_schedulinator.management import run_command
from django_schedulinator.operations import outbox
from django_schedulinator.operations.heartbeat import Heartbeat, alive
from django_schedulinator.scopes import Scope, runs_in, schedules_in, shown

# Redis policies that may evict keys without a TTL, such as every key of the index.
EVICTING_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random")


@dataclass(slots=True)
class DriftReport:
    rows_indexable: int = 0  # enabled rows with a next run: each calls for one entry
    entries_due: int | None = 0  # None under a scope: they count every schedule
    entries_in_flight: int | None = 0
    sampled: int = 0  # entries and rows compared
    # Dangerous: the row is due no later than its entry says, or has no entry at all; it
    # would fire late or never until reconcile or a rebuild fixes it.
    late_or_missing: list[int] = field(default_factory=list)
    # Harmless: an entry earlier than its row, or of a row with nothing to run; a claim
    # re-checks the row and repairs or drops it.
    early_or_orphaned: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.late_or_missing

    def by_shard(self, shards: int) -> dict[int, tuple[int, int]]:
        """Shard -> (late or missing, early or orphaned), for every shard of ``shards``."""
        found = {k: [0, 0] for k in range(shards)}
        for column, ids in enumerate((self.late_or_missing, self.early_or_orphaned)):
            for sid in ids:
                found[sid % shards][column] += 1
        return {k: (late, early) for k, (late, early) in found.items()}

    def summary(self) -> str:
        entries = (
            ""
            if self.entries_due is None
            else f", {self.entries_due} entries due and {self.entries_in_flight} in flight"
        )
        return (
            f"{self.rows_indexable} schedules to index{entries}; of {self.sampled} sampled, "
            f"{len(self.late_or_missing)} late or missing, "
            f"{len(self.early_or_orphaned)} early or orphaned"
        )

    def as_dict(self) -> dict[str, Any]:
        """What the API's index health and ``scheduler_status --json`` show of it."""
        return {
            "ok": self.ok,
            "summary": self.summary(),
            "rows_indexable": self.rows_indexable,
            "sampled": self.sampled,
            "late_or_missing": list(self.late_or_missing),
            "early_or_orphaned": list(self.early_or_orphaned),
        }


def check_drift(
    index: DueIndex | None = None,
    *,
    sample: int | None = None,
    using: str | None = None,
    scope: Scope = None,
) -> DriftReport:
    """Compare the index with the rows: counts, and a random sample in both directions
    (entries from every shard, ``sample`` in all, and rows from a random point). Under a
    ``scope``, of its schedules: its rows, and the entries picked that are theirs."""
    from django_schedulinator.models import Schedule

    index = index or get_index()
    size = sample or app_settings.DRIFT_SAMPLE_SIZE
    db = using or router.db_for_write(Schedule)
    indexable = schedules_in(scope, db).filter(IN_INDEX)
    report = DriftReport(rows_indexable=indexable.count())
    if scope is None:
        report.entries_due, report.entries_in_flight = index.counts()
    else:
        report.entries_due = report.entries_in_flight = None

    # Entries picked at random, and rows from a random point of the primary key range (an
    # index range scan, not ORDER BY random()).
    ids = set(shown(scope, sorted(index.random_entries(size)), db))
    bounds = indexable.aggregate(low=Min("pk"), high=Max("pk"))
    if bounds["low"] is not None:
        start = random.randint(bounds["low"], bounds["high"])
        ordered = indexable.order_by("pk").values_list("pk", flat=True)
        picked = list(ordered.filter(pk__gte=start)[:size])
        if len(picked) < size:  # wrap around: a small table is sampled whole
            picked += ordered.filter(pk__lt=start)[: size - len(picked)]
        ids.update(picked)
    report.sampled = len(ids)
    late, early = _compare(index, db, ids)
    if late or early:  # re-read: a schedule that fired between the two reads is not drift
        late, early = _compare(index, db, {*late, *early})
        report.late_or_missing, report.early_or_orphaned = sorted(late), sorted(early)
    return report


def record_drift(index: DueIndex, report: DriftReport) -> None:
    """Keep what a drift check found next to the index, for every process to read (the
    metrics): one scheduler checks per period, all of them report it."""
    index.control.set_drift_record(
        {
            "late_or_missing": len(report.late_or_missing),
            "early_or_orphaned": len(report.early_or_orphaned),
            # Shard (as a string: a JSON key) -> [late or missing, early or orphaned].
            "by_shard": {
                str(k): list(counts) for k, counts in report.by_shard(index.shard_count).items()
            },
            "sampled": report.sampled,
            "checked_at_ms": index.now_ms(),
        }
    )


def _compare(index: DueIndex, db: str, ids: set[int]) -> tuple[list[int], list[int]]:
    from django_schedulinator.models import Schedule

    if not ids:
        return [], []
    ordered = sorted(ids)
    # The score each row calls for, by the rule the sync layer writes it with.
    rows = {
        pk: change_for_row(pk, revision, True, next_run_at, due_at, jitter).score_ms
        for pk, revision, next_run_at, due_at, jitter in Schedule.objects.using(db)
        .filter(IN_INDEX, pk__in=ordered)
        .values_list("pk", "revision", "next_run_at", "due_at", "jitter")
    }
    scores = index.scores(ordered)
    in_flight = index.inflight_ids()
    late: list[int] = []
    early: list[int] = []
    for sid in ordered:
        row, score = rows.get(sid), scores[sid]
        if row is None:
            if score is not None:
                early.append(sid)
        elif score is None:
            if sid not in in_flight:
                late.append(sid)
        else:
            due_ms = row
            if score > due_ms:
                late.append(sid)
            elif score < due_ms:
                early.append(sid)
    return late, early


@dataclass(slots=True)
class IndexStatus:
    """What the operations page and the API's index health show, read in one go."""

    schedules: int  # rows
    enabled: int
    indexable: int  # enabled rows with a next run: each calls for one entry
    # The index's own counts: None under a scope (they count every schedule).
    entries_due: int | None  # entries in the due set, due or not
    due_now: int | None  # entries whose time has come (Redis TIME), not claimed yet
    in_flight: int | None  # entries claimed by a scheduler and not yet written back
    oldest_due_lag_seconds: float | None  # how late the earliest unclaimed due entry is
    oldest_due_schedule: int | None  # the schedule of that entry (None: out of the scope)
    runs_in_flight: int  # runs pending or running in the ledger
    last_rebuild: dict[str, Any] | None  # the marker: built_at, rows, by
    rebuild_running: bool
    drift: DriftReport | None
    eviction_warning: str | None
    checked_at: str
    # INDEX_SHARDS here, and each shard's figures: shard, built, entries_due, due_now,
    # in_flight, oldest_due_lag_seconds (the totals above add them up).
    shard_count: int = 1
    shards: list[dict[str, Any]] = field(default_factory=list)
    # The shard count the index was built for, when it is not INDEX_SHARDS (nothing fires).
    other_layout: int | None = None
    # Counted for the schedules of a scope only (see the module's docstring).
    scoped: bool = False

    def as_dict(self) -> dict[str, Any]:
        """As JSON types: the API's index health, and the index in ``scheduler_status``."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "drift"}
        data["drift"] = None if self.drift is None else self.drift.as_dict()
        return data


def index_status(
    index: DueIndex | None = None,
    *,
    drift: bool = True,
    using: str | None = None,
    scope: Scope = None,
) -> IndexStatus:
    """Counts from the rows and the index, the lag of the earliest due entry, the last
    rebuild and (unless ``drift`` is false) a drift check. A few queries, whatever the size.
    Under a ``scope``, of its schedules (see the module's docstring)."""
    from django.db.models import Count, Q
    from django.utils import timezone

    from django_schedulinator.models import Run, Schedule

    index = index or get_index()
    db = using or router.db_for_write(Schedule)
    counts = schedules_in(scope, db).aggregate(
        all_rows=Count("pk"),
        enabled_rows=Count("pk", filter=Q(enabled=True)),
        indexable_rows=Count("pk", filter=IN_INDEX),
    )
    now_ms = index.now_ms()  # shard 0's clock, the fleet's
    whole = scope is None  # the index's entries count every schedule
    shards = [
        {
            "shard": row["shard"],
            "built": row["built"],
            "entries_due": row["entries_due"] if whole else None,
            "due_now": row["due_now"] if whole else None,
            "in_flight": row["in_flight"] if whole else None,
            "oldest_due_lag_seconds": _lag(row["earliest_ms"], now_ms),
        }
        for row in index.shard_status(now_ms)
    ]
    heads = [row["oldest_due_lag_seconds"] for row in shards]
    lag = max((h for h in heads if h is not None), default=None)
    oldest = None
    if lag is not None:
        head = index.earliest()
        oldest = next(iter(shown(scope, [head[0]], db)), None) if head is not None else None
    built = index.built_info()
    if built and not whole:
        built = {k: v for k, v in built.items() if k != "rows"}  # every schedule's
    return IndexStatus(
        schedules=counts["all_rows"],
        enabled=counts["enabled_rows"],
        indexable=counts["indexable_rows"],
        entries_due=_total(shards, "entries_due"),
        due_now=_total(shards, "due_now"),
        in_flight=_total(shards, "in_flight"),
        oldest_due_lag_seconds=lag,
        oldest_due_schedule=oldest,
        runs_in_flight=runs_in(scope, db).filter(status__in=Run.UNFINISHED).count(),
        last_rebuild=built,
        rebuild_running=index.control.rebuild_running(),
        drift=check_drift(index, using=db, scope=scope) if drift else None,
        eviction_warning=eviction_risk(index.client),
        checked_at=timezone.now().isoformat(),
        shard_count=index.shard_count,
        shards=shards,
        other_layout=index.other_layout(),
        scoped=not whole,
    )


def _total(shards: list[dict[str, Any]], key: str) -> int | None:
    """The shards' ``key`` added up; None when they do not count it (under a scope)."""
    values = [row[key] for row in shards]
    return None if None in values else sum(values)


def _lag(earliest_ms: int | None, now_ms: int) -> float | None:
    """How late an earliest entry is at ``now_ms``, in seconds; None if it is not due."""
    return None if earliest_ms is None or earliest_ms > now_ms else (now_ms - earliest_ms) / 1000


def eviction_risk(client: Any) -> str | None:
    """A warning when Redis's maxmemory-policy may evict the index's keys, else None.

    Read from INFO (allowed on managed Redis services where CONFIG GET is not).
    """
    info = client.info("memory")
    policy = str(info.get("maxmemory_policy", ""))
    if policy not in EVICTING_POLICIES:
        return None
    limit = int(info.get("maxmemory", 0) or 0)
    limit_text = f"maxmemory is {limit} bytes" if limit else "maxmemory is not set yet"
    return (
        f"Redis maxmemory-policy is {policy!r} ({limit_text}): under memory pressure Redis "
        "may evict keys of the due index, and schedules then fire late until reconcile or a "
        "rebuild restores them. Use 'noeviction' or a volatile-* policy, or give the index a "
        "Redis of its own."
    )


@dataclass(frozen=True, slots=True)
class DispatcherStatus:
    """One dispatcher alias: what it is, and its runs that wait on someone else."""

    alias: str
    backend: str  # the class name, or why it cannot be built
    reports_outcomes: bool | None  # None: it cannot be built
    awaiting: int  # handed off, their outcome still expected
    past_deadline: int  # handed off, never reported within OUTCOME_TIMEOUT_SECONDS
    retrying: int  # hand-offs that failed, waiting for their backoff to end


def dispatcher_status(
    now: Any, using: str | None = None, *, scope: Scope = None
) -> list[DispatcherStatus]:
    """Every configured alias, and every alias runs still name: three counts per alias from
    the runs in flight (the partial indexes of unfinished and awaited runs serve them), of
    the schedules of ``scope``."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db.models import Count, Q

    from django_schedulinator.dispatch import dispatchers
    from django_schedulinator.models import Run

    db = using or router.db_for_write(Run)
    counts: dict[str, dict[str, Any]] = {
        row["dispatcher"]: dict(row)
        for row in runs_in(scope, db)
        .filter(
            Q(status=Run.Status.DISPATCHED, outcome_due_by__isnull=False)
            | Q(status=Run.Status.PENDING, claim_token="", attempts__gt=0)
        )
        .exclude(status=Run.Status.PENDING, error="")
        .values("dispatcher")
        .annotate(
            awaiting=Count("pk", filter=Q(status=Run.Status.DISPATCHED, outcome_due_by__gt=now)),
            past_deadline=Count(
                "pk", filter=Q(status=Run.Status.DISPATCHED, outcome_due_by__lte=now)
            ),
            retrying=Count("pk", filter=Q(status=Run.Status.PENDING)),
        )
    }
    rows = []
    for alias in sorted(set(dispatchers.aliases()) | set(counts)):
        try:
            dispatcher = dispatchers[alias]
            backend, reports = type(dispatcher).__name__, dispatcher.reports_outcomes
        except ImproperlyConfigured as exc:
            backend, reports = str(exc), None
        found = counts.get(alias, {})
        rows.append(
            DispatcherStatus(
                alias,
                backend,
                reports,
                found.get("awaiting", 0),
                found.get("past_deadline", 0),
                found.get("retrying", 0),
            )
        )
    return rows


# -- the whole picture ----------------------------------------------------------------------

# How late the oldest due entry may be before the schedulers count as unable to keep up.
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
                f"{report.alerts_failing} missed run(s) wait in the alerts' outbox: their "
                f"notifier refused them (last error: {report.alerts_error[:300]}). They go "
                f"again after a back-off, until it accepts them: fix what the error names "
                f"(NOTIFY, the webhook target, the mail server).",
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
