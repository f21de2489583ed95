"""The chaos test: real schedulers, real faults, then an audit of every occurrence.

Four `run_scheduler` processes fire 5,000 schedules (cron every few seconds, intervals of
1-5 s, one-offs) for a minute on PostgreSQL while the test SIGKILLs a random scheduler every
few seconds (and starts a replacement), flushes Redis, stops Redis for six seconds,
terminates the schedulers' database connections, and edits, pauses and deletes schedules
through the ORM. Then it lets the system heal, stops the schedulers and audits the
receiver (a table unique on the idempotency key) and the ledger against the occurrences that
were due, computed here independently of the code under test.

Retention runs on a short age the whole time (the schedulers prune ended runs seconds after
they end, keeping one per schedule), and a tenth of the schedules name calendars whose days
the test closes and opens again during the faults (today and tomorrow: excluded, skipped or
moved to the next business day, then no longer). The ledger's deleted rows are kept aside by a
trigger of the test's own, so the audit reads everything the ledger ever held.

A second variant goes through a real broker: three schedulers hand 600 schedules to RQ
(the RQ dispatcher, a queue on the shared Redis, so that the faults hit the schedulers'
Redis and not the broker) and two real ``rqworker`` processes run the receiver and report
each run's end; the workers' database connections are terminated with the schedulers'. The
audit is the same, and every run must have reached its reported end. The broker's own
faults (a worker killed mid-job) are RQ's to handle, not the scheduler's: not made here.

What the audit asserts:

- no occurrence reached the receiver twice as an effect (redeliveries are counted: at least
  once is the contract, the key makes the effect exactly once), and none entered the ledger
  twice (a second row after retention deleted the first would be a second run);
- none was dispatched before its nominal time;
- none is missing: every due occurrence fired, or is in the ledger as skipped by the
  catch-up policy ("latest": skipped only if a later occurrence was already due when it was
  claimed), or was superseded by an edit, a pause or a delete that the test made before it
  was claimed, or fell on a closed day (recorded as such, or, moved, handled late once the
  day opened again);
- none ran on a closed day: an occurrence due after a closing committed and before the
  opening began did not run then (a moved one may run late, once the day is open again).

Randomness is seeded (SCHEDULINATOR_CHAOS_SEED) and the assertions are on the ledger, never
on timing; lateness is reported, not asserted.
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from django_schedulinator import services, timing
from django_schedulinator.index import clock
from django_schedulinator.models import Calendar, Run, Schedule

from .models import Receipt, Redelivery
from .support.handoff import empty_queue
from .support.processes import ROOT, subprocess_env, wait_for
from .support.redis_server import RedisServer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.subprocess,
    pytest.mark.slow,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the chaos run is on PostgreSQL"),
]

SEED = int(os.environ.get("SCHEDULINATOR_CHAOS_SEED", "20261121"))
WINDOW = float(os.environ.get("SCHEDULINATOR_CHAOS_SECONDS", "60"))
CRON_STEPS = (5, 6, 10, 12, 15, 20, 30)  # "*/k * * * * *": every k seconds (k divides 60)
INTERVALS = (1, 2, 3, 4, 5)
INF = 2**62
# Retention on a short age, as the schedulers run it: runs ended 3 s ago go, each schedule
# keeps its newest one, a prune every 2 s.
RETENTION = {"RUN_RETENTION_SECONDS": 3, "RUN_KEEP_LAST": 1, "PRUNE_SECONDS": 2}
# The calendars some schedules name (the rule of each): closed and opened during the faults.
CALENDARS = {"chaos-skip": "skip", "chaos-move": "next_business_day"}
# Where the ledger's deleted rows are kept for the audit (a table and a trigger of the test's).
ARCHIVE = "chaos_deleted_runs"


@dataclass(frozen=True)
class Variant:
    """One chaos run's shape: how many schedules and schedulers, for how long, and where
    the schedules' runs go (a dispatcher alias of tests/settings.py)."""

    name: str
    schedules: int
    schedulers: int
    window: float
    dispatcher: str = "default"
    rq_workers: int = 0  # real rqworker processes, for the "rq" alias
    calendars: bool = True  # a tenth of the schedules name the test's calendars


INLINE = Variant("inline", schedules=5000, schedulers=4, window=WINDOW)
# About 30 occurrences a second: what two RQ workers running the receiver (and reporting
# each start and end) keep up with on two cores shared with the inline run and its faults.
THROUGH_RQ = Variant(
    "rq", schedules=300, schedulers=3, window=WINDOW * 0.75, dispatcher="rq", rq_workers=2
)


