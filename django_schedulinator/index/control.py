"""The control plane of the due index: the keys through which the fleet's processes agree,
next to the entries and never among them. The rebuild's lock and the rebuild asked for (the
admin's button), reconcile's cursor, the turns of the periodic chores, the outage mark (no
scheduler alive), the drift record. All under shard 0's hash tag, whatever the shard count,
so that every process finds them in one place (one slot on a Redis Cluster)."""

from __future__ import annotations

import json
from typing import Any

from django_schedulinator.index.connection import LazyClient
from django_schedulinator.index.entries import json_record
from django_schedulinator.index.shard import shard_tag

# Periodic chores that one process of the fleet does per period (see take_turn).
TURNS = ("reconcile", "drift", "missed", "prune")

# A rebuild asked for and never performed (no scheduler ran) is forgotten after a day.
REQUEST_TTL = 86_400


class ControlPlane(LazyClient):
    """The control keys of the due index of ``prefix``."""

    def __init__(self, client: Any | None, prefix: str) -> None:
        super().__init__(client)
        tag = shard_tag(prefix, 0)
        self.lock_key = f"{tag}:rebuild-lock"
        self.rebuild_request_key = f"{tag}:rebuild-request"
        self.reconcile_key = f"{tag}:reconcile"
        # When an outage with no scheduler alive was first noticed (alerts.py).
        self.outage_key = f"{tag}:no-scheduler"
        self.drift_key = f"{tag}:drift"
        self._turn_prefix = f"{tag}:turn:"

    @property
    def keys(self) -> tuple[str, ...]:
        return (
            self.lock_key,
            self.rebuild_request_key,
            self.reconcile_key,
            self.outage_key,
            self.drift_key,
            *(f"{self._turn_prefix}{name}" for name in TURNS),
        )

    # -- the rebuild ----------------------------------------------------------------------

    def rebuild_lock(self, timeout: float) -> Any:
        """The Redis lock (redis-py's, token-checked) that keeps two rebuilds apart.

        Its token is kept on the instance, not per thread: the admin takes the lock in the
        request and hands it to the thread that rebuilds. Each rebuild has its own instance."""
        return self.client.lock(self.lock_key, timeout=timeout, blocking=False, thread_local=False)

    def rebuild_running(self) -> bool:
        return bool(self.client.exists(self.lock_key))

    def request_rebuild(self, info: dict[str, Any]) -> bool:
        """Ask the schedulers for a rebuild (the admin's button): the first to look performs
        it. False if one is asked for already (two clicks make one request)."""
        raw = json.dumps(info, sort_keys=True)
        return bool(self.client.set(self.rebuild_request_key, raw, nx=True, ex=REQUEST_TTL))

    def rebuild_request(self) -> dict[str, Any] | None:
        """The rebuild asked for and not yet performed (who asked, when), or None."""
        return json_record(self.client.get(self.rebuild_request_key))

    def take_rebuild_request(self) -> dict[str, Any] | None:
        """The rebuild asked for, removed in the same step (GET and DEL in one MULTI): of
        several schedulers that look at once, one gets it."""
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self.rebuild_request_key)
        pipe.delete(self.rebuild_request_key)
        raw, _deleted = pipe.execute()
        return json_record(raw)

    def give_back_rebuild_request(self, info: dict[str, Any]) -> None:
        """Put a request taken with ``take_rebuild_request`` back (its rebuild could not run
        now), unless a newer one was made meanwhile."""
        self.request_rebuild(info)

    # -- periodic chores ------------------------------------------------------------------

    def take_turn(self, chore: str, seconds: float, owner: str) -> bool:
        """True for the one process that claims ``chore`` for the next ``seconds``."""
        assert chore in TURNS, chore
        key = f"{self._turn_prefix}{chore}"
        return bool(self.client.set(key, owner, nx=True, px=max(1, int(seconds * 1000))))

    def reconcile_cursor(self) -> dict[str, Any] | None:
        raw = self.client.get(self.reconcile_key)
        return json.loads(raw) if raw else None

    def set_reconcile_cursor(self, cursor: dict[str, Any]) -> None:
        self.client.set(self.reconcile_key, json.dumps(cursor, sort_keys=True))

    def drift_record(self) -> dict[str, Any] | None:
        """What the last drift check found (``index_health.record_drift``), or None."""
        return json_record(self.client.get(self.drift_key))

    def set_drift_record(self, record: dict[str, Any]) -> None:
        self.client.set(self.drift_key, json.dumps(record, sort_keys=True))

    # -- schedulers down ------------------------------------------------------------------

    def begin_outage(self, since: str) -> bool:
        """Record that no scheduler is alive, noticed at ``since`` (ISO 8601): True for the
        one caller that records it first (SET NX), until ``end_outage``."""
        return bool(self.client.set(self.outage_key, since, nx=True))

    def end_outage(self) -> str | None:
        """A scheduler is alive: forget the outage; when it was noticed, if there was one
        (GETDEL: of several callers, one learns it)."""
        raw = self.client.getdel(self.outage_key)
        return raw.decode() if isinstance(raw, bytes) else raw
