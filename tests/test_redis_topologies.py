"""The due index in a Redis of the app's own (``SCHEDULINATOR["REDIS"]``): a real Redis
Cluster of six redis-server processes, and a master found through real Redis Sentinels; in
each, schedules fire once through real `run_scheduler` processes, and keep firing, nothing
doubled, after the master holding the index fails over to its replica."""

from __future__ import annotations

import itertools
import json
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Count, Max
from django.utils import timezone

from django_schedulinator import timing
from django_schedulinator.conf import app_settings
from django_schedulinator.index.connection import get_redis
from django_schedulinator.index.due import DueIndex, get_index, shard_tag
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker

from .models import Receipt, Redelivery
from .support.processes import Schedulers, output, read_until, subprocess_env, wait_for
from .support.redis_cluster import RedisClusterServers, redis_cluster
from .support.redis_server import RedisServer, free_port
from .support.schedules import make_schedule
from .test_chaos import (
    SEED,
    Fleet,
    Variant,
    audit,
    change,
    create_schedules,
    explain,
    ledger_disagreements,
    not_ended,
)

pytestmark = pytest.mark.django_db(transaction=True)  # real schedulers: real commits


def every_second(count: int) -> list[Schedule]:
    return [
        make_schedule(
            task="tests.receipt", kind=Schedule.Kind.INTERVAL, interval=timedelta(seconds=1)
        )
        for _ in range(count)
    ]


def start_scheduler(
    schedulers: Schedulers, key_prefix: str, redis_setting: dict[str, Any]
) -> subprocess.Popen[str]:
    env = subprocess_env(
        key_prefix, SCHEDULINATOR_TEST_SETTINGS=json.dumps({"REDIS": redis_setting})
    )
    return schedulers.start("--max-seconds", "120", env=env)


def receipts_per_schedule() -> dict[int, int]:
    return dict(Receipt.objects.values_list("schedule_id").annotate(n=Count("id")))


def assert_each_occurrence_fired_once() -> None:
    doubled = Receipt.objects.values("key").annotate(n=Count("id")).filter(n__gt=1)
    assert not doubled.exists(), list(doubled)


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, output(proc)
    return output(proc)


def keeps_firing_once(proc: subprocess.Popen[str], schedules: list[Schedule]) -> None:
    """After a fail-over: every schedule fires again, several times, from the same scheduler
    (its loop survived), and no occurrence ran twice."""
    failed_over = Receipt.objects.aggregate(last=Max("id"))["last"]
    wait_for(
        lambda: all(
            Receipt.objects.filter(schedule_id=s.pk, id__gt=failed_over).count() >= 3
            for s in schedules
        ),
        timeout=60,
    )
    assert proc.poll() is None, "the loop must not die"
    stop(proc)
    assert_each_occurrence_fired_once()


# -- Redis Cluster ------------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path, settings: Any) -> Iterator[RedisClusterServers]:
    """A cluster of the test's own (three masters, a replica each); the app in this process
    uses it through SCHEDULINATOR["REDIS"]."""
    with redis_cluster(tmp_path / "cluster") as servers:
        settings.SCHEDULINATOR = {
            **settings.SCHEDULINATOR,
            "REDIS": {"URL": servers.url, "CLUSTER": True},
        }
        yield servers


@pytest.mark.subprocess
def test_schedules_fire_once_through_a_redis_cluster(
    cluster: RedisClusterServers, key_prefix: str, schedulers: Schedulers
) -> None:
    assert isinstance(get_redis(), redis.cluster.RedisCluster)
    proc = start_scheduler(schedulers, key_prefix, {"URL": cluster.url, "CLUSTER": True})
    schedules = every_second(5)
    wait_for(
        lambda: len(receipts_per_schedule()) == 5 and min(receipts_per_schedule().values()) >= 3
    )
    log = stop(proc)
    assert "Scheduler pass failed" not in log, log
    assert_each_occurrence_fired_once()
    # The index lives on one node of the cluster, under its hash tag.
    index = DueIndex()
    assert index.is_built()
    assert index.client.zcard(index.due_key) == len(schedules)


