"""The webhook dispatcher (``dispatch/webhook.py``) against a real HTTP receiver on
127.0.0.1 that verifies each signature with the Standard Webhooks library."""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import CancelledError
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from standardwebhooks import Webhook

from django_schedulinator import resync_schedules, services
from django_schedulinator.checks import check_settings
from django_schedulinator.dispatch.base import REPORT_EVERY_SECONDS, Occurrence, Outcome, Progress
from django_schedulinator.dispatch.webhook import WebhookDispatcher, may_be_proxied, sign
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import truncate_ms

from .support.dispatchers import HandOff
from .support.doc_examples import example
from .support.handoff import run_in_thread
from .support.http_proxy import http_proxy
from .support.processes import wait_for
from .support.redis_server import free_port
from .support.schedules import make_schedule
from .support.webhook_receiver import SECRET, Receiver, webhook_receiver

pytestmark = pytest.mark.django_db

WEBHOOK = "django_schedulinator.dispatch.webhook.WebhookDispatcher"
FAST_RETRIES = {"RETRY_BACKOFF_SECONDS": 0.05, "TIMEOUT_SECONDS": 2}


def hooks(url: str, **options: Any) -> dict[str, Any]:
    """A webhook alias with the targets "billing" (at ``url``/hook) and "elsewhere"."""
    targets = {
        "billing": {"URL": f"{url}/hook", "SECRET": SECRET},
        "elsewhere": {"URL": f"{url}/elsewhere", "SECRET": SECRET},
    }
    return {"BACKEND": WEBHOOK, "OPTIONS": {"TARGETS": targets, **FAST_RETRIES, **options}}


@pytest.fixture
def receiver(settings: Any, built_index: DueIndex) -> Iterator[Receiver]:
    with webhook_receiver() as receiver:
        settings.SCHEDULINATOR = {
            **settings.SCHEDULINATOR,
            "DISPATCHERS": {"hooks": hooks(receiver.url)},
        }
        yield receiver


def due(**fields: Any) -> Schedule:
    fields.setdefault("dispatcher", "hooks")
    fields.setdefault("dispatch_options", {"target": "billing"})
    return make_schedule(next_run_at=timezone.now() - timedelta(seconds=5), **fields)


def until_ended(worker: Worker, schedule: Schedule, seconds: float = 15) -> Run:
    deadline = time.monotonic() + seconds
    while True:
        run = Run.objects.get(schedule=schedule)
        if run.status not in Run.UNFINISHED:
            return run
        assert time.monotonic() < deadline, f"still {run.status}: {run.error}"
        worker._next_takeover = 0.0  # take over at every pass
        worker.step()
        time.sleep(0.05)


