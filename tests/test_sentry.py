"""Sentry Crons check-ins (``django_schedulinator.contrib.sentry``, docs/sentry.md): a real
sentry-sdk, initialised with a DSN that points at an ingest endpoint this test runs
(``tests/support/sentry_receiver.py``), and real schedulers firing real schedules; what is asserted
is the envelopes the SDK posted."""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sentry_sdk

from django_schedulinator import checks, outcomes, resync_schedules, signals
from django_schedulinator.conf import SentryCrons
from django_schedulinator.contrib import sentry
from django_schedulinator.contrib.sentry_monitors import (
    Facts,
    Inexpressible,
    check_in_id,
    crontab,
    interval,
    monitor_config,
    monitor_slug,
)
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker

from .support.processes import Schedulers, output, subprocess_env, wait_for
from .support.schedules import make_due
from .support.sentry_receiver import SentryReceiver, sentry_receiver

HAND_OFF = {"BACKEND": "tests.support.dispatchers.HandOff", "OPTIONS": {"REPORTS": False}}
REPORTED = {"BACKEND": "tests.support.dispatchers.HandOff", "OPTIONS": {"REPORTS": True}}


@pytest.fixture
def ingest() -> Iterator[SentryReceiver]:
    """sentry-sdk initialised in this process, sending to a local ingest endpoint; its
    client closed and removed at the end. Its integrations stay off: they would patch this
    process for the rest of the suite."""
    with sentry_receiver() as receiver:
        sentry_sdk.init(
            dsn=receiver.dsn,
            environment="tests",
            default_integrations=False,
            auto_enabling_integrations=False,
        )
        try:
            yield receiver
        finally:
            receiver.release()
            sentry.outbox.flush(30)
            sentry_sdk.get_client().close(timeout=10)
            sentry_sdk.get_global_scope().set_client(None)


def switch_on(settings: Any, value: Any = True, **more: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "SENTRY_CRONS": value, **more}


def fire(**fields: Any) -> Schedule:
    """One schedule due now, indexed, and a scheduler's pass over it."""
    [sid] = make_due(1, **fields)
    resync_schedules([sid])
    Worker(once=True, worker_id="sentry").run()
    return Schedule.objects.get(pk=sid)


def sent() -> None:
    """Every check-in made so far handed to the SDK (the outbox), and sent by it."""
    assert sentry.outbox.flush(30)
    sentry_sdk.flush(timeout=30)


def check_ins(ingest: SentryReceiver, schedule: Schedule, count: int) -> list[dict[str, Any]]:
    """The check-ins of ``schedule`` once ``count`` of them have arrived, and all sent."""
    slug = monitor_slug(schedule.name)
    wait_for(lambda: len(ingest.check_ins_of(slug)) >= count)
    sent()
    return ingest.check_ins_of(slug)


def facts(**fields: Any) -> Facts:
    values: dict[str, Any] = {
        "name": "nightly",
        "kind": "cron",
        "cron": "0 3 * * *",
        "interval": None,
        "timezone": "Europe/Berlin",
        "day_rule": "either",
        "jitter": None,
        "task": "tests.record",
        "dispatcher": "default",
    }
    values.update(fields)
    return Facts(**values)


# -- slugs, ids and the monitor config (no database) ----------------------------------------


def test_a_monitor_slug_is_the_slugified_name_within_sentrys_50_characters() -> None:
    assert monitor_slug("Nightly digest") == "nightly-digest"
    assert monitor_slug("reports.weekly_totals") == "reports-weekly_totals"
    assert monitor_slug("Backup: Zürich (EU)") == "backup-zurich-eu"
    long_a, long_b = "a" * 60 + " one", "a" * 60 + " two"
    assert len(monitor_slug(long_a)) == 50
    assert monitor_slug(long_a) != monitor_slug(long_b)  # the hash tells them apart
    assert monitor_slug(long_a) == monitor_slug(long_a)  # and never changes
    # Nothing of the name is left by slugify: a hash of it.
    assert monitor_slug("日報") == monitor_slug("日報")
    assert monitor_slug("日報").startswith("schedule-")
    assert monitor_slug("日報") != monitor_slug("月報")


def test_every_check_in_of_an_occurrence_has_one_id_derived_from_its_key() -> None:
    assert check_in_id("42:1767225600000") == check_in_id("42:1767225600000")
    assert check_in_id("42:1767225600000") != check_in_id("42:1767225660000")
    assert uuid.UUID(check_in_id("42:1767225600000")).version == 5


