"""The dispatch seam (``dispatch/__init__.py``, ``dispatch/base.py``): the DISPATCHERS
setting, what a schedule may ask of its dispatcher, batches grouped by dispatcher in
lanes of their own, and hand-offs retried with the same key."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_schedulinator import services
from django_schedulinator.checks import check_settings
from django_schedulinator.dispatch import Occurrence, Progress, dispatchers
from django_schedulinator.dispatch.inline import InlineDispatcher
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker

from .models import Delivery
from .support.dispatchers import Blocking, Flaky, HandOff
from .support.doc_examples import example
from .support.handoff import run_in_thread
from .support.schedules import make_schedule

HAND_OFF = "tests.support.dispatchers.HandOff"


@pytest.fixture
def configure(settings: Any) -> Any:
    """Set SCHEDULINATOR['DISPATCHERS'] to the aliases given (BACKEND, OPTIONS)."""
    HandOff.received.clear()
    Flaky.attempts.clear()

    def configure(**aliases: dict[str, Any]) -> None:
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": aliases}

    return configure


def due(**fields: Any) -> Schedule:
    """A schedule due five seconds ago, in the index."""
    return make_schedule(next_run_at=timezone.now() - timedelta(seconds=5), **fields)


def error_ids(settings: Any, **values: Any) -> list[tuple[str, str]]:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **values}
    return [(m.id or "", m.msg) for m in check_settings()]


# -- the setting -------------------------------------------------------------------------


def test_with_nothing_configured_the_default_alias_is_the_inline_dispatcher() -> None:
    assert dispatchers.aliases() == ["default"]
    assert isinstance(dispatchers["default"], InlineDispatcher)
    assert dispatchers["default"] is dispatchers["default"]  # one shared instance


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "must be a dict of aliases"),
        ({"bad alias": {"BACKEND": HAND_OFF}}, "an alias is 1-100 characters"),
        ({"x": {"OPTIONS": {}}}, "['BACKEND'] must be a dotted path"),
        ({"x": {"BACKEND": HAND_OFF, "OPTIONS": []}}, "['OPTIONS'] must be a dict"),
        ({"x": {"BACKEND": HAND_OFF, "LOCATION": "y"}}, "must be a dict with BACKEND"),
    ],
)
def test_a_malformed_dispatchers_setting_is_e001(settings: Any, value: Any, message: str) -> None:
    [(check_id, text)] = error_ids(settings, DISPATCHERS=value)
    assert check_id == "schedulinator.E001"
    assert message in text


def test_the_replaced_dispatcher_setting_says_what_replaced_it(settings: Any) -> None:
    [(check_id, text)] = error_ids(settings, DISPATCHER=HAND_OFF)
    assert check_id == "schedulinator.E001"
    assert "replaced by DISPATCHERS" in text


@pytest.mark.parametrize(
    ("alias", "message"),
    [
        ({"BACKEND": "no.such.Dispatcher"}, "cannot be imported"),
        ({"BACKEND": "os.system"}, "which is not a BaseDispatcher"),
        ({"BACKEND": HAND_OFF, "OPTIONS": {"REPORT": True}}, "'REPORT' is not an option"),
        ({"BACKEND": HAND_OFF, "OPTIONS": {"MAX_ATTEMPTS": 0}}, "'MAX_ATTEMPTS' must be at least"),
        ({"BACKEND": HAND_OFF, "OPTIONS": {"REPORTS": "yes"}}, "'REPORTS' must be true or false"),
    ],
)
def test_a_dispatcher_that_cannot_be_built_is_e004(
    settings: Any, alias: dict[str, Any], message: str
) -> None:
    [(check_id, text)] = error_ids(settings, DISPATCHERS={"queue": alias})
    assert check_id == "schedulinator.E004"
    assert "['queue']" in text
    assert message in text


# -- what a schedule may ask --------------------------------------------------------------


def refusal(**fields: Any) -> dict[str, list[str]]:
    fields.setdefault("kind", Schedule.Kind.INTERVAL)
    fields.setdefault("interval", timedelta(hours=1))
    with pytest.raises(ValidationError) as caught:
        services.create(Schedule(name="refused", task="tests.record", **fields))
    return caught.value.message_dict


@pytest.mark.django_db
def test_a_schedule_names_a_configured_alias(configure: Any) -> None:
    configure(queue={"BACKEND": HAND_OFF})
    errors = refusal(dispatcher="celery")
    assert (
        "'celery' is not a dispatcher alias (configured: default, queue)" in errors["dispatcher"][0]
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"routing_key": "x"}, "has no option 'routing_key' (options it takes: priority, queue)"),
        ({"priority": 10}, "The option 'priority' must be at most 9, got 10"),
        ({"queue": 5}, "The option 'queue' must be a string, got 5"),
        (["reports"], "Must be a json object of options"),
    ],
)
def test_dispatch_options_are_checked_by_the_dispatcher(
    configure: Any, options: Any, message: str
) -> None:
    configure(queue={"BACKEND": HAND_OFF})
    errors = refusal(dispatcher="queue", dispatch_options=options)
    assert message.lower() in errors["dispatch_options"][0].lower()


@pytest.mark.django_db
def test_policies_that_need_outcomes_are_refused_on_a_dispatcher_that_never_learns_them(
    configure: Any,
) -> None:
    configure(fire_and_forget={"BACKEND": HAND_OFF})
    errors = refusal(dispatcher="fire_and_forget", overlap="skip", pause_after_failures=3)
    assert "Overlap 'skip' needs to know when the previous run ended" in errors["overlap"][0]
    assert "'fire_and_forget' (HandOff) never learns" in errors["overlap"][0]
    assert "Pause after failures needs" in errors["pause_after_failures"][0]
    # The same dispatcher told that its workers report outcomes accepts both.
    configure(fire_and_forget={"BACKEND": HAND_OFF, "OPTIONS": {"REPORTS": True}})
    make_schedule(dispatcher="fire_and_forget", overlap="skip", pause_after_failures=3)


@pytest.mark.django_db
def test_a_saved_schedule_whose_alias_was_removed_stays_editable(configure: Any) -> None:
    configure(queue={"BACKEND": HAND_OFF})
    schedule = make_schedule(dispatcher="queue")
    configure()  # the alias is gone from the settings
    services.pause(schedule, "while the broker moves")
    services.update(schedule, {"pause_note": "moving"})
    with pytest.raises(ValidationError, match="not a dispatcher alias"):  # a new one is refused
        services.update(schedule, {"dispatcher": "elsewhere"})


# -- batches, by dispatcher ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the inline task runs on a pool thread
def test_each_dispatcher_receives_its_own_schedules_with_their_options(
    configure: Any, built_index: DueIndex
) -> None:
    configure(
        reports={"BACKEND": HAND_OFF, "OPTIONS": {"REPORTS": True}},
        bulk={"BACKEND": HAND_OFF},
    )
    a = due(dispatcher="reports", dispatch_options={"queue": "reports", "priority": 9})
    b = due(dispatcher="bulk")
    inline = due(task="tests.record")

    Worker(worker_id="t").step()

    received = {o.schedule_id: (alias, o) for alias, o in HandOff.received}
    assert received[a.pk][0] == "reports"
    assert received[a.pk][1].dispatch_options == {"queue": "reports", "priority": 9}
    assert received[b.pk][0] == "bulk"
    assert inline.pk not in received
    assert Delivery.objects.filter(schedule_id=inline.pk).count() == 1  # ran inline
    run = Run.objects.get(schedule=a)
    assert (run.status, run.dispatcher, run.dispatch_options) == (
        "dispatched",
        "reports",
        {"queue": "reports", "priority": 9},
    )
    assert run.external_id == f"ext-{run.idempotency_key}"
    # A dispatcher that learns outcomes awaits them; one that never does, does not.
    assert run.outcome_due_by is not None
    assert Run.objects.get(schedule=b).outcome_due_by is None


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_alias_is_gone_fails_saying_so(configure: Any, built_index: DueIndex) -> None:
    configure(queue={"BACKEND": HAND_OFF})
    schedule = due(dispatcher="queue")
    configure()

    Worker(worker_id="t").step()

    run = Run.objects.get(schedule=schedule)
    assert run.status == "failed"
    assert "'queue' is not a dispatcher alias" in run.error


@pytest.mark.django_db(transaction=True)  # the loop's threads
def test_a_hung_dispatcher_holds_up_only_its_own_schedules(
    configure: Any, built_index: DueIndex
) -> None:
    Blocking.entered.clear()
    Blocking.release.clear()
    configure(hung={"BACKEND": "tests.support.dispatchers.Blocking"})
    stuck = due(dispatcher="hung")
    worker = Worker(worker_id="t", max_seconds=30)
    loop = run_in_thread(worker)
    try:
        assert Blocking.entered.wait(10)
        # The hung lane holds its batch; schedules of the inline dispatcher still fire.
        later = [due(task="tests.record") for _ in range(3)]
        deadline = time.monotonic() + 10
        while Delivery.objects.filter(schedule_id__in=[s.pk for s in later]).count() < 3:
            assert time.monotonic() < deadline, "the inline schedules did not fire"
            time.sleep(0.05)
        assert Run.objects.get(schedule=stuck).status == "pending"
    finally:
        Blocking.release.set()
        worker.stopping = True
        loop.join(30)
    assert Run.objects.get(schedule=stuck).status == "succeeded"


# -- hand-offs that fail ------------------------------------------------------------------


def take_over_until_ended(worker: Worker, run: Run, seconds: float = 10) -> Run:
    """Pass after pass (each takes over the runs whose backoff ended) until it ends."""
    deadline = time.monotonic() + seconds
    while True:
        run.refresh_from_db()
        if run.status not in Run.UNFINISHED:
            return run
        assert time.monotonic() < deadline, f"still {run.status}: {run.error}"
        worker._next_takeover = 0.0  # take over at every pass, not every quarter lease
        worker.step()
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
def test_a_failed_hand_off_is_retried_with_backoff_and_the_same_key(
    configure: Any, built_index: DueIndex
) -> None:
    configure(flaky={"BACKEND": "tests.support.dispatchers.Flaky",
                     "OPTIONS": {"RETRY_BACKOFF_SECONDS": 0.05}})  # fmt: skip
    Flaky.failures = 2
    schedule = due(dispatcher="flaky")
    worker = Worker(worker_id="t")
    worker.step()

    run = Run.objects.get(schedule=schedule)
    # Waiting for its retry: pending, held by no process, its error shown.
    assert (run.status, run.claim_token, run.error) == ("pending", "", "broker down (attempt 1)")
    assert run.lease_expires_at is not None

    run = take_over_until_ended(worker, run)
    assert run.status == "succeeded"
    assert run.error == ""
    assert Flaky.attempts == [(run.idempotency_key, attempt) for attempt in (1, 2, 3)]


@pytest.mark.django_db(transaction=True)
def test_a_hand_off_that_keeps_failing_fails_the_run_at_the_limit(
    configure: Any, built_index: DueIndex
) -> None:
    configure(flaky={"BACKEND": "tests.support.dispatchers.Flaky",
                     "OPTIONS": {"RETRY_BACKOFF_SECONDS": 0.05, "MAX_ATTEMPTS": 2}})  # fmt: skip
    Flaky.failures = 99
    schedule = due(dispatcher="flaky")
    worker = Worker(worker_id="t")
    worker.step()

    run = take_over_until_ended(worker, Run.objects.get(schedule=schedule))
    assert run.status == "failed"
    assert run.attempts == 2
    assert run.error == (
        "Handed off 2 time(s) without success; the last error: broker down (attempt 2)"
    )


@pytest.mark.django_db(transaction=True)
def test_a_dispatcher_that_raises_keeps_what_it_reported_and_retries_the_rest(
    configure: Any, built_index: DueIndex
) -> None:
    """What a dispatcher reported before it raised stays recorded and is never sent again; the
    rest of its batch is retried with the error, up to MAX_ATTEMPTS, instead of waiting for a
    take-over that sends the whole batch again, without end (issue 21, item 3)."""
    configure(breaks={"BACKEND": "tests.support.dispatchers.Breaks",
                      "OPTIONS": {"RETRY_BACKOFF_SECONDS": 0.05, "MAX_ATTEMPTS": 2}})  # fmt: skip
    sent = due(name="ok-sent", dispatcher="breaks")
    unsent = due(name="unsent", dispatcher="breaks")
    worker = Worker(worker_id="t")
    worker.step()

    run = Run.objects.get(schedule=sent)
    assert (run.status, run.external_id) == ("dispatched", f"ext-{run.idempotency_key}")
    run = Run.objects.get(schedule=unsent)
    assert (run.status, run.claim_token) == ("pending", "")  # waiting for its retry
    assert run.error.startswith("The dispatcher 'breaks' failed: RuntimeError: the broker")

    run = take_over_until_ended(worker, run)
    assert run.status == "failed"
    assert run.error.startswith("Handed off 2 time(s) without success; the last error: The")
    assert Run.objects.get(schedule=sent).attempts == 1


@pytest.mark.django_db(transaction=True)
def test_run_now_and_backfill_go_through_the_schedules_dispatcher(
    configure: Any, built_index: DueIndex
) -> None:
    configure(queue={"BACKEND": HAND_OFF})
    schedule = make_schedule(
        dispatcher="queue",
        dispatch_options={"queue": "reports"},
        kind="interval",
        interval=timedelta(minutes=10),
    )
    queued = services.run_now(schedule)
    now = timezone.now()
    services.backfill(schedule, now - timedelta(minutes=25), now - timedelta(minutes=1))

    Worker(worker_id="t").step()  # a take-over pass: it sends the queued runs

    sent = {o.key: (alias, o.dispatch_options) for alias, o in HandOff.received}
    runs = Run.objects.filter(schedule=schedule).exclude(status="skipped")
    assert {r.trigger for r in runs} == {"run_now", "backfill"}
    assert set(sent) == {r.idempotency_key for r in runs}
    assert all(value == ("queue", {"queue": "reports"}) for value in sent.values())
    assert Run.objects.get(pk=queued.pk).status == "dispatched"


@pytest.mark.django_db(transaction=True)  # the loop's threads
def test_a_stop_dispatches_every_batch_a_slow_lane_holds(
    configure: Any, built_index: DueIndex
) -> None:
    """A lane slower than the claims holds their batches (the claim waits a little for it,
    then queues them all the same); a stop dispatches all of them before the process exits
    (within its grace of a lease: 7.5 s of hand-offs here), rather than leaving them to a
    take-over that no scheduler may be left to do."""
    configure(slow={"BACKEND": "tests.support.dispatchers.Slow"})
    schedules = [due(dispatcher="slow") for _ in range(5)]
    worker = Worker(worker_id="t", batch_size=1, lease_seconds=30, once=True)
    loop = run_in_thread(worker)
    loop.join(60)

    assert not loop.is_alive()
    statuses = Run.objects.filter(schedule__in=schedules).values_list("status", flat=True)
    assert sorted(statuses) == ["succeeded"] * 5
    assert worker.counters.lane_full == 0


# -- the seam, as the docs show it -------------------------------------------------------------


class ExampleQueue:
    """What the docs' example sends to: a queue that is down once ``down`` is set."""

    class Unavailable(Exception):
        pass

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any], dict[str, Any], str]] = []
        self.down = False

    def send(self, task: str, args: list[Any], kwargs: dict[str, Any], *, key: str) -> str:
        if self.down:
            raise self.Unavailable("connection refused")
        self.sent.append((task, args, kwargs, key))
        return f"job-{len(self.sent)}"