def test_the_signature_is_the_one_the_specification_library_computes() -> None:
    body = b'{"a":1}'
    at = datetime(2026, 11, 24, tzinfo=UTC)
    expected = Webhook(SECRET).sign("12:34", at, body.decode())
    assert sign(SECRET, "12:34", int(at.timestamp()), body) == expected


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_an_occurrence_is_posted_signed_with_its_key(receiver: Receiver) -> None:
    schedule = due(args=[1, "a"], kwargs={"invoice": 7})
    worker = Worker(worker_id="t")
    worker.step()
    worker.close()

    run = Run.objects.get(schedule=schedule)
    assert (run.status, run.response_status) == ("succeeded", 204)
    [request] = receiver.received
    assert request.verified
    assert request.headers["webhook-id"] == run.idempotency_key
    assert request.body == {
        "type": "schedule.occurrence",
        "key": run.idempotency_key,
        "schedule": schedule.name,
        "schedule_id": schedule.pk,
        "task": "tests.record",
        "scheduled_for": run.scheduled_for.isoformat(),
        "scheduled_for_ms": int(run.scheduled_for.timestamp() * 1000),
        "attempt": 1,
        "args": [1, "a"],
        "kwargs": {"invoice": 7},
    }


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_5xx_is_retried_with_the_same_key_until_it_passes(receiver: Receiver) -> None:
    receiver.answer("/hook", 503, 500)
    schedule = due()
    worker = Worker(worker_id="t")
    worker.step()

    run = until_ended(worker, schedule)
    worker.close()

    assert (run.status, run.response_status, run.attempts) == ("succeeded", 204, 3)
    assert receiver.keys() == [run.idempotency_key] * 3
    assert [r.body["attempt"] for r in receiver.received] == [1, 2, 3]


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_4xx_fails_the_run_at_once(receiver: Receiver) -> None:
    receiver.answer("/hook", 422)
    schedule = due()
    worker = Worker(worker_id="t")
    worker.step()
    worker.close()

    run = Run.objects.get(schedule=schedule)
    assert (run.status, run.response_status) == ("failed", 422)
    assert "The target 'billing' answered HTTP 422" in run.error
    assert len(receiver.received) == 1


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.answer("/hook", 302)
    receiver.redirect_to = f"{receiver.url}/elsewhere"
    schedule = due()
    worker = Worker(worker_id="t")
    worker.step()
    worker.close()

    run = Run.objects.get(schedule=schedule)
    assert (run.status, run.response_status) == ("failed", 302)
    assert "redirects are not followed" in run.error
    assert receiver.keys("/elsewhere") == []


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_receiver_that_is_down_fails_its_runs_visibly_while_others_fire(
    settings: Any, built_index: DueIndex
) -> None:
    HandOff.received.clear()
    down = f"http://127.0.0.1:{free_port()}"
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "hooks": hooks(down, MAX_ATTEMPTS=3),
            "queue": {"BACKEND": "tests.support.dispatchers.HandOff"},
        },
    }
    schedule = due()
    other = due(dispatcher="queue", dispatch_options={})
    worker = Worker(worker_id="t")
    worker.step()

    assert Run.objects.get(schedule=other).status == "dispatched"
    run = until_ended(worker, schedule)
    worker.close()
    assert (run.status, run.attempts) == ("failed", 3)
    assert run.error.startswith("Handed off 3 time(s) without success; the last error: Connect")


