"""The sync layer: index writes after commit, guarded by the row revision."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from django_schedulinator import resync_schedules, services
from django_schedulinator.index.due import ApplyResult, Change, DueIndex
from django_schedulinator.index.sync import changes_for_ids, resync_on_commit
from django_schedulinator.models import Schedule
from django_schedulinator.timing import to_ms

from .support.commits import committed
from .support.schedules import make_due, make_schedule, model_fields

pytestmark = pytest.mark.django_db


def score(index: DueIndex, schedule: Schedule) -> int | None:
    return index.scores([schedule.pk])[schedule.pk]


def test_index_written_on_commit_never_on_rollback(index: DueIndex) -> None:
    with committed(), transaction.atomic():
        kept = make_schedule()
        assert score(index, kept) is None, "written before commit"
    assert score(index, kept) == to_ms(kept.next_run_at)

    with pytest.raises(RuntimeError), committed(), transaction.atomic():  # noqa: PT012
        make_schedule(name="rolled-back")
        raise RuntimeError("roll back")
    assert index.client.zcard(index.due_key) == 1


def test_disable_and_delete_remove_the_entry(index: DueIndex) -> None:
    paused, deleted = make_schedule(), make_schedule()
    assert score(index, paused) is not None
    assert score(index, deleted) is not None

    with committed():
        services.pause(paused)
        deleted_pk = deleted.pk
        deleted.delete()

    assert score(index, paused) is None
    assert index.scores([deleted_pk])[deleted_pk] is None
    assert index.client.hget(index.revisions_key, deleted_pk) is None

    with committed():
        services.resume(paused)
    assert score(index, paused) == to_ms(paused.next_run_at)


def test_reordered_writes_leave_the_index_at_the_newer_revision(index: DueIndex) -> None:
    schedule = make_schedule(kind="cron", cron="0 9 * * *")
    # Process A reads the row (revision 1) and stalls before writing the index...
    stale_changes = changes_for_ids([schedule.pk], "default")
    # ...meanwhile an edit commits (revision 2) and its sync write lands first.
    with committed():
        services.update(schedule, {"cron": "30 18 * * *"})
    assert schedule.revision == 2
    newer = to_ms(schedule.next_run_at)
    assert score(index, schedule) == newer
    # A's late write of revision 1 arrives: it must not win.
    result = index.apply(stale_changes)
    assert result.stale == 1
    assert score(index, schedule) == newer


def test_saving_a_stale_instance_keeps_the_schedulers_next_run(index: DueIndex) -> None:
    schedule = make_schedule()
    stale_copy = Schedule.objects.get(pk=schedule.pk)
    later = timezone.now() + timedelta(days=2)
    Schedule.objects.filter(pk=schedule.pk).update(
        fired_through=None, next_run_at=later
    )  # as the scheduler would

    stale_copy.args = ["edited"]
    stale_copy.save()

    schedule.refresh_from_db()
    assert schedule.args == ["edited"]
    assert schedule.next_run_at == later.replace(microsecond=later.microsecond // 1000 * 1000) or (
        abs((schedule.next_run_at - later).total_seconds()) < 0.001
    )
    assert schedule.revision == 2


def test_timing_change_recomputes_next_run(index: DueIndex) -> None:
    schedule = make_schedule(kind="cron", cron="0 9 * * *", timezone="UTC")
    with committed():
        services.update(schedule, {"cron": "15 10 * * *"})
    schedule.refresh_from_db()
    assert (schedule.next_run_at.hour, schedule.next_run_at.minute) == (10, 15)
    assert score(index, schedule) == to_ms(schedule.next_run_at)


def test_bulk_paths_are_synced_by_resync_schedules(index: DueIndex) -> None:
    ids = make_due(25)
    assert index.client.zcard(index.due_key) == 0, "bulk_create sends no signals"
    result = resync_schedules(Schedule.objects.filter(pk__in=ids))
    assert result.applied == 25
    assert index.client.zcard(index.due_key) == 25

    Schedule.objects.filter(pk__in=ids[:5]).update(enabled=False)
    resync_schedules(ids[:5])
    assert index.client.zcard(index.due_key) == 20


def test_failed_redis_write_is_logged_not_raised(
    index: DueIndex, settings, caplog: pytest.LogCaptureFixture
) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "down": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
        },
    }
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "CACHE_ALIAS": "down"}
    schedule = make_schedule()  # must not raise into the caller
    assert Schedule.objects.filter(pk=schedule.pk).exists()
    assert "Could not update the due index" in caplog.text


class CountingIndex(DueIndex):
    """A real index that remembers the ids of each write it is asked for."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.writes: list[list[int]] = []

    def apply(self, changes: Sequence[Change], release_token: str = "") -> ApplyResult:
        self.writes.append([c.schedule_id for c in changes])
        return super().apply(changes, release_token)


