"""Missed-run alerts end to end, with real processes: two ``run_scheduler`` subprocesses,
a real RQ worker for one queue and none for another, and a webhook receiver that verifies
every notification's signature. Each occurrence whose runs wait on the stopped workers is
notified exactly once; none of those the running worker takes is. And ``scheduler_status
--notify`` as a cron job: once per outage, and a storm told as one digest by runs killed
at their deadline."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import timedelta
from typing import Any

import django_rq
import pytest
from django.conf import settings as django_settings
from django.db.models import Q
from django.utils import timezone
from rq import Worker as RQWorker

from django_schedulinator.models import Notification, Run, Schedule
from django_schedulinator.timing import to_ms, truncate_ms

from .support.handoff import empty_queue, until
from .support.processes import ROOT, Schedulers, subprocess_env
from .support.schedules import make_due, make_schedule
from .support.webhook_receiver import SECRET, Received, webhook_receiver

QUEUE = django_settings.RQ_TEST_QUEUE
STALLED = django_settings.RQ_STALLED_QUEUE  # no worker listens to it


@pytest.fixture
def queues() -> Any:
    for name in (QUEUE, STALLED):
        empty_queue(name)
    yield
    for name in (QUEUE, STALLED):
        empty_queue(name)


def every_second(name: str, *, grace: timedelta, **fields: Any) -> Schedule:
    return make_schedule(
        name,
        kind="interval",
        interval=timedelta(seconds=1),
        task="tests.noop",
        dispatcher="jobs",
        grace=grace,
        # A little ahead: the first occurrence is not late before a scheduler is up.
        next_run_at=truncate_ms(timezone.now() + timedelta(seconds=2)),
        **fields,
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the schedulers and the worker see the commits
def test_runs_no_worker_takes_are_notified_exactly_once_and_none_while_workers_run(
    settings: Any, schedulers: Schedulers, key_prefix: str, queues: None
) -> None:
    with webhook_receiver() as receiver:
        dispatchers = {
            "jobs": {
                "BACKEND": "django_schedulinator.dispatch.rq.RQDispatcher",
                "OPTIONS": {"QUEUE": QUEUE},
            },
            "hooks": {
                "BACKEND": "django_schedulinator.dispatch.webhook.WebhookDispatcher",
                "OPTIONS": {
                    "TARGETS": {"ops": {"URL": f"{receiver.url}/alerts", "SECRET": SECRET}}
                },
            },
        }
        notify = {
            "BACKEND": "django_schedulinator.operations.notifiers.WebhookNotifier",
            "OPTIONS": {"DISPATCHER": "hooks", "TARGET": "ops"},
        }
        settings.SCHEDULINATOR = {
            **settings.SCHEDULINATOR,
            "DISPATCHERS": dispatchers,
            "NOTIFY": notify,
        }
        rq_worker = schedulers.popen([sys.executable, "-m", "django", "rqworker", QUEUE])
        queue = django_rq.get_queue(QUEUE)
        until(lambda: any(w.pid == rq_worker.pid for w in RQWorker.all(queue=queue)), 120)

        stalled = every_second(
            "stalled", grace=timedelta(seconds=2), dispatch_options={"queue": STALLED}
        )
        # A generous grace: a bound on how long the worker may take, not a timing under test.
        working = every_second("working", grace=timedelta(seconds=30))
        env = subprocess_env(
            key_prefix,
            SCHEDULINATOR_TEST_DISPATCHERS=json.dumps(dispatchers),
            SCHEDULINATOR_TEST_NOTIFY=json.dumps(notify),
            SCHEDULINATOR_TEST_MISSED_CHECK="0.5",
        )
        procs = [schedulers.start("--worker-id", f"s{n}", env=env) for n in (1, 2)]

        def notified() -> list[Received]:
            return [r for r in receiver.received if r.path == "/alerts"]

        def succeeded() -> int:
            return Run.objects.filter(schedule=working, status="succeeded").count()

        def raised() -> int:
            return Notification.objects.filter(schedule_id=stalled.pk).count()

        until(lambda: len(notified()) >= 1 and raised() >= 4 and succeeded() >= 4, 120)
        for proc in procs:  # a stop sends what is queued before it exits
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(120) == 0

        received = notified()
        assert all(r.verified for r in received)
        ids = [r.headers["webhook-id"] for r in received]
        assert len(ids) == len(set(ids)), ids  # each message once...
        # ... each miss in one of them (alone, or in a digest past the rate limit)...
        told = [m for r in received for m in (r.body.get("listed") or [r.body])]
        assert len({m["id"] for m in told}) == len(told)
        # ... the first of the streak alone: the next ones are grouped with it, for a
        # reminder an hour on (NOTIFY_REPEAT_SECONDS), whichever scheduler raised them ...
        assert [m["role"] for m in told] == ["first"]
        # ... and each occurrence the check raised, by whichever scheduler, told, grouped
        # or still waiting in the outbox (raised by a last check that a stop did not wait
        # for).
        missed = Run.objects.filter(schedule=stalled).exclude(missed_at=None)
        not_sent = Notification.objects.filter(Q(delivered_at=None) | Q(role="grouped"))
        assert {m["id"] for m in told} | {
            f"missed:{sid}:{to_ms(at)}"
            for sid, at in not_sent.values_list("schedule_id", "scheduled_for")
        } == {f"missed:{stalled.pk}:{to_ms(r.scheduled_for)}" for r in missed}
        # One message for the streak, however many misses and schedulers.
        assert Notification.objects.exclude(role="grouped").count() == 1
        assert {(m["schedule"], m["reason"]) for m in told} == {("stalled", "no_outcome")}
        assert {r.status for r in missed} == {"dispatched"}  # handed off, never taken

        # The running worker's runs: none raised, none notified.
        assert not Run.objects.filter(schedule=working).exclude(missed_at=None).exists()
        working.refresh_from_db()
        assert working.missed_at is None


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the command sees the commits
def test_scheduler_status_notify_from_cron_tells_of_the_outage_once(
    settings: Any, key_prefix: str, built_index: Any
) -> None:
    """Every scheduler down: ``manage.py scheduler_status --notify`` as a cron job runs it,
    in a process of its own that ends right after. Run twice (two hosts, or two minutes),
    it tells of the outage and of the occurrence that never fired once."""
    with webhook_receiver() as receiver:
        dispatchers = {
            "hooks": {
                "BACKEND": "django_schedulinator.dispatch.webhook.WebhookDispatcher",
                "OPTIONS": {"TARGETS": {"ops": {"URL": receiver.url, "SECRET": SECRET}}},
            }
        }
        notify = {
            "BACKEND": "django_schedulinator.operations.notifiers.WebhookNotifier",
            "OPTIONS": {"DISPATCHER": "hooks", "TARGET": "ops"},
        }
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": dispatchers}
        schedule = make_schedule(
            "nightly",
            kind="cron",
            cron="0 3 * * *",
            grace=timedelta(seconds=1),
            next_run_at=truncate_ms(timezone.now() - timedelta(minutes=5)),
        )
        Schedule.objects.filter(pk=schedule.pk).update(
            updated_at=timezone.now() - timedelta(minutes=5)
        )
        env = subprocess_env(
            key_prefix,
            SCHEDULINATOR_TEST_DISPATCHERS=json.dumps(dispatchers),
            SCHEDULINATOR_TEST_NOTIFY=json.dumps(notify),
            SCHEDULINATOR_TEST_MISSED_CHECK="10",
        )
        argv = [sys.executable, "-m", "django", "scheduler_status", "--no-drift", "--notify"]
        printed = []
        for _ in range(2):
            done = subprocess.run(
                argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 1, done.stdout + done.stderr  # unhealthy, as it is
            printed.append(done.stdout)
        assert "no scheduler alive: raised now; missed runs raised now: 1" in printed[0]
        assert "no scheduler alive: nothing new to raise; missed runs raised now: 0" in printed[1]
        told = {r.body["type"]: r for r in receiver.received}
        assert sorted(r.body["type"] for r in receiver.received) == [
            "alert.missed",
            "alert.no_scheduler",
        ]
        assert all(r.verified for r in receiver.received)
        assert told["alert.missed"].body["reason"] == "not_fired"
        assert told["alert.missed"].body["schedule"] == "nightly"


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the commands see the commits
def test_a_storm_is_told_as_one_digest_by_cron_checks_killed_at_their_deadline(
    settings: Any, key_prefix: str, built_index: Any
) -> None:
    """Issue 32, item 14: 30 occurrences never fired, a webhook that answers in half a
    second, and ``scheduler_status --notify`` killed 5 s after it starts (a CronJob's
    ``activeDeadlineSeconds``). All 30 were marked raised, 5 or 6 told, and later runs raised
    nothing. Now the first message (one digest of all 30) is held by the receiver past the
    deadline and its sender killed; a later run sends it again, the same message with the
    same id, and every miss is told."""
    with webhook_receiver() as receiver:
        receiver.delays["/alerts"] = 0.5
        receiver.hold("/alerts", 30)  # the first message outlives its sender
        dispatchers = {
            "hooks": {
                "BACKEND": "django_schedulinator.dispatch.webhook.WebhookDispatcher",
                "OPTIONS": {
                    "TARGETS": {"ops": {"URL": f"{receiver.url}/alerts", "SECRET": SECRET}}
                },
            }
        }
        notify = {
            "BACKEND": "django_schedulinator.operations.notifiers.WebhookNotifier",
            "OPTIONS": {"DISPATCHER": "hooks", "TARGET": "ops"},
            "EVENTS": ["missed"],
        }
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": dispatchers}
        ids = make_due(30, seconds_ago=300, grace=timedelta(seconds=1))
        Schedule.objects.filter(pk__in=ids).update(updated_at=timezone.now() - timedelta(minutes=5))
        expected = {
            f"missed:{pk}:{to_ms(at)}"
            for pk, at in Schedule.objects.filter(pk__in=ids).values_list("pk", "next_run_at")
        }
        env = subprocess_env(
            key_prefix,
            SCHEDULINATOR_TEST_DISPATCHERS=json.dumps(dispatchers),
            SCHEDULINATOR_TEST_NOTIFY=json.dumps(notify),
            SCHEDULINATOR_TEST_MISSED_CHECK="10",
            SCHEDULINATOR_TEST_LEASE="2",  # how long a sender's claim on a message lasts
            SCHEDULINATOR_TEST_SETTINGS=json.dumps({"NOTIFY_DIGEST_SIZE": 50}),
        )
        argv = [sys.executable, "-m", "django", "scheduler_status", "--no-drift", "--notify"]

        def told() -> set[str]:
            found = set()
            for r in receiver.received:
                listed = r.body.get("listed") or [r.body]
                found.update(m["id"] for m in listed)
            return found

        def waiting() -> bool:
            return Notification.objects.filter(delivered_at=None).exists()

        killed = runs = 0
        # The receiver records a message before it answers: told, and accepted.
        while (told() != expected or waiting()) and runs < 12:
            runs += 1
            try:
                subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=5)
            except subprocess.TimeoutExpired:
                killed += 1  # SIGKILL, at the deadline
        assert told() == expected, f"{len(told())} of 30 told in {runs} runs"
        assert killed >= 1  # the run whose message the receiver held
        assert {r.body["type"] for r in receiver.received} == {"alert.digest"}
        # One message, sent again after its sender was killed: a receiver drops the repeat.
        assert len(receiver.received) >= 2
        assert len({r.headers["webhook-id"] for r in receiver.received}) == 1
        assert all(r.verified and r.body["count"] == 30 for r in receiver.received)
