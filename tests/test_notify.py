"""Notifications (``operations/``: ``notifiers``, ``delivery``, ``courier``, ``receivers``):
mail to ADMINS, a webhook target, your own class; each told of an event once, from the
signal that announced it; a notifier that raises or hangs is logged and holds nothing up.
In this process notifications are sent before the signal returns; in a scheduler's
threads, by a background thread."""

from __future__ import annotations

import io
import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import django
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.utils import timezone

from django_schedulinator import signals
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import AlertStreak, Notification, Run, Schedule
from django_schedulinator.operations import alerts
from django_schedulinator.operations.courier import Courier, courier
from django_schedulinator.operations.delivery import deliver_outbox
from django_schedulinator.operations.events import Event
from django_schedulinator.operations.health import cluster_status
from django_schedulinator.operations.notifiers import deliver
from django_schedulinator.operations.stage import stage_thread
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import to_ms, truncate_ms

from .support.commits import committed
from .support.doc_examples import example
from .support.handoff import fire
from .support.notifiers import Hang, Keep, Relay
from .support.passes import check_alerts
from .support.processes import looping, wait_for
from .support.redis_server import lose_redis
from .support.schedules import make_due, make_schedule
from .support.webhook_receiver import SECRET, webhook_receiver

pytestmark = pytest.mark.django_db

GRACE = timedelta(minutes=5)
REPORTING = {"BACKEND": "tests.support.dispatchers.HandOff", "OPTIONS": {"REPORTS": True}}


def admins(*addresses: str) -> list[Any]:
    """ADMINS as this Django takes it: addresses (6.0+, where pairs are deprecated), or
    (name, address) pairs (5.2)."""
    return list(addresses) if django.VERSION >= (6, 0) else [("", a) for a in addresses]


@pytest.fixture(autouse=True)
def setup(settings: Any, built_index: DueIndex) -> None:
    settings.ADMINS = admins("ops@example.com")
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": {"queue": REPORTING}}
    Keep.told.clear()
    Keep.threads.clear()
    Keep.connections.clear()
    for kept in (Relay.told, Relay.done, Relay.threads):
        kept.clear()


def notify_with(settings: Any, **config: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "NOTIFY": config}


def due(**fields: Any) -> Schedule:
    fields.setdefault("grace", GRACE)
    fields.setdefault("next_run_at", truncate_ms(timezone.now() - timedelta(seconds=5)))
    return make_schedule(kind="interval", interval=timedelta(hours=1), **fields)


def after_grace() -> datetime:
    return timezone.now() + GRACE + timedelta(seconds=1)


# -- mail to ADMINS ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_missed_run_mails_the_admins_with_its_time_reason_and_page(
    settings: Any, mailoutbox: list[Any]
) -> None:
    notify_with(settings, BASE_URL="https://ops.example.com")
    schedule = due(name="nightly-report", timezone="Europe/Berlin", task="tests.boom")
    fire()
    run = Run.objects.get(schedule=schedule)
    assert mailoutbox == []  # the failure itself is not told of: "failed" is not asked for

    check_alerts(after_grace())

    [mail] = mailoutbox
    local = f"{run.scheduled_for.astimezone(ZoneInfo('Europe/Berlin')):%Y-%m-%d %H:%M:%S %Z}"
    assert mail.to == ["ops@example.com"]
    assert mail.subject == f"[Django] Missed run of 'nightly-report', {local} (failed)"
    assert f"Occurrence: {local}" in mail.body
    assert f"({run.scheduled_for.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC)" in mail.body
    # What the run said, apart from why it is missed ("Reason: failed: it failed" read as
    # one tautology, issue 35, item 10).
    assert (
        "Why: Its run failed (the task raised, or its hand-offs were given up on).\n"
        "Error: RuntimeError: boom\n"
    ) in mail.body
    assert "within its grace of 0:05:00" in mail.body
    assert (
        f"https://ops.example.com/admin/django_schedulinator/schedule/{schedule.pk}/change/"
        in mail.body
    )
    check_alerts(after_grace() + timedelta(minutes=1))
    assert len(mailoutbox) == 1  # once


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_an_auto_pause_mails_the_admins(mailoutbox: list[Any]) -> None:
    due(name="flaky", task="tests.boom", pause_after_failures=1, grace=None)
    fire()
    [mail] = mailoutbox
    assert mail.subject == "[Django] 'flaky' was paused after failures in a row"
    assert "pause_after_failures" in mail.body


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_failed_runs_are_told_of_only_when_asked_for(settings: Any, mailoutbox: list[Any]) -> None:
    # Not asked for: nothing waits in the outbox for them.
    due(task="tests.boom", grace=None)
    fire()
    deliver_outbox()
    assert mailoutbox == []
    assert not Notification.objects.exists()

    # Asked for: the failure is an entry of the outbox, written with the run's end, and
    # goes with the next delivery step (a scheduler's, after its missed-run check).
    notify_with(settings, EVENTS=["failed"])
    schedule = due(name="asked", task="tests.boom", grace=None)
    fire()
    assert mailoutbox == []
    deliver_outbox()
    [mail] = mailoutbox
    assert mail.subject.startswith("[Django] Failed run of 'asked', ")
    assert "Error:\nTraceback" in mail.body
    assert "RuntimeError: boom\n" in mail.body
    assert f"Run: {Run.objects.get(schedule=schedule).pk}" in mail.body