@pytest.mark.subprocess
def test_a_scheduler_started_after_its_first_startup_node_died_finds_the_cluster(
    cluster: RedisClusterServers, key_prefix: str, schedulers: Schedulers, settings: Any
) -> None:
    """REDIS["URL"] named one node: a process started once that node had died could not
    find the cluster, though the cluster had failed over and served every slot (issue 32,
    item 20). A list of startup nodes is tried node by node."""
    # The master of the index's slot dies, and its replica has taken over: the cluster
    # serves every slot again. The dead node is the one the setting names first.
    key = DueIndex().due_key
    dead = cluster.master_of(key)
    cluster.fail_over(key)
    alive = [node for node in cluster.nodes if node.proc is not None]
    one = {"URL": dead.url, "CLUSTER": True, "OPTIONS": {"socket_connect_timeout": 1}}
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "REDIS": one}
    with pytest.raises(redis.ConnectionError, match="No node of the Redis Cluster"):
        get_redis()

    several = {**one, "URL": [dead.url, alive[0].url, alive[1].url]}
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "REDIS": several}
    assert isinstance(get_redis(), redis.cluster.RedisCluster)
    proc = start_scheduler(schedulers, key_prefix, several)
    schedules = every_second(3)
    wait_for(
        lambda: (
            len(receipts_per_schedule()) == len(schedules)
            and min(receipts_per_schedule().values()) >= 2
        )
    )
    log = stop(proc)
    assert "Scheduler pass failed" not in log, log
    assert_each_occurrence_fired_once()


@pytest.mark.subprocess
def test_a_failed_over_master_loses_no_schedule_and_doubles_no_run(
    cluster: RedisClusterServers, key_prefix: str, schedulers: Schedulers
) -> None:
    setting = {"URL": cluster.url, "CLUSTER": True}
    proc = start_scheduler(schedulers, key_prefix, setting)
    schedules = every_second(5)
    wait_for(lambda: len(receipts_per_schedule()) == 5)

    index = DueIndex()
    cluster.fail_over(index.due_key)
    keeps_firing_once(proc, schedules)


# -- a sharded index on the cluster ------------------------------------------------------------

SHARDS = 3


def spread_prefix(cluster: RedisClusterServers, base: str) -> str:
    """A key prefix whose shards' hash tags land on different masters (one each, with three
    masters and three shards), whichever slots the test's random prefix hashes to."""
    client = cluster.client()
    try:
        for n in range(1000):
            prefix = f"{base}-{n}"
            ports = {
                client.get_node_from_key(f"{shard_tag(prefix, k)}:due").port for k in range(SHARDS)
            }
            if len(ports) == SHARDS:
                return prefix
    finally:
        client.close()
    raise AssertionError("no prefix spreads the shards over the masters")


@pytest.fixture
def sharded_cluster(
    cluster: RedisClusterServers, key_prefix: str, settings: Any
) -> tuple[RedisClusterServers, str, dict[str, Any]]:
    """The cluster, a prefix whose three shards sit on three masters, and the settings the
    schedulers get; this process uses them too (its saves write the index)."""
    prefix = spread_prefix(cluster, key_prefix)
    setting = {"REDIS": {"URL": cluster.url, "CLUSTER": True}, "INDEX_SHARDS": SHARDS}
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **setting, "KEY_PREFIX": prefix}
    # This process's client learns every node now, before a test kills the one in the URL.
    get_index().now_ms()
    return cluster, prefix, setting


def masters_of_shards(cluster: RedisClusterServers, prefix: str) -> dict[int, int]:
    return {k: cluster.master_of(f"{shard_tag(prefix, k)}:due").port for k in range(SHARDS)}


