"""Reconcile (``django_schedulinator/index/reconcile.py``, run by the scheduler's loop): it heals
index entries whose sync writes were lost, reading the rows changed since its watermark in
bounded slices, and tells a lost index from missed writes."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection, transaction
from django.utils import timezone

from django_schedulinator import resync_schedules, services, timing
from django_schedulinator.index import reconcile as reconcile_module
from django_schedulinator.index.due import DueIndex
from django_schedulinator.index.reconcile import lag, reconcile
from django_schedulinator.models import Schedule
from django_schedulinator.models.dbclock import DatabaseNow, database_now
from django_schedulinator.scheduler.worker import Worker

from .support.processes import wait_for
from .support.schedules import make_due, make_schedule
from .support.simulation import entry

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


@pytest.fixture
def settled_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows count as settled as soon as they commit (no ``SETTLE`` wait): for the tests of
    what reconcile does with the rows it reads, not of when it reads them."""
    monkeypatch.setattr(reconcile_module, "SETTLE", timedelta(0))


# -- lost sync writes -------------------------------------------------------------------------


@pytest.mark.usefixtures("settled_at_once")
def test_reconcile_heals_entries_whose_sync_writes_were_lost(built_index: DueIndex) -> None:
    missing = make_schedule()
    late = make_schedule()
    untouched = make_schedule()
    # What a lost write leaves behind: no entry at all, or the entry of an older version.
    built_index.client.zrem(built_index.due_key, missing.pk)
    built_index.client.hdel(built_index.revisions_key, missing.pk)
    built_index.client.zadd(built_index.due_key, {str(late.pk): 9_999_999_999_999})
    built_index.client.hset(built_index.revisions_key, late.pk, late.revision - 1)

    report = reconcile(built_index)

    assert report.healed == 2
    for schedule in (missing, late, untouched):
        assert entry(built_index, schedule) == timing.to_ms(schedule.next_run_at)
    assert reconcile(built_index).healed == 0
    # An entry whose revision landed is left alone, even if it is away (in flight) right now.
    built_index.client.zrem(built_index.due_key, untouched.pk)
    assert reconcile(built_index).healed == 0
    assert entry(built_index, untouched) is None


@pytest.mark.usefixtures("settled_at_once")
def test_reconcile_reads_bounded_batches_and_looks_back_for_late_commits(
    built_index: DueIndex,
) -> None:
    ids = make_due(5)  # bulk_create: no signals, no index entries, updated_at = now
    reports = [reconcile(built_index, batch_size=2, max_seconds=0) for _ in range(3)]
    assert [(r.rows, r.caught_up) for r in reports] == [(2, False), (2, False), (1, True)]
    assert all(v is not None for v in built_index.scores(ids).values())

    # A transaction that committed late carries an updated_at older than rows the leading
    # cursor already passed: the trailing cursor reads it once more, ``lookback`` after its
    # updated_at; a commit later than that only a rebuild finds.
    now = timezone.now()
    recent, ancient = make_due(2)
    Schedule.objects.filter(pk=recent).update(updated_at=now - timedelta(minutes=2))
    Schedule.objects.filter(pk=ancient).update(updated_at=now - timedelta(hours=2))
    reconcile(built_index, lookback=timedelta(minutes=5))
    assert built_index.scores([recent, ancient]) == {recent: None, ancient: None}
    reconcile(built_index, lookback=timedelta(minutes=1))  # two minutes on, say
    scores = built_index.scores([recent, ancient])
    assert scores[recent] is not None
    assert scores[ancient] is None


def lose_sync_write(index: DueIndex, schedule: Schedule) -> None:
    """What a sync write that never landed leaves behind: no entry, no revision recorded."""
    index.client.zrem(index.due_key, schedule.pk)
    index.client.hdel(index.revisions_key, schedule.pk)


@pytest.mark.usefixtures("settled_at_once")
def test_a_host_clock_ahead_does_not_blind_reconcile(built_index: DueIndex) -> None:
    # One save from a host whose clock runs an hour ahead of the others.
    with time_machine.travel(timezone.now() + timedelta(hours=1), tick=True):
        ahead = make_schedule()
    # It is stamped with the database's clock, not the host's.
    assert ahead.updated_at < timezone.now() + timedelta(minutes=1)
    ahead.refresh_from_db()
    assert ahead.updated_at < timezone.now() + timedelta(minutes=1)
    reconcile(built_index)
    # Later, a save from a host with a right clock whose sync write is lost.
    lost = make_schedule()
    lose_sync_write(built_index, lost)

    reconcile(built_index)

    assert entry(built_index, lost) == timing.to_ms(lost.next_run_at)