def test_no_scheduler_alive_mails_the_admins_once(index: DueIndex, mailoutbox: list[Any]) -> None:
    assert alerts.no_scheduler_alive(False, index=index)
    assert not alerts.no_scheduler_alive(False, index=index)
    [mail] = mailoutbox
    assert mail.subject.startswith("[Django] No scheduler is running (noticed at ")
    assert "no schedule fires until one runs again" in mail.body


def test_mail_to_nobody_reads_nothing(
    settings: Any, mailoutbox: list[Any], django_assert_num_queries: Any
) -> None:
    """Without ADMINS the default notifier wants nothing: not even the schedule's name."""
    settings.ADMINS = []
    event = Event("missed", timezone.now(), schedule_id=1, reason="failed")
    with django_assert_num_queries(0):
        deliver(event)
    assert mailoutbox == []


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_without_a_notifier_nothing_is_told(settings: Any, mailoutbox: list[Any]) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "NOTIFY": None}
    assert not signals.run_missed.receivers
    due(task="tests.boom", pause_after_failures=1)
    fire()
    assert len(check_alerts(after_grace())) == 1  # still raised: signal, mark, counter
    assert mailoutbox == []


# -- a webhook target --------------------------------------------------------------------------


def webhook_notifier(settings: Any, url: str) -> None:
    """The example of docs/alerts.md, its target at the test's receiver."""
    config = example("notify-webhook", "alerts.md")["SCHEDULINATOR"]
    target = {"URL": f"{url}/alerts", "SECRET": SECRET}
    config["DISPATCHERS"]["hooks"]["OPTIONS"]["TARGETS"]["ops"] = target
    dispatchers = {**settings.SCHEDULINATOR["DISPATCHERS"], **config.pop("DISPATCHERS")}
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **config, "DISPATCHERS": dispatchers}


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_missed_run_is_posted_signed_to_a_named_webhook_target(settings: Any) -> None:
    with webhook_receiver() as receiver:
        webhook_notifier(settings, receiver.url)
        schedule = due(name="hourly-sync", dispatcher="queue")
        fire()
        run = Run.objects.get(schedule=schedule)

        check_alerts(after_grace())

        [received] = receiver.received
        assert received.verified  # the Standard Webhooks library checked the signature
        assert received.path == "/alerts"
        event_id = f"missed:{schedule.pk}:{to_ms(run.scheduled_for)}"
        assert received.headers["webhook-id"] == event_id
        body = received.body
        assert body["type"] == "alert.missed"
        assert body["id"] == event_id
        assert (body["schedule"], body["schedule_id"], body["run_id"]) == (
            "hourly-sync",
            schedule.pk,
            run.pk,
        )
        assert (body["reason"], body["grace_seconds"]) == ("no_outcome", 300.0)
        assert body["scheduled_for_ms"] == to_ms(run.scheduled_for)


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_webhook_target_that_refuses_is_logged(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with webhook_receiver() as receiver:
        receiver.answer("/alerts", 500)
        webhook_notifier(settings, receiver.url)
        schedule = due(dispatcher="queue")
        fire()
        with caplog.at_level(logging.ERROR, logger="django_schedulinator.notify"):
            [found] = check_alerts(after_grace())
        assert found.schedule_id == schedule.pk
        assert "answered HTTP 500" in caplog.text
        schedule.refresh_from_db()
        assert schedule.missed_at is not None  # raised all the same


# -- the outbox: delivered once accepted, retried, digests, the rate limit ------------------------


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_refused_notification_waits_in_the_outbox_and_goes_again_after_its_back_off(
    settings: Any,
) -> None:
    """Issue 32, item 14: a raised miss is an entry of the outbox until its notifier accepted
    it. Refused, it stays, with its attempt and error, and goes again (with the same id)
    once its back-off has ended."""
    with webhook_receiver() as receiver:
        receiver.answer("/alerts", 500)
        webhook_notifier(settings, receiver.url)
        schedule = due(dispatcher="queue")
        fire()
        run = Run.objects.get(schedule=schedule)

        check_alerts(after_grace())  # refused
        [entry] = Notification.objects.all()
        assert (entry.delivered_at, entry.attempts) == (None, 1)
        assert "answered HTTP 500" in entry.last_error
        assert entry.next_attempt_at is not None
        assert entry.next_attempt_at > timezone.now()
        assert deliver_outbox().messages == 0  # backing off: not due yet
        assert len(receiver.received) == 1

        [warning] = cluster_status(drift=False).warnings  # scheduler_status says so
        assert warning.code == "alerts-undelivered"
        assert "1 alert(s) (missed or failed runs) wait in the alerts' outbox" in warning.message
        assert "answered HTTP 500" in warning.message

        Notification.objects.update(next_attempt_at=timezone.now())  # the back-off ends
        report = deliver_outbox()
        assert (report.messages, report.told, report.waiting) == (1, 1, 0)
        event_id = f"missed:{schedule.pk}:{to_ms(run.scheduled_for)}"
        assert [r.headers["webhook-id"] for r in receiver.received] == [event_id, event_id]
        entry.refresh_from_db()
        assert entry.delivered_at is not None
        assert deliver_outbox().messages == 0  # delivered once
        assert not cluster_status(drift=False).warnings


def test_a_storm_goes_as_one_digest_and_the_rate_limit_holds_the_rest(
    settings: Any, mailoutbox: list[Any]
) -> None:
    """Issue 32, item 14: more misses than the rate limit lets through one by one go as one
    message that lists the first NOTIFY_DIGEST_SIZE and counts the rest; a few go one by
    one while the minute's messages last; past them, they wait for the next minute."""
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "NOTIFY_MESSAGES_PER_MINUTE": 3,
        "NOTIFY_DIGEST_SIZE": 10,
    }
    make_due(30, grace=GRACE)
    check_alerts(after_grace())
    [digest] = mailoutbox
    assert digest.subject.startswith("[Django] 30 missed runs: ")
    assert digest.body.count("\n- ") == 10  # listed, each with its schedule's name
    assert "... and 20 more." in digest.body

    make_due(2, grace=GRACE)
    check_alerts(after_grace())  # within the minute's three messages: one by one
    assert [m.subject.startswith("[Django] Missed run of ") for m in mailoutbox[1:]] == [True] * 2

    make_due(1, grace=GRACE)
    [_late] = check_alerts(after_grace())
    report = deliver_outbox()
    assert (report.rate_limited, report.waiting, len(mailoutbox)) == (True, 1, 3)

    minute_ago = timezone.now() - timedelta(minutes=1, seconds=1)
    Notification.objects.exclude(delivered_at=None).update(delivered_at=minute_ago)
    assert deliver_outbox().messages == 1  # the next minute's
    assert len(mailoutbox) == 4


