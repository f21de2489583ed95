"""The burst through each real dispatcher, beside that system's bare enqueue ceiling.

    python -m benchmarks.dispatchers --total 100000 --due 10000 --repeat 3
    python -m benchmarks.dispatchers --only rq,webhook --json dispatchers.json
    python -m benchmarks.dispatchers --smoke   # a few seconds on tiny sizes (CI)

``--total`` schedules, ``--due`` of them due at once (``benchmarks.run``'s burst). For each
dispatcher in turn the due rows are armed for it (its alias, its task, its options) and one
in-process ``Worker`` (``once``: until nothing is due, its lanes drained and every outcome
recorded) fires them all through it: hand-offs per second, from its first pass to the last
recorded hand-off. Beside it, in the same repeat, that system's bare ceiling: the same
``--due`` messages enqueued by its own client with no scheduler at all, the cheapest way its
API offers (the way is named in the table). The ratio is the two of the same repeat.

- inline: the inline dispatcher (8 threads) runs ``bench.noop``; ceiling: calling it;
- celery-redis, celery-amqp: ``CeleryDispatcher`` (``send_task``, one producer a batch) to
  the Redis broker and to RabbitMQ; ceiling: ``send_task`` in a loop on one producer;
- rq: ``RQDispatcher`` through django-rq; ceiling: ``Queue.enqueue`` in a loop on one
  queue, and ``Queue.enqueue_many`` (one pipeline a batch), the cheaper of the two;
- tasks: ``TasksDispatcher`` on django-tasks-db's ``DatabaseBackend`` (docs/dispatch.md);
  ceiling: ``task.enqueue()`` in a loop;
- webhook: ``WebhookDispatcher`` to a receiver in a subprocess that answers 200 at once
  (``benchmarks/dispatch_targets.py``); ceiling: the same POSTs from one keep-alive httpx
  client, one at a time and 8 at once (the dispatcher's ``MAX_CONCURRENCY``), the cheaper.

No worker runs the tasks: the hand-off is what is measured. After each measure the benchmark
counts what arrived (queue lengths, rows, the receiver's count) against what was sent, then
deletes it; the queues are deleted at the end. Its database is ``bench_dispatch``
(``BENCH_PG_NAME``), its Redis keys and queues carry ``bench-dispatch-<pid>``; RabbitMQ is
``BENCH_AMQP_URL`` (skipped, saying so, when it cannot be reached). Each figure is the median
of ``--repeat`` with min and max; the systems take turns within each repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.run import add_smoke_option, bench_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

SYSTEMS = ("inline", "celery-redis", "celery-amqp", "rq", "tasks", "webhook")
# The task each dispatcher sends, and a schedule's options for it.
TASK = {"tasks": "bench.django_noop"}
OPTIONS = {"webhook": {"target": "bench"}}
# What the rows of a dispatcher's runs end as: handed off, or run (inline, a 200 answer).
ENDS_AS = {"inline": "succeeded", "webhook": "succeeded"}
WEBHOOK_CONCURRENCY = 8  # the dispatcher's MAX_CONCURRENCY default
PACKAGES = (
    "Django", "celery", "kombu", "rq", "django-rq", "redis", "django-tasks", "django-tasks-db",
    "httpx", "psycopg",
)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total", type=int, default=100_000, help="schedules")
    parser.add_argument("--due", type=int, default=10_000, help="of them due at once")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (at least 3)")
    parser.add_argument(
        "--only", default=",".join(SYSTEMS), help=f"some of {', '.join(SYSTEMS)} (comma-separated)"
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="write the figures here")
    add_smoke_option(parser)
    options = parser.parse_args()
    systems = [s.strip() for s in options.only.split(",") if s.strip()]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown dispatcher(s): {', '.join(sorted(unknown))}")
    if options.smoke:
        options.total, options.due, options.batch_size, options.repeat = 2000, 300, 100, 1
    elif options.repeat < 3:
        parser.error("--repeat must be at least 3 (a median with its min and max)")
    if not 0 < options.due <= options.total:
        parser.error("need 0 < --due <= --total")
    results = measure(
        systems,
        total=options.total,
        due=options.due,
        batch_size=options.batch_size,
        repeat=options.repeat,
        smoke=options.smoke,
    )
    print(render_markdown(results), end="")
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=2) + "\n")


def measure(
    systems: list[str], *, total: int, due: int, batch_size: int, repeat: int, smoke: bool
) -> dict[str, Any]:
    """Every repeat: each system in turn, its dispatcher then its ceiling (see the module's
    docstring). Returns every sample and their summaries."""
    prefix = f"bench-dispatch-{'smoke-' if smoke else ''}{os.getpid()}"
    os.environ["BENCH_KEY_PREFIX"] = prefix
    os.environ["BENCH_DISPATCH"] = prefix
    os.environ.setdefault("BENCH_PG_NAME", "bench_dispatch_smoke" if smoke else "bench_dispatch")
    notes: list[str] = []
    if "celery-amqp" in systems and not reachable(
        os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
    ):
        systems = [s for s in systems if s != "celery-amqp"]
        notes.append("celery-amqp: left out, RabbitMQ could not be reached.")
    with webhook_receiver() as receiver_url:
        os.environ["BENCH_WEBHOOK_URL"] = f"{receiver_url}/hook"
        from benchmarks.run import start

        index = start(smoke=smoke)  # after the variables above: the settings read them
        samples: dict[str, dict[str, list[float]]] = {s: {} for s in systems}
        loads: list[float] = [os.getloadavg()[0]]
        targets = {s: Target.of(s, receiver_url, batch_size) for s in systems}
        try:
            started = time.perf_counter()
            create_schedules(total)
            print(f"setup: {total:,} schedules in {time.perf_counter() - started:.1f}s", flush=True)
            for target in targets.values():
                target.warm_up()
            # One unmeasured batch through the whole path first: the first Worker of a
            # process paid for its cold start (2,600/s against 6,500 after, inline).
            first = systems[0]
            fire_through(
                first, due=min(due, batch_size), batch_size=batch_size, target=targets[first]
            )
            for _ in range(repeat):
                for system in systems:
                    target = targets[system]
                    rate = fire_through(system, due=due, batch_size=batch_size, target=target)
                    samples[system].setdefault("dispatcher", []).append(rate)
                    bare = target.ceilings(due)
                    for way, ceiling in bare.items():
                        samples[system].setdefault(way, []).append(ceiling)
                    print(
                        f"{system}: {rate:,.0f}/s through the scheduler; bare: "
                        + ", ".join(f"{way} {r:,.0f}/s" for way, r in bare.items()),
                        flush=True,
                    )
                    loads.append(os.getloadavg()[0])
        finally:
            for target in targets.values():
                target.delete()
            index.drop()
            clear_ledger()
    return summarize_all(samples, targets, notes, loads, total=total, due=due, repeat=repeat)


def reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "", parts.port or 5672), timeout=2).close()
    except OSError:
        return False
    return True


@contextmanager
def webhook_receiver() -> Iterator[str]:
    """The receiver in a subprocess of its own (its CPU is not this process's), stopped at
    the end; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.dispatch_targets", "--receive"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- the schedules -------------------------------------------------------------------------


def create_schedules(total: int) -> None:
    """``total`` schedules (cron and interval, as benchmarks.run's), none due yet: each
    measure arms the first ``due`` of them."""
    from django.utils import timezone

    from django_schedulinator.index.rebuild import rebuild_index
    from django_schedulinator.models import Schedule

    now = timezone.now().replace(microsecond=0)
    chunk = 20_000
    for offset in range(0, total, chunk):
        Schedule.objects.bulk_create(
            [
                bench_schedule(i, now + timedelta(seconds=3600 + i % 200_000))
                for i in range(offset, min(offset + chunk, total))
            ],
            batch_size=5000,
        )
    from django_schedulinator.index.due import get_index

    rebuild_index(get_index())


def arm(due: int, system: str) -> None:
    """The first ``due`` schedules due a few seconds ago, sent through ``system``'s alias
    (its task, its options), at a newer revision; their index entries written; the ledger
    emptied, and with it what they had fired through (a round before may have fired an
    occurrence after "a few seconds ago": a cron one at a five-minute boundary)."""
    from django.db import connection
    from django.utils import timezone

    from django_schedulinator.index.sync import resync_schedules
    from django_schedulinator.models import Schedule

    clear_ledger()
    qn = connection.ops.quote_name
    table = qn(Schedule._meta.db_table)
    col = {f.name: qn(f.column) for f in Schedule._meta.concrete_fields}
    at = timezone.now() - timedelta(seconds=5)
    ids = list(Schedule.objects.order_by("pk").values_list("pk", flat=True)[:due])
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {col['next_run_at']} = %s, {col['anchor_at']} = %s, "
            f"{col['due_at']} = %s, {col['task']} = %s, {col['dispatcher']} = %s, "
            f"{col['dispatch_options']} = %s::jsonb, {col['fired_through']} = NULL, "
            f"{col['revision']} = {col['revision']} + 1 "
            f"WHERE {col['id']} <= %s",
            [at, at, at, TASK.get(system, "bench.noop"), system,
             json.dumps(OPTIONS.get(system, {})), ids[-1]],
        )  # fmt: skip
    resync_schedules(ids)