@pytest.mark.parametrize(
    ("expr", "day_rule", "expected"),
    [
        ("*/5 * * * *", "either", "*/5 * * * *"),
        ("@daily", "either", "0 0 * * *"),
        ("0  9 * * MON-FRI", "either", "0 9 * * 1,2,3,4,5"),
        ("0 9 * JAN,JUL 1", "either", "0 9 * 1,7 1"),
        ("30 0 9 * * *", "either", "0 9 * * *"),  # a single second: the minute
        ("0 0 1-7 * 1", "either", "0 0 1-7 * 1"),  # either day field, as croniter reads it
        ("0 0 1-7 * 1", "both", None),  # the first Monday: no crontab says that
        ("0 0 */2 * 1", "either", None),  # cronsim: both fields; croniter: either
        ("*/10 * * * * *", "either", None),  # six times a minute
        ("0 0 L * *", "either", None),
        ("0 0 * * 1#1", "either", None),
        ("0 9 * * *; 0 12 * * 6", "either", None),  # a union: one monitor has one crontab
        ("0 9 * * *;", "either", "0 9 * * *"),  # one expression, however written
    ],
)
def test_a_cron_goes_to_sentry_only_as_a_crontab_that_means_the_same(
    expr: str, day_rule: str, expected: str | None
) -> None:
    if expected is None:
        with pytest.raises(Inexpressible):
            crontab(expr, day_rule)
    else:
        assert crontab(expr, day_rule) == expected


@pytest.mark.parametrize(
    ("every", "expected"),
    [
        (timedelta(minutes=15), (15, "minute")),
        (timedelta(minutes=90), (90, "minute")),
        (timedelta(hours=2), (2, "hour")),
        (timedelta(days=1), (1, "day")),
        (timedelta(days=14), (2, "week")),
        (timedelta(seconds=90), None),
        (timedelta(seconds=30), None),
    ],
)
def test_an_interval_goes_to_sentry_in_whole_minutes(
    every: timedelta, expected: tuple[int, str] | None
) -> None:
    if expected is None:
        with pytest.raises(Inexpressible):
            interval(every)
    else:
        value, unit = expected
        assert interval(every) == {"type": "interval", "value": value, "unit": unit}


def test_the_margin_comes_from_the_grace_the_jitter_or_the_setting(settings: Any) -> None:
    everyone = SentryCrons()
    assert "checkin_margin" not in monitor_config(facts(), everyone)  # Sentry's default
    default = SentryCrons(monitor_config={"checkin_margin": 3, "owner": "team:ops"})
    assert monitor_config(facts(), default)["checkin_margin"] == 3
    assert monitor_config(facts(), default)["owner"] == "team:ops"
    assert monitor_config(facts(grace=timedelta(minutes=10)), default)["checkin_margin"] == 10
    assert monitor_config(facts(grace=timedelta(seconds=61)), default)["checkin_margin"] == 2
    # A run fires up to its jitter late, and one more minute for the scheduler's lateness.
    assert monitor_config(facts(jitter=timedelta(minutes=5)), everyone)["checkin_margin"] == 6
    assert monitor_config(facts(grace=timedelta(days=60)), everyone)["checkin_margin"] == 40_320


def test_the_maximum_runtime_is_the_schedulers_own_limit_and_a_minute(settings: Any) -> None:
    everyone = SentryCrons()
    # TASK_TIMEOUT_SECONDS (300), @task(timeout=0.5), an alias's OUTCOME_TIMEOUT_SECONDS.
    assert monitor_config(facts(), everyone)["max_runtime"] == 6
    assert monitor_config(facts(task="tests.hang"), everyone)["max_runtime"] == 2
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "queue": {**REPORTED, "OPTIONS": {"REPORTS": True, "OUTCOME_TIMEOUT_SECONDS": 7200}}
        },
    }
    assert monitor_config(facts(dispatcher="queue"), everyone)["max_runtime"] == 121


def test_a_one_off_has_no_monitor() -> None:
    with pytest.raises(Inexpressible):
        monitor_config(facts(kind="once"), SentryCrons())


def test_a_solar_schedule_has_no_monitor() -> None:
    # Its time moves from day to day: no crontab or interval of Sentry's says it.
    with pytest.raises(Inexpressible, match="solar schedule's time moves"):
        monitor_config(facts(kind="solar"), SentryCrons())


