"""What the REST API costs, per request, under a real multi-worker WSGI server.

    python -m benchmarks.api --schedules 10000 --runs 50000 --requests 300
    python -m benchmarks.api --smoke                  # a few seconds on tiny sizes (CI)
    python -m benchmarks.api --in-process             # Django's test client, no server
    python -m benchmarks.api --in-process --profile get   # cProfile of one endpoint

Seeds ``--schedules`` schedules (crons in several zones, intervals, one-offs) and ``--runs``
runs on PostgreSQL, builds the due index, makes a staff user with the API's model
permissions and a DRF token, then starts gunicorn (``--workers`` sync workers, the
``bench`` extra) on ``benchmarks/settings.py`` with ``BENCH_API`` and sends each endpoint
``--requests`` requests from ``--concurrency`` httpx clients, ``--rounds`` times:

- list: ``GET schedules/`` (a page of 50); get: ``GET schedules/{id}/``;
- patch: ``PATCH schedules/{id}/`` (new args, ``If-Match: *``): a real write and its change
  log entry; post: ``POST schedules/`` (a new cron schedule);
- run-now: ``POST schedules/{id}/run-now/``; runs: ``GET runs/``; status:
  ``GET status/?drift=false``.

What it reports per endpoint, each the median of the rounds with min and max: the CPU time
of the server's workers per request (their utime + stime from /proc, which other load on the
machine inflates least), the same for their PostgreSQL backends, requests per second per
core of the workers (1,000 / their CPU ms), and the wall-clock rate (noisy on a shared
machine). ``--in-process`` measures the same requests through Django's test client in this
process (CPU per request, SQL statements and Redis round trips of one request).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.run import add_smoke_option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
os.environ.setdefault("BENCH_API", "1")  # DRF, token authentication, the API's URLs

PREFIX = "/api/schedulinator"
TICKS = os.sysconf("SC_CLK_TCK")
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney"]
PERMISSIONS = ["view_schedule", "add_schedule", "change_schedule", "view_run", "view_operations"]
CRONS = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 9 * * 1-5", "15 */6 * * *"]


def __getattr__(name: str) -> Any:
    """This module is the URL configuration too (ROOT_URLCONF with BENCH_API): the API where
    the docs mount it. Built on first use, once Django is set up."""
    if name == "urlpatterns":
        from django.urls import include, path

        return [
            path("api/schedulinator/", include("django_schedulinator.api.urls")),
            path("bench/floor/", floor_view()),
        ]
    raise AttributeError(name)


def floor_view() -> Any:
    """What every request of the API pays before its own work, measured as an endpoint of
    its own: the server, Django, DRF, the token's authentication and the API's permission
    policy (a staff user's model permissions), answering ``{}``."""
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from django_schedulinator.api.permissions import ConfiguredPermissionsMixin

    class Floor(ConfiguredPermissionsMixin, APIView):
        required_perms = {"GET": ["django_schedulinator.view_schedule"]}

        def get(self, request: Request) -> Response:
            return Response({})

    return Floor.as_view()


@dataclass
class Endpoint:
    name: str
    method: str
    path: Callable[[int], str]
    body: Callable[[int], Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    expect: int = 200


def endpoints(ids: list[int]) -> list[Endpoint]:
    """The endpoints measured; request ``i`` of each works on the ``i``-th schedule (round
    robin), so concurrent writes rarely wait for one row's lock."""
    names = itertools.count()
    run = os.getpid()

    def one(i: int) -> int:
        return ids[i % len(ids)]

    return [
        Endpoint("floor", "GET", lambda i: "/bench/floor/"),
        Endpoint("list", "GET", lambda i: f"{PREFIX}/schedules/"),
        Endpoint("get", "GET", lambda i: f"{PREFIX}/schedules/{one(i)}/"),
        Endpoint(
            "patch",
            "PATCH",
            lambda i: f"{PREFIX}/schedules/{one(i)}/",
            body=lambda i: {"args": [i, time.time_ns()]},
            headers={"If-Match": "*"},
        ),
        Endpoint(
            "post",
            "POST",
            lambda i: f"{PREFIX}/schedules/",
            body=lambda i: {
                "name": f"api-bench-{run}-{next(names)}",
                "task": "bench.noop",
                "kind": "cron",
                "cron": CRONS[i % len(CRONS)],
                "timezone": ZONES[i % len(ZONES)],
            },
            expect=201,
        ),
        Endpoint(
            "run-now",
            "POST",
            lambda i: f"{PREFIX}/schedules/{one(i)}/run-now/",
            body=lambda i: {},
            expect=202,
        ),
        Endpoint("runs", "GET", lambda i: f"{PREFIX}/runs/"),
        Endpoint("status", "GET", lambda i: f"{PREFIX}/status/?drift=false"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--requests", type=int, default=300, help="per endpoint and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument(
        "--worker-class",
        default="sync",
        help="gunicorn's worker class: sync (a connection per request) or gthread (keep-alive)",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="client threads")
    parser.add_argument(
        "--superuser",
        action="store_true",
        help="a superuser's token (no permission queries) instead of a staff user's",
    )
    parser.add_argument(
        "--only", nargs="*", help="measure these endpoints only (list get patch post ...)"
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="Django's test client in this process instead of gunicorn",
    )
    parser.add_argument(
        "--profile", metavar="ENDPOINT", help="with --in-process: cProfile this endpoint"
    )
    add_smoke_option(parser)
    options = parser.parse_args()
    if options.smoke:
        options.schedules, options.runs, options.requests, options.rounds = 200, 500, 10, 1

    from benchmarks.run import start

    index = start(smoke=options.smoke)
    try:
        token, ids = seed(options, index)
        chosen = [e for e in endpoints(ids) if not options.only or e.name in options.only]
        if options.in_process:
            in_process(options, token, chosen)
        else:
            served(options, token, chosen)
        if options.smoke:  # both ways run in the smoke, so neither rots
            in_process(options, token, chosen)
    finally:
        index.drop()


def seed(options: argparse.Namespace, index: Any) -> tuple[str, list[int]]:
    """The schedules, their runs, the index, and a staff user's token."""
    from django.contrib.auth.models import Permission, User
    from django.db import connection
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    from django_schedulinator import timing
    from django_schedulinator.index.rebuild import rebuild_index
    from django_schedulinator.models import Run, Schedule

    started = time.perf_counter()
    now = timezone.now().replace(microsecond=0)
    rows = []
    for i in range(options.schedules):
        fields: dict[str, Any] = {"name": f"bench-{i:07d}", "task": "bench.noop"}
        if i % 3 == 0:
            at = now + timedelta(minutes=5 + i % 1440)
            fields.update(kind="interval", interval=timedelta(minutes=5 + i % 60))
        elif i % 10 == 1:
            at = now + timedelta(hours=1 + i % 48)
            fields.update(kind="once", run_at=at)
        else:
            cron, zone = CRONS[i % len(CRONS)], ZONES[i % len(ZONES)]
            spec = timing.Timing(kind="cron", cron=cron, timezone=zone)
            at = timing.first_run_at(spec, now)
            fields.update(kind="cron", cron=cron, timezone=zone)
        rows.append(Schedule(**fields, next_run_at=at, due_at=at))
    Schedule.objects.bulk_create(rows, batch_size=5000)
    ids = list(Schedule.objects.order_by("pk").values_list("pk", flat=True))
    runs = [
        Run(
            schedule_id=ids[i % len(ids)],
            scheduled_for=now - timedelta(seconds=options.runs - i),
            status="succeeded" if i % 10 else "failed",
            task="bench.noop",
            claimed_at=now,
            dispatched_at=now,
            finished_at=now,
            worker_id="bench",
        )
        for i in range(options.runs)
    ]
    Run.objects.bulk_create(runs, batch_size=5000)
    rebuild_index(index)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    User.objects.filter(username="bench-api").delete()
    user = User.objects.create_user("bench-api", is_staff=True, is_superuser=options.superuser)
    # The default policy's way: staff with the model permissions, which Django's
    # ModelBackend reads in two queries per request; a superuser's need none.
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_schedulinator",
            codename__in=PERMISSIONS,
        )
    )
    token = Token.objects.create(user=user).key
    print(
        f"setup: {options.schedules:,} schedules, {options.runs:,} runs, index built in "
        f"{time.perf_counter() - started:.1f}s"
    )
    return token, ids


# -- under gunicorn ------------------------------------------------------------------------


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return int(fields[11]) + int(fields[12])


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def backends() -> list[int]:
    """The PostgreSQL backends of the server's workers (their connections persist)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> "
            "pg_backend_pid()",
            ["schedulinator-bench-api"],
        )
        return [pid for (pid,) in cursor.fetchall()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def served(options: argparse.Namespace, token: str, chosen: list[Endpoint]) -> None:
    import httpx

    port = free_port()
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "gunicorn", "--workers", str(options.workers)),
            *("--worker-class", options.worker_class),
            *("--bind", f"127.0.0.1:{port}", "--log-level", "warning"),
            "django.core.wsgi:get_wsgi_application()",
        ],
        env=os.environ.copy(),
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Token {token}"}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}{PREFIX}/schedules/", headers=headers, timeout=5)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("gunicorn did not start") from None
                time.sleep(0.2)
        print(
            f"gunicorn: {options.workers} {options.worker_class} workers, "
            f"{options.concurrency} client threads, "
            f"{options.requests} requests per endpoint and round, {options.rounds} rounds"
        )
        results: dict[str, list[tuple[float, float, float]]] = {e.name: [] for e in chosen}
        for _round in range(options.rounds):
            for endpoint in chosen:
                # Warm every worker (and its connection) before measuring.
                load(base, headers, endpoint, options.workers * 4, options.concurrency)
                workers = children(server.pid)
                pg = backends()
                before = sum(map(cpu_ticks, workers)), sum(map(cpu_ticks, pg))
                wall = load(base, headers, endpoint, options.requests, options.concurrency)
                after = sum(map(cpu_ticks, workers)), sum(map(cpu_ticks, pg))
                cpu, pg_cpu = (
                    1000 * (b - a) / TICKS / options.requests
                    for a, b in zip(before, after, strict=True)
                )
                results[endpoint.name].append((cpu, pg_cpu, options.requests / wall))
        print(
            "| endpoint | workers' CPU ms/request | PostgreSQL CPU ms/request "
            "| requests/s per worker core | wall requests/s |"
        )
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, samples in results.items():
            cpu, pg_cpu, rate = zip(*samples, strict=True)
            per_core = [1000 / c if c else float("inf") for c in cpu]
            print(
                f"| {name} | {spread(cpu, '.1f')} | {spread(pg_cpu, '.2f')} "
                f"| {spread(per_core, ',.0f')} | {spread(rate, ',.0f')} |"
            )
    finally:
        server.terminate()
        server.wait(timeout=30)


def spread(values: tuple[float, ...] | list[float], spec: str) -> str:
    if len(values) == 1:
        return format(values[0], spec)
    return (
        f"{format(statistics.median(values), spec)} "
        f"({format(min(values), spec)} to {format(max(values), spec)})"
    )


def load(
    base: str, headers: dict[str, str], endpoint: Endpoint, requests: int, concurrency: int
) -> float:
    """Send ``requests`` requests from ``concurrency`` threads; the wall time taken."""
    import httpx

    numbers = iter(range(requests))
    lock = threading.Lock()
    failures: list[str] = []

    def client() -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            while True:
                with lock:
                    i = next(numbers, None)
                if i is None:
                    return
                body = endpoint.body(i) if endpoint.body else None
                answer = http.request(
                    endpoint.method, endpoint.path(i), json=body, headers=endpoint.headers
                )
                if answer.status_code != endpoint.expect:
                    failures.append(f"{endpoint.name}: {answer.status_code} {answer.text[:300]}")
                    return

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(failures[0])
    return time.perf_counter() - started


# -- in process ------------------------------------------------------------------------------


class RedisRoundTrips:
    """Counts the commands (and pipelines) this process sends to Redis while it is on."""

    def __init__(self) -> None:
        self.count = 0

    def __enter__(self) -> RedisRoundTrips:
        from redis.connection import AbstractConnection

        self._original = AbstractConnection.send_packed_command
        counter = self

        def counted(connection: Any, *args: Any, **kwargs: Any) -> Any:
            counter.count += 1
            return counter._original(connection, *args, **kwargs)

        AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        from redis.connection import AbstractConnection

        AbstractConnection.send_packed_command = self._original  # type: ignore[method-assign]


def in_process(options: argparse.Namespace, token: str, chosen: list[Endpoint]) -> None:
    import json

    from django.db import connection
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Token {token}")

    def send(endpoint: Endpoint, i: int) -> None:
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in endpoint.headers.items()}
        body = endpoint.body(i) if endpoint.body else None
        answer = client.generic(
            endpoint.method,
            endpoint.path(i),
            json.dumps(body) if body is not None else "",
            content_type="application/json",
            **extra,
        )
        if answer.status_code != endpoint.expect:
            raise SystemExit(f"{endpoint.name}: {answer.status_code} {answer.content[:300]!r}")

    if options.profile:
        endpoint = next(e for e in chosen if e.name == options.profile)
        for i in range(20):
            send(endpoint, i)
        profiler = cProfile.Profile(time.process_time)  # CPU time, not waits
        profiler.enable()
        for i in range(options.requests):
            send(endpoint, i)
        profiler.disable()
        stats = pstats.Stats(profiler).strip_dirs()
        stats.sort_stats("cumulative").print_stats(60)
        stats.print_callers("deepcopy")
        stats.sort_stats("tottime").print_stats(25)
        return

    print(f"in process (Django's test client), {options.requests} requests per endpoint")
    print("| endpoint | CPU ms/request | SQL statements | Redis round trips |")
    print("| --- | ---: | ---: | ---: |")
    for endpoint in chosen:
        for i in range(20):
            send(endpoint, i)
        # Counted by a wrapper: CaptureQueriesContext's log is reset when a request starts.
        statements: list[str] = []

        def counted(execute: Any, sql: str, *args: Any, log: list[str] = statements) -> Any:
            log.append(sql)
            return execute(sql, *args)

        with connection.execute_wrapper(counted), RedisRoundTrips() as redis:
            send(endpoint, 20)
        samples = []
        for _round in range(options.rounds):
            started = time.process_time()
            for i in range(options.requests):
                send(endpoint, i)
            samples.append(1000 * (time.process_time() - started) / options.requests)
        print(f"| {endpoint.name} | {spread(samples, '.2f')} | {len(statements)} | {redis.count} |")


if __name__ == "__main__":
    main()
