"""This app's driver in the benchmark suite (the same commands as the peers'; see common.py),
plus the measures only this app has: the bare ceilings, the sync overhead, and the steady
lateness of benchmarks/steady.py when that module is there.

    python -m benchmarks.peers.schedulinator setup --size 100000
    python -m benchmarks.peers.schedulinator ceilings --due 10000
    python -m benchmarks.peers.schedulinator sync
    python -m benchmarks.peers.schedulinator steady --rate 5000 --processes 2

Runs with this app's venv (.venv), on benchmarks/settings.py: its own PostgreSQL database
(``--database``) and Redis key prefix (``--prefix``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from typing import Any

from benchmarks.peers.common import (
    DUE_AGO,
    INTERVAL_SECONDS,
    NOT_DUE_FROM,
    NOT_DUE_SPREAD,
    HandOffs,
    emit,
    main,
)

BATCH = 500
INLINE_THREADS = 8


class Schedulinator:
    def __init__(self, options: argparse.Namespace) -> None:
        os.environ["BENCH_PG_NAME"] = options.database
        os.environ["BENCH_KEY_PREFIX"] = options.prefix
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
        from benchmarks.run import ensure_database

        ensure_database()
        import django

        django.setup()

    def _index(self) -> Any:
        from django_schedulinator.index.due import DueIndex

        return DueIndex()

    def setup(self, size: int) -> dict[str, Any]:
        """``size`` hourly schedules: one created through the services, the rest cloned from
        it in one INSERT (a bulk path, as a data migration would write them), then the index
        rebuilt as ``rebuild_due_index`` does."""
        from django.core.management import call_command
        from django.db import connection

        from django_schedulinator import services
        from django_schedulinator.index.rebuild import rebuild_index
        from django_schedulinator.index.reconcile import reconcile
        from django_schedulinator.models import Run, Schedule

        call_command("migrate", verbosity=0)
        self.clean()
        template = services.create(
            {
                "name": "bench-template",
                "task": "bench.noop",
                "kind": "interval",
                "interval": timedelta(seconds=INTERVAL_SECONDS),
                "timezone": "UTC",
            }
        )
        columns = [
            f.column for f in Schedule._meta.concrete_fields if not f.primary_key
        ]  # fmt: skip
        varying = {
            "name": "'bench-' || g",
            "next_run_at": "now() + make_interval(secs => %s + g %% %s)",
            "due_at": "now() + make_interval(secs => %s + g %% %s)",
        }
        select = [varying.get(c, c) for c in columns]
        table = Schedule._meta.db_table
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) "
                f"SELECT {', '.join(select)} FROM {table}, generate_series(1, %s) AS g "
                f"WHERE {table}.id = %s",
                [NOT_DUE_FROM, NOT_DUE_SPREAD, NOT_DUE_FROM, NOT_DUE_SPREAD, size, template.pk],
            )
        services.delete(template)
        with connection.cursor() as cursor:  # statistics, as autovacuum gathers them soon
            cursor.execute(f"ANALYZE {table}")
        created = time.perf_counter() - started
        started = time.perf_counter()
        rebuild_index(self._index())
        rebuilt = time.perf_counter() - started
        # The steady state: reconcile has read the rows just written (as within seconds of
        # their creation), as in benchmarks/run.py.
        while not reconcile(self._index(), settle=timedelta(0)).caught_up:
            pass
        assert Run.objects.count() == 0
        return {"size": Schedule.objects.count(), "created_s": created, "rebuild_s": rebuilt}

    def arm(self, due: int) -> dict[str, Any]:
        from django.db.models import F
        from django.db.models.functions import Now

        from django_schedulinator.index.sync import resync_schedules
        from django_schedulinator.models import Schedule

        ids = list(Schedule.objects.order_by("pk").values_list("pk", flat=True)[:due])
        at = Now() - timedelta(seconds=DUE_AGO)
        # A bulk path (signals skip it): the public resync brings the index in line. The
        # schedules start over (nothing fired through yet), or the table's constraint would
        # refuse a next run at or before what they fired in the last burst.
        Schedule.objects.filter(pk__in=ids).update(
            next_run_at=at, due_at=at, fired_through=None, revision=F("revision") + 1
        )
        resync_schedules(Schedule.objects.filter(pk__in=ids))
        return {"armed": len(ids)}

    def idle(self, passes: int, max_seconds: float) -> list[float]:
        from benchmarks.run import idle_passes

        idle_passes(batch_size=BATCH, ticks=1)  # warm: connections, scripts loaded
        return idle_passes(batch_size=BATCH, ticks=passes)

    def burst(self, due: int, cap_seconds: float) -> dict[str, Any]:
        from benchmarks.run import fire

        # ``fire`` times Worker.run() from the start of its first pass to the end of its
        # last (the last hand-off and its outcome recorded): a little more than the peers'.
        result = fire(batch_size=BATCH, workers=INLINE_THREADS)
        handoffs = HandOffs()
        handoffs.count = result["fired"]
        handoffs.last = result["seconds"]
        return {**handoffs.result(0.0, due), "counters": result["counters"]}

    def clean(self) -> dict[str, Any]:
        from django.db import connection

        from django_schedulinator.models import Run, Schedule, ScheduleChange

        with connection.cursor() as cursor:
            cursor.execute(
                f"TRUNCATE {Run._meta.db_table}, {Schedule._meta.db_table}, "
                f"{ScheduleChange._meta.db_table} RESTART IDENTITY CASCADE"
            )
        self._index().drop()
        return {}

    # -- this app only ---------------------------------------------------------------------

    def ceilings(self, due: int) -> dict[str, Any]:
        """Each step of the claim path alone, in batches of BATCH over ``due`` schedules: the
        claim script (Redis), the conditional advance (one UPDATE per batch) and the ledger's
        INSERT. Per second, each the best the whole path could do if the others were free."""
        from django.db import transaction
        from django.utils import timezone

        from django_schedulinator import services
        from django_schedulinator.index.sync import resync_schedules
        from django_schedulinator.models import Run, Schedule
        from django_schedulinator.models.batches import Advance, NewRun

        self.arm(due)
        index = self._index()
        claimed = 0
        started = time.perf_counter()
        while batch := index.claim(BATCH, 60_000, "ceiling").entries:
            claimed += len(batch)
        claim_s = time.perf_counter() - started
        rows = list(
            Schedule.objects.filter(next_run_at__lte=timezone.now()).values_list(
                "pk", "revision", "next_run_at", "task", "args", "kwargs", "dispatcher",
                "dispatch_options",
            )
        )  # fmt: skip
        now = timezone.now()
        nxt = now + timedelta(seconds=INTERVAL_SECONDS)
        advanced = 0
        started = time.perf_counter()
        for i in range(0, len(rows), BATCH):
            chunk = rows[i : i + BATCH]
            with transaction.atomic():
                moved = services.advance(
                    [Advance(pk, rev, nxt, nxt, 1) for pk, rev, *_ in chunk], now, using="default"
                ).moved
            advanced += len(moved)
        advance_s = time.perf_counter() - started
        inserted = 0
        started = time.perf_counter()
        for i in range(0, len(rows), BATCH):
            runs = [
                NewRun(pk, at, task, args, kwargs, dispatcher, options)
                for pk, _, at, task, args, kwargs, dispatcher, options in rows[i : i + BATCH]
            ]
            with transaction.atomic():
                inserted += len(
                    Run.objects.insert_runs(
                        runs,
                        claimed_at=now,
                        worker_id="ceiling",
                        claim_token="ceiling",
                        lease_expires_at=now + timedelta(minutes=5),
                    )
                )
        insert_s = time.perf_counter() - started
        # The claims' in-flight entries released, and the rows' entries written again.
        index.apply([], release_token="ceiling")
        resync_schedules(Schedule.objects.filter(pk__in=[row[0] for row in rows]))
        return {
            "claim_per_s": claimed / claim_s,
            "advance_per_s": advanced / advance_s,
            "insert_per_s": inserted / insert_s,
            "claimed": claimed,
            "advanced": advanced,
            "inserted": inserted,
        }

    def sync(self, rows: int) -> dict[str, Any]:
        """What the app adds to a user's writes: a save of one schedule and a transaction
        of ``rows`` saves, with the app's receivers (the index written after the commit)
        and without them (the same row writes, no Redis)."""
        from django.db import transaction
        from django.db.models.signals import post_save

        from django_schedulinator.index.receivers import schedule_changed
        from django_schedulinator.models import Schedule

        schedules = list(Schedule.objects.order_by("pk")[:rows])
        assert len(schedules) == rows, "setup first"

        def one_save() -> float:
            s = schedules[0]
            s.kwargs = {"n": time.perf_counter_ns()}
            started = time.perf_counter()
            s.save(update_fields=["kwargs"])
            return (time.perf_counter() - started) * 1000

        def transaction_of_saves() -> float:
            started = time.perf_counter()
            with transaction.atomic():
                for s in schedules:
                    s.kwargs = {"n": time.perf_counter_ns()}
                    s.save(update_fields=["kwargs"])
            return (time.perf_counter() - started) * 1000

        def measure() -> dict[str, float]:
            one_save()  # warm
            saves = sorted(one_save() for _ in range(50))
            return {"save_ms": saves[len(saves) // 2], "transaction_ms": transaction_of_saves()}

        with_app = measure()
        post_save.disconnect(schedule_changed, sender=Schedule, dispatch_uid="schedulinator_save")
        try:
            without = measure()
        finally:
            post_save.connect(schedule_changed, sender=Schedule, dispatch_uid="schedulinator_save")
        return {
            "rows": rows,
            "save_ms_with": with_app["save_ms"],
            "save_ms_without": without["save_ms"],
            "transaction_ms_with": with_app["transaction_ms"],
            "transaction_ms_without": without["transaction_ms"],
        }


def steady(options: argparse.Namespace) -> dict[str, Any]:
    """benchmarks/steady.py's figures (another module; its measure() sets up its own
    schedules), in this process, on this run's database and key prefix."""
    from benchmarks.steady import measure  # type: ignore[import-not-found, unused-ignore]

    result: dict[str, Any] = measure(
        options.rate, options.total, options.seconds, processes=options.processes
    )
    return result


def run() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "steady":
        sys.argv.pop(1)
        parser = argparse.ArgumentParser()
        parser.add_argument("--rate", type=int, default=1000)
        parser.add_argument("--total", type=int, default=100_000)
        parser.add_argument("--seconds", type=float, default=30.0)
        parser.add_argument("--processes", type=int, default=1)
        options = parser.parse_args()
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
        emit(steady(options))
        return
    if len(sys.argv) > 1 and sys.argv[1] in ("ceilings", "sync"):
        command = sys.argv.pop(1)
        parser = argparse.ArgumentParser()
        parser.add_argument("--due", type=int, default=10_000)
        parser.add_argument("--rows", type=int, default=1000)
        parser.add_argument("--prefix", default=os.environ.get("BENCH_KEY_PREFIX", "bench-suite"))
        parser.add_argument("--database", default=os.environ.get("BENCH_PG_NAME", "bench_suite"))
        options = parser.parse_args()
        driver = Schedulinator(options)
        emit(driver.ceilings(options.due) if command == "ceilings" else driver.sync(options.rows))
        return
    main(Schedulinator)


if __name__ == "__main__":
    run()
