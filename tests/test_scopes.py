"""What counts or names schedules, seen by a user kept to some of them: the API under the
docs' own ``TeamSchedules`` permission class (docs/api.md, run as it is written), and the
admin's operations page under a ``ScheduleAdmin`` whose ``get_queryset`` keeps to a team.

Two teams, each with schedules that every aggregate names: one paused by the scheduler, one
whose index entry went missing (drift), runs waiting on the dispatcher; the other team's
also holds the oldest due entry and names a calendar. A user of one team sees, in every
answer, the figures of their team's schedules and nothing of the other's: no name, no id
(the other team's ids are ``987654301`` and on, found in no other number of an answer).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_schedulinator import services
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Calendar, Run, Schedule
from django_schedulinator.outcomes import AUTO_PAUSE_NOTE
from django_schedulinator.services import streaks

from .support.commits import APIClient, committed
from .support.doc_examples import source
from .support.heartbeats import beat
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db

API = "/api/schedulinator/"
# The docs' class, as a user copies it into a module of their own.
exec(compile(source("api-team-schedules", "api.md"), "docs/api.md", "exec"))
TeamSchedules: Any = globals()["TeamSchedules"]
TEAM_SCHEDULES = f"{__name__}.TeamSchedules"
FIRST_HIDDEN_ID = 987654301
HIDDEN = ("bravo", str(FIRST_HIDDEN_ID)[:-1])  # what no answer to team a may hold


def team(name: str, team: str, first_id: int | None, **fields: Any) -> dict[str, Schedule]:
    """A team's schedules: live, auto-paused, with its index entry gone (drift)."""
    made = {}
    for offset, role in enumerate(("live", "paused", "drifted")):
        extra = {"id": first_id + offset} if first_id is not None else {}
        made[role] = make_schedule(
            f"{name}-{role}", kwargs={"team": team}, **extra, **fields.get(role, {})
        )
    return made


@pytest.fixture
def teams(built_index: DueIndex) -> dict[str, dict[str, Schedule]]:
    Calendar.objects.create(name="closures")
    long_ago = timezone.now() - timedelta(hours=1)
    alpha = team("alpha", "a", None)
    # Bravo's live schedule is the oldest due entry, names the calendar, and has a run whose
    # outcome is overdue.
    bravo = team("bravo", "b", FIRST_HIDDEN_ID, live={"next_run_at": long_ago})
    Schedule.objects.filter(pk=bravo["live"].pk).update(calendars=["closures"])
    for members in (alpha, bravo):
        streaks.auto_pause([members["paused"].pk], note=AUTO_PAUSE_NOTE, using="default")
        built_index.client.zrem(built_index.due_key, members["drifted"].pk)
    Run.objects.create(
        schedule=bravo["live"],
        scheduled_for=long_ago,
        task="tests.record",
        status=Run.Status.DISPATCHED,
        dispatcher="default",
        dispatched_at=long_ago,
        outcome_due_by=long_ago,
        claimed_at=long_ago,
        worker_id="tests",
    )
    Run.objects.create(  # claimed by a scheduler, in flight
        schedule=bravo["live"],
        scheduled_for=long_ago - timedelta(hours=1),
        task="tests.record",
        claimed_at=long_ago,
        worker_id="tests",
    )
    beat(built_index, "scheduler-1")
    return {"a": alpha, "b": bravo}


def api_user(name: str, team_name: str) -> APIClient:
    """A user of ``team_name``, as the docs' class reads it (``request.user.profile.team``)."""
    user = User.objects.create_user(name)
    user.profile = SimpleNamespace(team=team_name)  # type: ignore[attr-defined]
    client = APIClient()
    client.force_authenticate(user)
    return client


# Every answer of the API that counts or names schedules.
AGGREGATES = (
    "status/",
    "status/?drift=false",
    "status/?max_lag=0",
    "index/",
    "index/?drift=false",
    "schedulers/",
)
# And every other list, for good measure (scoped since issue 12).
LISTS = ("schedules/", "runs/", "changes/", "calendars/")


def assert_hides_the_other_team(content: bytes, where: str) -> None:
    text = content.decode()
    for hidden in HIDDEN:
        assert hidden not in text, (where, hidden, text)