def clear_ledger() -> None:
    from django.db import connection

    from django_schedulinator.models import Run

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Run._meta.db_table} CASCADE")


def fire_through(system: str, *, due: int, batch_size: int, target: Target) -> float:
    """Arm ``due`` schedules for ``system`` and fire them with one in-process Worker through
    its dispatcher, built from settings as run_scheduler builds it: hand-offs per second.
    Checks that each was handed off once and arrived, then deletes what arrived."""
    from django.db.models import Count

    from django_schedulinator.dispatch import dispatchers
    from django_schedulinator.models import Run
    from django_schedulinator.scheduler.worker import Worker

    arm(due, system)
    worker = Worker(
        batch_size=batch_size,
        once=True,
        worker_id=f"bench-dispatch-{system}",
        dispatcher=dispatchers.create_connection(system),
    )
    started = time.perf_counter()
    worker.run()
    elapsed = time.perf_counter() - started
    fired = worker.counters.fired
    ended = dict(Run.objects.values_list("status").annotate(n=Count("pk")).order_by())
    # A cron schedule's occurrence missed while the burst crossed its minute (``*/5``) is
    # skipped, as its catch-up policy says: in the ledger, never handed off.
    ended.pop("skipped", None)
    expected = ENDS_AS.get(system, "dispatched")
    if fired != due or ended != {expected: due}:
        raise RuntimeError(f"{system}: fired {fired} of {due}, runs {ended}")
    arrived = target.take(due)
    if arrived is not None and arrived != due:
        raise RuntimeError(f"{system}: {due} handed off, {arrived} arrived")
    return due / elapsed


