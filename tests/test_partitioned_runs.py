"""The hot path on a ledger partitioned by daily range of ``scheduled_for`` (PostgreSQL):
every statement that reaches runs by id names a range of their nominal times
(``spans.Span``), so that PostgreSQL plans it over the partitions in range only, and a
batch whose runs lie days apart is still found and written whole.

The partitioned ledger is ``partition_runs``'s (``operations/partitions.py``), converted
back after the test. What the scheduler's threads send is captured from every connection: the
lanes, the recorder and the inline dispatcher's pool each have their own."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from django_schedulinator import resync_schedules
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, spans
from django_schedulinator.operations import alerts
from django_schedulinator.operations import partitions as layout
from django_schedulinator.scheduler.claiming import Claimer
from django_schedulinator.scheduler.leases import Leased
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.services import ledger

from .support.schedules import make_due, make_schedule

pytestmark = [
    pytest.mark.django_db(transaction=True),  # scheduler threads: real commits
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="declarative partitioning"),
]

TABLE = Run._meta.db_table
DAYS_BEFORE, DAYS_AFTER = 6, 3


def partition_name(day: datetime) -> str:
    return layout.partition_name(day.date())


@pytest.fixture
def partitions(transactional_db: None) -> Iterator[list[str]]:
    """The ledger partitioned by day of ``scheduled_for`` (UTC) from DAYS_BEFORE days ago
    to DAYS_AFTER days ahead, with a default partition (``manage.py partition_runs``'s
    conversion); its daily partitions' names, oldest first. Converted back afterwards,
    whatever the test did."""
    today = timezone.now().astimezone(UTC).date()
    converted = layout.partition(
        today=today, days_behind=DAYS_BEFORE, days_ahead=DAYS_AFTER, using="default"
    )
    assert spans.ledger_partitioned("default")  # this process's connections know it
    try:
        yield [layout.partition_name(day) for day in converted.days]
    finally:
        layout.unpartition(using="default")
        assert not spans.ledger_partitioned("default")


class Statements:
    """Every statement on the ledger that any thread's connection sends while ``on`` (the
    scheduler's, not the test's own reads), with its parameters."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.capturing = False
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        self.capturing = True
        try:
            yield
        finally:
            self.capturing = False

    def by_id(self) -> list[tuple[str, Any]]:
        """Those that reach runs by id: a WHERE on the run table's id (a list, a subquery
        of ids, one id), not the inserts of a claim."""
        return [(sql, params) for sql, params in self.sent if BY_ID.search(sql)]


BY_ID = re.compile(rf'(?:"{TABLE}"\.)?"id" (?:IN \(|= %s)|\bid IN \(SELECT unnest', re.IGNORECASE)
BOUNDED = re.compile(r'"scheduled_for" >= %s AND [^;]*"scheduled_for" <= %s')


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Statements:
    seen = Statements()
    execute = CursorWrapper._execute

    def capturing(self: CursorWrapper, sql: str, params: Any, *rest: Any) -> Any:
        if seen.capturing and self.db.vendor == "postgresql" and TABLE in sql:
            with seen._lock:
                seen.sent.append((sql, list(params) if params is not None else None))
        return execute(self, sql, params, *rest)

    monkeypatch.setattr(CursorWrapper, "_execute", capturing)
    return seen