def test_a_schedule_picks_a_target_by_name_never_a_url(receiver: Receiver) -> None:
    def create(options: dict[str, Any]) -> None:
        services.create(
            Schedule(
                name="hooked", task="tests.record", kind="interval",
                interval=timedelta(hours=1), dispatcher="hooks", dispatch_options=options,
            )
        )  # fmt: skip

    with pytest.raises(ValidationError) as missing:
        create({})
    assert "'target' is required: one of billing, elsewhere" in str(missing.value)
    with pytest.raises(ValidationError) as unknown:
        create({"target": "https://attacker.example/"})
    assert "must be one of billing, elsewhere" in str(unknown.value)
    with pytest.raises(ValidationError) as url:
        create({"target": "billing", "url": "https://attacker.example/"})
    assert "has no option 'url' (options it takes: target)" in str(url.value)
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        ({}, "'TARGETS' must name at least one target"),
        ({"b": {"URL": "ftp://x/", "SECRET": SECRET}}, "URL must be an http:// or https:// URL"),
        ({"b": {"URL": "https://x/", "SECRET": "s3cret"}}, "SECRET must be a 'whsec_' secret"),
        ({"b": {"URL": "https://x/", "SECRET": "whsec_YQ=="}}, "24 to 64 bytes"),
        ({"b": {"URL": "https://x/"}}, "must be a dict with URL and SECRET"),
    ],
)
def test_bad_targets_are_e004(settings: Any, targets: Any, message: str) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"hooks": {"BACKEND": WEBHOOK, "OPTIONS": {"TARGETS": targets}}},
    }
    [error] = check_settings()
    assert error.id == "schedulinator.E004"
    assert message in error.msg


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_the_configuration_in_the_docs_works_as_written(
    settings: Any, built_index: DueIndex
) -> None:
    with webhook_receiver() as receiver:
        config = example("webhook")["SCHEDULINATOR"]
        config["DISPATCHERS"]["partners"]["OPTIONS"]["TARGETS"]["billing"]["URL"] = (
            f"{receiver.url}/hook"
        )
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **config}
        schedule = example("webhook-schedule")["schedule"]
        Schedule.objects.filter(pk=schedule.pk).update(
            fired_through=None,
            next_run_at=truncate_ms(timezone.now() - timedelta(seconds=5)),
            due_at=None,
        )
        resync_schedules([schedule.pk])
        worker = Worker(worker_id="t")
        worker.step()
        worker.close()

    run = Run.objects.get(schedule=schedule)
    assert run.status == "succeeded"
    [request] = receiver.received
    assert request.verified
    assert request.body["task"] == "billing.invoice_run"


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_202_hands_the_run_off_until_the_receiver_reports_its_end(
    receiver: Receiver, admin_user: Any
) -> None:
    from .support.commits import APIClient

    receiver.answer("/hook", 202)
    schedule = due(overlap="skip")
    worker = Worker(worker_id="t")
    worker.step()
    worker.close()
    run = Run.objects.get(schedule=schedule)
    assert (run.status, run.response_status) == ("dispatched", 202)
    assert run.outcome_due_by is not None  # awaited: overlap waits for it

    client = APIClient()
    client.force_authenticate(admin_user)
    report = {"key": run.idempotency_key, "status": "succeeded"}
    response = client.post("/api/schedulinator/runs/report/", report, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "key": run.idempotency_key,
        "changed": True,
        "run_status": "succeeded",
    }
    again = client.post("/api/schedulinator/runs/report/", report, format="json")
    assert again.json()["changed"] is False


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_run_that_cannot_be_sent_fails_alone_and_is_not_posted(receiver: Receiver) -> None:
    """Its task removed from the code, or its arguments broken by a bulk write: the run fails
    at once with its own error, and the rest of the batch is posted (issue 21, items 3-4)."""
    healthy = due()
    gone = due()
    broken = due()
    Schedule.objects.filter(pk=gone.pk).update(task="tests.removed")
    Schedule.objects.filter(pk=broken.pk).update(kwargs="not an object")
    worker = Worker(worker_id="t")
    worker.step()
    worker.close()

    assert Run.objects.get(schedule=healthy).status == "succeeded"
    assert Run.objects.get(schedule=gone).error == "'tests.removed' is not a registered task"
    assert "kwargs must be a JSON object, not a string" in Run.objects.get(schedule=broken).error
    assert receiver.keys() == [Run.objects.get(schedule=healthy).idempotency_key]


# -- answers that would hold the scheduler (issue 21, item 6) ---------------------------------


@pytest.mark.django_db(transaction=True)  # the loop's threads
def test_a_trickling_answer_is_cut_off_at_the_deadline_and_holds_nothing_else(
    receiver: Receiver, settings: Any
) -> None:
    """A receiver that sends a byte every 0.2 s kept a read timeout of 1 s from ever firing:
    it held its lane, the other targets of the alias and the stop for as long as it liked. One
    request now has TIMEOUT_SECONDS in all, from connecting to the end of the answer."""
    receiver.trickle.add("/hook")
    options = settings.SCHEDULINATOR["DISPATCHERS"]["hooks"]["OPTIONS"]
    options.update(TIMEOUT_SECONDS=1, RETRY_BACKOFF_SECONDS=60)  # no retry within the test
    slow = due()
    worker = Worker(worker_id="t", max_seconds=60, lease_seconds=30)
    loop = run_in_thread(worker)
    try:
        wait_for(lambda: receiver.answering == 1, timeout=30)
        fast = due(dispatch_options={"target": "elsewhere"})  # the same alias, the same lane
        wait_for(lambda: Run.objects.filter(schedule=fast, status="succeeded").exists(), 30)
        run = Run.objects.get(schedule=slow)
        assert run.status == "pending"  # its retry waits for the backoff
        assert run.error == "The target 'billing' did not answer within 1s in all."
        wait_for(lambda: receiver.answering == 0, timeout=30)  # the scheduler hung up
    finally:
        worker.stopping = True
        loop.join(60)
    assert not loop.is_alive()


