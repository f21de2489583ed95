"""Schedules declared in code (``declared.py``): ``@scheduled`` and the SCHEDULES setting,
synced into the table through the service layer at migrate, scheduler start and
``manage.py sync_schedules``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from django_schedulinator import declared, scheduled, services, task
from django_schedulinator.checks import check_declared
from django_schedulinator.errors import DeclaredInCode
from django_schedulinator.models import Schedule, ScheduleChange
from django_schedulinator.services import Origin

from .support.admin_pages import change_url
from .support.commits import APIClient, Client
from .support.doc_examples import source
from .support.processes import ROOT, subprocess_env
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db

NIGHTLY = {"task": "tests.record", "cron": "0 3 * * *", "timezone": "Europe/Paris"}
ADMIN = Origin(None, ScheduleChange.Source.ADMIN)


@pytest.fixture(autouse=True)
def fresh_declarations(monkeypatch: pytest.MonkeyPatch) -> declared.Declarations:
    """A registry of decorated declarations of the test's own."""
    fresh = declared.Declarations()
    monkeypatch.setattr(declared, "declarations", fresh)
    return fresh


def declare(settings: Any, **schedules: dict[str, Any]) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "SCHEDULES": schedules}


def sync(*args: str) -> str:
    out = StringIO()
    call_command("sync_schedules", *args, stdout=out, stderr=out)
    return out.getvalue()


def synced_nightly(settings: Any) -> Schedule:
    """The NIGHTLY declaration, synced: its schedule."""
    declare(settings, nightly=NIGHTLY)
    sync()
    return Schedule.objects.get(name="nightly")


def changes_of(name: str) -> list[tuple[str, str]]:
    return list(
        ScheduleChange.objects.filter(schedule_name=name)
        .order_by("pk")
        .values_list("action", "source")
    )


def test_a_schedule_in_the_setting_is_created_owned_by_the_code(settings: Any) -> None:
    declare(settings, nightly={**NIGHTLY, "kwargs": {"full": True}})

    assert "create 'nightly' (SCHEDULINATOR['SCHEDULES']['nightly'])" in sync()

    schedule = Schedule.objects.get(name="nightly")
    assert (schedule.kind, schedule.cron) == ("cron", "0 3 * * *")
    assert schedule.timezone == "Europe/Paris"
    assert schedule.kwargs == {"full": True}
    assert schedule.declared_in == "SCHEDULINATOR['SCHEDULES']['nightly']"
    assert schedule.next_run_at is not None
    assert changes_of("nightly") == [("created", "code")]


def test_a_declared_grace_is_a_duration_or_seconds(settings: Any) -> None:
    declare(
        settings,
        nightly={**NIGHTLY, "grace": 1800},
        hourly={"task": "tests.noop", "interval": 3600, "grace": timedelta(minutes=5)},
    )
    sync()
    assert Schedule.objects.get(name="nightly").grace == timedelta(minutes=30)
    assert Schedule.objects.get(name="hourly").grace == timedelta(minutes=5)

    declare(settings, nightly={**NIGHTLY, "grace": 1800}, hourly={"task": "tests.noop",
            "interval": 3600, "grace": 0.5})  # fmt: skip
    _, problems = services.validated_declarations()
    assert problems == [
        "The schedule 'hourly' declared in SCHEDULINATOR['SCHEDULES']['hourly'] is not valid: "
        "grace: The grace must be at least 1 second."
    ]


def test_a_decorated_task_declares_its_schedules(settings: Any) -> None:
    @scheduled("every-ten-minutes", interval=600, kwargs={"n": 1})
    @scheduled("at-noon", cron="0 12 * * *")
    @task(name="tests.declared.report")
    def report(n: int = 0) -> None: ...

    sync()

    every = Schedule.objects.get(name="every-ten-minutes")
    assert (every.task, every.kind, every.interval) == (
        "tests.declared.report",
        "interval",
        timedelta(minutes=10),
    )
    assert every.declared_in == (
        "tests.test_declared.test_a_decorated_task_declares_its_schedules.<locals>.report"
    )
    assert Schedule.objects.get(name="at-noon").cron == "0 12 * * *"


