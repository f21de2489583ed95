"""The index's health (``django_schedulinator/operations/index_health.py``): the drift
check, and the eviction risk that the system check and a starting scheduler report."""

from __future__ import annotations

import pytest

from django_schedulinator.checks import check_index
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Schedule
from django_schedulinator.operations.index_health import check_drift, record_drift
from django_schedulinator.scheduler.worker import Worker

from .support.redis_server import RedisServer
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db(transaction=True)  # scheduler threads: real commits


# -- drift ------------------------------------------------------------------------------------


def test_drift_check_reports_late_missing_and_orphaned_entries(built_index: DueIndex) -> None:
    healthy = [make_schedule() for _ in range(3)]
    assert check_drift(built_index).ok
    missing, late, paused = make_schedule(), make_schedule(), make_schedule()
    built_index.client.zrem(built_index.due_key, missing.pk)
    built_index.client.zadd(built_index.due_key, {str(late.pk): 9_999_999_999_999})
    Schedule.objects.filter(pk=paused.pk).update(enabled=False)  # its entry is orphaned

    report = check_drift(built_index, sample=100)

    assert not report.ok
    assert report.rows_indexable == len(healthy) + 2
    assert report.entries_due == len(healthy) + 2
    assert report.late_or_missing == sorted([missing.pk, late.pk])
    assert report.early_or_orphaned == [paused.pk]
    assert "2 late or missing" in report.summary()


def test_the_last_drift_check_is_kept_for_every_scheduler_to_report(
    built_index: DueIndex,
) -> None:
    assert built_index.control.drift_record() is None
    missing = make_schedule()
    built_index.client.zrem(built_index.due_key, missing.pk)
    before_ms = built_index.now_ms()
    record_drift(built_index, check_drift(built_index))
    record = built_index.control.drift_record()
    assert record is not None
    assert record["late_or_missing"] == 1
    assert record["early_or_orphaned"] == 0
    assert record["checked_at_ms"] >= before_ms
    # The scheduler that takes the drift chore's turn keeps it too.
    built_index.client.delete(built_index.control.drift_key)
    Worker(worker_id="drift").chores.drift_check()
    kept = built_index.control.drift_record()
    assert kept is not None
    assert kept["late_or_missing"] == 1
    built_index.drop()
    assert built_index.control.drift_record() is None  # one of the index's keys


# -- Redis that may evict the index -----------------------------------------------------------


def test_an_evicting_maxmemory_policy_is_warned_about(
    private_redis: RedisServer, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = private_redis.client()
    client.config_set("maxmemory-policy", "allkeys-lru")
    ids = [m.id for m in check_index(databases=["default"])]
    assert "schedulinator.W012" in ids
    Worker(once=True).run()  # also said when a scheduler starts
    assert "maxmemory-policy is 'allkeys-lru'" in caplog.text

    client.config_set("maxmemory-policy", "volatile-lru")  # only keys with a TTL: fine
    assert "schedulinator.W012" not in [m.id for m in check_index(databases=["default"])]
