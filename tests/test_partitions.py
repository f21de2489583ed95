"""The ledger partitioned by day on PostgreSQL (``operations/partitions.py``, ``manage.py
partition_runs``): the conversion both ways keeps every run, its id and the schema the
migrations made; the unique (schedule, nominal time) key holds across partitions; days are
made ahead and dropped whole by retention under its one rule, with nothing fired twice.

Retention's rules on the partitioned layout are the ``layout`` parameter of
``test_retention.py``; here is what belongs to partitions alone."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from django_schedulinator import services
from django_schedulinator.errors import PrunedRange
from django_schedulinator.models import PrunedRuns, Run, Schedule, spans
from django_schedulinator.operations import partitions, retention

from .models import Delivery
from .support.commits import committed
from .support.schedules import make_schedule, model_fields
from .support.simulation import START, Simulation, fired

on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the ledger is partitioned on PostgreSQL only"
)
TODAY = date(2026, 3, 27)
DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def forget_the_layout() -> Iterator[None]:
    """A test's rollback makes the ledger plain again: this process's connections ask."""
    yield
    spans.forget_partitioning()


def at(day: date, hour: int = 12) -> datetime:
    return partitions.start_of(day) + timedelta(hours=hour)


def add_run(schedule: Schedule, nominal: datetime, **fields: Any) -> Run:
    fields.setdefault("status", Run.Status.SUCCEEDED)
    fields.setdefault("claimed_at", nominal)
    return Run.objects.create(
        schedule=schedule, scheduled_for=nominal, task=schedule.task, worker_id="tests", **fields
    )


def where(run_id: int) -> str:
    """The partition that holds a run."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text FROM {partitions.table()} WHERE id = %s", [run_id]
        )
        return str(cursor.fetchone()[0])