def test_a_sync_that_finds_the_table_as_declared_writes_nothing(settings: Any) -> None:
    schedule = synced_nightly(settings)

    assert "are in the table as declared" in sync()
    assert "would" not in sync("--dry-run")

    again = Schedule.objects.get(name="nightly")
    assert (again.revision, again.version) == (schedule.revision, schedule.version)
    assert changes_of("nightly") == [("created", "code")]


def test_a_changed_declaration_updates_its_schedule(settings: Any) -> None:
    declare(settings, nightly=NIGHTLY)
    sync()
    before = Schedule.objects.get(name="nightly")
    declare(settings, nightly={**NIGHTLY, "cron": "0 4 * * *", "overlap": "skip"})

    assert "would change 'nightly': cron '0 3 * * *' -> '0 4 * * *'" in sync("--dry-run")
    assert Schedule.objects.get(name="nightly").cron == "0 3 * * *"  # dry: nothing written
    sync()

    after = Schedule.objects.get(name="nightly")
    assert (after.cron, after.overlap) == ("0 4 * * *", "skip")
    assert after.revision > before.revision
    assert after.version > before.version
    entry = ScheduleChange.objects.filter(schedule_name="nightly").latest("pk")
    assert (entry.action, entry.source) == ("changed", "code")
    assert entry.changes["cron"] == ["0 3 * * *", "0 4 * * *"]


