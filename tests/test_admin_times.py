"""How the admin shows times and commands: run and state times to the second, with their
zone (Django's format, "March 1, 2026, noon", made runs seconds apart look alike), and a
command as code, not in literal backticks."""

from __future__ import annotations

import html
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.urls import reverse

from django_schedulinator.admin.display import short_time
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule, ScheduleChange

from .support.admin_pages import change_url
from .support.commits import Client
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)


def record_run(schedule: Schedule, at: datetime, **fields: Any) -> Run:
    return Run.objects.create(
        schedule=schedule, scheduled_for=at, task=schedule.task, claimed_at=at,
        worker_id="t", **fields,
    )  # fmt: skip


def text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def cell(page: str, field: str) -> list[str]:
    """The text of the list's cells of ``field``, top to bottom."""
    found = re.findall(rf'<t[dh] class="field-{field}\b[^"]*"[^>]*>(.*?)</t[dh]>', page, re.DOTALL)
    return [text(fragment) for fragment in found]


def shown(page: str, field: str) -> str:
    """The text of the read-only ``field`` of a change page."""
    found = re.search(
        rf'class="[^"]*\bfield-{field}\b.*?<div class="readonly">(.*?)</div>', page, re.DOTALL
    )
    assert found is not None, f"no read-only {field}"
    return text(found.group(1))


def test_the_runs_list_shows_runs_seconds_apart_apart(admin_client: Client) -> None:
    schedule = make_schedule()
    record_run(schedule, NOON, status="succeeded", finished_at=NOON + timedelta(seconds=2))
    record_run(schedule, NOON + timedelta(seconds=5), status="succeeded")

    page = admin_client.get(reverse("admin:django_schedulinator_run_changelist")).content.decode()

    # Shorter than on a run's page (the list fits a laptop's screen), still to the second.
    later, earlier = short_time(NOON + timedelta(seconds=5)), short_time(NOON)
    assert later != earlier
    assert cell(page, "scheduled_for") == [later, earlier]
    assert cell(page, "finished_at") == ["-", short_time(NOON + timedelta(seconds=2))]
    # The exact time is the tooltip.
    assert 'title="2026-03-01 12:00:10 UTC">' in page
    # Its header keeps its name, and sorts by the field.
    header = re.search(r'<th scope="col" class="sortable column-scheduled_for.*?</th>', page, re.S)
    assert header is not None
    assert "Scheduled for</a>" in header[0]


def test_a_list_time_names_the_year_only_when_it_is_not_this_one() -> None:
    now = datetime(2026, 11, 29, tzinfo=UTC)
    assert short_time(NOON, now=now) == "1 Mar 12:00:05 UTC"
    assert short_time(NOON, now=now.replace(year=2027)) == "1 Mar 2026 12:00:05 UTC"
    assert short_time(NOON, "Europe/Berlin", now=now) == "1 Mar 13:00:05 CET"
    whole = NOON.replace(second=0)
    assert short_time(whole, now=now) == "1 Mar 12:00 UTC"
    assert short_time(whole, now=now, seconds=True) == "1 Mar 12:00:00 UTC"
    assert short_time(NOON, now=now, seconds=False) == "1 Mar 12:00 UTC"


def test_a_run_page_shows_its_times_to_the_second_in_the_admin_zone(
    admin_client: Client, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    run = record_run(make_schedule(), NOON, status="failed", finished_at=NOON)

    url = reverse("admin:django_schedulinator_run_change", args=[run.pk])
    page = admin_client.get(url).content.decode()

    assert shown(page, "scheduled_for") == "2026-03-01 13:00:05 CET"
    help_text = Run._meta.get_field("scheduled_for").help_text
    assert str(help_text) in html.unescape(page)  # kept with the field
    assert shown(page, "finished_at") == "2026-03-01 13:00:05 CET"


def test_a_schedule_shows_its_state_times_to_the_second(
    admin_client: Client, built_index: DueIndex
) -> None:
    schedule = make_schedule()
    Schedule.objects.filter(pk=schedule.pk).update(last_run_at=NOON)

    page = admin_client.get(change_url(schedule)).content.decode()

    assert shown(page, "last_run_at") == "2026-03-01 12:00:05 UTC"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", shown(page, "next_run_at"))
    # The timing fields stay inputs.
    assert 'name="run_at_0"' in page or 'name="run_at"' in page


def test_the_change_log_list_shows_its_times_to_the_second(admin_client: Client) -> None:
    schedule = make_schedule()
    ScheduleChange.objects.create(
        schedule=schedule, schedule_name=schedule.name, source="python", action="paused", at=NOON
    )

    url = reverse("admin:django_schedulinator_schedulechange_changelist")
    page = admin_client.get(url).content.decode()

    assert cell(page, "at") == [short_time(NOON)]
    assert 'title="2026-03-01 12:00:05 UTC">' in page


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["gunicorn"], "<code>rebuild_due_index</code>"),  # names the command
        (["manage.py", "runserver"], r"<code>\S+python\S* manage\.py rebuild_due_index</code>"),
    ],
    ids=["a web server", "runserver"],
)
def test_the_operations_page_shows_the_rebuild_command_as_code(
    admin_client: Client, built_index: DueIndex, monkeypatch: pytest.MonkeyPatch,
    argv: list[str], command: str,
) -> None:  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)

    page = admin_client.get(reverse("admin:django_schedulinator_schedule_operations"))

    text = page.content.decode()
    assert "`" not in text
    assert re.search(command, text), re.findall(r".*rebuild_due_index.*", text)


def test_the_rebuild_message_shows_the_command_as_code(
    admin_client: Client, built_index: DueIndex
) -> None:
    url = reverse("admin:django_schedulinator_schedule_operations")
    page = admin_client.post(url, {"rebuild": "1"}, follow=True).content.decode()

    [message] = re.findall(r'<li class="success">(.*?)</li>', page, re.DOTALL)
    assert message.startswith("Rebuild asked for:")
    assert "`" not in message
    assert message.count("<code>rebuild_due_index</code>") == 2