@pytest.mark.usefixtures("settled_at_once")
def test_rows_saved_with_a_future_updated_at_do_not_blind_reconcile(
    built_index: DueIndex,
) -> None:
    # A row written by a host whose clock ran ahead before the upgrade, or by a bulk write
    # that set updated_at from such a clock: the watermark must not follow it.
    ahead = make_schedule()
    Schedule.objects.filter(pk=ahead.pk).update(updated_at=timezone.now() + timedelta(hours=1))
    reconcile(built_index)
    lost = make_schedule()
    lose_sync_write(built_index, lost)

    reconcile(built_index)

    assert entry(built_index, lost) == timing.to_ms(lost.next_run_at)
    assert reconcile(built_index).healed == 0  # the future row is re-read, not re-healed


@pytest.mark.usefixtures("settled_at_once")
def test_reconcile_reads_a_backlog_slice_after_slice_until_it_has_caught_up(
    built_index: DueIndex, settings: Any
) -> None:
    """After a bulk write, reconcile read one batch per RECONCILE_SECONDS: a lost write
    behind 100,000 touched rows took 17 minutes to heal (issue 12, item 4). The scheduler
    holding the turn now reads a slice after each of its passes until it has caught up."""
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "RECONCILE_BATCH_SIZE": 5,
        "RECONCILE_MAX_SECONDS": 1e-6,  # every slice reads one batch: count them
    }
    reconcile(built_index)  # the watermark is now
    ids = make_due(60)
    resync_schedules(ids, index=built_index)
    # A bulk touch as docs/concepts.md advises: twelve batches of rows that need nothing.
    Schedule.objects.filter(pk__in=ids).update(updated_at=DatabaseNow())
    lost = make_schedule()
    lose_sync_write(built_index, lost)
    worker = Worker(index=built_index)

    slices = 0
    while entry(built_index, lost) is None and slices < 100:
        worker.chores.run()  # what the loop does after each pass
        slices += 1

    assert entry(built_index, lost) == timing.to_ms(lost.next_run_at)
    assert slices > 12  # one batch each, back to back, within one RECONCILE_SECONDS
    worker.chores.run()
    assert not worker.chores.reconcile_behind  # caught up: the next turn is a period away


@pytest.mark.usefixtures("settled_at_once")
def test_a_bulk_write_stamped_with_database_now_is_paged_through(built_index: DueIndex) -> None:
    reconcile(built_index)
    ids = make_due(12)  # bulk_create: no entries
    # The bulk path docs/concepts.md gives: one instant of the database's clock for every
    # row (on SQLite in the text Django writes, so the batches page through it).
    Schedule.objects.filter(pk__in=ids).update(updated_at=DatabaseNow())
    assert len(set(Schedule.objects.filter(pk__in=ids).values_list("updated_at"))) == 1

    reports = [reconcile(built_index, batch_size=5, max_seconds=0) for _ in range(3)]

    assert [(r.rows, r.caught_up) for r in reports] == [(5, False), (5, False), (2, True)]
    assert None not in built_index.scores(ids).values()