# -- each system's own side: what arrived, and its bare ceiling ------------------------------


class Target:
    """One system as its dispatcher reaches it: ``take`` counts what arrived since the last
    take and deletes it (None: the ledger is the check), ``ways`` the bare enqueues of n
    messages with the system's own client, ``delete`` removes its queue at the end."""

    ways: dict[str, str] = {}  # a way's key: what it does, for the table

    @staticmethod
    def of(system: str, receiver_url: str, batch_size: int) -> Target:
        if system == "inline":
            return Inline()
        if system.startswith("celery"):
            return CeleryTarget(system)
        if system == "rq":
            return RQTarget(batch_size)
        if system == "tasks":
            return TasksTarget()
        return WebhookTarget(receiver_url)

    def take(self, expected: int) -> int | None:
        return None

    def enqueue(self, way: str, n: int) -> None:
        raise NotImplementedError

    def ceilings(self, n: int) -> dict[str, float]:
        """Each way's enqueues per second of ``n`` messages, each checked to have arrived."""
        rates = {}
        for way in self.ways:
            started = time.perf_counter()
            self.enqueue(way, n)
            elapsed = time.perf_counter() - started
            arrived = self.take(n)
            if arrived is not None and arrived != n:
                raise RuntimeError(f"{type(self).__name__} {way}: {n} enqueued, {arrived} arrived")
            rates[way] = n / elapsed
        return rates

    def warm_up(self) -> None:
        """Connections opened and code imported before anything is measured."""
        self.ceilings(20)

    def delete(self) -> None:
        pass


class Inline(Target):
    ways = {"call": "calling the no-op"}

    def enqueue(self, way: str, n: int) -> None:
        from django_schedulinator.registry import registry

        noop = registry.get("bench.noop").func
        for _ in range(n):
            noop()