@dataclass
class Spec:
    """A schedule's timing, as the test understands it (its own reference evaluation)."""

    kind: str
    step_s: int = 0  # cron: every step_s seconds; interval: the interval
    at_ms: int = 0  # one-off
    calendar: str = ""  # the calendar it names (CALENDARS), if any

    def fields(self) -> dict[str, Any]:
        if self.kind == "cron":
            return {"kind": "cron", "cron": f"*/{self.step_s} * * * * *", "interval": None}
        if self.kind == "interval":
            return {"kind": "interval", "cron": "", "interval": timedelta(seconds=self.step_s)}
        return {"kind": "once", "run_at": timing.from_ms(self.at_ms)}

    def calendar_fields(self) -> dict[str, Any]:
        if not self.calendar:
            return {}
        return {"calendars": [self.calendar], "calendar_rule": CALENDARS[self.calendar]}

    def grid(self, start_ms: int, end_ms: int) -> list[int]:
        """Nominal times in [start_ms, end_ms): the occurrences this timing calls for."""
        if self.kind == "once":
            return [self.at_ms] if start_ms <= self.at_ms < end_ms else []
        step = self.step_s * 1000
        if self.kind == "interval":  # anchored on the first occurrence
            return list(range(start_ms, end_ms, step))
        first = -(-start_ms // step) * step  # cron: whole seconds divisible by the step
        return list(range(first, end_ms, step))


@dataclass
class Segment:
    spec: Spec
    start_ms: int  # the row's next_run_at when this timing took effect
    end_ms: int | None = None  # the row's next_run_at when an edit, pause or delete ended it
    # Claimed but not dispatched yet when the schedule was deleted: their runs went with it.
    # nominal -> claimed (ms): claims can coalesce later occurrences before they are cancelled.
    cancelled: dict[int, int] = field(default_factory=dict)


@dataclass
class Closure:
    """The test's calendars closed (today and tomorrow excluded) from a commit between
    ``closed[0]`` and ``closed[1]`` (Redis time, ms), opened again between ``opened[0]``
    and ``opened[1]``."""

    closed: tuple[int, int]
    opened: tuple[int, int] = (INF, INF)

    def case(self, nominal: int) -> str:
        """An occurrence's day as a claim could have read it: "closed", "open" or
        "either" (due while the change was committing)."""
        if (
            self.closed[0] <= nominal <= self.closed[1]
            or self.opened[0] <= nominal <= self.opened[1]
        ):
            return "either"
        if self.closed[1] < nominal < self.opened[0]:
            return "closed"
        return "open"


@dataclass
class Audit:
    fired: int = 0
    skipped_missed: int = 0  # skipped by catch-up "latest": a later occurrence was due
    superseded: int = 0
    cancelled: int = 0
    closed_days: int = 0  # not run: on a day a calendar closed (or run late, moved)
    pruned: int = 0  # ledger rows retention deleted (kept aside for the audit)
    missing: list[str] = field(default_factory=list)
    early: list[str] = field(default_factory=list)
    off_grid: list[str] = field(default_factory=list)
    not_caught_up: list[int] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)  # entered the ledger twice
    on_closed_days: list[str] = field(default_factory=list)  # ran on a closed day