def test_the_aggregates_of_the_api_count_and_name_only_the_users_schedules(
    teams: dict[str, dict[str, Schedule]], settings: Any
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "API_PERMISSION_CLASSES": [TEAM_SCHEDULES]}
    alpha, bravo = teams["a"], teams["b"]
    client = api_user("ann", "a")

    for path in (*AGGREGATES, *LISTS):
        response = client.get(API + path)
        assert response.status_code == 200, (path, response.content)
        assert_hides_the_other_team(response.content, path)

    status = client.get(f"{API}status/?max_lag=0").json()
    assert status["auto_paused"]["count"] == 1
    assert [a["name"] for a in status["auto_paused"]["schedules"]] == ["alpha-paused"]
    index = status["index"]
    assert (index["schedules"], index["enabled"], index["indexable"]) == (3, 2, 2)
    # The index's own counts are of every team's schedules: not shown.
    assert (index["entries_due"], index["due_now"], index["in_flight"]) == (None, None, None)
    assert all(shard["entries_due"] is None for shard in index["shards"])
    assert "rows" not in index["last_rebuild"]
    assert index["scoped"] is True
    # The schedulers are late (bravo's entry waits), and that is said, without naming it.
    assert index["oldest_due_lag_seconds"] > 0
    assert index["oldest_due_schedule"] is None
    codes = [p["code"] for p in status["problems"]]
    assert codes == ["due-lag", "drift"], status["problems"]
    assert index["drift"]["late_or_missing"] == [alpha["drifted"].pk]
    assert index["drift"]["rows_indexable"] == 2
    assert [w["code"] for w in status["warnings"]] == ["auto-paused"]  # no overdue outcome
    assert [d["past_deadline"] for d in status["dispatchers"]] == [0]
    assert index["runs_in_flight"] == 0
    (scheduler,) = status["schedulers"]
    assert scheduler["id"] == "scheduler-1"
    assert scheduler["counters"] == {}  # they count every team's occurrences

    # The other team sees its own, as the whole picture does.
    theirs = api_user("bob", "b").get(f"{API}status/?max_lag=0").json()
    assert [a["name"] for a in theirs["auto_paused"]["schedules"]] == ["bravo-paused"]
    assert theirs["index"]["oldest_due_schedule"] == bravo["live"].pk
    assert theirs["index"]["drift"]["late_or_missing"] == [bravo["drifted"].pk]
    assert [d["past_deadline"] for d in theirs["dispatchers"]] == [1]
    assert theirs["index"]["runs_in_flight"] == 1


def test_a_calendar_in_use_is_refused_without_naming_the_schedules_the_user_cannot_see(
    teams: dict[str, dict[str, Schedule]], settings: Any
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "API_PERMISSION_CLASSES": [TEAM_SCHEDULES]}
    client = api_user("ann", "a")
    calendar = Calendar.objects.get(name="closures")
    url = f"{API}calendars/{calendar.pk}/"

    deleted = client.delete(url)
    assert deleted.status_code == 409, deleted.content
    assert_hides_the_other_team(deleted.content, "delete")
    assert "schedules you cannot see" in deleted.json()["detail"]
    renamed = client.patch(url, {"name": "other"}, format="json")
    assert renamed.status_code == 400, renamed.content
    assert_hides_the_other_team(renamed.content, "rename")
    assert Calendar.objects.filter(name="closures").exists()
    # Its own team's schedule is named.
    with committed():
        services.update(teams["a"]["live"], {"calendars": ["closures"]})
    assert "alpha-live" in client.delete(url).json()["detail"]


def test_without_a_filter_the_status_counts_and_names_every_schedule(
    teams: dict[str, dict[str, Schedule]],
) -> None:
    admin = APIClient()
    admin.force_authenticate(User.objects.create_superuser("root", None, None))
    status = admin.get(f"{API}status/?max_lag=0").json()
    assert status["index"]["scoped"] is False
    assert status["index"]["schedules"] == 6
    assert status["index"]["entries_due"] == 4  # two drifted away
    assert status["index"]["oldest_due_schedule"] == teams["b"]["live"].pk
    assert status["auto_paused"]["count"] == 2
    assert status["schedulers"][0]["counters"]["fired"] == 1234
    assert "bravo-paused" in json.dumps(status)


# -- the admin's operations page ------------------------------------------------------------


