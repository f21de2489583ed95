"""Heartbeats (``django_schedulinator/operations/heartbeat.py``) on the real Redis: what a record
holds, its expiry, several schedulers, a Redis outage, a running loop, and real
``run_scheduler`` processes seen by ``scheduler_status`` while they run, when SIGSTOPped, after
SIGKILL and after a clean SIGTERM."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from django_schedulinator import __version__, resync_schedules
from django_schedulinator.index.due import DueIndex
from django_schedulinator.operations.heartbeat import (
    Heartbeat,
    HeartbeatKeeper,
    LaneDepth,
    alive,
    record_key,
    registry_key,
)
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import from_ms, to_ms

from .support.processes import (
    ROOT,
    SERVING,
    Lines,
    Schedulers,
    get,
    looping,
    output,
    subprocess_env,
    wait_for,
)
from .support.redis_server import RedisServer
from .support.schedules import make_due, make_schedule
from .support.threads import Opened

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


def worker(index: DueIndex, worker_id: str = "w1") -> Worker:
    made = Worker(worker_id=worker_id, index=index)
    made.close()  # its dispatcher's pool: the tests below only read the worker
    return made


def ids(index: DueIndex) -> list[str]:
    return [beat.id for beat in alive(index)]


def test_a_beat_records_the_scheduler_in_redis_time_and_expires(index: DueIndex) -> None:
    source = worker(index)
    source.counters.fired, source.counters.claimed = 3, 4
    source.last_pass_at = time.monotonic() - 2  # its last pass ended two seconds ago
    source.last_error = "ConnectionError: down"
    source.metrics_port = 9100
    keeper = HeartbeatKeeper(source, index, every=0.2)

    before_ms = index.now_ms()
    beat = keeper.beat()
    after_ms = index.now_ms()

    assert alive(index) == [beat]
    assert (beat.id, beat.version, beat.metrics_port, beat.stopping) == (
        "w1",
        __version__,
        9100,
        False,
    )
    assert beat.pid > 0
    assert beat.host
    assert beat.counters["fired"] == 3
    assert beat.counters["claimed"] == 4
    assert beat.lanes == {"default": LaneDepth(0, None)}
    assert beat.last_error == "ConnectionError: down"
    # Redis time: the beat is between two reads of Redis TIME around it, and the pass two
    # seconds (of this process's monotonic clock) before it.
    assert from_ms(before_ms) <= beat.beat_at <= from_ms(after_ms)
    assert beat.last_pass_at is not None
    assert beat.beat_at - beat.last_pass_at >= timedelta(seconds=2)
    assert beat.pass_age(beat.beat_at) == (beat.beat_at - beat.last_pass_at).total_seconds()
    assert beat.started_at <= beat.beat_at
    # Three beats of 0.2 s.
    assert 0 < index.client.pttl(keeper.key) <= 600
    assert keeper.key.startswith(f"{index.tag}:")
    assert registry_key(index).startswith(index.tag)

    # The list drops it by the beat's expiry time, the key goes by its own TTL (the same
    # instant, give or take the write's round trip): both, whichever is last.
    wait_for(lambda: alive(index) == [] and not index.client.exists(keeper.key), timeout=30)


def test_healthy_means_a_pass_within_pass_stale_seconds(index: DueIndex, settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "PASS_STALE_SECONDS": 60}
    source = worker(index)
    beat = HeartbeatKeeper(source, index).beat()
    assert beat.last_pass_at is None
    assert beat.pass_age(beat.beat_at) is None
    assert beat.healthy(beat.beat_at)  # just started: no pass yet, not stale either
    assert not beat.healthy(beat.started_at + timedelta(seconds=61))

    source.last_pass_at = time.monotonic() - 120
    beat = HeartbeatKeeper(source, index).beat()
    assert not beat.healthy(beat.beat_at)
    source.last_pass_at = time.monotonic()
    beat = HeartbeatKeeper(source, index).beat()
    assert beat.healthy(beat.beat_at)
    assert not beat.healthy(beat.beat_at + timedelta(seconds=61))


def test_alive_lists_several_schedulers_newest_beat_first(index: DueIndex) -> None:
    keepers = [HeartbeatKeeper(worker(index, f"w{n}"), index, every=60) for n in range(3)]
    for keeper in keepers:
        beat_ms = to_ms(keeper.beat().beat_at)
        wait_for(lambda ms=beat_ms: index.now_ms() > ms)  # the next beat is a later one
    fleeting = HeartbeatKeeper(worker(index, "fleeting"), index, every=0.05)
    fleeting.beat()
    assert set(ids(index)) == {"w0", "w1", "w2", "fleeting"}

    wait_for(lambda: "fleeting" not in ids(index), timeout=30)  # its 0.15 s expiry
    keepers[0].beat()  # w0 beats last: it comes first
    assert ids(index) == ["w0", "w2", "w1"]
    # Each beat prunes the members whose record expired.
    members = {m.decode() for m in index.client.zrange(registry_key(index), 0, -1)}
    assert members == {k.token for k in keepers}

    keepers[1].stop()  # never started: a stop only removes the record
    assert ids(index) == ["w0", "w2"]


def test_two_schedulers_with_one_worker_id_have_a_record_each(index: DueIndex) -> None:
    for _ in range(2):
        HeartbeatKeeper(worker(index, "same"), index, every=60).beat()
    assert ids(index) == ["same", "same"]


def test_a_record_this_version_cannot_read_is_left_out(index: DueIndex) -> None:
    HeartbeatKeeper(worker(index), index, every=60).beat()
    now_ms = index.now_ms()
    index.client.zadd(registry_key(index), {"junk": now_ms + 60_000, "gone": now_ms + 60_000})
    index.client.set(record_key(index, "junk"), b"{not json")
    assert ids(index) == ["w1"]


def test_the_thread_beats_until_a_stop_removes_the_record_at_once(index: DueIndex) -> None:
    keeper = HeartbeatKeeper(worker(index), index, every=0.05)
    keeper.start()
    try:
        first = wait_for_beat(index)
        wait_for(lambda: wait_for_beat(index).beat_at > first.beat_at, timeout=30)
    finally:
        keeper.stop()
    assert alive(index) == []
    assert not index.client.exists(keeper.key)
    assert index.client.zscore(registry_key(index), keeper.token) is None


class Querying(Worker):
    """A scheduler whose lane depths are read with a query (on the heartbeat's thread)."""

    def __init__(self, opened: Opened, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.opened = opened

    def lane_depths(self) -> dict[str, tuple[int, float | None]]:
        self.opened()
        return super().lane_depths()


def test_the_thread_closes_its_database_connections_when_it_ends(index: DueIndex) -> None:
    """A stage thread (stage.py): whatever a beat opened is closed once a stop ended it."""
    opened = Opened()
    source = Querying(opened, worker_id="w1", index=index)
    source.close()  # its dispatcher's pool: only read
    keeper = HeartbeatKeeper(source, index, every=0.05)
    keeper.start()
    try:
        wait_for(lambda: bool(opened.seen), timeout=30)
    finally:
        keeper.stop()
    assert opened.thread_names() == {"schedulinator-heartbeat"}
    assert opened.still_open() == []


def wait_for_beat(index: DueIndex) -> Heartbeat:
    found: list[Heartbeat] = []

    def beating() -> bool:
        """a heartbeat"""
        found[:] = alive(index)
        return bool(found)

    wait_for(beating, timeout=30)
    return found[0]


def test_the_thread_outlives_a_redis_outage_and_logs_it_once(
    private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    index = DueIndex()  # on the private Redis
    keeper = HeartbeatKeeper(worker(index), index, every=0.05)
    caplog.set_level(logging.INFO, logger="django_schedulinator.heartbeat")
    keeper.start()
    try:
        wait_for_beat(index)
        private_redis.stop()

        def warned() -> bool:
            """the outage to be logged"""
            return any(r.levelno == logging.WARNING for r in caplog.records)

        wait_for(warned, timeout=30)
        time.sleep(0.5)  # several more beats fail meanwhile
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "Could not record this scheduler's heartbeat" in warnings[0].getMessage()

        private_redis.start()
        restarted_ms = index.now_ms()
        wait_for(lambda: wait_for_beat(index).beat_at >= from_ms(restarted_ms), timeout=30)
        # Logged once the write has returned: just after the beat can be read.
        wait_for(lambda: "heartbeat is recorded again" in caplog.text, timeout=10)
    finally:
        keeper.stop()
    assert alive(index) == []


def test_a_running_scheduler_beats_with_its_passes_and_counters(
    built_index: DueIndex, settings: Any
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "HEARTBEAT_SECONDS": 0.1}
    resync_schedules(make_due(3))
    scheduler = Worker(worker_id="looping", index=built_index)
    with looping(scheduler):

        def fired() -> bool:
            """a beat after the pass that fired the three"""
            beats = alive(built_index)
            return (
                bool(beats)
                and beats[0].counters.get("fired") == 3
                and beats[0].last_pass_at is not None
            )

        wait_for(fired, timeout=60)
        beat = alive(built_index)[0]
        assert beat.id == "looping"
        assert beat.last_pass_at is not None
        assert beat.last_error == ""
        assert not beat.stopping
        assert beat.healthy(beat.beat_at)
        assert "default" in beat.lanes
    assert alive(built_index) == []  # a clean stop removed it


def test_a_stopping_scheduler_says_so(index: DueIndex) -> None:
    source = worker(index)
    source.stopping = True
    assert HeartbeatKeeper(source, index).beat().stopping


# -- real processes ------------------------------------------------------------------------

# The schedulers beat every 6 s (their record lives 18 s) and a pass older than 10 s is
# stale: a running scheduler's pass, as its last beat saw it, is never that old, and one
# SIGSTOPped just after a beat shows stale from 10 s until its record expires at 18 s.
HEARTBEAT, PASS_STALE = "6", "10"


def status(env: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "django", "scheduler_status", "--json", "--no-drift"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, json.loads(proc.stdout) if proc.stdout else {}, proc.stderr


@pytest.mark.subprocess
def test_scheduler_status_sees_real_schedulers_run_stall_die_and_stop(
    built_index: DueIndex, schedulers: Schedulers, key_prefix: str, settings: Any
) -> None:
    make_schedule(next_run_at=timezone.now() + timedelta(hours=1))  # something to fire
    env = subprocess_env(
        key_prefix, SCHEDULINATOR_TEST_HEARTBEAT=HEARTBEAT, SCHEDULINATOR_TEST_PASS_STALE=PASS_STALE
    )
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "PASS_STALE_SECONDS": float(PASS_STALE)}
    # The one that dies also serves its probes: what a kubelet would see of it.
    doomed = schedulers.start("--worker-id", "doomed", "--metrics-port", "0", env=env)
    doomed_port = int(Lines(doomed).wait_for(SERVING)[1])
    clean = schedulers.start("--worker-id", "clean", env=env)
    seen: list[Any] = []

    def both_healthy() -> bool:
        """both schedulers healthy in scheduler_status --json, exit code 0"""
        seen[:] = status(env)
        code, report, _stderr = seen
        states = {s["id"]: s["state"] for s in report.get("schedulers", []) if s["last_pass_at"]}
        return code == 0 and states == {"doomed": "healthy", "clean": "healthy"}

    wait_for(both_healthy, timeout=120, interval=0.5)
    _code, report, _stderr = seen
    listed = {s["id"]: s for s in report["schedulers"]}
    assert listed["doomed"]["pid"] == doomed.pid
    assert listed["clean"]["pid"] == clean.pid
    assert listed["doomed"]["version"] == __version__
    assert report["healthy"] is True
    assert report["problems"] == []
    assert listed["doomed"]["metrics_port"] == doomed_port
    assert get(doomed_port, "/healthz").status_code == 200

    # A clean stop removes the record at once.
    clean.send_signal(signal.SIGTERM)
    assert clean.wait(timeout=60) == 0, output(clean)
    assert ids(built_index) == ["doomed"]

    # SIGSTOP just after a beat: its record stays (alive) while its pass grows stale.
    last = wait_for_beat(built_index).beat_at
    wait_for(lambda: wait_for_beat(built_index).beat_at > last, timeout=60, interval=0.05)
    doomed.send_signal(signal.SIGSTOP)

    def stale() -> bool:
        """scheduler_status to report the stopped scheduler stale, with exit code 1"""
        seen[:] = status(env)
        code, report, _stderr = seen
        states = {s["id"]: s["state"] for s in report.get("schedulers", [])}
        return code == 1 and states == {"doomed": "stale"}

    wait_for(stale, timeout=30, interval=0.2)
    _code, report, stderr = seen
    assert report["healthy"] is False
    assert [p["code"] for p in report["problems"]] == ["scheduler-stale"]
    assert "Scheduler doomed" in report["problems"][0]["message"]
    assert "Unhealthy: 1 problem(s)" in stderr
    # Its probe gets no answer: a failed liveness probe to Kubernetes, which restarts it.
    with pytest.raises(httpx.TimeoutException):
        get(doomed_port, "/healthz", timeout=2)

    # SIGKILL: no clean stop; the record expires on its own.
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=30)
    wait_for(lambda: ids(built_index) == [], timeout=60)
    code, report, _stderr = status(env)
    assert code == 1
    assert [p["code"] for p in report["problems"]] == ["no-scheduler"]
    assert report["schedulers"] == []
