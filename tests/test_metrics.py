"""``run_scheduler --metrics-port``: Prometheus metrics, /healthz and /readyz, on real
processes, a real Redis (a private one where it is paused) and the real database; the
scrapes parsed with prometheus-client's own parser."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from django_schedulinator import resync_schedules
from django_schedulinator.index.due import DueIndex
from django_schedulinator.index.reconcile import reconcile
from django_schedulinator.models import Schedule
from django_schedulinator.operations.health import check_drift, record_drift
from django_schedulinator.operations.metrics import COUNTERS, Metrics, serve
from django_schedulinator.operations.probes import Bounded, ProbeServer
from django_schedulinator.scheduler.claiming import Counters
from django_schedulinator.scheduler.worker import Worker

from .models import Delivery
from .support.processes import (
    ROOT,
    SERVING,
    Lines,
    Schedulers,
    get,
    looping,
    subprocess_env,
    wait_for,
)
from .support.redis_server import RedisServer, lose_redis
from .support.schedules import make_due, make_schedule
from .support.threads import Opened

DOCS = Path(__file__).resolve().parent.parent / "docs"


def samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def total(found: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` that carry these labels."""
    return sum(s.value for s in found if s.name == name and labels.items() <= s.labels.items())


def scrape(port: int) -> list[Sample]:
    response = get(port, "/metrics")
    assert response.status_code == 200, response.text
    return samples(response.text)


@pytest.fixture
def with_metrics(schedulers: Schedulers) -> Iterator[Any]:
    """Starts ``run_scheduler --metrics-port 0`` and returns what it prints and its port;
    after the test, kills it and shows what it printed (pytest shows it on a failure)."""
    started: list[Lines] = []

    def start(*args: str, **env: str) -> tuple[Lines, int]:
        proc = schedulers.start(
            "--metrics-port", "0", "--max-seconds", "300", *args,
            env=subprocess_env(schedulers.key_prefix, **env),
        )  # fmt: skip
        lines = Lines(proc)
        started.append(lines)
        return lines, int(lines.wait_for(SERVING)[1])

    yield start
    for n, lines in enumerate(started):
        if lines.proc.poll() is None:
            lines.proc.send_signal(signal.SIGKILL)
        lines.proc.wait(timeout=30)
        print(f"--- scheduler {n} (exit {lines.proc.returncode})", lines.text())


