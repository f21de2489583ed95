"""The REST API end to end: DRF's APIClient against the real views, database and Redis.

What it proves:

* who may do what: anonymous users, staff without permissions and non-staff users with
  every permission get no data and change nothing; staff with exactly the permissions an
  endpoint needs get through; the permission classes come from the settings per request;
* writes are validated by the model's own rules, each error names its field, and a refused
  write leaves no row, no due-index entry and no change-log entry behind;
* optimistic concurrency: ETag / If-Match (412), a body ``version`` (409), no precondition
  (428), a schedule firing meanwhile is not a conflict, and an update that changes nothing
  does not bump the version; an action never undoes an edit made since it was looked up;
* pagination (page numbers for schedules, cursors for runs and changes), filters, search;
* the actions (pause, resume, run now, backfill, preview, resync), the ledger, the change
  log, the index health (503 when Redis is unreachable) and the served schema.

The last section pins the edges that were server errors, found by fuzzing and fixed.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.db.models import F
from django.utils import timezone
from rest_framework.permissions import IsAuthenticated

from django_schedulinator import services
from django_schedulinator.conf import MAX_JSON_DEPTH, app_settings
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Calendar, Run, Schedule, ScheduleChange
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.services import Origin, changelog
from django_schedulinator.timing import to_ms

from .support.commits import APIClient
from .support.heartbeats import beat
from .support.processes import ROOT, subprocess_env
from .support.redis_server import lose_redis
from .support.rule_work import RuleWork
from .support.schedules import make_schedule
from .support.walks import NEVER, NEVER_DENSE
from .test_ical import GOOGLE, SECONDLY

pytestmark = pytest.mark.django_db

API = "/api/schedulinator/"
NEW: dict[str, Any] = {
    "name": "nightly",
    "task": "tests.record",
    "kind": "cron",
    "cron": "0 3 * * *",
    "timezone": "Europe/Berlin",
}
VIEW = "django_schedulinator.view_schedule"
ADD = "django_schedulinator.add_schedule"
CHANGE = "django_schedulinator.change_schedule"
DELETE = "django_schedulinator.delete_schedule"
VIEW_RUN = "django_schedulinator.view_run"
VIEW_CHANGES = "django_schedulinator.view_schedulechange"
VIEW_OPERATIONS = "django_schedulinator.view_operations"
REPORT_RUN = "django_schedulinator.report_run"
CALENDAR_PERMS = {
    verb: f"django_schedulinator.{verb}_calendar" for verb in ("view", "add", "change", "delete")
}
ALL_PERMS = (VIEW, ADD, CHANGE, DELETE, VIEW_RUN, VIEW_CHANGES, VIEW_OPERATIONS, REPORT_RUN,
             *CALENDAR_PERMS.values())  # fmt: skip
PAST = datetime(2025, 1, 1, tzinfo=UTC)
POSTGRES = django_settings.DB_VENDOR == "postgres"


# -- helpers and fixtures -------------------------------------------------------------------


def make_user(name: str, *perms: str, staff: bool = True, active: bool = True) -> User:
    # No password: hashing one takes longer than most of these tests (they force_authenticate).
    user = User.objects.create_user(name, is_staff=staff, is_active=active)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return User.objects.get(pk=user.pk)  # a fresh instance: no stale permission cache


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def admin() -> User:
    return User.objects.create_superuser("admin", "admin@example.com", None)


@pytest.fixture
def api(admin: User) -> APIClient:
    return client_for(admin)


def create(api: APIClient, **overrides: Any) -> dict[str, Any]:
    response = api.post(f"{API}schedules/", {**NEW, **overrides}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def add_run(schedule: Schedule, at: datetime, **fields: Any) -> Run:
    """A ledger row, as the scheduler writes them."""
    fields.setdefault("claimed_at", at)
    fields.setdefault("worker_id", "tests")
    return Run.objects.create(
        schedule=schedule,
        scheduled_for=at,
        task=schedule.task,
        args=schedule.args,
        kwargs=schedule.kwargs,
        **fields,
    )


def etag_of(response: Any) -> str:
    return response.headers["ETag"]


@pytest.fixture
def world(admin: User) -> dict[str, int]:
    """One schedule, one run of it and one change-log entry, for the permission tests."""
    schedule = make_schedule(**{**NEW, "name": "existing"})
    run = add_run(schedule, PAST)
    change = changelog.record(schedule, Origin(admin, "admin"), ScheduleChange.Action.CREATED)
    calendar = Calendar.objects.create(name="existing")
    return {
        "s": schedule.pk, "r": run.pk, "c": change.pk, "k": run.idempotency_key, "cal": calendar.pk
    }  # fmt: skip


# (method, path, body): every endpoint; {s}, {r}, {c}: the ids of the world fixture.
ENDPOINTS: dict[str, tuple[str, str, Any]] = {
    "list": ("get", "schedules/", None),
    "retrieve": ("get", "schedules/{s}/", None),
    "create": ("post", "schedules/", {**NEW, "name": "another"}),
    "update": ("put", "schedules/{s}/", {**NEW, "name": "existing", "version": 1}),
    "partial_update": ("patch", "schedules/{s}/", {"cron": "0 4 * * *", "version": 1}),
    "delete": ("delete", "schedules/{s}/", None),
    "pause": ("post", "schedules/{s}/pause/", {"note": "why"}),
    "resume": ("post", "schedules/{s}/resume/", {}),
    "run_now": ("post", "schedules/{s}/run-now/", {}),
    "backfill": (
        "post",
        "schedules/{s}/backfill/",
        {"start": "2025-01-01T00:00:00Z", "end": "2025-01-02T00:00:00Z"},
    ),
    "resync": ("post", "schedules/{s}/resync/", None),
    "preview": ("get", "schedules/{s}/preview/", None),
    "preview_timing": ("post", "schedules/preview/", {"cron": "0 3 * * *", "timezone": "UTC"}),
    "runs": ("get", "runs/", None),
    "run": ("get", "runs/{r}/", None),
    "changes": ("get", "changes/", None),
    "change": ("get", "changes/{c}/", None),
    "index": ("get", "index/", None),
    "schedulers": ("get", "schedulers/", None),
    "status": ("get", "status/?drift=false", None),
    "schema": ("get", "schema/?format=json", None),
    "report": ("post", "runs/report/", {"key": "{k}", "status": "succeeded"}),
    "calendars": ("get", "calendars/", None),
    "calendar": ("get", "calendars/{cal}/", None),
    "calendar_create": ("post", "calendars/", {"name": "another", "days": [{"day": "2099-01-01"}]}),
    "calendar_update": ("patch", "calendars/{cal}/", {"description": "closures"}),
    "calendar_delete": ("delete", "calendars/{cal}/", None),
}
# What each endpoint needs with the default permission class (besides being active staff).
NEEDS: dict[str, tuple[str, ...]] = {
    "list": (VIEW,),
    "retrieve": (VIEW,),
    "create": (ADD,),
    "update": (CHANGE,),
    "partial_update": (CHANGE,),
    "delete": (DELETE,),
    "pause": (VIEW, CHANGE),
    "resume": (VIEW, CHANGE),
    "run_now": (VIEW, CHANGE),
    "backfill": (VIEW, CHANGE),
    "resync": (VIEW, CHANGE),
    "preview": (VIEW,),
    "preview_timing": (VIEW,),
    "runs": (VIEW_RUN,),
    "run": (VIEW_RUN,),
    "changes": (VIEW_CHANGES,),
    "change": (VIEW_CHANGES,),
    "index": (VIEW_OPERATIONS,),
    "schedulers": (VIEW_OPERATIONS,),
    "status": (VIEW_OPERATIONS,),
    "schema": (),
    "report": (REPORT_RUN,),
    "calendars": (CALENDAR_PERMS["view"],),
    "calendar": (CALENDAR_PERMS["view"],),
    "calendar_create": (CALENDAR_PERMS["add"],),
    "calendar_update": (CALENDAR_PERMS["change"],),
    "calendar_delete": (CALENDAR_PERMS["delete"],),
}
WRITES = ["create", "update", "partial_update", "delete", "pause", "resume", "run_now"]
WRITES += ["backfill", "resync", "report", "calendar_create", "calendar_update", "calendar_delete"]


def call(client: APIClient, endpoint: str, ids: dict[str, int]) -> Any:
    method, path, body = ENDPOINTS[endpoint]
    if isinstance(body, dict):
        body = {k: v.format(**ids) if isinstance(v, str) else v for k, v in body.items()}
    return getattr(client, method)(API + path.format(**ids), body, format="json")


def snapshot_of_everything() -> tuple[Any, ...]:
    """What a refused request must leave as it was."""
    return (
        list(Schedule.objects.order_by("pk").values_list("pk", "name", "enabled", "version")),
        Run.objects.count(),
        ScheduleChange.objects.count(),
        list(Calendar.objects.order_by("pk").values_list("pk", "name", "description", "stamp")),
    )


# -- permissions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "endpoint"),
    [
        (who, endpoint)
        for who in ("anonymous", "staff without permissions", "non-staff")
        for endpoint in ENDPOINTS
        if not (who == "staff without permissions" and endpoint == "schema")  # staff only
    ],
)
def test_refused_users_get_no_data_and_change_nothing(
    world: dict[str, int], who: str, endpoint: str
) -> None:
    user = {
        "anonymous": lambda: None,
        "staff without permissions": lambda: make_user("staff"),
        # Every permission, but not staff: the default class wants both.
        "non-staff": lambda: make_user("outsider", *ALL_PERMS, staff=False),
    }[who]()
    before = snapshot_of_everything()
    response = call(client_for(user), endpoint, world)
    # Anonymous: 401 or 403 depending on the authentication classes (session first: 403).
    assert response.status_code in ((403,) if user else (401, 403)), response.content
    assert set(response.json()) == {"detail"}  # an explanation, no data
    assert snapshot_of_everything() == before


def test_inactive_staff_with_permissions_is_refused(world: dict[str, int]) -> None:
    user = make_user("gone", *ALL_PERMS, active=False)
    assert call(client_for(user), "list", world).status_code == 403


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_staff_with_exactly_the_needed_permissions_get_through(
    world: dict[str, int], endpoint: str
) -> None:
    user = make_user("exact", *NEEDS[endpoint])
    response = call(client_for(user), endpoint, world)
    assert 200 <= response.status_code < 300, response.content


@pytest.mark.parametrize("endpoint", ["pause", "resume", "run_now", "backfill", "resync"])
@pytest.mark.parametrize("perm", [VIEW, CHANGE])
def test_actions_need_both_view_and_change(world: dict[str, int], endpoint: str, perm: str) -> None:
    before = snapshot_of_everything()
    response = call(client_for(make_user("half", perm)), endpoint, world)
    assert response.status_code == 403
    assert snapshot_of_everything() == before


@pytest.mark.parametrize("endpoint", WRITES)
def test_view_only_staff_cannot_write_or_run_actions(world: dict[str, int], endpoint: str) -> None:
    viewer = make_user("viewer", VIEW, VIEW_RUN, VIEW_CHANGES, VIEW_OPERATIONS)
    before = snapshot_of_everything()
    assert call(client_for(viewer), endpoint, world).status_code == 403
    assert snapshot_of_everything() == before


def test_permission_classes_are_read_from_the_settings_per_request(
    world: dict[str, int], settings: Any
) -> None:
    plain = client_for(make_user("plain", staff=False))  # no permissions, not staff
    assert call(plain, "list", world).status_code == 403
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "API_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    }
    assert call(plain, "list", world).status_code == 200
    assert call(plain, "index", world).status_code == 200
    assert call(client_for(None), "list", world).status_code in (401, 403)  # nor anonymous


# -- create and validation ------------------------------------------------------------------


def test_create_returns_201_with_etag_and_location_and_indexes_it(
    api: APIClient, admin: User, index: DueIndex
) -> None:
    response = api.post(f"{API}schedules/", NEW, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert etag_of(response) == '"1"'
    assert body["version"] == 1
    assert response.headers["Location"] == f"http://testserver{API}schedules/{body['id']}/"
    assert api.get(response.headers["Location"]).json()["name"] == "nightly"
    schedule = Schedule.objects.get(pk=body["id"])
    assert index.scores([schedule.pk]) == {schedule.pk: to_ms(schedule.due_at)}
    entry = ScheduleChange.objects.get(schedule=schedule)
    assert (entry.action, entry.source, entry.actor, entry.version) == ("created", "api", admin, 1)
    assert entry.changes["cron"] == [None, "0 3 * * *"]


@pytest.mark.parametrize(
    "interval", [3600, 3600.0, "3600", "01:00:00", "PT1H", "0 01:00:00", "P0DT01H00M00S"]
)
def test_an_interval_may_be_seconds_hh_mm_ss_or_iso_8601(api: APIClient, interval: Any) -> None:
    body = create(api, kind="interval", cron="", interval=interval)
    assert body["interval"] == 3600


def test_durations_round_trip_through_a_client_as_seconds(api: APIClient) -> None:
    """A client reads durations as a number of seconds (a day or more included), sends
    back what it read, and gets the same durations: nothing changed, nothing recorded."""
    sid = create(
        api,
        kind="interval",
        cron="",
        interval="P1DT2H30M",
        jitter="00:00:01.5",
        catch_up_window=2 * 86400,
        grace="PT10M",
    )["id"]
    read = api.get(f"{API}schedules/{sid}/")
    body = read.json()
    assert timedelta(seconds=body["interval"]) == timedelta(days=1, hours=2, minutes=30)
    assert timedelta(seconds=body["jitter"]) == timedelta(seconds=1.5)
    assert timedelta(seconds=body["catch_up_window"]) == timedelta(days=2)
    assert body["grace"] == 600
    assert isinstance(body["interval"], int)  # whole seconds are an integer
    sent = api.put(
        f"{API}schedules/{sid}/", body, format="json", HTTP_IF_MATCH=read.headers["ETag"]
    )
    assert sent.status_code == 200, sent.content
    keys = ("interval", "jitter", "catch_up_window", "grace", "version")
    assert {k: sent.json()[k] for k in keys} == {
        "interval": 95400,
        "jitter": 1.5,
        "catch_up_window": 172800,
        "grace": 600,
        "version": 1,
    }
    assert not ScheduleChange.objects.filter(action="changed").exists()
    row = Schedule.objects.get(pk=sid)
    assert row.interval == timedelta(days=1, hours=2, minutes=30)


def test_the_schema_describes_durations_as_seconds_and_what_requests_may_send(
    api: APIClient,
) -> None:
    components = api.get(f"{API}schema/?format=json").json()["components"]["schemas"]
    for name in ("interval", "jitter", "catch_up_window", "grace"):
        answer = components["Schedule"]["properties"][name]
        assert answer["type"] == "number"
        assert answer["nullable"] is True
        request = components["ScheduleRequest"]["properties"][name]
        assert sorted(alt["type"] for alt in request["oneOf"]) == ["number", "string"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"timezone": "Nowhere/Land"}, "timezone"),
        ({"task": "os.system"}, "task"),
        ({"args": {"a": 1}}, "args"),
        ({"args": "[1, 2]"}, "args"),  # a string holding JSON is not a list
        ({"kwargs": [1]}, "kwargs"),
        ({"kwargs": {"occurrence": 1}}, "kwargs"),  # reserved: the scheduler passes it
        ({"kind": "interval", "interval": 10**12}, "interval"),  # past timedelta's range
        ({"kind": "interval", "interval": "P99999999D"}, "interval"),
        ({"kind": "interval", "interval": 0}, "interval"),
        ({"kind": "once", "run_at": "9999-12-31T23:59:59-23:00"}, "run_at"),  # past UTC's end
        ({"kind": "once", "run_at": "2020-01-01T00:00:00Z"}, "run_at"),  # a one-off in the past
        ({"start_at": "0001-01-01T00:00:00+01:00"}, "start_at"),  # before UTC's start
        ({"name": "   "}, "name"),
        ({"name": "two\nlines"}, "name"),
        ({"max_runs": 0}, "max_runs"),
        ({"jitter": "2 00:00:00"}, "jitter"),
        ({"grace": 0}, "grace"),
        ({"grace": "P32D"}, "grace"),
        ({"grace": 60, "jitter": 60}, "grace"),
        ({"kind": "sometimes"}, "kind"),
        ({"dispatcher": "https://attacker.example/"}, "dispatcher"),  # an alias, never a URL
        ({"dispatch_options": {"queue": "x"}}, "dispatch_options"),  # inline takes none
        ({"dispatch_options": ["x"]}, "dispatch_options"),
    ],
)
def test_invalid_input_names_the_field_and_writes_nothing(
    api: APIClient, index: DueIndex, overrides: dict[str, Any], field: str
) -> None:
    response = api.post(f"{API}schedules/", {**NEW, **overrides}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Schedule.objects.exists()
    assert index.counts() == (0, 0)
    assert not ScheduleChange.objects.exists()


def test_a_duplicate_name_is_an_error_of_the_name(api: APIClient) -> None:
    create(api)
    response = api.post(f"{API}schedules/", {**NEW, "cron": "0 4 * * *"}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["name"]
    assert Schedule.objects.count() == 1
    assert ScheduleChange.objects.count() == 1


def test_an_invalid_edit_changes_nothing(api: APIClient, index: DueIndex) -> None:
    sid = create(api)["id"]
    before = index.scores([sid])
    response = api.patch(
        f"{API}schedules/{sid}/", {"cron": "nonsense"}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert response.status_code == 400
    assert "cron" in response.json()
    schedule = Schedule.objects.get(pk=sid)
    assert (schedule.cron, schedule.version) == ("0 3 * * *", 1)
    assert index.scores([sid]) == before
    assert list(ScheduleChange.objects.values_list("action", flat=True)) == ["created"]


# -- optimistic concurrency -----------------------------------------------------------------


def test_get_returns_the_version_as_etag_and_the_current_state_always(api: APIClient) -> None:
    sid = create(api)["id"]
    response = api.get(f"{API}schedules/{sid}/")
    assert etag_of(response) == '"1"'
    # Firing changes what GET shows (next run, run count) but not the version: an ETag of
    # the settings must not answer If-None-Match with a stale 304.
    Schedule.objects.filter(pk=sid).update(run_count=F("run_count") + 1)
    again = api.get(f"{API}schedules/{sid}/", HTTP_IF_NONE_MATCH='"1"')
    assert again.status_code == 200
    assert (etag_of(again), again.json()["run_count"]) == ('"1"', 1)


def test_an_update_that_changes_nothing_keeps_the_version_and_records_nothing(
    api: APIClient,
) -> None:
    body = create(api)
    sid = body["id"]
    same = {k: body[k] for k in ("name", "task", "kind", "cron", "timezone")}
    response = api.put(f"{API}schedules/{sid}/", same, format="json", HTTP_IF_MATCH='"1"')
    assert response.status_code == 200, response.content
    assert (etag_of(response), response.json()["version"]) == ('"1"', 1)
    assert (
        api.patch(f"{API}schedules/{sid}/", {"cron": "0 3 * * *", "version": 1}).json()["version"]
        == 1
    )
    assert list(ScheduleChange.objects.values_list("action", flat=True)) == ["created"]


@pytest.mark.parametrize(("sent", "status"), [("01", 200), (" 1", 200), ("one", 400), (1.5, 400)])
def test_the_body_version_is_compared_as_a_number(api: APIClient, sent: Any, status: int) -> None:
    sid = create(api)["id"]
    response = api.patch(
        f"{API}schedules/{sid}/", {"cron": "0 4 * * *", "version": sent}, format="json"
    )
    assert response.status_code == status, response.content
    if status == 400:
        assert "version" in response.json()


def test_a_pause_never_undoes_an_edit_made_since_the_schedule_was_read(
    api: APIClient, index: DueIndex
) -> None:
    """The action works on the row as it is when it writes, not on the copy it looked up:
    an edit that committed in between survives (it used to be written back over)."""
    sid = create(api)["id"]
    stale = Schedule.objects.get(pk=sid)  # what a concurrent request looked up
    edited = api.patch(f"{API}schedules/{sid}/", {"cron": "0 5 * * *", "version": 1})
    assert edited.status_code == 200, edited.content
    services.pause(stale, "why", origin=Origin(None, "api"))
    row = Schedule.objects.get(pk=sid)
    assert (row.cron, row.enabled, row.pause_note, row.version) == ("0 5 * * *", False, "why", 3)
    # The instance takes what the pause wrote, and keeps its own (stale) settings.
    assert (stale.enabled, stale.pause_note, stale.version) == (False, "why", 3)
    assert stale.cron == "0 3 * * *"
    services.resume(Schedule.objects.get(pk=sid))
    assert Schedule.objects.get(pk=sid).cron == "0 5 * * *"
    assert index.scores([sid]) == {sid: to_ms(Schedule.objects.get(pk=sid).due_at)}


def test_an_action_saves_only_itself_and_keeps_unsaved_edits_of_the_instance() -> None:
    schedule = make_schedule(kind="cron", cron="0 3 * * *")
    schedule.cron = "0 4 * * *"  # edited, not saved
    services.pause(schedule, "why")
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.cron, row.enabled) == ("0 3 * * *", False)  # only the pause was written
    assert (schedule.cron, schedule.enabled, schedule.version) == ("0 4 * * *", False, 2)
    services.update(schedule)  # now the edit, and the pause stays
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.cron, row.enabled, row.pause_note, row.version) == ("0 4 * * *", False, "why", 3)


def test_a_run_now_runs_the_arguments_the_row_has(api: APIClient) -> None:
    sid = create(api, args=["old"])["id"]
    stale = Schedule.objects.get(pk=sid)
    api.patch(f"{API}schedules/{sid}/", {"args": ["new"], "version": 1}, format="json")
    run = services.run_now(stale)
    assert run.args == ["new"]


def test_pausing_a_paused_schedule_with_another_note_is_recorded(api: APIClient) -> None:
    sid = create(api)["id"]
    url = f"{API}schedules/{sid}/pause/"
    assert api.post(url, {"note": "first"}, format="json").json()["version"] == 2
    assert api.post(url, {"note": "first"}, format="json").json()["version"] == 2  # no change
    body = api.post(url, {"note": "second"}, format="json").json()
    assert (body["pause_note"], body["version"]) == ("second", 3)
    notes = ScheduleChange.objects.filter(action="paused").order_by("id")
    assert [entry.changes["note"] for entry in notes] == ["first", "second"]


def test_an_update_with_the_current_etag_is_applied_recorded_and_indexed(
    api: APIClient, admin: User, index: DueIndex
) -> None:
    sid = create(api)["id"]
    response = api.put(
        f"{API}schedules/{sid}/", {**NEW, "cron": "0 4 * * *"}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert response.status_code == 200, response.content
    assert etag_of(response) == '"2"'
    assert response.json()["version"] == 2
    schedule = Schedule.objects.get(pk=sid)
    assert schedule.cron == "0 4 * * *"
    assert index.scores([sid]) == {sid: to_ms(schedule.due_at)}
    entry = ScheduleChange.objects.get(action="changed")
    assert (entry.actor, entry.source, entry.version) == (admin, "api", 2)
    assert entry.changes == {"cron": ["0 3 * * *", "0 4 * * *"]}


@pytest.mark.parametrize(
    ("headers", "body_version", "status"),
    [
        ({"HTTP_IF_MATCH": '"1"'}, None, 200),
        ({"HTTP_IF_MATCH": "*"}, None, 200),
        ({"HTTP_IF_MATCH": '"5", "1"'}, None, 200),  # a list of tags: any one matches
        ({"HTTP_IF_MATCH": '"2"'}, None, 412),
        ({}, 1, 200),
        ({}, 2, 409),
        ({}, None, 428),
    ],
)
@pytest.mark.parametrize("method", ["put", "patch"])
def test_edit_preconditions(
    api: APIClient,
    method: str,
    headers: dict[str, str],
    body_version: int | None,
    status: int,
) -> None:
    sid = create(api)["id"]
    body: dict[str, Any] = (
        {**NEW, "cron": "0 4 * * *"} if method == "put" else {"cron": "0 4 * * *"}
    )
    if body_version is not None:
        body["version"] = body_version
    response = getattr(api, method)(f"{API}schedules/{sid}/", body, format="json", **headers)
    assert response.status_code == status, response.content
    expected = ("0 4 * * *", 2) if status == 200 else ("0 3 * * *", 1)
    schedule = Schedule.objects.get(pk=sid)
    assert (schedule.cron, schedule.version) == expected
    assert ScheduleChange.objects.filter(action="changed").count() == (status == 200)


@pytest.mark.django_db(transaction=True)  # a scheduler's threads: real commits
def test_a_schedule_firing_meanwhile_does_not_make_the_etag_stale(
    api: APIClient, built_index: DueIndex
) -> None:
    sid = create(api, task="tests.noop", kind="interval", cron="", interval=3600)["id"]
    etag = etag_of(api.get(f"{API}schedules/{sid}/"))
    # Due now, as if its time had come; then a real scheduler pass fires and advances it.
    due = (timezone.now() - timedelta(seconds=5)).replace(microsecond=0)
    Schedule.objects.filter(pk=sid).update(
        fired_through=None, next_run_at=due, due_at=due, revision=F("revision") + 1
    )
    assert api.post(f"{API}schedules/{sid}/resync/").status_code == 200
    revision = Schedule.objects.get(pk=sid).revision
    worker = Worker(worker_id="api-tests", once=True)
    try:
        worker.step()
    finally:
        worker.dispatcher.close()
    fired = Schedule.objects.get(pk=sid)
    assert Run.objects.filter(schedule_id=sid, scheduled_for=due).exists()
    assert fired.revision > revision
    assert fired.next_run_at > due  # it advanced
    assert etag_of(api.get(f"{API}schedules/{sid}/")) == etag  # the version did not change
    response = api.patch(
        f"{API}schedules/{sid}/", {"pause_note": "edited"}, format="json", HTTP_IF_MATCH=etag
    )
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("precondition", ["if-match", "version"])
def test_of_two_edits_from_the_same_version_the_second_is_refused(
    admin: User, precondition: str
) -> None:
    first, second = client_for(admin), client_for(make_user("bob", VIEW, CHANGE))
    sid = create(first)["id"]
    version = first.get(f"{API}schedules/{sid}/").json()["version"]  # both start from it

    def edit(client: APIClient, cron: str) -> Any:
        if precondition == "if-match":
            return client.patch(
                f"{API}schedules/{sid}/",
                {"cron": cron},
                format="json",
                HTTP_IF_MATCH=f'"{version}"',
            )
        return client.patch(
            f"{API}schedules/{sid}/", {"cron": cron, "version": version}, format="json"
        )

    assert edit(first, "0 4 * * *").status_code == 200
    assert edit(second, "0 5 * * *").status_code == (412 if precondition == "if-match" else 409)
    assert Schedule.objects.get(pk=sid).cron == "0 4 * * *"  # the second was not applied
    assert list(ScheduleChange.objects.filter(action="changed").values_list("actor_name")) == [
        ("admin",)
    ]


@pytest.mark.django_db(transaction=True)  # two threads, two connections: real commits
def test_two_edits_racing_from_the_same_version_let_exactly_one_through(admin: User) -> None:
    """At the same time, each in its own thread and database connection: the row lock
    makes the second wait for the first and see the new version. Without it both could
    read version 1 and both write, the second silently overwriting the first."""
    sid = create(client_for(admin))["id"]
    rounds = 8
    for n in range(rounds):
        version = Schedule.objects.get(pk=sid).version
        start = threading.Barrier(2)

        def edit(cron: str, version: int = version, start: threading.Barrier = start) -> int:
            try:
                start.wait()
                response = client_for(admin).patch(
                    f"{API}schedules/{sid}/", {"cron": cron}, HTTP_IF_MATCH=f'"{version}"'
                )
                return int(response.status_code)
            finally:
                connection.close()  # this thread's own connection

        with ThreadPoolExecutor(2) as pool:
            codes = sorted(pool.map(edit, [f"{n} 4 * * *", f"{n} 5 * * *"]))
        assert codes == [200, 412], f"round {n}: {codes}"
    schedule = Schedule.objects.get(pk=sid)
    assert schedule.version == 1 + rounds
    assert ScheduleChange.objects.filter(action="changed").count() == rounds


def test_delete_honours_if_match(api: APIClient, index: DueIndex) -> None:
    sid = create(api)["id"]
    response = api.delete(f"{API}schedules/{sid}/", HTTP_IF_MATCH='"2"')
    assert response.status_code == 412
    assert Schedule.objects.filter(pk=sid).exists()
    assert index.scores([sid])[sid] is not None

    assert api.delete(f"{API}schedules/{sid}/", HTTP_IF_MATCH='"1"').status_code == 204
    assert not Schedule.objects.filter(pk=sid).exists()
    assert index.scores([sid]) == {sid: None}
    entry = ScheduleChange.objects.get(action="deleted")
    assert (entry.schedule, entry.schedule_name) == (None, "nightly")  # kept after the row
    assert entry.changes["cron"] == ["0 3 * * *", None]


class NoObjectPermission(IsAuthenticated):
    """Lets users in, but refuses every object: edits and deletes must ask it too."""

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        return False


def test_edits_and_deletes_ask_the_object_permissions(world: dict[str, int], settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "API_PERMISSION_CLASSES": [f"{__name__}.NoObjectPermission"],
    }
    client = client_for(make_user("someone", staff=False))
    before = snapshot_of_everything()
    for endpoint in ("retrieve", "update", "partial_update", "delete", "pause", "run_now"):
        assert call(client, endpoint, world).status_code == 403, endpoint
    assert snapshot_of_everything() == before


class OwnSchedulesOnly(IsAuthenticated):
    """Each user sees only the schedules named after them: per object, and in SQL for lists."""

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        name = obj.name if isinstance(obj, Schedule) else obj.schedule.name
        return bool(name.startswith(request.user.username))

    def filter_schedules(self, request: Any, view: Any, queryset: Any) -> Any:
        return queryset.filter(name__startswith=request.user.username)


def test_lists_show_only_the_schedules_the_object_permissions_allow(
    world: dict[str, int], settings: Any
) -> None:
    """A schedule refused one by one is absent from every list: schedules, runs (filtered by
    schedule or not) and the change log; its run and change entries are 404."""
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "API_PERMISSION_CLASSES": [f"{__name__}.OwnSchedulesOnly"],
    }
    own = make_schedule(**{**NEW, "name": "bob-nightly", "args": ["bob's"]})
    own_run = add_run(own, PAST)
    changelog.record(own, Origin(None, "api"), ScheduleChange.Action.CREATED)
    hidden = world["s"]
    Schedule.objects.filter(pk=hidden).update(args=["secret"], kwargs={"token": "secret"})
    Run.objects.filter(pk=world["r"]).update(args=["secret"])
    bob = client_for(make_user("bob", staff=False))

    assert bob.get(f"{API}schedules/{hidden}/").status_code in (403, 404)
    listed = bob.get(f"{API}schedules/").json()
    assert [s["id"] for s in listed["results"]] == [own.pk]
    assert listed["count"] == 1
    assert bob.get(f"{API}schedules/?search=existing").json()["results"] == []
    assert bob.get(f"{API}runs/?schedule={hidden}").json()["results"] == []
    assert [r["id"] for r in bob.get(f"{API}runs/").json()["results"]] == [own_run.pk]
    assert bob.get(f"{API}runs/{world['r']}/").status_code in (403, 404)
    changes = bob.get(f"{API}changes/").json()["results"]
    assert [c["schedule"] for c in changes] == [own.pk]
    assert bob.get(f"{API}changes/{world['c']}/").status_code in (403, 404)
    assert bob.get(f"{API}changes/?schedule={hidden}").json()["results"] == []
    for endpoint in ("pause", "run_now", "preview", "delete"):
        assert call(bob, endpoint, world).status_code in (403, 404), endpoint
    # What the refused schedule holds appears in no answer.
    for path in ("schedules/", "runs/", "changes/", f"runs/?schedule={hidden}"):
        assert b"secret" not in bob.get(API + path).content, path


def test_a_permission_class_refusing_objects_without_a_list_filter_lists_nothing(
    world: dict[str, int], settings: Any
) -> None:
    """A class that refuses single schedules but cannot say which in SQL: the lists refuse
    too (403 that says why) rather than show what the detail view refuses."""
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "API_PERMISSION_CLASSES": [f"{__name__}.NoObjectPermission"],
    }
    client = client_for(make_user("someone", staff=False))
    assert call(client, "retrieve", world).status_code == 403
    for endpoint in ("list", "runs", "changes"):
        response = call(client, endpoint, world)
        assert response.status_code == 403, (endpoint, response.content)
        assert "filter_schedules" in response.json()["detail"]
    for endpoint in ("run", "change"):  # single objects: has_object_permission decides
        assert call(client, endpoint, world).status_code == 403
    response = client.get(f"{API}runs/?schedule={world['s']}")
    assert response.status_code == 403
    assert "existing" not in response.content.decode()


def test_a_schedule_whose_task_is_gone_can_still_be_edited(api: APIClient) -> None:
    """As in the model: a task no longer registered is checked only when it is being set."""
    sid = create(api)["id"]
    Schedule.objects.filter(pk=sid).update(task="gone.task")
    url = f"{API}schedules/{sid}/"
    patched = api.patch(url, {"cron": "0 4 * * *"}, format="json", HTTP_IF_MATCH='"1"')
    assert patched.status_code == 200, patched.content
    whole = {**NEW, "task": "gone.task", "cron": "0 5 * * *"}
    assert api.put(url, whole, format="json", HTTP_IF_MATCH='"2"').status_code == 200
    other = api.put(url, {**whole, "task": "other.gone"}, format="json", HTTP_IF_MATCH='"3"')
    assert other.status_code == 400
    assert "task" in other.json()
    row = Schedule.objects.get(pk=sid)
    assert (row.task, row.cron, row.version) == ("gone.task", "0 5 * * *", 3)


def test_delete_without_if_match_is_allowed(api: APIClient) -> None:
    sid = create(api)["id"]
    assert api.delete(f"{API}schedules/{sid}/").status_code == 204


# -- pagination, filters, search ------------------------------------------------------------


def test_schedules_are_paginated_by_page_number(api: APIClient) -> None:
    names = [f"s{n}" for n in range(7)]
    for name in names:
        create(api, name=name)
    seen: list[str] = []
    url: str | None = f"{API}schedules/?page_size=3"
    pages = []
    while url:
        page = api.get(url).json()
        assert page["count"] == 7
        pages.append(page)
        seen += [item["name"] for item in page["results"]]
        url = page["next"]
    assert [len(page["results"]) for page in pages] == [3, 3, 1]
    assert pages[0]["previous"] is None
    assert pages[1]["previous"] is not None
    assert seen == names  # ordered by name, each once
    assert api.get(f"{API}schedules/?page=4&page_size=3").status_code == 404


def test_page_size_is_capped_at_the_maximum(api: APIClient, settings: Any) -> None:
    for n in range(7):
        create(api, name=f"s{n}")
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "API_PAGE_SIZE": 2, "API_MAX_PAGE_SIZE": 5}
    assert len(api.get(f"{API}schedules/").json()["results"]) == 2
    assert len(api.get(f"{API}schedules/?page_size=500").json()["results"]) == 5


def test_runs_are_paginated_by_cursor_newest_first(api: APIClient) -> None:
    schedule = make_schedule(**{**NEW, "cron": "0 * * * *"})
    for hour in range(7):
        add_run(schedule, PAST + timedelta(hours=hour))
    ids: list[int] = []
    url: str | None = f"{API}runs/?page_size=3"
    pages = []
    while url:
        page = api.get(url).json()
        assert "count" not in page  # a cursor never counts the ledger
        pages.append(page)
        ids += [item["id"] for item in page["results"]]
        url = page["next"]
    assert [len(page["results"]) for page in pages] == [3, 3, 1]
    assert ids == sorted(Run.objects.values_list("pk", flat=True), reverse=True)
    back = api.get(pages[2]["previous"]).json()
    assert [item["id"] for item in back["results"]] == ids[3:6]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("kind=cron", ["berlin", "paused"]),
        ("kind=interval", ["hourly"]),
        ("enabled=false", ["paused"]),
        ("task=tests.noop", ["hourly"]),
        ("timezone=Europe/Berlin", ["berlin"]),
        ("overlap=skip", ["hourly"]),
        ("catch_up=all", ["paused"]),
        ("search=ber", ["berlin"]),
        ("search=noop", ["hourly"]),  # the task is searched too
        ("ordering=-name", ["paused", "hourly", "berlin"]),
        ("kind=cron&enabled=true", ["berlin"]),
    ],
)
def test_schedule_filters_and_search(api: APIClient, query: str, expected: list[str]) -> None:
    create(api, name="berlin")
    create(
        api,
        name="hourly",
        task="tests.noop",
        kind="interval",
        cron="",
        interval=3600,
        timezone="UTC",
        overlap="skip",
    )
    create(api, name="paused", timezone="UTC", catch_up="all", enabled=False)
    response = api.get(f"{API}schedules/?{query}")
    assert [item["name"] for item in response.json()["results"]] == expected


def test_an_invalid_filter_value_is_a_400(api: APIClient) -> None:
    response = api.get(f"{API}schedules/?kind=sometimes")
    assert response.status_code == 400
    assert "kind" in response.json()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=skipped", ["skipped"]),
        ("trigger=backfill", ["backfill"]),
        ("skip_reason=paused", ["skipped"]),
        ("task=tests.noop", ["other"]),
        ("scheduled_after=2025-01-01T02:00:00Z", ["other", "backfill"]),
        ("scheduled_before=2025-01-01T01:00:00%2B01:00", ["first"]),  # 00:00 UTC
        ("scheduled_after=2025-01-01T01:00:00Z&scheduled_before=2025-01-01T01:30:00Z", ["skipped"]),
    ],
)
def test_run_filters(api: APIClient, query: str, expected: list[str]) -> None:
    schedule = make_schedule(**NEW)
    other = make_schedule(**{**NEW, "name": "other", "task": "tests.noop"})
    add_run(schedule, PAST, note="first", status="succeeded")
    add_run(
        schedule, PAST + timedelta(hours=1), note="skipped", status="skipped", skip_reason="paused"
    )
    add_run(schedule, PAST + timedelta(hours=2), note="backfill", trigger="backfill")
    add_run(other, PAST + timedelta(hours=3), note="other")
    notes = [item["note"] for item in api.get(f"{API}runs/?{query}").json()["results"]]
    assert notes == expected
    by_schedule = api.get(f"{API}runs/?schedule={other.pk}").json()["results"]
    assert [item["note"] for item in by_schedule] == ["other"]


def test_missed_runs_are_marked_and_filtered(api: APIClient) -> None:
    """The marks of docs/alerts.md: a schedule's missed_at, and ?missed=true for those whose
    latest missed occurrence no run at or after it has succeeded since; a run's missed_at,
    and ?missed=true for the runs raised."""
    open_ = make_schedule("open", grace=timedelta(minutes=5))
    closed = make_schedule("closed", grace=timedelta(minutes=5))
    make_schedule("fine")
    raised = add_run(open_, PAST, status="failed", missed_at=PAST + timedelta(minutes=5))
    add_run(closed, PAST, status="dispatched", missed_at=PAST + timedelta(minutes=5))
    add_run(closed, PAST + timedelta(hours=1), status="succeeded")
    Schedule.objects.filter(pk__in=[open_.pk, closed.pk]).update(missed_at=PAST)

    body = api.get(f"{API}schedules/{open_.pk}/").json()
    assert (body["grace"], body["missed_at"]) == (300, "2025-01-01T00:00:00Z")

    def names(query: str) -> set[str]:
        return {s["name"] for s in api.get(f"{API}schedules/?{query}").json()["results"]}

    assert names("missed=true") == {"open"}
    assert names("missed=false") == {"closed", "fine"}
    missed_runs = api.get(f"{API}runs/?missed=true").json()["results"]
    assert len(missed_runs) == 2
    assert api.get(f"{API}runs/{raised.pk}/").json()["missed_at"] == "2025-01-01T00:05:00Z"
    assert len(api.get(f"{API}runs/?missed=false").json()["results"]) == 1
    paths = api.get(f"{API}schema/?format=json").json()["paths"]
    for path in ("schedules/", "runs/"):
        assert "missed" in {p["name"] for p in paths[f"{API}{path}"]["get"]["parameters"]}


def test_runs_list_and_retrieve(api: APIClient) -> None:
    sid = create(api)["id"]
    queued = api.post(f"{API}schedules/{sid}/run-now/", {}, format="json").json()
    listed = api.get(f"{API}runs/").json()["results"]
    assert [run["id"] for run in listed] == [queued["id"]]
    run = api.get(f"{API}runs/{queued['id']}/").json()
    assert run == listed[0]
    scheduled_for = datetime.fromisoformat(run["scheduled_for"])
    assert run["schedule"] == sid
    assert run["idempotency_key"] == f"{sid}:{to_ms(scheduled_for)}"
    assert api.get(f"{API}runs/{queued['id'] + 1000}/").status_code == 404


# -- actions --------------------------------------------------------------------------------


def test_pause_with_a_note(api: APIClient, admin: User, index: DueIndex) -> None:
    sid = create(api)["id"]
    response = api.post(f"{API}schedules/{sid}/pause/", {"note": "  maintenance  "}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["enabled"], body["pause_note"], body["version"]) == (False, "maintenance", 2)
    assert body["paused_at"] is not None
    assert etag_of(response) == '"2"'
    assert index.scores([sid]) == {sid: None}  # out of the index
    entry = ScheduleChange.objects.get(action="paused")
    assert (entry.actor, entry.source, entry.changes) == (admin, "api", {"note": "maintenance"})


def test_a_pause_note_longer_than_the_field_is_a_400(api: APIClient) -> None:
    sid = create(api)["id"]
    response = api.post(f"{API}schedules/{sid}/pause/", {"note": "x" * 501}, format="json")
    assert response.status_code == 400
    assert "note" in response.json()
    assert Schedule.objects.get(pk=sid).enabled


def test_resume(api: APIClient, index: DueIndex) -> None:
    sid = create(api)["id"]
    api.post(f"{API}schedules/{sid}/pause/", {"note": "why"}, format="json")
    response = api.post(f"{API}schedules/{sid}/resume/", {}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["enabled"], body["pause_note"], body["paused_at"]) == (True, "", None)
    schedule = Schedule.objects.get(pk=sid)
    assert index.scores([sid]) == {sid: to_ms(schedule.due_at)}
    assert ScheduleChange.objects.get(action="resumed").changes == {"catch_up": False}


def test_run_now_queues_a_pending_run(api: APIClient, admin: User) -> None:
    sid = create(api)["id"]
    response = api.post(f"{API}schedules/{sid}/run-now/", {}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert (run.schedule_id, run.status, run.trigger) == (sid, "pending", "run_now")
    assert body["idempotency_key"] == run.idempotency_key
    entry = ScheduleChange.objects.get(action="run_now")
    assert entry.actor == admin
    assert entry.changes == {"run": run.pk, "key": run.idempotency_key, "advance": False}
    # Without "advance", the regular next run stays where it was.
    assert Schedule.objects.get(pk=sid).version == 1


def test_backfill_queues_a_past_range_once(api: APIClient) -> None:
    sid = create(api, cron="0 * * * *", timezone="UTC")["id"]
    url = f"{API}schedules/{sid}/backfill/"
    span = {"start": "2025-01-01T00:00:00Z", "end": "2025-01-01T05:00:00Z"}
    dry = api.post(url, {**span, "dry_run": True}, format="json").json()
    assert dry == {
        "dry_run": True, "occurrences": 6, "queued": 6, "requeued": 0, "already": 0,
        "rerun_pruned": 0,
    }  # fmt: skip
    assert not Run.objects.exists()

    first = api.post(url, span, format="json")
    assert first.status_code == 200, first.content
    assert first.json()["queued"] == 6
    runs = Run.objects.filter(schedule_id=sid)
    assert sorted(runs.values_list("scheduled_for", flat=True)) == [
        datetime(2025, 1, 1, hour, tzinfo=UTC) for hour in range(6)
    ]
    assert set(runs.values_list("trigger", "status")) == {("backfill", "pending")}

    again = api.post(url, span, format="json").json()
    assert (again["queued"], again["requeued"], again["already"]) == (0, 0, 6)
    assert runs.count() == 6
    entries = ScheduleChange.objects.filter(action="backfill")
    assert [entry.changes["queued"] for entry in entries.order_by("id")] == [6]


@pytest.mark.parametrize(
    ("span", "why"),
    [
        ({"start": "2025-01-01T00:00:00Z", "end": "2999-01-01T00:00:00Z"}, "must not be after now"),
        ({"start": "2025-01-02T00:00:00Z", "end": "2025-01-01T00:00:00Z"}, "before its start"),
    ],
)
def test_a_backfill_that_cannot_be_done_is_a_400_saying_why(
    api: APIClient, span: dict[str, str], why: str
) -> None:
    sid = create(api)["id"]
    response = api.post(f"{API}schedules/{sid}/backfill/", span, format="json")
    assert response.status_code == 400
    assert why in response.json()["detail"]
    assert not Run.objects.exists()
    assert not ScheduleChange.objects.filter(action="backfill")


def test_preview_count(api: APIClient, settings: Any) -> None:
    sid = create(api)["id"]
    url = f"{API}schedules/{sid}/preview/"
    assert len(api.get(url).json()) == app_settings.PREVIEW_COUNT == 10
    assert len(api.get(f"{url}?count=3").json()) == 3
    assert len(api.get(f"{url}?count=500").json()) == 500
    response = api.get(f"{url}?count=501")
    assert response.status_code == 400
    assert "count" in response.json()
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "PREVIEW_COUNT": 4}
    assert len(api.get(url).json()) == 4


def test_a_timing_is_previewed_before_any_schedule_has_it(api: APIClient) -> None:
    before = snapshot_of_everything()
    response = api.post(
        f"{API}schedules/preview/",
        {"cron": "0 6 * * 1-5", "timezone": "Europe/Berlin", "count": 3},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["description"] == "At 06:00, Monday through Friday (Europe/Berlin)"
    assert len(body["occurrences"]) == 3
    for item in body["occurrences"]:
        local = datetime.fromisoformat(item["local"])
        assert (local.weekday() < 5, local.hour, local.minute) == (True, 6, 0)
    assert snapshot_of_everything() == before  # nothing written


def test_a_timing_preview_flags_dst_and_defaults_its_count(api: APIClient) -> None:
    timing = {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "dst_gap": "skip"}
    items = api.post(
        f"{API}schedules/preview/", {**timing, "start_at": "2027-03-25T00:00:00Z"}, format="json"
    ).json()["occurrences"]
    assert len(items) == app_settings.PREVIEW_COUNT
    assert (items[3]["local"][:10], items[3]["skipped"]) == ("2027-03-28", True)


def test_several_cron_expressions_are_one_schedule(api: APIClient, index: DueIndex) -> None:
    union = {"cron": "0 9 * * 1-5; 0 12 * * 6", "timezone": "Europe/Berlin"}
    body = create(api, **union)
    assert body["description"] == (
        "At 09:00, Monday through Friday; and at 12:00, only on Saturday (Europe/Berlin)"
    )
    schedule = Schedule.objects.get(pk=body["id"])
    assert index.scores([schedule.pk]) == {schedule.pk: to_ms(schedule.due_at)}
    items = api.post(
        f"{API}schedules/preview/",
        {**union, "start_at": "2027-12-02T00:00:00Z", "count": 4},
        format="json",
    ).json()["occurrences"]
    assert [item["local"] for item in items] == [
        "2027-12-02T09:00:00+01:00",  # Thursday
        "2027-12-03T09:00:00+01:00",
        "2027-12-04T12:00:00+01:00",  # Saturday
        "2027-12-06T09:00:00+01:00",  # Monday
    ]
    response = api.post(
        f"{API}schedules/", {**NEW, "name": "bad", "cron": "0 9 * * *; 0 25 * * *"}, format="json"
    )
    assert response.status_code == 400
    [message] = response.json()["cron"]
    assert message.startswith("Expression 2 of 2: Invalid cron expression '0 25 * * *'")


def test_the_day_rule_is_written_read_and_previewed(api: APIClient) -> None:
    first_monday = {"cron": "30 6 1-7 * 1", "day_rule": "both", "timezone": "Europe/Berlin"}
    body = create(api, **first_monday)
    assert body["day_rule"] == "both"
    assert body["description"] == (
        "At 06:30, between day 1 and 7 of the month, but only on Monday (Europe/Berlin)"
    )
    assert create(api, name="default")["day_rule"] == "either"
    items = api.post(
        f"{API}schedules/preview/", {**first_monday, "count": 5}, format="json"
    ).json()["occurrences"]
    locals_ = [datetime.fromisoformat(item["local"]) for item in items]
    assert len(locals_) == 5
    assert all((local.weekday(), local.day <= 7) == (0, True) for local in locals_)

    unknown = api.post(f"{API}schedules/", {**NEW, "name": "x", "day_rule": "and"}, format="json")
    assert unknown.status_code == 400
    assert "day_rule" in unknown.json()
    never = api.post(
        f"{API}schedules/",
        {**NEW, "name": "y", "cron": "0 0 30 2 1", "day_rule": "both"},
        format="json",
    )
    assert never.status_code == 400
    assert "never matches" in never.json()["cron"][0]

    components = api.get(f"{API}schema/?format=json").json()["components"]["schemas"]
    reference = components["Schedule"]["properties"]["day_rule"]["allOf"][0]["$ref"]
    assert components[reference.rsplit("/", 1)[1]]["enum"] == ["either", "both"]


@pytest.mark.parametrize(
    ("timing", "fields"),
    [
        ({"cron": "61 * * * *", "timezone": "Mars/Olympus"}, {"cron", "timezone"}),
        ({"kind": "interval"}, {"interval"}),
        ({"kind": "once", "run_at": "2020-01-01T00:00:00Z"}, {"run_at"}),
        ({"cron": "0 3 * * *", "count": 0}, {"count"}),
        ({"cron": "0 3 * * *", "count": 501}, {"count"}),
    ],
)
def test_a_timing_preview_names_what_is_wrong(
    api: APIClient, timing: dict[str, Any], fields: set[str]
) -> None:
    response = api.post(f"{API}schedules/preview/", timing, format="json")
    assert response.status_code == 400
    assert set(response.json()) == fields  # no name, task or args: not the preview's business


@pytest.mark.parametrize(
    ("dst_gap", "dst", "skipped", "local"),
    [
        ("shift", "shifted", False, "2027-03-28T03:30:00+02:00"),
        ("skip", "skipped", True, "2027-03-28T03:30:00+02:00"),
    ],
)
def test_preview_flags_an_occurrence_a_dst_change_touches(
    api: APIClient, dst_gap: str, dst: str, skipped: bool, local: str
) -> None:
    # 02:30 does not exist in Berlin on 2027-03-28: the clocks jump from 02:00 to 03:00.
    sid = create(api, cron="30 2 * * *", dst_gap=dst_gap, start_at="2027-03-25T00:00:00Z")["id"]
    items = api.get(f"{API}schedules/{sid}/preview/?count=5").json()
    assert [item["local"][:10] for item in items] == [
        "2027-03-25",
        "2027-03-26",
        "2027-03-27",
        "2027-03-28",
        "2027-03-29",
    ]
    assert items[0]["local"] == "2027-03-25T02:30:00+01:00"
    assert items[0]["dst"] == ""
    touched = items[3]
    assert (touched["dst"], touched["skipped"]) == (dst, skipped)
    assert touched["local"] == local
    assert "does not exist in Europe/Berlin" in touched["note"]
    assert items[4]["local"] == "2027-03-29T02:30:00+02:00"
    assert items[4]["dst"] == ""


def test_resync_writes_a_lost_index_entry_again(
    api: APIClient, admin: User, index: DueIndex
) -> None:
    sid = create(api)["id"]
    expected = index.scores([sid])
    index.client.zrem(index.due_key, sid)  # lost, as after an eviction
    assert index.scores([sid]) == {sid: None}
    response = api.post(f"{API}schedules/{sid}/resync/")
    assert response.status_code == 200, response.content
    assert index.scores([sid]) == expected
    entry = ScheduleChange.objects.get(action="resynced")
    assert (entry.actor, entry.source) == (admin, "api")


@pytest.mark.parametrize("endpoint", ["pause", "resume", "run_now", "backfill", "resync"])
def test_actions_on_a_missing_schedule_are_404(api: APIClient, endpoint: str) -> None:
    assert call(api, endpoint, {"s": 424242}).status_code == 404


# -- the change log -------------------------------------------------------------------------


def test_the_change_log_shows_who_did_what(admin: User) -> None:
    alice = make_user("alice", VIEW, ADD, CHANGE, VIEW_CHANGES)
    api = client_for(alice)
    sid = create(api)["id"]
    api.patch(f"{API}schedules/{sid}/", {"cron": "0 4 * * *"}, format="json", HTTP_IF_MATCH='"1"')
    api.post(f"{API}schedules/{sid}/pause/", {"note": "holiday"}, format="json")
    entries = api.get(f"{API}changes/").json()["results"]
    assert [entry["action"] for entry in entries] == ["paused", "changed", "created"]
    for entry in entries:
        assert (entry["actor"], entry["actor_name"], entry["source"]) == (alice.pk, "alice", "api")
        assert (entry["schedule"], entry["schedule_name"]) == (sid, "nightly")
    assert [entry["version"] for entry in entries] == [3, 2, 1]
    assert entries[1]["changes"] == {"cron": ["0 3 * * *", "0 4 * * *"]}
    assert entries[0]["changes"] == {"note": "holiday"}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("source=admin", ["by-admin"]),
        ("action=paused", ["second"]),
        ("source=api&action=created", ["second", "first"]),
    ],
)
def test_change_log_filters(admin: User, query: str, expected: list[str]) -> None:
    api = client_for(admin)
    first, second = create(api, name="first")["id"], create(api, name="second")["id"]
    api.post(f"{API}schedules/{second}/pause/", {}, format="json")
    changelog.record(Schedule.objects.get(pk=first), Origin(None, "admin"), "changed")
    ScheduleChange.objects.filter(source="admin").update(schedule_name="by-admin")
    names = [
        entry["schedule_name"] for entry in api.get(f"{API}changes/?{query}").json()["results"]
    ]
    assert names == expected
    assert len(api.get(f"{API}changes/?schedule={first}").json()["results"]) == 2
    assert len(api.get(f"{API}changes/?actor={admin.pk}").json()["results"]) == 3


def test_the_change_log_is_paginated_by_cursor(api: APIClient) -> None:
    for n in range(5):
        create(api, name=f"s{n}")
    first = api.get(f"{API}changes/?page_size=2").json()
    second = api.get(first["next"]).json()
    assert "count" not in first
    assert [e["schedule_name"] for e in first["results"] + second["results"]] == [
        "s4",
        "s3",
        "s2",
        "s1",
    ]


# -- index health ---------------------------------------------------------------------------


def test_index_health(api: APIClient, built_index: DueIndex) -> None:
    create(api, name="a")
    create(api, name="b")
    create(api, name="c", enabled=False)
    health = api.get(f"{API}index/").json()
    assert (health["schedules"], health["enabled"], health["indexable"]) == (3, 2, 2)
    assert (health["entries_due"], health["in_flight"], health["due_now"]) == (2, 0, 0)
    assert health["oldest_due_lag_seconds"] is None
    assert health["runs_in_flight"] == 0
    assert health["last_rebuild"]["by"] == "tests"
    assert health["rebuild_running"] is False
    assert health["drift"]["ok"] is True
    assert health["drift"]["late_or_missing"] == []
    assert health["drift"]["rows_indexable"] == 2
    assert api.get(f"{API}index/?drift=false").json()["drift"] is None


@pytest.mark.parametrize("method", ["head", "options"])
def test_index_health_needs_its_permission_for_every_method(
    world: dict[str, int], method: str
) -> None:
    """HEAD and OPTIONS read what GET reads (HEAD runs the whole check)."""
    viewer = client_for(make_user("viewer", VIEW))
    assert getattr(viewer, method)(f"{API}index/").status_code == 403
    operator = client_for(make_user("operator", VIEW_OPERATIONS))
    assert getattr(operator, method)(f"{API}index/").status_code == 200


def test_index_health_reports_an_entry_gone_missing(api: APIClient, index: DueIndex) -> None:
    sid = create(api)["id"]
    index.client.zrem(index.due_key, sid)
    drift = api.get(f"{API}index/").json()["drift"]
    assert (drift["ok"], drift["late_or_missing"]) == (False, [sid])


# -- the schedulers alive, and the status -----------------------------------------------------


def test_the_schedulers_alive(api: APIClient, built_index: DueIndex) -> None:
    assert api.get(f"{API}schedulers/").json()["schedulers"] == []
    beat(built_index, "api-1", pass_ago=1)

    answer = api.get(f"{API}schedulers/").json()
    (listed,) = answer["schedulers"]
    assert (listed["id"], listed["state"], listed["stopping"]) == ("api-1", "healthy", False)
    assert listed["lanes"] == {"default": {"waiting": 0, "oldest_seconds": None}}
    assert listed["pass_age_seconds"] >= 1
    assert answer["pass_stale_seconds"] == app_settings.PASS_STALE_SECONDS
    assert datetime.fromisoformat(answer["checked_at"]) >= datetime.fromisoformat(listed["beat_at"])


def test_the_status_is_the_scheduler_status_report(api: APIClient, built_index: DueIndex) -> None:
    create(api, name="a")
    report = api.get(f"{API}status/").json()
    assert report["healthy"] is False  # a schedule, and no scheduler
    assert [p["code"] for p in report["problems"]] == ["no-scheduler"]
    assert report["index"]["drift"]["ok"] is True
    assert report["max_lag_seconds"] == 60
    assert report["auto_paused"] == {"count": 0, "schedules": []}
    assert api.get(f"{API}status/?drift=false&max_lag=5").json()["index"]["drift"] is None
    assert api.get(f"{API}status/?max_lag=5").json()["max_lag_seconds"] == 5

    beat(built_index, "api-1")
    assert api.get(f"{API}status/").json()["healthy"] is True


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf"])
def test_the_status_refuses_a_max_lag_that_is_not_seconds(api: APIClient, value: str) -> None:
    response = api.get(f"{API}status/?max_lag={value}")
    assert response.status_code == 400
    assert response.json() == {"max_lag": ["A number of seconds, 0 or more."]}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "index/"),
        ("get", "schedulers/"),
        ("get", "status/"),
        ("post", "schedules/{s}/resync/"),
    ],
)
def test_an_unreachable_redis_is_a_503(
    api: APIClient, settings: Any, method: str, path: str
) -> None:
    sid = create(api)["id"]
    lose_redis(settings)
    response = getattr(api, method)(API + path.format(s=sid))
    assert response.status_code == 503, response.content
    assert "Redis is unreachable" in response.json()["detail"]


# -- the schema -----------------------------------------------------------------------------


def test_the_schema_is_served_as_yaml_or_json(api: APIClient) -> None:
    as_yaml = api.get(f"{API}schema/")
    assert as_yaml.status_code == 200
    assert as_yaml.headers["Content-Type"].startswith("application/vnd.oai.openapi")
    document = yaml.safe_load(as_yaml.content)
    assert document["openapi"].startswith("3.")
    as_json = api.get(f"{API}schema/?format=json").json()
    assert as_json == document
    negotiated = api.get(f"{API}schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert negotiated.headers["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert negotiated.json() == document


def test_the_schema_describes_this_api_only(api: APIClient) -> None:
    paths = api.get(f"{API}schema/?format=json").json()["paths"]
    assert all(path.startswith(API) for path in paths)
    assert f"{API}schema/" not in paths
    expected = [
        "schedules/",
        "schedules/{id}/",
        "schedules/{id}/backfill/",
        "runs/",
        "runs/{id}/",
        "changes/",
        "changes/{id}/",
        "index/",
    ]
    assert {API + path for path in expected} <= set(paths)
    task_enum = api.get(f"{API}schema/?format=json").json()["components"]["schemas"]["TaskEnum"]
    assert "tests.record" in task_enum["enum"]
    assert "os.system" not in task_enum["enum"]


# -- edges that were server errors (fixed in a7e9f81), and ones that still are ---------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"args": ["a\x00b"]}, "args"),
        ({"kwargs": {"k": "\x00"}}, "kwargs"),
        ({"kwargs": {"\x00": 1}}, "kwargs"),
    ],
)
def test_a_nul_character_in_args_or_kwargs_is_a_400_on_every_database(
    api: APIClient, index: DueIndex, overrides: dict[str, Any], field: str
) -> None:
    # PostgreSQL's jsonb refuses \u0000 (it was a 500 there) and SQLite stored it: refused
    # everywhere, a schedule is valid on every database.
    response = api.post(f"{API}schedules/", {**NEW, **overrides}, format="json")
    assert response.status_code == 400
    assert "NUL" in response.json()[field][0]
    assert not Schedule.objects.exists()
    assert index.counts() == (0, 0)


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-23:00", "0001-01-01T00:00:00+01:00"])
@pytest.mark.parametrize("name", ["scheduled_after", "scheduled_before"])
def test_a_run_filter_time_that_cannot_be_utc_is_a_400(
    api: APIClient, name: str, value: str
) -> None:
    response = api.get(f"{API}runs/", {name: value})
    assert response.status_code == 400
    assert name in response.json()


def test_a_run_filter_time_with_a_large_utc_offset_filters(api: APIClient) -> None:
    # PostgreSQL refuses offsets of 16 hours or more; the filter converts to UTC first.
    schedule = make_schedule(**NEW)
    add_run(schedule, PAST)
    # 2025-01-01T16:00+16:00 is 2025-01-01T00:00Z, the instant of the run.
    for name in ("scheduled_after", "scheduled_before"):
        response = api.get(f"{API}runs/", {name: "2025-01-01T16:00:00+16:00"})
        assert response.status_code == 200
        assert len(response.json()["results"]) == 1


@pytest.mark.parametrize("path", ["runs/", "changes/"])
def test_a_forged_cursor_is_a_404(api: APIClient, path: str) -> None:
    # Well-formed, but its position is not an id: it used to reach the query.
    cursor = base64.b64encode(b"p=abc").decode()
    response = api.get(f"{API}{path}", {"cursor": cursor})
    assert response.status_code == 404
    assert response.json() == {"detail": "Invalid cursor"}


@pytest.mark.parametrize("start", ["0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z"])
def test_a_backfill_cannot_start_before_1970(api: APIClient, start: str) -> None:
    sid = create(api)["id"]
    span = {"start": start, "end": "1970-01-02T00:00:00Z"}
    response = api.post(f"{API}schedules/{sid}/backfill/", span, format="json")
    assert response.status_code == 400
    assert "before 1970" in response.json()["detail"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("method", ["post", "patch"])
def test_a_one_off_at_the_end_of_time_with_jitter_is_due_by_then(
    api: APIClient, index: DueIndex, method: str
) -> None:
    body = {"kind": "once", "cron": "", "timezone": "UTC", "jitter": 100}
    body["run_at"] = "9999-12-31T23:59:59Z"
    if method == "post":
        response = api.post(f"{API}schedules/", {**NEW, **body}, format="json")
    else:
        sid = create(api)["id"]
        response = api.patch(f"{API}schedules/{sid}/", body, format="json", HTTP_IF_MATCH="*")
    assert response.status_code in (200, 201), response.content
    schedule = Schedule.objects.get()
    assert schedule.next_run_at <= schedule.due_at  # the delay stops at the last instant
    assert index.scores([schedule.pk]) == {schedule.pk: to_ms(schedule.due_at)}


def test_a_one_off_whose_local_time_is_past_9999_is_refused(api: APIClient) -> None:
    body = {**NEW, "kind": "once", "cron": "", "run_at": "9999-12-31T23:30:00Z"}
    response = api.post(f"{API}schedules/", body, format="json")  # Europe/Berlin: UTC+1
    assert response.status_code == 400, response.status_code
    assert "has no local time" in response.json()["run_at"][0]
    assert not Schedule.objects.exists()
    assert api.get(f"{API}schedules/").status_code == 200


def test_a_preview_up_to_the_end_of_time_stops_there(api: APIClient) -> None:
    body = {**NEW, "kind": "interval", "cron": "", "interval": 60}
    body["start_at"] = "9999-12-31T22:58:00Z"  # local: 23:58 in Berlin, two minutes left
    response = api.post(f"{API}schedules/", body, format="json")
    assert response.status_code == 201, response.content
    preview = api.get(f"{API}schedules/{response.json()['id']}/preview/?count=100")
    assert preview.status_code == 200
    assert [item["local"] for item in preview.json()] == [
        "9999-12-31T23:58:00+01:00",
        "9999-12-31T23:59:00+01:00",
    ]


DEEP = 50_000  # levels of nesting: Python's json (and json.dumps) recurse through them


def nested_text(levels: int, field: str) -> str:
    """JSON text of args (a list) or kwargs (an object) nested ``levels`` deep."""
    if field == "args":
        return "[" * levels + "]" * levels
    return '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)


@pytest.mark.parametrize("field", ["args", "kwargs"])
@pytest.mark.parametrize("levels", [DEEP, MAX_JSON_DEPTH + 1])
def test_args_nested_too_deep_are_a_400_naming_the_field(
    api: APIClient, index: DueIndex, field: str, levels: int
) -> None:
    body = json.dumps({**NEW, field: "HOLE"}).replace('"HOLE"', nested_text(levels, field))
    response = api.generic("POST", f"{API}schedules/", body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert f"{MAX_JSON_DEPTH}" in response.json()[field][0]
    assert not Schedule.objects.exists()
    assert index.counts() == (0, 0)


@pytest.mark.parametrize("field", ["args", "kwargs"])
def test_args_nested_too_deep_in_a_form_post_are_a_400_naming_the_field(
    api: APIClient, field: str
) -> None:
    response = api.post(f"{API}schedules/", {**NEW, field: nested_text(DEEP, field)})
    assert response.status_code == 400, response.content[:300]
    assert f"{MAX_JSON_DEPTH}" in response.json()[field][0]


def test_args_nested_up_to_the_limit_are_accepted(api: APIClient) -> None:
    args = json.loads(nested_text(MAX_JSON_DEPTH, "args"))
    kwargs = json.loads(nested_text(MAX_JSON_DEPTH, "kwargs"))
    body = create(api, args=args, kwargs=kwargs)
    assert (body["args"], body["kwargs"]) == (args, kwargs)


def test_a_deep_body_on_another_endpoint_names_its_field(api: APIClient) -> None:
    sid = create(api)["id"]
    body = '{"note": ' + nested_text(DEEP, "args") + "}"
    response = api.generic(
        "POST", f"{API}schedules/{sid}/pause/", body, content_type="application/json"
    )
    assert response.status_code == 400
    assert "note" in response.json()
    deep_array = api.generic(
        "POST", f"{API}schedules/", nested_text(DEEP, "args"), content_type="application/json"
    )
    assert deep_array.status_code == 400


@pytest.mark.parametrize(
    "extra_apps", ["", "rest_framework", "rest_framework django_filters drf_spectacular"]
)
def test_the_api_works_in_a_fresh_project_from_the_readme_alone(
    tmp_path: Any, key_prefix: str, extra_apps: str
) -> None:
    """README's REST API paragraph only: no REST_FRAMEWORK setting (DRF's own schema class),
    rest_framework in INSTALLED_APPS or not. The schema and the browsable API were 500s."""
    env = subprocess_env(
        key_prefix,
        FRESH_PROJECT_DB=str(tmp_path / "fresh.sqlite3"),
        FRESH_PROJECT_PREFIX=key_prefix,
        FRESH_PROJECT_EXTRA_APPS=extra_apps,
    )
    env["DJANGO_SETTINGS_MODULE"] = "tests.fresh_project.settings"
    done = subprocess.run(
        [sys.executable, "-m", "tests.fresh_project.probe"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    statuses, paths = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    assert statuses == {
        "schema yaml": 200,
        "schema json": 200,
        "list as a browser": 200,
        "list as a client": 200,
        "404 as a browser": 404,
        "runs as a browser": 200,
    }, done.stderr[-3000:]
    assert paths
    assert all(path.startswith(API) for path in paths)


# -- backfills of crons whose matches are all skipped (tests/support/walks.py) -------------------


@pytest.mark.django_db
def test_the_api_answers_a_backfill_of_skipped_times_at_once(
    walls: list[int], admin_client: Any, settings: Any
) -> None:
    never = make_schedule(kind="cron", cron=NEVER.cron, timezone=NEVER.timezone, dst_gap="skip")
    span = {
        "start": "2000-01-01T00:00:00Z",
        "end": (timezone.now() - timedelta(minutes=1)).isoformat(),
    }
    url = f"/api/schedulinator/schedules/{never.pk}/backfill/"
    response = admin_client.post(url, span, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["occurrences"] == 0

    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "MAX_BACKFILL_RUNS": 1000}
    dense = make_schedule(
        kind="cron", cron=NEVER_DENSE.cron, timezone=NEVER_DENSE.timezone, dst_gap="skip"
    )
    url = f"/api/schedulinator/schedules/{dense.pk}/backfill/"
    response = admin_client.post(url, span, content_type="application/json")
    assert response.status_code == 400
    assert "skipped local times" in response.json()["detail"]


def test_a_schedule_names_its_dispatcher_and_its_runs_show_the_hand_off(
    api: APIClient, settings: Any
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"queue": {"BACKEND": "tests.support.dispatchers.HandOff"}},
    }
    body = create(api, dispatcher="queue", dispatch_options={"queue": "reports", "priority": 3})
    assert (body["dispatcher"], body["dispatch_options"]) == (
        "queue",
        {"queue": "reports", "priority": 3},
    )
    schedule = Schedule.objects.get(pk=body["id"])
    add_run(
        schedule,
        timezone.now(),
        status=Run.Status.DISPATCHED,
        dispatcher="queue",
        external_id="job-1",
    )
    [run] = api.get(f"{API}runs/", {"schedule": schedule.pk}).json()["results"]
    assert (run["dispatcher"], run["external_id"], run["status"]) == (
        "queue",
        "job-1",
        "dispatched",
    )


def test_a_worker_reports_a_handed_off_run_by_its_key(world: dict[str, int]) -> None:
    Run.objects.filter(pk=world["r"]).update(status=Run.Status.DISPATCHED)
    worker = client_for(make_user("worker", REPORT_RUN))
    url = f"{API}runs/report/"

    started = worker.post(url, {"key": world["k"], "status": "started"}, format="json")
    assert started.json() == {"key": world["k"], "changed": True, "run_status": "running"}
    failed = worker.post(
        url, {"key": world["k"], "status": "failed", "error": "disk full"}, format="json"
    )
    assert failed.json()["run_status"] == "failed"
    assert Run.objects.get(pk=world["r"]).error == "disk full"
    # Repeated, or for an occurrence not in the ledger: nothing changes, and it says so.
    again = worker.post(url, {"key": world["k"], "status": "succeeded"}, format="json")
    assert again.json() == {"key": world["k"], "changed": False, "run_status": "failed"}
    unknown = worker.post(url, {"key": "999999:1", "status": "succeeded"}, format="json")
    assert unknown.json() == {"key": "999999:1", "changed": False, "run_status": None}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": "not-a-key", "status": "succeeded"}, "key"),
        ({"key": "1:2", "status": "done"}, "status"),
        ({"status": "succeeded"}, "key"),
    ],
)
def test_a_report_that_is_not_one_names_the_field(
    world: dict[str, int], body: dict[str, Any], field: str
) -> None:
    worker = client_for(make_user("worker", REPORT_RUN))
    response = worker.post(f"{API}runs/report/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.parametrize(
    "key",
    [
        "1:--5",  # two signs
        "1:\u00b2",  # a superscript two: str.isdigit() says it is a digit
        "\u00b2:1",
        "1:\u0661\u0662",  # Arabic-Indic digits: int() reads them
        "1:99999999999999999",  # milliseconds past the last datetime (year 9999)
        "1:-99999999999999999",
        "9223372036854775808:1",  # a schedule id past the largest bigint
        "99999999999999999999:1",
    ],
)
def test_a_report_with_a_key_out_of_range_is_refused_naming_the_key(
    world: dict[str, int], key: str
) -> None:
    """Keys of the right shape whose numbers no schedule or datetime can have were server
    errors (a ValueError, an OverflowError, a DataError from the database)."""
    worker = client_for(make_user("worker", REPORT_RUN))
    response = worker.post(f"{API}runs/report/", {"key": key, "status": "failed"}, format="json")
    assert response.status_code == 400, response.content
    assert "is not an occurrence key" in response.json()["key"][0]


def test_a_report_with_a_huge_error_keeps_its_end(world: dict[str, int]) -> None:
    """An error text over the old 100,000-character limit lost the whole report (400, the run
    left dispatched): the documented promise is its last 4,000 characters."""
    Run.objects.filter(pk=world["r"]).update(status=Run.Status.DISPATCHED)
    worker = client_for(make_user("worker", REPORT_RUN))
    error = "x" * 150_000 + "the end"
    response = worker.post(
        f"{API}runs/report/",
        {"key": world["k"], "status": "failed", "error": error},
        format="json",
    )
    assert response.status_code == 200, response.content[:500]
    assert response.json()["run_status"] == "failed"
    assert Run.objects.get(pk=world["r"]).error == error[-4000:]


# -- calendars of excluded days -------------------------------------------------------------


def test_an_icalendar_rule_that_would_run_unbounded_is_an_error_of_its_field(
    api: APIClient, rule_work: RuleWork
) -> None:
    body = {"name": "x", "source": "ical", "icalendar": SECONDLY.decode()}
    response = api.post(f"{API}calendars/", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {
        "icalendar": [
            "The iCalendar event 'Every second' repeats more often than daily "
            "(FREQ=SECONDLY): a calendar of excluded days takes whole days."
        ]
    }
    assert rule_work.instants == 0
    assert not Calendar.objects.exists()
    # A Google export, its UNTIL in UTC: read as RFC 5545 says.
    body = {"name": "closures", "timezone": "Europe/Berlin", "source": "ical",
            "icalendar": GOOGLE.decode(), "years": "2026"}  # fmt: skip
    response = api.post(f"{API}calendars/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["days"][:3] == [
        {"day": "2026-01-05", "name": "Stocktaking"},
        {"day": "2026-01-13", "name": "Stocktaking (moved)"},
        {"day": "2026-01-26", "name": "Stocktaking"},
    ]


@pytest.mark.parametrize("country", ["JAN", "MON", "PUBLIC"])
def test_a_country_the_holidays_package_does_not_list_is_an_error_of_its_field(
    api: APIClient, country: str
) -> None:
    body = {"name": "x", "source": "holidays", "country": country, "years": "2026"}
    response = api.post(f"{API}calendars/", body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["country"]
    assert "does not know it" in response.json()["country"][0]
    response = api.post(
        f"{API}calendars/", {**body, "country": "GB", "subdivision": "MON"}, format="json"
    )
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["subdivision"]
    assert not Calendar.objects.exists()


def test_calendars_are_written_through_the_services_and_schedules_name_them(
    api: APIClient, index: DueIndex
) -> None:
    response = api.post(
        f"{API}calendars/",
        {"name": "office", "timezone": "UTC", "days": [{"day": "2099-01-01", "name": "Closed"}]},
        format="json",
    )
    assert response.status_code == 201, response.content
    office = response.json()
    assert office["days"] == [{"day": "2099-01-01", "name": "Closed"}]
    assert office["weekend"] == [6, 7]
    schedule = create(
        api, name="daily", cron="0 9 * * *", timezone="UTC", calendars=["office"],
        start_at="2098-12-31T10:00:00Z",
    )  # fmt: skip
    assert schedule["calendars"] == ["office"]
    assert schedule["calendar_rule"] == "skip"
    assert schedule["description"] == "At 09:00 (UTC); not on days excluded by office"
    assert schedule["next_run_at"] == "2099-01-01T09:00:00Z"  # the day's skip marker
    preview = api.get(f"{API}schedules/{schedule['id']}/preview/").json()
    assert (preview[0]["skipped"], preview[0]["calendar"]) == (True, "skipped")
    assert (
        preview[0]["note"]
        == "Excluded: Closed, 2099-01-01 (calendar office). Nothing fires that day."
    )

    # A change of the days re-plans it; the index follows.
    response = api.patch(
        f"{API}calendars/{office['id']}/",
        {"days": [{"day": "2099-01-02"}], "description": "Office closures"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["days"] == [{"day": "2099-01-02", "name": ""}]
    entry = ScheduleChange.objects.filter(schedule_id=schedule["id"], action="replanned")
    assert not entry.exists()  # the same instant, now a run: nothing moved

    # In use: not deleted, and the answer says why.
    response = api.delete(f"{API}calendars/{office['id']}/")
    assert response.status_code == 409
    assert "used by 1 schedule(s): daily" in response.json()["detail"]
    # Unknown names and bad sources are errors of their fields.
    response = api.post(f"{API}schedules/", {**NEW, "calendars": ["nope"]}, format="json")
    assert response.json() == {"calendars": ["No calendar is named nope."]}
    response = api.post(
        f"{API}calendars/", {"name": "x", "source": "holidays", "country": "XX"}, format="json"
    )
    assert response.status_code == 400
    assert "does not know it" in response.json()["country"][0]
    response = api.post(
        f"{API}calendars/", {"name": "y", "source": "ical", "icalendar": "hello"}, format="json"
    )
    assert response.status_code == 400
    assert "Not an iCalendar file" in response.json()["icalendar"][0]
    response = api.post(
        f"{API}calendars/",
        {"name": "z", "source": "holidays", "country": "GB", "years": "20x6"},
        format="json",
    )
    assert response.json() == {"years": ["Enter the years as 2026-2036, or one year."]}
    response = api.post(
        f"{API}calendars/",
        {"name": "england", "source": "holidays", "country": "GB", "subdivision": "ENG",
         "years": "2026"},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    assert {"day": "2026-12-25", "name": "Christmas Day"} in response.json()["days"]