def test_each_commit_a_test_captures_writes_its_own_saves(
    index: DueIndex, django_capture_on_commit_callbacks: Any
) -> None:
    """Django's ``captureOnCommitCallbacks(execute=True)`` (how a project tests code that
    commits) runs a block's callbacks and leaves them in the test's transaction: a save in
    the next block joined the resync that had run already, and was never written."""
    schedule = Schedule(**model_fields())
    with django_capture_on_commit_callbacks(execute=True):
        services.create(schedule)
    assert score(index, schedule) == to_ms(schedule.next_run_at)
    schedule.enabled, schedule.paused_at = False, timezone.now()  # a pause saved by hand
    with django_capture_on_commit_callbacks(execute=True):
        schedule.save()
    assert score(index, schedule) is None


@pytest.mark.django_db(transaction=True)  # real commits and savepoints
def test_saves_in_one_transaction_share_one_index_write(index: DueIndex) -> None:
    counting = CountingIndex()
    with transaction.atomic():
        schedules = [make_schedule() for _ in range(3)]
        for schedule in schedules:
            resync_on_commit([schedule.pk], using="default", index=counting)
        resync_on_commit([schedules[0].pk], using="default", index=counting)  # again: once
        assert counting.writes == [], "written before commit"
    assert counting.writes == [[s.pk for s in schedules]]
    # Outside a transaction each call writes at once.
    resync_on_commit([schedules[0].pk], using="default", index=counting)
    assert counting.writes[1:] == [[schedules[0].pk]]


@pytest.mark.django_db(transaction=True)
def test_a_block_without_a_savepoint_shares_the_write_of_its_transaction(
    index: DueIndex,
) -> None:
    """``QuerySet.delete`` sends its signals in a block without a savepoint (and in a
    savepoint released since); a bulk delete's own resync after it
    (``services.delete_many``) joined no write, so the index was written twice."""
    counting = CountingIndex()
    schedules = [make_schedule() for _ in range(2)]
    with transaction.atomic(), transaction.atomic():  # the request's, the service's
        with transaction.atomic(), transaction.atomic(savepoint=False):  # the delete's
            resync_on_commit([schedules[0].pk], using="default", index=counting)
        resync_on_commit([s.pk for s in schedules], using="default", index=counting)
    assert counting.writes == [[s.pk for s in schedules]]


@pytest.mark.django_db(transaction=True)
def test_a_savepoint_rolled_back_drops_only_its_own_saves(index: DueIndex) -> None:
    with transaction.atomic():
        before = make_schedule()
        with contextlib.suppress(RuntimeError), transaction.atomic():
            dropped = make_schedule()  # noqa: F841 - its row and entry must be gone
            raise RuntimeError("roll the savepoint back")
        with transaction.atomic():  # a savepoint released: its saves commit with the rest
            released = make_schedule()
        after = make_schedule()
    for kept in (before, released, after):
        assert score(index, kept) == to_ms(kept.next_run_at)
    # (SQLite may give a rolled-back row's id to the next row: compare the whole index.)
    assert index.client.zcard(index.due_key) == 3
    assert set(Schedule.objects.values_list("pk", flat=True)) == {
        before.pk,
        released.pk,
        after.pk,
    }

    with transaction.atomic():
        with contextlib.suppress(RuntimeError), transaction.atomic():
            make_schedule(name="first-in-a-savepoint-rolled-back")
            raise RuntimeError("roll back")
        survivor = make_schedule()
    assert score(index, survivor) == to_ms(survivor.next_run_at)
    assert index.client.zcard(index.due_key) == 4
