"""What Sentry Crons check-ins cost the fire path (django_schedulinator.contrib.sentry).

    python -m benchmarks.sentry --due 10000 --batch-size 500
    python -m benchmarks.sentry --smoke   # a few seconds on tiny sizes (CI)

Fires ``--due`` schedules (half cron, half interval; a no-op task, inline) with one
in-process scheduler, as benchmarks/run.py's fire does, twice on fresh tables: with
SENTRY_CRONS off, then on for every schedule, a real sentry-sdk sending to an endpoint on
127.0.0.1 that answers at once. It prints both fire rates, the check-ins the endpoint got,
those dropped (by the outbox when more than ``MAX_WAITING`` wait; by the SDK when its
transport queue, ``--queue-size``, is full: the outbox paces itself to it), and how long the
check-ins took to be sent after the pass.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from benchmarks.run import add_smoke_option, bench_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")


def check_ins(envelope: bytes) -> int:
    """The check-in items of an envelope: after its header line, each item is a header line
    and a payload of ``length`` bytes (or one line)."""
    _, _, rest = envelope.partition(b"\n")
    found = 0
    while rest.strip():
        line, _, rest = rest.partition(b"\n")
        header = json.loads(line)
        found += header.get("type") == "check_in"
        if "length" in header:
            rest = rest[header["length"] + 1 :]
        else:
            _, _, rest = rest.partition(b"\n")
    return found


@contextmanager
def endpoint() -> Iterator[tuple[str, list[int]]]:
    """An ingest endpoint that counts the check-ins of the envelopes it is sent: its DSN and
    the count (a list of one)."""
    received = [0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            with lock:
                received[0] += check_ins(body)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://public@127.0.0.1:{server.server_address[1]}/1", received
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--due", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--workers", type=int, default=8, help="inline dispatcher threads")
    parser.add_argument("--queue-size", type=int, default=100, help="transport_queue_size")
    add_smoke_option(parser)
    options = parser.parse_args()
    if options.smoke:
        options.due, options.batch_size = 200, 100

    import sentry_sdk

    from benchmarks.run import start

    with endpoint() as (dsn, received):
        sentry_sdk.init(
            dsn=dsn,
            default_integrations=False,
            auto_enabling_integrations=False,
            transport_queue_size=options.queue_size,
        )
        for on in (False, True):
            index = start(smoke=options.smoke)
            from django_schedulinator.contrib.sentry import outbox

            try:
                before, dropped_before = received[0], outbox.dropped
                rate, drained = fire(options, index, on=on)
                got = received[0] - before
                ours = outbox.dropped - dropped_before
                expected = 2 * options.due if on else 0
                print(
                    f"SENTRY_CRONS {'on ' if on else 'off'}: fire {rate:,.0f}/s "
                    f"({options.due} due, batch {options.batch_size}); check-ins received "
                    f"{got}, dropped by the outbox {ours}, by the SDK {expected - got - ours} "
                    f"(queue size {options.queue_size}); the rest sent {drained:.1f}s later"
                )
            finally:
                index.drop()
        sentry_sdk.get_client().close(timeout=10)


def fire(options: argparse.Namespace, index: Any, *, on: bool) -> tuple[float, float]:
    """The fire rate, and how long the check-ins took to be sent after the pass."""
    import sentry_sdk
    from django.conf import settings
    from django.test import override_settings
    from django.utils import timezone

    from django_schedulinator.contrib.sentry import outbox
    from django_schedulinator.dispatch.inline import InlineDispatcher
    from django_schedulinator.index.rebuild import rebuild_index
    from django_schedulinator.models import Run, Schedule
    from django_schedulinator.scheduler.worker import Worker

    now = timezone.now().replace(microsecond=0)
    Schedule.objects.bulk_create(
        [
            bench_schedule(i, now - timedelta(seconds=5), prefix="bench-sentry")
            for i in range(options.due)
        ],
        batch_size=5000,
    )
    rebuild_index(index)
    # override_settings sends setting_changed, which connects the receivers (or not).
    with override_settings(SCHEDULINATOR={**settings.SCHEDULINATOR, "SENTRY_CRONS": on}):
        worker = Worker(
            batch_size=options.batch_size,
            once=True,
            worker_id="bench-sentry",
            dispatcher=InlineDispatcher(max_workers=options.workers),
        )
        started = time.perf_counter()
        worker.run()
        elapsed = time.perf_counter() - started
        # Still switched on: the outbox sends only while the setting says so.
        outbox.flush(timeout=600)
        sentry_sdk.flush(timeout=600)
        drained = time.perf_counter() - started - elapsed
    assert worker.counters.fired == options.due, worker.counters.as_dict()
    assert Run.objects.filter(status="succeeded").count() == options.due
    return options.due / elapsed, drained


if __name__ == "__main__":
    main()
