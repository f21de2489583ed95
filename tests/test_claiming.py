"""Claim, re-check, conditional advance and the ledger, on a real Redis and database."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_schedulinator import resync_schedules, services, timing
from django_schedulinator.index.due import SET, Change, DueIndex
from django_schedulinator.index.rebuild import ensure_built
from django_schedulinator.models import Run, Schedule
from django_schedulinator.models.batches import Advance, NewRun
from django_schedulinator.models.keys import occurrence_key
from django_schedulinator.scheduler.claiming import Claimer, _runs_of
from django_schedulinator.scheduler.held import PlannedRetries
from django_schedulinator.scheduler.leases import Leased
from django_schedulinator.scheduler.transient import bound_lock_waits
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import to_ms

from .models import Delivery
from .support.schedules import make_due, make_schedule
from .support.simulation import entry

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


def run_once(**options) -> Worker:
    worker = Worker(once=True, worker_id="test", **options)
    worker.run()
    return worker


def test_only_entries_due_by_redis_time_are_claimed(built_index: DueIndex) -> None:
    due = make_due(3)
    later = make_schedule(kind="interval", interval=timedelta(hours=1))
    resync_schedules(due)

    worker = run_once()

    assert worker.counters.fired == 3
    assert set(Run.objects.values_list("schedule_id", flat=True)) == set(due)
    assert not Run.objects.filter(schedule=later).exists()
    assert built_index.scores([later.pk])[later.pk] == to_ms(later.next_run_at)


def test_a_fired_occurrence_is_in_the_ledger_reaches_the_task_and_advances(
    built_index: DueIndex,
) -> None:
    [sid] = make_due(1, seconds_ago=30, args=[1, "a"], kwargs={"k": "v"})
    nominal = Schedule.objects.get(pk=sid).next_run_at
    resync_schedules([sid])

    run_once()

    run = Run.objects.get(schedule_id=sid)
    assert run.status == Run.Status.SUCCEEDED
    assert run.scheduled_for == nominal
    assert run.idempotency_key == occurrence_key(sid, nominal) == f"{sid}:{to_ms(nominal)}"
    delivery = Delivery.objects.get()
    assert delivery.key == run.idempotency_key
    assert delivery.payload == {"args": [1, "a"], "kwargs": {"k": "v"}}
    schedule = Schedule.objects.get(pk=sid)
    # Interval anchored on the nominal time: one hour after it, not after "now".
    assert schedule.next_run_at == nominal + timedelta(hours=1)
    assert schedule.run_count == 1
    assert schedule.revision == 2
    assert built_index.scores([sid])[sid] == to_ms(schedule.next_run_at)
    assert built_index.client.zcard(built_index.inflight_key) == 0


def test_a_stale_early_entry_is_repaired_not_fired(built_index: DueIndex) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(hours=1))
    true_ms = to_ms(schedule.next_run_at)
    # Corrupt the index: claim it is due a minute ago (as a stale write could).
    built_index.apply([Change(schedule.pk, schedule.revision, SET, true_ms - 3_660_000)])

    worker = run_once()

    assert worker.counters.repaired == 1
    assert worker.counters.fired == 0
    assert not Run.objects.exists()
    assert built_index.scores([schedule.pk])[schedule.pk] == true_ms


def test_entries_of_deleted_and_disabled_rows_leave_the_index(built_index: DueIndex) -> None:
    gone, paused = make_due(2)
    resync_schedules([gone, paused])
    Schedule.objects.filter(pk=gone).delete()  # queryset delete still sends signals...
    built_index.apply([Change(gone, 99, SET, 0)])  # ...so put a stale entry back by hand
    Schedule.objects.filter(pk=paused).update(enabled=False)  # no signal, no resync

    worker = run_once()

    assert worker.counters.dropped == 2
    assert worker.counters.fired == 0
    assert built_index.client.zcard(built_index.due_key) == 0


def test_failing_task_is_recorded_and_the_batch_goes_on(built_index: DueIndex) -> None:
    bad = make_due(1, task="tests.boom")
    good = make_due(2)
    resync_schedules(bad + good)

    run_once()

    failed = Run.objects.get(schedule_id=bad[0])
    assert failed.status == Run.Status.FAILED
    assert "RuntimeError: boom" in failed.error
    assert Run.objects.filter(status=Run.Status.SUCCEEDED).count() == 2


def test_conditional_advance_has_exactly_one_winner() -> None:
    [sid] = make_due(1)
    row = Schedule.objects.get(pk=sid)
    later = row.next_run_at + timedelta(hours=1)
    move = Advance(sid, row.revision, later, later, 1)
    first = Schedule.objects.advance([move], timezone.now())
    second = Schedule.objects.advance([move], timezone.now())
    assert first.moved == {sid: row.revision + 1}
    assert second.moved == {}


def test_an_edit_between_read_and_advance_wins_and_the_entry_is_rechecked(
    built_index: DueIndex,
) -> None:
    [sid] = make_due(1)
    resync_schedules([sid])
    claimer = Claimer(worker_id="a", lease_seconds=30)
    batch, token = claimer.claim(10)
    plan = claimer.recheck(batch)  # the row is read at revision 1...
    edited = Schedule.objects.get(pk=sid)
    edited.args = ["edited"]
    edited.save()  # ...an edit commits (revision 2) before the conditional advance

    occurrences, counters = claimer.commit(plan, token)

    assert occurrences == []
    assert counters.lost_races == 1
    assert not Run.objects.exists()
    assert built_index.client.zcard(built_index.inflight_key) == 0
    run_once()  # the next pass reads revision 2 and fires the occurrence once, as edited
    assert Run.objects.get(schedule_id=sid).args == ["edited"]
    assert Delivery.objects.count() == 1


def test_the_claims_write_is_one_statement_on_postgresql_and_records_only_rows_that_moved(
    built_index: DueIndex,
) -> None:
    """The advance and the runs of the rows that moved go in one round trip on PostgreSQL
    (the lock wait's setting with them); a row that lost its race gets no run, either way."""
    kept, raced = make_due(2)
    resync_schedules([kept, raced])
    claimer = Claimer(worker_id="a", lease_seconds=30)
    batch, token = claimer.claim(10)
    plan = claimer.recheck(batch)
    Schedule.objects.filter(pk=raced).update(revision=F("revision") + 1)  # an edit commits

    with CaptureQueriesContext(connection) as captured:
        occurrences, counters = claimer.commit(plan, token)

    assert [o.schedule_id for o in occurrences] == [kept]
    assert counters.lost_races == 1
    assert list(Run.objects.values_list("schedule_id", flat=True)) == [kept]
    assert Run.objects.get().pk == occurrences[0].run_id
    writes = [q["sql"] for q in captured.captured_queries]
    if connection.vendor == "postgresql":
        [write] = writes
        assert write.startswith("SELECT set_config('lock_timeout'")
        assert "INSERT INTO" in write
        assert "UPDATE" in write
    else:  # the advance, then the runs, in a transaction
        assert [w.split()[0] for w in writes if "INSERT" in w or "UPDATE" in w] == ["WITH"] * 2


def test_an_occurrence_already_in_the_ledger_is_not_fired_again(built_index: DueIndex) -> None:
    [sid] = make_due(1)
    nominal = Schedule.objects.get(pk=sid).next_run_at
    Run.objects.create(
        schedule_id=sid,
        scheduled_for=nominal,
        task="tests.record",
        claimed_at=timezone.now(),
        worker_id="earlier",
        claim_token="x",
        status=Run.Status.SUCCEEDED,
    )
    resync_schedules([sid])

    worker = run_once()

    assert worker.counters.duplicates == 1
    assert worker.counters.fired == 0
    assert Run.objects.count() == 1
    assert not Delivery.objects.exists()
    assert Schedule.objects.get(pk=sid).next_run_at > nominal


def test_expired_in_flight_lease_returns_the_entry(built_index: DueIndex) -> None:
    [sid] = make_due(1)
    resync_schedules([sid])
    doomed = Claimer(worker_id="doomed", lease_seconds=0.2)
    batch, _token = doomed.claim(10)
    assert [s for s, _ in batch.entries] == [sid]
    assert built_index.client.zcard(built_index.inflight_key) == 1
    time.sleep(0.3)

    worker = run_once()

    assert worker.counters.leases_expired == 1
    assert worker.counters.fired == 1
    assert Delivery.objects.count() == 1
    assert built_index.client.zcard(built_index.inflight_key) == 0


def test_a_pending_run_whose_dispatch_never_completed_is_redispatched_with_its_key(
    built_index: DueIndex,
) -> None:
    [sid] = make_due(1)
    resync_schedules([sid])
    doomed = Claimer(worker_id="doomed", lease_seconds=0.2)
    batch, token = doomed.claim(10)
    # Committed, then "crashed": no dispatch.
    [occurrence], _ = doomed.commit(doomed.recheck(batch), token)
    time.sleep(0.3)

    worker = run_once()

    assert worker.counters.redispatched == 1
    run = Run.objects.get()
    assert run.status == Run.Status.SUCCEEDED
    # The claim counted the hand-off it was about to make; a process that dies after its
    # claim may have made it, so that one counts: the take-over's is the second.
    assert run.attempts == 2
    delivery = Delivery.objects.get()
    assert delivery.key == occurrence.key
    assert delivery.attempt == 2


def test_missing_marker_triggers_one_rebuild_then_firing(index: DueIndex) -> None:
    make_due(10)  # rows exist, the index was never built (an upgrade)
    assert not index.is_built()

    worker = run_once()

    assert index.is_built()
    assert worker.counters.fired == 10
    assert Delivery.objects.count() == 10


def test_an_index_built_by_another_process_meanwhile_is_not_built_again(
    index: DueIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two schedulers find the marker missing; one builds the index and releases the lock
    before the other takes it. The other must look again under the lock, not build a second
    time (test_processes' flushed-index test saw two builds on CI)."""
    make_due(3)
    looks = []

    def missing_shards() -> list[int]:
        missing = DueIndex.missing_shards(index)
        if not looks:  # the other process finishes its build right after our first look
            index.mark_built({"by": "the other process"})
        looks.append(not missing)
        return missing

    monkeypatch.setattr(index, "missing_shards", missing_shards)

    assert ensure_built(index, built_by="this process", should_stop=lambda: False)

    assert looks == [False, True]
    assert index.built_info() == {"by": "the other process", "shards": 1}


@pytest.mark.parametrize("jitter", [None, timedelta(minutes=5)])
def test_a_bulk_moved_next_run_never_fires_at_the_due_at_it_left_behind(
    built_index: DueIndex, jitter: timedelta | None
) -> None:
    """The documented bulk path (update next_run_at, then resync) leaves the old due_at: it
    does not belong to the new next_run_at and must not be trusted (issue 12, item 1)."""
    [sid] = make_due(1, seconds_ago=30, jitter=jitter)
    Schedule.objects.filter(pk=sid).update(due_at=F("next_run_at"))  # due 30 s ago
    later = timing.truncate_ms(timezone.now() + timedelta(hours=2))
    Schedule.objects.filter(pk=sid).update(
        fired_through=None, next_run_at=later, revision=F("revision") + 1
    )
    resync_schedules([sid])

    worker = run_once()

    assert worker.counters.fired == 0
    assert not Run.objects.exists()
    # The entry is at the new nominal time (plus its recomputed jitter), never earlier.
    score = built_index.scores([sid])[sid]
    assert score is not None
    assert to_ms(later) <= score <= to_ms(later + (jitter or timedelta()))


def test_a_bulk_moved_next_run_is_not_held_back_by_a_later_due_at(built_index: DueIndex) -> None:
    """The mirror case: next_run_at moved two hours earlier, due_at left two hours late. The
    occurrence is due at its new nominal time, not when the old due_at comes."""
    schedule = make_schedule(kind="interval", interval=timedelta(days=1))
    earlier = timing.truncate_ms(timezone.now() - timedelta(seconds=5))
    Schedule.objects.filter(pk=schedule.pk).update(
        fired_through=None,
        next_run_at=earlier,
        due_at=earlier + timedelta(hours=2),
        revision=F("revision") + 1,
    )
    resync_schedules([schedule.pk])
    assert built_index.scores([schedule.pk])[schedule.pk] == to_ms(earlier)

    worker = run_once()

    assert worker.counters.fired == 1
    assert Run.objects.get().scheduled_for == earlier


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL")
def test_a_row_locked_by_another_transaction_costs_only_its_own_occurrence(
    built_index: DueIndex,
) -> None:
    """A user's transaction holds one schedule row (an admin edit, a migration): the claim
    fires the others while it is held, waiting on that lock for a bounded time only; the
    held row fires on a later pass, once it is free (issue 12, item 7)."""
    held, *others = make_due(4)
    resync_schedules()
    table = Schedule._meta.db_table
    settings = connection.settings_dict
    user = psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"],
        password=settings["PASSWORD"], dbname=settings["NAME"],
    )  # fmt: skip
    user.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", [held])
    worker = Worker(once=True, worker_id="test")

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    # The pass must end while the user still holds the lock (it waits a tenth of a second,
    # then skips the row); the minute only bounds how long a scheduler that waits on the
    # lock, as it did before, keeps this test.
    thread.join(60)
    finished_while_held = not thread.is_alive()
    user.rollback()  # the user's transaction ends
    thread.join()
    user.close()

    assert finished_while_held, "the scheduler waited on a row lock held by another transaction"
    assert set(Run.objects.values_list("schedule_id", flat=True)) == set(others)
    assert worker.counters.busy == 1
    row = Schedule.objects.get(pk=held)
    retry_at = built_index.scores([held])[held]
    assert retry_at is not None
    assert retry_at > to_ms(row.next_run_at)  # re-checked a little later, not spun on

    later = Worker(once=True, worker_id="later", clock=lambda: retry_at)
    later.run()
    assert Run.objects.get(schedule_id=held).scheduled_for == row.next_run_at


@pytest.mark.skipif(connection.vendor != "postgresql", reason="lock_timeout: PostgreSQL")
def test_the_loop_waits_on_row_locks_for_a_bounded_time_and_tasks_keep_theirs(
    built_index: DueIndex, settings
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "LOCK_TIMEOUT_SECONDS": 1.5}

    def lock_timeout() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            return cursor.fetchone()[0]

    bound_lock_waits()
    try:
        assert lock_timeout() == "1500ms"
        connection.close()  # a connection opened later by a loop thread is bounded too
        assert lock_timeout() == "1500ms"
    finally:
        bound_lock_waits(False)
    assert lock_timeout() == "0"

    make_due(1, task="tests.show_lock_timeout")
    resync_schedules()
    run_once()
    assert Delivery.objects.get().payload == {"lock_timeout": "0"}  # the task's own default


def test_the_portable_insert_returns_only_the_runs_it_inserted() -> None:
    """The insert used on databases without JSON batches (not PostgreSQL or SQLite) said
    every run was new, those already in the ledger too: their ids were compared with the
    ledger's keys. Called directly here, on the database at hand."""
    schedule = make_schedule()
    now = timezone.now()
    first = NewRun.of(schedule, now - timedelta(minutes=2))
    second = NewRun.of(schedule, now - timedelta(minutes=1))
    runs = Run.objects.all()
    inserted = runs._insert_runs_portable([first], now, "w", "", None)
    assert len(inserted) == 1
    again = runs._insert_runs_portable([first, second], now, "w", "", None)
    assert list(again) == [(schedule.pk, to_ms(second.scheduled_for))]


# -- rows that cannot be evaluated, and batches that wait -------------------------------------


def test_a_row_with_broken_timing_is_set_aside(
    built_index: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    broken = make_schedule(kind=Schedule.Kind.CRON, next_run_at=timezone.now())
    Schedule.objects.filter(pk=broken.pk).update(cron="61 * * * *")  # around validation
    fine = make_schedule(next_run_at=timezone.now())

    worker = Worker(once=True)
    worker.run()

    assert worker.counters.invalid == 1
    assert "cannot be evaluated" in caplog.text
    assert not Run.objects.filter(schedule=broken).exists()
    assert Run.objects.get(schedule=fine).status == Run.Status.SUCCEEDED
    later = entry(built_index, broken)
    assert later is not None
    assert later > timing.to_ms(timezone.now()) + 30_000


def test_a_schedule_deleted_or_paused_while_its_batch_waits_does_not_fire(
    built_index: DueIndex,
) -> None:
    """A committed batch waits in the dispatch queue; schedules deleted or paused meanwhile
    do not run (issue 12, item 2). One query per batch looks, and the paused run says why."""
    kept, deleted, paused = make_due(3)
    resync_schedules()
    worker = Worker(worker_id="test")
    batch, token = worker.claimer.claim(10)
    occurrences, _ = worker.claimer.commit(worker.claimer.recheck(batch), token)
    assert len(occurrences) == 3
    # While the batch waits for the dispatch thread:
    Schedule.objects.get(pk=deleted).delete()
    services.pause(Schedule.objects.get(pk=paused), "maintenance")

    worker.lanes.dispatch_now(
        worker.lanes.lane("default"), Leased(occurrences, token, time.monotonic(), counted=True)
    )

    assert set(Delivery.objects.values_list("schedule_id", flat=True)) == {kept}
    run = Run.objects.get(schedule_id=paused)
    assert (run.status, run.skip_reason) == (Run.Status.SKIPPED, Run.SkipReason.PAUSED)
    assert "paused" in run.note
    assert not Run.objects.filter(schedule_id=deleted).exists()
    assert worker.counters.cancelled == 2


def test_a_next_run_written_around_save_with_microseconds_fires_at_once_with_its_key(
    built_index: DueIndex,
) -> None:
    """Every instant the app writes is a whole millisecond; a bulk write may store more.
    The occurrence the claim makes of such a row is the whole millisecond its key names:
    on PostgreSQL a row with .276854 s made a run at .276854 whose key said .276 (the
    insert's RETURNING rounded it to .277), so the claim took it for a duplicate and left
    it pending until its lease ran out, half a minute late."""
    [sid] = make_due(1)
    at = timezone.now().replace(microsecond=276_854) - timedelta(seconds=2)
    Schedule.objects.filter(pk=sid).update(fired_through=None, next_run_at=at, due_at=None)
    resync_schedules([sid])

    worker = run_once()

    assert worker.counters.fired == 1
    assert worker.counters.duplicates == 0
    run = Run.objects.get(schedule_id=sid)
    assert run.status == Run.Status.SUCCEEDED
    assert run.scheduled_for == timing.truncate_ms(at)
    assert Delivery.objects.get(schedule_id=sid).key == occurrence_key(sid, at)


def test_a_planned_retry_is_due_once_its_lease_has_ended() -> None:
    """A retry's lease ends at a moment with microseconds; the take-over planned for it
    compares whole milliseconds of Redis time, so it must not come before that moment (it
    found nothing, and the retry waited for the periodic scan)."""
    retries = PlannedRetries()
    lease_end = timing.from_ms(1_700_000_000_100) + timedelta(microseconds=456)
    retries.add([lease_end])
    assert retries.next_ms() == 1_700_000_000_200
    assert not retries.take_due(1_700_000_000_100)
    assert retries.take_due(1_700_000_000_200)
    assert retries.next_ms() is None


def test_a_plain_due_schedules_runs_are_those_the_general_path_builds(
    built_index: DueIndex,
) -> None:
    """The pending runs of a schedule with no grace, buffer or skip are built the short
    way: the same runs, field for field, as ``NewRun.of`` gives."""
    [sid] = make_due(1)
    Schedule.objects.filter(pk=sid).update(
        args=[1, {"two": 2}], kwargs={"k": "v"}, dispatch_options={"queue": "q"}
    )
    resync_schedules([sid])
    claimer = Claimer(worker_id="a", lease_seconds=30)
    batch, _token = claimer.claim(10)
    [due] = claimer.recheck(batch).due
    second = due.plan.fire[0] + timedelta(minutes=1)
    due.plan = replace(due.plan, fire=(*due.plan.fire, second))

    runs = _runs_of(due)

    assert runs == [NewRun.of(due.row, at, alert_at=None) for at in due.plan.fire]
    assert [r.args for r in runs] == [[1, {"two": 2}]] * 2
    assert runs[0].kwargs == {"k": "v"}
    assert runs[0].dispatch_options == {"queue": "q"}
