"""Fixtures: a real Redis under a fresh key prefix per test, and real scheduler subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

import pytest
import time_machine
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.transaction import Atomic
from django.utils import timezone

from django_schedulinator import clock
from django_schedulinator import timing as timing_module
from django_schedulinator.connection import get_redis
from django_schedulinator.index import DueIndex
from django_schedulinator.models import Schedule
from django_schedulinator.timing import truncate_ms

from .redis_server import RedisServer, free_port
from .rejections import PAYLOAD_LIMIT
from .walks import TooMuchWork

if TYPE_CHECKING:
    from .simulation import Simulation

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def key_prefix(settings: Any) -> Iterator[str]:
    """Every test gets its own key prefix in the shared Redis, and its keys are removed after."""
    prefix = f"schedtest-{uuid.uuid4().hex[:12]}"
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "KEY_PREFIX": prefix}
    client = get_redis()  # taken now: a test may point the settings elsewhere
    yield prefix
    # Shard 0's keys are "{prefix}:...", shard k's (INDEX_SHARDS) "{prefix:k}:...".
    keys = list(client.scan_iter(match=f"{{{prefix}[}}:]*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def no_effects_left_behind(
    request: pytest.FixtureRequest, django_db_blocker: Any
) -> Iterator[None]:
    """Tasks run on the inline dispatcher's threads, each with a database connection of its
    own: what they write (deliveries, receipts) is committed there, outside the rolled-back
    transaction of a ``django_db`` test, and stayed for the tests after it on the same
    database until a ``transaction=True`` test flushed the tables (a later test then counted
    a delivery it never made: seen on CI once new tests moved the order). After each test
    that runs in a rolled-back transaction on PostgreSQL they are deleted through a
    connection of their own."""
    yield
    marker = request.node.get_closest_marker("django_db")
    transactional = marker is not None and (
        marker.kwargs.get("transaction") or (marker.args and marker.args[0])
    )
    if marker is None or transactional or connection.vendor != "postgresql":
        return  # a transaction=True test flushes its tables; SQLite's test holds its lock
    from .models import Delivery, Receipt, Redelivery

    def delete() -> None:
        try:
            with connection.cursor() as cursor:  # this thread's: never wait on the test's
                cursor.execute("SET lock_timeout = '2s'")
            for model in (Delivery, Receipt, Redelivery):
                model.objects.all().delete()
        except DatabaseError:
            pass  # held by the test's own transaction: the next test's cleaner tries again
        finally:
            connections.close_all()  # this thread's

    with django_db_blocker.unblock():
        cleaner = threading.Thread(target=delete)
        cleaner.start()
        cleaner.join(30)


@pytest.fixture(autouse=True)
def commits_at_block_end(request: pytest.FixtureRequest) -> Iterator[None]:
    """In a test that runs inside a rolled-back transaction (``django_db`` without
    ``transaction=True``), ``on_commit`` callbacks (the index writes after a save, the
    schedulers' wake) run when the code's outermost atomic block ends, as a real commit
    would run them, or at once outside any block, as in autocommit; a block that rolls back
    drops its callbacks, as Django does. Without this they would never run (Django's
    TestCase keeps them for ``captureOnCommitCallbacks``).

    Only tests that need more than this take ``transaction=True`` and its table flush:
    other connections (threads, subprocesses) seeing the commit, or the commit itself."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None or marker.kwargs.get("transaction") or (marker.args and marker.args[0]):
        yield
        return
    request.getfixturevalue("_django_db_helper")  # the test's transaction is open now
    depth = {alias: len(connections[alias].atomic_blocks) for alias in connections}
    original_on_commit = BaseDatabaseWrapper.on_commit
    original_exit = Atomic.__exit__

    def on_commit(self: BaseDatabaseWrapper, func: Any, robust: bool = False) -> None:
        if len(self.atomic_blocks) <= depth.get(self.alias, 0):
            func()  # outside the code's blocks: autocommit runs it at once
        else:
            original_on_commit(self, func, robust)

    def exit_block(self: Atomic, exc_type: Any, exc: Any, tb: Any) -> Any:
        result = original_exit(self, exc_type, exc, tb)
        conn = connections[self.using or DEFAULT_DB_ALIAS]
        if exc_type is None and len(conn.atomic_blocks) == depth.get(conn.alias, 0):
            callbacks, conn.run_on_commit = conn.run_on_commit, []
            for _sids, func, robust in callbacks:
                if robust:
                    try:
                        func()
                    except Exception:
                        continue
                else:
                    func()
        return result

    with (
        mock.patch.object(BaseDatabaseWrapper, "on_commit", on_commit),
        mock.patch.object(Atomic, "__exit__", exit_block),
    ):
        yield


@pytest.fixture
def index(key_prefix: str) -> DueIndex:
    return DueIndex()


@pytest.fixture
def built_index(index: DueIndex) -> DueIndex:
    """An index whose build marker is set, as after rebuild_due_index."""
    index.mark_built({"by": "tests"})
    return index


@pytest.fixture
def sim(
    built_index: DueIndex, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> Iterator[Simulation]:
    """A scheduler in this process on a travelling clock that starts at ``simulation.START``.
    Retention is off: a simulation travels months and reads every run it fired."""
    from .simulation import START, Simulation  # simulation.py imports this module

    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "RUN_RETENTION_SECONDS": None,
        "CHANGE_RETENTION_SECONDS": None,
    }

    # The actions' "now" is Redis TIME: in the simulation, the travelling clock stands in.
    monkeypatch.setattr(clock, "now", lambda: truncate_ms(timezone.now()))
    with time_machine.travel(START, tick=False) as traveller:
        simulation = Simulation(traveller)
        yield simulation
        simulation.worker.dispatcher.close()


@pytest.fixture
def fast_password_hashing(settings: Any) -> None:
    """pytest-django's admin_client fixture creates a superuser: hash its password cheaply."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def redis_client(key_prefix: str) -> Any:
    """The Redis client, taken before a test points the settings somewhere unusable."""
    return get_redis()


@pytest.fixture
def small_payload_limit(settings: Any, key_prefix: str) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MAX_PAYLOAD_BYTES": PAYLOAD_LIMIT}


@pytest.fixture
def walls() -> Iterator[list[int]]:
    """Counts the wall times examined; a walk past 20,000 of them fails at once."""
    timing_module._cron_next.cache_clear()  # a cold cache: count the real work
    timing_module._cron_prev.cache_clear()
    examined = [0]
    moments_of_wall = timing_module._moments_of_wall

    def counting(*args: Any, **kwargs: Any) -> Any:
        examined[0] += 1
        if examined[0] > 20_000:
            raise TooMuchWork("examined more than 20,000 wall times")
        return moments_of_wall(*args, **kwargs)

    with mock.patch.object(timing_module, "_moments_of_wall", counting):
        yield examined


def make_schedule(name: str | None = None, **fields: Any) -> Schedule:
    """A saved schedule (signals fire; the change log records nothing): saved as code that
    bypasses ``services.create`` must (docs/concepts.md#saving-a-schedule-yourself), its
    first run decided at the schedulers' clock unless next_run_at says otherwise."""
    fields.setdefault("task", "tests.record")
    fields.setdefault("kind", Schedule.Kind.INTERVAL)
    if fields["kind"] == Schedule.Kind.INTERVAL:
        fields.setdefault("interval", timedelta(hours=1))
    if fields["kind"] == Schedule.Kind.CRON:
        fields.setdefault("cron", "0 * * * *")
    schedule = Schedule(name=name or f"s-{uuid.uuid4().hex[:10]}", **fields)
    schedule.set_first_run(clock.now())
    with transaction.atomic():
        schedule.save()
        if schedule.jitter and schedule.next_run_at is not None:  # needs the primary key
            schedule.due_at = schedule.due_at_for(schedule.next_run_at)
            Schedule.objects.filter(pk=schedule.pk).update(due_at=schedule.due_at)
    return schedule


def make_due(count: int, *, seconds_ago: int = 5, **fields: Any) -> list[int]:
    """``count`` schedules due ``seconds_ago``, written in bulk like a data migration would."""
    due = timezone.now() - timedelta(seconds=seconds_ago)
    fields.setdefault("task", "tests.record")
    fields.setdefault("kind", Schedule.Kind.INTERVAL)
    fields.setdefault("interval", timedelta(hours=1))
    rows = [
        Schedule(
            name=f"bulk-{uuid.uuid4().hex[:12]}", next_run_at=due.replace(microsecond=0), **fields
        )
        for _ in range(count)
    ]
    created = Schedule.objects.bulk_create(rows)
    ids = (
        [s.pk for s in created]
        if created[0].pk
        else list(
            Schedule.objects.filter(name__in=[r.name for r in rows]).values_list("pk", flat=True)
        )
    )
    return ids


def model_fields(**overrides: Any) -> dict[str, Any]:
    """The fields of a valid cron schedule, with ``overrides``."""
    fields: dict[str, Any] = {
        "name": "nightly",
        "task": "tests.record",
        "kind": "cron",
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
    }
    fields.update(overrides)
    return fields


def form_data(**overrides: str) -> dict[str, str]:
    """The POST data of a valid admin add form, with ``overrides``."""
    data = {
        "name": "nightly",
        "task": "tests.record",
        "args": "[]",
        "kwargs": "{}",
        "enabled": "on",
        "kind": "cron",
        "cron": "0 3 * * *",
        "day_rule": "either",
        "interval": "",
        "run_at_0": "",
        "run_at_1": "",
        "timezone": "Europe/Berlin",
        "dst_gap": "shift",
        "dst_fold": "first",
        "anchor_at_0": "",
        "anchor_at_1": "",
        "start_at_0": "",
        "start_at_1": "",
        "end_at_0": "",
        "end_at_1": "",
        "max_runs": "",
        "jitter": "",
        "catch_up": "",
        "catch_up_window": "",
        "overlap": "allow",
        "pause_note": "",
        "pause_after_failures": "",
        "grace": "",
        "dispatcher": "default",
        "dispatch_options": "{}",
    }
    data.update(overrides)
    return data


def subprocess_env(key_prefix: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        SCHEDULINATOR_TEST_DB_NAME=str(connection.settings_dict["NAME"]),
        SCHEDULINATOR_TEST_PREFIX=key_prefix,
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        **extra,
    )
    return env


class Schedulers:
    """Starts real `manage.py run_scheduler` processes and makes sure none outlives a test."""

    def __init__(self, key_prefix: str) -> None:
        self.key_prefix = key_prefix
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return self.popen([sys.executable, "-m", "django", "run_scheduler", *args], env=env)

    def popen(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env or subprocess_env(self.key_prefix),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for n, proc in enumerate(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            if proc.stdout:
                # Shown by pytest when the test failed: what each scheduler logged.
                if not proc.stdout.closed:
                    print(f"--- scheduler {n} (exit {proc.returncode})", proc.stdout.read())
                proc.stdout.close()


@pytest.fixture
def private_redis(tmp_path: Path, settings: Any) -> Iterator[RedisServer]:
    """A redis-server of the test's own, which it may stop, flush or reconfigure; the app
    (in this process) uses it through the cache alias "private"."""
    server = RedisServer(tmp_path)
    server.start()
    settings.CACHES = {
        **settings.CACHES,
        "private": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url},
    }
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "CACHE_ALIAS": "private"}
    yield server
    server.kill()


@pytest.fixture
def schedulers(key_prefix: str) -> Iterator[Schedulers]:
    runner = Schedulers(key_prefix)
    yield runner
    runner.stop_all()


def lose_redis(settings: Any) -> None:
    """From now on the app's Redis is a port where nothing listens: every connection is
    refused at once, a real error from a real client (no mock)."""
    settings.CACHES = {
        **settings.CACHES,
        "down": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
        },
    }
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "CACHE_ALIAS": "down"}