def scanned(sql: str, params: Any) -> set[str]:
    """The ledger's partitions the plan of ``sql`` reads or writes."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        [[plan]] = cursor.fetchall()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            name = node.get("Relation Name")
            # The partitions; an UPDATE's plan also names the partitioned table itself.
            if isinstance(name, str) and name.startswith(f"{TABLE}_"):
                found.add(name)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(plan)
    return found


def days_of(times: list[datetime]) -> set[str]:
    return {partition_name(at.astimezone(UTC)) for at in times}


def days_between(times: list[datetime]) -> set[str]:
    """The partitions from the earliest of ``times`` to the latest, both included."""
    day, last = (at.astimezone(UTC).date() for at in (min(times), max(times)))
    days = set()
    while day <= last:
        days.add(layout.partition_name(day))
        day += timedelta(days=1)
    return days


def assert_each_by_id_statement_is_bounded(
    statements: Statements, partitions: list[str], times: list[datetime]
) -> list[str]:
    """Every statement by id names the bound, and its plan reaches only partitions within
    the span of ``times`` (the nominal times of the runs the test made); returns them."""
    by_id = statements.by_id()
    assert by_id, "no statement by id was captured"
    unbounded = [sql for sql, _params in by_id if not BOUNDED.search(sql)]
    assert unbounded == []
    wanted = days_between(times)
    assert wanted < set(partitions)  # there are partitions the bound leaves out
    for sql, params in by_id:
        reached = scanned(sql, params)
        assert reached, sql
        assert reached <= wanted, (reached - wanted, sql)
    return [sql for sql, _params in by_id]


def test_the_hot_path_on_a_partitioned_ledger_bounds_every_statement_by_id(
    partitions: list[str], statements: Statements, built_index: DueIndex
) -> None:
    # Runs whose process died before their hand-off, for a take-over.
    make_due(3)
    resync_schedules()
    gone = Claimer(worker_id="gone", lease_seconds=0.2, index=built_index)
    batch, token = gone.claim(10)
    left, _ = gone.commit(gone.recheck(batch), token)
    assert len(left) == 3
    time.sleep(0.3)  # past their lease
    # Fresh ones due now, one of which fails and is missed (its grace): the failed run's
    # own write, and the missed-run check's.
    make_due(4)
    failing = make_schedule(
        task="tests.boom",
        next_run_at=timezone.now() - timedelta(seconds=5),
        grace=timedelta(seconds=1),
    )
    resync_schedules()
    worker = Worker(worker_id="t", lease_seconds=30)

    with statements.on():
        worker.step()  # the claim, its dispatch and outcomes, and the take-over of the three

    runs = Run.objects.all()
    assert runs.count() == 8
    assert dict(runs.values_list("schedule_id", "status")).pop(failing.pk) == "failed"
    assert runs.filter(status="succeeded").count() == 7
    assert runs.filter(pk__in=[o.run_id for o in left], status="succeeded").count() == 3
    # A batch that waited in its lane past a third of its lease: renewed before dispatch.
    make_due(2)
    resync_schedules()
    batch, token = worker.claimer.claim(10)
    waited, _ = worker.claimer.commit(worker.claimer.recheck(batch), token)
    with statements.on(), worker.stages():
        worker.lanes.put(Leased(waited, token, leased_at=0.0, counted=True))
        worker.drain()
    assert runs.filter(status="succeeded").count() == 9
    # The failed run's grace has passed: missed (by the check between the passes, or this).
    with statements.on():
        alerts.check(timezone.now() + timedelta(minutes=1))
    assert runs.get(schedule=failing).missed_at is not None

    sent = assert_each_by_id_statement_is_bounded(
        statements, partitions, list(runs.values_list("scheduled_for", flat=True))
    )
    # Among them: the check before dispatch, a renewal, a take-over, the outcomes, a failed
    # run's own write, the missed-run mark.
    assert any('"trigger"' in sql and "unnest" in sql for sql in sent)
    assert any(re.search(r'SET "lease_expires_at" = %s WHERE', sql) for sql in sent)
    assert any('SET "status" = %s, "claim_token" = %s' in sql for sql in sent)
    assert any('SET "status" = %s, "dispatched_at" = %s, "finished_at"' in sql for sql in sent)
    assert any('"id" = %s' in sql for sql in sent)
    assert any('"missed_at" = %s' in sql for sql in sent)


def test_a_batch_whose_runs_lie_days_apart_is_found_and_written_whole(
    partitions: list[str], statements: Statements, built_index: DueIndex
) -> None:
    """Catch-up fires a schedule's occurrences of the last days in one batch: its span
    covers them all, across partitions, and each run is handed off and recorded."""
    now = timezone.now().replace(microsecond=0)
    schedule = make_schedule(
        task="tests.record",
        interval=timedelta(days=1),
        catch_up="all",
        catch_up_window=timedelta(days=5),
        next_run_at=now - timedelta(days=4, seconds=5),
    )
    # And runs queued by hand days apart, taken over together.
    queued = make_schedule(task="tests.record", next_run_at=now + timedelta(hours=1))
    moments = [now - timedelta(days=d, hours=1) for d in (5, 2, 0)]
    ledger.queue(
        queued, moments, trigger="backfill", note="", now=now, worker_id="t", using="default"
    )
    worker = Worker(worker_id="t", lease_seconds=30)

    with statements.on():
        worker.step()

    runs = Run.objects.order_by("scheduled_for")
    fired = list(runs.filter(schedule=schedule).values_list("scheduled_for", "status"))
    assert [at for at, _status in fired] == [
        now - timedelta(days=d, seconds=5) for d in (4, 3, 2, 1, 0)
    ]
    assert {status for _at, status in fired} == {"succeeded"}
    backfilled = list(runs.filter(schedule=queued).values_list("status", flat=True))
    assert backfilled == ["succeeded"] * 3
    times = list(runs.values_list("scheduled_for", flat=True))
    assert len(days_of(times)) >= 6  # the batches' runs lie in many partitions
    assert_each_by_id_statement_is_bounded(statements, partitions, times)
