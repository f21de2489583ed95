"""Heartbeats: each ``run_scheduler`` says in Redis that it is alive, and what it is doing.

A small thread of the scheduler's own (a stage thread, ``stage.py``) writes a record every
``HEARTBEAT_SECONDS`` that expires after three of them. A loop stuck in a call still beats
(alive, its last pass growing old: stale); a process killed or stopped (SIGKILL, SIGSTOP)
stops beating and drops off the list when its record expires. A clean stop removes the
record at once.

Every time in a record is Redis time (``TIME``), the clock the claims use, so the records of
hosts whose clocks differ compare; the process's own ages (monotonic) are converted at each
beat. Keys, under the index's hash tag (one slot in Redis Cluster):

    {prefix}:schedulers              sorted set: record token -> when the record expires (ms)
    {prefix}:scheduler:<token>       the record (JSON), with its expiry

The set lets readers list the records without SCAN; each beat prunes the members whose
records expired. A record's token is the process's own (random), so two schedulers given the
same ``--worker-id`` still have a record each.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_schedulinator import __version__, timing
from django_schedulinator.conf import app_settings
from django_schedulinator.index.due import DueIndex, get_index
from django_schedulinator.operations.observed import Observed
from django_schedulinator.operations.stage import stage_thread

logger = logging.getLogger("django_schedulinator.heartbeat")

# A record lives this many beats: one or two beats lost to a slow Redis are not a death.
EXPIRY_BEATS = 3
# The set of records outlives its last writer by this much (a day), then goes too.
REGISTRY_TTL_MS = 86_400_000
# Records read at most (the newest): more schedulers than this on one index is not a fleet
# anyone runs, and the read stays bounded whatever is in the set.
MAX_LISTED = 1000
# How long a stop waits for a beat in progress before it removes the record.
STOP_WAIT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class LaneDepth:
    """One dispatcher lane of a scheduler: batches waiting for it, and how long the oldest
    has waited (seconds; None when none waits)."""

    waiting: int
    oldest_seconds: float | None


@dataclass(frozen=True, slots=True)
class RecorderBacklog:
    """A scheduler's recorder (recording.py): the batches its lanes handed over whose
    outcomes are not written yet, those outcomes, and how long ago the oldest was handed
    over (seconds; None when nothing waits)."""

    batches: int = 0
    outcomes: int = 0
    oldest_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One scheduler as its last beat recorded it."""

    id: str  # the worker id (--worker-id, default host:pid)
    host: str
    pid: int
    version: str  # django_schedulinator.__version__ of the process
    started_at: datetime  # aware, UTC (Redis time)
    beat_at: datetime  # Redis time of this beat
    last_pass_at: datetime | None  # Redis-time estimate of the last completed pass
    last_error: str  # why the passes fail now ("" when they work)
    counters: dict[str, int]  # claiming.Counters.as_dict()
    lanes: dict[str, LaneDepth]  # dispatcher alias -> its lane
    recorder: RecorderBacklog  # outcomes waiting to be written
    metrics_port: int | None
    stopping: bool  # told to stop: finishing what its lanes hold

    def pass_age(self, now: datetime) -> float | None:
        """Seconds since the last completed pass (None before the first)."""
        if self.last_pass_at is None:
            return None
        return max(0.0, (now - self.last_pass_at).total_seconds())

    def healthy(self, now: datetime) -> bool:
        """A pass completed within PASS_STALE_SECONDS (or, before the first, the process
        started within it)."""
        since = self.last_pass_at or self.started_at
        return (now - since).total_seconds() <= app_settings.PASS_STALE_SECONDS

    def state(self, now: datetime) -> str:
        """The scheduler's state at ``now``: stopping (told to stop, finishing what its lanes
        hold), stale (no pass within PASS_STALE_SECONDS) or healthy."""
        if self.stopping:
            return "stopping"
        return "healthy" if self.healthy(now) else "stale"

    def status_dict(self, now: datetime) -> dict[str, Any]:
        """The record with how old its last pass is at ``now``, and its state then."""
        return {**self.as_dict(), "pass_age_seconds": self.pass_age(now), "state": self.state(now)}

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON types (times in ISO 8601): what Redis holds, and what the
        command's --json and the API show."""
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "started_at": self.started_at.isoformat(),
            "beat_at": self.beat_at.isoformat(),
            "last_pass_at": None if self.last_pass_at is None else self.last_pass_at.isoformat(),
            "last_error": self.last_error,
            "counters": dict(self.counters),
            "lanes": {
                alias: {"waiting": lane.waiting, "oldest_seconds": lane.oldest_seconds}
                for alias, lane in self.lanes.items()
            },
            "recorder": {
                "batches": self.recorder.batches,
                "outcomes": self.recorder.outcomes,
                "oldest_seconds": self.recorder.oldest_seconds,
            },
            "metrics_port": self.metrics_port,
            "stopping": self.stopping,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Heartbeat:
        """A record read back; KeyError, TypeError or ValueError if it is not one."""
        last_pass = data.get("last_pass_at")
        recorder = dict(data.get("recorder") or {})  # none in records of older versions
        oldest = recorder.get("oldest_seconds")
        return cls(
            id=str(data["id"]),
            host=str(data["host"]),
            pid=int(data["pid"]),
            version=str(data.get("version", "")),
            started_at=_aware(data["started_at"]),
            beat_at=_aware(data["beat_at"]),
            last_pass_at=None if last_pass is None else _aware(last_pass),
            last_error=str(data.get("last_error", "")),
            counters={str(k): int(v) for k, v in dict(data.get("counters") or {}).items()},
            lanes={
                str(alias): LaneDepth(
                    int(lane["waiting"]),
                    None if lane.get("oldest_seconds") is None else float(lane["oldest_seconds"]),
                )
                for alias, lane in dict(data.get("lanes") or {}).items()
            },
            recorder=RecorderBacklog(
                int(recorder.get("batches", 0)),
                int(recorder.get("outcomes", 0)),
                None if oldest is None else float(oldest),
            ),
            metrics_port=None if data.get("metrics_port") is None else int(data["metrics_port"]),
            stopping=bool(data.get("stopping", False)),
        )


