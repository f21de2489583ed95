"""Faults the core must survive: lost sync writes, drift, an evicting Redis, hung and
poisoned tasks, Redis and the database going away under a running scheduler."""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import redis
import time_machine
from django.contrib.auth.models import User
from django.db import OperationalError, connection, connections, transaction
from django.db.models import Count, F, JSONField, Value
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_schedulinator import clock, resync_schedules, services, timing
from django_schedulinator.checks import check_index
from django_schedulinator.claiming import Claimer
from django_schedulinator.dbclock import DatabaseNow
from django_schedulinator.health import check_drift
from django_schedulinator.index import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.reconcile import reconcile
from django_schedulinator.worker import Leased, Worker

from .conftest import Schedulers, make_due, make_schedule, subprocess_env
from .models import Delivery, Receipt, Redelivery
from .processes import output, wait_for
from .redis_server import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


def entry(index: DueIndex, schedule: Schedule) -> int | None:
    return index.scores([schedule.pk])[schedule.pk]


# -- lost sync writes and drift ------------------------------------------------------------


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
        worker._chores()  # what the loop does after each pass
        slices += 1

    assert entry(built_index, lost) == timing.to_ms(lost.next_run_at)
    assert slices > 12  # one batch each, back to back, within one RECONCILE_SECONDS
    worker._chores()
    assert not worker._reconcile_behind  # caught up: the next turn is a period away


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
        worker._reconcile()
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
        worker._reconcile()
    assert "healed 1 index entry whose sync write had been missed" in caplog.text
    assert "indexed 2 schedules the index had no record of" in caplog.text


def test_drift_check_reports_late_missing_and_orphaned_entries(built_index: DueIndex) -> None:
    healthy = [make_schedule() for _ in range(3)]
    assert check_drift(built_index).ok
    missing, late, paused = make_schedule(), make_schedule(), make_schedule()
    built_index.client.zrem(built_index.due_key, missing.pk)
    built_index.client.zadd(built_index.due_key, {str(late.pk): 9_999_999_999_999})
    Schedule.objects.filter(pk=paused.pk).update(enabled=False)  # its entry is orphaned

    report = check_drift(built_index, sample=100)

    assert not report.ok
    assert report.rows_indexable == len(healthy) + 2
    assert report.entries_due == len(healthy) + 2
    assert report.late_or_missing == sorted([missing.pk, late.pk])
    assert report.early_or_orphaned == [paused.pk]
    assert "2 late or missing" in report.summary()


# -- Redis that may evict the index --------------------------------------------------------