def test_the_dispatcher_of_the_docs_hands_each_run_off_through_the_guard() -> None:
    """docs/dispatch.md "Writing a dispatcher", as written: each run is sent once; one that
    cannot be called fails alone; once the queue is down, the rest are retried."""
    namespace = example("writing-a-dispatcher")
    queue = namespace["my_queue"] = ExampleQueue()
    dispatcher = namespace["QueueDispatcher"]("jobs", {"URL": "queue://here"})

    def occurrence(run_id: int, **fields: Any) -> Occurrence:
        fields.setdefault("task", "tests.record")
        return Occurrence(
            key=f"{run_id}:1000", run_id=run_id, schedule_id=run_id, schedule_name="s",
            scheduled_for=timezone.now(), attempt=1, **fields,
        )  # fmt: skip

    first = dispatcher.dispatch(
        [occurrence(1, args=[1]), occurrence(2, kwargs=[1]), occurrence(3, task="gone")],
        Progress(),
    )
    assert [(o.status, o.external_id or o.error) for o in first] == [
        ("dispatched", "job-1"),
        ("failed", "The schedule's kwargs must be a JSON object, not a list."),
        ("failed", "'gone' is not a registered task"),
    ]
    assert queue.sent == [("tests.record", [1], {}, "1:1000")]
    queue.down = True
    second = dispatcher.dispatch([occurrence(4), occurrence(5)], Progress())
    assert [(o.status, o.error) for o in second] == [
        ("retry", "The queue cannot be reached: connection refused"),
        ("retry", "The queue cannot be reached: connection refused"),
    ]