def test_a_digest_tells_a_notifier_of_your_own_what_it_lists(settings: Any) -> None:
    notify_with(settings, BACKEND="tests.support.notifiers.Keep")
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "NOTIFY_MESSAGES_PER_MINUTE": 1}
    make_due(3, grace=GRACE)
    check_alerts(after_grace())
    [digest] = Keep.told
    assert (digest.kind, digest.count, len(digest.listed)) == ("digest", 3, 3)
    assert {e.kind for e in digest.listed} == {"missed"}
    assert all(e.schedule_name.startswith("bulk-") for e in digest.listed)
    body = digest.as_dict()
    assert (body["type"], body["count"], body["more"]) == ("alert.digest", 3, 0)
    assert [m["id"] for m in body["listed"]] == [e.id for e in digest.listed]
    assert body["id"] == digest.id


@pytest.mark.django_db(transaction=True)  # deliverers on connections of their own
def test_several_deliverers_at_once_tell_each_miss_once(settings: Any) -> None:
    notify_with(settings, BACKEND="tests.support.notifiers.Keep")
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "NOTIFY_MESSAGES_PER_MINUTE": 1000}
    make_due(40, grace=GRACE)
    alerts.check(after_grace())
    start = threading.Barrier(4)

    def deliverer() -> None:
        try:
            start.wait()
            deliver_outbox()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=deliverer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    told = [e.id for e in Keep.told]
    assert len(told) == len(set(told)) == 40
    assert not Notification.objects.filter(delivered_at=None).exists()