def test_an_evicting_maxmemory_policy_is_warned_about(
    private_redis: RedisServer, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = private_redis.client()
    client.config_set("maxmemory-policy", "allkeys-lru")
    ids = [m.id for m in check_index(databases=["default"])]
    assert "schedulinator.W012" in ids
    Worker(once=True).run()  # also said when a scheduler starts
    assert "maxmemory-policy is 'allkeys-lru'" in caplog.text

    client.config_set("maxmemory-policy", "volatile-lru")  # only keys with a TTL: fine
    assert "schedulinator.W012" not in [m.id for m in check_index(databases=["default"])]


# -- a missing index: a first build or a lost one ----------------------------------------------


def rebuild_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django_schedulinator.rebuild"]


@pytest.mark.parametrize("schedules", [0, 3])
def test_the_first_start_of_a_new_install_builds_the_index_at_info(
    index: DueIndex, caplog: pytest.LogCaptureFixture, schedules: int
) -> None:
    # A new install: maybe schedules saved already (their sync writes are in Redis), but no
    # scheduler ever ran, so no index was built and nothing can have been lost.
    for _ in range(schedules):
        make_schedule(next_run_at=timezone.now() + timedelta(hours=1))
    caplog.set_level(logging.INFO, logger="django_schedulinator")

    Worker(once=True).run()

    assert index.is_built()
    records = rebuild_records(caplog)
    assert [r.levelname for r in records] == ["INFO"], caplog.text
    assert f"built it from {schedules} schedules" in records[0].getMessage()


def test_an_index_lost_after_schedules_fired_is_rebuilt_with_a_warning(
    private_redis: RedisServer, index: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    make_due(3)
    Worker(once=True).run()  # the first start: builds the index and fires
    assert Run.objects.count() == 3
    private_redis.client().flushall()  # a private server: the shared one is never flushed
    caplog.clear()
    caplog.set_level(logging.INFO, logger="django_schedulinator")

    Worker(once=True).run()

    assert index.is_built()
    records = rebuild_records(caplog)
    assert [r.levelname for r in records] == ["WARNING"], caplog.text
    assert "Redis lost its data" in records[0].getMessage()
    assert "rebuilt it from 3 schedules" in records[0].getMessage()


# -- poisoned schedules ----------------------------------------------------------------------


def test_a_hanging_task_is_cut_off_and_the_others_run(built_index: DueIndex) -> None:
    hung = make_schedule(task="tests.hang", next_run_at=timezone.now())
    fine = [make_schedule(next_run_at=timezone.now()) for _ in range(3)]

    Worker(once=True).run()

    run = Run.objects.get(schedule=hung)
    assert run.status == Run.Status.FAILED
    assert "Timed out after 0.5s" in run.error
    assert set(Run.objects.filter(schedule__in=fine).values_list("status", flat=True)) == {
        Run.Status.SUCCEEDED
    }
    assert Delivery.objects.count() == 3


def test_args_that_no_longer_fit_fail_their_own_run_only(built_index: DueIndex) -> None:
    poisoned = make_schedule(task="tests.boom", next_run_at=timezone.now())
    # The task's signature changed after the schedule was saved: it now takes no args.
    Schedule.objects.filter(pk=poisoned.pk).update(args=[1, 2], kwargs={"x": 1})
    fine = make_schedule(next_run_at=timezone.now())

    Worker(once=True).run()

    run = Run.objects.get(schedule=poisoned)
    assert run.status == Run.Status.FAILED
    assert "TypeError" in run.error
    assert Run.objects.get(schedule=fine).status == Run.Status.SUCCEEDED


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ([], [1, 2], "kwargs must be a JSON object"),
        ({"a": 1}, {}, "args must be a JSON list"),
        ("abc", {}, "args must be a JSON list, not a string"),
        (Value(None, JSONField()), {}, "args must be a JSON list, not null"),
        ([], {"occurrence": 1}, "'occurrence', which is reserved"),
    ],
)
def test_arguments_a_bulk_write_broke_fail_their_own_run_at_once(
    built_index: DueIndex, settings: Any, args: Any, kwargs: Any, error: str
) -> None:
    """Rows written by bulk paths skip validation. A kwargs that is not an object killed an
    inline pool thread: the run was recorded "Timed out" and the batch waited for the task
    timeout (issue 12, item 11). It fails its own run, with its own error, at once."""
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "TASK_TIMEOUT_SECONDS": 5.0}
    broken = make_schedule(next_run_at=timezone.now())
    Schedule.objects.filter(pk=broken.pk).update(args=args, kwargs=kwargs)
    fine = make_schedule(next_run_at=timezone.now())

    Worker(once=True).run()

    run = Run.objects.get(schedule=broken)
    assert run.status == Run.Status.FAILED
    assert error in run.error
    assert "Timed out" not in run.error
    assert Run.objects.get(schedule=fine).status == Run.Status.SUCCEEDED


def test_a_task_that_calls_exit_fails_its_own_run_only(built_index: DueIndex) -> None:
    exits = [make_schedule(task="tests.exit", next_run_at=timezone.now()) for _ in range(10)]
    fine = make_schedule(next_run_at=timezone.now())

    Worker(once=True).run()  # returns: neither the pool nor the loop died

    failed = Run.objects.filter(schedule__in=exits, status=Run.Status.FAILED)
    assert failed.count() == 10
    assert "SystemExit: 3" in failed[0].error
    assert Run.objects.get(schedule=fine).status == Run.Status.SUCCEEDED


