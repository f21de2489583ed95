"""The change log and the settings version, outside the admin and the API (which have their
own tests): ``manage.py schedule`` records who did what, the scheduler's automatic pause is
recorded as the scheduler's, and firing a schedule leaves its version alone, so an edit never
conflicts with a schedule that merely fired."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from django_schedulinator import services
from django_schedulinator.models import Schedule, ScheduleChange
from django_schedulinator.services import Origin, changelog

from .support.admin_pages import change_url, edit_data
from .support.commits import APIClient, Client
from .support.schedules import make_schedule
from .support.simulation import START, Simulation

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)  # a scheduler's threads: real commits
def test_firing_advances_the_revision_but_not_the_version(sim: Simulation) -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1))
    before = Schedule.objects.get(pk=schedule.pk)
    sim.run_until(START + timedelta(minutes=3))
    after = Schedule.objects.get(pk=schedule.pk)

    assert after.run_count >= 2
    assert after.revision > before.revision  # each advance guards the index
    assert after.version == before.version  # no edit happened


def test_each_change_of_the_settings_bumps_the_version() -> None:
    schedule = make_schedule()
    assert schedule.version == 1
    schedule.args = ["edited"]
    schedule.save()  # a direct save of a setting moves the version too
    assert schedule.version == 2
    services.pause(schedule, "maintenance")
    assert Schedule.objects.get(pk=schedule.pk).version == 3
    services.resume(schedule)
    assert Schedule.objects.get(pk=schedule.pk).version == 4


@pytest.mark.django_db(transaction=True)  # a scheduler's threads: real commits
def test_the_automatic_pause_is_recorded_as_the_schedulers(sim: Simulation) -> None:
    schedule = make_schedule(
        kind="interval", interval=timedelta(minutes=1), task="tests.boom", pause_after_failures=2
    )
    sim.run_until(START + timedelta(minutes=5))

    entry = ScheduleChange.objects.get(schedule=schedule)
    assert entry.source == ScheduleChange.Source.SCHEDULER
    assert entry.action == ScheduleChange.Action.PAUSED
    assert entry.actor is None
    assert entry.changes["enabled"] == [True, False]
    assert entry.version == Schedule.objects.get(pk=schedule.pk).version == 2


def test_the_schedule_command_records_its_actions() -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1))
    call_command("schedule", "pause", schedule.name, "--note", "disk full")
    call_command("schedule", "resume", schedule.name)
    call_command("schedule", "run-now", schedule.name)

    entries = list(ScheduleChange.objects.filter(schedule=schedule).order_by("at", "id"))
    assert [(e.source, e.action) for e in entries] == [
        ("command", "paused"),
        ("command", "resumed"),
        ("command", "run_now"),
    ]
    assert entries[0].changes == {"note": "disk full"}
    assert entries[2].changes["key"].startswith(f"{schedule.pk}:")


def test_a_refused_action_records_nothing() -> None:
    schedule = make_schedule()
    with pytest.raises(Exception, match="at most 500"):
        services.pause(schedule, "x" * 501)
    call_command("schedule", "pause", schedule.name)
    call_command("schedule", "pause", schedule.name)  # already paused: nothing new

    assert ScheduleChange.objects.filter(schedule=schedule).count() == 1


def test_the_log_outlives_the_schedule_and_diffs_as_json() -> None:
    schedule = make_schedule(kind="interval", interval=timedelta(minutes=1))
    before = changelog.snapshot(schedule)
    schedule.interval = timedelta(minutes=2)
    schedule.next_run_at = schedule.first_run_at(timezone.now())  # a direct save re-times itself
    schedule.save()
    changes = changelog.diff(before, changelog.snapshot(schedule))
    assert changes == {"interval": [60.0, 120.0]}

    origin = Origin(None, ScheduleChange.Source.COMMAND)
    changelog.record(schedule, origin, ScheduleChange.Action.CHANGED, changes)
    name = schedule.name
    changelog.record(schedule, origin, ScheduleChange.Action.DELETED)
    schedule.delete()

    entries = ScheduleChange.objects.filter(schedule_name=name)
    assert entries.count() == 2
    assert all(entry.schedule_id is None for entry in entries)


# -- a read-replica router: what must see this transaction's writes reads the write database


@pytest.fixture
def replica_router(settings: Any) -> None:
    settings.DATABASE_ROUTERS = ["tests.support.routers.ReadReplicaRouter"]


@pytest.mark.django_db(transaction=True, databases=["default", "replica"])  # a mirror: real commits
def test_an_admin_edit_is_recorded_with_a_read_replica_router(replica_router: None) -> None:
    schedule = make_schedule(kind="cron", cron="0 3 * * *")
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "a@example.com", None))
    response = client.post(change_url(schedule), edit_data(schedule, 1, cron="0 4 * * *"))
    assert response.status_code == 302, response.content
    entry = ScheduleChange.objects.using("default").get(schedule=schedule)
    assert entry.action == ScheduleChange.Action.CHANGED
    assert entry.changes["cron"] == ["0 3 * * *", "0 4 * * *"]
    assert entry.version == 2


@pytest.mark.django_db(transaction=True, databases=["default", "replica"])  # a mirror: real commits
def test_an_api_edit_records_its_version_with_a_read_replica_router(replica_router: None) -> None:
    schedule = make_schedule(kind="cron", cron="0 3 * * *")
    api = APIClient()
    api.force_authenticate(User.objects.create_superuser("admin", "a@example.com", None))
    url = f"/api/schedulinator/schedules/{schedule.pk}/"
    response = api.patch(url, {"cron": "0 4 * * *"}, format="json", HTTP_IF_MATCH='"1"')
    assert response.status_code == 200, response.content
    assert (response.json()["version"], response.headers["ETag"]) == (2, '"2"')
    entry = ScheduleChange.objects.using("default").get(schedule=schedule)
    assert (entry.action, entry.version) == (ScheduleChange.Action.CHANGED, 2)
    assert entry.changes == {"cron": ["0 3 * * *", "0 4 * * *"]}


@pytest.mark.django_db(transaction=True, databases=["default", "replica"])  # a mirror: real commits
def test_a_save_inside_a_transaction_reads_its_own_version_with_a_read_replica_router(
    replica_router: None,
) -> None:
    schedule = make_schedule(kind="cron", cron="0 3 * * *")
    with transaction.atomic(using="default"):
        schedule.args = ["edited"]
        schedule.save()
        assert schedule.version == 2
        schedule.refresh_from_db()
        assert schedule.args == ["edited"]