@pytest.mark.django_db(transaction=True)  # the loop's threads
def test_a_stop_ends_within_its_grace_whatever_the_receiver_does(
    receiver: Receiver, settings: Any
) -> None:
    """A lane holding many requests to a receiver that answers slowly: a stop waits for it
    one lease at most, then starts no more requests. The runs not sent stay pending, to be
    taken over later with their keys; run(max_seconds=...) returns."""
    receiver.trickle.add("/hook")
    options = settings.SCHEDULINATOR["DISPATCHERS"]["hooks"]["OPTIONS"]
    options.update(TIMEOUT_SECONDS=1, MAX_CONCURRENCY=1, RETRY_BACKOFF_SECONDS=60)
    schedules = [due() for _ in range(20)]
    worker = Worker(worker_id="t", max_seconds=1, lease_seconds=2)

    loop = run_in_thread(worker)
    loop.join(60)

    assert not loop.is_alive(), "the stop waited for the receiver"
    runs = Run.objects.filter(schedule__in=schedules)
    tried = runs.exclude(error="")
    assert 0 < tried.count() < 20
    assert set(tried.values_list("status", flat=True)) == {"pending"}  # retries
    assert len(receiver.keys()) == tried.count()
    left = runs.filter(error="")
    assert set(left.values_list("status", flat=True)) == {"pending"}  # left for a take-over
    assert set(left.values_list("attempts", flat=True)) == {1}


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_huge_answer_is_read_only_as_far_as_it_is_kept(receiver: Receiver) -> None:
    """A 64 MiB error body was read whole to keep 2,000 characters of it."""
    receiver.huge.add("/hook")
    schedule = due()
    worker = Worker(worker_id="t")
    worker.step()
    worker.close()

    run = Run.objects.get(schedule=schedule)
    assert (run.status, run.response_status) == ("pending", 500)  # a 5xx: retried
    assert run.error == "The target 'billing' answered HTTP 500: " + "x" * 2000
    wait_for(lambda: receiver.answering == 0, timeout=30)  # the scheduler hung up
    assert receiver.sent["/hook"] < 16 * 1024 * 1024


# -- outcomes reported about once a second, none lost or doubled (issue 34, item 1) ----------


class Reports(Progress):
    """What ``dispatch`` reported, batch by batch (a real recorder writes each as one
    transaction)."""

    def __init__(self) -> None:
        self.reports: list[list[int]] = []

    def finished(self, outcomes: Sequence[Outcome]) -> None:
        self.reports.append([o.run_id for o in outcomes])


def occurrence(run_id: int, target: str) -> Occurrence:
    return Occurrence(
        key=f"{run_id}:1780000000000",
        run_id=run_id,
        schedule_id=run_id,
        schedule_name=f"s{run_id}",
        task="tests.record",
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=1,
        dispatcher="hooks",
        dispatch_options={"target": target},
    )


