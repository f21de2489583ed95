"""The admin: registered tasks only, the same validation and sync, a change log of every
edit, stale edits refused, bulk actions, a read-only ledger and the operations page."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib import messages
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_schedulinator import services
from django_schedulinator.admin import RunAdmin, ScheduleChangeAdmin, local_time
from django_schedulinator.admin.display import short_time
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule, ScheduleChange
from django_schedulinator.outcomes import AUTO_PAUSE_NOTE
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.services import Origin, streaks
from django_schedulinator.timing import to_ms

from .support.admin_pages import change_url, edit_data, form_data
from .support.commits import Client, committed
from .support.heartbeats import beat
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db

BERLIN = ZoneInfo("Europe/Berlin")
CHANGELIST = "admin:django_schedulinator_schedule_changelist"
OPERATIONS = "admin:django_schedulinator_schedule_operations"


@pytest.fixture
def admin_user() -> User:
    # No password (logged in with force_login): hashing one would slow every test down.
    return User.objects.create_superuser("admin", "admin@example.com", None)


@pytest.fixture
def admin_client(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture
def staff_client() -> Callable[..., Client]:
    """A client logged in as a staff user with exactly the given permissions (codenames)."""

    def login(*codenames: str, username: str = "staff") -> Client:
        user = User.objects.create_user(username, password=None, is_staff=True)
        perms = Permission.objects.filter(
            content_type__app_label="django_schedulinator", codename__in=codenames
        )
        assert perms.count() == len(codenames), codenames
        user.user_permissions.add(*perms)
        client = Client()
        client.force_login(user)
        return client

    return login


def add_runs(schedule: Schedule, *statuses: str) -> None:
    """Runs of ``schedule`` an hour apart in the past, the last status the most recent."""
    start = timezone.now().replace(microsecond=0) - timedelta(hours=len(statuses))
    Run.objects.bulk_create(
        Run(
            schedule=schedule,
            scheduled_for=start + timedelta(hours=n),
            status=status,
            task=schedule.task,
            claimed_at=start + timedelta(hours=n),
            worker_id="tests",
            claim_token="",
        )
        for n, status in enumerate(statuses)
    )


def post_action(client: Client, action: str, schedules: list[Schedule], **extra: str) -> Any:
    return client.post(
        reverse(CHANGELIST),
        {"action": action, "index": "0", "_selected_action": [s.pk for s in schedules], **extra},
        follow=True,
    )


def shown_messages(page: Any) -> list[tuple[int, str]]:
    return [(m.level, str(m)) for m in page.context["messages"]]


def listed(page: Any) -> set[str]:
    return {s.name for s in page.context["cl"].result_list}


# -- the form: registered tasks, validation, the index ------------------------------------------


def test_the_task_field_lists_registered_tasks_only(admin_client: Client) -> None:
    page = admin_client.get(reverse("admin:django_schedulinator_schedule_add"))
    assert page.status_code == 200
    html = page.content.decode()
    assert '<option value="tests.record">' in html
    assert "os.system" not in html
    assert "Fill in the timing to see the next runs here." in html
    assert "django_schedulinator/preview.js" in html


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"task": "os.system"}, "task"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"timezone": "Nowhere/Land"}, "timezone"),
        ({"args": "[1, 2"}, "args"),
        ({"kwargs": "[1]"}, "kwargs"),
    ],
)
def test_bad_input_is_a_form_error_and_nothing_is_written(
    admin_client: Client, overrides: dict[str, str], field: str, index: DueIndex
) -> None:
    page = admin_client.post(
        reverse("admin:django_schedulinator_schedule_add"), form_data(**overrides)
    )
    assert page.status_code == 200  # the form again, with errors
    assert field in page.context["adminform"].form.errors
    assert not Schedule.objects.exists()
    assert not ScheduleChange.objects.exists()
    assert index.client.zcard(index.due_key) == 0


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("args", 'Enter a JSON list: [] for no arguments, or for example [1, "a"].'),
        ("kwargs", 'Enter a JSON object: {} for no keyword arguments, or for example {"a": 1}.'),
    ],
)
@pytest.mark.parametrize("text", ["", "  ", "null", "5"])
def test_empty_or_mistyped_args_and_kwargs_are_explained_in_words(
    admin_client: Client, field: str, expected: str, text: str
) -> None:
    page = admin_client.post(
        reverse("admin:django_schedulinator_schedule_add"), form_data(**{field: text})
    )
    assert page.status_code == 200
    assert page.context["adminform"].form.errors[field] == [expected]
    assert not Schedule.objects.exists()


def test_a_schedule_added_in_the_admin_is_indexed(admin_client: Client, index: DueIndex) -> None:
    page = admin_client.post(reverse("admin:django_schedulinator_schedule_add"), form_data())
    assert page.status_code == 302, page.content.decode()[:2000]
    schedule = Schedule.objects.get(name="nightly")
    assert index.scores([schedule.pk])[schedule.pk] == to_ms(schedule.next_run_at)


def test_args_and_kwargs_use_the_json_editor(admin_client: Client) -> None:
    schedule = make_schedule(args=[1, "a"], kwargs={"b": 2})
    html = admin_client.get(change_url(schedule)).content.decode()
    args = re.search(r"<textarea[^>]*name=\"args\"[^>]*>(.*?)</textarea>", html, re.S)
    assert args is not None
    assert 'class="schedulinator-json"' in args.group(0)
    assert 'data-json-type="array"' in args.group(0)
    assert args.group(1).strip() == "[\n  1,\n  &quot;a&quot;\n]"  # pretty-printed
    assert 'data-json-type="object"' in html
    assert 'id="id_args_json_message"' in html
    assert "django_schedulinator/json_editor.js" in html


# -- the changelist -----------------------------------------------------------------------------


def test_the_changelist_shows_timing_next_and_last_run(admin_client: Client) -> None:
    nightly = make_schedule(
        "nightly",
        kind="cron",
        cron="0 3 * * *",
        timezone="Europe/Berlin",
        # Its next run is 3 to 4 days ahead (with an hour to spare), whatever the time now.
        start_at=timezone.now() + timedelta(days=3, hours=1),
    )
    add_runs(nightly, "succeeded", "failed")
    fresh = make_schedule("fresh")
    finished = make_schedule("finished")
    Schedule.objects.filter(pk=finished.pk).update(next_run_at=None, due_at=None)
    html = admin_client.get(reverse(CHANGELIST)).content.decode()

    assert "At 03:00 (Europe/<wbr>Berlin)" in html  # the description, which may break at "/"
    # In the schedule's zone (CET or CEST), shorter than on its page ("2 Dec 03:00 CET"),
    # the exact time as the tooltip.
    shown = short_time(nightly.next_run_at, "Europe/Berlin")
    assert re.fullmatch(r"\d{1,2} \w{3}( \d{4})? 03:00 CES?T", shown), shown
    day, clock, zone = shown.rsplit(" ", 2)
    exact = local_time(nightly.next_run_at, "Europe/Berlin", seconds=True)
    assert f'title="{exact}"><span>{day}</span> <span>{clock} {zone}</span>' in html
    assert re.search(r"in [34]\xa0days", html)  # and relative
    assert 'class="schedulinator-status schedulinator-status-failed">Failed</span>' in html
    assert "never run" in html  # fresh
    assert '<td class="field-next_run">-</td>' in html  # finished
    runs = reverse("admin:django_schedulinator_run_changelist")
    for schedule in (nightly, fresh):
        assert f'href="{runs}?schedule__id__exact={schedule.pk}"' in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"kind__exact": "cron"}, {"nightly", "paused"}),
        ({"kind__exact": "interval"}, {"hourly", "broken"}),
        ({"enabled__exact": "0"}, {"paused"}),
        ({"task": "tests.noop"}, {"hourly"}),
        ({"task": "__unregistered__"}, {"broken"}),
        ({"last_run_status": "failed"}, {"nightly"}),
        ({"last_run_status": "succeeded"}, {"hourly"}),
        ({"last_run_status": "never"}, {"paused", "broken"}),
        ({"q": "hour"}, {"hourly"}),
    ],
)
def test_the_changelist_filters(
    admin_client: Client, query: dict[str, str], expected: set[str]
) -> None:
    nightly = make_schedule("nightly", kind="cron", cron="0 3 * * *")
    add_runs(nightly, "succeeded", "failed")  # the most recent one counts
    hourly = make_schedule("hourly", task="tests.noop")
    add_runs(hourly, "failed", "succeeded")
    make_schedule("paused", kind="cron", enabled=False)
    broken = make_schedule("broken")
    Schedule.objects.filter(pk=broken.pk).update(task="gone.task")  # its task was removed

    page = admin_client.get(reverse(CHANGELIST), query)
    assert page.status_code == 200
    assert listed(page) == expected
    html = page.content.decode()
    for title in ("By task", "By status of last run", "Never run", "Not registered"):
        assert title in html


def test_the_changelist_marks_a_missed_run_until_a_later_run_succeeds(
    admin_client: Client,
) -> None:
    """The mark of docs/alerts.md: the nominal time, to the second, in the schedule's zone,
    in words (the colour only adds to them); a filter lists the schedules it marks."""
    nightly = make_schedule("nightly", kind="cron", cron="0 3 * * *", timezone="Europe/Berlin")
    add_runs(nightly, "succeeded", "failed")
    failed = Run.objects.get(schedule=nightly, status="failed")
    Schedule.objects.filter(pk=nightly.pk).update(missed_at=failed.scheduled_for)
    recovered = make_schedule("recovered")
    add_runs(recovered, "failed", "succeeded")
    first = Run.objects.filter(schedule=recovered).earliest("scheduled_for")
    Schedule.objects.filter(pk=recovered.pk).update(missed_at=first.scheduled_for)
    make_schedule("never-missed")

    page = admin_client.get(reverse(CHANGELIST))
    html = page.content.decode()
    local = failed.scheduled_for.astimezone(BERLIN)
    # Shorter in the list, under the column "missed"; the exact time in its tooltip.
    mark = short_time(failed.scheduled_for, "Europe/Berlin", seconds=True)
    assert f'title="{local:%Y-%m-%d %H:%M:%S %Z} No successful run' in html
    day, clock, zone = mark.rsplit(" ", 2)
    assert f"<span>{day}</span> <span>{clock} {zone}</span>" in html
    assert html.count("schedulinator-missed") == 1  # a later success clears it
    assert "By missed runs" in html
    missed = admin_client.get(reverse(CHANGELIST), {"missed": "yes"})
    assert listed(missed) == {"nightly"}
    others = admin_client.get(reverse(CHANGELIST), {"missed": "no"})
    assert listed(others) == {"recovered", "never-missed"}


def test_the_grace_is_set_in_the_form_with_the_other_policies(admin_client: Client) -> None:
    page = admin_client.post(
        reverse("admin:django_schedulinator_schedule_add"),
        form_data(name="graced", grace="00:30:00"),
    )
    assert page.status_code == 302, page.context["adminform"].form.errors
    assert Schedule.objects.get(name="graced").grace == timedelta(minutes=30)
    form = admin_client.get(change_url(Schedule.objects.get(name="graced"))).content.decode()
    policies = form[form.index("Missed runs, overlap and failures") :]
    assert 'name="grace"' in policies
    assert "Raise a missed-run alert" in policies


def test_a_page_of_schedules_costs_the_same_queries_whatever_its_size(
    admin_client: Client,
) -> None:
    def create(count: int) -> None:
        for _ in range(count):
            add_runs(make_schedule(), "succeeded", "failed", "skipped")

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            page = admin_client.get(reverse(CHANGELIST))
        assert page.status_code == 200
        return len(captured.captured_queries)

    create(5)
    queries()  # warm caches (content types, ...)
    five = queries()
    create(55)
    sixty = queries()
    assert len(admin_client.get(reverse(CHANGELIST)).context["cl"].result_list) == 60
    assert five == sixty > 0


def test_the_operations_link_needs_its_permission(
    admin_client: Client, staff_client: Callable[..., Client]
) -> None:
    link = 'id="schedulinator-operations-link"'
    assert link in admin_client.get(reverse(CHANGELIST)).content.decode()
    viewer = staff_client("view_schedule")
    assert link not in viewer.get(reverse(CHANGELIST)).content.decode()


# -- the change form: preview, history, stale edits ---------------------------------------------


def spring_forward() -> date:
    """The day the clocks jump from 02:00 to 03:00 in Europe next year (the last Sunday of
    March; 2027-03-28 for a test run in 2026): always ahead, so the test never goes stale."""
    last = date(timezone.now().year + 1, 3, 31)
    return last - timedelta(days=(last.weekday() - 6) % 7)


def test_the_preview_flags_a_local_time_that_does_not_exist(admin_client: Client) -> None:
    day = spring_forward()
    schedule = make_schedule(
        kind="cron",
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        start_at=datetime.combine(day - timedelta(days=2), time(0), tzinfo=BERLIN),
    )
    html = admin_client.get(change_url(schedule)).content.decode()
    table = re.search(r'<table id="schedulinator-preview".*?</table>', html, re.S)
    assert table is not None
    rows = re.findall(r'<tr class="([^"]*)">(.*?)</tr>', table.group(0), re.S)
    assert len(rows) == 10  # PREVIEW_COUNT
    flagged = [cells for classes, cells in rows if "dst" in classes.split()]
    assert len(flagged) == 1
    assert f"Sun {day} 03:30:00 CEST" in flagged[0]  # shifted by the gap
    assert f"{day} 01:30:00 UTC" in flagged[0]
    assert "⚠ DST" in flagged[0]
    assert f"02:30 does not exist in Europe/Berlin on {day}" in flagged[0]
    assert f"Fri {day - timedelta(days=2)} 02:30:00 CET" in rows[0][1]


def test_the_preview_marks_a_skipped_occurrence(admin_client: Client) -> None:
    schedule = make_schedule(
        kind="cron",
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        dst_gap="skip",
        start_at=datetime.combine(spring_forward() - timedelta(days=2), time(0), tzinfo=BERLIN),
    )
    html = admin_client.get(change_url(schedule)).content.decode()
    skipped = re.findall(r'<tr class="dst skipped">(.*?)</tr>', html, re.S)
    assert len(skipped) == 1
    assert "does not fire" in skipped[0]
    assert "skipped by the DST policy" in skipped[0]


def test_the_preview_of_a_paused_schedule_says_so(admin_client: Client) -> None:
    schedule = make_schedule(kind="cron", cron="0 3 * * *", timezone="Europe/Berlin")
    services.pause(schedule, "maintenance")
    html = admin_client.get(change_url(schedule)).content.decode()
    assert "these are the runs that would follow a resume now" in html
    assert 'id="schedulinator-preview"' in html


# -- the live preview: the next runs of a form not saved yet ---------------------------------

PREVIEW_ADD = "admin:django_schedulinator_schedule_preview"


def preview_change_url(schedule: Schedule) -> str:
    return reverse("admin:django_schedulinator_schedule_preview_change", args=[schedule.pk])


def table_rows(html: str) -> list[str]:
    return re.findall(r"<tr class=\"[^\"]*\">(.*?)</tr>", html, re.S)


def test_the_add_form_previews_its_timing_before_it_is_saved(admin_client: Client) -> None:
    answer = admin_client.post(
        reverse(PREVIEW_ADD), form_data(cron="0 6 * * 1-5", timezone="Europe/Berlin")
    )
    assert answer.status_code == 200
    body = answer.json()
    assert body["description"] == "At 06:00, Monday through Friday (Europe/Berlin)"
    rows = table_rows(body["preview"])
    assert len(rows) == 10  # PREVIEW_COUNT
    assert all(re.search(r"(Mon|Tue|Wed|Thu|Fri) \S+ 06:00:00 CES?T", row) for row in rows)
    # Nothing was saved: no row, no index entry, no change-log entry.
    assert (Schedule.objects.count(), ScheduleChange.objects.count()) == (0, 0)


def test_the_preview_flags_a_dst_change_before_the_form_is_saved(admin_client: Client) -> None:
    day = spring_forward()
    start = day - timedelta(days=1)
    answer = admin_client.post(
        reverse(PREVIEW_ADD),
        form_data(cron="30 2 * * *", start_at_0=str(start), start_at_1="00:00:00"),
    ).json()
    flagged = [row for row in table_rows(answer["preview"]) if "⚠ DST" in row]
    assert len(flagged) == 1
    assert f"02:30 does not exist in Europe/Berlin on {day}" in flagged[0]


def test_the_preview_names_what_is_wrong_with_the_timing_only(admin_client: Client) -> None:
    answer = admin_client.post(
        reverse(PREVIEW_ADD),
        form_data(name="", args="[1", cron="61 * * * *", timezone="Nowhere/Land"),
    ).json()
    html = answer["preview"]
    assert "The next runs show here once the timing is valid" in html
    assert "Invalid cron expression" in html
    assert "Unknown time zone" in html
    # Not the preview's business: the name and the args.
    assert "Name" not in html
    assert "Args" not in html
    assert answer["description"] == ""


def test_the_preview_escapes_what_was_typed(admin_client: Client) -> None:
    html = admin_client.post(
        reverse(PREVIEW_ADD), form_data(cron="<script>alert(1)</script>")
    ).json()["preview"]
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_the_change_form_previews_an_edit_without_saving_it(admin_client: Client) -> None:
    schedule = make_schedule(kind="cron", cron="0 3 * * *", timezone="Europe/Berlin")
    page = admin_client.get(change_url(schedule)).content.decode()
    assert f'data-preview-url="{preview_change_url(schedule)}"' in page
    answer = admin_client.post(
        preview_change_url(schedule), edit_data(schedule, 1, cron="15 18 * * *")
    ).json()
    assert answer["description"] == "At 18:15 (Europe/Berlin)"
    assert all(" 18:15:00 " in row for row in table_rows(answer["preview"]))
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.cron, row.version, row.next_run_at) == ("0 3 * * *", 1, schedule.next_run_at)


def test_the_day_rule_is_chosen_in_the_form_and_the_preview_follows_it(
    admin_client: Client,
) -> None:
    page = admin_client.get(reverse("admin:django_schedulinator_schedule_add")).content.decode()
    assert '<select name="day_rule"' in page
    fields = re.search(r'data-timing-fields="([^"]*)"', page)
    assert fields is not None
    assert "day_rule" in fields.group(1).split()  # preview.js posts the form when it changes
    first_monday = {"cron": "30 6 1-7 * 1", "day_rule": "both", "timezone": "Europe/Berlin"}

    answer = admin_client.post(reverse(PREVIEW_ADD), form_data(**first_monday)).json()

    assert answer["description"] == (
        "At 06:30, between day 1 and 7 of the month, but only on Monday (Europe/Berlin)"
    )
    days = re.findall(r"<td>Mon \d{4}-\d\d-(\d\d) 06:30:00 CES?T</td>", answer["preview"])
    assert len(days) == 10
    assert all(int(day) <= 7 for day in days)

    saved = admin_client.post(
        reverse("admin:django_schedulinator_schedule_add"), form_data(**first_monday)
    )
    assert saved.status_code == 302
    schedule = Schedule.objects.get(name="nightly")
    assert schedule.day_rule == "both"
    assert schedule.next_run_at is not None
    local = schedule.next_run_at.astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.weekday(), local.day <= 7) == (0, True)


def test_the_preview_needs_the_permission_to_save_the_form(
    staff_client: Callable[..., Client],
) -> None:
    schedule = make_schedule()
    viewer = staff_client("view_schedule")
    assert viewer.post(reverse(PREVIEW_ADD), form_data()).status_code == 403
    assert viewer.post(preview_change_url(schedule), edit_data(schedule, 1)).status_code == 403
    editor = staff_client("view_schedule", "change_schedule", username="editor")
    assert editor.post(preview_change_url(schedule), edit_data(schedule, 1)).status_code == 200
    assert editor.get(preview_change_url(schedule)).status_code == 405
    missing = reverse("admin:django_schedulinator_schedule_preview_change", args=[10**9])
    assert editor.post(missing, form_data()).status_code == 404


def test_the_change_form_shows_runs_and_recent_changes(
    admin_client: Client, admin_user: User
) -> None:
    schedule = make_schedule(kind="cron", cron="0 3 * * *", timezone="Europe/Berlin")
    add_runs(schedule, "succeeded", "failed", "succeeded")
    services.pause(schedule, "db <migration>", origin=Origin(admin_user, "admin"))
    html = admin_client.get(change_url(schedule)).content.decode()
    runs = reverse("admin:django_schedulinator_run_changelist")
    assert f'href="{runs}?schedule__id__exact={schedule.pk}"' in html
    assert ">3 runs</a>" in html
    changes = reverse("admin:django_schedulinator_schedulechange_changelist")
    assert f'href="{changes}?schedule__id__exact={schedule.pk}"' in html
    table = re.search(r'<table id="schedulinator-changes".*?</table>', html, re.S)
    assert table is not None
    assert "<td>admin</td><td>Admin</td><td>Paused</td>" in table.group(0)
    assert "note: db &lt;migration&gt;" in table.group(0)  # escaped
    assert "At 03:00 (Europe/Berlin)" in html
    version = re.search(r'field-settings_version.*?<div class="readonly">(\d+)</div>', html, re.S)
    assert version is not None
    assert int(version.group(1)) == Schedule.objects.get(pk=schedule.pk).version == 2


def test_an_edit_from_a_stale_form_is_refused(admin_client: Client, index: DueIndex) -> None:
    schedule = make_schedule("nightly", kind="cron", cron="0 3 * * *", timezone="Europe/Berlin")
    page = admin_client.get(change_url(schedule))
    started = page.context["adminform"].form["version"].value()
    assert started == schedule.version
    assert f'<input type="hidden" name="version" value="{started}"' in page.content.decode()

    with committed():
        services.pause(schedule, "someone else")  # meanwhile, through another path
    page = admin_client.post(change_url(schedule), edit_data(schedule, started, cron="0 4 * * *"))

    assert page.status_code == 200
    errors = page.context["adminform"].form.non_field_errors()
    assert errors == [
        "This schedule was changed by someone else while you edited it (now version "
        f"{started + 1}, you started from {started}). Reload the page to see their change, "
        "then make yours again."
    ]
    schedule.refresh_from_db()
    assert (schedule.cron, schedule.enabled, schedule.version) == ("0 3 * * *", False, started + 1)
    assert not ScheduleChange.objects.filter(action="changed").exists()
    assert index.scores([schedule.pk])[schedule.pk] is None  # still paused

    # From the current version, the same edit goes through.
    page = admin_client.post(
        change_url(schedule), edit_data(schedule, schedule.version, cron="0 4 * * *")
    )
    assert page.status_code == 302, page.context["adminform"].form.errors
    schedule.refresh_from_db()
    assert schedule.cron == "0 4 * * *"


def test_the_dispatcher_is_a_choice_of_the_configured_aliases(
    admin_client: Client, settings: Any
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"queue": {"BACKEND": "tests.support.dispatchers.HandOff"}},
    }
    html = admin_client.get(reverse("admin:django_schedulinator_schedule_add")).content.decode()
    assert '<option value="default" selected>default</option>' in html
    assert '<option value="queue">queue</option>' in html
    page = admin_client.post(
        reverse("admin:django_schedulinator_schedule_add"),
        form_data(dispatcher="queue", dispatch_options='{"queue": "reports"}'),
    )
    assert page.status_code == 302, page.context["adminform"].form.errors
    schedule = Schedule.objects.get(name="nightly")
    assert (schedule.dispatcher, schedule.dispatch_options) == ("queue", {"queue": "reports"})

    # The alias leaves the settings: the schedule keeps it, and stays editable.
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": {}}
    html = admin_client.get(change_url(schedule)).content.decode()
    assert '<option value="queue" selected>queue (not configured)</option>' in html
    page = admin_client.post(
        change_url(schedule),
        edit_data(schedule, 1, dispatcher="queue", dispatch_options='{"queue": "reports"}',
                  cron="0 4 * * *"),
    )  # fmt: skip
    assert page.status_code == 302, page.context["adminform"].form.errors


def test_a_schedule_whose_task_is_gone_can_still_be_edited(admin_client: Client) -> None:
    schedule = make_schedule("broken", kind="cron", cron="0 3 * * *", timezone="Europe/Berlin")
    Schedule.objects.filter(pk=schedule.pk).update(task="gone.task")  # removed from the code
    html = admin_client.get(change_url(schedule)).content.decode()
    assert '<option value="gone.task" selected>gone.task (not registered)</option>' in html

    page = admin_client.post(
        change_url(schedule), edit_data(schedule, 1, task="gone.task", cron="0 4 * * *")
    )
    assert page.status_code == 302, page.context["adminform"].form.errors
    schedule.refresh_from_db()
    assert (schedule.task, schedule.cron) == ("gone.task", "0 4 * * *")
    assert ScheduleChange.objects.get(action="changed").changes == {
        "cron": ["0 3 * * *", "0 4 * * *"]
    }

    # Changing to another unregistered name is still refused.
    page = admin_client.post(
        change_url(schedule), edit_data(schedule, schedule.version, task="other.gone")
    )
    assert page.status_code == 200
    [error] = page.context["adminform"].form.errors["task"]
    assert "Select a valid choice" in error
    assert Schedule.objects.get(pk=schedule.pk).task == "gone.task"


@pytest.mark.parametrize(
    "overrides",
    [
        {"cron": "61 * * * *"},
        {"timezone": "Nowhere/Land"},
        {"kind": "interval"},  # without an interval
        {"kind": "once"},  # without a time
        {"args": "[1, 2"},
        {"task": "os.system"},
    ],
)
def test_bad_input_on_the_change_form_is_shown_again(
    admin_client: Client, overrides: dict[str, str]
) -> None:
    schedule = make_schedule("nightly", kind="cron", cron="0 3 * * *", timezone="Europe/Berlin")
    page = admin_client.post(change_url(schedule), edit_data(schedule, 1, **overrides))
    assert page.status_code == 200  # the form again, with its errors: no server error
    assert page.context["adminform"].form.errors
    schedule.refresh_from_db()
    assert (schedule.cron, schedule.timezone, schedule.version) == ("0 3 * * *", "Europe/Berlin", 1)
    assert not ScheduleChange.objects.exists()


def test_an_edit_without_a_version_is_refused(admin_client: Client) -> None:
    schedule = make_schedule("nightly", kind="cron", cron="0 3 * * *", timezone="Europe/Berlin")
    data = edit_data(schedule, 1, cron="0 4 * * *")
    del data["version"]
    page = admin_client.post(change_url(schedule), data)
    assert page.status_code == 200
    assert "which version" in str(page.context["adminform"].form.non_field_errors())
    schedule.refresh_from_db()
    assert schedule.cron == "0 3 * * *"


# -- the change log -------------------------------------------------------------------------


def test_creating_changing_and_deleting_are_recorded(
    admin_client: Client, admin_user: User, index: DueIndex
) -> None:
    admin_client.post(reverse("admin:django_schedulinator_schedule_add"), form_data())
    schedule = Schedule.objects.get(name="nightly")
    created = ScheduleChange.objects.get(action="created")
    assert (created.schedule_id, created.actor_id, created.actor_name) == (
        schedule.pk,
        admin_user.pk,
        "admin",
    )
    assert created.source == "admin"
    assert created.changes["name"] == [None, "nightly"]
    assert created.changes["cron"] == [None, "0 3 * * *"]
    assert created.version == schedule.version
    listed_changes = admin_client.get(
        reverse("admin:django_schedulinator_schedulechange_changelist")
    ).content.decode()
    assert "name=nightly; task=tests.record" in listed_changes
    assert "max_runs" not in listed_changes  # blank fields are left out of the summary

    page = admin_client.post(
        change_url(schedule), edit_data(schedule, schedule.version, cron="0 4 * * *")
    )
    assert page.status_code == 302
    changed = ScheduleChange.objects.get(action="changed")
    assert changed.changes == {"cron": ["0 3 * * *", "0 4 * * *"]}
    assert changed.actor_name == "admin"
    assert changed.version == schedule.version + 1

    # Saving without a change records nothing.
    schedule.refresh_from_db()
    admin_client.post(change_url(schedule), edit_data(schedule, schedule.version))
    assert ScheduleChange.objects.filter(action="changed").count() == 1

    add_runs(schedule, "succeeded")
    delete = reverse("admin:django_schedulinator_schedule_delete", args=[schedule.pk])
    confirm = admin_client.get(delete)
    assert confirm.status_code == 200
    assert "1 run: the ledger of the schedules above" in confirm.content.decode()
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not Schedule.objects.exists()
    assert not Run.objects.exists()
    deleted = ScheduleChange.objects.get(action="deleted")
    assert deleted.schedule_id is None
    assert (deleted.schedule_name, deleted.actor_name) == ("nightly", "admin")
    assert deleted.changes["cron"] == ["0 4 * * *", None]
    assert ScheduleChange.objects.count() == 3  # kept, now without their schedule
    assert index.client.zcard(index.due_key) == 0


def test_deleting_selected_schedules_records_and_resyncs(
    admin_client: Client, index: DueIndex
) -> None:
    doomed = [make_schedule("a"), make_schedule("b")]
    kept = make_schedule("c")
    for schedule in doomed:
        add_runs(schedule, "succeeded", "failed")
    confirm = post_action(admin_client, "delete_selected", doomed)
    html = confirm.content.decode()
    assert "4 runs: the ledger of the schedules above" in html
    assert "permission" not in html  # the runs go with their schedules

    page = admin_client.post(
        reverse(CHANGELIST),
        {"action": "delete_selected", "_selected_action": [s.pk for s in doomed], "post": "yes"},
        follow=True,
    )
    assert page.status_code == 200
    assert list(Schedule.objects.values_list("name", flat=True)) == ["c"]
    assert set(ScheduleChange.objects.values_list("schedule_name", "action")) == {
        ("a", "deleted"),
        ("b", "deleted"),
    }
    assert index.scores([s.pk for s in doomed]) == {s.pk: None for s in doomed}
    assert index.scores([kept.pk])[kept.pk] is not None


# -- actions ------------------------------------------------------------------------------


def test_pause_with_a_note(admin_client: Client, admin_user: User, index: DueIndex) -> None:
    running = make_schedule("running")
    already = make_schedule("already")
    services.pause(already, "earlier")
    assert index.scores([running.pk])[running.pk] is not None

    page = post_action(admin_client, "pause", [running, already], note="  db migration ")

    running.refresh_from_db()
    assert (running.enabled, running.pause_note) == (False, "db migration")
    assert index.scores([running.pk])[running.pk] is None
    entry = ScheduleChange.objects.get(action="paused", source="admin")
    assert (entry.schedule_id, entry.actor_id, entry.source) == (running.pk, admin_user.pk, "admin")
    assert entry.changes == {"note": "db migration"}
    already.refresh_from_db()
    assert already.pause_note == "earlier"  # left alone
    assert shown_messages(page) == [
        (messages.SUCCESS, 'Paused 1 schedule with the note "db migration": running.'),
        (messages.WARNING, "Already paused, left as they were: already."),
    ]


def test_the_action_form_has_the_note(admin_client: Client) -> None:
    make_schedule()
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "Note (for pause)" in html
    assert '<input type="text" name="note" maxlength="500">' in html
    for action in ("pause", "resume", "run_now", "resync_index", "delete_selected"):
        assert f'<option value="{action}">' in html


def test_resume(admin_client: Client, index: DueIndex) -> None:
    schedule = make_schedule()
    services.pause(schedule)
    page = post_action(admin_client, "resume", [schedule])
    schedule.refresh_from_db()
    assert schedule.enabled
    assert index.scores([schedule.pk])[schedule.pk] == to_ms(schedule.due_at)
    assert ScheduleChange.objects.filter(action="resumed", schedule=schedule).exists()
    assert (messages.SUCCESS, f"Resumed 1 schedule: {schedule.name}.") in shown_messages(page)


def test_run_now_queues_a_run_and_reports_unregistered_tasks(admin_client: Client) -> None:
    fine = make_schedule("fine")
    broken = make_schedule("broken")
    Schedule.objects.filter(pk=broken.pk).update(task="gone.task")

    page = post_action(admin_client, "run_now", [fine, broken])

    assert page.status_code == 200
    run = Run.objects.get()
    assert (run.schedule_id, run.trigger, run.status) == (fine.pk, "run_now", "pending")
    assert ScheduleChange.objects.get(action="run_now").schedule_id == fine.pk
    shown = shown_messages(page)
    assert (messages.ERROR, "broken: 'gone.task' is not a registered task here, so it cannot be "
            "run. Register it with @django_schedulinator.task.") in shown  # fmt: skip
    assert any(
        level == messages.SUCCESS and text.startswith("Queued 1 run now: fine.")
        for level, text in shown
    )


def test_a_schedule_whose_task_is_gone_can_still_be_paused(admin_client: Client) -> None:
    # The schedule an operator most wants to stop: its task was removed from the code.
    broken = make_schedule("broken")
    Schedule.objects.filter(pk=broken.pk).update(task="gone.task")
    page = post_action(admin_client, "pause", [broken], note="task removed")
    assert page.status_code == 200
    [(level, _text)] = shown_messages(page)
    assert level == messages.SUCCESS
    broken.refresh_from_db()
    assert (broken.enabled, broken.pause_note) == (False, "task removed")


def test_pause_reports_a_note_the_model_refuses(admin_client: Client) -> None:
    schedule = make_schedule("long-note")
    page = post_action(admin_client, "pause", [schedule], note="x" * 501)
    assert page.status_code == 200
    assert shown_messages(page) == [
        (
            messages.ERROR,
            "Nothing was paused. Note (for pause): Ensure this value has at most 500 "
            "characters (it has 501).",
        )
    ]
    assert Schedule.objects.get(pk=schedule.pk).enabled
    assert not ScheduleChange.objects.filter(action="paused").exists()


def test_resync_restores_a_lost_entry(admin_client: Client, index: DueIndex) -> None:
    schedule = make_schedule()
    index.client.zrem(index.due_key, schedule.pk)  # lost, as after a partial failure
    page = post_action(admin_client, "resync_index", [schedule])
    assert index.scores([schedule.pk])[schedule.pk] == to_ms(schedule.due_at)
    assert ScheduleChange.objects.filter(action="resynced", schedule=schedule).exists()
    [(level, text)] = shown_messages(page)
    assert level == messages.SUCCESS
    assert "Resynced the due index for 1 schedule (1 index entries" in text


@pytest.mark.parametrize("action", ["pause", "resume", "delete_selected"])
def test_a_bulk_action_writes_the_index_only_once_committed(
    admin_client: Client, index: DueIndex, action: str
) -> None:
    schedule = make_schedule()
    if action == "resume":
        with committed():
            services.pause(schedule)
    before = index.scores([schedule.pk])[schedule.pk]
    extra = {"post": "yes"} if action == "delete_selected" else {}

    # As under ATOMIC_REQUESTS: the view runs inside a transaction that is rolled back.
    with committed(), transaction.atomic():
        post_action(admin_client, action, [schedule], **extra)
        assert index.scores([schedule.pk])[schedule.pk] == before  # nothing committed yet
        transaction.set_rollback(True)
    assert index.scores([schedule.pk])[schedule.pk] == before  # nor ever: rolled back

    with committed(), transaction.atomic():
        post_action(admin_client, action, [schedule], **extra)
        assert index.scores([schedule.pk])[schedule.pk] == before
    after = index.scores([schedule.pk])[schedule.pk]
    assert after != before  # committed: the index follows
    if action == "resume":
        assert after == to_ms(Schedule.objects.get(pk=schedule.pk).due_at)


def admin_path(client: Client, path: str, schedule: Schedule) -> Any:
    """Each way the admin changes a schedule (or queues a run of it), as a user takes it."""
    if path == "add":
        return client.post(reverse("admin:django_schedulinator_schedule_add"), form_data())
    if path == "change":
        return client.post(
            change_url(schedule), edit_data(schedule, schedule.version, cron="5 3 * * *")
        )
    if path == "delete":
        url = reverse("admin:django_schedulinator_schedule_delete", args=[schedule.pk])
        return client.post(url, {"post": "yes"})
    extra = {"post": "yes"} if path == "delete_selected" else {}
    return post_action(client, path, [schedule], **extra)


@pytest.mark.parametrize(
    "path", ["add", "change", "pause", "resume", "run_now", "delete", "delete_selected"]
)
def test_each_admin_path_leaves_the_index_to_the_services(
    admin_client: Client, index: DueIndex, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The services make the index follow each change once it commits (the model's signals,
    ``sync.resync_on_commit``); the admin writes it no second time, and the index is right
    after every path (real Redis, its writes counted)."""
    schedule = make_schedule(kind="cron", cron="0 3 * * *", timezone="Europe/Berlin")
    if path == "resume":
        services.pause(schedule)
    written: list[int] = []
    apply = DueIndex.apply

    def counted(self: DueIndex, changes: Any, release_token: str = "") -> Any:
        written.extend(change.schedule_id for change in changes)
        return apply(self, changes, release_token)

    monkeypatch.setattr(DueIndex, "apply", counted)
    page = admin_path(admin_client, path, schedule)
    assert page.status_code in (200, 302)

    row = Schedule.objects.filter(name="nightly" if path == "add" else schedule.name).first()
    if path in ("delete", "delete_selected"):
        assert row is None
        assert index.scores([schedule.pk]) == {schedule.pk: None}
    else:
        assert row is not None
        expected = to_ms(row.due_at) if row.enabled and row.due_at else None
        assert index.scores([row.pk]) == {row.pk: expected}
    changed = path != "run_now"  # a run queued now leaves the schedule's entry as it was
    assert written == ([row.pk if row else schedule.pk] if changed else [])


