"""``manage.py scheduler_status``: is the scheduling healthy? For people, cron and probes.

It prints ``health.cluster_status()`` (the schedulers alive, the index, the oldest due entry,
the dispatchers' waiting runs, the auto-paused schedules, and the problems they make), as
aligned text or as JSON, and exits 0 when healthy, 1 when not, 2 when Redis or the database
cannot be reached: an exec probe for Kubernetes, or a cron check.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils import timezone
from redis.exceptions import RedisError

from django_schedulinator.operations import alerts, outbox
from django_schedulinator.operations.delivery import Delivery, deliver_outbox
from django_schedulinator.operations.health import (
    DEFAULT_MAX_LAG_SECONDS,
    ClusterStatus,
    cluster_status,
)
from django_schedulinator.operations.heartbeat import LaneDepth, RecorderBacklog

# Exit codes (docs/commands.md): 0 healthy, 1 unhealthy (or a usage mistake), 2 unreachable.
UNHEALTHY = 1
UNREACHABLE = 2
# --notify runs the missed-run check again while it finds a full batch, this often at most.
MAX_CHECKS = 20


def non_negative_seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not (math.isfinite(number) and number >= 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, got {value}")
    return number


class Command(BaseCommand):
    help = (
        "Report the schedulers alive, the due index, the oldest due entry, runs waiting on "
        "dispatchers and auto-paused schedules. Exit 0 healthy, 1 unhealthy, 2 Redis or the "
        "database unreachable."
    )
    # A probe says in its own words that the database is away (exit 2). Django's system
    # checks would reach the database first: from Django 6.1 the model checks get every
    # alias, and on SQLite a JSONField's check queries it (a traceback, not exit 2).
    # `manage.py check` runs them; a probe every few seconds need not.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON (stable keys).")
        parser.add_argument(
            "--no-drift", action="store_true", help="Skip the drift check (a sampled comparison)."
        )
        parser.add_argument(
            "--notify",
            action="store_true",
            help="Also raise and notify what the schedulers would (docs/alerts.md): 'no "
            "scheduler alive' once per outage, and the runs missed past their grace, then "
            "deliver the alerts' outbox. For a cron job that alerts while every scheduler is "
            "down; the missed runs are raised and told during a Redis outage too.",
        )
        parser.add_argument(
            "--notify-seconds",
            type=non_negative_seconds,
            default=None,
            metavar="SECONDS",
            help="How long --notify sends for at most, checked between two messages; the "
            "rest waits for the next run (default: NOTIFY_DELIVERY_SECONDS). Keep it well "
            "within the job's own deadline.",
        )
        parser.add_argument(
            "--max-lag",
            type=non_negative_seconds,
            default=DEFAULT_MAX_LAG_SECONDS,
            metavar="SECONDS",
            help=f"How late the oldest due entry may be (default {DEFAULT_MAX_LAG_SECONDS:g}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        max_lag = options["max_lag"]
        # call_command(max_lag=...) skips argparse.
        if (
            isinstance(max_lag, bool)
            or not isinstance(max_lag, int | float)
            or not (math.isfinite(max_lag) and max_lag >= 0)
        ):
            raise CommandError(
                f"--max-lag must be a number of seconds, 0 or more, got {max_lag!r}."
            )
        seconds = options.get("notify_seconds")
        if seconds is not None and (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not (math.isfinite(seconds) and seconds >= 0)
        ):
            raise CommandError(
                f"--notify-seconds must be a number of seconds, 0 or more, got {seconds!r}."
            )
        raised: Raised | None = None
        try:
            try:
                report = cluster_status(drift=not options["no_drift"], max_lag=float(max_lag))
                if options["notify"]:
                    raised = raise_alerts(report, seconds=seconds)
            except RedisError as exc:
                if options["notify"] and raised is None:
                    # The missed-run check and the outbox need only SQL: a Redis outage is
                    # no reason to leave a run missed meanwhile unraised and untold.
                    raised = raise_alerts(None, seconds=seconds)
                    self.stdout.write("\n".join(raised.lines()))
                raise CommandError(
                    f"Redis cannot be reached, so the status is unknown: "
                    f"{type(exc).__name__}: {exc}",
                    returncode=UNREACHABLE,
                ) from exc
        except DatabaseError as exc:
            raise CommandError(
                f"The database cannot be read, so the status is unknown: "
                f"{type(exc).__name__}: {exc}",
                returncode=UNREACHABLE,
            ) from exc
        if options["json"]:
            shown = report.as_dict()
            if raised is not None:
                shown["alerts"] = raised.as_dict()
            self.stdout.write(json.dumps(shown, indent=2))
        else:
            lines = human(report, drift=not options["no_drift"])
            if raised is not None:
                lines += ["", *raised.lines()]
            self.stdout.write("\n".join(lines))
        if not report.healthy:
            raise CommandError(
                f"Unhealthy: {len(report.problems)} problem(s), listed above.",
                returncode=UNHEALTHY,
            )


@dataclass(frozen=True, slots=True)
class Raised:
    """What ``--notify`` raised: "no scheduler alive" (once per outage; None: unknown,
    Redis cannot be reached), the missed runs; and what its delivery step sent."""

    no_scheduler: bool | None
    missed: list[outbox.Missed]
    delivery: Delivery

    def as_dict(self) -> dict[str, Any]:
        return {
            "no_scheduler_raised": self.no_scheduler,
            "delivery": self.delivery.as_dict(),
            "missed_raised": [
                {
                    "schedule_id": m.schedule_id,
                    "scheduled_for": m.scheduled_for.isoformat(),
                    "run_id": m.run_id,
                    "reason": m.reason,
                }
                for m in self.missed
            ],
        }

    def lines(self) -> list[str]:
        if self.no_scheduler is None:
            outage = "unknown (Redis cannot be reached)"
        else:
            outage = "raised now" if self.no_scheduler else "nothing new to raise"
        lines = [f"Alerts (--notify): no scheduler alive: {outage}; missed runs raised now: "
                 f"{len(self.missed)}"]  # fmt: skip
        lines += [
            f"  schedule {m.schedule_id} at {moment(m.scheduled_for)}: {m.reason}"
            for m in self.missed[:20]
        ]
        lines.append(f"Notifications of missed and failed runs: {self.delivery.summary()}")
        return lines


def raise_alerts(report: ClusterStatus | None, *, seconds: float | None = None) -> Raised:
    """What a scheduler raises between its passes, from here: "no scheduler alive" when this
    report says none runs while schedules wait (once per outage, whoever asks; not without
    a report: Redis cannot be reached), and the runs missed past their grace (each once,
    whoever checks); then the outbox's delivery step, for ``seconds`` at most, which tells
    the notifier of them and of those still waiting."""
    down: bool | None = None
    if report is not None:
        outage = any(problem.code == "no-scheduler" for problem in report.problems)
        down = alerts.no_scheduler_alive(not outage)
    batch = alerts.check()
    missed = list(batch)
    # A check reads a bounded batch: a full one may leave more, which a cron job that
    # runs every few minutes should not leave to its next run.
    for _ in range(MAX_CHECKS - 1):
        if len(batch) < alerts.CHECK_BATCH:
            break
        batch = alerts.check()
        missed += batch
    return Raised(down, missed, deliver_outbox(seconds=seconds))


def human(report: ClusterStatus, *, drift: bool = True) -> list[str]:
    """The report as aligned lines of text, times to the second in the current time zone."""
    index = report.index
    verdict = "healthy" if report.healthy else f"UNHEALTHY ({len(report.problems)} problem(s))"
    lines = [f"Scheduler status at {moment(report.checked_at)}: {verdict}", ""]

    lines.append(f"Schedulers alive: {len(report.schedulers)}")
    if report.schedulers:
        rows = []
        for beat in report.schedulers:
            age = beat.pass_age(report.checked_at)
            lanes = ", ".join(lane_text(alias, lane) for alias, lane in beat.lanes.items())
            rows.append(
                [
                    beat.id,
                    beat.host,
                    str(beat.pid),
                    beat.version,
                    moment(beat.started_at),
                    "none yet" if age is None else f"{age:.1f} s ago",
                    lanes or "-",
                    recorder_text(beat.recorder),
                    beat.state(report.checked_at),
                ]
            )
        headers = ["ID", "HOST", "PID", "VERSION", "UP SINCE", "LAST PASS", "LANES WAITING"]
        headers.append("TO RECORD")
        lines += indent(table([*headers, "STATE"], rows))
        for beat in report.schedulers:
            counted = [f"{name.replace('_', ' ')} {n:,}" for name, n in beat.counters.items() if n]
            lines.append(f"  {beat.id}: {', '.join(counted) or 'nothing counted yet'}")
            if beat.last_error:
                lines.append(f"  {beat.id}: last error: {beat.last_error}")
    lines.append("")

    built = index.last_rebuild
    if built is None:
        lines.append("Due index: not built")
    else:
        when = built.get("built_at")
        lines.append(
            f"Due index: built {'at an unknown time' if when is None else moment_text(when)} "
            f"by {built.get('by', 'someone unknown')} ({built.get('rows', '?')} rows)"
            + ("; a rebuild is running" if index.rebuild_running else "")
        )
    lines.append(
        f"  schedules {index.schedules:,}, enabled {index.enabled:,}, to index "
        f"{index.indexable:,}; entries {index.entries_due:,}, due now {index.due_now:,}, in "
        f"flight {index.in_flight:,}; runs in flight {index.runs_in_flight:,}"
    )
    if index.other_layout is not None:
        lines.append(
            f"  built for {index.other_layout} shard(s), and INDEX_SHARDS is "
            f"{index.shard_count}: nothing fires until it is rebuilt"
        )
    elif index.shard_count > 1:
        for row in index.shards:
            shard_lag = row["oldest_due_lag_seconds"]
            lines.append(
                f"  shard {row['shard']}: "
                + ("" if row["built"] else "not built; ")
                + f"entries {row['entries_due']:,}, due now {row['due_now']:,}, in flight "
                f"{row['in_flight']:,}"
                + ("" if shard_lag is None else f", oldest due {shard_lag:.1f} s late")
            )
    lag = index.oldest_due_lag_seconds
    lines.append(
        "  oldest due entry: none due"
        if lag is None
        else f"  oldest due entry: schedule {index.oldest_due_schedule}, {lag:.1f} s late "
        f"(allowed {report.max_lag_seconds:g} s)"
    )
    if index.drift is not None:
        lines.append(f"  drift: {index.drift.summary()}")
    else:
        lines.append("  drift: not checked" + ("" if drift else " (--no-drift)"))
    lines.append("")

    lines.append("Dispatchers:")
    lines += indent(
        table(
            ["ALIAS", "BACKEND", "OUTCOME AWAITED", "PAST DEADLINE", "RETRYING"],
            [
                [d.alias, d.backend, str(d.awaiting), str(d.past_deadline), str(d.retrying)]
                for d in report.dispatchers
            ],
        )
    )
    lines.append("")

    lines.append(f"Auto-paused schedules: {report.auto_paused_count}")
    if report.auto_paused:
        lines += indent(
            table(
                ["ID", "NAME", "PAUSED AT", "FAILURES IN A ROW"],
                [
                    [
                        str(a.id),
                        a.name,
                        "-" if a.paused_at is None else moment(a.paused_at),
                        str(a.failure_streak),
                    ]
                    for a in report.auto_paused
                ],
            )
        )
        if report.auto_paused_count > len(report.auto_paused):
            lines.append(f"  ... and {report.auto_paused_count - len(report.auto_paused)} more")

    for title, findings in (("Problems", report.problems), ("Warnings", report.warnings)):
        if findings:
            lines += ["", f"{title}:"]
            lines += [f"  - [{f.code}] {f.message}" for f in findings]
    return lines


def lane_text(alias: str, lane: LaneDepth) -> str:
    """A lane's waiting batches, and the wait of the oldest: "default 2 (oldest 1.5 s)"."""
    if not lane.waiting or lane.oldest_seconds is None:
        return f"{alias} {lane.waiting}"
    return f"{alias} {lane.waiting} (oldest {lane.oldest_seconds:.1f} s)"


def recorder_text(backlog: RecorderBacklog) -> str:
    """The outcomes waiting to be written, and the wait of the oldest batch: "0", or
    "480 (oldest 2.5 s)"."""
    if not backlog.outcomes or backlog.oldest_seconds is None:
        return f"{backlog.outcomes:,}"
    return f"{backlog.outcomes:,} (oldest {backlog.oldest_seconds:.1f} s)"


def moment(value: datetime) -> str:
    """To the second, in the current time zone (TIME_ZONE), with its abbreviation."""
    return f"{timezone.localtime(value):%Y-%m-%d %H:%M:%S %Z}"


def moment_text(value: Any) -> str:
    """An ISO 8601 time kept as text (the build marker's), as ``moment`` shows times."""
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    return str(value) if timezone.is_naive(parsed) else moment(parsed)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (headers, *rows)
    ]


def indent(lines: list[str]) -> list[str]:
    return [f"  {line}" for line in lines]
