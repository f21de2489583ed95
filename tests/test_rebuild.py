"""Rebuilding the index (``django_schedulinator/index/rebuild.py``) when the scheduler finds it
missing: a first build, or a lost one. ``manage.py rebuild_due_index`` is in
``test_commands.py``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, router
from django.utils import timezone
from redis.exceptions import ResponseError

from django_schedulinator import services
from django_schedulinator.index.due import FORGET, SET, Change, DueIndex, Rebuilt
from django_schedulinator.index.rebuild import (
    RebuildReport,
    index_rows,
    missing_rows,
    rebuild_index,
)
from django_schedulinator.index.sync import INDEX_FIELDS, keyset_pages
from django_schedulinator.models import Run, Schedule
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.timing import to_ms

from .support.redis_server import RedisServer
from .support.schedules import make_due, make_schedule

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
    worker.step()
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


# -- what the rebuild reads and writes ----------------------------------------------------------


def test_the_rows_the_rebuild_reads_are_the_orms() -> None:
    """On PostgreSQL the rebuild reads rows in binary, not through the ORM: the same values
    (microseconds, jitter, NULLs, paused rows), in the same pages."""
    now = timezone.now()
    make_schedule(next_run_at=now + timedelta(hours=1, microseconds=123_456))
    make_schedule(jitter=timedelta(seconds=90), next_run_at=now + timedelta(days=400))
    make_schedule(enabled=False)
    make_schedule(kind=Schedule.Kind.ONCE, run_at=now + timedelta(minutes=5))
    finished = make_schedule()
    Schedule.objects.filter(pk=finished.pk).update(next_run_at=None, due_at=None)
    make_due(3)
    db = router.db_for_write(Schedule)

    pages = list(index_rows(db, 2))

    assert pages == list(keyset_pages(Schedule.objects.using(db), INDEX_FIELDS, 2))
    assert [len(page) for page in pages] == [2, 2, 2, 2]


def test_missing_rows_are_the_ids_without_a_row() -> None:
    kept = make_schedule()
    gone = make_schedule()
    Schedule.objects.filter(pk=gone.pk).delete()
    db = router.db_for_write(Schedule)

    assert missing_rows(db, [kept.pk, gone.pk, 2**40]) in ([gone.pk, 2**40], [2**40, gone.pk])
    assert missing_rows(db, [kept.pk]) == []


def test_the_report_keeps_the_first_examples_of_each_kind_in_row_order() -> None:
    report = RebuildReport(dry_run=False)
    report.tally("aufau", [1, 2, 3, 4, 5])
    report.tally("r" + "a" * 30, list(range(10, 41)))

    assert (report.added, report.fixed, report.removed, report.unchanged) == (32, 1, 1, 2)
    assert report.examples["added"] == [1, 4, *range(11, 29)]
    assert report.examples["fixed"] == [3]
    assert report.examples["removed"] == [10]
    assert report.examples["unchanged"] == [2, 5]


class WritesBetween(DueIndex):
    """An index where something happens between the rebuild's read of a chunk of rows and
    its write of their entries, the window a concurrent writer can fall into."""

    def __init__(self, meanwhile: Callable[[list[int]], None]) -> None:
        super().__init__()
        self.meanwhile = meanwhile

    def rebuild_entries(self, changes: Sequence[Change], *, dry_run: bool = False) -> Rebuilt:
        try:
            self.meanwhile([c.schedule_id for c in changes])
        finally:
            # The rebuild writes from a thread of its own, which has a connection of its own
            # once the writer in the window touches the database.
            if threading.current_thread() is not threading.main_thread():
                connections.close_all()
        return super().rebuild_entries(changes, dry_run=dry_run)


@pytest.mark.parametrize("start", ["entries held", "empty"])
def test_a_schedule_deleted_while_its_chunk_is_written_leaves_no_entry(
    index: DueIndex, start: str
) -> None:
    """Its delete's sync write lands before the rebuild writes the entry read just before:
    the entry comes back, and the rebuild removes it again: with the look for orphans at
    the end when the index held entries, else (no look) right after the chunk's write."""
    kept, doomed = make_schedule(), make_schedule()
    if start == "empty":
        index.drop()

    def delete(ids: list[int]) -> None:
        if doomed.pk in ids and Schedule.objects.filter(pk=doomed.pk).exists():
            services.delete(doomed)
            assert index.scores([doomed.pk])[doomed.pk] is None  # its sync write landed

    report = rebuild_index(WritesBetween(delete))

    assert report.orphans == 1
    assert index.scores([kept.pk, doomed.pk]) == {
        kept.pk: to_ms(kept.next_run_at),
        doomed.pk: None,
    }


def test_a_rebuild_never_overwrites_a_newer_revision_written_meanwhile(index: DueIndex) -> None:
    schedule = make_schedule()
    later = schedule.next_run_at + timedelta(hours=5)

    def save(ids: list[int]) -> None:
        if schedule.pk in ids:  # a scheduler advances it; its write lands first
            Schedule.objects.filter(pk=schedule.pk).update(revision=schedule.revision + 1)
            index.apply([Change(schedule.pk, schedule.revision + 1, SET, to_ms(later))])

    report = rebuild_index(WritesBetween(save))

    assert report.stale == 1
    assert index.scores([schedule.pk])[schedule.pk] == to_ms(later)


def test_the_rebuild_script_refuses_an_unknown_op(index: DueIndex) -> None:
    with pytest.raises(ResponseError, match="unknown rebuild op"):
        index.rebuild_entries([Change(1, 1, FORGET)])