def test_a_schedule_with_calendars_has_no_monitor() -> None:
    # Sentry would expect a check-in on each holiday, which the schedule skips or moves.
    with pytest.raises(Inexpressible, match="calendars exclude"):
        monitor_config(facts(calendars=["uk-holidays"]), SentryCrons())


def test_the_setting_chooses_schedules_by_name_and_pattern(settings: Any) -> None:
    from django_schedulinator.conf import app_settings

    assert app_settings.SENTRY_CRONS is None  # off by default
    switch_on(settings, {"SCHEDULES": ["nightly", "reports-*"], "EXCLUDE": ["reports-test*"]})
    chosen = app_settings.SENTRY_CRONS
    assert chosen is not None
    assert [chosen.monitors(n) for n in ("nightly", "reports-a", "reports-test-1", "Nightly")] == [
        True,
        True,
        False,
        False,
    ]
    switch_on(settings, True)
    chosen = app_settings.SENTRY_CRONS
    assert chosen is not None
    assert chosen.schedules is None
    assert chosen.monitors("anything")


def test_the_setting_in_the_docs_is_valid_and_chooses_what_it_says(settings: Any) -> None:
    from django_schedulinator.conf import app_settings

    from .support.doc_examples import example

    shown = example("sentry-setting", "sentry.md")["SCHEDULINATOR"]
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **shown}
    assert checks.check_settings() == []
    chosen = app_settings.SENTRY_CRONS
    assert chosen is not None
    names = ("nightly digest", "reports-weekly", "reports-test-1", "Nightly digest", "other")
    assert [chosen.monitors(n) for n in names] == [True, True, False, False, False]
    config = monitor_config(facts(), chosen)
    assert (config["checkin_margin"], config["owner"]) == (5, "team:ops")


# -- the checks -----------------------------------------------------------------------------


def test_no_check_message_while_the_integration_is_off() -> None:
    assert checks.check_sentry() == []