@pytest.mark.subprocess
def test_schedules_fire_once_from_three_shards_on_three_masters(
    sharded_cluster: tuple[RedisClusterServers, str, dict[str, Any]], schedulers: Schedulers
) -> None:
    cluster, prefix, setting = sharded_cluster
    env = subprocess_env(prefix, SCHEDULINATOR_TEST_SETTINGS=json.dumps(setting))
    procs = [schedulers.start("--max-seconds", "120", env=env) for _ in range(2)]
    schedules = every_second(9)
    wait_for(
        lambda: len(receipts_per_schedule()) == 9 and min(receipts_per_schedule().values()) >= 3
    )
    for proc in procs:
        log = stop(proc)
        assert "Scheduler pass failed" not in log, log
    assert_each_occurrence_fired_once()
    assert len(set(masters_of_shards(cluster, prefix).values())) == SHARDS
    index = get_index()
    assert sorted(index.parts) == list(range(SHARDS))
    assert index.is_built()
    for k, part in index.parts.items():
        ids = {int(m) for m in part.client.zrange(part.due_key, 0, -1)}
        assert ids == {s.pk for s in schedules if s.pk % SHARDS == k}


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the chaos audit is on PostgreSQL")
def test_killed_masters_holding_shards_lose_nothing_under_the_chaos_audit(
    sharded_cluster: tuple[RedisClusterServers, str, dict[str, Any]], tmp_path: Path
) -> None:
    """Two schedulers fire 300 schedules from three shards on three masters for half a
    minute, while the test SIGKILLs the master holding shard 1, then the one holding shard 0
    (the clock and the control keys), each replica taking over, and edits, pauses and
    deletes schedules. The chaos test's audit (tests/test_chaos.py) then finds nothing
    missing, early, off the grid or doubled."""
    cluster, prefix, setting = sharded_cluster
    variant = Variant("cluster-shards", schedules=300, schedulers=2, window=30.0, calendars=False)
    rng = random.Random(SEED)
    env = subprocess_env(
        prefix,
        SCHEDULINATOR_TEST_SETTINGS=json.dumps(setting),
        SCHEDULINATOR_TEST_LEASE="5",
        SCHEDULINATOR_TEST_RECONCILE="2",
        SCHEDULINATOR_TEST_LOG_STATS="2",
    )
    first_ms = timing.to_ms(timezone.now()) + 5000
    history = create_schedules(rng, first_ms, variant)
    ids = sorted(history)
    fleet = Fleet(env, tmp_path)
    events: list[str] = []
    killed: list[int] = []
    try:
        for _ in range(variant.schedulers):
            fleet.start()
        started = time.monotonic()
        plan = [(8.0, "kill shard 1"), (14.0, "edits"), (19.0, "kill shard 0"), (24.0, "edits")]
        for at, what in plan:
            time.sleep(max(0.0, at - (time.monotonic() - started)))
            events.append(f"{time.monotonic() - started:5.1f}s {what}")
            if what.startswith("kill shard"):
                shard = int(what.rsplit(" ", 1)[1])
                old = cluster.master_of(f"{shard_tag(prefix, shard)}:due").port
                new = cluster.fail_over(f"{shard_tag(prefix, shard)}:due")  # SIGKILL
                killed.append(old)
                events[-1] += f" (master {old} killed, {new.port} took over)"
            else:
                live = [pk for pk in ids if history[pk][-1].end_ms is None]
                for pk in rng.sample(live, 10):
                    change(pk, rng.choice(["edit", "edit", "pause", "delete"]), history, rng)
        time.sleep(max(0.0, variant.window - (time.monotonic() - started)))
        chaos_end = timezone.now()

        def healed() -> bool:
            behind = Schedule.objects.filter(enabled=True, next_run_at__lte=chaos_end)
            return not behind.exists() and not not_ended(chaos_end).exists()

        wait_for(healed, timeout=120, interval=0.5)
        codes = fleet.stop()
        wait_for(lambda: not not_ended().exists(), timeout=60, interval=0.5)
    finally:
        fleet.kill_all()
        print("\n".join(events))

    result, _lateness = audit(history, timing.to_ms(chaos_end))
    assert len(killed) == 2
    assert result.early == []
    assert result.off_grid == []
    assert result.missing == [], [explain(m, history) for m in result.missing[:5]]
    assert result.not_caught_up == []
    assert result.fired == Receipt.objects.count() > variant.schedules
    assert Redelivery.objects.count() == 0  # no scheduler died: nothing handed off twice
    assert ledger_disagreements() == []
    assert codes == [0] * variant.schedulers
    # The schedulers noticed each fail-over as its shard's outage, backed off from that shard
    # alone, and went on (issue 34).
    assert "of the due index answers again" in fleet.log_text()


def fired_since(receipt_id: int, schedule_ids: list[int]) -> dict[int, int]:
    """Receipts per schedule of ``schedule_ids`` after the receipt ``receipt_id``."""
    counts = receipts_per_schedule_after(receipt_id)
    return {sid: counts.get(sid, 0) for sid in schedule_ids}