def test_a_deadline_between_sends_leaves_the_rest_to_the_next_step(settings: Any) -> None:
    notify_with(settings, BACKEND="tests.support.notifiers.Keep")
    make_due(5, grace=GRACE)
    alerts.check(after_grace())
    report = deliver_outbox(should_stop=lambda: len(Keep.told) >= 2)
    assert (report.messages, report.stopped, report.waiting) == (2, True, 3)
    # Released at once, not held until a claim expires: the next step takes them.
    assert not Notification.objects.filter(delivered_at=None).exclude(claimed_by="").exists()
    assert deliver_outbox().messages == 3
    assert len({e.id for e in Keep.told}) == len(Keep.told) == 5


def test_scheduler_status_notify_tells_of_missed_runs_while_redis_is_down(
    settings: Any, mailoutbox: list[Any]
) -> None:
    """Issue 32, item 16: the missed-run check needs only SQL. With Redis away the cron
    check still raises and tells (on this host's clock, logged), then exits 2."""
    schedule = due(name="nightly", next_run_at=truncate_ms(timezone.now() - 2 * GRACE))
    Schedule.objects.filter(pk=schedule.pk).update(updated_at=timezone.now() - 2 * GRACE)
    lose_redis(settings)
    out = io.StringIO()
    with pytest.raises(CommandError) as failed, committed():
        call_command("scheduler_status", "--no-drift", "--notify", stdout=out)
    assert failed.value.returncode == 2
    assert "Redis cannot be reached" in str(failed.value)
    [mail] = mailoutbox
    assert mail.subject.startswith("[Django] Missed run of 'nightly', ")
    assert "missed runs raised now: 1" in out.getvalue()
    schedule.refresh_from_db()
    assert schedule.missed_at is not None


# -- a schedule that keeps failing: one message, a reminder, one when it recovers -----------------


def failing_every_20_seconds(runs: int) -> Schedule:
    """A schedule whose task raises, fired ``runs`` times (one occurrence each), its grace
    10 seconds."""
    schedule = due(name="every-20s", task="tests.boom", grace=timedelta(seconds=10))
    fire()
    for _ in range(runs - 1):
        fire(schedule)
    return schedule


