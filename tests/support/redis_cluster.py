"""A real Redis Cluster for tests: several redis-server processes on 127.0.0.1, joined by
``redis-cli --cluster create``, each master with a replica, so a test may kill a master and
watch its replica take over.

Each node is a `RedisServer` (tests/support/redis_server.py) started in cluster mode on a port whose
cluster bus port (port + 10000) is free too; data and logs live in the test's temporary
directory and everything is killed at the end.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster as ClusterClient

from .redis_server import RedisServer

NODE_TIMEOUT_MS = 1000  # how long before a silent master is failed over: short, for tests


def _port_pair_free(port: int) -> bool:
    for candidate in (port, port + 10000):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                return False
    return True


def _free_cluster_port() -> int:
    """A free port whose bus port is free too, both below the range the kernel hands out
    to outgoing connections: a port the kernel picked (in that range) left its bus port
    to any connection of the suite's, and one took it between the check and the node's
    start (seen once on CI), or while the node was down for a restart."""
    ephemeral = _ephemeral_start()
    for _ in range(500):
        port = random.randrange(10000, max(ephemeral - 10000, 10001))
        if _port_pair_free(port):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _ephemeral_start() -> int:
    """The first port the kernel gives outgoing connections (Linux's default: 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


class ClusterNode(RedisServer):
    def __init__(self, directory: Path, *, full_coverage: bool = True) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        super().__init__(directory)
        self.port = _free_cluster_port()
        self.full_coverage = full_coverage

    def start(self) -> None:
        self.start_with(
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(self.directory / "nodes.conf"),
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
            "--repl-diskless-sync-delay",  # a replica in sync at once: ready to take over
            "0",
            # "no": the other masters' slots are served while one master is away.
            "--cluster-require-full-coverage",
            "yes" if self.full_coverage else "no",
        )


class RedisClusterServers:
    """``masters`` masters, each with ``replicas`` replicas, on free ports. ``full_coverage``
    False: the nodes serve their slots while a master without a replica is away (Redis's
    ``cluster-require-full-coverage no``)."""

    def __init__(
        self, directory: Path, *, masters: int = 3, replicas: int = 1, full_coverage: bool = True
    ) -> None:
        if shutil.which("redis-cli") is None:
            raise RuntimeError("redis-cli is not installed (scripts/services installs it)")
        self.replicas = replicas
        self.nodes = [
            ClusterNode(directory / f"node{i}", full_coverage=full_coverage)
            for i in range(masters * (1 + replicas))
        ]

    @property
    def url(self) -> str:
        """A URL of one live node: a cluster client discovers the rest from it."""
        for node in self.nodes:
            if node.proc is not None:
                return node.url
        raise RuntimeError("no node of the cluster is running")

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        replicas = ["--cluster-replicas", str(self.replicas)]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, *replicas, "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_until_ok()
        self.wait_until_replicated()

    def wait_until_replicated(self, timeout: float = 30.0) -> None:
        """Every replica has synced with its master: only then can it be failed over to."""
        if not self.replicas:
            return
        deadline = time.monotonic() + timeout
        while True:
            roles = [node.client().info("replication") for node in self.nodes if node.proc]
            replicas = [role for role in roles if role.get("role") == "slave"]
            if replicas and all(r.get("master_link_status") == "up" for r in replicas):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster's replicas did not sync with their masters")
            time.sleep(0.1)

    def client(self) -> ClusterClient:  # type: ignore[override]
        return ClusterClient.from_url(self.url, socket_timeout=5)

    def state(self, node: RedisServer) -> dict[str, str]:
        info: dict[str, str] = node.client().cluster("INFO")
        return info

    def wait_until_ok(self, timeout: float = 30.0) -> None:
        """Every running node agrees the cluster is up, with all slots served."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if all(
                    self.state(node).get("cluster_state") == "ok"
                    for node in self.nodes
                    if node.proc is not None
                ):
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis Cluster did not reach state ok")
            time.sleep(0.1)

    def master_of(self, key: str) -> ClusterNode:
        """The node serving ``key``'s slot now."""
        client = self.client()
        try:
            node = client.get_node_from_key(key)
        finally:
            client.close()
        for candidate in self.nodes:
            if candidate.port == node.port:
                return candidate
        raise LookupError(node)

    def fail_over(self, key: str, timeout: float = 30.0) -> ClusterNode:
        """Kill the master serving ``key`` and wait until its replica serves the slot (and
        every live node says the cluster is ok again); the new master."""
        old = self.master_of(key)
        old.kill()
        deadline = time.monotonic() + timeout
        while True:
            try:
                new = self.master_of(key)
                if new is not old and new.proc is not None:
                    self.wait_until_ok(max(0.1, deadline - time.monotonic()))
                    return new
            except (redis.RedisError, LookupError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no replica took over from the master on {old.port}")
            time.sleep(0.1)

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()


@contextmanager
def redis_cluster(directory: Path, **kwargs: Any) -> Iterator[RedisClusterServers]:
    cluster = RedisClusterServers(directory, **kwargs)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill()