@pytest.fixture
def redis_down(settings: Any) -> None:
    """The app's Redis is unreachable for the whole test (see lose_redis)."""
    lose_redis(settings)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest tests first (the chaos test, then real processes and browsers): with
    pytest-xdist they start at once and run beside the rest instead of after it."""

    def weight(item: pytest.Item) -> int:
        if item.get_closest_marker("slow"):
            return 0
        if item.get_closest_marker("subprocess"):
            return 1
        return 2

    items.sort(key=weight)  # stable: the order within each group stays
    if os.environ.get("SCHEDULINATOR_DATABASE_TESTS_ONLY"):
        # scripts/test sets it for its second database: the tests that use no database
        # (timing rules, properties, DST, schema) gave their answer on the first already.
        independent = [
            item
            for item in items
            if item.get_closest_marker("django_db") is None
            and item.get_closest_marker("subprocess") is None
            and "live_server" not in getattr(item, "fixturenames", ())
        ]
        if independent:
            config.hook.pytest_deselected(items=independent)
            chosen = set(map(id, independent))
            items[:] = [item for item in items if id(item) not in chosen]


@pytest.fixture
def celery_alias(settings: Any, built_index: DueIndex) -> Iterator[None]:
    """The docs' Celery dispatcher, sending to this test process's queue, emptied after."""
    from .celery_support import purge
    from .doc_examples import example

    config = example("celery")["SCHEDULINATOR"]
    config["DISPATCHERS"]["celery"]["OPTIONS"]["APP"] = "tests.celery_app.app"
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **config}
    purge()
    yield
    purge()


@pytest.fixture
def celery_worker(schedulers: Schedulers) -> Callable[[], Any]:
    """Starts a real Celery worker on that queue (killed, its output shown, after the test)."""
    from .celery_support import worker_argv

    return lambda: schedulers.popen(worker_argv())