# -- real processes -------------------------------------------------------------------------


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_two_schedulers_on_one_host_serve_their_own_metrics_and_probes(
    built_index: DueIndex, with_metrics: Any
) -> None:
    ids = make_due(6)
    resync_schedules(ids)
    started = [
        with_metrics("--worker-id", f"m{i}", SCHEDULINATOR_TEST_METRICS_CLUSTER="1")
        for i in range(2)
    ]
    ports = [port for _lines, port in started]
    assert ports[0] != ports[1]

    def fired() -> bool:
        """every occurrence to be delivered"""
        return Delivery.objects.count() == 6

    wait_for(fired)

    def counted() -> bool:
        """both scrapes to count every occurrence fired, handed off and recorded"""
        both = scrape(ports[0]) + scrape(ports[1])
        return (
            total(both, "schedulinator_occurrences_fired_total") == 6
            and total(both, "schedulinator_outcomes_total", result="succeeded") == 6
        )

    wait_for(counted)
    scrapes = [scrape(port) for port in ports]
    both = scrapes[0] + scrapes[1]
    # Each names its own scheduler; nothing else tells the two apart but the port.
    for n, found in enumerate(scrapes):
        [info] = [s for s in found if s.name == "schedulinator_scheduler_info"]
        assert info.labels["worker_id"] == f"m{n}"
        assert info.labels["host"] == socket.gethostname()
        assert total(found, "schedulinator_claim_duration_seconds_count") > 0
    lateness = "schedulinator_lateness_seconds"
    assert total(both, f"{lateness}_count", dispatcher="default") == 6
    assert total(both, f"{lateness}_bucket", dispatcher="default", le="+Inf") == 6
    # Due five seconds before they were created: none handed off sooner than that.
    assert total(both, f"{lateness}_bucket", dispatcher="default", le="2.5") == 0
    assert total(both, f"{lateness}_sum") >= 6 * 5
    assert (
        total(both, "schedulinator_handoffs_total", dispatcher="default", result="succeeded") == 6
    )
    assert total(both, "schedulinator_commit_duration_seconds_count") >= 1

    def cluster_caught_up() -> bool:
        """the cluster-wide gauges to show the fired schedules at their next hour"""
        found = scrape(ports[0])
        return (
            total(found, "schedulinator_index_entries") == 6
            and total(found, "schedulinator_index_due_entries") == 0
            and total(found, "schedulinator_index_built") == 1
        )

    wait_for(cluster_caught_up)

    for port in ports:
        health = get(port, "/healthz")
        assert health.status_code == 200, health.text
        assert health.json()["status"] == "ok"
        ready = get(port, "/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"ready": True, "database": "ok", "redis": "ok", "index": "built"}
    assert get(ports[0], "/").status_code == 404

    # A process that is stopped answers nothing: to Kubernetes, its probe times out.
    frozen, alive = (lines.proc for lines, _port in started)
    frozen.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(httpx.TimeoutException):
            get(ports[0], "/healthz", timeout=3)
        assert get(ports[1], "/healthz").status_code == 200
    finally:
        frozen.send_signal(signal.SIGCONT)
    assert alive.poll() is None


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_loop_stuck_on_a_paused_redis_fails_healthz_and_readyz_until_it_moves_again(
    private_redis: RedisServer, key_prefix: str, with_metrics: Any
) -> None:
    DueIndex().mark_built({"by": "tests"})
    lines, port = with_metrics(
        SCHEDULINATOR_TEST_REDIS_URL=private_redis.url,
        SCHEDULINATOR_TEST_PASS_STALE="2",
    )

    def status(path: str) -> tuple[int, dict[str, Any]]:
        response = get(port, path)
        return response.status_code, response.json()

    def healthy() -> bool:
        """/healthz to say ok"""
        code, body = status("/healthz")
        return code == 200 and body["status"] == "ok"

    wait_for(healthy)
    # Every client of this Redis waits, the scheduler's among them (no socket timeout): its
    # loop is stuck in a call that does not return, though the process is alive.
    pause_ms = 30_000
    private_redis.client().execute_command("CLIENT", "PAUSE", pause_ms, "ALL")
    paused_at = time.monotonic()

    def stuck() -> bool:
        """/healthz to fail"""
        return status("/healthz")[0] == 503

    wait_for(stuck, timeout=pause_ms / 1000 - 3)
    code, body = status("/healthz")
    assert body["status"] == "stuck", body
    assert body["progress_age_seconds"] >= 2
    code, body = status("/readyz")
    assert code == 503
    assert body["database"] == "ok"
    assert body["redis"].startswith("no answer for"), body
    assert time.monotonic() - paused_at < pause_ms / 1000, "the pause ended too soon to tell"

    # The pause ends: the loop moves on, and both answer 200 again.
    wait_for(healthy, timeout=60)
    assert status("/readyz")[0] == 200
    assert lines.proc.poll() is None


@pytest.mark.subprocess
def test_a_port_in_use_fails_the_start_before_the_loop_runs(key_prefix: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        expected = (
            f"Cannot serve metrics on 127.0.0.1:{port}: the port is in use (by another "
            "scheduler on this host?). Give each scheduler a port of its own, or "
            "--metrics-port 0 for a free one."
        )
        with pytest.raises(CommandError) as raised:
            # --once: had the loop run, it would have returned instead of raising.
            call_command("run_scheduler", "--metrics-port", str(port), "--once")
        assert str(raised.value) == expected
        # The command line: exit code 1, the message, no traceback.
        done = subprocess.run(
            [sys.executable, "-m", "django", "run_scheduler", "--metrics-port", str(port)],
            cwd=ROOT,
            env=subprocess_env(key_prefix),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"CommandError: {expected}" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_without_prometheus_client_the_option_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "django_schedulinator.operations.metrics", raising=False)
    with pytest.raises(CommandError) as raised:
        call_command("run_scheduler", "--metrics-port", "0", "--once")
    assert str(raised.value) == (
        "--metrics-port needs prometheus-client, which is not installed; install it with: "
        "pip install 'django-schedulinator[metrics]'"
    )


# -- in this process: the probes' answers, the metrics' contents ---------------------------


@pytest.fixture
def probes() -> Iterator[list[ProbeServer]]:
    started: list[ProbeServer] = []
    yield started
    for server in started:
        server.close()


def serving(worker: Worker, probes: list[ProbeServer]) -> int:
    server = serve(worker, port=0, addr="127.0.0.1")
    probes.append(server)
    return server.port


@pytest.mark.django_db(transaction=True)  # the requests' threads query the database
def test_the_probe_servers_threads_close_their_database_connections_when_they_end(
    index: DueIndex,
) -> None:
    """Each request's thread and each bounded check's are stage threads (stage.py): what they
    opened is closed once they end; the server's own thread ends at the close."""
    opened = Opened()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        opened()  # on the request's thread
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok\n"]

    worker = Worker(worker_id="probed")
    worker.close()  # its dispatcher's pool: only read
    server = ProbeServer(worker, app, port=0, addr="127.0.0.1")
    server.start()
    try:
        assert get(server.port, "/metrics").text == "ok\n"
        assert get(server.port, "/readyz").json()["database"] == "ok"
        Bounded(opened, "schedulinator-probe-check")(10)
    finally:
        server.close()
    assert opened.thread_names() == {"schedulinator-metrics-request", "schedulinator-probe-check"}
    assert opened.still_open() == []
    serving = [t for t in threading.enumerate() if t.name == "schedulinator-metrics"]
    assert [t for t in serving if t.is_alive()] == []


@pytest.mark.django_db
def test_readyz_tells_an_index_not_built_and_redis_away_apart(
    index: DueIndex, settings: Any, probes: list[ProbeServer]
) -> None:
    worker = Worker(worker_id="ready")
    port = serving(worker, probes)
    response = get(port, "/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "ready": False,
        "database": "ok",
        "redis": "ok",
        "index": "not built (the scheduler builds it)",
    }
    index.mark_built({"by": "tests"})
    assert get(port, "/readyz").status_code == 200
    # Not running yet: live while it starts.
    health = get(port, "/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "starting"

    lose_redis(settings)
    away = Worker(worker_id="away")
    response = get(serving(away, probes), "/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == "ok"
    assert body["redis"].startswith("ConnectionError: "), body
    assert body["index"] == "unknown (Redis does not answer)"


@pytest.mark.django_db
def test_a_loop_backing_off_from_an_outage_stays_live(
    settings: Any, probes: list[ProbeServer]
) -> None:
    """A restart would not bring Redis back: /healthz passes, /readyz says what is away."""
    # Longer than the back-off's longest sleep (5 s), so that only a loop that is stuck
    # would fail it; the loop never completes a pass meanwhile.
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "PASS_STALE_SECONDS": 6.0}
    lose_redis(settings)
    worker = Worker(worker_id="backing-off")
    port = serving(worker, probes)
    started = time.monotonic()
    with looping(worker):

        def outage_outlasted_the_stale_time() -> bool:
            """the outage to last longer than PASS_STALE_SECONDS"""
            return time.monotonic() - started > 7 and bool(worker.last_error)

        wait_for(outage_outlasted_the_stale_time, timeout=30)
        health = get(port, "/healthz")
        assert health.status_code == 200, health.text
        body = health.json()
        assert body["status"] == "backing off"
        assert body["pass_age_seconds"] is None
        assert body["last_error"].startswith("ConnectionError: ")
        assert get(port, "/readyz").status_code == 503
        backing_off = total(scrape(port), "schedulinator_backing_off")
        assert backing_off == 1


def exposed_names(text: str) -> set[str]:
    """The metric names a scrape shows, as written in the docs' table."""
    suffix = {"counter": "_total", "info": "_info"}
    return {
        family.name + suffix.get(family.type, "")
        for family in text_string_to_metric_families(text)
        # prometheus-client's own: when each counter and histogram series was created.
        if family.name.startswith("schedulinator_") and not family.name.endswith("_created")
    }


@pytest.mark.django_db(transaction=True)
def test_the_docs_table_names_every_metric_a_scheduler_serves(built_index: DueIndex) -> None:
    """A scheduler that fired, failed and skipped, with reconcile and a drift check done:
    every family it serves has a row in docs/metrics.md, and every row is served."""
    make_schedule(next_run_at=timezone.now() - timedelta(seconds=1))
    make_schedule(task="tests.boom", next_run_at=timezone.now() - timedelta(seconds=1))
    # Found ten minutes late with catch-up "skip": the missed minutes are skipped.
    late = make_schedule(kind=Schedule.Kind.CRON, cron="* * * * *", catch_up="skip")
    Schedule.objects.filter(pk=late.pk).update(
        fired_through=None,
        next_run_at=timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=10),
        due_at=None,
    )
    resync_schedules([late.pk])
    reconcile(built_index, settle=timedelta(0))
    record_drift(built_index, check_drift(built_index))
    worker = Worker(worker_id="docs", once=True)
    metrics = Metrics(worker)
    worker.attach_metrics(metrics)
    worker.run()
    text = generate_latest(metrics.registry).decode()
    found = samples(text)
    fired = total(found, "schedulinator_occurrences_fired_total")
    assert fired >= 2
    assert total(found, "schedulinator_handoffs_total") == fired
    assert total(found, "schedulinator_outcomes_total", result="failed") == 1
    assert total(found, "schedulinator_runs_failed_total") == 1
    assert total(found, "schedulinator_outcomes_total", result="succeeded") == fired - 1
    assert total(found, "schedulinator_lateness_seconds_count") == fired
    assert total(found, "schedulinator_occurrences_skipped_total", reason="missed") >= 8
    assert total(found, "schedulinator_reconcile_lag_seconds") >= 0

    table = (DOCS / "metrics.md").read_text("utf-8")
    documented = set(re.findall(r"^\| `(schedulinator_\w+)`", table, re.MULTILINE))
    assert exposed_names(text) == documented


@pytest.mark.django_db(transaction=True)
def test_every_counter_a_scheduler_serves_says_when_it_was_created(
    built_index: DueIndex,
) -> None:
    """docs/metrics.md promises prometheus-client's ``_created`` series for every counter:
    those read from the loop's own counters at scrape time too (created when the loop
    started)."""
    worker = Worker(worker_id="created", once=True)
    metrics = Metrics(worker)
    worker.attach_metrics(metrics)
    worker.run()
    assert worker.started_at is not None
    text = generate_latest(metrics.registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    counters = [f for f in families.values() if f.type == "counter"]
    assert len(counters) > 5
    # The text format serves each counter's _created as a family of its own.
    without = [
        f.name
        for f in counters
        if f.name.startswith("schedulinator_")
        and f"{f.name}_created" not in families
        and f.samples  # a labelled family with no series yet has nothing to date
    ]
    assert without == []
    [created] = families["schedulinator_occurrences_fired_created"].samples
    assert created.value == pytest.approx(worker.started_at.timestamp())


def test_every_counter_of_the_loop_is_a_metric() -> None:
    # A counter added to claiming.Counters must be exposed, or left out on purpose here.
    left_out = {"skipped", "auto_paused"}  # by reason; never counted by the scheduler
    assert set(COUNTERS) | left_out == set(Counters().as_dict())


@pytest.mark.django_db
def test_two_workers_in_one_process_keep_their_own_registries(built_index: DueIndex) -> None:
    first, second = Worker(worker_id="one"), Worker(worker_id="two")
    first.counters.fired, second.counters.fired = 3, 5
    for worker, fired in ((first, 3), (second, 5)):
        text = generate_latest(Metrics(worker).registry).decode()
        assert total(samples(text), "schedulinator_occurrences_fired_total") == fired