def _aware(text: Any) -> datetime:
    moment = datetime.fromisoformat(str(text))
    if moment.tzinfo is None:
        raise ValueError(f"not an aware time: {text!r}")
    return moment


def registry_key(index: DueIndex) -> str:
    return f"{index.tag}:schedulers"


def record_key(index: DueIndex, token: str) -> str:
    return f"{index.tag}:scheduler:{token}"


def alive(index: DueIndex | None = None) -> list[Heartbeat]:
    """The schedulers whose record has not expired (each beat within its three
    HEARTBEAT_SECONDS, its own setting), newest beat first. Reads only: two Redis calls
    (plus TIME), whatever the set holds."""
    index = index or get_index()
    client = index.client
    now_ms = index.now_ms()
    tokens = client.zrevrangebyscore(
        registry_key(index), "+inf", f"({now_ms}", start=0, num=MAX_LISTED
    )
    if not tokens:
        return []
    found: list[Heartbeat] = []
    for raw in client.mget([record_key(index, _text(t)) for t in tokens]):
        if not raw:
            continue  # expired between the two reads, or removed by a stop
        try:
            found.append(Heartbeat.from_dict(json.loads(raw)))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # not a record this version can read: leave it to expire
    return sorted(found, key=lambda beat: (beat.beat_at, beat.id), reverse=True)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class HeartbeatKeeper:
    """Writes a scheduler's record every ``HEARTBEAT_SECONDS`` from a thread of its own,
    from ``start()`` until ``stop()``, which removes it. A Redis that cannot be reached is
    logged once (and its return once) and tried again at the next beat: the thread, and the
    loop, go on."""

    def __init__(self, source: Observed, index: DueIndex, every: float | None = None) -> None:
        self.source = source
        self.index = index
        self.every = app_settings.HEARTBEAT_SECONDS if every is None else every
        self.expiry_ms = max(1, round(self.every * EXPIRY_BEATS * 1000))
        self.token = uuid.uuid4().hex
        self.key = record_key(index, self.token)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._started = time.monotonic()
        self._started_ms: int | None = None  # in Redis time, once a beat has read it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> None:
        self._started = time.monotonic()
        self._started_ms = None
        self._stop.clear()
        self._thread = stage_thread("schedulinator-heartbeat", self._run)

    def stop(self) -> None:
        """No more beats; the record is removed (the scheduler drops off the list now). A
        beat in progress is waited for ``STOP_WAIT_SECONDS`` at most."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_SECONDS)
            self._thread = None
        try:
            self.remove()
        except Exception as exc:  # Redis away: the record expires on its own
            logger.warning(
                "Could not remove this scheduler's heartbeat (%s: %s); it expires within %g s.",
                type(exc).__name__,
                exc,
                self.expiry_ms / 1000,
            )

    def _run(self) -> None:
        # A stop that comes while a beat waits on Redis may see that beat land after its
        # removal: the record then expires on its own, within three beats.
        while not self._stop.is_set():
            self._beat_or_log()
            self._stop.wait(self.every)

    def _beat_or_log(self) -> None:
        try:
            self.beat()
        except Exception as exc:  # the next beat tries again: never end the thread
            if not self._failing:
                self._failing = True
                logger.warning(
                    "Could not record this scheduler's heartbeat (%s: %s); trying again every "
                    "%g s. Until it works, scheduler_status and the operations page do not "
                    "list it.",
                    type(exc).__name__,
                    exc,
                    self.every,
                )
            return
        if self._failing:
            self._failing = False
            logger.info("This scheduler's heartbeat is recorded again.")

    def beat(self) -> Heartbeat:
        """Record the scheduler as it is now (one TIME, then one MULTI); what was recorded."""
        now_ms = self.index.now_ms()
        monotonic = time.monotonic()
        if self._started_ms is None:
            self._started_ms = now_ms - round((monotonic - self._started) * 1000)
        source = self.source
        last_pass = source.last_pass_at
        record = Heartbeat(
            id=source.worker_id,
            host=self.host,
            pid=self.pid,
            version=__version__,
            started_at=timing.from_ms(self._started_ms),
            beat_at=timing.from_ms(now_ms),
            last_pass_at=None
            if last_pass is None
            else timing.from_ms(now_ms - round((monotonic - last_pass) * 1000)),
            last_error=source.last_error,
            counters=source.counters.as_dict(),
            lanes={
                alias: LaneDepth(waiting, oldest)
                for alias, (waiting, oldest) in source.lane_depths().items()
            },
            recorder=RecorderBacklog(*source.recorder_backlog()),
            metrics_port=source.metrics_port,
            stopping=source.is_stopping(),
        )
        registry = registry_key(self.index)
        with self.index.client.pipeline(transaction=True) as pipe:
            pipe.set(self.key, json.dumps(record.as_dict()), px=self.expiry_ms)
            pipe.zadd(registry, {self.token: now_ms + self.expiry_ms})
            pipe.zremrangebyscore(registry, "-inf", now_ms)  # records that expired
            pipe.pexpire(registry, max(REGISTRY_TTL_MS, self.expiry_ms))
            pipe.execute()
        return record

    def remove(self) -> None:
        with self.index.client.pipeline(transaction=True) as pipe:
            pipe.delete(self.key)
            pipe.zrem(registry_key(self.index), self.token)
            pipe.execute()