def test_e070_switched_on_without_sentry_sdk(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    switch_on(settings)
    monkeypatch.setitem(sys.modules, "sentry_sdk", None)  # what Python does for a blocked import
    [message] = checks.check_sentry()
    assert message.id == "schedulinator.E070"
    assert "django-schedulinator[sentry]" in (message.hint or "")


def test_w070_switched_on_and_sentry_not_initialised(settings: Any) -> None:
    switch_on(settings)
    [message] = checks.check_sentry()
    assert message.id == "schedulinator.W070"


def test_no_check_message_when_switched_on_and_initialised(
    settings: Any, ingest: SentryReceiver
) -> None:
    switch_on(settings)
    assert checks.check_sentry() == []


def test_the_receivers_are_connected_only_while_the_setting_is_on(settings: Any) -> None:
    """Off, the signals have no receiver: the scheduler builds no announcement and reads no
    nominal times for them (signals.send returns at once)."""
    assert not signals.occurrence_fired.has_listeners()
    assert not signals.run_finished.has_listeners()
    switch_on(settings)
    assert signals.occurrence_fired.has_listeners()
    assert signals.run_handed_off.has_listeners()
    assert signals.run_finished.has_listeners()
    switch_on(settings, False)
    assert not signals.occurrence_fired.has_listeners()


# -- check-ins from real schedulers -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_checks_in_in_progress_then_ok_under_one_id_with_its_monitor_config(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    switch_on(settings)
    schedule = fire(kind="cron", cron="*/5 * * * *", timezone="Europe/Berlin")

    started, ended = check_ins(ingest, schedule, 2)
    # The one that ran (due 5 s ago, off the cron's grid: a 5-minute mark passed since is
    # the latest, and the other is skipped, when the test runs just after one).
    run = Run.objects.exclude(status="skipped").get(schedule=schedule)
    assert run.status == "succeeded"
    assert (started["status"], ended["status"]) == ("in_progress", "ok")
    assert started["check_in_id"] == ended["check_in_id"] == check_in_id(run.idempotency_key)
    assert started["monitor_slug"] == monitor_slug(schedule.name)
    assert started["environment"] == "tests"
    assert started["monitor_config"] == {
        "schedule": {"type": "crontab", "value": "*/5 * * * *"},
        "timezone": "Europe/Berlin",
        "max_runtime": 6,
    }
    assert "monitor_config" not in ended  # the monitor is configured once per run


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_checks_in_error(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    switch_on(settings, {"MONITOR_CONFIG": {"checkin_margin": 3, "failure_issue_threshold": 2}})
    schedule = fire(task="tests.boom", interval=timedelta(hours=2))

    started, ended = check_ins(ingest, schedule, 2)
    assert (started["status"], ended["status"]) == ("in_progress", "error")
    assert started["check_in_id"] == ended["check_in_id"]
    assert started["monitor_config"] == {
        "schedule": {"type": "interval", "value": 2, "unit": "hour"},
        "checkin_margin": 3,
        "max_runtime": 6,
        "failure_issue_threshold": 2,
    }


@pytest.mark.django_db(transaction=True)
def test_a_hand_off_that_reports_no_outcome_checks_in_ok_at_the_hand_off(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    switch_on(settings, DISPATCHERS={"queue": HAND_OFF})
    schedule = fire(dispatcher="queue")

    started, ended = check_ins(ingest, schedule, 2)
    assert Run.objects.get(schedule=schedule).status == "dispatched"
    assert (started["status"], ended["status"]) == ("in_progress", "ok")
    assert started["check_in_id"] == ended["check_in_id"]


@pytest.mark.django_db(transaction=True)
def test_a_reported_outcome_closes_the_check_in_the_scheduler_opened(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    switch_on(settings, DISPATCHERS={"queue": {**REPORTED, "OPTIONS": {"REPORTS": True}}})
    schedule = fire(dispatcher="queue")
    [started] = check_ins(ingest, schedule, 1)
    assert started["status"] == "in_progress"

    run = Run.objects.get(schedule=schedule)
    sentry.rows.forget()  # as a worker process would: it knows nothing of the scheduler's
    assert outcomes.report_finished(run.idempotency_key, succeeded=False, error="worker died")
    _, ended = check_ins(ingest, schedule, 2)
    assert ended["status"] == "error"
    assert ended["check_in_id"] == started["check_in_id"]


@pytest.mark.django_db(transaction=True)
def test_only_the_chosen_recurring_schedules_check_in(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    switch_on(settings, {"SCHEDULES": ["bulk-*"], "EXCLUDE": ["bulk-quiet-*"]})
    chosen, quiet, other = make_due(3)
    Schedule.objects.filter(pk=quiet).update(name=f"bulk-quiet-{quiet}")
    Schedule.objects.filter(pk=other).update(name=f"other-{other}")
    one_off = make_due(1, kind="once", run_at=Schedule.objects.get(pk=chosen).next_run_at)
    resync_schedules([chosen, quiet, other, *one_off])
    Worker(once=True, worker_id="sentry").run()
    assert Run.objects.filter(status="succeeded").count() == 4

    check_ins(ingest, Schedule.objects.get(pk=chosen), 2)
    slugs = {c["monitor_slug"] for c in ingest.check_ins()}
    assert slugs == {monitor_slug(Schedule.objects.get(pk=chosen).name)}


@pytest.mark.django_db(transaction=True)
def test_a_timing_sentry_cannot_read_checks_in_without_a_config_and_says_so_once(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    switch_on(settings)
    schedule = fire(kind="cron", cron="*/10 * * * * *")
    started, ended = check_ins(ingest, schedule, 2)
    assert "monitor_config" not in started
    assert ended["status"] == "ok"
    assert caplog.text.count("checks in with Sentry without a monitor config") == 1
    assert "more than once a minute" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_grace_is_sent_as_the_checkin_margin(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    if not any(f.name == "grace" for f in Schedule._meta.concrete_fields):
        pytest.skip("Schedule.grace arrives with the missed-run alerts (migration 0005)")
    switch_on(settings)
    schedule = fire(grace=timedelta(minutes=15))
    [started, _] = check_ins(ingest, schedule, 2)
    assert started["monitor_config"]["checkin_margin"] == 15


@pytest.mark.django_db(transaction=True)
def test_a_sentry_that_does_not_answer_never_holds_up_the_scheduler(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    """The SDK's transport thread waits on the endpoint; the scheduler only queues."""
    switch_on(settings)
    ingest.hold()
    due = make_due(3)
    resync_schedules(due)
    Worker(once=True, worker_id="sentry").run()  # would never end if a check-in blocked
    assert Run.objects.filter(status="succeeded").count() == 3
    wait_for(lambda: ingest.waiting >= 1)  # the first envelope, still unanswered
    ingest.release()
    wait_for(lambda: len(ingest.check_ins()) == 6)


@pytest.mark.django_db(transaction=True)
def test_more_check_ins_than_the_sdks_queue_holds_all_arrive(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    """The SDK drops an envelope that finds its transport queue full; the outbox hands it
    half a queue at a time and waits for it to drain in between."""
    sentry_sdk.get_client().close(timeout=10)
    sentry_sdk.init(
        dsn=ingest.dsn,
        default_integrations=False,
        auto_enabling_integrations=False,
        transport_queue_size=4,
    )
    switch_on(settings)
    due = make_due(15)
    resync_schedules(due)
    Worker(once=True, worker_id="sentry").run()
    sent()
    assert len(ingest.check_ins()) == 30
    assert sentry.outbox.dropped == 0


@pytest.mark.django_db(transaction=True)
def test_the_read_of_the_rows_for_sentry_never_holds_up_the_scheduler(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    """The outbox's thread reads the rows; the scheduler only puts check-ins in it."""
    switch_on(settings)
    due = make_due(3)
    resync_schedules(due)
    with sentry.rows._lock:  # the outbox's thread waits here, before its query
        Worker(once=True, worker_id="sentry").run()
        assert Run.objects.filter(status="succeeded").count() == 3
        assert ingest.check_ins() == []
    wait_for(lambda: len(ingest.check_ins()) == 6)


@pytest.mark.django_db(transaction=True)
def test_a_check_in_that_cannot_be_made_is_logged_and_the_runs_go_on(
    settings: Any,
    built_index: DueIndex,
    ingest: SentryReceiver,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("transport gone")

    switch_on(settings)
    monkeypatch.setattr("sentry_sdk.crons.capture_checkin", broken)
    with caplog.at_level(logging.WARNING, logger="django_schedulinator.sentry"):
        due = make_due(2)
        resync_schedules(due)
        Worker(once=True, worker_id="sentry").run()
        sent()
    assert Run.objects.filter(status="succeeded").count() == 2
    assert caplog.text.count("The Sentry check-in 'in_progress' of") == 2
    assert caplog.text.count("The Sentry check-in 'ok' of") == 2
    assert "transport gone" in caplog.text
    assert "A receiver of a schedulinator signal raised" not in caplog.text


@pytest.mark.django_db(transaction=True)
def test_nothing_is_sent_without_the_setting(
    settings: Any, built_index: DueIndex, ingest: SentryReceiver
) -> None:
    due = make_due(2)
    resync_schedules(due)
    Worker(once=True, worker_id="sentry").run()
    assert Run.objects.filter(status="succeeded").count() == 2
    sent()
    assert ingest.check_ins() == []


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_run_scheduler_checks_in_and_a_worker_process_closes_its_hand_off(
    settings: Any,
    built_index: DueIndex,
    key_prefix: str,
    schedulers: Schedulers,
    ingest: SentryReceiver,
) -> None:
    """A real run_scheduler, with Sentry initialised in its settings: an inline run checks
    in and out there; a run handed off checks in there and out here, from the process that
    records its reported end, under the same id."""
    dispatchers = {"queue": REPORTED}
    switch_on(settings, DISPATCHERS=dispatchers)
    inline, handed = make_due(2)
    Schedule.objects.filter(pk=handed).update(dispatcher="queue")
    resync_schedules([inline, handed])
    env = subprocess_env(
        key_prefix,
        SCHEDULINATOR_TEST_SENTRY_DSN=ingest.dsn,
        SCHEDULINATOR_TEST_DISPATCHERS=json.dumps(dispatchers),
    )
    proc = schedulers.start("--max-seconds", "120", env=env)
    inline_schedule, handed_schedule = (Schedule.objects.get(pk=p) for p in (inline, handed))
    try:
        started, ended = check_ins(ingest, inline_schedule, 2)
        [opened] = check_ins(ingest, handed_schedule, 1)
    finally:
        proc.terminate()
        proc.wait(60)
    assert (started["status"], ended["status"]) == ("in_progress", "ok"), output(proc)
    assert started["check_in_id"] == ended["check_in_id"]
    assert opened["status"] == "in_progress"
    assert opened["monitor_config"]["max_runtime"] == 61  # OUTCOME_TIMEOUT_SECONDS 3600

    run = Run.objects.get(schedule=handed_schedule)
    assert outcomes.report_finished(run.idempotency_key, succeeded=True)
    _, closed = check_ins(ingest, handed_schedule, 2)
    assert (closed["status"], closed["check_in_id"]) == ("ok", opened["check_in_id"])