def test_a_task_no_longer_registered_fails_its_run(built_index: DueIndex) -> None:
    schedule = make_schedule(next_run_at=timezone.now())
    # Renamed in code after the schedule was saved: nothing is imported from the stored name.
    Schedule.objects.filter(pk=schedule.pk).update(task="os.system")

    Worker(once=True).run()

    run = Run.objects.get(schedule=schedule)
    assert run.status == Run.Status.FAILED
    assert "'os.system' is not a registered task" in run.error


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


def test_a_batch_taken_over_while_queued_is_not_dispatched_twice(built_index: DueIndex) -> None:
    make_due(3)
    resync_schedules()
    slow = Claimer(worker_id="slow", lease_seconds=0.2, index=built_index)
    batch, token = slow.claim(10)
    occurrences, _ = slow.advance(batch, token)
    assert len(occurrences) == 3
    time.sleep(0.3)  # the batch waited in "slow"'s queue past its lease
    fast = Claimer(worker_id="fast", lease_seconds=30, index=built_index)
    taken, fast_token = fast.take_over_expired(built_index.now_ms(), 10)
    assert len(taken) == 3

    assert slow.renew_leases([o.run_id for o in occurrences], token) == set()
    assert fast.renew_leases([o.run_id for o in taken], fast_token) == {o.run_id for o in taken}


def test_a_schedule_deleted_or_paused_while_its_batch_waits_does_not_fire(
    built_index: DueIndex,
) -> None:
    """A committed batch waits in the dispatch queue; schedules deleted or paused meanwhile
    do not run (issue 12, item 2). One query per batch looks, and the paused run says why."""
    kept, deleted, paused = make_due(3)
    resync_schedules()
    worker = Worker(worker_id="test")
    batch, token = worker.claimer.claim(10)
    occurrences, _ = worker.claimer.advance(batch, token)
    assert len(occurrences) == 3
    # While the batch waits for the dispatch thread:
    Schedule.objects.get(pk=deleted).delete()
    services.pause(Schedule.objects.get(pk=paused), "maintenance")

    worker._dispatch_now(Leased(occurrences, token, time.monotonic()))

    assert set(Delivery.objects.values_list("schedule_id", flat=True)) == {kept}
    run = Run.objects.get(schedule_id=paused)
    assert (run.status, run.skip_reason) == (Run.Status.SKIPPED, Run.SkipReason.PAUSED)
    assert "paused" in run.note
    assert not Run.objects.filter(schedule_id=deleted).exists()
    assert worker.counters.cancelled == 2


# -- services going away under a running scheduler ------------------------------------------


@pytest.mark.subprocess
def test_a_redis_outage_is_logged_once_survived_and_healed(
    private_redis: RedisServer, key_prefix: str, schedulers: Schedulers
) -> None:
    env = subprocess_env(
        key_prefix, SCHEDULINATOR_TEST_REDIS_URL=private_redis.url, SCHEDULINATOR_TEST_RECONCILE="1"
    )
    proc = schedulers.start("--max-seconds", "120", env=env)
    before = [make_schedule(task="tests.receipt", next_run_at=timezone.now()) for _ in range(5)]
    wait_for(lambda: Receipt.objects.count() == 5, timeout=30)

    private_redis.stop()
    # Saved while Redis is down: the rows commit, their sync writes are lost.
    during = [make_schedule(task="tests.receipt", next_run_at=timezone.now()) for _ in range(5)]
    time.sleep(3)
    private_redis.start()  # the same data (append-only file), minus the lost writes

    wait_for(lambda: Receipt.objects.count() == 10, timeout=60)
    assert proc.poll() is None, "the loop must not die"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    log = output(proc)
    assert log.count("Scheduler pass failed") == 1, log
    assert "Connections are back" in log
    # New rows whose sync writes were lost: the index had no record of them at all.
    assert "Reconcile indexed 5 schedules the index had no record of" in log
    assert {r.schedule_id for r in Receipt.objects.all()} == {s.pk for s in before + during}
    assert Redelivery.objects.count() == 0


