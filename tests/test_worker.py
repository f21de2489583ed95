"""The scheduler's loop (``django_schedulinator/scheduler/worker.py``): Redis and the database
going away under a running scheduler, and its recovery from a failed pass."""

from __future__ import annotations

import itertools
import logging
import re
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection, connections
from django.db.models import Count
from django.utils import timezone

from django_schedulinator import resync_schedules
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.models.spans import Span
from django_schedulinator.scheduler.worker import Worker

from .models import Receipt, Redelivery
from .support.processes import Lines, Schedulers, looping, output, subprocess_env, wait_for
from .support.redis_server import RedisServer
from .support.schedules import make_due, make_schedule
from .support.webhook_receiver import SECRET, webhook_receiver

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


# -- services going away under a running scheduler --------------------------------------------


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
    # New rows whose sync writes were lost: the index had no record of them at all. Each
    # is read once it has settled, so saves that straddle a reconcile turn are told in two.
    indexed = re.findall(r"Reconcile indexed (\d+) schedules the index had no record of", log)
    assert sum(map(int, indexed)) == 5, log
    assert "Reconcile healed" not in log, log
    assert {r.schedule_id for r in Receipt.objects.all()} == {s.pk for s in before + during}
    assert Redelivery.objects.count() == 0


@pytest.mark.subprocess
def test_limits_and_signals_end_the_back_off_from_an_outage(
    private_redis: RedisServer, key_prefix: str, schedulers: Schedulers
) -> None:
    """Redis is down for good: a scheduler backing off from it still stops when its
    --max-seconds is up (it backed off for ever: issue 32, item 20), or when told to."""
    env = subprocess_env(key_prefix, SCHEDULINATOR_TEST_REDIS_URL=private_redis.url)
    private_redis.kill()
    limited = schedulers.start("--max-seconds", "2", env=env)
    signalled = schedulers.start(env=env)
    lines = Lines(signalled)
    lines.wait_for("Scheduler pass failed")
    signalled.send_signal(signal.SIGTERM)

    assert limited.wait(timeout=60) == 0
    assert signalled.wait(timeout=60) == 0
    log = output(limited)
    assert "Scheduler pass failed" in log, log
    assert "Reached --max-seconds 2.0" in log, log
    assert "SIGTERM received" in lines.text()


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
    occurrences, _ = worker.claimer.commit(worker.claimer.recheck(batch), token)
    run_ids = [o.run_id for o in occurrences]
    span = Span.of(o.scheduled_for for o in occurrences)
    monkeypatch.setattr(worker, "_sleep", lambda seconds: None)  # no back-off pauses
    errors: list[BaseException] = []
    renewals = 0
    done = threading.Event()

    def renew() -> None:  # what the dispatch thread does for a running batch
        nonlocal renewals
        try:
            while not done.is_set():
                try:
                    worker.held.renew_leases(run_ids, token, span=span)
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


@pytest.mark.django_db(transaction=True)  # its database connection is terminated for real
@pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_terminate_backend")
def test_a_pass_that_fails_after_its_claim_gives_the_entries_back_at_once(
    built_index: DueIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database goes away between the claim (Redis) and the re-check (SQL): the claimed
    entries go back to the due set for the next pass, instead of waiting out their in-flight
    lease (30 s by default) with their schedules held back."""
    from .test_outcomes import drop_this_connection

    schedule = make_schedule(next_run_at=timezone.now() - timedelta(seconds=1))
    worker = Worker(worker_id="t")
    recheck = worker.claimer.recheck

    def connection_lost_first(batch: object) -> object:
        monkeypatch.setattr(worker.claimer, "recheck", recheck)
        drop_this_connection()  # a real failover: the next statement fails
        return recheck(batch)

    monkeypatch.setattr(worker.claimer, "recheck", connection_lost_first)
    with pytest.raises(OperationalError):
        worker.step()

    assert built_index.inflight_ids() == set()
    assert built_index.scores([schedule.pk]).get(schedule.pk) is not None  # due again
    connections.close_all()
    worker.step()  # the next pass fires it, well within the lease
    worker.close()
    assert Schedule.objects.get(pk=schedule.pk).runs.count() == 1


# -- retries of failed hand-offs ---------------------------------------------------------------


def test_a_failed_hand_off_is_sent_again_when_its_backoff_ends(
    settings: Any, built_index: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver answering 503: each retry goes out when its backoff ends, from the
    scheduler that recorded the failure, even while it sleeps; not at the take-over scan a
    quarter lease later (15 s here), which came 5-8 s apart with the default lease. And it
    is logged and counted as a retry, not as runs whose lease expired."""
    caplog.set_level(logging.INFO, logger="django_schedulinator")
    with webhook_receiver() as receiver:
        settings.SCHEDULINATOR = {
            **settings.SCHEDULINATOR,
            "DISPATCHERS": {
                "hooks": {
                    "BACKEND": "django_schedulinator.dispatch.webhook.WebhookDispatcher",
                    "OPTIONS": {
                        "TARGETS": {"billing": {"URL": f"{receiver.url}/hook", "SECRET": SECRET}},
                        "RETRY_BACKOFF_SECONDS": 0.2,
                        "RETRY_BACKOFF_MAX_SECONDS": 0.4,
                        "TIMEOUT_SECONDS": 5,
                    },
                }
            },
        }
        receiver.answer("/hook", 503, 503, 503)  # then 204
        schedule = make_schedule(
            next_run_at=timezone.now() - timedelta(seconds=1),
            dispatcher="hooks",
            dispatch_options={"target": "billing"},
        )
        worker = Worker(worker_id="t", lease_seconds=60, max_sleep=5)
        arrivals: list[float] = []
        with looping(worker):
            deadline = time.monotonic() + 30
            while len(arrivals) < 4 and time.monotonic() < deadline:
                arrivals += [time.monotonic()] * (len(receiver.received) - len(arrivals))
                time.sleep(0.01)
            wait_for(lambda: Run.objects.get(schedule=schedule).status == "succeeded", 30)

    assert [r.body["attempt"] for r in receiver.received] == [1, 2, 3, 4]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    # At most RETRY_BACKOFF_MAX_SECONDS and a pass apart: bounded well under the 15 s scan.
    assert all(0.05 < gap < 5 for gap in gaps), gaps
    assert Run.objects.get(schedule=schedule).attempts == 4
    assert (worker.counters.retried, worker.counters.redispatched) == (3, 0)
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert not [m for _level, m in messages if "whose lease expired" in m]
    retried = [level for level, m in messages if "back-off" in m]
    assert retried
    assert set(retried) == {logging.INFO}


@pytest.mark.django_db
def test_a_stop_signal_stops_the_loop_even_when_logging_fails_inside_the_handler(
    key_prefix: str,
) -> None:
    # A signal handler runs between two bytecodes of the main thread, maybe in the middle
    # of a log line's write: logging there can fail ("reentrant call inside
    # BufferedWriter"), and did in the demo test, leaving the scheduler running after
    # SIGTERM. The handler must set the flag and do no I/O.
    class Failing(logging.Handler):
        def handle(self, record: logging.LogRecord) -> bool:
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stdout>'>")

    worker = Worker(worker_id="t")
    failing = Failing()
    logging.getLogger("django_schedulinator").addHandler(failing)
    try:
        worker._on_signal(signal.SIGTERM, None)
    finally:
        logging.getLogger("django_schedulinator").removeHandler(failing)
    assert worker.stopping
    assert worker.stop_signal == "SIGTERM"
