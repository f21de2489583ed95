"""Retention (``django_schedulinator/operations/retention.py``, ``manage.py prune_runs`` and the
schedulers' prune chore): old finished runs and change log entries go, in bounded batches;
unfinished runs, each schedule's newest runs and what the app still reads stay."""

from __future__ import annotations

import io
import itertools
import json
import logging
import signal
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection, connections, transaction
from django.utils import timezone

from django_schedulinator import outcomes, services
from django_schedulinator.conf import app_settings
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import PrunedRuns, Run, Schedule, ScheduleChange, spans
from django_schedulinator.operations import alerts, partitions, retention
from django_schedulinator.operations.retention import Pruner, PruneReport, parse_age, prune
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.services import ledger
from django_schedulinator.timing import truncate_ms

from .models import Delivery
from .support.processes import Schedulers, output, subprocess_env, wait_for
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db

NOW = truncate_ms(timezone.now())
DAY = timedelta(days=1)


def add_runs(schedule: Schedule, count: int, **fields: Any) -> list[Run]:
    """``count`` runs of ``schedule`` written in bulk, one a minute back from ``first``
    (default: a year ago), succeeded and recorded ``recorded`` ago (default: 60 days), in
    the order given (their ids grow with it)."""
    first = fields.pop("first", NOW - 365 * DAY)
    recorded = NOW - fields.pop("recorded", 60 * DAY)
    fields.setdefault("status", Run.Status.SUCCEEDED)
    fields.setdefault("worker_id", "tests")
    fields.setdefault("claimed_at", recorded)
    if fields["status"] in ("succeeded", "failed"):
        fields.setdefault("finished_at", recorded)
    runs = [
        Run(
            schedule=schedule,
            scheduled_for=first - timedelta(minutes=i),
            task=schedule.task,
            claim_token="t",
            **fields,
        )
        for i in range(count)
    ]
    Run.objects.bulk_create(runs)
    return list(Run.objects.filter(schedule=schedule).order_by("pk"))[-count:]


def idle_schedule(**fields: Any) -> Schedule:
    """A schedule that does not fire during the test, created through the services (the
    change log records it)."""
    return services.create(
        {
            "name": f"idle-{uuid.uuid4().hex[:10]}",
            "task": "tests.record",
            "kind": "interval",
            "interval": DAY,
            "next_run_at": NOW + 30 * DAY,
            **fields,
        }
    )


def left(schedule: Schedule) -> list[datetime]:
    return sorted(Run.objects.filter(schedule=schedule).values_list("scheduled_for", flat=True))