@pytest.mark.subprocess
@pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_terminate_backend")
def test_terminated_database_connections_are_reopened(
    built_index: DueIndex, key_prefix: str, schedulers: Schedulers
) -> None:
    app_name = f"sched-{key_prefix}"
    env = subprocess_env(key_prefix, SCHEDULINATOR_TEST_APP_NAME=app_name)
    proc = schedulers.start("--max-seconds", "120", env=env)
    for _ in range(3):
        make_schedule(
            task="tests.receipt", kind=Schedule.Kind.INTERVAL, interval=timedelta(seconds=1)
        )
    wait_for(lambda: Receipt.objects.count() >= 6, timeout=30)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            [app_name],
        )
        (terminated,) = cursor.fetchone()
    assert terminated >= 1
    seen = Receipt.objects.count()
    wait_for(lambda: Receipt.objects.count() >= seen + 6, timeout=30)

    assert proc.poll() is None, "the loop must not die"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert not Receipt.objects.values("key").annotate(n=Count("id")).filter(n__gt=1).exists()


@pytest.mark.subprocess
def test_a_read_only_redis_is_waited_out(
    private_redis: RedisServer, key_prefix: str, schedulers: Schedulers
) -> None:
    env = subprocess_env(key_prefix, SCHEDULINATOR_TEST_REDIS_URL=private_redis.url)
    proc = schedulers.start("--max-seconds", "120", env=env)
    make_schedule(task="tests.receipt", next_run_at=timezone.now())
    wait_for(lambda: Receipt.objects.count() == 1, timeout=30)

    # Indexed now, due while the server is read-only: claiming it needs a write.
    make_schedule(task="tests.receipt", next_run_at=timezone.now() + timedelta(seconds=1))
    # What a failover looks like to a client: the server it talks to became a replica.
    client = private_redis.client()
    client.replicaof("127.0.0.1", "1")
    time.sleep(3)
    client.replicaof("NO", "ONE")  # promoted again

    wait_for(lambda: Receipt.objects.count() == 2, timeout=60)
    assert proc.poll() is None, "the loop must not die"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    log = output(proc)
    assert "ReadOnlyError" in log
    assert "Connections are back" in log