def schema() -> dict[str, Any]:
    """The ledger's indexes, constraints and identity, as the catalog says."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [partitions.table()]
        )
        indexes = dict(cursor.fetchall())
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = to_regclass(%s)",
            [partitions.table()],
        )
        constraints = dict(cursor.fetchall())
        cursor.execute(
            "SELECT relkind, pg_get_serial_sequence(relname, 'id') FROM pg_class "
            "WHERE oid = to_regclass(%s)",
            [partitions.table()],
        )
        kind, sequence = cursor.fetchone()
    return {"indexes": indexes, "constraints": constraints, "kind": kind, "seq": sequence}


@on_postgresql
@pytest.mark.django_db
def test_partitioned_and_back_every_run_keeps_its_id_and_the_schema_is_the_migrations() -> None:
    schedule = make_schedule("daily")
    old = add_run(schedule, at(TODAY - 30 * DAY))  # before the partitions: the default one
    recent = [add_run(schedule, at(TODAY - n * DAY)) for n in (2, 1, 0)]
    migrated = schema()

    done = partitions.partition(today=TODAY, days_behind=3, days_ahead=2, using="default")

    assert done.runs == 4
    layout = partitions.layout("default")
    assert layout is not None
    assert layout.days == tuple(TODAY + n * DAY for n in range(-3, 3))
    assert where(old.pk) == partitions.default_name()
    assert [where(r.pk) for r in recent] == [
        partitions.partition_name(TODAY - n * DAY) for n in (2, 1, 0)
    ]
    assert set(Run.objects.values_list("pk", flat=True)) == {old.pk, *(r.pk for r in recent)}
    # Ids go on from the last one; the key holds across partitions.
    newer = add_run(schedule, at(TODAY + DAY))
    assert newer.pk > max(r.pk for r in recent)
    with pytest.raises(IntegrityError), transaction.atomic():
        add_run(schedule, at(TODAY - 30 * DAY))
    with pytest.raises(IntegrityError), transaction.atomic():
        add_run(schedule, at(TODAY))

    back = partitions.unpartition(using="default")

    assert back.runs == 5
    assert partitions.layout("default") is None
    assert schema() == migrated
    assert add_run(schedule, at(TODAY + 2 * DAY)).pk > newer.pk
    with pytest.raises(IntegrityError), transaction.atomic():
        add_run(schedule, at(TODAY))


@on_postgresql
@pytest.mark.django_db
def test_days_ahead_are_made_and_take_their_runs_out_of_the_default_partition() -> None:
    schedule = make_schedule("daily")
    partitions.partition(today=TODAY, days_behind=0, days_ahead=0, using="default")
    later = add_run(schedule, at(TODAY + 2 * DAY), status=Run.Status.PENDING)
    assert where(later.pk) == partitions.default_name()

    made = partitions.ensure_days(today=TODAY, days_ahead=3, using="default")

    assert made == [TODAY + n * DAY for n in (1, 2, 3)]
    assert where(later.pk) == partitions.partition_name(TODAY + 2 * DAY)
    assert partitions.ensure_days(today=TODAY, days_ahead=3, using="default") == []


@on_postgresql
@pytest.mark.django_db
def test_a_dropped_day_records_what_went_and_a_backfill_over_it_is_refused() -> None:
    schedule = services.create(model_fields(name="hourly", cron="0 * * * *", timezone="UTC"))
    Schedule.objects.filter(pk=schedule.pk).update(fired_through=at(TODAY, 11))
    partitions.partition(today=TODAY, days_behind=5, days_ahead=1, using="default")
    gone_day = TODAY - 3 * DAY
    for hour in range(24):
        add_run(schedule, at(gone_day, hour), claimed_at=at(gone_day, hour))
    newest = add_run(schedule, at(TODAY, 10))
    pending = add_run(schedule, at(gone_day - DAY, 5), status=Run.Status.PENDING)

    report = retention.prune(now=at(TODAY), run_age=2 * DAY, keep_last=1)

    assert (report.runs, report.days) == (24, 3)

    layout = partitions.layout("default")
    assert layout is not None
    # Three days dropped (a day's every nominal time 2 days old), three made ahead.
    assert layout.days == tuple(TODAY + n * DAY for n in range(-2, 4))
    assert set(Run.objects.values_list("pk", flat=True)) == {newest.pk, pending.pk}
    assert where(pending.pk) == partitions.default_name()  # moved out of its dropped day
    with connection.cursor() as cursor:  # the dropped days' tables are gone, not detached
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname LIKE %s",
                       [f"{partitions.table()}%{gone_day:%Y%m%d}"])  # fmt: skip
        assert cursor.fetchone() == (0,)
    pruned = PrunedRuns.objects.get(schedule=schedule)
    assert (pruned.through, pruned.runs) == (at(gone_day, 23), 24)
    with pytest.raises(PrunedRange):
        services.backfill(schedule, at(gone_day, 0), at(gone_day, 23))


@on_postgresql
@pytest.mark.django_db
def test_the_command_converts_says_what_it_did_and_undoes() -> None:
    out = io.StringIO()
    call_command("partition_runs", "--days-behind", "2", "--days-ahead", "1", stdout=out)
    assert "The ledger is partitioned by day: 4 partition(s)" in out.getvalue()
    assert "Restart the schedulers" in out.getvalue()
    assert "Undo with 'manage.py partition_runs --undo'" in out.getvalue()
    with pytest.raises(CommandError, match="partitioned already"):
        call_command("partition_runs")
    out = io.StringIO()
    call_command("partition_runs", "--undo", stdout=out)
    assert "The ledger is one table again: 0 run(s) copied from 4 day partition(s)" in (
        out.getvalue()
    )
    with pytest.raises(CommandError, match="not partitioned"):
        call_command("partition_runs", "--undo")


@pytest.mark.skipif(connection.vendor == "postgresql", reason="the message of other databases")
@pytest.mark.django_db
def test_the_command_elsewhere_says_partitioning_needs_postgresql() -> None:
    with pytest.raises(CommandError, match="partitioning needs PostgreSQL; the database"):
        call_command("partition_runs")
    assert partitions.layout("default") is None


# -- exactly once, days dropped beside a scheduler ------------------------------------------------


@pytest.fixture
def partitioned_sim(sim: Simulation) -> Iterator[Simulation]:
    """A simulation on a partitioned ledger (committed DDL: undone after the test)."""
    partitions.partition(today=START.date(), days_behind=1, days_ahead=5, using="default")
    try:
        yield sim
    finally:
        partitions.unpartition(using="default")


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_days_dropped_under_a_running_scheduler_fire_nothing_twice_or_lose_any(
    partitioned_sim: Simulation,
) -> None:
    """Issue 32's retention cases, a day at a time: an hourly schedule and a one-off run for
    three days; a backfill puts runs ahead of the hourly's mark; days are dropped as they
    pass. After a pause and a resume, a run now and the rest of the days, every occurrence
    ran once, the one-off's own run stayed, and a backfill over a dropped day is refused."""
    sim = partitioned_sim
    with committed():
        hourly = services.create(model_fields(name="hourly", cron="0 * * * *", timezone="UTC"))
        once = services.create(
            model_fields(name="once", kind="once", cron="", run_at=START + timedelta(minutes=5))
        )
    sim.run_until(START + 2 * DAY)
    services.pause(hourly)
    sim.at(START + 2 * DAY + timedelta(hours=6, minutes=30))
    with committed():
        services.backfill(hourly, START + 2 * DAY, START + 2 * DAY + timedelta(hours=6))
    sim.step()
    for day in range(3, 6):
        if day == 3:
            sim.at(START + day * DAY)
        else:
            sim.run_until(START + day * DAY)
        with committed():
            call_command("prune_runs", "--older-than", "1d", "--keep-last", "1", "--no-progress",
                         stdout=io.StringIO())  # fmt: skip
        if day == 3:
            services.resume(hourly)
            services.pause(once)
            services.resume(once)
            with committed():
                services.run_now(hourly)
    sim.run_until(START + 5 * DAY + timedelta(hours=12))

    layout = partitions.layout("default")
    assert layout is not None
    assert min(layout.days) == (START + 4 * DAY).date()
    ran = Counter(
        Delivery.objects.filter(schedule_id=hourly.pk).values_list("scheduled_for", flat=True)
    )
    assert {at: n for at, n in ran.items() if n > 1} == {}
    backfilled = {START + 2 * DAY + timedelta(hours=h) for h in range(7)}
    after_resume = {START + 3 * DAY + timedelta(hours=h) for h in range(1, 2 * 24 + 13)}
    assert backfilled | after_resume <= set(ran)
    assert fired(once) == [START + timedelta(minutes=5)]
    assert Delivery.objects.filter(schedule_id=once.pk).count() == 1
    assert PrunedRuns.objects.get(schedule=hourly).through >= START + 2 * DAY
    with pytest.raises(PrunedRange):
        services.backfill(hourly, START, START + DAY)