class CeleryTarget(Target):
    ways = {"send_task": "`send_task` in a loop, one producer"}

    def __init__(self, system: str) -> None:
        from django.conf import settings
        from django.utils.module_loading import import_string

        path = settings.SCHEDULINATOR["DISPATCHERS"][system]["OPTIONS"]["APP"]
        self.app = import_string(path)
        self.queue = self.app.conf.task_default_queue
        self.amqp = system.endswith("amqp")

    def enqueue(self, way: str, n: int) -> None:
        with self.app.producer_or_acquire() as producer:
            for _ in range(n):
                self.app.send_task("bench.noop", args=[], kwargs={}, producer=producer, retry=False)

    def take(self, expected: int) -> int:
        # RabbitMQ takes what was published on another connection a moment later.
        arrived, deadline = 0, time.monotonic() + 10
        with self.app.connection_for_write() as connection:
            channel = connection.default_channel
            while True:
                arrived += channel.queue_purge(self.queue) or 0
                if arrived >= expected or not self.amqp or time.monotonic() > deadline:
                    return arrived
                time.sleep(0.05)

    def delete(self) -> None:
        with self.app.connection_for_write() as connection:
            connection.default_channel.queue_delete(self.queue)
        if not self.amqp:
            # kombu's bindings of the queue's exchange: under the run's prefix too.
            import redis
            from django.conf import settings

            client = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
            for key in client.scan_iter(match=f"{self.queue}:*"):
                client.delete(key)


def _rq_payload(i: int) -> dict[str, Any]:
    """What the RQ dispatcher's job carries (``rq._payload``), for the bare enqueues."""
    return {
        "key": f"{i}:1780000000000",
        "run_id": i,
        "schedule_id": i,
        "schedule_name": f"bench-{i}",
        "task": "bench.noop",
        "scheduled_for": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "attempt": 1,
        "args": [],
        "kwargs": {},
    }


class RQTarget(Target):
    ways = {
        "enqueue": "`Queue.enqueue` in a loop, one queue",
        "enqueue_many": "`Queue.enqueue_many`, one pipeline a batch",
    }

    def __init__(self, batch_size: int) -> None:
        import django_rq
        from django.conf import settings

        self.queue = django_rq.get_queue(settings.BENCH_DISPATCH)
        self.batch_size = batch_size

    def enqueue(self, way: str, n: int) -> None:
        from django_schedulinator.dispatch.rq import RUNNER

        if way == "enqueue":
            for i in range(n):
                self.queue.enqueue(RUNNER, _rq_payload(i))
            return
        for first in range(0, n, self.batch_size):
            self.queue.enqueue_many(
                [
                    self.queue.prepare_data(RUNNER, args=(_rq_payload(i),))
                    for i in range(first, min(first + self.batch_size, n))
                ]
            )

    def take(self, expected: int) -> int:
        count = self.queue.count
        self.queue.empty()  # the jobs' hashes too
        return count

    def delete(self) -> None:
        self.queue.delete(delete_jobs=True)


class TasksTarget(Target):
    ways = {"enqueue": "`task.enqueue()` in a loop"}

    def enqueue(self, way: str, n: int) -> None:
        from benchmarks.scheduled_tasks import django_noop

        for _ in range(n):
            django_noop.enqueue()

    def take(self, expected: int) -> int:
        from django.db import connection
        from django_tasks_db.models import DBTaskResult

        count = DBTaskResult.objects.count()
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {DBTaskResult._meta.db_table}")
        return count

    def delete(self) -> None:
        self.take(0)


class WebhookTarget(Target):
    ways = {
        "post": "POSTs one at a time, one keep-alive httpx client",
        "post-8": f"POSTs {WEBHOOK_CONCURRENCY} at once, one keep-alive httpx client",
    }

    def __init__(self, url: str) -> None:
        from django_schedulinator.dispatch import Occurrence
        from django_schedulinator.dispatch.webhook import body_of

        self.url = url
        self.seen = 0
        # The size of the dispatcher's bodies (signing them is the dispatcher's own cost).
        self.body = body_of(
            Occurrence(
                key="1:1780000000000",
                run_id=1,
                schedule_id=1,
                schedule_name="bench-1",
                task="bench.noop",
                scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
                attempt=1,
            )
        )
        self.headers = {"content-type": "application/json"}

    def enqueue(self, way: str, n: int) -> None:
        import httpx

        if way == "post":
            with httpx.Client() as client:
                for _ in range(n):
                    client.post(f"{self.url}/hook", content=self.body, headers=self.headers)
            return
        asyncio.run(self._post_concurrently(n))

    async def _post_concurrently(self, n: int) -> None:
        import httpx

        left = n
        limits = httpx.Limits(max_connections=WEBHOOK_CONCURRENCY)
        async with httpx.AsyncClient(limits=limits) as client:

            async def sender() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    await client.post(f"{self.url}/hook", content=self.body, headers=self.headers)

            await asyncio.gather(*(sender() for _ in range(WEBHOOK_CONCURRENCY)))

    def take(self, expected: int) -> int:
        import httpx

        total = int(httpx.get(f"{self.url}/count").text)
        arrived, self.seen = total - self.seen, total
        return arrived


