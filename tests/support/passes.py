"""The scheduler's work as a test calls it in its own process, each call committed as the
scheduler's and the alert check's own commits are (``commits.committed``): the signals and
notifications they send on commit are sent when the call returns."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django_schedulinator.operations import alerts
from django_schedulinator.operations.delivery import deliver_outbox
from django_schedulinator.scheduler.worker import Worker

from .commits import committed


def scheduler_pass(worker_id: str = "t") -> None:
    """One pass of a scheduler here."""
    worker = Worker(worker_id=worker_id)
    try:
        with committed():
            worker.step()
    finally:
        worker.close()


def check_alerts(now: datetime | None = None, **options: Any) -> list[alerts.Missed]:
    """``alerts.check``, then a delivery step of the outbox (``delivery.deliver_outbox``), as
    ``scheduler_status --notify`` and the schedulers run them."""
    with committed():
        missed = alerts.check(now, **options)
    deliver_outbox(using=options.get("using"))
    return missed