# The failure is told while the request runs, from its commit: real commits (transaction=True).
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_down")
def test_with_atomic_requests_a_redis_outage_is_still_reported(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    schedule = make_schedule()
    page = post_action(admin_client, "pause", [schedule], note="outage")
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    shown = shown_messages(page)
    assert [level for level, _text in shown] == [messages.SUCCESS, messages.ERROR]
    assert "The due index could not be updated" in shown[1][1]


@pytest.mark.django_db(transaction=True)  # told from the request's commit, as above
@pytest.mark.usefixtures("redis_down")
def test_an_action_while_redis_is_down_is_an_error_message(admin_client: Client) -> None:
    schedule = make_schedule()
    page = post_action(admin_client, "pause", [schedule], note="outage")
    assert page.status_code == 200
    schedule.refresh_from_db()
    assert not schedule.enabled  # the row is the truth; reconcile heals the index
    levels = [level for level, _text in shown_messages(page)]
    assert levels == [messages.SUCCESS, messages.ERROR]
    assert "The due index could not be updated" in shown_messages(page)[1][1]

    page = post_action(admin_client, "resync_index", [schedule])
    assert [level for level, _text in shown_messages(page)] == [messages.ERROR]
    assert not ScheduleChange.objects.filter(action="resynced").exists()


# -- permissions --------------------------------------------------------------------------------


def test_a_viewer_sees_schedules_but_cannot_change_them(
    staff_client: Callable[..., Client],
) -> None:
    schedule = make_schedule()
    viewer = staff_client("view_schedule")
    page = viewer.get(reverse(CHANGELIST))
    assert page.status_code == 200
    assert listed(page) == {schedule.name}
    assert 'name="action"' not in page.content.decode()  # no actions at all

    for action in ("pause", "delete_selected"):
        refused = viewer.post(
            reverse(CHANGELIST),
            {"action": action, "index": "0", "_selected_action": [schedule.pk]},
        )
        assert refused.status_code == 403
    schedule.refresh_from_db()
    assert schedule.enabled

    form = viewer.get(change_url(schedule))
    assert form.status_code == 200
    assert 'name="_save"' not in form.content.decode()
    assert viewer.post(change_url(schedule), form_data(name="renamed")).status_code == 403
    assert viewer.get(reverse("admin:django_schedulinator_schedule_add")).status_code == 403


@pytest.mark.parametrize(
    ("codenames", "sees_runs", "sees_changes"),
    [
        ((), False, False),
        (("view_run",), True, False),
        (("view_schedulechange",), False, True),
        (("view_run", "view_schedulechange"), True, True),
    ],
)
def test_runs_and_changes_are_shown_only_with_their_permissions(
    staff_client: Callable[..., Client],
    admin_user: User,
    codenames: tuple[str, ...],
    sees_runs: bool,
    sees_changes: bool,
) -> None:
    schedule = make_schedule(kind="cron", cron="0 3 * * *", kwargs={"token": "abc"})
    add_runs(schedule, "succeeded")
    services.pause(schedule, "maintenance", origin=Origin(admin_user, "admin"))
    viewer = staff_client("view_schedule", *codenames)
    runs = reverse("admin:django_schedulinator_run_changelist")
    changes = reverse("admin:django_schedulinator_schedulechange_changelist")
    assert (viewer.get(runs).status_code == 200) is sees_runs
    assert (viewer.get(changes).status_code == 200) is sees_changes

    html = viewer.get(change_url(schedule)).content.decode()
    assert (f'href="{runs}?' in html) is sees_runs
    assert ('id="schedulinator-runs-link"' in html) is sees_runs
    assert (f'href="{changes}?' in html) is sees_changes
    assert ('id="schedulinator-changes"' in html) is sees_changes
    assert ("note: maintenance" in html) is sees_changes
    assert ('class="fieldset-heading">History</h2>' in html) is (sees_runs or sees_changes)
    listing = viewer.get(reverse(CHANGELIST)).content.decode()
    assert (f'href="{runs}?' in listing) is sees_runs
    assert ('class="column-runs_link"' in listing) is sees_runs


def test_an_editor_without_delete_permission_cannot_delete(
    staff_client: Callable[..., Client],
) -> None:
    schedule = make_schedule()
    editor = staff_client("view_schedule", "change_schedule")
    page = post_action(editor, "pause", [schedule])
    assert page.status_code == 200
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    refused = editor.post(
        reverse(CHANGELIST),
        {"action": "delete_selected", "index": "0", "_selected_action": [schedule.pk]},
    )
    assert refused.status_code == 403
    assert Schedule.objects.filter(pk=schedule.pk).exists()


# -- the ledger and the change log are read-only ----------------------------------------------


def test_the_run_admin_is_read_only(admin_client: Client) -> None:
    schedule = make_schedule("nightly")
    add_runs(schedule, "failed")
    run = Run.objects.get()
    run.note = "x" * 200
    run.save()

    page = admin_client.get(reverse("admin:django_schedulinator_run_changelist"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "nightly" in html
    assert "x" * 79 + "…" in html  # the short note
    assert "delete_selected" not in html
    assert admin_client.get(reverse("admin:django_schedulinator_run_add")).status_code == 403

    view = admin_client.get(reverse("admin:django_schedulinator_run_change", args=[run.pk]))
    assert view.status_code == 200
    assert 'name="_save"' not in view.content.decode()
    assert "Failed" in view.content.decode()
    delete = reverse("admin:django_schedulinator_run_delete", args=[run.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert Run.objects.filter(pk=run.pk).exists()


def test_runs_can_be_listed_for_one_schedule(admin_client: Client) -> None:
    one, other = make_schedule("one"), make_schedule("other")
    add_runs(one, "succeeded", "failed")
    add_runs(other, "succeeded")
    page = admin_client.get(
        reverse("admin:django_schedulinator_run_changelist"), {"schedule__id__exact": one.pk}
    )
    assert page.status_code == 200
    assert {r.schedule_id for r in page.context["cl"].result_list} == {one.pk}
    filtered = admin_client.get(
        reverse("admin:django_schedulinator_run_changelist"), {"status__exact": "failed"}
    )
    assert [r.schedule_id for r in filtered.context["cl"].result_list] == [one.pk]


def test_the_runs_show_when_they_were_raised_as_missed(admin_client: Client) -> None:
    schedule = make_schedule("nightly")
    add_runs(schedule, "failed", "succeeded")
    raised = timezone.now().replace(microsecond=0)
    Run.objects.filter(status="failed").update(missed_at=raised)
    runs = reverse("admin:django_schedulinator_run_changelist")
    page = admin_client.get(runs, {"missed": "yes"})
    [failed] = page.context["cl"].result_list
    assert failed.status == "failed"
    # The list filters by it; the run's page shows when (the list keeps to what fits a
    # laptop's screen).
    html = admin_client.get(
        reverse("admin:django_schedulinator_run_change", args=[failed.pk])
    ).content.decode()
    assert f"{timezone.localtime(raised):%Y-%m-%d %H:%M:%S %Z}" in html
    assert [
        r.status for r in admin_client.get(runs, {"missed": "no"}).context["cl"].result_list
    ] == ["succeeded"]


def counts(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]


def add_entries(count: int) -> None:
    schedule = make_schedule("logged")
    ScheduleChange.objects.bulk_create(
        ScheduleChange(schedule=schedule, schedule_name="logged", source="admin", action="paused")
        for _ in range(count)
    )


@pytest.mark.parametrize(
    ("model_admin", "url", "create", "unit"),
    [
        (
            RunAdmin,
            "admin:django_schedulinator_run_changelist",
            lambda n: add_runs(make_schedule("busy"), *["succeeded"] * n),
            "runs",
        ),
        (
            ScheduleChangeAdmin,
            "admin:django_schedulinator_schedulechange_changelist",
            add_entries,
            "schedule changes",
        ),
    ],
)
def test_a_long_list_is_paged_without_counting_all_of_it(
    admin_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    model_admin: type,
    url: str,
    create: Callable[[int], None],
    unit: str,
) -> None:
    # Small numbers for the test: 2 rows a page, counted at most 5 rows past the page's start.
    monkeypatch.setattr(model_admin, "list_per_page", 2)
    monkeypatch.setattr(model_admin, "list_max_show_all", 2)
    monkeypatch.setattr(model_admin, "count_limit", 5)
    create(12)

    def page(number: int, **query: str) -> Any:
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(reverse(url), {"p": str(number), **query})
        assert response.status_code == 200
        assert counts(captured), "no count at all"
        for sql in counts(captured):
            assert "LIMIT" in sql.upper(), sql  # never a count of the whole table
        return response

    first = page(1)
    cl = first.context["cl"]
    assert len(cl.result_list) == 2
    assert cl.paginator.num_pages == 3  # 6 rows counted: pages 1 to 3 are reachable
    html = first.content.decode()
    assert f"More than 5 {unit}" in html
    assert 'href="?p=2"' in html
    assert 'href="?p=3"' in html
    assert "6 results" not in html  # the search bar does not print the capped count

    third = page(3)  # counted 5 rows past its start: the next pages appear
    assert third.context["cl"].paginator.num_pages == 5
    assert f"More than 9 {unit}" in third.content.decode()
    assert 'href="?p=5"' in third.content.decode()

    last = page(6)  # the whole list counted at last: 12 rows, exactly
    assert last.context["cl"].paginator.num_pages == 6
    assert f"12 {unit}" in last.content.decode()
    assert "More than" not in last.content.decode()
    seen = set()
    for number in range(1, 7):
        seen |= {row.pk for row in page(number).context["cl"].result_list}
    assert len(seen) == 12  # every row reachable

    page(1, _facets="1")  # no counts by filter choice either


def test_a_short_list_shows_its_exact_count(admin_client: Client) -> None:
    add_runs(make_schedule("few"), "succeeded", "failed", "skipped")
    html = admin_client.get(reverse("admin:django_schedulinator_run_changelist")).content.decode()
    assert "3 runs" in html
    assert "More than" not in html


def test_the_change_log_admin_lists_entries(admin_client: Client, admin_user: User) -> None:
    schedule = make_schedule("nightly")
    gone = make_schedule("gone")
    origin = Origin(admin_user, "admin")
    services.pause(schedule, "maintenance", origin=origin)
    services.pause(gone, origin=Origin(None, "command"))
    gone.delete()

    url = reverse("admin:django_schedulinator_schedulechange_changelist")
    page = admin_client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert f'<a href="{change_url(schedule)}">nightly</a>' in html  # a link while it exists
    assert "gone" in html
    assert "note: maintenance" in html
    assert len(admin_client.get(url, {"source__exact": "command"}).context["cl"].result_list) == 1
    assert len(admin_client.get(url, {"q": "nightly"}).context["cl"].result_list) == 1
    by_schedule = admin_client.get(url, {"schedule__id__exact": schedule.pk})
    assert [e.action for e in by_schedule.context["cl"].result_list] == ["paused"]

    assert admin_client.get(f"{url}add/").status_code == 403
    entry = ScheduleChange.objects.get(schedule=schedule)
    view = admin_client.get(
        reverse("admin:django_schedulinator_schedulechange_change", args=[entry.pk])
    )
    assert view.status_code == 200
    assert 'name="_save"' not in view.content.decode()


# -- the operations page ------------------------------------------------------------------------


def test_the_admin_index_links_the_operations_page_to_those_who_may_see_it(
    staff_client: Callable[..., Client], index: DueIndex
) -> None:
    entry = reverse("admin:django_schedulinator_scheduleroperations_changelist")
    operator = staff_client("view_schedule", "view_operations", username="operator")
    home = operator.get(reverse("admin:index")).content.decode()
    # In the app's list (and so in the sidebar), as a page to view, nothing to add.
    assert f'<a href="{entry}">Scheduler operations</a>' in home
    assert "scheduleroperations/add/" not in home
    response = operator.get(entry)
    assert response.status_code == 302
    assert response["Location"] == reverse(OPERATIONS)
    assert operator.get(response["Location"]).status_code == 200

    viewer = staff_client("view_schedule", username="viewer")
    assert entry not in viewer.get(reverse("admin:index")).content.decode()
    assert viewer.get(entry).status_code == 403
    # The entry lists and shows no schedule of its own.
    schedule = make_schedule()
    assert operator.get(f"{entry}{schedule.pk}/change/").status_code == 404


def test_the_operations_page_needs_its_permission(
    staff_client: Callable[..., Client], index: DueIndex
) -> None:
    assert staff_client("view_schedule").get(reverse(OPERATIONS)).status_code == 403

    for name in ("a", "b", "c"):
        make_schedule(name)
    paused = make_schedule("paused")
    with committed():
        services.pause(paused)
    operator = staff_client("view_schedule", "view_operations", username="operator")
    page = operator.get(reverse(OPERATIONS))
    assert page.status_code == 200
    html = page.content.decode()

    def value(key: str) -> str:
        found = re.search(
            rf'<tr id="schedulinator-status-{key}">.*?<td class="value">(.*?)</td>', html, re.S
        )
        assert found is not None, key
        return found.group(1).strip()

    assert (value("schedules"), value("enabled"), value("indexable")) == ("4", "3", "3")
    assert value("entries") == "3"
    assert value("due-now") == "0"
    assert value("lag") == "none due"
    assert value("last-rebuild") == "never"
    assert value("rebuild-running") == "no"
    assert "0 late or missing" in value("drift")
    assert "Scheduler operations" in html
    assert f'<a href="{reverse(CHANGELIST)}">Schedules</a>' in html  # breadcrumbs
    assert 'id="schedulinator-rebuild-form"' not in html  # no rebuild_index permission
    assert operator.post(reverse(OPERATIONS)).status_code == 403
    assert index.built_info() is None


def test_the_operations_page_lists_the_schedulers_seen_recently(
    admin_client: Client, built_index: DueIndex, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "PASS_STALE_SECONDS": 60}
    make_schedule()
    working = beat(built_index, "web-1", pass_ago=2)
    beat(built_index, "web-2", pass_ago=600, error="OperationalError: the database went away")
    html = admin_client.get(reverse(OPERATIONS)).content.decode()

    def cells(row_id: str) -> list[str]:
        row = re.search(rf'<tr id="{row_id}"[^>]*>(.*?)</tr>', html, re.DOTALL)
        assert row is not None, row_id
        found = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row.group(1), re.DOTALL)
        return [re.sub(r"<[^>]+>", " ", c).strip() for c in found]

    rows = {row[0]: row for row in (cells(f"schedulinator-scheduler-{n}") for n in (1, 2))}
    stale, healthy = rows["web-2"], rows["web-1"]
    assert healthy[:4] == ["web-1", working.host, str(working.pid), working.version]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T", healthy[4])  # up since
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T \(2\.\d s ago\)", healthy[5])
    assert healthy[6:] == ["default: 0", "healthy"]
    assert "600." in stale[5]
    # Said in words, not by colour alone, with the reason.
    assert " ".join(stale[7].split()) == (
        "stale: no recent pass OperationalError: the database went away"
    )
    assert 'class="schedulinator-scheduler-stale"' in html
    problems = re.search(r'id="schedulinator-problems">(.*?)</div>', html, re.DOTALL)
    assert problems is not None
    assert "Scheduler web-2" in problems.group(1)
    assert 'data-code="scheduler-stale"' in problems.group(1)
    assert 'id="schedulinator-no-scheduler"' not in html


def test_the_operations_page_says_when_no_scheduler_runs_while_schedules_wait(
    admin_client: Client, built_index: DueIndex
) -> None:
    html = admin_client.get(reverse(OPERATIONS)).content.decode()
    assert 'id="schedulinator-no-schedulers"' in html  # the table's empty row
    assert 'id="schedulinator-no-scheduler"' not in html  # nothing waits: no alarm

    make_schedule()
    make_schedule()
    html = admin_client.get(reverse(OPERATIONS)).content.decode()
    note = re.search(r'id="schedulinator-no-scheduler">(.*?)</div>', html, re.DOTALL)
    assert note is not None
    text = " ".join(re.sub(r"<[^>]+>", " ", note.group(1)).split())
    assert text.startswith("No scheduler is running. 2 schedules wait to fire")
    assert "<code>run_scheduler</code>" in note.group(1)
    assert 'id="schedulinator-problems"' not in html  # said once, in the note

    beat(built_index, "back")
    html = admin_client.get(reverse(OPERATIONS)).content.decode()
    assert 'id="schedulinator-no-scheduler"' not in html


def test_the_operations_page_lists_warnings(admin_client: Client, built_index: DueIndex) -> None:
    beat(built_index)
    failing = make_schedule("nightly-report")
    streaks.auto_pause([failing.pk], note=AUTO_PAUSE_NOTE, using="default")
    html = admin_client.get(reverse(OPERATIONS)).content.decode()
    warnings = re.search(r'id="schedulinator-warnings">(.*?)</div>', html, re.DOTALL)
    assert warnings is not None
    assert 'data-code="auto-paused"' in warnings.group(1)
    assert "nightly-report" in warnings.group(1)
    assert 'id="schedulinator-problems"' not in html


def test_the_operations_page_highlights_drift(admin_client: Client, index: DueIndex) -> None:
    schedule = make_schedule()
    index.client.zrem(index.due_key, schedule.pk)
    html = admin_client.get(reverse(OPERATIONS)).content.decode()
    assert 'id="schedulinator-drift-warning"' in html
    assert f'<a href="{change_url(schedule)}">{schedule.pk}</a>' in html


@pytest.mark.django_db(transaction=True)  # a scheduler's threads: real commits
def test_a_rebuild_from_the_operations_page_is_performed_by_a_scheduler(
    staff_client: Callable[..., Client], built_index: DueIndex
) -> None:
    index = built_index
    schedule = make_schedule()
    index.client.zrem(index.due_key, schedule.pk)
    operator = staff_client(
        "view_schedule", "view_operations", "rebuild_index", username="operator"
    )
    assert 'id="schedulinator-rebuild-form"' in operator.get(reverse(OPERATIONS)).content.decode()

    page = operator.post(reverse(OPERATIONS))
    assert page.status_code == 302
    assert page["Location"] == reverse(OPERATIONS)
    # The request only records what was asked for: it rebuilds nothing, starts no thread.
    assert (index.control.rebuild_request() or {}).get("by") == "admin:operator"
    assert index.scores([schedule.pk])[schedule.pk] is None
    assert not [t for t in threading.enumerate() if "rebuild" in t.name]
    shown = operator.get(reverse(OPERATIONS))
    html = shown.content.decode()
    assert "by admin:operator, waiting for a scheduler" in html
    assert any(text.startswith("Rebuild asked for:") for _level, text in shown_messages(shown))
    assert "<code>rebuild_due_index</code>" in shown_messages(shown)[0][1]

    Worker(worker_id="w1", once=True).run()  # the first scheduler to look performs it

    info = index.built_info()
    assert info is not None
    assert info["by"] == "admin:operator"
    assert index.scores([schedule.pk])[schedule.pk] == to_ms(schedule.due_at)
    assert index.control.rebuild_request() is None
    assert not index.control.rebuild_running()
    assert "by admin:operator" in operator.get(reverse(OPERATIONS)).content.decode()


@pytest.mark.django_db(transaction=True)  # a scheduler's threads: real commits
def test_two_clicks_ask_for_one_rebuild_and_a_running_one_is_waited_for(
    admin_client: Client, built_index: DueIndex
) -> None:
    index = built_index
    first = admin_client.post(reverse(OPERATIONS), follow=True)
    second = admin_client.post(reverse(OPERATIONS), follow=True)
    assert [level for level, _text in shown_messages(first)] == [messages.SUCCESS]
    assert [level for level, _text in shown_messages(second)] == [messages.WARNING]
    assert "A rebuild is already asked for" in shown_messages(second)[0][1]

    lock = index.control.rebuild_lock(60)
    assert lock.acquire(blocking=False)  # another rebuild (the command) runs
    try:
        Worker(worker_id="w1", once=True).run()
        assert index.control.rebuild_request() is not None  # waits for the next look
    finally:
        lock.release()
    assert index.built_info() == {"by": "tests", "shards": 1}


@pytest.mark.usefixtures("redis_down")
def test_the_operations_page_while_redis_is_down(admin_client: Client) -> None:
    make_schedule()
    page = admin_client.get(reverse(OPERATIONS))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="schedulinator-redis-error"' in html
    assert "Redis is unreachable" in html
    page = admin_client.post(reverse(OPERATIONS), follow=True)
    assert [level for level, _text in shown_messages(page)] == [messages.ERROR]


def test_the_operations_page_counts_the_runs_waiting_on_each_dispatcher(
    admin_client: Client, settings: Any
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "queue": {"BACKEND": "tests.support.dispatchers.HandOff", "OPTIONS": {"REPORTS": True}}
        },
    }
    schedule = make_schedule(dispatcher="queue")
    now = timezone.now()

    def run(minutes: int, **fields: Any) -> None:
        Run.objects.create(
            schedule=schedule,
            scheduled_for=now - timedelta(minutes=minutes),
            task=schedule.task,
            claimed_at=now,
            worker_id="t",
            dispatcher="queue",
            **fields,
        )

    run(1, status="dispatched", outcome_due_by=now + timedelta(hours=1))
    run(2, status="dispatched", outcome_due_by=now + timedelta(hours=1))
    run(3, status="dispatched", outcome_due_by=now - timedelta(minutes=1))
    run(4, status="pending", claim_token="", attempts=2, error="broker down",
        lease_expires_at=now + timedelta(seconds=30))  # fmt: skip

    html = admin_client.get(reverse(OPERATIONS)).content.decode()

    row = re.search(r'id="schedulinator-dispatcher-queue">(.*?)</tr>', html, re.DOTALL)
    assert row is not None
    cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row.group(1), re.DOTALL)
    assert [c.strip() for c in cells] == ["queue", "HandOff", "yes", "2", "1", "1"]
    assert 'id="schedulinator-dispatcher-default"' in html
