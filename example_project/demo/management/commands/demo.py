"""``manage.py demo``: migrate, seed the sample schedules and run a scheduler, in one command."""

from __future__ import annotations

import argparse
import contextlib
import logging
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from django_schedulinator.dispatch import dispatchers
from django_schedulinator.dispatch.tasks import TasksDispatcher
from django_schedulinator.index.due import get_index
from django_schedulinator.index.rebuild import RebuildInProgress, rebuild_index
from example_project import embedded_redis
from example_project.commands import manage_py

logger = logging.getLogger("demo")
# The admin login the banner offers: a demo's, on 127.0.0.1 only, so a known password.
ADMIN_PASSWORD = "demo"
CREATE_ADMIN = (
    "createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.com",
)  # fmt: skip


def positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value}")
    return seconds


class Command(BaseCommand):
    help = "Set up the demo database and schedules, then run a scheduler until Ctrl-C."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--seconds",
            type=positive_seconds,
            default=None,
            help="Stop the scheduler after this many seconds (default: run until Ctrl-C).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        embedded = embedded_redis.configured_url() is None
        if embedded:
            # manage.py has started it already; this covers `django-admin demo` and
            # call_command("demo"), which bypass manage.py.
            try:
                embedded_redis.ensure_running()
            except embedded_redis.EmbeddedRedisError as exc:
                raise CommandError(str(exc)) from exc
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo")
        if embedded:
            rebuild_if_empty()
        self.stdout.write(self._banner(embedded, options["seconds"]))
        scheduler_options: dict[str, Any] = {}
        if options["seconds"] is not None:
            scheduler_options["max_seconds"] = options["seconds"]
        call_command("run_scheduler", verbosity=1, **scheduler_options)
        if embedded:
            self.stdout.write(
                "The embedded Valkey server keeps running for the next command; stop it with "
                f"`{manage_py('embedded_redis', 'stop')}`."
            )

    def _banner(self, embedded: bool, seconds: float | None) -> str:
        db = settings.DATABASES["default"]
        redis = (
            f"embedded Valkey on {embedded_redis.socket_path()}"
            if embedded
            else f"REDIS_URL={settings.REDIS_URL}"
        )
        stop = f"Stops by itself after {seconds:g} s, or press" if seconds else "Press"
        lines = [
            "",
            self.style.SUCCESS("django-schedulinator demo"),
            f"  database:   {connection.vendor} {db['NAME']}",
            f"  redis:      {redis}",
            *dispatcher_lines(),
            "",
            'Each time a schedule fires you will see a "[demo] ... fired" line:',
            "  - a heartbeat every 5 seconds (interval)",
            '  - a heartbeat every 10 seconds (cron "*/10 * * * * *", seconds field first)',
            '  - a report at the start of every minute (cron "* * * * *" in Europe/Berlin)',
            "  - a one-off, 15 seconds after seeding: it fires once, then never again",
            "nominal= is the occurrence's scheduled time, now= when it ran; key= is its",
            "idempotency key, the same on every re-dispatch.",
            "",
            "Try in a second terminal, from this directory (each occurrence still fires",
            "exactly once):",
            f"  {manage_py('run_scheduler')}",
            "Admin: create its login once (user admin, password demo), run the web server,",
            "then open http://127.0.0.1:8000/admin/ (the runs, the change log, the operations",
            "page; the REST API's schema: http://127.0.0.1:8000/api/schedulinator/schema/):",
            f"  {manage_py(*CREATE_ADMIN, env={'DJANGO_SUPERUSER_PASSWORD': ADMIN_PASSWORD})}",
            f"  {manage_py('runserver')}",
            "",
            f"{stop} Ctrl-C to stop (the current batch finishes first).",
            "",
        ]
        return "\n".join(lines)


def rebuild_if_empty() -> None:
    """The embedded Valkey keeps nothing on disk: once stopped, it starts empty. Rebuild the
    due index from the rows before the scheduler starts, and say why, at INFO: that is how
    the demo works, not Redis losing data (which the scheduler would warn about)."""
    index = get_index()
    if index.is_built():
        return
    logger.info(
        "The embedded Valkey server started empty (it keeps nothing on disk): rebuilding the "
        "due index from the schedules in the database, which are the truth."
    )
    with contextlib.suppress(RebuildInProgress):  # another process is at it: the scheduler waits
        rebuild_index(index, built_by="demo")


def dispatcher_lines() -> list[str]:
    """Where the demo's runs go, as the banner says it."""
    dispatcher = dispatchers["default"]
    if not isinstance(dispatcher, TasksDispatcher):
        return ["  dispatcher: inline: each task runs in this scheduler process, in a thread pool"]
    alias = dispatcher.settings["BACKEND_ALIAS"]
    backend = settings.TASKS[alias]["BACKEND"].rpartition(".")[2]
    return [
        "  dispatcher: Django tasks (DEMO_DISPATCHER=tasks): each occurrence is enqueued on",
        f"              TASKS[{alias!r}], the {backend}, which runs the task at once, inside",
        "              this scheduler process (no worker). Its outcome is the run's status in",
        "              the admin's runs and the API (/api/schedulinator/runs/). A project",
        "              hands its tasks to workers instead: docs/dispatch.md#django-tasks.",
    ]
