"""The built-in command task (``command_task.py``): management commands from an allowlist,
with the arguments and options each may take, run by a real scheduler pass; the exit status
is recorded on the run, and the output only for a command whose entry keeps it.

The security section goes through the real REST API as a staff user who holds only the
schedule and run permissions (the issue's reporter): what such a user can make an allowed
command do, and what they can read of it."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from django_schedulinator import checks
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule

from .support.commits import APIClient
from .support.doc_examples import DOCS, example
from .support.handoff import fire
from .support.schedules import make_schedule
from .test_api import ADD, API, CHANGE, VIEW, VIEW_RUN, client_for, make_user

pytestmark = pytest.mark.django_db

COMMAND = "django_schedulinator.command"
ALLOWED: dict[str, Any] = {
    "clearsessions": {},
    "schedtest_echo": {
        "args": ["a", "b", "hello world", "x"],
        "options": {"--status": ["0", "3"], "--crash": True},
        "keep_output": True,
    },
    # What the docs show: a dump of one app, its output not kept.
    "dumpdata": {"args": ["auth"], "options": {"--indent": ["2", "4"]}},
}


def allow(settings: Any, commands: dict[str, Any]) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "COMMANDS": commands}


@pytest.fixture(autouse=True)
def allowlist(settings: Any, built_index: DueIndex) -> None:
    allow(settings, ALLOWED)


def due_command(*args: str) -> Any:
    return make_schedule(
        task=COMMAND, args=list(args), next_run_at=timezone.now() - timedelta(seconds=5)
    )


def run_of(schedule: Schedule) -> Run:
    return Run.objects.get(schedule=schedule)


@pytest.mark.django_db(transaction=True)  # the command runs on the task thread's connection
def test_clearsessions_runs_and_its_exit_status_is_on_the_run() -> None:
    expired = Session.objects.create(
        session_key="old", session_data="", expire_date=timezone.now() - timedelta(days=1)
    )
    schedule = due_command("clearsessions")

    fire()

    run = run_of(schedule)
    assert run.status == "succeeded", run.error
    assert run.output.startswith("manage.py clearsessions: exit status 0")
    assert not Session.objects.filter(pk=expired.pk).exists()


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_failing_command_fails_its_run_with_its_status_and_kept_output() -> None:
    schedule = due_command("schedtest_echo", "hello world", "--status", "3")

    fire()

    run = run_of(schedule)
    assert run.status == "failed"
    assert "manage.py schedtest_echo 'hello world' --status 3: exit status 3" in run.error
    assert "hello world\nto stderr\nCommandError: asked to fail" in run.error


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_the_output_of_a_command_that_keeps_it_is_on_the_run() -> None:
    schedule = due_command("schedtest_echo", "a", "b")
    fire()
    assert run_of(schedule).output == (
        "manage.py schedtest_echo a b: exit status 0\na b\nto stderr\n"
    )


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_long_output_keeps_its_first_line_and_its_end_in_4000_characters(settings: Any) -> None:
    allow(
        settings,
        {
            "schedtest_echo": {
                "args": ["y", "z"],
                "options": {"--repeat": ["3000"]},
                "keep_output": True,
            }
        },
    )
    schedule = due_command("schedtest_echo", "y", "z", "--repeat", "3000")
    fire()
    output = run_of(schedule).output
    header = "manage.py schedtest_echo y z --repeat 3000: exit status 0\n..."
    assert output == header + ("y z\n" * 3000 + "to stderr\n")[-(4000 - len(header)) :]


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_listed_options_run_in_either_form() -> None:
    spaced = due_command("schedtest_echo", "x", "--status", "0")
    joined = due_command("schedtest_echo", "x", "--status=3")
    flag = due_command("schedtest_echo", "x", "--crash")

    fire()

    assert run_of(spaced).status == "succeeded", run_of(spaced).error
    assert "manage.py schedtest_echo x --status=3: exit status 3" in run_of(joined).error
    assert "RuntimeError: crashed while printing x" in run_of(flag).error  # output kept


# -- what is not kept -----------------------------------------------------------------------


@pytest.fixture
def output_not_kept(settings: Any) -> None:
    allow(
        settings, {**ALLOWED, "schedtest_echo": {**ALLOWED["schedtest_echo"], "keep_output": False}}
    )


NOT_KEPT = "(output not kept: SCHEDULINATOR['COMMANDS']['schedtest_echo'] does not set keep_output)"


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
@pytest.mark.usefixtures("output_not_kept")
def test_output_is_not_kept_unless_the_entry_says_so() -> None:
    schedule = due_command("schedtest_echo", "a", "b")
    fire()
    run = run_of(schedule)
    assert run.status == "succeeded", run.error
    assert run.output == f"manage.py schedtest_echo a b: exit status 0 {NOT_KEPT}"


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
@pytest.mark.usefixtures("output_not_kept")
def test_the_error_of_a_failed_command_keeps_no_output_either() -> None:
    failing = due_command("schedtest_echo", "hello world", "--status", "3")
    crashing = due_command("schedtest_echo", "hello world", "--crash")

    fire()

    failed = run_of(failing)
    assert failed.status == "failed"
    assert f"manage.py schedtest_echo 'hello world' --status 3: exit status 3 {NOT_KEPT}" in (
        failed.error
    )
    crashed = run_of(crashing)
    assert crashed.status == "failed"
    assert f"manage.py schedtest_echo 'hello world' --crash: raised RuntimeError {NOT_KEPT}" in (
        crashed.error
    )
    for run in (failed, crashed):
        assert "to stderr" not in run.error
        assert "asked to fail" not in run.error
        assert "crashed while printing" not in run.error  # not through a chained traceback
        assert run.output == ""


# -- what may be scheduled ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "field", "message"),
    [
        (
            ["flush"],
            {},
            "args",
            "'flush' is not in SCHEDULINATOR['COMMANDS'] (clearsessions, schedtest_echo, dumpdata)",
        ),
        ([], {}, "args", "Give the command and its arguments as text"),
        ([1], {}, "args", "Give the command and its arguments as text"),
        (["clearsessions"], {"x": 1}, "kwargs", "The command task takes no kwargs"),
        (
            ["clearsessions", "--traceback"],
            {},
            "args",
            "'--traceback' is not an option SCHEDULINATOR['COMMANDS']['clearsessions'] allows "
            "(it allows none)",
        ),
        (
            ["clearsessions", "x"],
            {},
            "args",
            "'x' is not an argument SCHEDULINATOR['COMMANDS']['clearsessions'] allows "
            "(it allows none)",
        ),
        (
            ["schedtest_echo", "c"],
            {},
            "args",
            "'c' is not an argument SCHEDULINATOR['COMMANDS']['schedtest_echo'] allows "
            "(it allows: a, b, 'hello world', x)",
        ),
        (
            ["schedtest_echo", "--status", "4"],
            {},
            "args",
            "'--status 4': SCHEDULINATOR['COMMANDS']['schedtest_echo'] allows --status only "
            "with 0, 3",
        ),
        (
            ["schedtest_echo", "--status"],
            {},
            "args",
            "'--status' needs a value: SCHEDULINATOR['COMMANDS']['schedtest_echo'] allows 0, 3",
        ),
        (
            ["schedtest_echo", "--crash=yes"],
            {},
            "args",
            "'--crash=yes': --crash is a flag and takes no value",
        ),
    ],
)
def test_what_the_allowlist_does_not_list_cannot_be_scheduled(
    args: list[Any], kwargs: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        make_schedule(task=COMMAND, args=args, kwargs=kwargs)
    assert message in " ".join(refused.value.message_dict[field])


def test_an_allowed_name_that_is_no_command_is_refused(settings: Any) -> None:
    allow(settings, {"no_such_command": {}})
    with pytest.raises(ValidationError, match="is not a management command"):
        make_schedule(task=COMMAND, args=["no_such_command"])


def test_an_option_listed_as_a_flag_that_takes_a_value_is_refused(settings: Any) -> None:
    """Listed as a flag, ``--status`` would take the next argument as its value: the entry
    disagrees with the command, so nothing using that option runs (the check says so too)."""
    allow(settings, {"schedtest_echo": {"args": ["x"], "options": {"--status": True}}})
    message = (
        "SCHEDULINATOR['COMMANDS']['schedtest_echo']['options'] lists --status as a flag "
        "(True), but the command's --status takes a value: list the values it may take"
    )
    with pytest.raises(ValidationError) as refused:
        make_schedule(task=COMMAND, args=["schedtest_echo", "--status", "x"])
    assert message in " ".join(refused.value.message_dict["args"])


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_a_command_removed_from_the_allowlist_after_it_was_scheduled_does_not_run(
    settings: Any,
) -> None:
    schedule = due_command("schedtest_echo", "x")
    allow(settings, {"clearsessions": {}})

    fire()

    run = run_of(schedule)
    assert run.status == "failed"
    assert "CommandRefused: The management command 'schedtest_echo' is not in" in run.error
    assert run.output == ""


@pytest.mark.django_db(transaction=True)  # the stages commit on threads of their own
def test_an_argument_removed_from_the_allowlist_after_it_was_scheduled_does_not_run(
    settings: Any,
) -> None:
    schedule = due_command("schedtest_echo", "x", "--status", "3")
    allow(settings, {"schedtest_echo": {"args": ["x"], "options": {"--status": ["0"]}}})

    fire()

    run = run_of(schedule)
    assert run.status == "failed"
    assert "CommandRefused: '--status 3': SCHEDULINATOR['COMMANDS']['schedtest_echo']" in (
        run.error
    )
    assert "exit status" not in run.error  # it did not run


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

    assert run_of(schedule).status == "succeeded"
    assert not Session.objects.exists()


def test_the_allowlist_example_and_refusals_in_the_docs_are_what_the_code_says(
    settings: Any,
) -> None:
    """The docs' entry matches the real dumpdata (no W040), and the refusals they quote are
    the ones a schedule gets."""
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        **example("clearsessions", "schedules-in-code.md")["SCHEDULINATOR"],
    }
    assert checks.check_commands() == []
    page = " ".join((DOCS / "schedules-in-code.md").read_text().split())
    for args in (
        ["dumpdata", "sessions.session"],
        ["dumpdata", "auth", "--out", "/tmp/auth.json"],
        ["dumpdata", "auth", "--indent", "8"],
    ):
        with pytest.raises(ValidationError) as refused:
            make_schedule(task=COMMAND, args=args)
        (message,) = refused.value.message_dict["args"]
        assert f"`{message}`" in page  # quoted as code


# -- a schedule editor, through the REST API ------------------------------------------------

SUPERUSER_SESSION = "k3y0fth3sup3rus3rs3ss10n"


@pytest.fixture
def editor() -> APIClient:
    """Staff with only the schedule and run permissions: no user, session or file rights."""
    return client_for(make_user("editor", VIEW, ADD, CHANGE, VIEW_RUN))


@pytest.fixture
def superuser_session() -> None:
    root = User.objects.create_superuser("root", "root@example.com", "a password")
    Session.objects.create(
        session_key=SUPERUSER_SESSION,
        session_data=f"_auth_user_id={root.pk}",
        expire_date=timezone.now() + timedelta(days=1),
    )


def body(*args: str) -> dict[str, Any]:
    return {
        "name": "dump",
        "task": COMMAND,
        "args": list(args),
        "kind": "cron",
        "cron": "0 3 * * *",
    }


def run_now(editor: APIClient, schedule_id: int) -> dict[str, Any]:
    """Run the schedule now (the API, then one real scheduler pass); the run the editor reads."""
    queued = editor.post(f"{API}schedules/{schedule_id}/run-now/", {}, format="json")
    assert queued.status_code == 202, queued.content
    fire()
    read = editor.get(f"{API}runs/{queued.json()['id']}/")
    assert read.status_code == 200, read.content
    result: dict[str, Any] = read.json()
    return result


# What an editor tried, and the word the refusal names; {path}: a file nobody allowed.
ATTACKS = [
    pytest.param(["sessions.session"], "'sessions.session'", id="another-app"),
    pytest.param(["auth", "--output", "{path}"], "'--output'", id="output"),
    pytest.param(["auth", "--output={path}"], "'--output'", id="output-joined"),
    pytest.param(["auth", "--out", "{path}"], "'--out'", id="abbreviation"),
    pytest.param(["auth", "--out={path}"], "'--out'", id="abbreviation-joined"),
    pytest.param(["auth", "-o", "{path}"], "'-o'", id="short"),
    pytest.param(["auth", "-o{path}"], "'-o{path}'", id="short-joined"),
    pytest.param(["auth", "--ind=2", "--output={path}"], "'--ind'", id="abbreviated-listed"),
    pytest.param(["auth", "--indent", "--output={path}"], "'--indent --output=", id="as-value"),
    pytest.param(["auth", "--settings=tests.settings"], "'--settings'", id="common-option"),
    pytest.param(["auth", "--", "-o{path}"], "'--'", id="end-of-options"),
]


def attack(args: list[str], named: str, path: Path) -> tuple[list[str], str]:
    return [a.format(path=path) for a in args], named.format(path=path)


@pytest.mark.parametrize(("args", "named"), ATTACKS)
def test_an_editor_cannot_save_what_the_allowlist_does_not_list(
    editor: APIClient, tmp_path: Path, args: list[str], named: str
) -> None:
    args, named = attack(args, named, tmp_path / "dump.json")

    response = editor.post(f"{API}schedules/", body("dumpdata", *args), format="json")

    assert response.status_code == 400, response.content
    assert named in " ".join(response.json()["args"])
    assert not Schedule.objects.exists()


@pytest.mark.django_db(transaction=True)  # the command runs on the task thread's connection
@pytest.mark.usefixtures("superuser_session")
@pytest.mark.parametrize(("args", "named"), ATTACKS)
def test_arguments_written_around_the_services_are_refused_when_the_command_runs(
    editor: APIClient, tmp_path: Path, args: list[str], named: str
) -> None:
    """The setting is read again when the task runs: args written by a bulk update (or a
    schedule saved before the allowlist was narrowed) do not run either."""
    args, named = attack(args, named, tmp_path / "dump.json")
    created = editor.post(f"{API}schedules/", body("dumpdata", "auth"), format="json")
    assert created.status_code == 201, created.content
    Schedule.objects.filter(pk=created.json()["id"]).update(args=["dumpdata", *args])

    run = run_now(editor, created.json()["id"])

    assert SUPERUSER_SESSION not in json.dumps(run)
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert run["status"] == "failed"
    assert f"CommandRefused: {named}" in run["error"]


@pytest.mark.django_db(transaction=True)  # the command runs on the task thread's connection
@pytest.mark.usefixtures("superuser_session")
def test_an_editor_reads_no_output_of_an_allowed_dump(editor: APIClient) -> None:
    """``dumpdata auth`` is allowed (the docs' example): it dumps the password hashes, so its
    output is not kept, and the editor reads only that it ran."""
    created = editor.post(
        f"{API}schedules/", body("dumpdata", "auth", "--indent", "2"), format="json"
    )
    assert created.status_code == 201, created.content

    run = run_now(editor, created.json()["id"])

    assert "root@example.com" not in json.dumps(run)
    assert run["status"] == "succeeded", run["error"]
    assert run["output"] == (
        "manage.py dumpdata auth --indent 2: exit status 0 (output not kept: "
        "SCHEDULINATOR['COMMANDS']['dumpdata'] does not set keep_output)"
    )
