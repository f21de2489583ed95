"""Fixtures: a real Redis under a fresh key prefix per test, and real scheduler subprocesses."""

from __future__ import annotations

import os
import sysconfig
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import time_machine
from django.db import DatabaseError, connection, connections
from django.utils import timezone

import django_schedulinator
from django_schedulinator.index import clock
from django_schedulinator.index.connection import get_redis
from django_schedulinator.index.due import DueIndex
from django_schedulinator.timing import truncate_ms, walks

from .support import commits
from .support.processes import Schedulers
from .support.redis_server import RedisServer, lose_redis
from .support.rejections import PAYLOAD_LIMIT
from .support.rule_work import RuleWork, counting
from .support.timing_calls import replaced
from .support.walks import TooMuchWork

if TYPE_CHECKING:
    from .support.simulation import Simulation


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
    if not in_rolled_back_transaction(request) or connection.vendor != "postgresql":
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
def rolled_back(request: pytest.FixtureRequest) -> Iterator[None]:
    """Whether the test runs inside a transaction that is rolled back (``django_db``
    without ``transaction=True``), where ``commits.committed()`` runs the ``on_commit``
    callbacks that no commit will; in other tests the real commits run them."""
    with commits.rolled_back(in_rolled_back_transaction(request)):
        yield


def in_rolled_back_transaction(request: pytest.FixtureRequest) -> bool:
    """The test runs in a transaction that is rolled back: ``django_db`` without
    ``transaction=True``."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None:
        return False
    return not (marker.kwargs.get("transaction") or (marker.args and marker.args[0]))


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
    from .support.simulation import START, Simulation  # a scheduler's worth of imports

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
def client() -> commits.Client:
    """pytest-django's ``client``, each request committed as a server's (``commits``)."""
    return commits.Client()


@pytest.fixture
def admin_client(db: None, admin_user: Any) -> commits.Client:
    """pytest-django's ``admin_client``, each request committed as a server's."""
    client = commits.Client()
    client.force_login(admin_user)
    return client


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
    walks.cron_next.cache_clear()  # a cold cache: count the real work
    walks.cron_prev.cache_clear()
    examined = [0]

    def counter(moments_of_wall: Callable[..., Any]) -> Callable[..., Any]:
        def counting(*args: Any, **kwargs: Any) -> Any:
            examined[0] += 1
            if examined[0] > 20_000:
                raise TooMuchWork("examined more than 20,000 wall times")
            return moments_of_wall(*args, **kwargs)

        return counting

    with replaced("moments_of_wall", counter):
        yield examined


@pytest.fixture
def rule_work(monkeypatch: pytest.MonkeyPatch) -> RuleWork:
    """Counts the instants dateutil's rules produce and the periods they examine while an
    iCalendar file is read; an expansion far past its bounds fails at once."""
    work = RuleWork()
    for (owner, name), wrapper in counting(work).items():
        monkeypatch.setattr(owner, name, wrapper)
    return work


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


@pytest.fixture
def redis_down(settings: Any) -> None:
    """The app's Redis is unreachable for the whole test (see lose_redis)."""
    lose_redis(settings)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under the matrix (tox.ini sets SCHEDULINATOR_TEST_WHEEL) the suite must test the
    installed wheel: refuse to run if the package comes from anywhere else (the clone's own,
    an editable install, a path on PYTHONPATH)."""
    if not os.environ.get("SCHEDULINATOR_TEST_WHEEL"):
        return
    imported = Path(django_schedulinator.__file__).resolve()
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    if not imported.is_relative_to(site_packages):
        raise pytest.UsageError(
            f"SCHEDULINATOR_TEST_WHEEL is set, but django_schedulinator is imported from "
            f"{imported.parent}, not from this environment's site-packages ({site_packages})"
        )


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
    from .support.celery_support import purge
    from .support.doc_examples import example

    config = example("celery")["SCHEDULINATOR"]
    config["DISPATCHERS"]["celery"]["OPTIONS"]["APP"] = "tests.support.celery_app.app"
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **config}
    purge()
    yield
    purge()


@pytest.fixture
def celery_worker(schedulers: Schedulers) -> Callable[[], Any]:
    """Starts a real Celery worker on that queue (killed, its output shown, after the test)."""
    from .support.celery_support import worker_argv

    return lambda: schedulers.popen(worker_argv())