def test_a_schedule_removed_from_code_is_paused_not_deleted_and_resumes_when_declared_again(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    declare(settings, nightly=NIGHTLY)
    sync()
    declare(settings)

    with caplog.at_level(logging.WARNING, logger="django_schedulinator.declared"):
        sync()

    schedule = Schedule.objects.get(name="nightly")
    assert not schedule.enabled
    assert schedule.pause_note.startswith("No longer declared in code (it was in SCHEDULINATOR")
    assert "Paused schedule 'nightly': no code declares it any more" in caplog.text
    assert changes_of("nightly")[-1] == ("paused", "code")
    services.update(schedule, {"cron": "0 5 * * *"}, origin=ADMIN)  # an ordinary one now

    declare(settings, nightly=NIGHTLY)
    sync()
    schedule.refresh_from_db()
    assert schedule.enabled
    assert schedule.cron == "0 3 * * *"  # the code's definition again
    assert changes_of("nightly")[-2:] == [("changed", "code"), ("resumed", "code")]


def sync_schedules(key_prefix: str, **schedules: dict[str, Any]) -> str:
    """``manage.py sync_schedules`` run as a command, in a process of its own, with these
    schedules in the setting: its output."""
    env = subprocess_env(key_prefix, SCHEDULINATOR_TEST_SCHEDULES=json.dumps(schedules))
    if not schedules:
        del env["SCHEDULINATOR_TEST_SCHEDULES"]
    done = subprocess.run(
        [sys.executable, "-m", "django", "sync_schedules"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the processes see committed rows only
def test_a_schedule_that_left_the_code_is_paused_once_not_at_every_sync(key_prefix: str) -> None:
    """After a person resumed a schedule no longer declared, every sync paused it again
    (issue 21, item 17). The sync pauses it once, when it leaves the code; declared and
    removed anew, it is paused anew."""
    sync_schedules(key_prefix, nightly=NIGHTLY)
    out = sync_schedules(key_prefix)  # a deploy without it
    assert "pause 'nightly': no longer declared" in out
    schedule = Schedule.objects.get(name="nightly")
    assert not schedule.enabled
    services.resume(schedule, origin=ADMIN)  # someone wants it to go on

    for _ in range(2):
        out = sync_schedules(key_prefix)
        assert Schedule.objects.get(name="nightly").enabled
        assert out == "The schedules declared in code are in the table as declared.\n"
    assert Schedule.objects.get(name="nightly").declared_in == ""  # an ordinary schedule
    assert changes_of("nightly") == [
        ("created", "code"),
        ("changed", "code"),  # declared_in cleared: no longer declared
        ("paused", "code"),
        ("resumed", "admin"),
    ]

    # Declared anew (running: nothing to resume), then removed anew: paused anew, once.
    out = sync_schedules(key_prefix, nightly=NIGHTLY)
    assert "change 'nightly': declared_in '' -> \"SCHEDULINATOR['SCHEDULES']['nightly']\"" in out
    assert Schedule.objects.get(name="nightly").declared_in
    assert "pause 'nightly'" in sync_schedules(key_prefix)
    assert "nightly" not in sync_schedules(key_prefix)
    assert not Schedule.objects.get(name="nightly").enabled


def test_a_schedule_paused_by_hand_when_it_leaves_the_code_keeps_its_pause(
    settings: Any,
) -> None:
    synced_nightly(settings)
    services.pause(Schedule.objects.get(name="nightly"), "holidays", origin=ADMIN)
    declare(settings)

    out = sync()
    schedule = Schedule.objects.get(name="nightly")
    assert (schedule.enabled, schedule.pause_note) == (False, "holidays")
    services.resume(schedule, origin=ADMIN)  # after the holidays
    sync()
    assert Schedule.objects.get(name="nightly").enabled
    assert "keep 'nightly' paused: no longer declared" in out
    assert schedule.declared_in == ""


def test_a_schedule_paused_by_hand_stays_paused_through_syncs(settings: Any) -> None:
    declare(settings, nightly=NIGHTLY)
    sync()
    services.pause(Schedule.objects.get(name="nightly"), "holidays", origin=ADMIN)
    declare(settings, nightly={**NIGHTLY, "cron": "0 4 * * *"})
    sync()

    schedule = Schedule.objects.get(name="nightly")
    assert (schedule.enabled, schedule.pause_note) == (False, "holidays")
    assert schedule.cron == "0 4 * * *"


def test_a_name_clash_with_a_schedule_made_by_hand_names_both_and_touches_neither(
    settings: Any, admin_user: Any
) -> None:
    mine = services.create(
        Schedule(name="nightly", task="tests.noop", kind="cron", cron="0 1 * * *"),
        origin=Origin(admin_user, ScheduleChange.Source.ADMIN),
    )
    declare(settings, nightly=NIGHTLY, other={**NIGHTLY})

    with pytest.raises(CommandError, match="1 declaration"):
        sync("--dry-run")
    err = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("sync_schedules", stderr=err)

    assert "could not be synced; the others were" in str(failed.value)
    assert (
        "The schedule 'nightly' declared in SCHEDULINATOR['SCHEDULES']['nightly'] has the name "
        f"of a schedule made through Admin by admin on {mine.created_at:%Y-%m-%d} (id {mine.pk})"
    ) in err.getvalue()
    mine.refresh_from_db()
    assert (mine.task, mine.cron, mine.declared_in) == ("tests.noop", "0 1 * * *", "")
    assert Schedule.objects.get(name="other").declared_in  # the other one synced


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"task": "tests.record", "cron": "61 * * * *"}, "'nightly' declared in"),
        ({"task": "tests.record"}, "give exactly one of cron, interval, run_at and solar_event"),
        ({"task": "tests.record", "cron": "* * * * *", "interval": 5}, "(got cron, interval)"),
        ({"task": "nope", "cron": "* * * * *"}, "nope"),
        ({"task": "tests.record", "cron": "* * * * *", "every": 5}, "unknown field(s) 'every'"),
        ({"task": "tests.record", "cron": "* * * * *", "timezone": "Mars/Base"}, "Mars/Base"),
    ],
)
def test_an_invalid_declaration_is_refused_by_the_check_and_the_sync(
    settings: Any, values: dict[str, Any], message: str
) -> None:
    declare(settings, nightly=values)

    [error] = check_declared()
    assert error.id == "schedulinator.W030"
    assert message in error.msg
    with pytest.raises(CommandError):
        sync()
    assert not Schedule.objects.filter(name="nightly").exists()