def test_recovering_from_a_failed_pass_leaves_the_dispatch_threads_redis_alone(
    built_index: DueIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed pass the loop reconnects; closing connections that the dispatch
    thread is using broke its lease renewal mid-command (a TypeError from redis-py) and
    dropped its batch (issue 12, item 6). The other thread must see no error at all."""
    make_due(1)
    resync_schedules()
    worker = Worker(worker_id="test")
    batch, token = worker.claimer.claim(10)
    occurrences, _ = worker.claimer.advance(batch, token)
    run_ids = [o.run_id for o in occurrences]
    monkeypatch.setattr(worker, "_sleep", lambda seconds: None)  # no back-off pauses
    errors: list[BaseException] = []
    renewals = 0
    done = threading.Event()

    def renew() -> None:  # what the dispatch thread does for a running batch
        nonlocal renewals
        try:
            while not done.is_set():
                try:
                    worker.claimer.renew_leases(run_ids, token)
                    renewals += 1
                except Exception as exc:
                    errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=renew)
    thread.start()
    for _ in range(300):
        worker._recover(OperationalError("the pass failed"), 2)
        worker.index.now_ms()  # the main thread's next pass uses the pool too
    done.set()
    thread.join()

    assert errors == []
    assert renewals > 0


def test_any_redis_error_while_renewing_leases_means_redis_is_unavailable(
    private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis that answers TIME with an error nobody expected (here: an ACL refusal) is
    treated as unreachable: the leases are renewed on this host's clock, and it is logged,
    instead of the error dropping the batch (issue 12, item 6)."""
    clock.now()  # an earlier test's outage ends here: this one is logged anew
    index = DueIndex()
    index.mark_built({"by": "tests"})
    make_due(2)
    resync_schedules()
    claimer = Claimer(worker_id="test", lease_seconds=30, index=index)
    batch, token = claimer.claim(10)
    occurrences, _ = claimer.advance(batch, token)
    private_redis.client().acl_setuser(
        "no-time", enabled=True, nopass=True, keys=["*"], commands=["+@all", "-time"]
    )
    refused = redis.Redis(port=private_redis.port, username="no-time", socket_timeout=5)
    renewing = Claimer(
        worker_id="test", lease_seconds=30, index=DueIndex(client=refused, prefix=index.prefix)
    )

    held = renewing.renew_leases([o.run_id for o in occurrences], token)

    assert held == {o.run_id for o in occurrences}
    assert "this host's clock" in caplog.text


# -- a delete racing a scheduler ------------------------------------------------------------


def _delete_by(how: str, schedule: Schedule) -> None:
    if how == "model":
        schedule.delete()
    elif how == "queryset":
        Schedule.objects.filter(pk=schedule.pk).delete()
    else:
        client = Client()
        client.force_login(User.objects.create_superuser("admin", "a@example.com", None))
        if how == "admin":
            url = reverse("admin:django_schedulinator_schedule_delete", args=[schedule.pk])
            response = client.post(url, {"post": "yes"})
        else:  # the changelist's bulk delete
            response = client.post(
                reverse("admin:django_schedulinator_schedule_changelist"),
                {"action": "delete_selected", "_selected_action": [schedule.pk], "post": "yes"},
            )
        assert response.status_code == 302, response.content


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="needs real row locks: SQLite serialises whole write transactions",
)
@pytest.mark.parametrize("how", ["model", "queryset", "admin", "admin bulk"])
def test_a_delete_racing_a_schedulers_run_insert_deletes_both(how: str) -> None:
    """A scheduler's transaction advances the schedule and inserts a run of it while the
    delete runs: the delete waits for it and takes the run with it,
    instead of failing at commit on the run's deferred foreign key (IntegrityError, a 500
    in the admin) and leaving the schedule in place."""
    schedule = make_schedule()
    inserted, saw_delete_waiting = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def scheduler() -> None:
        # A real second connection (Django gives each thread its own), as a scheduler's.
        try:
            with transaction.atomic():
                # The scheduler's shape: the conditional advance of the row (which locks
                # it), then the run, whose foreign key is checked at commit.
                Schedule.objects.filter(pk=schedule.pk).update(revision=F("revision") + 1)
                Run.objects.create(
                    schedule_id=schedule.pk,
                    scheduled_for=timezone.now(),
                    task=schedule.task,
                    claimed_at=timezone.now(),
                    worker_id="racing-scheduler",
                )
                inserted.set()
                # Commit only once the delete waits on this transaction's lock.
                with connection.cursor() as cursor:
                    for _ in range(600):
                        cursor.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                            "'Lock' AND datname = current_database() AND pid <> pg_backend_pid()"
                        )
                        if cursor.fetchone()[0]:
                            saw_delete_waiting.set()
                            break
                        time.sleep(0.05)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
            inserted.set()
        finally:
            connection.close()

    thread = threading.Thread(target=scheduler)
    thread.start()
    assert inserted.wait(30)
    try:
        _delete_by(how, schedule)
    finally:
        thread.join(60)
    assert not errors, errors
    assert saw_delete_waiting.is_set()  # the race did happen
    assert not Schedule.objects.filter(pk=schedule.pk).exists()
    assert not Run.objects.filter(schedule_id=schedule.pk).exists()