def receipts_per_schedule_after(receipt_id: int) -> dict[int, int]:
    later = Receipt.objects.filter(id__gt=receipt_id)
    return dict(later.values_list("schedule_id").annotate(n=Count("id")))


def last_receipt() -> int:
    return Receipt.objects.aggregate(last=Max("id"))["last"] or 0


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("stopped", [1, 0], ids=["shard-1", "shard-0-the-clock"])
def test_a_stopped_master_holds_back_its_shard_alone(
    tmp_path: Path, key_prefix: str, schedulers: Schedulers, settings: Any, stopped: int
) -> None:
    """Issue 34, item 3: three shards on three masters (no replicas, and the cluster serves
    the slots it can: nothing fails over). The master of one shard is frozen (SIGSTOP)
    while a scheduler runs: the other shards' schedules keep firing while it is away (with
    shard 0 away: on another node's clock, the control plane's chores waiting), and once
    it is back (SIGCONT), its shard's fire too: every occurrence in each schedule's ledger
    once, none missing, none handed off twice."""
    with redis_cluster(tmp_path / "cluster", replicas=0, full_coverage=False) as cluster:
        prefix = spread_prefix(cluster, key_prefix)
        redis_setting = {
            "URL": [node.url for node in cluster.nodes],  # any of them finds the cluster
            "CLUSTER": True,
            # A frozen node never answers: a call to it fails after this.
            "OPTIONS": {"socket_timeout": 1, "socket_connect_timeout": 1},
        }
        setting = {"REDIS": redis_setting, "INDEX_SHARDS": SHARDS}
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **setting, "KEY_PREFIX": prefix}
        env = subprocess_env(
            prefix,
            SCHEDULINATOR_TEST_SETTINGS=json.dumps(setting),
            SCHEDULINATOR_TEST_LEASE="5",
            SCHEDULINATOR_TEST_RECONCILE="2",
        )
        proc = schedulers.start("--max-seconds", "170", env=env)
        schedules = every_second(3 * SHARDS)
        ids = [s.pk for s in schedules]
        held = [sid for sid in ids if sid % SHARDS == stopped]
        others = [sid for sid in ids if sid % SHARDS != stopped]
        wait_for(lambda: min(fired_since(0, ids).values()) >= 2)
        node = cluster.master_of(f"{shard_tag(prefix, stopped)}:due")
        assert node.proc is not None
        node.proc.send_signal(signal.SIGSTOP)
        try:
            frozen_at = last_receipt()
            # The other shards fire while it is away, several times each.
            wait_for(lambda: min(fired_since(frozen_at, others).values()) >= 5, timeout=90)
            assert proc.poll() is None, output(proc)
            assert node.proc.poll() is None  # still frozen: those fired while it was
        finally:
            node.proc.send_signal(signal.SIGCONT)
        back_at = last_receipt()
        wait_for(lambda: min(fired_since(back_at, ids).values()) >= 3, timeout=90)
        log = stop(proc)

    # Independence: no pass failed as a whole; the shard's outage said once, and its end.
    assert "Scheduler pass failed" not in log, log
    assert log.count(f"Shard {stopped} of the due index is away") == 1, log
    assert log.count(f"Shard {stopped} of the due index answers again") == 1, log
    if stopped == 0:
        assert "the passes read Redis TIME on shard 1's node" in log, log
    assert set(fired_since(back_at, held)) == set(held)
    # Exactly once: each schedule's ledger has every second from its first occurrence to
    # its last once (fired, or skipped by the catch-up), each fired run handed off once.
    for schedule in schedules:
        ledger = Run.objects.filter(schedule=schedule).values_list("scheduled_for", flat=True)
        times = sorted(ledger)
        assert len(times) == len(set(times))
        gaps = {later - earlier for earlier, later in itertools.pairwise(times)}
        assert gaps == {timedelta(seconds=1)}, (schedule.pk, times)
    fired = Run.objects.exclude(status=Run.Status.SKIPPED)
    assert fired.count() == Receipt.objects.count()
    assert Redelivery.objects.count() == 0
    assert_each_occurrence_fired_once()