def test_scheduled_needs_a_registered_task_below_it() -> None:
    def plain() -> None: ...

    with pytest.raises(ImproperlyConfigured, match="is not a registered task: put it above @task"):
        scheduled("x", cron="* * * * *")(plain)


def test_a_name_declared_twice_is_refused(settings: Any) -> None:
    @scheduled("nightly", cron="0 3 * * *")
    @task(name="tests.declared.twice")
    def twice() -> None: ...

    declare(settings, nightly=NIGHTLY)
    [error] = check_declared()
    assert "has the name of the one declared in tests.test_declared." in error.msg


def test_the_definition_of_a_declared_schedule_is_changed_in_code_only(settings: Any) -> None:
    schedule = synced_nightly(settings)

    with pytest.raises(DeclaredInCode, match=r"declared in code \(SCHEDULINATOR.*change it in"):
        services.update(schedule, {"cron": "0 4 * * *"}, origin=ADMIN)
    with pytest.raises(DeclaredInCode, match="cannot be deleted here"):
        services.delete(schedule, origin=ADMIN)
    # Its pause state and run now are anyone's.
    services.pause(schedule, "maintenance", origin=ADMIN)
    services.update(schedule, {"enabled": True}, origin=ADMIN)
    services.run_now(schedule, origin=ADMIN)
    assert Schedule.objects.get(name="nightly").enabled


def test_migrate_syncs_the_declarations(settings: Any) -> None:
    declare(settings, nightly=NIGHTLY)
    call_command("migrate", verbosity=0)
    assert Schedule.objects.get(name="nightly").declared_in


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the processes see committed rows only
def test_many_processes_syncing_at_once_create_each_schedule_once(key_prefix: str) -> None:
    make_schedule("left-alone")
    env = subprocess_env(
        key_prefix,
        SCHEDULINATOR_TEST_SCHEDULES='{"nightly": {"task": "tests.record", "cron": "0 3 * * *"},'
        ' "hourly": {"task": "tests.noop", "interval": 3600}}',
    )
    argv = [sys.executable, "-m", "django", "sync_schedules"]
    procs = [
        subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(4)
    ]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, outputs

    assert sorted(Schedule.objects.values_list("name", flat=True)) == [
        "hourly",
        "left-alone",
        "nightly",
    ]
    assert changes_of("nightly") == [("created", "code")]
    assert changes_of("hourly") == [("created", "code")]


def test_the_admin_shows_where_it_is_declared_and_keeps_its_definition_read_only(
    settings: Any, admin_user: Any
) -> None:
    schedule = synced_nightly(settings)
    client = Client()
    client.force_login(admin_user)

    page = client.get(change_url(schedule)).content.decode()
    assert "SCHEDULINATOR[&#x27;SCHEDULES&#x27;][&#x27;nightly&#x27;]" in page
    assert 'name="cron"' not in page  # shown, not an input
    assert 'name="enabled"' in page
    assert 'name="pause_note"' in page

    # Pausing with a note is the admin's to do.
    response = client.post(
        change_url(schedule), {"pause_note": "audit", "version": schedule.version}
    )
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert (schedule.enabled, schedule.pause_note, schedule.cron) == (False, "audit", "0 3 * * *")

    delete = client.get(
        reverse("admin:django_schedulinator_schedule_delete", args=[schedule.pk])
    ).content.decode()
    assert "declared in code, in SCHEDULINATOR" in delete
    client.post(
        reverse("admin:django_schedulinator_schedule_delete", args=[schedule.pk]), {"post": "yes"}
    )
    assert Schedule.objects.filter(pk=schedule.pk).exists()