@pytest.mark.usefixtures("settled_at_once")
def test_reconcile_tells_a_lost_index_from_missed_sync_writes(
    built_index: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    older, new_a, new_b = make_schedule(), make_schedule(), make_schedule()
    reconcile(built_index)
    worker = Worker(once=True, index=built_index)
    # Redis lost its data (what FLUSHALL does to this index; the shared Redis is not
    # flushed): the claim rebuilds the index, and reconcile must not call that missed writes.
    built_index.drop()
    with caplog.at_level(logging.INFO, logger="django_schedulinator"):
        worker.chores.reconcile()
    assert "missed" not in caplog.text
    assert built_index.scores([older.pk, new_a.pk, new_b.pk]) == dict.fromkeys(
        [older.pk, new_a.pk, new_b.pk]
    )  # left to the rebuild

    # Built again, but with no record of two rows (new rows whose sync write was lost, or
    # entries lost with Redis's data) and an older revision of the third (a missed write).
    caplog.clear()
    built_index.mark_built({"by": "tests"})
    built_index.client.hset(built_index.revisions_key, older.pk, older.revision - 1)
    with caplog.at_level(logging.INFO, logger="django_schedulinator"):
        worker.chores.reconcile()
    assert "healed 1 index entry whose sync write had been missed" in caplog.text
    assert "indexed 2 schedules the index had no record of" in caplog.text


def test_a_write_on_its_way_after_its_commit_is_not_reported_as_missed(
    built_index: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    """Reconcile read a row between its commit and that commit's own index write, healed it,
    and warned that a sync write had been missed (issue 21, under concurrent load): that
    warning means a write was lost. A row changed within the settle window is read once it
    has settled; a write that is really lost is healed and reported then."""
    schedule, lost = make_schedule(), make_schedule()
    worker = Worker(once=True, index=built_index)
    worker.chores.reconcile()  # the watermark is now
    # A write lost for good: the index keeps an older revision of ``lost``.
    old_revision, old_score = lost.revision, entry(built_index, lost)
    services.update(lost, {"interval": timedelta(hours=3)})
    built_index.client.zadd(built_index.due_key, {str(lost.pk): old_score})
    built_index.client.hset(built_index.revisions_key, lost.pk, old_revision)
    committed, release = threading.Event(), threading.Event()

    def hold_after_commit() -> None:
        committed.set()
        release.wait(60)

    def edit() -> None:
        try:
            with transaction.atomic():
                # Runs after the commit, before the index write that the save registers next.
                transaction.on_commit(hold_after_commit)
                services.update(
                    Schedule.objects.get(pk=schedule.pk), {"interval": timedelta(hours=2)}
                )
        finally:
            connection.close()

    editor = threading.Thread(target=edit)
    editor.start()
    try:
        assert committed.wait(30), "the edit did not commit"
        with caplog.at_level(logging.INFO, logger="django_schedulinator"):
            worker.chores.reconcile()  # the row is committed, its index write not done yet
    finally:
        release.set()
        editor.join(30)
    assert "missed" not in caplog.text
    schedule.refresh_from_db()
    assert entry(built_index, schedule) == timing.to_ms(schedule.next_run_at)

    # Once both rows have settled: the lost write is healed, and it alone is reported.
    settled = schedule.updated_at + reconcile_module.SETTLE
    wait_for(lambda: database_now("default") > settled, timeout=60)
    with caplog.at_level(logging.INFO, logger="django_schedulinator"):
        worker.chores.reconcile()
    assert "Reconcile healed 1 index entry whose sync write had been missed" in caplog.text
    assert entry(built_index, lost) == timing.to_ms(lost.next_run_at)


@pytest.mark.usefixtures("settled_at_once")
def test_the_schedulers_own_write_back_in_flight_is_not_reported_as_missed(
    built_index: DueIndex, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh install's first start warned "Reconcile healed 1 index entry whose sync write
    had been missed" with Redis up all along (issue 35, item 9): a schedule created just
    before the start had settled when reconcile first read it, and it fired just then. The
    claim's advance (a new revision, ``updated_at`` untouched) had committed, and its own
    index write, which releases the in-flight entry, was still on its way. An entry in
    flight is its claim's to write back (or, should that fail, its lease's to return and the
    claim's re-check to re-index): reconcile leaves it alone and reports nothing."""
    schedule = make_schedule(next_run_at=timezone.now() - timedelta(seconds=1))
    worker = Worker(once=True, index=built_index)
    read_between: list[Any] = []
    write = built_index.apply

    def write_back_after_reconcile(changes: Any, **kwargs: Any) -> Any:
        if kwargs.get("release_token") and not read_between:
            # The claim committed its advance; its write-back is next: reconcile now.
            read_between.append(reconcile(built_index))
        return write(changes, **kwargs)

    monkeypatch.setattr(built_index, "apply", write_back_after_reconcile)
    with caplog.at_level(logging.INFO, logger="django_schedulinator"):
        worker.run()
    assert worker.counters.fired == 1
    (report,) = read_between
    assert (report.rows, report.in_flight, report.healed, report.missed) == (1, 1, 0, 0)
    schedule.refresh_from_db()
    assert schedule.revision > 1
    assert entry(built_index, schedule) == timing.to_ms(schedule.next_run_at)
    assert "sync write" not in caplog.text

    # Once the claim is written back, a write that is really lost is healed and reported.
    built_index.client.hset(built_index.revisions_key, schedule.pk, schedule.revision - 1)
    built_index.client.zadd(built_index.due_key, {str(schedule.pk): 9_999_999_999_999})
    Schedule.objects.filter(pk=schedule.pk).update(updated_at=database_now("default"))
    with caplog.at_level(logging.INFO, logger="django_schedulinator"):
        worker.chores.reconcile()
    assert "Reconcile healed 1 index entry whose sync write had been missed" in caplog.text
    assert entry(built_index, schedule) == timing.to_ms(schedule.next_run_at)


# -- how far behind (the metrics' reconcile lag) ---------------------------------------------


def test_reconcile_lag_is_the_age_of_the_oldest_change_not_read_yet(
    built_index: DueIndex,
) -> None:
    assert lag(built_index) is None  # reconcile never ran against this index
    make_schedule()
    reconcile(built_index, settle=timedelta(0))
    assert lag(built_index) == 0
    make_schedule()
    time.sleep(1.1)  # a bound from below, not a timing under test
    assert lag(built_index) >= 1
    reconcile(built_index, settle=timedelta(0))
    assert lag(built_index) == 0
