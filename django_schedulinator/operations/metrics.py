"""Prometheus metrics of one scheduler process (the ``metrics`` extra: prometheus-client).

Each process keeps a ``CollectorRegistry`` of its own, never the library's global one: two
Workers in one process (tests, embedding) do not collide, and each scheduler on a host
serves its own port (``serve``). No series carries a process id: one info metric names the
scheduler (worker id, host, pid, version), and Prometheus's ``instance`` label tells the
scrape targets apart.

What a process keeps anyway (``claiming.Counters``, its lanes and its recorder, its last
pass) is read when scraped, by a collector: it costs the loop nothing. The loop observes only
the claim and commit times, the lateness of hand-offs and their results, and only while
metrics are on (``Worker.attach_metrics``). Cluster-wide gauges (the index, the backlog,
drift, reconcile lag, runs awaiting an outcome) take a few queries: a scrape computes them at
most every ``METRICS_CLUSTER_SECONDS``, and every scheduler reports the same values
(``max()`` them).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from django_schedulinator import __version__, timing
from django_schedulinator.conf import app_settings
from django_schedulinator.index import reconcile
from django_schedulinator.index.due import DueIndex
from django_schedulinator.operations.dispatcher_health import DispatcherStatus, dispatcher_status
from django_schedulinator.operations.observed import Observed
from django_schedulinator.operations.probes import PROBE_TIMEOUT_SECONDS, Bounded, ProbeServer

if TYPE_CHECKING:
    from django_schedulinator.dispatch.base import Occurrence, Outcome

logger = logging.getLogger("django_schedulinator.metrics")

# From nominal time to hand-off: a few milliseconds when all is well, seconds under load,
# minutes after downtime (catch-up) or behind a stuck lane.
LATENESS_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
)  # fmt: skip
# One claim script, one commit transaction: sub-millisecond to a lock wait.
DURATION_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

# The fields of claiming.Counters, as counters (``_total`` is added by the exposition).
# "skipped" is schedulinator_occurrences_skipped_total, by reason (Worker.skipped_by_reason);
# "auto_paused" is left out: the scheduler never counts it (outcomes.record pauses).
COUNTERS: dict[str, tuple[str, str]] = {
    "fired": (
        "schedulinator_occurrences_fired",
        "Occurrences handed to a dispatcher: fresh claims, and runs taken over (queued, "
        "retried, re-dispatched).",
    ),
    "claimed": ("schedulinator_entries_claimed", "Due index entries claimed."),
    "buffered": (
        "schedulinator_occurrences_buffered",
        "Occurrences held back by an overlap 'buffer' until the previous run ends.",
    ),
    "queued": (
        "schedulinator_runs_queued",
        "Runs queued in SQL (run now, backfill, a released buffer) taken and dispatched.",
    ),
    "repaired": (
        "schedulinator_repairs",
        "Stale index entries (their row said later) re-indexed at the row's time.",
    ),
    "dropped": (
        "schedulinator_entries_dropped",
        "Index entries of deleted, disabled or finished schedules, removed.",
    ),
    "lost_races": (
        "schedulinator_lost_races",
        "Due rows that another scheduler, or an edit, changed first.",
    ),
    "busy": (
        "schedulinator_rows_busy",
        "Due rows another transaction held locked: looked at again a second later.",
    ),
    "duplicates": ("schedulinator_duplicates", "Occurrences found in the ledger already."),
    "invalid": (
        "schedulinator_invalid_schedules",
        "Claims of schedules whose timing cannot be evaluated (looked at a minute later).",
    ),
    "leases_expired": (
        "schedulinator_lease_expiries",
        "In-flight index entries whose lease expired, returned to the due set.",
    ),
    "redispatched": (
        "schedulinator_takeovers",
        "Pending runs another scheduler left behind, taken over once their lease expired "
        "and dispatched again with the same key.",
    ),
    "retried": (
        "schedulinator_retries",
        "Failed hand-offs handed off again once their back-off ended.",
    ),
    "reconciled": (
        "schedulinator_reconciled_entries",
        "Index entries healed by reconcile (sync writes that were lost).",
    ),
    "cancelled": (
        "schedulinator_runs_cancelled",
        "Committed runs not dispatched: their schedule was deleted or paused meanwhile.",
    ),
    "lane_full": (
        "schedulinator_lane_full_runs",
        "Runs left pending because their dispatcher's lane was stuck (a take-over sends them).",
    ),
    "failed": (
        "schedulinator_runs_failed",
        "Runs this scheduler recorded as failed: the task raised or timed out where its "
        "dispatcher runs it, or its hand-offs were given up on (runs a worker reports are "
        "recorded where it runs).",
    ),
    "missed": (
        "schedulinator_occurrences_missed",
        "Occurrences with no successful run within their schedule's grace, raised by this "
        "scheduler's missed-run checks (each by one scheduler of the fleet).",
    ),
    "pruned": (
        "schedulinator_runs_pruned",
        "Runs this scheduler deleted past their retention (RUN_RETENTION_SECONDS).",
    ),
}


class Metrics:
    """One scheduler's registry, and what its loop observes into it."""

    def __init__(self, worker: Observed) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        # The process's own (CPU, memory, file descriptors, GC, Python version), as a
        # Python exporter usually has them, in this registry.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            registry.register(collector)
        Info(
            "schedulinator_scheduler",
            "This scheduler: its worker id, host, process id and the app's version.",
            registry=registry,
        ).info(
            {
                "worker_id": worker.worker_id,
                "host": socket.gethostname(),
                "pid": str(os.getpid()),
                "version": __version__,
            }
        )
        self.lateness = Histogram(
            "schedulinator_lateness_seconds",
            "From an occurrence's nominal time to its first hand-off to its dispatcher "
            "(fresh claims; jitter included).",
            ["dispatcher"],
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.claim_seconds = Histogram(
            "schedulinator_claim_duration_seconds",
            "The claim script: due entries moved to the in-flight set (every pass).",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.commit_seconds = Histogram(
            "schedulinator_commit_duration_seconds",
            "The commit of a pass that claimed entries: the conditional advance and the "
            "runs in one transaction, then the index write.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.handoffs = Counter(
            "schedulinator_handoffs",
            "Hand-offs recorded, by what the dispatcher said: dispatched (accepted by the "
            "system it hands to), succeeded or failed (it ran the task), retry (to be "
            "handed off again after a back-off).",
            ["dispatcher", "result"],
            registry=registry,
        )
        self.outcomes = Counter(
            "schedulinator_outcomes",
            "Runs this scheduler recorded as ended, by result (hand-offs given up on "
            "included); outcomes that workers report are recorded where they run.",
            ["dispatcher", "result"],
            registry=registry,
        )
        registry.register(WorkerCollector(worker))
        registry.register(ClusterCollector(worker.index))
        # Redis TIME at the last claim, and time.monotonic() then: "now" on Redis's clock
        # for the lateness, without a Redis call per hand-off.
        self._redis_clock: tuple[int, float] | None = None

    # -- the hot path (only while metrics are on) ----------------------------------------

    def claimed(self, now_ms: int, seconds: float) -> None:
        self._redis_clock = (now_ms, time.monotonic())
        self.claim_seconds.observe(seconds)

    def committed(self, seconds: float) -> None:
        self.commit_seconds.observe(seconds)

    def handing_off(self, alias: str, occurrences: Sequence[Occurrence]) -> None:
        clock = self._redis_clock
        if clock is None:  # no claim yet (run_pass called on its own): this host's clock
            now_ms = time.time() * 1000
        else:
            now_ms = clock[0] + (time.monotonic() - clock[1]) * 1000
        histogram = self.lateness.labels(alias)
        for o in occurrences:
            histogram.observe(max(0.0, (now_ms - timing.to_ms(o.scheduled_for)) / 1000))

    def recorded(self, alias: str, results: Iterable[Outcome], ended: Iterable[Outcome]) -> None:
        for status, n in Tally(o.status for o in results).items():
            self.handoffs.labels(alias, status).inc(n)
        for status, n in Tally(o.status for o in ended).items():
            self.outcomes.labels(alias, status).inc(n)


class WorkerCollector(Collector):
    """What the worker keeps anyway, read at scrape time."""

    def __init__(self, worker: Observed) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        worker = self.worker
        counters = worker.counters.as_dict()
        # The loop's counters count from its start: their _created series, as the counters
        # prometheus-client keeps itself have theirs.
        created = None if worker.started_at is None else worker.started_at.timestamp()
        for name, (metric, documentation) in COUNTERS.items():
            yield CounterMetricFamily(metric, documentation, value=counters[name], created=created)
        skipped = CounterMetricFamily(
            "schedulinator_occurrences_skipped",
            "Occurrences recorded as skipped, by reason: missed or expired (catch-up), dst "
            "(a local time that does not exist), overlap.",
            labels=["reason"],
        )
        for reason, n in sorted(dict(worker.skipped_by_reason).items()):
            skipped.add_metric([reason], n, created=created)
        yield skipped
        waiting = GaugeMetricFamily(
            "schedulinator_lane_batches",
            "Batches waiting for their dispatcher in this scheduler, by dispatcher.",
            labels=["dispatcher"],
        )
        oldest = GaugeMetricFamily(
            "schedulinator_lane_oldest_seconds",
            "How long the oldest batch waiting for its dispatcher has waited (0: none).",
            labels=["dispatcher"],
        )
        for alias, (batches, age) in sorted(worker.lane_depths().items()):
            waiting.add_metric([alias], batches)
            oldest.add_metric([alias], age or 0.0)
        yield waiting
        yield oldest
        batches, outcomes, age = worker.recorder_backlog()
        yield GaugeMetricFamily(
            "schedulinator_recorder_batches",
            "Batches whose outcomes this scheduler's lanes handed to its recorder and it has "
            "not written yet.",
            value=batches,
        )
        yield GaugeMetricFamily(
            "schedulinator_recorder_outcomes",
            "Outcomes of those batches: runs whose end is not written yet.",
            value=outcomes,
        )
        yield GaugeMetricFamily(
            "schedulinator_recorder_oldest_seconds",
            "How long ago the oldest of them was handed to the recorder (0: none waits).",
            value=age or 0.0,
        )
        if worker.started_at is not None:
            yield GaugeMetricFamily(
                "schedulinator_started_timestamp_seconds",
                "When this scheduler's loop started (Unix time).",
                value=worker.started_at.timestamp(),
            )
        last_pass = worker.last_pass_at
        if last_pass is not None:
            yield GaugeMetricFamily(
                "schedulinator_last_pass_timestamp_seconds",
                "When this scheduler's loop last completed a pass (Unix time).",
                value=time.time() - (time.monotonic() - last_pass),
            )
        yield GaugeMetricFamily(
            "schedulinator_backing_off",
            "1 while the loop backs off from an outage of Redis or the database.",
            value=1 if worker.last_error else 0,
        )


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What every scheduler sees alike, read in one go."""

    built: bool
    entries: int  # the due set, due or not
    in_flight: int  # claimed, not written back yet
    due_now: int  # due at Redis TIME, not claimed: the backlog
    oldest_due_seconds: float  # how late the earliest unclaimed due entry is (0: none)
    drift: dict[str, Any] | None  # the last drift check (index_health.record_drift)
    reconcile_lag: float | None
    dispatchers: list[DispatcherStatus]
    # Each shard's: shard, built, entries_due, due_now, in_flight, earliest_ms (the totals
    # above add them up; the gauges are by shard).
    shards: list[dict[str, Any]] = field(default_factory=list)
    now_ms: int = 0


def cluster_snapshot(index: DueIndex) -> ClusterSnapshot:
    """A few Redis reads and three queries, whatever the number of schedules."""
    built = index.is_built()
    now_ms = index.now_ms()  # shard 0's clock, the fleet's
    shards = index.shard_status(now_ms)
    return ClusterSnapshot(
        built=built,
        entries=sum(row["entries_due"] for row in shards),
        in_flight=sum(row["in_flight"] for row in shards),
        due_now=sum(row["due_now"] for row in shards),
        oldest_due_seconds=max((_late(row, now_ms) for row in shards), default=0.0),
        drift=index.control.drift_record(),
        reconcile_lag=reconcile.lag(index) if built else None,
        dispatchers=dispatcher_status(timing.from_ms(now_ms)),
        shards=shards,
        now_ms=now_ms,
    )


def _late(shard: dict[str, Any], now_ms: int) -> float:
    """How late a shard's earliest entry is at ``now_ms`` (0: none is due)."""
    earliest = shard["earliest_ms"]
    return 0.0 if earliest is None or earliest > now_ms else (now_ms - earliest) / 1000


class ClusterCollector(Collector):
    """The cluster-wide gauges, computed on a scrape at most every
    ``METRICS_CLUSTER_SECONDS`` and waited for ``PROBE_TIMEOUT_SECONDS`` at most: a scrape
    while Redis or the database hangs serves the last values, and says how old they are."""

    def __init__(self, index: DueIndex) -> None:
        self._read = Bounded(lambda: cluster_snapshot(index), "schedulinator-cluster-metrics")
        self._snapshot: ClusterSnapshot | None = None
        self._taken: float | None = None  # time.monotonic()
        self._failing = False

    def snapshot(self) -> tuple[ClusterSnapshot | None, float | None]:
        """The values, and their age in seconds."""
        if self._taken is None or time.monotonic() - self._taken >= (
            app_settings.METRICS_CLUSTER_SECONDS
        ):
            try:
                self._snapshot = self._read(PROBE_TIMEOUT_SECONDS)
                self._taken = time.monotonic()
                self._failing = False
            except Exception as exc:
                if not self._failing:  # once per failure streak
                    logger.warning(
                        "Could not read the cluster-wide metrics (%s: %s); serving the last "
                        "values read, if any, until it works again.",
                        type(exc).__name__,
                        exc,
                    )
                self._failing = True
        age = None if self._taken is None else time.monotonic() - self._taken
        return self._snapshot, age

    def collect(self) -> Iterator[Metric]:
        snapshot, age = self.snapshot()
        if snapshot is None or age is None:
            return
        yield _gauge(
            "schedulinator_cluster_metrics_age_seconds",
            "How old the cluster-wide values are (they are kept METRICS_CLUSTER_SECONDS).",
            age,
        )
        # By shard (INDEX_SHARDS; one, shard "0", by default): sum() them for the index.
        shards = snapshot.shards
        by_shard = [
            ("schedulinator_index_built", "1: the due index (shard) is built.", "built"),
            ("schedulinator_index_entries", "Entries in the due index, due or not.", "entries_due"),
            (
                "schedulinator_index_due_entries",
                "Entries due now (Redis TIME) and not claimed: the backlog.",
                "due_now",
            ),
            (
                "schedulinator_index_in_flight_entries",
                "Entries claimed by a scheduler and not written back yet.",
                "in_flight",
            ),
        ]
        for name, documentation, key in by_shard:
            family = GaugeMetricFamily(name, documentation, labels=["shard"])
            for row in shards:
                family.add_metric([str(row["shard"])], float(row[key]))
            yield family
        family = GaugeMetricFamily(
            "schedulinator_index_oldest_due_seconds",
            "How late the earliest due, unclaimed entry is (0: none is due).",
            labels=["shard"],
        )
        for row in shards:
            family.add_metric([str(row["shard"])], _late(row, snapshot.now_ms))
        yield family
        if snapshot.drift is not None:
            drift = snapshot.drift
            # Records written before shards existed have no "by_shard": all is shard 0's.
            counts = drift.get("by_shard") or {
                "0": [drift.get("late_or_missing", 0), drift.get("early_or_orphaned", 0)]
            }
            for column, (name, documentation) in enumerate(
                (
                    (
                        "schedulinator_drift_late_or_missing",
                        "Schedules the last drift check found late or missing from the index.",
                    ),
                    (
                        "schedulinator_drift_early_or_orphaned",
                        "Index entries the last drift check found early or orphaned (harmless).",
                    ),
                )
            ):
                family = GaugeMetricFamily(name, documentation, labels=["shard"])
                for shard, pair in sorted(counts.items()):
                    family.add_metric([shard], float(pair[column]))
                yield family
            yield _gauge(
                "schedulinator_drift_checked_timestamp_seconds",
                "When the last drift check ran (Unix time, Redis TIME).",
                drift.get("checked_at_ms", 0) / 1000,
            )
        if snapshot.reconcile_lag is not None:
            yield _gauge(
                "schedulinator_reconcile_lag_seconds",
                "How long the oldest schedule change reconcile has not read yet has waited "
                "(0: none).",
                snapshot.reconcile_lag,
            )
        by_alias = [
            (
                "schedulinator_runs_awaiting_outcome",
                "Runs handed off whose outcome is awaited, within their outcome timeout.",
                "awaiting",
            ),
            (
                "schedulinator_runs_outcome_overdue",
                "Runs handed off whose outcome was never reported within their timeout.",
                "past_deadline",
            ),
            (
                "schedulinator_runs_retry_waiting",
                "Failed hand-offs waiting for their back-off to end.",
                "retrying",
            ),
        ]
        for name, documentation, attribute in by_alias:
            family = GaugeMetricFamily(name, documentation, labels=["dispatcher"])
            for status in snapshot.dispatchers:
                family.add_metric([status.alias], getattr(status, attribute))
            yield family


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))


class Measured(Observed, Protocol):
    """A scheduler that observes its hot path into ``Metrics`` (``Worker`` is one)."""

    def attach_metrics(self, metrics: Metrics, *, port: int | None = None) -> None: ...


def serve(worker: Measured, *, port: int, addr: str) -> ProbeServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` for ``worker`` on ``addr``:``port``
    (0: a free port, ``ProbeServer.port`` says which), from a thread, and switch its metrics
    on. ``OSError`` if the port cannot be bound; nothing is switched on then."""
    metrics = Metrics(worker)
    server = ProbeServer(worker, make_wsgi_app(metrics.registry), port=port, addr=addr)
    worker.attach_metrics(metrics, port=server.port)
    server.start()
    logger.info(
        "Serving /metrics, /healthz and /readyz on %s (worker %s).", server.url, worker.worker_id
    )
    return server
