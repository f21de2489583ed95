"""django-celery-beat's driver in the benchmark suite (see common.py): its
``DatabaseScheduler`` on the local PostgreSQL (PeriodicTask rows, one interval of an hour),
dispatching with Celery's ``apply_async`` to a Redis broker with no worker.

A pass is ``Scheduler.tick()``, what ``celery beat`` calls in its loop: the database
scheduler asks whether any periodic task changed (a query), Celery's scheduler compares the
whole schedule it holds with the last one (every entry) and looks at the head of its heap;
a due entry is sent and its next run pushed back: one hand-off per tick, and ``beat`` calls
``tick()`` again at once when the last one sent something. Last run times are written back
every ``beat_sync_every`` tasks or every 3 minutes (its default). Run with the peers' venv.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import django
from django.conf import settings

from benchmarks.peers.celery_common import make_app
from benchmarks.peers.common import (
    DUE_AGO,
    INTERVAL_SECONDS,
    HandOffs,
    delete_keys,
    main,
    not_due_offset,
    timed_passes,
)

CHUNK = 5000


class CeleryBeat:
    def __init__(self, options: argparse.Namespace) -> None:
        self.prefix = options.prefix
        self._ensure_database(options.database)
        settings.configure(
            INSTALLED_APPS=["django.contrib.contenttypes", "django_celery_beat"],
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": options.database,
                    "USER": "postgres",
                    "HOST": "127.0.0.1",
                }
            },
            USE_TZ=True,
            TIME_ZONE="UTC",
            DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        )
        django.setup()
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "")
        self.app = make_app(self.prefix)

    @staticmethod
    def _ensure_database(name: str) -> None:
        import psycopg

        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
            if not c.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                c.execute(f'CREATE DATABASE "{name}"')

    def _scheduler(self, handoffs: HandOffs | None = None) -> Any:
        from django_celery_beat.schedulers import DatabaseScheduler

        counter = handoffs or HandOffs()

        class Counting(DatabaseScheduler):
            def apply_async(
                self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any
            ) -> Any:
                result = super().apply_async(entry, producer, advance, **kwargs)
                counter()
                return result

        scheduler = Counting(app=self.app)
        scheduler.schedule  # noqa: B018  the initial read of every entry, as beat's start-up
        return scheduler

    def setup(self, size: int) -> dict[str, Any]:
        from django.core.management import call_command
        from django.db import connection
        from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

        call_command("migrate", verbosity=0)
        self.clean()
        every, _ = IntervalSchedule.objects.get_or_create(
            every=INTERVAL_SECONDS, period=IntervalSchedule.SECONDS
        )
        now = datetime.now(UTC)
        started = time.perf_counter()
        for start in range(0, size, CHUNK):
            PeriodicTask.objects.bulk_create(
                [
                    PeriodicTask(
                        name=f"bench-{i}",
                        task="bench.noop",
                        interval=every,
                        # due INTERVAL after the last run: last run placed to make it due then
                        last_run_at=now + timedelta(seconds=not_due_offset(i) - INTERVAL_SECONDS),
                    )
                    for i in range(start, min(size, start + CHUNK))
                ]
            )
        PeriodicTasks.update_changed()
        with connection.cursor() as cursor:  # statistics, as autovacuum gathers them soon
            cursor.execute("ANALYZE django_celery_beat_periodictask")
        return {"size": size, "created_s": time.perf_counter() - started}

    def arm(self, due: int) -> dict[str, Any]:
        from django_celery_beat.models import PeriodicTask, PeriodicTasks

        ids = list(
            PeriodicTask.objects.filter(name__startswith="bench-")
            .order_by("pk")
            .values_list("pk", flat=True)[:due]
        )
        at = datetime.now(UTC) - timedelta(seconds=INTERVAL_SECONDS + DUE_AGO)
        PeriodicTask.objects.filter(pk__in=ids).update(last_run_at=at)
        PeriodicTasks.update_changed()
        return {"armed": len(ids)}

    def idle(self, passes: int, max_seconds: float) -> list[float]:
        scheduler = self._scheduler()
        scheduler.tick()  # warm: the heap built
        return timed_passes(scheduler.tick, passes, max_seconds)

    def burst(self, due: int, cap_seconds: float) -> dict[str, Any]:
        handoffs = HandOffs()
        scheduler = self._scheduler(handoffs)
        started = time.perf_counter()
        # beat's loop: tick again at once while a tick sends something.
        while handoffs.count < due and time.perf_counter() - started < cap_seconds:
            scheduler.tick()
        result = handoffs.result(started, due)
        scheduler.close()
        delete_keys(self.prefix)  # the messages sent
        return result

    def clean(self) -> dict[str, Any]:
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE django_celery_beat_periodictask CASCADE")
        return {"keys_deleted": delete_keys(self.prefix)}


if __name__ == "__main__":
    main(CeleryBeat)
