"""The Celery app of the tests: its tasks, and the outcome hook that projects install.

Imported by the test process (tests/scheduled_tasks.py registers its tasks for scheduling)
and by the ``celery worker`` subprocesses of tests/test_dispatch_celery.py, which get the
broker and their queue from the environment."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery, signals
from django.utils import timezone

from django_schedulinator.dispatch.celery import occurrence_key, report_outcomes

# A worker sets Django up through Celery's Django fixup, which this variable switches on.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

BROKER = os.environ.get("SCHEDULINATOR_TEST_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//")

app = Celery("schedulinator-tests", broker=BROKER)
app.conf.update(
    broker_connection_timeout=2,
    broker_connection_retry_on_startup=True,
    task_acks_late=False,
    worker_hijack_root_logger=False,
    # No remote control: workers of parallel tests share the broker, not a control queue.
    worker_enable_remote_control=False,
)
report_outcomes(app)  # the documented one line, as a project puts it in its celery.py

# A slow hand-off in the scheduler processes of tests/test_dispatch_leases.py: each message
# takes this long to publish (Celery's own hook, in the process that sends).
SLOW_PUBLISH_SECONDS = float(os.environ.get("SCHEDULINATOR_TEST_SLOW_PUBLISH", "0"))
if SLOW_PUBLISH_SECONDS:

    @signals.before_task_publish.connect(weak=False)
    def publish_slowly(**kwargs: Any) -> None:
        time.sleep(SLOW_PUBLISH_SECONDS)


@app.task(name="tests.celery.record", bind=True)
def record(self: Any, *args: Any, **kwargs: Any) -> None:
    from ..models import Delivery

    key = occurrence_key(self.request) or ""
    Delivery.objects.create(
        key=key,
        schedule_id=int(key.split(":")[0]),
        scheduled_for=timezone.now(),
        attempt=1,
        payload={"args": list(args), "kwargs": kwargs, "task_id": self.request.id},
    )


@app.task(name="tests.celery.receipt", bind=True)
def receipt(self: Any) -> None:
    from ..models import receive

    receive(occurrence_key(self.request) or "")


@app.task(name="tests.celery.boom")
def boom() -> None:
    raise RuntimeError("boom")


@app.task(name="tests.celery.slow", bind=True)
def slow(self: Any, seconds: float = 3) -> None:
    time.sleep(seconds)