def test_a_batch_reports_each_outcome_once_and_returns_those_that_ended_after_a_report(
    receiver: Receiver,
) -> None:
    """Two requests held past a report: what ended before it is reported then (while those
    two are in flight), what ends after is returned with the rest and never lost; no run is
    reported twice, and the failing target's runs fail alone."""
    receiver.hold("/hook", REPORT_EVERY_SECONDS * 1.5, REPORT_EVERY_SECONDS * 1.5)
    receiver.answer("/elsewhere", 400, 400, 400)
    batch = [occurrence(i, "billing") for i in range(1, 11)]
    batch += [occurrence(i, "elsewhere") for i in range(11, 14)]
    dispatcher = WebhookDispatcher("hooks", hooks(receiver.url)["OPTIONS"])
    progress = Reports()
    try:
        outcomes = dispatcher.dispatch(batch, progress)
    finally:
        dispatcher.close()

    reported = [run_id for report in progress.reports for run_id in report]
    assert len(reported) == len(set(reported))  # each reported once at most
    by_run = {o.run_id: o for o in outcomes}
    assert len(outcomes) == len(by_run) == 13  # every run returned, once
    assert set(reported) <= set(by_run)
    assert {i for i, o in by_run.items() if o.status == "succeeded"} == set(range(1, 11))
    failed = {i: o for i, o in by_run.items() if o.status == "failed"}
    assert set(failed) == {11, 12, 13}
    assert all("answered HTTP 400" in o.error for o in failed.values())
    assert sorted(receiver.keys()) == sorted(o.key for o in batch[:10])


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_batch_that_ends_between_reports_records_every_outcome_once(
    receiver: Receiver,
) -> None:
    """Through the scheduler: the early outcomes recorded while two requests are held, the
    rest when the batch returns; every run ends once, each key posted once, and the runs of
    the failing target fail alone."""
    receiver.hold("/hook", REPORT_EVERY_SECONDS * 1.5, REPORT_EVERY_SECONDS * 1.5)
    receiver.answer("/elsewhere", 400, 400, 400)
    billing = [due() for _ in range(10)]
    elsewhere = [due(dispatch_options={"target": "elsewhere"}) for _ in range(3)]
    worker = Worker(worker_id="t", once=True)
    worker.run()

    runs = {r.schedule_id: r for r in Run.objects.all()}
    assert len(runs) == Run.objects.count() == 13
    assert {(runs[s.pk].status, runs[s.pk].attempts) for s in billing} == {("succeeded", 1)}
    assert {(runs[s.pk].status, runs[s.pk].attempts) for s in elsewhere} == {("failed", 1)}
    assert all("answered HTTP 400" in runs[s.pk].error for s in elsewhere)
    assert sorted(receiver.keys()) == sorted(runs[s.pk].idempotency_key for s in billing)
    assert len(receiver.keys("/elsewhere")) == 3


# -- the connections: the environment's proxies, deadlines, a close (issue 34, item 1) ------
# httpcore sends from the dispatcher's threads; a target a proxy of the environment may apply
# to goes through httpx's own client, which applies it (NO_PROXY included).

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variable set, in either case, but those a test sets."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def send(options: dict[str, Any], batch: list[Occurrence]) -> dict[int, Outcome]:
    """One batch through a dispatcher of ``options``: its outcomes by run."""
    dispatcher = WebhookDispatcher("hooks", options)
    try:
        outcomes = dispatcher.dispatch(batch, Reports())
    finally:
        dispatcher.close()
    return {o.run_id: o for o in outcomes}


@pytest.mark.parametrize(
    ("variables", "url", "proxied"),
    [
        ({}, "http://hooks.example/in", False),
        ({"HTTP_PROXY": "http://px:3128"}, "http://hooks.example/in", True),
        ({"http_proxy": "proxy:3128"}, "http://hooks.example/in", True),
        ({"HTTP_PROXY": "http://px:3128"}, "https://hooks.example/in", False),
        ({"HTTPS_PROXY": "http://px:3128"}, "https://hooks.example/in", True),
        ({"ALL_PROXY": "http://px:3128"}, "https://hooks.example/in", True),
        ({"ALL_PROXY": "http://px:3128", "NO_PROXY": "other.example, *"}, "http://h/", False),
        # Whether NO_PROXY exempts a host is httpx's to say: it sends such a target.
        ({"HTTP_PROXY": "http://px:3128", "NO_PROXY": "h.example"}, "http://h.example/", True),
        ({"HTTPS_PROXY": "http://px:3128", "NO_PROXY": ".example"}, "https://a.example/", True),
    ],
)  # fmt: skip
def test_a_target_goes_through_httpx_wherever_httpx_would_find_a_proxy_for_it(
    environment: pytest.MonkeyPatch, variables: dict[str, str], url: str, proxied: bool
) -> None:
    """Sent with httpcore only where httpx itself, in the same environment, would send
    without a proxy."""
    for name, value in variables.items():
        environment.setenv(name, value)
    assert may_be_proxied(url) is proxied
    with httpx.Client() as client:
        transport = client._transport_for_url(httpx.URL(url))
        if not proxied:
            assert transport is client._transport  # httpx's own: no proxy


