"""What the Celery fixtures of conftest.py use (the dispatcher's tests, and the import from
django-celery-beat): this test process's queue (tests/settings.py, TEST_QUEUE) on the real
RabbitMQ, and the command of a real ``celery worker`` on it."""

from __future__ import annotations

import sys

from django.conf import settings as django_settings

from .celery_app import app

QUEUE = django_settings.TEST_QUEUE


def purge() -> None:
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        channel.queue_declare(QUEUE, durable=True, auto_delete=False)
        channel.queue_purge(QUEUE)


def worker_argv() -> list[str]:
    return [
        sys.executable, "-m", "celery", "-A", "tests.celery_app", "worker", "-P", "solo",
        "-Q", QUEUE, "-n", f"{QUEUE}@%h", "--without-heartbeat", "--without-gossip",
        "--without-mingle", "-l", "INFO",
    ]  # fmt: skip
