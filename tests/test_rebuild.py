"""Rebuilding the index (``django_schedulinator/rebuild.py``) when the scheduler finds it
missing: a first build, or a lost one. ``manage.py rebuild_due_index`` is in
``test_commands.py``."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_schedulinator.index import DueIndex
from django_schedulinator.models import Run
from django_schedulinator.worker import Worker

from .conftest import make_due, make_schedule
from .redis_server import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


# -- a missing index: a first build or a lost one ---------------------------------------------


def rebuild_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django_schedulinator.rebuild"]


@pytest.mark.parametrize("schedules", [0, 3])
def test_the_first_start_of_a_new_install_builds_the_index_at_info(
    index: DueIndex, caplog: pytest.LogCaptureFixture, schedules: int
) -> None:
    # A new install: maybe schedules saved already (their sync writes are in Redis), but no
    # scheduler ever ran, so no index was built and nothing can have been lost.
    for _ in range(schedules):
        make_schedule(next_run_at=timezone.now() + timedelta(hours=1))
    caplog.set_level(logging.INFO, logger="django_schedulinator")

    Worker(once=True).run()

    assert index.is_built()
    records = rebuild_records(caplog)
    assert [r.levelname for r in records] == ["INFO"], caplog.text
    assert f"built it from {schedules} schedules" in records[0].getMessage()


def test_a_scheduler_building_the_index_moves_on_chunk_by_chunk(
    index: DueIndex, settings: Any
) -> None:
    """A long build is progress for /healthz (probes.py), not a stuck loop: each chunk, and
    each look at another process's build, says the loop moved on."""
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "REBUILD_CHUNK_SIZE": 2}
    for _ in range(5):
        make_schedule(next_run_at=timezone.now() + timedelta(hours=1))
    worker = Worker(worker_id="builder")
    moments: list[float] = []
    original = worker._moved_on

    def moved_on(*args: Any) -> None:
        original(*args)
        assert worker.last_progress_at is not None
        moments.append(worker.last_progress_at)

    worker._moved_on = moved_on  # type: ignore[method-assign]
    worker.run_pass()
    assert index.is_built()
    # The look for another process's build, three chunks of rows (2, 2, 1), and the chunks
    # of entries looked at for orphans.
    assert len(moments) >= 5
    assert moments == sorted(moments)


def test_an_index_lost_after_schedules_fired_is_rebuilt_with_a_warning(
    private_redis: RedisServer, index: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    make_due(3)
    Worker(once=True).run()  # the first start: builds the index and fires
    assert Run.objects.count() == 3
    private_redis.client().flushall()  # a private server: the shared one is never flushed
    caplog.clear()
    caplog.set_level(logging.INFO, logger="django_schedulinator")

    Worker(once=True).run()

    assert index.is_built()
    records = rebuild_records(caplog)
    assert [r.levelname for r in records] == ["WARNING"], caplog.text
    assert "Redis lost its data" in records[0].getMessage()
    assert "rebuilt it from 3 schedules" in records[0].getMessage()