def test_a_proxy_named_in_the_environment_carries_the_requests(
    receiver: Receiver, environment: pytest.MonkeyPatch
) -> None:
    batch = [occurrence(1, "billing"), occurrence(2, "billing")]
    with http_proxy() as proxy:
        environment.setenv("HTTP_PROXY", proxy.url)
        outcomes = send(hooks(receiver.url)["OPTIONS"], batch)

    assert {i: o.status for i, o in outcomes.items()} == {1: "succeeded", 2: "succeeded"}
    assert proxy.targets == [f"{receiver.url}/hook"] * 2
    assert sorted(receiver.keys()) == sorted(o.key for o in batch)
    assert all(r.verified for r in receiver.received)


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*"])
def test_a_target_no_proxy_names_is_sent_past_the_proxy(
    receiver: Receiver, environment: pytest.MonkeyPatch, no_proxy: str
) -> None:
    with http_proxy() as proxy:
        environment.setenv("HTTP_PROXY", proxy.url)
        environment.setenv("NO_PROXY", no_proxy)
        outcomes = send(hooks(receiver.url)["OPTIONS"], [occurrence(1, "billing")])

    assert outcomes[1].status == "succeeded"
    assert proxy.targets == []
    assert receiver.keys() == [occurrence(1, "billing").key]


def test_through_a_proxy_a_request_still_has_its_deadline_in_all(
    receiver: Receiver, environment: pytest.MonkeyPatch
) -> None:
    receiver.hold("/hook", 60)
    with http_proxy() as proxy:
        environment.setenv("HTTP_PROXY", proxy.url)
        options = hooks(receiver.url, TIMEOUT_SECONDS=0.5)["OPTIONS"]
        outcomes = send(options, [occurrence(1, "billing")])

    assert proxy.targets == [f"{receiver.url}/hook"]
    assert (outcomes[1].status, outcomes[1].error) == (
        "retry",
        "The target 'billing' did not answer within 0.5s in all.",
    )