@pytest.fixture(params=["plain", "partitioned"])
def layout(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each rule of retention holds on both layouts of the ledger: a plain table (the
    walk deletes), and one partitioned by day on PostgreSQL (expired days are dropped whole,
    what must stay moved out first; older runs are in the default partition, walked). The
    conversion is DDL in the test's transaction: rolled back with it."""
    if request.param == "partitioned":
        if connection.vendor != "postgresql":
            pytest.skip("the ledger is partitioned on PostgreSQL only")
        partitions.partition(today=NOW.date(), days_behind=120, days_ahead=3, using="default")
    yield str(request.param)
    spans.forget_partitioning()  # the test's rollback made the ledger plain again


def prune_now(**options: Any) -> PruneReport:
    options.setdefault("run_age", 30 * DAY)
    options.setdefault("keep_last", 1)
    return prune(now=NOW, **options)


# -- ages -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30d", 30 * DAY), ("12h", timedelta(hours=12)), ("90m", timedelta(minutes=90)),
     ("3600s", timedelta(hours=1)), (" 7d ", 7 * DAY), ("36500d", 36_500 * DAY)],
)  # fmt: skip
def test_an_age_is_a_whole_number_and_a_unit(text: str, expected: timedelta) -> None:
    assert parse_age(text) == expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("30", "is not an age: give a whole number and a unit"),
        ("30x", "is not an age"),
        ("1.5d", "is not an age"),
        ("-3d", "is not an age"),
        ("d", "is not an age"),
        ("", "is not an age"),
        ("0s", "must be from 1 second to 36500 days"),
        ("36501d", "must be from 1 second to 36500 days"),
        ("9" * 40 + "d", "must be from 1 second to 36500 days"),
    ],
)
def test_a_bad_age_says_what_an_age_is(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_age(text)


# -- what goes and what stays ---------------------------------------------------------------


def test_a_failed_run_whose_grace_has_not_ended_stays_until_its_alert_is_raised(
    layout: str,
) -> None:
    """Issue 32, item 15: a grace may be up to 31 days and retention 30. A run that failed
    30.5 days ago, its alert due tomorrow, is not done: the prune keeps it, and the check
    raises it once its grace ends; then it may go."""
    schedule = idle_schedule(grace=31 * DAY)
    add_runs(schedule, 1, first=NOW)  # the newest, kept anyway: out of the way
    [failed] = add_runs(
        schedule,
        1,
        status="failed",
        first=NOW - 30 * DAY - 12 * timedelta(hours=1),
        recorded=30 * DAY + 12 * timedelta(hours=1),
    )
    Run.objects.filter(pk=failed.pk).update(alert_at=failed.scheduled_for + 31 * DAY)

    assert prune_now().runs == 0
    assert Run.objects.filter(pk=failed.pk).exists()

    [missed] = alerts.check(NOW + 2 * DAY)
    assert (missed.run_id, missed.reason) == (failed.pk, "failed")
    assert prune_now().runs == 1  # raised: nothing waits for it any more


def test_unfinished_runs_are_never_deleted(layout: str) -> None:
    schedule = idle_schedule()
    newest = add_runs(schedule, 1, first=NOW)  # kept as the newest: out of the way
    gone = {
        status: add_runs(schedule, 1, status=status, first=NOW - 300 * DAY - i * DAY)[0]
        for i, status in enumerate(("succeeded", "failed", "skipped"))
    }
    staying = {
        status: add_runs(schedule, 1, status=status, first=NOW - 200 * DAY - i * DAY)[0]
        for i, status in enumerate(("pending", "running", "buffered"))
    }
    # Handed off 60 days ago: its outcome still awaited (due tomorrow), overdue, or never
    # expected (a dispatcher that does not learn outcomes).
    awaited, overdue, unreported = (
        add_runs(
            schedule,
            1,
            status="dispatched",
            dispatched_at=NOW - 60 * DAY,
            outcome_due_by=due_by,
            first=NOW - 100 * DAY - i * DAY,
        )[0]
        for i, due_by in enumerate((NOW + DAY, NOW - DAY, None))
    )

    report = prune_now()

    assert report.runs == 5
    remaining = set(Run.objects.values_list("pk", flat=True))
    assert remaining == {newest[0].pk, awaited.pk, *(r.pk for r in staying.values())}
    assert not {overdue.pk, unreported.pk, *(r.pk for r in gone.values())} & remaining


def test_each_schedule_keeps_its_newest_runs_by_nominal_time(layout: str) -> None:
    """Its newest runs are the latest occurrences, whatever the order they entered the
    ledger in (a backfill writes older occurrences after newer ones)."""
    a, b, few = idle_schedule(), idle_schedule(), idle_schedule()
    add_runs(a, 10, first=NOW - 100 * DAY)
    add_runs(a, 10, first=NOW - 50 * DAY)  # written after older ones... newer
    add_runs(a, 10, first=NOW - 200 * DAY)  # ...and older ones after them
    add_runs(b, 30, first=NOW - 100 * DAY)
    add_runs(few, 3, first=NOW - 100 * DAY)
    expected = {s.pk: left(s)[-5:] for s in (a, b, few)}

    report = prune_now(keep_last=5)

    assert report.runs == 25 + 25
    assert {s.pk: left(s) for s in (a, b, few)} == expected
    assert prune_now(keep_last=5).runs == 0


def test_a_runs_age_is_when_it_was_recorded_not_its_nominal_time(layout: str) -> None:
    schedule = idle_schedule()
    add_runs(schedule, 1, first=NOW)  # the newest
    # A backfill of last year, run yesterday; one that entered the ledger long ago but
    # ended yesterday (a long task), or was handed off yesterday; one recorded 31 days ago.
    backfill = add_runs(schedule, 1, first=NOW - 365 * DAY, recorded=DAY)[0]
    long_task = add_runs(schedule, 1, first=NOW - 90 * DAY, recorded=60 * DAY)[0]
    Run.objects.filter(pk=long_task.pk).update(finished_at=NOW - DAY)
    handed_off = add_runs(
        schedule, 1, status="dispatched", first=NOW - 80 * DAY, dispatched_at=NOW - DAY
    )[0]
    old = add_runs(schedule, 1, first=NOW - 31 * DAY, recorded=31 * DAY)[0]
    skipped = add_runs(schedule, 1, status="skipped", first=NOW - 40 * DAY, recorded=40 * DAY)

    assert prune_now().runs == 2

    remaining = set(Run.objects.values_list("pk", flat=True))
    assert {backfill.pk, long_task.pk, handed_off.pk} <= remaining
    assert not {old.pk, skipped[0].pk} & remaining


def test_a_dry_run_counts_what_a_prune_deletes_and_deletes_nothing(layout: str) -> None:
    schedules = [idle_schedule() for _ in range(3)]
    for schedule in schedules:
        add_runs(schedule, 20)
        add_runs(schedule, 2, status="pending", first=NOW - 200 * DAY)
        add_runs(schedule, 5, recorded=DAY, first=NOW - 100 * DAY)
    for schedule in schedules:
        services.update(schedule, {"task": "tests.noop"})
    ScheduleChange.objects.update(at=NOW - 400 * DAY)
    before = (Run.objects.count(), ScheduleChange.objects.count())

    dry = prune_now(keep_last=3, change_age=365 * DAY, dry_run=True, batch_size=7)

    assert (Run.objects.count(), ScheduleChange.objects.count()) == before
    assert (dry.runs, dry.changes, dry.dry_run) == (60, 0, True)
    real = prune_now(keep_last=3, change_age=365 * DAY, batch_size=7)
    assert (real.runs, real.changes) == (dry.runs, dry.changes)
    assert Run.objects.count() == before[0] - 60


def test_batches_are_bounded_and_the_walk_stops_after_the_old_rows() -> None:
    schedule = idle_schedule()
    add_runs(schedule, 103, first=NOW - 100 * DAY)
    add_runs(schedule, 40, recorded=DAY, first=NOW)  # newer than the cutoff: never read
    batches: list[PruneReport] = []

    report = prune(now=NOW, run_age=30 * DAY, keep_last=1, batch_size=10, progress=batches.append)

    assert report.runs == 103
    assert all(b.read <= 10 and b.runs <= 10 for b in batches)
    # Eleven batches of old rows (the last one reaching the new rows), and one of new rows
    # that ends the walk: the 40 rows after the cutoff are read at most that far.
    assert len(batches) == report.batches == 12
    assert report.read <= 103 + 7 + 10


def test_a_prune_in_slices_goes_on_where_it_stopped() -> None:
    schedule = idle_schedule()
    add_runs(schedule, 50)
    pruner = Pruner(now=NOW, run_age=30 * DAY, keep_last=1, batch_size=10)

    slices = []
    while not pruner.caught_up:
        slices.append(pruner.step(max_seconds=0))  # one batch each

    # The newest run is the first written: the walk keeps it, and ends on an empty batch.
    assert [s.runs for s in slices] == [9, 10, 10, 10, 10, 0]
    assert pruner.total.runs == 49
    assert left(schedule) == [NOW - 365 * DAY]


def test_a_skipped_run_a_backfill_queues_meanwhile_is_not_deleted(
    monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """The DELETE states again which rows may go: a skipped run turned into a pending one
    between the read of its batch and the delete stays, and is dispatched."""
    schedule = idle_schedule()
    add_runs(schedule, 1, first=NOW)
    skipped = add_runs(schedule, 3, status="skipped", first=NOW - 90 * DAY)
    kept_from_of = Pruner._kept_from_of

    def backfill_meanwhile(self: Pruner, schedule_ids: Any) -> Any:
        ledger.requeue_skipped(
            schedule,
            [skipped[1].scheduled_for],
            trigger="backfill",
            note="",
            now=timezone.now(),
            using="default",
        )
        return kept_from_of(self, schedule_ids)

    monkeypatch.setattr(Pruner, "_kept_from_of", backfill_meanwhile)

    assert prune_now().runs == 2
    assert Run.objects.get(pk=skipped[1].pk).status == Run.Status.PENDING


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_prune_keeps_the_failures_in_a_row(settings: Any, built_index: DueIndex) -> None:
    """A schedule's failures in a row were counted from its newest ended runs in the ledger,
    and fewer than ten of them, all failed, meant no older run: after a prune, four
    failures and one more counted two, and ``pause_after_failures=5`` never paused."""
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "queue": {"BACKEND": "tests.support.dispatchers.HandOff", "OPTIONS": {"REPORTS": True}}
        },
    }
    schedule = make_schedule(
        kind="cron", cron="* * * * *", dispatcher="queue", pause_after_failures=5
    )
    this_minute = timezone.now().replace(second=0, microsecond=0)
    services.backfill(
        schedule, this_minute - timedelta(minutes=6), this_minute - timedelta(minutes=1)
    )
    Worker(worker_id="t").step()  # hands the backfill off
    runs = list(Run.objects.filter(schedule=schedule).order_by("scheduled_for"))
    for run in runs[:4]:
        assert outcomes.report_finished(run.idempotency_key, succeeded=False, error="boom")
    schedule.refresh_from_db()
    assert schedule.failure_streak == 4
    Run.objects.filter(pk__in=[r.pk for r in runs[:4]]).update(
        claimed_at=NOW - 60 * DAY, finished_at=NOW - 60 * DAY
    )
    assert prune(now=timezone.now(), run_age=30 * DAY, keep_last=1).runs == 4

    assert outcomes.report_finished(runs[4].idempotency_key, succeeded=False, error="boom")

    schedule.refresh_from_db()
    assert (schedule.failure_streak, schedule.enabled) == (5, False)