class Fleet:
    """The scheduler processes, each logging to a file of its own."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.rq_workers: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.started = 0
        self.killed = 0

    def start(self) -> None:
        self.started += 1
        log = self.logs / f"scheduler-{self.started}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "django", "run_scheduler", "--worker-id",
                 f"chaos-{self.started}", "--max-seconds", "600"],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs.append((proc, log))

    def start_rq_worker(self) -> None:
        """A real rqworker on the test queue; SimpleWorker runs each job in its own process
        instead of a fork per job, which keeps up with the schedulers on two cores."""
        log = self.logs / f"rqworker-{len(self.rq_workers) + 1}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "django", "rqworker", "--worker-class",
                 "rq.worker.SimpleWorker", django_settings.RQ_TEST_QUEUE],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.rq_workers.append((proc, log))

    def running(self) -> list[subprocess.Popen[bytes]]:
        return [p for p, _ in self.procs if p.poll() is None]

    def kill_one(self, rng: random.Random) -> None:
        victim = rng.choice(self.running())
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        self.killed += 1
        self.start()

    def stop(self) -> list[int]:
        """SIGTERM the running schedulers; their exit codes. A replacement still starting
        up (Django not set up yet, so no handler for SIGTERM and nothing claimed) is given
        the time to start first: the test is about stopping schedulers that run."""
        running = self.running()
        for proc, log in self.procs:
            if proc in running:
                wait_for(
                    lambda proc=proc, log=log: (
                        proc.poll() is not None
                        or " started (batch " in log.read_text(errors="replace")
                    ),
                    timeout=60,
                    interval=0.2,
                )
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        for proc in running:
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return [proc.returncode for proc in running]

    def kill_all(self) -> None:
        for proc in [*self.running(), *(p for p, _ in self.rq_workers if p.poll() is None)]:
            proc.kill()
            proc.wait()

    def counters(self) -> dict[str, int]:
        """The last counters each process logged (a SIGKILLed one: its last periodic line)."""
        total: dict[str, int] = defaultdict(int)
        for _, log in self.procs:
            last: dict[str, int] = {}
            for line in log.read_text(errors="replace").splitlines():
                if " stopped: {" in line:
                    last = ast.literal_eval(line[line.index("{") :])
                elif ": fired " in line:
                    last = parse_summary(line)
            for name, value in last.items():
                total[name] += value
        return dict(total)

    def log_text(self) -> str:
        return "\n".join(log.read_text(errors="replace") for _, log in self.procs)


def parse_summary(line: str) -> dict[str, int]:
    """The counters of a periodic line, "Scheduler <id>: fired 1,234 (+120 in the last
    60 s), lost races 2." (counters left out are zero)."""
    text = re.sub(r" \(\+[^)]*\)", "", line[line.index(": fired ") + 2 :])
    return {
        name.replace(" ", "_"): int(value.replace(",", ""))
        for name, value in re.findall(r"([a-z][a-z ]*?) (\d[\d,]*\d|\d)", text)
    }


def create_schedules(
    rng: random.Random, first_ms: int, variant: Variant
) -> dict[int, list[Segment]]:
    """The schedules, bulk-created (no signals): the schedulers build the index at start."""
    rows, specs = [], []
    for n in range(variant.schedules):
        # 12% intervals of 1-5 s, 48% cron, 40% one-offs: about 500 occurrences a second for
        # 5,000, which the schedulers outpace on two cores even while they catch up after a
        # fault.
        kind = "interval" if n % 25 < 3 else "cron" if n % 25 < 15 else "once"
        # A tenth name a calendar: one that skips closed days, or one that moves them.
        calendar = ""
        if variant.calendars:
            calendar = "chaos-skip" if n % 50 in (1, 4, 5, 6) else ""
            calendar = calendar or ("chaos-move" if n % 50 in (2, 7, 8) else "")
        if kind == "cron":
            spec = Spec("cron", step_s=rng.choice(CRON_STEPS), calendar=calendar)
            start = spec.grid(first_ms, first_ms + spec.step_s * 1000)[0]
        elif kind == "interval":
            spec = Spec("interval", step_s=rng.choice(INTERVALS), calendar=calendar)
            start = first_ms + rng.randrange(spec.step_s * 1000)
        else:
            start = first_ms + rng.randrange(int((variant.window - 10) * 1000))
            spec = Spec("once", at_ms=start)
        specs.append((spec, start))
        rows.append(
            Schedule(
                name=f"chaos-{n:05d}",
                task="tests.receipt",
                timezone="UTC",
                dispatcher=variant.dispatcher,
                next_run_at=timing.from_ms(start),
                **spec.fields(),
                **spec.calendar_fields(),
            )
        )
    created = Schedule.objects.bulk_create(rows)
    return {
        row.pk: [Segment(spec, start)] for row, (spec, start) in zip(created, specs, strict=True)
    }