def test_the_api_shows_where_it_is_declared_and_refuses_to_change_its_definition(
    settings: Any, admin_user: Any
) -> None:
    schedule = synced_nightly(settings)
    api = APIClient()
    api.force_authenticate(admin_user)
    url = f"/api/schedulinator/schedules/{schedule.pk}/"

    read = api.get(url)
    assert read.json()["declared_in"] == "SCHEDULINATOR['SCHEDULES']['nightly']"
    etag = read.headers["ETag"]
    refused = api.patch(url, {"cron": "0 4 * * *"}, format="json", HTTP_IF_MATCH=etag)
    assert refused.status_code == 400
    assert "is declared in code" in refused.json()["detail"]
    assert api.delete(url, HTTP_IF_MATCH=etag).status_code == 400
    paused = api.patch(
        url, {"enabled": False, "pause_note": "audit"}, format="json", HTTP_IF_MATCH=etag
    )
    assert paused.status_code == 200, paused.content
    assert api.post(f"{url}run-now/", {}, format="json").status_code in (200, 201, 202)


def test_a_declared_one_off_is_created_once_and_stays_valid_after_its_time(settings: Any) -> None:
    soon = timezone.now() + timedelta(hours=1)
    declare(settings, once={"task": "tests.record", "run_at": soon})
    sync()
    assert Schedule.objects.get(name="once").kind == "once"
    # Its time has passed (it fired): still a valid declaration, and nothing to change.
    Schedule.objects.filter(name="once").update(run_at=soon - timedelta(days=1))
    declare(settings, once={"task": "tests.record", "run_at": soon - timedelta(days=1)})
    assert check_declared() == []
    assert "are in the table as declared" in sync()

    declare(settings, late={"task": "tests.record", "run_at": timezone.now() - timedelta(days=1)})
    assert "skip 'late': a one-off whose time has passed" in sync()
    assert not Schedule.objects.filter(name="late").exists()


