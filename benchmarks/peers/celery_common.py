"""The Celery app the celery-beat and redbeat drivers share: a Redis broker on the local
server, its queue named after the run's key prefix, and no worker (the cheapest real
dispatch: ``apply_async`` writes the message to the broker; the driver deletes them)."""

from __future__ import annotations

from typing import Any

from celery import Celery

from benchmarks.peers.common import REDIS_URL


def make_app(prefix: str, **conf: Any) -> Celery:
    app = Celery("bench", broker=REDIS_URL, set_as_current=True)
    app.conf.update(
        task_default_queue=f"{prefix}-celery",
        timezone="UTC",
        enable_utc=True,
        broker_connection_retry_on_startup=False,
        **conf,
    )
    return app