# -- the figures ---------------------------------------------------------------------------


def summarize_all(
    samples: dict[str, dict[str, list[float]]],
    targets: dict[str, Target],
    notes: list[str],
    loads: list[float],
    *,
    total: int,
    due: int,
    repeat: int,
) -> dict[str, Any]:
    """The figures (``figures``), with the machine, the versions and the load average."""
    from benchmarks.suite import machine

    return {
        "taken": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load_average_1min": {"min": min(loads), "max": max(loads), "samples": loads},
        "versions": versions(),
        "total": total,
        "due": due,
        "repeat": repeat,
        "systems": figures(samples, {s: t.ways for s, t in targets.items()}),
        "notes": notes,
    }


def figures(
    samples: dict[str, dict[str, list[float]]], ways: dict[str, dict[str, str]]
) -> dict[str, Any]:
    """Per system: its dispatcher's rate, each bare way's, the best of them (the ceiling)
    and the ratio dispatcher / ceiling of each repeat (both measured in it), and the ratio
    to the inline dispatcher of the same repeat; each summarized (median, min, max)."""
    from benchmarks.suite import summarize

    systems: dict[str, Any] = {}
    inline = samples.get("inline", {}).get("dispatcher")
    for system, by_way in samples.items():
        rates = by_way["dispatcher"]
        bare = {w: summarize(by_way[w]) or {} for w in ways[system]}
        best = max(bare, key=lambda w: bare[w]["median"])
        entry = {
            "dispatcher": summarize(rates),
            "ceilings": bare,
            "ways": ways[system],
            "ceiling_way": best,
            "ceiling_way_text": ways[system][best],
            "ceiling": bare[best],
            "ratio": summarize([r / c for r, c in zip(rates, by_way[best], strict=True)]),
            "samples": by_way,
        }
        if inline:
            entry["of_inline"] = summarize([r / i for r, i in zip(rates, inline, strict=True)])
        systems[system] = entry
    return systems


def versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        with suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    found["Python"] = sys.version.split()[0]
    from django.db import connection

    found["PostgreSQL"] = connection.cursor().connection.info.parameter_status("server_version")
    from django_schedulinator.index.due import get_index

    found["Redis"] = str(get_index().client.info("server")["redis_version"])
    return found


def format_ratio(figure: dict[str, float] | None) -> str:
    """A ratio to three significant digits (the inline ceiling's is tiny), min to max."""
    if figure is None:
        return "-"
    text = f"{figure['median']:.3g}x"
    if figure["n"] > 1:
        text += f" ({figure['min']:.3g} to {figure['max']:.3g})"
    return text


def render_markdown(results: dict[str, Any]) -> str:
    from benchmarks.suite import format_figure

    loads = results["load_average_1min"]
    versions_text = ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    lines = [
        f"Burst through each dispatcher: {results['due']:,} due among {results['total']:,}, "
        f"{results['repeat']} repeat(s), {results['taken']}; {results['machine']}; "
        f"load average (1 min) {loads['min']:.1f} to {loads['max']:.1f} during the run.",
        f"Versions: {versions_text}.",
        "",
        "| dispatcher | through the scheduler | bare ceiling | the ceiling's way "
        "| scheduler / ceiling | of inline |",
        "|---|---|---|---|---|---|",
    ]
    others = []
    for system, entry in results["systems"].items():
        lines.append(
            f"| {system} | {format_figure(entry['dispatcher'], '/s')} "
            f"| {format_figure(entry['ceiling'], '/s')} | {entry['ceiling_way_text']} "
            f"| {format_ratio(entry['ratio'])} | {format_ratio(entry.get('of_inline'))} |"
        )
        for way, figure in entry["ceilings"].items():
            if way != entry["ceiling_way"]:
                text = entry["ways"][way]
                others.append(f"{system}, {text}: {format_figure(figure, '/s')}")
    lines.append("")
    if others:
        lines.append("Other bare ways measured: " + "; ".join(others) + ".")
    lines += results["notes"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
