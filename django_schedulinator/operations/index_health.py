"""The due index's health: the index against the rows (the drift check), its counts and
the lag of its earliest due entry (``index_status``), and Redis's eviction policy.

The drift check is cheap enough to run every few minutes on a million schedules: two counts
and a random sample compared in both directions (entries against their rows, rows against
their entries). What it flags is re-read once before it is reported, so a row that merely
fired between the two reads is not called drift.

Each report takes a ``scope`` (``models/scopes.py``): the schedules its reader may see. Under one,
it counts and names those only, and leaves out (None) the figures only the whole fleet has:
the index's entries (due, due now, in flight, per shard), the rows of the last rebuild.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields
from typing import Any

from django.db import router
from django.db.models import Max, Min

from django_schedulinator.conf import app_settings
from django_schedulinator.index.due import DueIndex, get_index
from django_schedulinator.index.sync import IN_INDEX, change_for_row
from django_schedulinator.models.scopes import Scope, runs_in, schedules_in, shown

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