def test_a_name_lookup_that_hangs_is_given_up_at_the_deadline(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline covers finding the target's address: a resolver that never answers
    holds its request no longer than any other wait, and nothing else."""
    resolved = threading.Event()
    getaddrinfo = socket.getaddrinfo

    def stalled(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "stalled.invalid":
            resolved.wait(60)
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", stalled)
    options = hooks(receiver.url, TIMEOUT_SECONDS=3)["OPTIONS"]
    options["TARGETS"]["stalled"] = {"URL": "http://stalled.invalid/hook", "SECRET": SECRET}
    try:
        outcomes = send(options, [occurrence(1, "stalled"), occurrence(2, "billing")])
    finally:
        resolved.set()

    assert (outcomes[1].status, outcomes[1].error) == (
        "retry",
        "The target 'stalled' did not answer within 3s in all.",
    )
    assert outcomes[2].status == "succeeded"


@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "through a proxy"])
def test_a_close_cuts_the_request_in_flight_and_starts_no_other(
    receiver: Receiver,
    environment: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    proxied: bool,
) -> None:
    """Closing while a batch is sent (one request at a time, the first held by the
    receiver): the request in flight is cut and gets no outcome, the next is never sent,
    and the batch breaks off (its runs stay pending, for a take-over); nothing is logged as
    a failed hand-off."""
    receiver.hold("/hook", 60)
    dispatcher = WebhookDispatcher("hooks", hooks(receiver.url, MAX_CONCURRENCY=1)["OPTIONS"])
    ended: list[object] = []

    def dispatch() -> None:
        batch = [occurrence(1, "billing"), occurrence(2, "billing")]
        try:
            ended.append(dispatcher.dispatch(batch, Reports()))
        except BaseException as exc:
            ended.append(exc)

    with http_proxy() as proxy:
        if proxied:
            environment.setenv("HTTP_PROXY", proxy.url)
        thread = threading.Thread(target=dispatch)
        thread.start()
        wait_for(lambda: len(receiver.received) == 1, timeout=30)
        dispatcher.close()
        thread.join(30)

    assert not thread.is_alive()
    [result] = ended
    assert isinstance(result, CancelledError)
    assert receiver.keys() == [occurrence(1, "billing").key]
    assert len(proxy.targets) == proxied
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


def test_credentials_in_a_targets_url_are_sent_as_basic_auth_as_httpx_sends_them(
    receiver: Receiver,
) -> None:
    options = hooks(receiver.url)["OPTIONS"]
    host = receiver.url.removeprefix("http://")
    options["TARGETS"]["billing"]["URL"] = f"http://hook%40user:pa%3Ass@{host}/hook"
    outcomes = send(options, [occurrence(1, "billing")])

    assert outcomes[1].status == "succeeded"
    [request] = receiver.received
    assert (
        request.headers["authorization"] == "Basic " + base64.b64encode(b"hook@user:pa:ss").decode()
    )


@pytest.fixture
def certificate(tmp_path: Any) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and its key (files), made by openssl."""
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
         "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_an_https_target_is_posted_over_tls_trusting_what_httpx_trusts(
    certificate: tuple[str, str], environment: pytest.MonkeyPatch
) -> None:
    """httpx's default TLS context (certifi, or SSL_CERT_FILE): a receiver whose
    certificate it does not trust is refused, one it trusts gets every request."""
    cert, key = certificate
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    batch = [occurrence(1, "billing"), occurrence(2, "billing")]
    with webhook_receiver(tls=server) as receiver:
        untrusted = send(hooks(receiver.url)["OPTIONS"], batch[:1])
        environment.setenv("SSL_CERT_FILE", cert)
        trusted = send(hooks(receiver.url)["OPTIONS"], batch)

    assert untrusted[1].status == "retry"
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted[1].error
    assert {i: o.status for i, o in trusted.items()} == {1: "succeeded", 2: "succeeded"}
    assert sorted(receiver.keys()) == sorted(o.key for o in batch)
    assert all(r.verified for r in receiver.received)


def test_a_tls_handshake_that_trickles_is_cut_at_the_deadline() -> None:
    """A server that accepts and then sends its handshake a byte at a time (each read is
    answered in time): the request ends at its deadline (Python's ssl bounds a handshake
    as a whole by the socket's timeout, which is what is left of the deadline)."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def trickle() -> None:
        connection, _ = listener.accept()
        accepted.append(connection)
        with contextlib.suppress(OSError):
            connection.recv(65536)  # the ClientHello
            while not stop.wait(0.1):
                connection.send(b"\x16")  # a handshake record's first byte, again and again

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{listener.getsockname()[1]}"
    try:
        outcomes = send(hooks(url, TIMEOUT_SECONDS=0.5)["OPTIONS"], [occurrence(1, "billing")])
    finally:
        stop.set()
        for connection in accepted:
            connection.close()
        listener.close()

    assert (outcomes[1].status, outcomes[1].error) == (
        "retry",
        "The target 'billing' did not answer within 0.5s in all.",
    )
