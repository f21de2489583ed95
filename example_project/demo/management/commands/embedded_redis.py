"""``manage.py embedded_redis status|start|stop``: the demo's background Valkey server."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from example_project import embedded_redis


class Command(BaseCommand):
    help = (
        "Show, start or stop the embedded Valkey server that the demo uses when REDIS_URL "
        "is not set."
    )
    # It only talks to its own socket; the checks would need the server it may be stopping.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "action", choices=["status", "start", "stop"], nargs="?", default="status"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, f"_{options['action']}")()
        except embedded_redis.EmbeddedRedisError as exc:
            raise CommandError(str(exc)) from exc

    def _status(self) -> None:
        current = embedded_redis.status()
        if current.running:
            self.stdout.write(
                f"running: Valkey {current.version}, pid {current.pid}, socket "
                f"{current.socket}, {current.keys} keys, {current.used_memory} used"
            )
        else:
            self.stdout.write(f"not running (socket {current.socket})")

    def _start(self) -> None:
        url = embedded_redis.ensure_running()
        self.stdout.write(f"running at {url}")
        self._status()

    def _stop(self) -> None:
        if embedded_redis.stop():
            self.stdout.write(self.style.SUCCESS("stopped the embedded Valkey server"))
        else:
            self.stdout.write("the embedded Valkey server was not running")