def change(pk: int, what: str, history: dict[int, list[Segment]], rng: random.Random) -> None:
    """Edit, pause or delete one schedule through the ORM, noting where its timing changed."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().get(pk=pk)
        superseded_from = schedule.next_run_at
        segment = history[pk][-1]
        segment.end_ms = INF if superseded_from is None else timing.to_ms(superseded_from)
        if what == "delete":
            for seg in history[pk]:
                seg.cancelled = {
                    timing.to_ms(at): timing.to_ms(claimed_at)
                    for at, claimed_at in schedule.runs.unfinished().values_list(
                        "scheduled_for", "claimed_at"
                    )
                }
            schedule.delete()
            return
        if what == "pause":
            services.pause(schedule)
            return
        if segment.spec.kind == "once":
            new = Spec("once", at_ms=timing.to_ms(timezone.now()) + rng.randrange(1000, 20_000))
        else:
            steps = CRON_STEPS if segment.spec.kind == "cron" else INTERVALS
            new = Spec(
                segment.spec.kind, step_s=rng.choice([s for s in steps if s != segment.spec.step_s])
            )
        services.update(schedule, new.fields())  # moves next_run_at to the new timing's first
        history[pk].append(Segment(new, timing.to_ms(schedule.next_run_at)))


def keep_deleted_runs() -> None:
    """A trigger of the test's own keeps a copy of every ledger row deleted (by retention,
    or with its schedule), so that the audit reads all the ledger ever held."""
    table = Run._meta.db_table
    stop_keeping_deleted_runs()  # what a run that failed before its cleanup left behind
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {ARCHIVE} (LIKE {table})")
        cursor.execute(
            f"CREATE OR REPLACE FUNCTION {ARCHIVE}_keep() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN INSERT INTO {ARCHIVE} SELECT (OLD).*; RETURN OLD; END $$"
        )
        cursor.execute(
            f"CREATE TRIGGER {ARCHIVE}_keep BEFORE DELETE ON {table} FOR EACH ROW "
            f"EXECUTE FUNCTION {ARCHIVE}_keep()"
        )


def stop_keeping_deleted_runs() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS {ARCHIVE}_keep ON {Run._meta.db_table}")
        cursor.execute(f"DROP FUNCTION IF EXISTS {ARCHIVE}_keep()")
        cursor.execute(f"DROP TABLE IF EXISTS {ARCHIVE}")


@dataclass(frozen=True)
class LedgerRow:
    schedule_id: int
    nominal: int  # ms
    status: str
    reason: str
    worker_id: str
    claimed: int  # ms
    deleted: bool  # kept aside when it was deleted
    note: str = ""


def everything_the_ledger_held() -> list[LedgerRow]:
    """The ledger's rows, and those deleted from it (``keep_deleted_runs``, if the test
    kept them)."""
    columns = "schedule_id, scheduled_for, status, skip_reason, worker_id, claimed_at, note"
    sql = f"SELECT {columns}, false FROM {Run._meta.db_table}"
    if ARCHIVE in connection.introspection.table_names():
        sql += f" UNION ALL SELECT {columns}, true FROM {ARCHIVE}"
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [
            LedgerRow(
                sid, timing.to_ms(at), status, reason, worker, timing.to_ms(claimed), gone, note
            )
            for sid, at, status, reason, worker, claimed, note, gone in cursor.fetchall()
        ]


# What a skip's note says of the occurrences before it that the catch-up policy passed over
# without a record of each (past SCHEDULINATOR['MAX_SKIPS_RECORDED']).
PASSED_OVER = re.compile(r"back to (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC")


def passed_over(rows: list[LedgerRow]) -> dict[int, list[tuple[int, int]]]:
    """By schedule, the ranges [from, to) of nominal times that skips' notes say were
    passed over too (``to``: the skip that says it). The note gives whole seconds."""
    ranges = defaultdict(list)
    for row in rows:
        if row.status == "skipped" and (found := PASSED_OVER.search(row.note)):
            start = datetime.fromisoformat(found[1]).replace(tzinfo=UTC)
            ranges[row.schedule_id].append((timing.to_ms(start), row.nominal))
    return ranges


def audit(
    history: dict[int, list[Segment]], chaos_end_ms: int, closures: Sequence[Closure] = ()
) -> tuple[Audit, list[float]]:
    receipts = defaultdict(list)
    for key, received_at in Receipt.objects.values_list("key", "received_at"):
        sid, nominal = (int(x) for x in key.split(":"))
        receipts[sid].append((nominal, timing.to_ms(received_at)))
    ledger = everything_the_ledger_held()
    # Each occurrence enters the ledger once, ever: a second row after retention deleted
    # the first would be a second run of it.
    entered = Counter((row.schedule_id, row.nominal) for row in ledger)
    result, lateness = Audit(), []
    result.doubled = [f"{sid}:{at} x{n}" for (sid, at), n in entered.items() if n > 1]
    result.pruned = sum(row.deleted for row in ledger)
    # When the claim that fired each occurrence ran (Redis time, ms).
    claimed_at = {
        (row.schedule_id, row.nominal): row.claimed for row in ledger if row.status != "skipped"
    }
    # Skipped occurrences: (schedule, nominal) -> when the claim that skipped them ran.
    skipped = {
        (row.schedule_id, row.nominal): row.claimed
        for row in ledger
        if row.status == "skipped" and row.reason == "missed"
    }
    unrecorded = passed_over(ledger)
    # Closed days recorded by their first occurrence (a "calendar" skip), and when.
    day_markers = defaultdict(list)
    for row in ledger:
        if row.status == "skipped" and row.reason == "calendar":
            day_markers[row.schedule_id].append((row.nominal, row.claimed))
    # Runs claimed, then skipped at dispatch because their schedule was paused meanwhile.
    paused_before_dispatch = {
        (row.schedule_id, row.nominal)
        for row in ledger
        if row.status == "skipped" and row.reason == "paused" and row.worker_id != "resume"
    }
    final = dict(Schedule.objects.values_list("pk", "next_run_at"))
    enabled = set(Schedule.objects.filter(enabled=True).values_list("pk", flat=True))
    for sid, segments in history.items():
        got = sorted(receipts.get(sid, []))
        nominal_times = {n for n, _ in got}
        calendar = segments[0].spec.calendar
        for nominal, at in got:
            lateness.append((at - nominal) / 1000)
            if at < nominal:
                result.early.append(f"{sid}:{nominal}")
            claimed = claimed_at.get((sid, nominal), at)
            if calendar and not ran_as_its_day_allowed(calendar, nominal, claimed, at, closures):
                result.on_closed_days.append(f"{sid}:{nominal} (received at {at})")
        result.fired += len(got)
        if sid in enabled and final[sid] is not None and timing.to_ms(final[sid]) <= chaos_end_ms:
            result.not_caught_up.append(sid)
        for i, seg in enumerate(segments):
            end = seg.end_ms
            if end is None:  # still in force: up to the row's next run now
                end = INF if final.get(sid) is None else timing.to_ms(final[sid])
            grid = set(seg.spec.grid(seg.start_ms, end))
            next_start = segments[i + 1].start_ms if i + 1 < len(segments) else INF
            mine = sorted(n for n in nominal_times if seg.start_ms <= n < min(end, next_start))
            result.off_grid.extend(f"{sid}:{n}" for n in mine if n not in grid)
            ordered = sorted(grid)
            for i, g in enumerate(ordered):
                if g in nominal_times:
                    continue
                if g in seg.cancelled or (sid, g) in paused_before_dispatch:
                    result.cancelled += 1
                    continue
                if calendar and closed_day_explains(calendar, g, closures, day_markers[sid]):
                    result.closed_days += 1
                    continue
                if any(start <= g < end for start, end in unrecorded[sid]):
                    result.skipped_missed += 1  # passed over, past the skips recorded
                    continue
                # "latest" may skip g only if the next occurrence was due when g was claimed.
                following = ordered[i + 1] if i + 1 < len(ordered) else end
                if (sid, g) in skipped and skipped[sid, g] >= following:
                    result.skipped_missed += 1
                elif sid not in final and any(n > g for n in (*mine, *seg.cancelled)):
                    # Deleted: its ledger went with it (cascade). A later occurrence fired (or
                    # was claimed, then cancelled by the delete), never early, so the claim
                    # that took it passed over g.
                    result.skipped_missed += 1
                else:
                    result.missing.append(f"{sid}:{g}")
            if seg.end_ms is not None and seg.end_ms != INF and seg.end_ms not in nominal_times:
                result.superseded += 1
        outside = [
            n
            for n in nominal_times
            if not any(
                s.start_ms <= n < (s.end_ms if s.end_ms is not None else INF) for s in segments
            )
        ]
        result.off_grid.extend(f"{sid}:{n} (after an edit, pause or delete)" for n in outside)
    return result, lateness


@pytest.mark.parametrize("variant", [INLINE, THROUGH_RQ], ids=lambda v: v.name)
def test_chaos(
    variant: Variant,
    private_redis: RedisServer,
    key_prefix: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    settings: Any,
) -> None:
    rng = random.Random(SEED)
    app_name = f"chaos-{key_prefix}"
    env = subprocess_env(
        key_prefix,
        SCHEDULINATOR_TEST_REDIS_URL=private_redis.url,
        # The broker's Redis: the shared one, which the faults below leave alone.
        SCHEDULINATOR_TEST_BROKER_URL=settings.REDIS_URL,
        SCHEDULINATOR_TEST_RQ_DISPATCHER="1" if variant.rq_workers else "",
        SCHEDULINATOR_TEST_APP_NAME=app_name,
        SCHEDULINATOR_TEST_LEASE="5",
        SCHEDULINATOR_TEST_RECONCILE="2",
        SCHEDULINATOR_TEST_LOG_STATS="2",
        SCHEDULINATOR_TEST_SETTINGS=json.dumps(RETENTION),
    )
    redis = private_redis.client()
    keep_deleted_runs()
    calendars = {}
    for name in CALENDARS:  # no weekend: a closed day's runs move to the day after it
        calendars[name] = Calendar(name=name, timezone="UTC", weekend=[])
        services.save_calendar(calendars[name], days=[])
    closures: list[Closure] = []
    first_ms = timing.to_ms(timezone.now()) + 5000
    history = create_schedules(rng, first_ms, variant)
    ids = sorted(history)
    fleet = Fleet(env, tmp_path)
    events: list[str] = []
    window = variant.window
    try:
        empty_rq_queue()
        for _ in range(variant.rq_workers):
            fleet.start_rq_worker()
        for _ in range(variant.schedulers):
            fleet.start()
        started = time.monotonic()
        plan: list[tuple[float, str]] = [
            (window * 0.25, "flushall"),
            (window * 0.47, "redis down"),
            (window * 0.7, "kill db"),
        ]
        t = 4.0
        while t < window - 2:
            plan.append((t, "sigkill"))
            t += rng.uniform(3, 6)
        plan += [(float(t), "edits") for t in range(10, int(window), 10)]
        # The calendars closed and opened during the faults (the flush, the database's
        # connections killed), and open at the end.
        plan += [(window * f, w) for f, w in ((0.2, "close"), (0.4, "open"), (0.62, "close"),
                                              (0.82, "open"))]  # fmt: skip
        plan.sort()
        for at, what in plan:
            left = at - (time.monotonic() - started)
            if left > 0:
                time.sleep(left)
            events.append(f"{time.monotonic() - started:5.1f}s {what}")
            if what == "sigkill":
                fleet.kill_one(rng)
            elif what == "flushall":
                redis.flushall()
            elif what == "redis down":
                private_redis.stop()
                time.sleep(6)
                private_redis.start()
                redis = private_redis.client()
            elif what == "kill db":
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = %s",
                        [app_name],
                    )
                    events[-1] += f" ({cursor.fetchone()[0]} backends)"
            elif what in ("close", "open"):
                closures_event(what, closures, calendars)
                events[-1] += f" ({len(closures)})"
            else:
                # Schedules that name a calendar keep their timing: the audit reads their
                # days from the closures alone.
                live = [
                    pk
                    for pk in ids
                    if pk in history
                    and history[pk][-1].end_ms is None
                    and not history[pk][0].spec.calendar
                ]
                for pk in rng.sample(live, 30):
                    change(pk, rng.choice(["edit", "edit", "pause", "delete"]), history, rng)
        time.sleep(max(0.0, window - (time.monotonic() - started)))
        chaos_end = timezone.now()
        events.append(f"{time.monotonic() - started:5.1f}s chaos ends; healing")

        def healed() -> bool:
            """every enabled schedule past the end of the chaos, every run due in it ended
            (a handed-off run: its end reported by the worker)"""
            behind = Schedule.objects.filter(enabled=True, next_run_at__lte=chaos_end)
            return not behind.exists() and not not_ended(chaos_end).exists()

        try:
            wait_for(healed, timeout=120, interval=0.5)
        except AssertionError:
            behind = Schedule.objects.filter(enabled=True, next_run_at__lte=chaos_end)
            print("\n".join(events), file=sys.stderr)
            examples = list(behind.values("pk", "next_run_at", "kind")[:5])
            print(
                f"behind: {behind.count()} e.g. {examples}; "
                f"not ended: {not_ended(chaos_end).count()}; due entries: "
                f"{private_redis.client().zcard('{' + key_prefix + '}:due')}",
                file=sys.stderr,
            )
            stuck = not_ended(chaos_end).values_list(
                "status", "worker_id", "lease_expires_at", "attempts", "external_id"
            )
            print(f"now {timezone.now()}; runs not ended: {list(stuck[:10])}", file=sys.stderr)
            for proc, log in fleet.procs + fleet.rq_workers:
                lines = [
                    line
                    for line in log.read_text().splitlines()
                    if ": fired " not in line and not line.startswith(" ")
                ]
                print(
                    f"--- {log.name} (exit {proc.poll()})", *lines[-12:], sep="\n", file=sys.stderr
                )
            raise
        events.append(f"{time.monotonic() - started:5.1f}s healed")
        codes = fleet.stop()
        # What the schedulers handed off before they stopped ends in the workers.
        wait_for(lambda: not not_ended().exists(), timeout=120, interval=0.5)
    finally:
        fleet.kill_all()
        empty_rq_queue()

    try:
        result, lateness = audit(history, timing.to_ms(chaos_end), closures)
        disagreements = ledger_disagreements()
    finally:
        stop_keeping_deleted_runs()
    counters = fleet.counters()
    statuses = dict(Run.objects.values_list("status").annotate(n=Count("id")))
    redispatched_runs = Run.objects.filter(attempts__gt=1).count()
    quantiles = statistics.quantiles(lateness, n=100)
    # When the scheduler handed each run off (through RQ, the queue's wait comes after).
    handed_off = statistics.quantiles(
        [
            (timing.to_ms(at) - timing.to_ms(nominal)) / 1000
            for at, nominal in Run.objects.filter(dispatched_at__isnull=False).values_list(
                "dispatched_at", "scheduled_for"
            )
        ],
        n=100,
    )
    report = "\n".join(
        [
            f"chaos run '{variant.name}' (seed {SEED}): {variant.schedules} schedules, "
            f"{variant.schedulers} schedulers, dispatcher {variant.dispatcher!r}"
            + (f" with {variant.rq_workers} rqworkers" if variant.rq_workers else "")
            + f", {window:.0f}s window; {fleet.killed} SIGKILLs, {fleet.started} processes in all",
            *events,
            f"fired {result.fired} occurrences; skipped as missed {result.skipped_missed} "
            f"(catch-up 'latest': a later one was due), "
            f"superseded {result.superseded} (edit, pause, delete); "
            f"cancelled {result.cancelled} (claimed, then deleted or paused before dispatch); "
            f"on closed days {result.closed_days} (not run, or moved and run late); "
            f"missing {len(result.missing)}, early {len(result.early)}, "
            f"off-grid {len(result.off_grid)}, ran on a closed day "
            f"{len(result.on_closed_days)}, entered the ledger twice {len(result.doubled)}, "
            f"duplicate effects 0 (unique key), redeliveries deduped "
            f"{Redelivery.objects.count()}; ledger rows retention deleted {result.pruned}",
            f"lateness at the receiver: p50 {quantiles[49]:.3f}s, p99 {quantiles[98]:.3f}s, "
            f"max {max(lateness):.3f}s; of the hand-off: p50 {handed_off[49]:.3f}s, "
            f"p99 {handed_off[98]:.3f}s",
            f"runs by status {statuses}; re-dispatched runs {redispatched_runs}"
            + (
                f" (RQ refused {fleet.log_text().count('is in RQ already')} as the same job)"
                if variant.rq_workers
                else ""
            ),
            f"counters (last logged per process) {counters}",
            f"exit codes of the schedulers stopped at the end: {codes}",
        ]
    )
    with capsys.disabled():
        print("\n" + report)
    if folder := os.environ.get("SCHEDULINATOR_CHAOS_REPORTS"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{variant.name}.txt").write_text(report + "\n")

    assert result.early == []
    assert result.off_grid == []
    assert result.doubled == []
    assert result.on_closed_days == []
    assert result.pruned > 0  # retention ran, and what it deleted was audited too
    if result.missing:
        print(*(explain(m, history) for m in result.missing[:5]), sep="\n", file=sys.stderr)
    assert result.missing == []
    assert result.not_caught_up == []
    assert not_ended().count() == 0
    assert statuses.get("failed", 0) == 0, Run.objects.filter(status="failed").first().error
    assert result.fired == Receipt.objects.count()
    # Every run that reached the receiver ended there, and the ledger knows it: through RQ,
    # the worker reported each end. (A deleted schedule's runs went with it.) One exception,
    # the crash window: a run that executed in a scheduler SIGKILLed before it recorded the
    # end, whose schedule was then paused, is cancelled by the take-over as paused.
    assert disagreements == []
    assert result.fired > variant.schedules
    assert codes == [0] * variant.schedulers


def closures_event(what: str, closures: list[Closure], calendars: dict[str, Calendar]) -> None:
    """Close (today and tomorrow excluded) or open the test's calendars, through the
    services, noting when the change committed in Redis time, the claims' clock."""
    today = timing.from_ms(chaos_clock()).date()
    days = [(today, "closed"), (today + timedelta(days=1), "closed")] if what == "close" else []
    before = chaos_clock()
    with transaction.atomic():
        for calendar in calendars.values():
            services.save_calendar(calendar, days=days)
    after = chaos_clock()
    if what == "close":
        closures.append(Closure((before, after)))
    else:
        closures[-1].opened = (before, after)


