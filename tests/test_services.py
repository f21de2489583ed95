"""The service layer (``django_schedulinator/services.py``): every change to a schedule, with
its change-log entry and the index following once the transaction commits.

Pause, resume, run now and backfill through the whole scheduler are in
``test_semantics.py``; the admin and the API, which call these services, have their own
tests. Here: what each service guarantees on its own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from redis.exceptions import RedisError

from django_schedulinator import errors, services
from django_schedulinator.changelog import Origin
from django_schedulinator.index import DueIndex
from django_schedulinator.models import Run, Schedule, ScheduleChange

from .conftest import lose_redis, make_schedule

pytestmark = pytest.mark.django_db

CommitCapture = Callable[..., Any]


def entries(schedule: Schedule) -> list[tuple[str, str]]:
    return list(
        ScheduleChange.objects.filter(schedule_name=schedule.name)
        .order_by("id")
        .values_list("action", "source")
    )


def fields() -> dict[str, Any]:
    return {"name": "nightly", "task": "tests.record", "kind": "cron", "cron": "0 3 * * *"}


def test_create_validates_writes_records_and_indexes_after_commit(
    index: DueIndex, django_capture_on_commit_callbacks: CommitCapture
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        schedule = services.create(fields())
    assert schedule.pk is not None
    assert schedule.next_run_at is not None
    assert index.scores([schedule.pk])[schedule.pk] is not None
    assert entries(schedule) == [("created", "python")]
    (entry,) = ScheduleChange.objects.filter(schedule=schedule)
    assert entry.changes["cron"] == [None, "0 3 * * *"]

    with pytest.raises(ValidationError) as refused:
        services.create({**fields(), "name": "other", "cron": "61 * * * *"})
    assert "cron" in refused.value.message_dict
    assert not Schedule.objects.filter(name="other").exists()
    with pytest.raises(errors.ServiceError, match="saved already"):
        services.create(schedule)


def test_update_writes_what_changed_and_records_the_diff(index: DueIndex) -> None:
    schedule = services.create(fields())
    before = schedule.next_run_at
    admin = Origin(None, ScheduleChange.Source.ADMIN)

    assert services.update(schedule, {"cron": "30 4 * * *"}, origin=admin) is True
    assert schedule.version == 2
    assert schedule.next_run_at != before  # the timing changed: the next run follows
    (entry,) = ScheduleChange.objects.filter(action="changed")
    assert (entry.source, entry.changes) == ("admin", {"cron": ["0 3 * * *", "30 4 * * *"]})

    # Nothing to change: nothing written, the version stays.
    assert services.update(schedule, {"cron": "30 4 * * *"}) is False
    assert Schedule.objects.get(pk=schedule.pk).version == 2
    with pytest.raises(errors.ServiceError, match="Not settings of a schedule: next_run_at"):
        services.update(schedule, {"next_run_at": None})


def test_update_refuses_a_stale_version_and_writes_nothing() -> None:
    schedule = services.create(fields())
    services.update(schedule, {"cron": "5 * * * *"})  # now at version 2
    with pytest.raises(errors.VersionConflict) as conflict:
        services.update(schedule, {"cron": "6 * * * *"}, expected_version=1)
    assert conflict.value.current == 2
    assert Schedule.objects.get(pk=schedule.pk).cron == "5 * * * *"
    with pytest.raises(errors.VersionConflict):
        services.delete(schedule, expected_version=1)
    assert Schedule.objects.filter(pk=schedule.pk).exists()
    with pytest.raises(errors.VersionConflict):
        services.lock_for_edit(schedule, 1)
    services.lock_for_edit(schedule, 2)


def test_update_of_a_stale_instance_keeps_what_the_scheduler_wrote() -> None:
    """The service writes the settings onto the row as it is now: a copy loaded before the
    scheduler fired the schedule cannot put back the fired occurrence."""
    schedule = services.create(fields())
    stale = Schedule.objects.get(pk=schedule.pk)
    fired_to = schedule.next_run_at + timedelta(days=1)
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=fired_to, run_count=1)

    stale.args = [1]
    services.update(stale)
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.args, row.next_run_at, row.run_count) == ([1], fired_to, 1)
    assert (stale.next_run_at, stale.args) == (fired_to, [1])


def test_enabled_through_update_pauses_and_resumes_like_the_actions(
    index: DueIndex, django_capture_on_commit_callbacks: CommitCapture
) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        services.update(schedule, {"enabled": False, "pause_note": "freeze"})
    assert schedule.paused_at is not None
    assert index.scores([schedule.pk])[schedule.pk] is None
    # Paused for a while: its next run lies in the past now.
    Schedule.objects.filter(pk=schedule.pk).update(
        next_run_at=schedule.next_run_at - timedelta(minutes=5)
    )
    with django_capture_on_commit_callbacks(execute=True):
        services.update(Schedule.objects.get(pk=schedule.pk), {"enabled": True})
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.enabled, row.paused_at, row.pause_note) == (True, None, "")
    skipped = Run.objects.filter(schedule=row, status=Run.Status.SKIPPED)
    assert skipped.count() >= 5
    assert {run.note for run in skipped} == {"Paused: freeze"}
    assert index.scores([row.pk])[row.pk] is not None


def test_delete_and_delete_many_record_the_last_settings(
    index: DueIndex, django_capture_on_commit_callbacks: CommitCapture
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        one, two, three = (services.create({**fields(), "name": n}) for n in "abc")
        services.delete(one)
        assert services.delete_many([two, three, two]) == 2
    assert not Schedule.objects.exists()
    assert index.scores([one.pk, two.pk, three.pk]) == {one.pk: None, two.pk: None, three.pk: None}
    deleted = ScheduleChange.objects.filter(action="deleted")
    assert sorted(deleted.values_list("schedule_name", flat=True)) == ["a", "b", "c"]
    assert deleted.get(schedule_name="a").changes["cron"] == ["0 3 * * *", None]
    with pytest.raises(errors.ScheduleDeleted):
        services.pause(one)


def test_auto_pause_is_the_schedulers_own_change(
    index: DueIndex, django_capture_on_commit_callbacks: CommitCapture
) -> None:
    schedule = make_schedule()
    with django_capture_on_commit_callbacks(execute=True):
        paused = services.auto_pause([schedule.pk, 0], note="too many failures", using="default")
    assert paused == [schedule.pk]
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.enabled, row.pause_note, row.version) == (False, "too many failures", 2)
    assert entries(row) == [("paused", "scheduler")]
    assert index.scores([row.pk])[row.pk] is None
    assert services.auto_pause([schedule.pk], note="again", using="default") == []


def test_resync_records_only_what_it_wrote(settings: Any, index: DueIndex) -> None:
    schedule = make_schedule()
    result = services.resync([schedule])
    assert result.applied == 1
    assert entries(schedule)[-1] == ("resynced", "python")
    lose_redis(settings)
    with pytest.raises(RedisError):
        services.resync([schedule])
    assert ScheduleChange.objects.filter(action="resynced").count() == 1


def test_every_service_takes_who_acts() -> None:
    for name in services.__all__:
        function = getattr(services, name)
        # The scheduler's own writes (its advance, its counters, its auto-pause) act as the
        # scheduler; lock_for_edit changes nothing.
        machine = ("advance", "record_streaks", "auto_pause", "lock_for_edit")
        if inspect.isfunction(function) and name not in machine:
            assert "origin" in inspect.signature(function).parameters, name


def test_the_apps_errors_share_one_base() -> None:
    from django_schedulinator.dispatch.base import InvalidArguments
    from django_schedulinator.rebuild import RebuildInProgress
    from django_schedulinator.registry import UnknownTask
    from django_schedulinator.timing import TimingError

    for error in (
        TimingError,
        UnknownTask,
        InvalidArguments,
        RebuildInProgress,
        errors.ServiceError,
        errors.VersionConflict,
        errors.ScheduleDeleted,
    ):
        assert issubclass(error, errors.SchedulinatorError), error
    # What callers caught before still catches them.
    assert issubclass(errors.ServiceError, ValueError)
    assert issubclass(TimingError, ValueError)
    assert issubclass(UnknownTask, LookupError)