@pytest.mark.subprocess
def test_a_cluster_unreachable_at_the_start_is_an_outage_the_loop_waits_out(
    tmp_path: Path, key_prefix: str, schedulers: Schedulers
) -> None:
    # The cluster's ports are chosen now; nothing listens on them until it starts below.
    servers = RedisClusterServers(tmp_path / "cluster")
    url = f"redis://127.0.0.1:{servers.nodes[0].port}/0"
    setting = {"URL": url, "CLUSTER": True, "OPTIONS": {"socket_connect_timeout": 1}}
    proc = start_scheduler(schedulers, key_prefix, setting)
    schedules = every_second(2)
    # The scheduler starts while no node answers: its first pass fails, and it goes on.
    log = read_until(proc, "Scheduler pass failed")
    assert proc.poll() is None, log + output(proc)
    try:
        servers.start()
        wait_for(lambda: len(receipts_per_schedule()) == len(schedules), timeout=60)
        log += stop(proc)
    finally:
        servers.kill()
    assert log.count("Scheduler pass failed") == 1, log
    assert "Connections are back" in log, log
    assert_each_occurrence_fired_once()


def test_an_unreachable_cluster_is_a_connection_error(settings: Any) -> None:
    # Not redis-py's RedisClusterException, which the loop cannot tell from a bug.
    url = f"redis://127.0.0.1:{free_port()}/0"
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "REDIS": {"URL": url, "CLUSTER": True, "OPTIONS": {"socket_connect_timeout": 1}},
    }
    with pytest.raises(redis.ConnectionError, match="No node of the Redis Cluster of"):
        get_redis()
    # Building the scheduler does not need Redis yet: its loop meets the outage.
    worker = Worker()
    stop_soon = threading.Timer(2, lambda: setattr(worker, "stopping", True))
    stop_soon.start()
    worker.run()
    stop_soon.join()
    assert "ConnectionError" in worker.last_error


# -- Redis Sentinel -----------------------------------------------------------------------------


