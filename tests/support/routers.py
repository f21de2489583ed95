"""A read-replica router, as projects with a replica configure one: reads go to "replica"
(a second connection, see settings.py), writes to "default"."""

from __future__ import annotations

from typing import Any


class ReadReplicaRouter:
    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == "default"