def test_the_operations_page_under_an_admin_kept_to_a_team_shows_only_that_team(
    teams: dict[str, dict[str, Schedule]], settings: Any
) -> None:
    settings.ROOT_URLCONF = "tests.support.team_admin"
    user = User.objects.create_user("ann", is_staff=True, last_name="a")
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_schedulinator",
            codename__in=["view_schedule", "view_operations"],
        )
    )
    client = Client()
    client.force_login(user)

    page = client.get(reverse("admin:django_schedulinator_schedule_operations"))

    assert page.status_code == 200
    html = page.content.decode()
    assert_hides_the_other_team(page.content, "operations")
    assert "alpha-paused" in html
    assert f">{teams['a']['drifted'].pk}</a>" in html  # the drift links its own schedule

    def value(key: str) -> str:
        found = re.search(
            rf'<tr id="schedulinator-status-{key}">.*?<td class="value">(.*?)</td>', html, re.S
        )
        assert found is not None, key
        return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split())

    assert (value("schedules"), value("enabled"), value("indexable")) == ("3", "2", "2")
    assert value("entries") == value("due-now") == "not counted: the index holds every schedule"
    # The forecast and the lateness of runs count its schedules only (of the four hourly
    # schedules enabled, two are alpha's; the one run handed off is bravo's).
    forecast = re.search(r'<desc id="schedulinator-forecast-desc">(.*?)</desc>', html, re.S)
    assert forecast is not None
    assert "in all from 2 schedules;" in forecast.group(1), forecast.group(1)
    lateness = re.search(r'id="schedulinator-lateness".*?</section>', html, re.S)
    assert lateness is not None
    assert "No run handed off since" in lateness.group(0), lateness.group(0)


def test_the_calendar_pages_under_an_admin_kept_to_a_team_name_only_that_team(
    teams: dict[str, dict[str, Schedule]], settings: Any
) -> None:
    """A calendar bravo's schedule names: alpha's user is told that schedules it cannot see
    name it (so it keeps its name and is not deleted), and none of them is named."""
    settings.ROOT_URLCONF = "tests.support.team_admin"
    user = User.objects.create_user("ann", is_staff=True, last_name="a")
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_schedulinator",
            codename__in=["view_schedule", "view_calendar", "change_calendar", "delete_calendar"],
        )
    )
    client = Client()
    client.force_login(user)
    calendar = Calendar.objects.get(name="closures")
    change = reverse("admin:django_schedulinator_calendar_change", args=[calendar.pk])
    delete = reverse("admin:django_schedulinator_calendar_delete", args=[calendar.pk])

    page = client.get(change)
    assert_hides_the_other_team(page.content, "change page")
    assert "schedules you cannot see" in page.content.decode()
    renamed = client.post(
        change,
        {"name": "renamed", "description": "", "timezone": "UTC", "weekend": ["6", "7"],
         "source": "manual", "country": "", "subdivision": "", "years": "", "days_text": ""},
    )  # fmt: skip
    assert renamed.context["adminform"].form.errors["name"] == [
        "Schedules name this calendar (schedules you cannot see): it keeps its name."
    ]
    assert_hides_the_other_team(renamed.content, "rename")
    page = client.get(delete)
    assert_hides_the_other_team(page.content, "delete page")
    assert "Schedules you cannot see name the calendar closures." in page.content.decode()
    client.post(delete, {"post": "yes"})
    assert Calendar.objects.filter(name="closures").exists()


class TeamWithoutListFilter(TeamSchedules):
    """Refuses the other team's schedules one by one, but cannot say which in SQL."""

    filter_schedules = None


def test_without_a_filter_the_aggregates_are_refused_and_a_calendar_names_no_schedule(
    teams: dict[str, dict[str, Schedule]], settings: Any
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "API_PERMISSION_CLASSES": [f"{__name__}.TeamWithoutListFilter"],
    }
    client = api_user("ann", "a")
    for path in AGGREGATES:
        response = client.get(API + path)
        assert response.status_code == 403, (path, response.content)
        assert "filter_schedules" in response.json()["detail"]
    calendar = Calendar.objects.get(name="closures")
    url = f"{API}calendars/{calendar.pk}/"
    assert client.patch(url, {"description": "shut"}, format="json").status_code == 200
    deleted = client.delete(url)
    assert deleted.status_code == 409
    assert deleted.json()["detail"] == (
        "The calendar 'closures' is used by schedules you cannot see. Take it out of them "
        "before it is deleted."
    )