@pytest.mark.parametrize(("repeat", "mails"), [(3600, 2), (None, 8)])
@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_schedule_that_keeps_failing_is_told_of_once_per_event_until_it_recovers(
    settings: Any, mailoutbox: list[Any], repeat: int | None, mails: int
) -> None:
    """A failing 20-second schedule mailed a "Missed run" for each occurrence, and with
    "failed" in EVENTS a "Failed run" too: 8 mails in 80 s (issue 35, item 10). Per schedule
    and event, the first alert is sent and the next ones are grouped with it, each decision
    written with its alert in the outbox; one message says when a run succeeds again.
    NOTIFY_REPEAT_SECONDS None sends each alert alone, as before."""
    notify_with(settings, EVENTS=["missed", "failed"])
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "NOTIFY_REPEAT_SECONDS": repeat}
    schedule = failing_every_20_seconds(4)
    check_alerts(timezone.now() + timedelta(seconds=11))

    subjects = [m.subject for m in mailoutbox]
    assert len(subjects) == mails, subjects
    assert sum("Failed run of 'every-20s'" in s for s in subjects) == mails // 2
    assert sum("Missed run of 'every-20s'" in s for s in subjects) == mails // 2
    if repeat is None:
        return
    failed, missed = sorted(mailoutbox, key=lambda m: m.subject)
    for mail in (failed, missed):
        assert "While its " in mail.body
        assert "a reminder counts them every 1:00:00 (NOTIFY_REPEAT_SECONDS)" in mail.body
    # Every alert is in the outbox, each delivered: two sent, the rest grouped.
    roles = Notification.objects.values_list("kind", "role", "delivered_at")
    assert sorted((kind, role) for kind, role, _ in roles) == [
        ("failed", "first"), *[("failed", "grouped")] * 3,
        ("missed", "first"), *[("missed", "grouped")] * 3,
    ]  # fmt: skip
    assert all(delivered is not None for *_, delivered in roles)

    # It keeps failing: nothing more is sent.
    fire(schedule)
    check_alerts(timezone.now() + timedelta(seconds=11))
    assert len(mailoutbox) == 2

    # It succeeds again: one message per event says so, with how many came before.
    Schedule.objects.filter(pk=schedule.pk).update(task="tests.record")
    fire(schedule)
    check_alerts(timezone.now() + timedelta(seconds=11))
    recovered = [m for m in mailoutbox[2:]]
    assert [m.subject.split(", ")[0] for m in recovered] == [
        "[Django] Recovered: 'every-20s' succeeded again"
    ] * 2
    bodies = sorted(m.body for m in recovered)
    assert "succeeded again, after 5 failed runs in a row since " in bodies[0]
    assert "succeeded again, after 5 missed runs in a row since " in bodies[1]
    assert not AlertStreak.objects.filter(ended_at=None).exists()
    check_alerts(timezone.now() + timedelta(minutes=1))
    assert len(mailoutbox) == 4  # once
    # Ended streaks are kept as long as delivered alerts, a week, then pruned.
    AlertStreak.objects.update(ended_at=timezone.now() - timedelta(days=8))
    deliver_outbox()
    assert not AlertStreak.objects.exists()

    # Failing again is a new streak: told of again.
    Schedule.objects.filter(pk=schedule.pk).update(task="tests.boom")
    fire(schedule)
    deliver_outbox()
    assert mailoutbox[4].subject.startswith("[Django] Failed run of 'every-20s'")


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_streak_that_goes_on_is_recalled_by_a_reminder_at_most_every_repeat_seconds(
    settings: Any, mailoutbox: list[Any]
) -> None:
    """The throttle: while a schedule keeps missing its runs, one reminder, which counts
    them, goes with the first miss raised NOTIFY_REPEAT_SECONDS (an hour) or more after the
    streak's last message; the check raises at the time it is given."""
    schedule = due(name="hourly-sync", dispatcher="queue")  # handed off, never reported
    fire()
    first_check = after_grace()
    check_alerts(first_check)
    [first] = mailoutbox
    assert first.subject.startswith("[Django] Missed run of 'hourly-sync'")
    fire(schedule)
    check_alerts(first_check + timedelta(minutes=10))
    assert len(mailoutbox) == 1
    fire(schedule)
    check_alerts(first_check + timedelta(minutes=61))
    [reminder] = mailoutbox[1:]
    streak = AlertStreak.objects.get(schedule_id=schedule.pk, kind="missed")
    since = Event("missed", timezone.now(), timezone=schedule.timezone).local(streak.first_at)
    assert (
        reminder.subject
        == f"[Django] Still missing runs: 'hourly-sync', 3 missed runs since {since}"
    )
    assert "has had 3 missed runs in a row since" in reminder.body
    assert "Why: It was handed off and its end was never reported." in reminder.body
    # The same check found the next occurrence past its grace too: grouped after it.
    assert (streak.count, streak.told, streak.ended_at) == (4, 3, None)
    fire(schedule)
    check_alerts(first_check + timedelta(minutes=62))
    assert len(mailoutbox) == 2  # the next reminder an hour after this one