class SentinelSetup:
    """A master, its replica and three sentinels watching them as "schedmaster"."""

    SERVICE = "schedmaster"

    def __init__(self, directory: Path) -> None:
        self.master = RedisServer(directory / "master")
        self.replica = RedisServer(directory / "replica")
        self.sentinels: list[subprocess.Popen[bytes]] = []
        self.sentinel_ports: list[int] = []
        self.directory = directory

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        for server in (self.master, self.replica):
            server.directory.mkdir(parents=True)
        self.master.start()
        self.replica.start_with("--replicaof", "127.0.0.1", str(self.master.port))
        for n in range(3):
            port = free_port()
            conf = self.directory / f"sentinel{n}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.master.port} 2\n"
                # Slow enough that a stall of a loaded CI machine does not fail the master
                # over again by itself; the test's own fail-over is asked for.
                f"sentinel down-after-milliseconds {self.SERVICE} 10000\n"
                f"sentinel failover-timeout {self.SERVICE} 5000\n"
            )
            self.sentinels.append(
                subprocess.Popen(
                    [binary, str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            self.sentinel_ports.append(port)
        wait_for(lambda: self.replica.client().info("replication")["master_link_status"] == "up")
        wait_for(lambda: self._sentinels_know_the_replica(), timeout=30)

    def _sentinels_know_the_replica(self) -> bool:
        try:
            return all(
                redis.Redis(port=port).sentinel_slaves(self.SERVICE) for port in self.sentinel_ports
            )
        except redis.RedisError:
            return False

    @property
    def setting(self) -> dict[str, Any]:
        return {
            "SENTINELS": [["127.0.0.1", port] for port in self.sentinel_ports],
            "SERVICE_NAME": self.SERVICE,
            "OPTIONS": {"socket_timeout": 5},
        }

    def fail_over(self) -> None:
        """Make the replica the master, as Sentinel does when the master goes away."""
        sentinel = redis.Redis(port=self.sentinel_ports[0])
        sentinel.execute_command("SENTINEL", "FAILOVER", self.SERVICE)
        wait_for(
            lambda: sentinel.sentinel_get_master_addr_by_name(self.SERVICE)[1] == self.replica.port,
            timeout=30,
        )
        wait_for(lambda: self.replica.client().info("replication")["role"] == "master")

    def kill(self) -> None:
        for proc in self.sentinels:
            proc.kill()
            proc.wait(timeout=30)
        self.master.kill()
        self.replica.kill()


@pytest.fixture
def sentinel(tmp_path: Path, settings: Any) -> Iterator[SentinelSetup]:
    setup = SentinelSetup(tmp_path)
    try:
        setup.start()
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "REDIS": setup.setting}
        yield setup
    finally:
        setup.kill()


@pytest.mark.subprocess
def test_schedules_fire_through_a_sentinel_master_and_after_its_failover(
    sentinel: SentinelSetup, key_prefix: str, schedulers: Schedulers
) -> None:
    assert get_redis().connection_pool.service_name == SentinelSetup.SERVICE
    proc = start_scheduler(schedulers, key_prefix, sentinel.setting)
    schedules = every_second(4)
    wait_for(lambda: len(receipts_per_schedule()) == 4)

    sentinel.fail_over()
    keeps_firing_once(proc, schedules)
    # The index is whole on the master Sentinel names now: every schedule due or in flight.
    index = DueIndex()
    assert index.client.connection_pool.get_master_address()[1] == sentinel.replica.port
    wait_for(lambda: indexed_ids(index) == {s.pk for s in schedules})


def indexed_ids(index: DueIndex) -> set[int]:
    due = {int(m) for m in index.client.zrange(index.due_key, 0, -1)}
    return due | index.inflight_ids()


# -- the setting --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("redis://x", "must be None or a dict"),
        ({"URL": "http://x"}, "['URL'] must be a redis://"),
        ({"URL": "redis://x", "CLUSTER": "yes"}, "['CLUSTER'] must be True or False"),
        ({"URL": "redis://x", "OPTIONS": []}, "['OPTIONS'] must be a dict"),
        ({"URL": "redis://x", "HOST": "x"}, "has unknown keys HOST"),
        ({"SENTINELS": [["h", "26379"]], "SERVICE_NAME": "m"}, "[host, port] pairs"),
        ({"SENTINELS": [["h", 26379]]}, "['SERVICE_NAME'] must name the Sentinel service"),
        ({"SENTINELS": [["h", 26379]], "SERVICE_NAME": "m", "URL": "redis://x"}, "not both"),
        ({"URL": "redis://x", "SERVICE_NAME": "m"}, "goes with SENTINELS"),
        ({"URL": ["redis://a:7000", "redis://b:7000"]}, "only a Redis Cluster takes"),
        ({"URL": [], "CLUSTER": True}, "at least one node"),
        ({"URL": ["redis://a:7000", 7001], "CLUSTER": True}, "['URL'][1] must be a redis://"),
        ({"URL": ["unix:///tmp/r.sock"], "CLUSTER": True}, "['URL'][0] must be a redis://"),
        (
            {"URL": ["redis://:pw@a:7000", "redis://b:7000"], "CLUSTER": True},
            "['URL'][1] differs from ['URL'][0]",
        ),
    ],
)
def test_a_bad_redis_setting_is_refused_by_name(settings: Any, value: Any, message: str) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "REDIS": value}
    with pytest.raises(ImproperlyConfigured) as caught:
        app_settings.REDIS  # noqa: B018 - the access validates
    assert "SCHEDULINATOR['REDIS']" in str(caught.value)
    assert message in str(caught.value)


def test_a_list_of_startup_nodes_is_one_cluster_config(settings: Any) -> None:
    urls = ["rediss://:pw@a:7000/0", "rediss://:pw@b:7001/0"]
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "REDIS": {"URL": urls, "CLUSTER": True}}
    config = app_settings.REDIS
    assert config is not None
    assert (config.url, config.startup_nodes) == (urls[0], (("b", 7001),))


def test_a_plain_redis_url_gets_a_client_of_its_own(settings: Any) -> None:
    url = settings.REDIS_URL  # the suite's own Redis
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "REDIS": {"URL": url}}
    client = get_redis()
    assert client is get_redis()  # one per process
    assert client.ping()
    assert client.connection_pool.connection_kwargs["port"] == urlsplit(url).port


def test_a_url_redis_py_refuses_is_an_error_naming_the_setting(settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "REDIS": {"URL": "redis://h:port/0"}}
    with pytest.raises(ImproperlyConfigured, match=r"SCHEDULINATOR\['REDIS'\] is refused"):
        get_redis()
