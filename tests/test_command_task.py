"""The built-in command task (``command_task.py``): management commands from an allowlist,
run by a real scheduler pass, their exit status and output recorded on the run."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from django_schedulinator.index import DueIndex
from django_schedulinator.models import Run, Schedule

from .conftest import make_schedule
from .doc_examples import example
from .handoff import fire

pytestmark = pytest.mark.django_db

COMMAND = "django_schedulinator.command"


@pytest.fixture(autouse=True)
def allowlist(settings: Any, built_index: DueIndex) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "COMMANDS": ["clearsessions", "schedtest_echo"],
    }


def due_command(*args: str) -> Any:
    return make_schedule(
        task=COMMAND, args=list(args), next_run_at=timezone.now() - timedelta(seconds=5)
    )


@pytest.mark.django_db(transaction=True)  # the command runs on the task thread's connection
def test_clearsessions_runs_and_its_exit_status_and_output_are_on_the_run() -> None:
    expired = Session.objects.create(
        session_key="old", session_data="", expire_date=timezone.now() - timedelta(days=1)
    )
    schedule = due_command("clearsessions")

    fire()

    run = Run.objects.get(schedule=schedule)
    assert run.status == "succeeded", run.error
    assert run.output.startswith("manage.py clearsessions: exit status 0\n")
    assert not Session.objects.filter(pk=expired.pk).exists()


def test_a_failing_command_fails_its_run_with_its_status_and_output() -> None:
    schedule = due_command("schedtest_echo", "hello world", "--status", "3")

    fire()

    run = Run.objects.get(schedule=schedule)
    assert run.status == "failed"
    assert "manage.py schedtest_echo 'hello world' --status 3: exit status 3" in run.error
    assert "hello world\nto stderr\nCommandError: asked to fail" in run.error


def test_the_output_of_a_command_that_succeeds_is_kept() -> None:
    schedule = due_command("schedtest_echo", "a", "b")
    fire()
    run = Run.objects.get(schedule=schedule)
    assert run.output == "manage.py schedtest_echo a b: exit status 0\na b\nto stderr\n"


@pytest.mark.parametrize(
    ("args", "kwargs", "field", "message"),
    [
        (["flush"], {}, "args", "'flush' is not in SCHEDULINATOR['COMMANDS'] (clearsessions, "),
        ([], {}, "args", "Give the command and its arguments as text"),
        ([1], {}, "args", "Give the command and its arguments as text"),
        (["clearsessions"], {"x": 1}, "kwargs", "The command task takes no kwargs"),
    ],
)
def test_a_command_outside_the_allowlist_cannot_be_scheduled(
    args: list[Any], kwargs: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        make_schedule(task=COMMAND, args=args, kwargs=kwargs)
    assert message in " ".join(refused.value.message_dict[field])


def test_an_allowed_name_that_is_no_command_is_refused(settings: Any) -> None:
    settings.SCHEDULINATOR["COMMANDS"] = ["no_such_command"]
    with pytest.raises(ValidationError, match="is not a management command"):
        make_schedule(task=COMMAND, args=["no_such_command"])


def test_a_command_removed_from_the_allowlist_after_it_was_scheduled_does_not_run(
    settings: Any,
) -> None:
    schedule = due_command("schedtest_echo", "x")
    settings.SCHEDULINATOR["COMMANDS"] = ["clearsessions"]

    fire()

    run = Run.objects.get(schedule=schedule)
    assert run.status == "failed"
    assert "CommandRefused: The management command 'schedtest_echo' is not in" in run.error
    assert run.output == ""


@pytest.mark.django_db(transaction=True)  # the command runs on the task thread's connection
def test_the_clearsessions_example_in_the_docs_works_as_written(settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        **example("clearsessions", "schedules-in-code.md")["SCHEDULINATOR"],
    }
    Session.objects.create(
        session_key="old", session_data="", expire_date=timezone.now() - timedelta(days=1)
    )
    call_command("sync_schedules", stdout=StringIO())
    schedule = Schedule.objects.get(name="clear-sessions")
    assert (schedule.cron, schedule.declared_in) == (
        "30 4 * * *",
        "SCHEDULINATOR['SCHEDULES']['clear-sessions']",
    )

    fire(schedule)  # due now

    assert Run.objects.get(schedule=schedule).status == "succeeded"
    assert not Session.objects.exists()