# -- your own class ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_notifier_of_your_own_is_told_each_event(settings: Any) -> None:
    notify_with(settings, BACKEND="tests.support.notifiers.Keep", EVENTS=["missed", "failed"])
    schedule = due(name="mine", task="tests.boom", timezone="America/New_York")
    fire()
    check_alerts(after_grace())
    failed, missed = Keep.told
    run = Run.objects.get(schedule=schedule)
    assert (failed.kind, failed.run_id) == ("failed", run.pk)
    assert failed.error.endswith("RuntimeError: boom\n")
    assert (missed.kind, missed.schedule_id, missed.schedule_name) == (
        "missed",
        schedule.pk,
        "mine",
    )
    assert (missed.scheduled_for, missed.reason, missed.grace) == (
        run.scheduled_for,
        "failed",
        GRACE,
    )
    assert missed.timezone == "America/New_York"
    assert missed.local(missed.scheduled_for).endswith(" EST")
    # Both from the outbox, by the delivery step after the check (outside a scheduler:
    # at once), the failure first: it was raised first, by the scheduler's recorder.
    assert Keep.threads == ["MainThread", "MainThread"]
    assert (failed.role, missed.role) == ("first", "first")


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_notifier_that_raises_is_logged_and_changes_nothing(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    notify_with(settings, BACKEND="tests.support.notifiers.Broken")
    schedule = due(task="tests.boom")
    fire()
    with caplog.at_level(logging.ERROR, logger="django_schedulinator.notify"):
        assert len(check_alerts(after_grace())) == 1
    assert "Could not notify of missed" in caplog.text
    assert "the pager service is down" in caplog.text
    schedule.refresh_from_db()
    assert schedule.missed_at is not None


# -- in a scheduler: a background thread ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the loop runs on a thread of its own
def test_in_a_scheduler_notifications_are_sent_by_a_thread_of_their_own(settings: Any) -> None:
    notify_with(settings, BACKEND="tests.support.notifiers.Keep")
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MISSED_CHECK_SECONDS": 0.2}
    soon = truncate_ms(timezone.now() + timedelta(seconds=1))
    due(task="tests.boom", pause_after_failures=1, grace=None, next_run_at=soon)
    due(task="tests.boom", grace=timedelta(seconds=2), next_run_at=soon)
    worker = Worker(worker_id="t")
    with looping(worker):
        wait_for(lambda: {e.kind for e in Keep.told} == {"auto_paused", "missed"}, 30)
    assert set(Keep.threads) == {"schedulinator-notify"}


@pytest.mark.django_db(transaction=True)
def test_a_notifier_that_hangs_holds_up_no_firing(settings: Any) -> None:
    """The notifier blocks; the scheduler goes on firing, and its stop waits a bounded time
    for the notifications still queued."""
    notify_with(settings, BACKEND="tests.support.notifiers.Hang")
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MISSED_CHECK_SECONDS": 0.2}
    Hang.release.clear()
    Hang.entered.clear()
    soon = truncate_ms(timezone.now() + timedelta(seconds=1))
    every_second = make_schedule(
        kind="interval",
        interval=timedelta(seconds=1),
        task="tests.boom",
        grace=timedelta(seconds=1, milliseconds=500),
        next_run_at=soon,
    )
    worker = Worker(worker_id="t")
    try:
        with looping(worker):
            wait_for(lambda: Hang.entered.is_set(), 30)
            fired = worker.counters.fired
            wait_for(lambda: worker.counters.fired >= fired + 3, 30)  # hung: still firing
            assert worker.counters.missed >= 1
    finally:
        Hang.release.set()
    assert Run.objects.filter(schedule=every_second).count() >= 3


def test_a_full_queue_drops_with_a_log(settings: Any, caplog: pytest.LogCaptureFixture) -> None:
    notify_with(settings, BACKEND="tests.support.notifiers.Hang")
    Hang.release.clear()
    Hang.entered.clear()
    box = Courier(size=1)
    box.send_in_background()
    try:
        at = timezone.now()
        with caplog.at_level(logging.ERROR, logger="django_schedulinator.notify"):
            box.put(Event("no_scheduler", at))  # taken by the thread, which hangs
            assert Hang.entered.wait(10)
            box.put(Event("no_scheduler", at + timedelta(seconds=1)))  # queued
            box.put(Event("no_scheduler", at + timedelta(seconds=2)))  # dropped
        assert box.dropped == 1
        assert "1 notification(s) dropped so far" in caplog.text
        assert not box.drain(0.2)  # bounded: the hung one is not waited for
    finally:
        Hang.release.set()
        box.send_in_background(False)
    assert box.drain(10)


@pytest.mark.django_db(transaction=True)  # the courier's thread reads the schedule
def test_the_couriers_thread_closes_its_connections_after_each_send(settings: Any) -> None:
    """The courier's thread lives as long as the process (a stage that is drained, never
    stopped): the connection it opened to complete an event is closed once it is sent."""
    notify_with(settings, BACKEND="tests.support.notifiers.Keep", EVENTS=["failed"])
    schedule = due(name="mine")
    box = Courier()
    box.send_in_background()
    try:
        box.put(Event("failed", timezone.now(), schedule_id=schedule.pk, error="boom"))
        assert box.drain(10)
    finally:
        box.send_in_background(False)
    [told] = Keep.told
    assert told.schedule_name == "mine"  # read on the courier's thread
    assert Keep.threads == ["schedulinator-notify"]
    [connection] = Keep.connections
    assert connection.connection is None


@pytest.mark.django_db(transaction=True)  # the courier's thread reads the schedule
def test_an_event_raised_on_the_couriers_thread_is_sent_at_once_not_queued(
    settings: Any,
) -> None:
    """A notifier that raises another event, on the courier's thread, has it sent there and
    then (nested in its own), never queued behind itself: nothing to wait on, no loop."""
    notify_with(settings, BACKEND="tests.support.notifiers.Relay", EVENTS=["failed"])
    schedule = due(name="relayed")
    event = Event("failed", timezone.now(), schedule_id=schedule.pk, error="boom")
    stage_thread("raises", lambda: courier.put(event)).join(10)  # queued: a stage thread
    assert courier.drain(10)
    assert Relay.threads == ["schedulinator-notify", "schedulinator-notify"]
    assert Relay.told == ["failed", "no_scheduler"]
    assert Relay.done == ["no_scheduler", "failed"]  # nested: sent before the first ended


def test_a_built_in_notifiers_former_path_keeps_its_waiting_entries(
    settings: Any, mailoutbox: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Entries that wait under the mail notifier's former path (written before it moved
    from django_schedulinator.notify) are its own: sent, with no word of a notifier gone."""
    notify_with(settings, BACKEND="django_schedulinator.notify.MailNotifier")
    make_due(2, grace=GRACE)
    alerts.check(after_grace())
    Notification.objects.update(notifier="django_schedulinator.notify.MailNotifier")
    with caplog.at_level(logging.WARNING, logger="django_schedulinator.notify"):
        report = deliver_outbox()
    assert (report.notifier, report.messages, report.waiting) == (
        "django_schedulinator.operations.notifiers.MailNotifier",
        2,
        0,
    )
    assert len(mailoutbox) == 2
    assert "no longer configured" not in caplog.text


# -- the examples of docs/alerts.md, as written --------------------------------------------------


def test_the_grace_example_creates_a_schedule_with_its_grace() -> None:
    schedule = example("grace", "alerts.md")["schedule"]
    schedule.refresh_from_db()
    assert schedule.grace == timedelta(minutes=30)


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_the_mail_example_mails_each_event_it_lists(
    settings: Any, mailoutbox: list[Any], index: DueIndex
) -> None:
    config = example("notify-mail", "alerts.md")
    settings.ADMINS = admins(*config["ADMINS"])
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **config["SCHEDULINATOR"]}
    due(task="tests.boom", pause_after_failures=1)
    fire()  # failed, then paused
    check_alerts(after_grace())  # missed
    alerts.no_scheduler_alive(False, index=index)
    subjects = [mail.subject for mail in mailoutbox]
    assert len(subjects) == 4, subjects
    # The pause is told of once the outcome is committed, and the failure from the outbox:
    # on a busy machine the outbox's courier may send it first. The miss is raised by the
    # check, after both.
    first_two = sorted(subjects[:2], key=lambda subject: "paused" not in subject)
    assert first_two[0].endswith("was paused after failures in a row")
    assert first_two[1].startswith("[Django] Failed run of ")
    assert subjects[2].startswith("[Django] Missed run of ")
    assert subjects[3].startswith("[Django] No scheduler is running")
    assert all(mail.to == ["ops@example.com"] for mail in mailoutbox)


@pytest.mark.skipif(django.VERSION < (6, 1), reason="MAILERS is Django 6.1's")
def test_the_mailers_example_is_the_default_mailer_of_django_6_1(settings: Any) -> None:
    from django.core import mail

    settings.MAILERS = example("notify-mailers", "alerts.md")["MAILERS"]
    mailer = mail.mailers["default"]  # what mail_admins sends through
    assert (mailer.host, mailer.port, mailer.use_tls, mailer.timeout) == (
        "smtp.example.com", 587, True, 10,
    )  # fmt: skip


def test_the_custom_example_is_a_notifier(caplog: pytest.LogCaptureFixture) -> None:
    on_call_log = example("notify-custom", "alerts.md")["OnCallLog"]
    with caplog.at_level(logging.CRITICAL, logger="myproject.oncall"):
        on_call_log({}).notify(Event("no_scheduler", timezone.now()))
    assert "No scheduler is running" in caplog.text