# -- the change log -------------------------------------------------------------------------


def test_the_change_log_keeps_each_schedules_creation_and_newest_entry() -> None:
    kept = idle_schedule()
    services.update(kept, {"task": "tests.noop"})
    services.update(kept, {"task": "tests.record"})
    services.pause(kept, "for the test")
    gone = idle_schedule()
    services.update(gone, {"task": "tests.noop"})
    services.delete(gone)
    ScheduleChange.objects.update(at=NOW - 400 * DAY)
    recent = idle_schedule()
    services.update(recent, {"task": "tests.noop"})
    assert ScheduleChange.objects.filter(schedule=kept).count() == 4

    report = prune_now(run_age=None, change_age=365 * DAY)

    assert report.changes == 2 + 3  # kept's two changes; all three of the deleted one's
    actions = lambda s: sorted(  # noqa: E731
        ScheduleChange.objects.filter(schedule=s).values_list("action", flat=True)
    )
    assert actions(kept) == ["created", "paused"]
    assert actions(recent) == ["changed", "created"]
    assert not ScheduleChange.objects.filter(schedule_name=gone.name).exists()


# -- the command ----------------------------------------------------------------------------


def command(*args: str, **options: Any) -> str:
    out = io.StringIO()
    call_command("prune_runs", *args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def test_the_command_prunes_and_says_what_it_did() -> None:
    schedule = idle_schedule()
    add_runs(schedule, 12)
    ScheduleChange.objects.update(at=NOW - 400 * DAY)
    services.update(schedule, {"task": "tests.noop"})  # now the newest: the creation stays

    dry = command("--older-than", "30d", "--keep-last", "2", "--dry-run", "--no-progress")
    assert dry.startswith("Would delete 10 run(s) recorded before ")
    assert "keeping each schedule's newest 2, every run not finished, and every run" in dry
    assert Run.objects.count() == 12

    out = command(
        "--older-than", "30d", "--keep-last", "2", "--changes-older-than", "365d",
        "--batch-size", "5", "--no-progress",
    )  # fmt: skip
    assert out.startswith("Deleted 10 run(s) recorded before ")
    assert ", and 0 change log entries older than " in out
    assert "in 4 batch(es)" in out  # three of the old runs, one of the change log
    assert Run.objects.count() == 2


def test_the_command_keeps_the_settings_newest_runs_by_default(settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "RUN_KEEP_LAST": 4}
    schedule = idle_schedule()
    add_runs(schedule, 12)
    command("--older-than", "12h", "--no-progress")
    assert len(left(schedule)) == 4


def test_the_command_prunes_what_the_retention_settings_say_by_default(settings: Any) -> None:
    def retention(days: int) -> None:
        settings.SCHEDULINATOR = {
            **settings.SCHEDULINATOR,
            "RUN_RETENTION_SECONDS": days * 86_400,
            "CHANGE_RETENTION_SECONDS": 400 * 86_400,
            "RUN_KEEP_LAST": 4,
        }

    add_runs(idle_schedule(), 12)  # recorded 60 days ago
    retention(90)
    dry = command("--dry-run", "--no-progress")  # no age given: the settings'
    assert dry.startswith("Would delete 0 run(s) recorded before ")
    assert " change log entr" in dry  # the change log's retention too
    retention(30)
    assert command("--dry-run", "--no-progress").startswith("Would delete 8 run(s) ")
    assert Run.objects.count() == 12


def test_the_command_asks_for_an_age_when_retention_is_off(settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "RUN_RETENTION_SECONDS": None}
    with pytest.raises(CommandError, match="Give --older-than: the schedulers' retention is off"):
        command("--dry-run", "--no-progress")


# -- the settings ---------------------------------------------------------------------------


def test_retention_is_on_by_default() -> None:
    assert app_settings.RUN_RETENTION_SECONDS == 30 * 86_400
    assert app_settings.CHANGE_RETENTION_SECONDS == 365 * 86_400
    assert app_settings.RUN_KEEP_LAST == 10
    assert 1 <= app_settings.PRUNE_BATCH_SIZE <= 10_000


@pytest.mark.django_db(transaction=True)  # the prune's thread reads what this one wrote
def test_retention_switched_off_prunes_nothing(settings: Any, built_index: DueIndex) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "RUN_RETENTION_SECONDS": None,
        "CHANGE_RETENTION_SECONDS": None,
    }
    add_runs(idle_schedule(), 5)
    assert Pruner.from_settings(NOW) is None
    worker, other = Worker(index=built_index), Worker(index=built_index)
    worker.chores.next_prune = 0
    worker.chores.run()
    assert worker.chores.prune_thread is None
    assert Run.objects.count() == 5

    # No turn was taken while it was off: switched on, the next period prunes at once.
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "RUN_RETENTION_SECONDS": 86_400,
        "RUN_KEEP_LAST": 1,
    }
    other.chores.next_prune = 0
    other.chores.run()
    assert other.chores.prune_thread is not None
    other.chores.prune_thread.join(60)
    assert Run.objects.count() == 1
    for w in (worker, other):
        w.close()