def chaos_clock() -> int:
    """Redis TIME of the schedulers' Redis (the test's private one), in ms; this host's
    clock while it is down (it is the same host)."""
    return timing.to_ms(clock.now())


def ran_as_its_day_allowed(
    calendar: str, nominal: int, claimed: int, received: int, closures: Sequence[Closure]
) -> bool:
    """Whether an occurrence of a schedule naming ``calendar`` could run when it did: not
    on a day closed when it was due, unless it ran once the day had opened again: moved
    (chaos-move), or, on a day that skips (chaos-skip), claimed after the day opened again,
    before the claim that would have skipped it came (a scheduler behind): the re-plan of
    the opening then handed the occurrences since the schedule's last run to its catch-up
    policy, which may run the latest of them (docs/scheduling.md)."""
    for closure in closures:
        if closure.case(nominal) == "closed":
            if calendar == "chaos-move":
                return received >= closure.opened[0]
            return claimed >= closure.opened[0]
    return True


def closed_day_explains(
    calendar: str, nominal: int, closures: Sequence[Closure], markers: list[tuple[int, int]]
) -> bool:
    """Whether an occurrence that did not run was due on a closed day: due while a closing
    or an opening committed (either is right), or while the day was closed (skipped: only
    the day's first is recorded; moved: the catch-up policy handles it once the day opens,
    and its record says so), or due before a closing that its claim came after (the
    schedule was behind): the day's record, made after the closing, passes over it."""
    for closure in closures:
        case = closure.case(nominal)
        if case == "either" or (case == "closed" and calendar == "chaos-skip"):
            return True
        if calendar == "chaos-skip" and nominal < closure.opened[0]:
            recorded = [at for at, claimed in markers if claimed >= closure.closed[0]]
            if any(at <= nominal for at in recorded):
                return True
    return False


