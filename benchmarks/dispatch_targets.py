"""What ``benchmarks/dispatchers.py`` hands off to: its Celery apps (one per broker) and the
webhook receiver it runs as a subprocess.

    python -m benchmarks.dispatch_targets --receive   # prints its port, answers 200 at once

The Celery apps are what the ``CeleryDispatcher`` aliases of ``benchmarks/settings.py`` name
in ``OPTIONS['APP']`` (settings are code). They send to the run's own queue
(``BENCH_DISPATCH``, the run's key prefix); on Redis every key kombu writes carries that
prefix too (``global_keyprefix``). No worker consumes them: the benchmark purges and deletes
the queue.

The receiver is an asyncio protocol with no framework: it reads each request (headers and
the ``content-length`` body, keep-alive) and answers ``200`` with an empty body, so a
webhook costs the sender what sending costs and little else. ``GET /count`` answers how many
POSTs it has received, which the benchmark compares with what it sent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from typing import Any

QUEUE = os.environ.get("BENCH_DISPATCH", "bench-dispatch")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


def make_app(name: str, broker: str, **transport: Any) -> Any:
    from celery import Celery

    app = Celery(name, broker=broker, set_as_current=False)
    app.conf.update(
        task_default_queue=QUEUE,
        broker_connection_timeout=2,
        broker_connection_retry_on_startup=False,
        broker_transport_options=transport,
    )
    return app


try:
    celery_redis = make_app("bench-redis", REDIS_URL, global_keyprefix=f"{QUEUE}:")
    celery_amqp = make_app("bench-amqp", AMQP_URL)
except ImportError:  # no Celery here: the benchmark leaves Celery out
    pass


# -- the webhook receiver ------------------------------------------------------------------

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


class Answer(asyncio.Protocol):
    """One connection: every complete request answered at once, in order."""

    received = 0  # POSTs, over every connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].split(b"\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return  # the rest of the body is still on its way
            self.buffer = self.buffer[end + 4 + length :]
            if head[0].startswith(b"GET /count"):
                body = str(Answer.received).encode()
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
                )
            else:
                Answer.received += 1
                self.transport.write(OK)


async def serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Answer, "127.0.0.1", 0, backlog=256)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--receive", action="store_true", help="run the webhook receiver")
    if not parser.parse_args().receive:
        parser.print_help()
        sys.exit(2)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