# -- the schedulers' chore ------------------------------------------------------------------


@pytest.fixture
def small_slices(settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "RUN_RETENTION_SECONDS": 30 * 86_400,
        "RUN_KEEP_LAST": 2,
        "PRUNE_BATCH_SIZE": 5,
        "PRUNE_MAX_SECONDS": 1e-6,  # one batch a slice: count them
    }


@pytest.mark.django_db(transaction=True)  # the prune's thread reads what this one wrote
@pytest.mark.usefixtures("small_slices")
def test_the_chore_prunes_on_a_thread_of_its_own_until_it_has_caught_up(
    built_index: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    schedules = [idle_schedule() for _ in range(3)]
    for schedule in schedules:
        add_runs(schedule, 9)
    worker, other = Worker(index=built_index), Worker(index=built_index)
    worker.chores.next_prune = other.chores.next_prune = 0

    with caplog.at_level(logging.INFO, logger="django_schedulinator"):
        worker.chores.run()  # takes the period's turn, and returns: the thread prunes
        other.chores.run()  # does not: one prune per period across the schedulers
        assert worker.chores.prune_thread is not None
        worker.chores.prune_thread.join(60)

    assert other.chores.prune_thread is None
    assert other.counters.pruned == 0
    assert worker.chores.prune_thread.pruner.total.batches >= 5  # 27 rows, five a batch
    assert worker.counters.pruned == 21
    assert [len(left(s)) for s in schedules] == [2, 2, 2]
    assert "Pruned 21 run(s) and 0 change log entries past their retention" in caplog.text
    for w in (worker, other):
        w.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("small_slices")
def test_a_failed_prune_starts_again_at_the_next_period(
    built_index: DueIndex, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    add_runs(idle_schedule(), 20)
    worker = Worker(index=built_index)
    worker.chores.next_prune = 0

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(retention.Pruner, "_run_batch", broken)
    worker.chores.run()  # must not raise: the loop goes on
    assert worker.chores.prune_thread is not None
    worker.chores.prune_thread.join(60)

    assert not worker.chores.prune_thread.running  # not tried again after every pass
    assert "The prune failed; the next period tries again." in caplog.text
    assert Run.objects.count() == 20
    worker.close()


# -- a large ledger pruned beside a running scheduler ------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.subprocess
@pytest.mark.parametrize("pruned_by", ["scheduler", "command"])
def test_a_large_ledger_is_pruned_beside_a_scheduler_that_keeps_firing(
    pruned_by: str, built_index: DueIndex, schedulers: Schedulers, key_prefix: str
) -> None:
    """40,000 runs that ended 60 days ago, pruned by the running scheduler's own retention
    (on a thread of its own) or by ``prune_runs`` beside it, while five schedules
    fire every second: each of their occurrences fires once, none early, none missing, and
    the ledger keeps each idle schedule's newest runs."""
    firing = [
        services.create(
            {
                "name": f"every-second-{i}",
                "task": "tests.record",
                "kind": "interval",
                "interval": timedelta(seconds=1),
                "catch_up": "all",  # a late scheduler fires each occurrence, none skipped
                "catch_up_window": timedelta(hours=1),
            }
        )
        for i in range(5)
    ]
    idle = [idle_schedule() for _ in range(100)]
    # Written before anything fires, as a ledger grows: the old runs have the lower ids.
    for schedule in idle:
        add_runs(schedule, 300, worker_id="old")
    for schedule in firing:
        add_runs(schedule, 2000, worker_id="old")
    before = Run.objects.count()
    assert before == 40_000
    retention_settings = {
        "RUN_RETENTION_SECONDS": 86_400 if pruned_by == "scheduler" else None,
        "RUN_KEEP_LAST": 5,
        "CHANGE_RETENTION_SECONDS": None,
        "PRUNE_SECONDS": 1,
        "PRUNE_BATCH_SIZE": 500,
        "PRUNE_MAX_SECONDS": 0.02,
    }
    env = subprocess_env(key_prefix, SCHEDULINATOR_TEST_SETTINGS=json.dumps(retention_settings))
    proc = schedulers.start("--max-seconds", "180", env=env)

    def firing_for_a_while() -> bool:
        """each schedule to fire seven times"""
        return Delivery.objects.count() >= 5 * 7

    wait_for(firing_for_a_while, timeout=90)
    if pruned_by == "command":
        out = command("--older-than", "1d", "--keep-last", "5", "--batch-size", "500")
        assert out.startswith(f"Deleted {100 * 295 + 5 * 2000:,} run(s)"), out

    def pruned() -> bool:
        """the old runs to be pruned down to each idle schedule's newest five"""
        return Run.objects.filter(worker_id="old").count() == 100 * 5

    wait_for(pruned, timeout=120)
    fired_while_pruning = Delivery.objects.count()
    wait_for(lambda: Delivery.objects.count() >= fired_while_pruning + 10, timeout=60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, output(proc)

    assert Run.objects.count() < before / 10  # the ledger shrank
    for schedule in idle:
        assert left(schedule) == sorted(NOW - 365 * DAY - timedelta(minutes=i) for i in range(5))
    deliveries = {d.key: d for d in Delivery.objects.all()}
    assert len(deliveries) == Delivery.objects.count()  # none twice
    for schedule in firing:
        runs = list(Run.objects.filter(schedule=schedule).order_by("scheduled_for"))
        assert runs
        assert {r.status for r in runs} == {Run.Status.SUCCEEDED}
        # Every second from the first occurrence to the last: none missing.
        steps = {b.scheduled_for - a.scheduled_for for a, b in itertools.pairwise(runs)}
        assert steps <= {timedelta(seconds=1)}, steps
        for run in runs:
            delivery = deliveries.pop(run.idempotency_key)
            assert delivery.received_at >= run.scheduled_for  # never early
    assert deliveries == {}  # nothing delivered that the ledger does not hold


@pytest.mark.django_db(transaction=True)  # a second connection holds the lock
@pytest.mark.usefixtures("small_slices")
def test_a_prune_that_waits_on_a_row_lock_gives_way(
    built_index: DueIndex, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A transaction holding old runs (a schedule with millions of runs being deleted)
    makes the prune wait LOCK_TIMEOUT_SECONDS at most, like every statement of the loop;
    then it gives way until the next period, instead of failing the scheduler's pass."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks that SQLite has not")
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "LOCK_TIMEOUT_SECONDS": 0.2}
    runs = add_runs(idle_schedule(), 9)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(pk=runs[3].pk)
                locked.set()
                release.wait(60)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    worker = Worker(index=built_index)
    worker.chores.next_prune = 0
    try:
        assert locked.wait(30)
        with caplog.at_level(logging.INFO, logger="django_schedulinator"):
            worker.chores.run()  # must not raise
            assert worker.chores.prune_thread is not None
            worker.chores.prune_thread.join(60)  # its lock waits are bounded like the loop's
    finally:
        release.set()
        holder.join(60)
        worker.close()

    assert "The prune waited longer than LOCK_TIMEOUT_SECONDS on a row lock" in caplog.text
    assert Run.objects.count() == 9  # the batch with the locked row was not deleted


def test_a_prune_that_fails_part_way_says_what_it_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each batch is its own transaction: what was deleted before a database error stays
    deleted, and the command says how much, in one line, without a traceback."""
    add_runs(idle_schedule(), 12)
    run_batch = Pruner._run_batch
    batches = [0]

    def failing_on_the_third(self: Pruner, cutoff: datetime, report: PruneReport) -> None:
        batches[0] += 1
        if batches[0] == 3:
            raise OperationalError("server closed the connection unexpectedly")
        run_batch(self, cutoff, report)

    monkeypatch.setattr(Pruner, "_run_batch", failing_on_the_third)

    with pytest.raises(CommandError) as caught:
        command("--older-than", "30d", "--keep-last", "1", "--batch-size", "5", "--no-progress")

    assert str(caught.value) == (
        "Prune failed after deleting 9 run(s) and 0 change log entries, in whole batches; run "
        "it again. OperationalError: server closed the connection unexpectedly"
    )
    assert Run.objects.count() == 3


@pytest.mark.django_db(transaction=True)  # the delete holds its lock in a transaction of its own
def test_a_prune_beside_a_schedule_being_deleted_waits_for_it_and_leaves_it_out() -> None:
    """The prune records what it deleted per schedule (``PrunedRuns``, a foreign key to
    it): it takes a key share of the schedules' rows before it locks their runs, as a
    delete of a schedule locks the schedule, then its runs. So one waits for the other,
    never each for the other (a deadlock that failed the delete, or the prune)."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks that SQLite has not")
    doomed, kept = idle_schedule(), idle_schedule()
    add_runs(doomed, 5)
    add_runs(kept, 5)
    locked, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def delete() -> None:
        try:
            with transaction.atomic():
                Schedule.objects.select_for_update().get(pk=doomed.pk)  # as delete() begins
                locked.set()
                release.wait(30)
                services.delete(Schedule.objects.get(pk=doomed.pk))
        except BaseException as exc:  # the test's thread reports it
            failures.append(exc)
        finally:
            connections.close_all()

    deleter = threading.Thread(target=delete)
    deleter.start()
    assert locked.wait(30)
    pruning = threading.Thread(target=lambda: (prune_now(), connections.close_all()))
    pruning.start()
    pruning.join(1)
    assert pruning.is_alive()  # waits for the schedule being deleted
    release.set()
    deleter.join(30)
    pruning.join(30)
    assert failures == []
    assert not Schedule.objects.filter(pk=doomed.pk).exists()
    assert left(kept) == [max(left(kept))]  # kept's prune went on
    assert list(PrunedRuns.objects.values_list("schedule_id", "runs")) == [(kept.pk, 4)]
