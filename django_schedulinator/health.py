"""How far the due index is from the rows, and whether Redis may throw it away.

The drift check is cheap enough to run every few minutes on a million schedules: two counts
and a random sample compared in both directions (entries against their rows, rows against
their entries). What it flags is re-read once before it is reported, so a row that merely
fired between the two reads is not called drift.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from django.db import router
from django.db.models import Max, Min

from .conf import app_settings
from .index import DueIndex, get_index
from .sync import IN_INDEX, change_for_row

# Redis policies that may evict keys without a TTL, such as every key of the index.
EVICTING_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random")


@dataclass(slots=True)
class DriftReport:
    rows_indexable: int = 0  # enabled rows with a next run: each calls for one entry
    entries_due: int = 0
    entries_in_flight: int = 0
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

    def summary(self) -> str:
        return (
            f"{self.rows_indexable} schedules to index, {self.entries_due} entries due and "
            f"{self.entries_in_flight} in flight; of {self.sampled} sampled, "
            f"{len(self.late_or_missing)} late or missing, "
            f"{len(self.early_or_orphaned)} early or orphaned"
        )


def check_drift(
    index: DueIndex | None = None, *, sample: int | None = None, using: str | None = None
) -> DriftReport:
    """Compare the index with the rows: counts, and a random sample in both directions."""
    from .models import Schedule

    index = index or get_index()
    size = sample or app_settings.DRIFT_SAMPLE_SIZE
    db = using or router.db_for_write(Schedule)
    indexable = Schedule.objects.using(db).filter(IN_INDEX)
    report = DriftReport(rows_indexable=indexable.count())
    report.entries_due, report.entries_in_flight = index.counts()

    # Entries picked at random, and rows from a random point of the primary key range (an
    # index range scan, not ORDER BY random()).
    ids = set(index.random_entries(size))
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
    index.set_drift_record(
        {
            "late_or_missing": len(report.late_or_missing),
            "early_or_orphaned": len(report.early_or_orphaned),
            "sampled": report.sampled,
            "checked_at_ms": index.now_ms(),
        }
    )


def _compare(index: DueIndex, db: str, ids: set[int]) -> tuple[list[int], list[int]]:
    from .models import Schedule

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
    entries_due: int  # entries in the due set, due or not
    due_now: int  # entries whose time has come (Redis TIME), not claimed yet
    in_flight: int  # entries claimed by a scheduler and not yet written back
    oldest_due_lag_seconds: float | None  # how late the earliest unclaimed due entry is
    runs_in_flight: int  # runs pending or running in the ledger
    last_rebuild: dict[str, Any] | None  # the marker: built_at, rows, by
    rebuild_running: bool
    drift: DriftReport | None
    eviction_warning: str | None
    checked_at: str


def index_status(
    index: DueIndex | None = None, *, drift: bool = True, using: str | None = None
) -> IndexStatus:
    """Counts from the rows and the index, the lag of the earliest due entry, the last
    rebuild and (unless ``drift`` is false) a drift check. A few queries, whatever the size."""
    from django.db.models import Count, Q
    from django.utils import timezone

    from .models import Run, Schedule

    index = index or get_index()
    db = using or router.db_for_write(Schedule)
    counts = Schedule.objects.using(db).aggregate(
        all_rows=Count("pk"),
        enabled_rows=Count("pk", filter=Q(enabled=True)),
        indexable_rows=Count("pk", filter=IN_INDEX),
    )
    entries_due, in_flight = index.counts()
    due_now, earliest_ms, now_ms = index.due_now()
    lag = None
    if earliest_ms is not None and earliest_ms <= now_ms:
        lag = (now_ms - earliest_ms) / 1000
    return IndexStatus(
        schedules=counts["all_rows"],
        enabled=counts["enabled_rows"],
        indexable=counts["indexable_rows"],
        entries_due=entries_due,
        due_now=due_now,
        in_flight=in_flight,
        oldest_due_lag_seconds=lag,
        runs_in_flight=Run.objects.using(db).filter(status__in=Run.UNFINISHED).count(),
        last_rebuild=index.built_info(),
        rebuild_running=index.rebuild_running(),
        drift=check_drift(index, using=db) if drift else None,
        eviction_warning=eviction_risk(index.client),
        checked_at=timezone.now().isoformat(),
    )


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


def dispatcher_status(now: Any, using: str | None = None) -> list[DispatcherStatus]:
    """Every configured alias, and every alias runs still name: three counts per alias from
    the runs in flight (the partial indexes of unfinished and awaited runs serve them)."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db.models import Count, Q

    from .dispatch import dispatchers
    from .models import Run

    db = using or router.db_for_write(Run)
    counts: dict[str, dict[str, Any]] = {
        row["dispatcher"]: dict(row)
        for row in Run.objects.using(db)
        .filter(
            Q(status="dispatched", outcome_due_by__isnull=False)
            | Q(status="pending", claim_token="", attempts__gt=0)
        )
        .exclude(status="pending", error="")
        .values("dispatcher")
        .annotate(
            awaiting=Count("pk", filter=Q(status="dispatched", outcome_due_by__gt=now)),
            past_deadline=Count("pk", filter=Q(status="dispatched", outcome_due_by__lte=now)),
            retrying=Count("pk", filter=Q(status="pending")),
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