def ledger_disagreements() -> list[str]:
    """Occurrences the receiver got whose run is neither succeeded nor (the crash window)
    cancelled because its schedule was paused (in the ledger, or deleted from it by
    retention)."""
    runs = {
        (row.schedule_id, row.nominal): (row.status, row.reason)
        for row in everything_the_ledger_held()
    }
    received = Receipt.objects.filter(schedule_id__in=Schedule.objects.values("pk"))
    return [
        f"{sid}:{timing.to_ms(at)} {runs.get((sid, timing.to_ms(at)))}"
        for sid, at in received.values_list("schedule_id", "scheduled_for")
        if runs.get((sid, timing.to_ms(at))) not in (("succeeded", ""), ("skipped", "paused"))
    ]


def not_ended(due_by: datetime | None = None) -> Any:
    """Runs (due by then) that have not ended: waiting for a scheduler (pending, buffered),
    running, or handed off with no end reported yet."""
    runs = Run.objects.filter(status__in=("pending", "buffered", "running", "dispatched"))
    return runs if due_by is None else runs.filter(scheduled_for__lte=due_by)


def empty_rq_queue() -> None:
    """The RQ test queue (tests/settings.py) and its jobs, gone."""
    empty_queue(django_settings.RQ_TEST_QUEUE)


def explain(occurrence: str, history: dict[int, list[Segment]]) -> str:
    sid = int(occurrence.split(":")[0])
    fired = sorted(
        (timing.to_ms(at), timing.to_ms(claimed))
        for at, claimed in Run.objects.filter(schedule_id=sid).values_list(
            "scheduled_for", "claimed_at"
        )
    )
    received = sorted(
        (int(key.split(":")[1]), timing.to_ms(at))
        for key, at in Receipt.objects.filter(schedule_id=sid).values_list("key", "received_at")
    )
    return (
        f"{occurrence}: segments {history[sid]}, runs (nominal, claimed) {fired}, "
        f"receipts (nominal, received) {received}"
    )