def test_a_django_task_registered_for_scheduling_takes_scheduled_the_same_way() -> None:
    from .support.django_task_defs import plain  # a Django task, registered as "tests.django.plain"

    scheduled("django-task", cron="0 5 * * *", dispatcher="default")(plain)
    sync()

    schedule = Schedule.objects.get(name="django-task")
    assert (schedule.task, schedule.declared_in) == (
        "tests.django.plain",
        "tests.support.django_task_defs.plain",
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the scheduler sees committed rows only
def test_a_scheduler_syncs_the_declarations_when_it_starts(key_prefix: str) -> None:
    env = subprocess_env(
        key_prefix,
        SCHEDULINATOR_TEST_SCHEDULES='{"hourly": {"task": "tests.noop", "interval": 3600}}',
    )
    subprocess.run(
        [sys.executable, "-m", "django", "run_scheduler", "--once"],
        cwd=ROOT, env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert Schedule.objects.get(name="hourly").declared_in == (
        "SCHEDULINATOR['SCHEDULES']['hourly']"
    )


def test_a_schedule_deleted_while_the_sync_runs_is_a_problem_not_a_crash(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced_nightly(settings)
    declare(settings, nightly={**NIGHTLY, "cron": "0 4 * * *"}, other=NIGHTLY)
    stale = services.declared.plan()  # what a process computed before ...
    Schedule.objects.filter(name="nightly").delete()  # ... another deleted the row
    monkeypatch.setattr(services.declared, "plan", lambda: stale)

    result = services.sync_declared()

    assert result.problems == [
        "The schedule 'nightly' could not be synced: The schedule was deleted."
    ]
    assert Schedule.objects.filter(name="other").exists()  # the rest went on


@pytest.mark.parametrize(
    "broken",
    [
        {"nightly": {**NIGHTLY, "cron": "61 * * * *"}},  # a typo in a deploy
        {"nightly": "not a dict"},
    ],
)
def test_a_declaration_that_turns_invalid_leaves_its_schedule_as_it_was(
    settings: Any, broken: dict[str, Any]
) -> None:
    """Still declared, only broken: reported, and the schedule keeps running as it was
    (not paused as if the code had dropped it)."""
    synced_nightly(settings)
    declare(settings, **broken)

    with pytest.raises(CommandError):
        sync()

    schedule = Schedule.objects.get(name="nightly")
    assert (schedule.enabled, schedule.cron) == (True, "0 3 * * *")
    assert changes_of("nightly") == [("created", "code")]


# -- where a Celery project registers its tasks (docs/migrating-from-celery-beat.md) ------------

MIGRATING = "migrating-from-celery-beat.md"
# A Celery project laid out as Celery's guide for Django has it: the project package loads
# its Celery app when Django starts, and the app's autodiscover_tasks() imports the tasks.py
# modules in the workers.
CELERY_PROJECT = {
    "myproject/__init__.py": "from .celery import app as celery_app\n",
    "myproject/celery.py": (
        "from celery import Celery\n\n"
        "app = Celery('myproject')\n"
        "app.config_from_object('django.conf:settings', namespace='CELERY')\n"
        "app.autodiscover_tasks()\n"
    ),
    "billing/__init__.py": "",
}


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("files", "tasks_module", "registered"),
    [
        ({"billing/tasks.py": "celery-task", "billing/scheduled_tasks.py": "celery-registration"},
         None, True),
        ({"billing/tasks.py": "celery-task-registered"}, "tasks", True),
        # What the page warns of: a registration in tasks.py, which nothing else imports.
        ({"billing/tasks.py": "celery-task-registered"}, None, False),
    ],
    ids=["scheduled_tasks.py", "TASKS_MODULE=tasks", "tasks.py alone"],
)  # fmt: skip
def test_a_celery_project_registers_its_tasks_where_the_migration_guide_says(
    tmp_path: Path, files: dict[str, str], tasks_module: str | None, registered: bool
) -> None:
    """Registered in a Celery project's tasks.py alone, every task was "not registered" in
    the web processes and the schedulers (issue 21, item 17): the blocks of the migration
    guide, copied into a project, register the task in a process like those."""
    settings = (
        "SECRET_KEY = 'tests'\nUSE_TZ = True\n"
        "INSTALLED_APPS = ['django.contrib.contenttypes', 'django_schedulinator', 'billing']\n"
        f"DATABASES = {{'default': {{'ENGINE': 'django.db.backends.sqlite3', 'NAME': "
        f"{str(tmp_path / 'db.sqlite3')!r}}}}}\n"
    )
    if tasks_module:
        settings += f"SCHEDULINATOR = {{'TASKS_MODULE': {tasks_module!r}}}\n"
    project = {
        **CELERY_PROJECT,
        "myproject/settings.py": settings,
        **{path: source(block, MIGRATING) + "\n" for path, block in files.items()},
    }
    for path, text in project.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "myproject.settings",
        "PYTHONPATH": str(tmp_path),
    }
    probe = (
        "import django; django.setup(); "
        "from django_schedulinator.registry import registry; "
        "print('billing.invoice_run' in registry)"
    )

    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(registered), done.stderr


def test_a_solar_schedule_is_declared_with_its_event_and_place() -> None:
    from django_schedulinator.declared import Declaration

    declaration = Declaration(
        "lights",
        {"task": "tests.record", "solar_event": "sunset", "latitude": 52.5, "longitude": 13.4,
         "solar_offset": -900},
        "tests",
    )  # fmt: skip
    fields = declaration.fields()
    assert fields["kind"] == "solar"
    assert fields["solar_offset"] == timedelta(minutes=-15)
