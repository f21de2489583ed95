"""``manage.py import_schedules`` from CELERY_BEAT_SCHEDULE (built with Celery's own
``crontab`` and ``solar``) and from a crontab file. The import from django-celery-beat's
tables is in tests/test_import_celery_beat.py."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from celery.schedules import crontab, solar
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from django_schedulinator import services
from django_schedulinator.errors import ServiceError
from django_schedulinator.models import Schedule, ScheduleChange

from .support.celery_support import CRONTABS, disagreements

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("import_schedules", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def beat_schedule(settings: Any) -> None:
    settings.CELERY_TIMEZONE = "Europe/Paris"
    settings.CELERY_BEAT_SCHEDULE = {
        "nightly": {
            "task": "tests.celery.record",
            "schedule": crontab(minute="0", hour="4", day_of_week="mon-fri"),
            "args": (1, 2),
            "kwargs": {"a": "b"},
        },
        "every-five-minutes": {"task": "tests.record", "schedule": timedelta(minutes=5)},
        "every-thirty-seconds": {"task": "legacy.ping", "schedule": 30.0},
        "at-sunset": {"task": "tests.record", "schedule": solar("sunset", 48.85, 2.35)},
        "unknown": {"task": "nope.task", "schedule": 60},
        "with-exchange": {"task": "tests.record", "schedule": 60, "options": {"exchange": "x"}},
    }


def test_celery_beat_schedule_is_imported_with_what_cannot_be_mapped_listed(
    beat_schedule: None,
) -> None:
    dry = run("--from", "celery-beat-schedule", "--map", "legacy.ping=tests.noop", "--dry-run")
    assert Schedule.objects.count() == 0
    assert "would create 'nightly': cron '0 4 * * mon-fri' in Europe/Paris" in dry
    assert "Would import 4 schedule(s); left out 2." in dry
    assert "would create 'at-sunset': solar: Sunset at 48.85, 2.35," in dry

    out = run("--from", "celery-beat-schedule", "--map", "legacy.ping=tests.noop")

    nightly = Schedule.objects.get(name="nightly")
    assert (nightly.task, nightly.cron, nightly.timezone) == (
        "tests.celery.record",
        "0 4 * * mon-fri",
        "Europe/Paris",
    )
    assert (nightly.args, nightly.kwargs) == ([1, 2], {"a": "b"})
    assert Schedule.objects.get(name="every-five-minutes").interval == timedelta(minutes=5)
    thirty = Schedule.objects.get(name="every-thirty-seconds")
    assert (thirty.task, thirty.interval) == ("tests.noop", timedelta(seconds=30))
    sunset = Schedule.objects.get(name="at-sunset")
    assert (sunset.kind, sunset.solar_event, sunset.latitude, sunset.longitude) == (
        "solar",
        "sunset",
        48.85,
        2.35,
    )
    assert sunset.timezone == "Europe/Paris"  # Celery's, as for its crontabs
    assert "skipped CELERY_BEAT_SCHEDULE['unknown']: the task 'nope.task' is not registered" in out
    assert "skipped CELERY_BEAT_SCHEDULE['with-exchange']: options exchange: no counterpart" in out
    entry = ScheduleChange.objects.get(schedule_name="nightly")
    assert (entry.action, entry.source) == ("created", "command")

    again = run("--from", "celery-beat-schedule", "--map", "legacy.ping=tests.noop")
    assert "Imported 0 schedule(s); left out 6." in again
    assert "a schedule named 'nightly' exists (imported before?)" in again
    assert Schedule.objects.count() == 4


def test_one_bad_entry_is_listed_with_the_reason_and_the_rest_imported(settings: Any) -> None:
    def every_minute(**entry: Any) -> dict[str, Any]:
        return {"task": "tests.record", "schedule": 60, **entry}

    settings.CELERY_BEAT_SCHEDULE = {
        "good": every_minute(args=[1], kwargs={"a": 2}),
        "good-tuple": every_minute(args=(1, 2)),
        "huge": every_minute(schedule=1e20),
        "nan": every_minute(schedule=float("nan")),
        "infinite": every_minute(schedule=float("inf")),
        "args-a-number": every_minute(args=5),
        "args-a-string": every_minute(args="abc"),
        "args-a-dict": every_minute(args={"a": 1}),
        "kwargs-a-list": every_minute(kwargs=[("a", 1)]),
        "kwargs-a-string": every_minute(kwargs="a=1"),
        "options-a-list": every_minute(options=["queue"]),
        "task-a-list": every_minute(task=["tests.record"]),
        "relative": every_minute(relative=True),
        "a-typo": every_minute(kwarg={"a": 1}),
        "not-a-dict": "every minute",
        7: every_minute(),
    }

    dry = run("--from", "celery-beat-schedule", "--dry-run")
    out = run("--from", "celery-beat-schedule")

    assert "Would import 2 schedule(s); left out 14." in dry
    assert "Imported 2 schedule(s); left out 14." in out
    assert Schedule.objects.get(name="good").args == [1]
    assert Schedule.objects.get(name="good-tuple").args == [1, 2]
    for name, reason in [
        ("huge", "the schedule 1e+20 is not a number of seconds an interval can hold"),
        ("nan", "the schedule nan is not a number of seconds an interval can hold"),
        ("infinite", "the schedule inf is not a number of seconds an interval can hold"),
        ("args-a-number", "args must be a list or a tuple, not int"),
        ("args-a-string", "args must be a list or a tuple, not str"),
        ("args-a-dict", "args must be a list or a tuple, not dict"),
        ("kwargs-a-list", "kwargs must be a dict, not list"),
        ("kwargs-a-string", "kwargs must be a dict, not str"),
        ("options-a-list", "options must be a dict, not list"),
        ("task-a-list", "task must be a task name, not list"),
        ("relative", "relative: no counterpart here"),
        ("a-typo", "unknown key kwarg (an entry takes task, schedule, args, kwargs, options"),
        ("not-a-dict", "an entry needs 'task' and 'schedule'"),
        (7, "the name must be text, not int"),
    ]:
        assert f"skipped CELERY_BEAT_SCHEDULE[{name!r}]: {reason}" in out, (name, out)


def test_a_name_taken_mid_import_stops_it_and_imports_nothing(
    beat_schedule: None, monkeypatch: Any
) -> None:
    real, calls = services.create, []

    def clash_then_create(schedule: Schedule, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # someone else takes the name after the import read the names
            real(
                Schedule(
                    name=schedule.name, task="tests.record", kind="interval", interval=timedelta(1)
                )
            )
        return real(schedule, **kwargs)

    monkeypatch.setattr(services, "create", clash_then_create)
    with pytest.raises(CommandError) as raised:
        run("--from", "celery-beat-schedule")
    message = str(raised.value)
    assert message.startswith("The import stopped and imported nothing: ")
    assert "CELERY_BEAT_SCHEDULE['every-five-minutes']" in message
    assert "a schedule named 'every-five-minutes' was created while the import ran" in message
    assert Schedule.objects.count() == 0  # the first one too


def test_imported_schedules_start_at_their_next_occurrence_after_now(beat_schedule: None) -> None:
    run("--from", "celery-beat-schedule")
    for schedule in Schedule.objects.all():
        assert schedule.next_run_at is not None
        assert schedule.next_run_at > schedule.created_at - timedelta(seconds=1)


def test_imported_crontabs_fire_when_celery_would(settings: Any) -> None:
    """Celery's crontab fires on a day that matches both day fields (the first Monday of the
    month: days 1-7 that are a Monday); the imported schedule too, at every instant
    compared. Forms that cron reads otherwise (a list, a range that wraps) fire as in Celery."""
    settings.CELERY_TIMEZONE = "Europe/Berlin"
    beat = {name: crontab(**fields) for name, fields in CRONTABS.items()}
    settings.CELERY_BEAT_SCHEDULE = {
        name: {"task": "tests.record", "schedule": schedule} for name, schedule in beat.items()
    }

    dry = run("--from", "celery-beat-schedule", "--dry-run")
    assert (
        "would create 'first-monday': cron '30 6 1-7 * mon' in Europe/Berlin, on days that "
        "match both day fields, task 'tests.record'"
    ) in dry
    assert f"Would import {len(CRONTABS)} schedule(s); left out 0." in dry
    run("--from", "celery-beat-schedule")

    found = {
        name: disagreements(Schedule.objects.get(name=name), schedule, "Europe/Berlin")[:3]
        for name, schedule in beat.items()
    }
    assert found == {name: [] for name in beat}
    first_monday = Schedule.objects.get(name="first-monday")
    assert (first_monday.cron, first_monday.day_rule) == ("30 6 1-7 * mon", "both")
    weekdays = Schedule.objects.get(name="weekday-mornings")
    assert (weekdays.cron, weekdays.day_rule) == ("0 4 * * mon-fri", "either")


@pytest.mark.parametrize(
    ("failure", "raised"),
    [
        (RuntimeError("the database went away"), RuntimeError),
        (ServiceError("refused"), CommandError),  # said as: imported nothing
        (ValidationError({"cron": "refused"}), CommandError),
    ],
)
def test_an_import_is_one_transaction(
    beat_schedule: None, monkeypatch: Any, failure: Exception, raised: type[Exception]
) -> None:
    real, calls = services.create, []

    def create_then_fail(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise failure
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "create", create_then_fail)
    with pytest.raises(raised) as stopped:
        run("--from", "celery-beat-schedule")
    assert Schedule.objects.count() == 0  # the first one too
    if raised is CommandError:  # it names the entry it stopped on, and why
        assert str(stopped.value).startswith(
            "The import stopped and imported nothing: CELERY_BEAT_SCHEDULE['every-five-minutes']: "
        )
        assert "refused" in str(stopped.value)


def test_a_crontab_import_that_stops_names_the_line(
    settings: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "COMMANDS": {"clearsessions": {}}}
    path = tmp_path / "crontab"
    path.write_text("# m h dom mon dow command\n0 1 * * * python manage.py clearsessions\n"
                    "0 2 * * * python manage.py clearsessions\n")  # fmt: skip
    real, calls = services.create, []

    def create_then_refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise ValidationError({"cron": "refused"})
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "create", create_then_refuse)
    with pytest.raises(CommandError) as stopped:
        run("--from", "crontab", str(path))
    assert str(stopped.value) == "The import stopped and imported nothing: crontab:3: cron: refused"
    assert Schedule.objects.count() == 0


CRONTAB = """\
# m h dom mon dow command
SHELL=/bin/sh
MAILTO=ops@example.com
30 4 * * * /srv/venv/bin/python /srv/app/manage.py clearsessions
@daily /srv/venv/bin/python /srv/app/manage.py schedtest_echo 'two words' --status 0
CRON_TZ=America/New_York
*/15 9-17 * * 1-5 www-data python3 manage.py clearsessions
0 1 * * * /usr/local/bin/backup.sh
0 2 * * * python manage.py flush --no-input
@reboot python manage.py clearsessions
61 * * * * python manage.py clearsessions
"""


def test_a_crontab_becomes_schedules_of_the_command_task(settings: Any, tmp_path: Path) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "COMMANDS": {
            "clearsessions": {},
            "schedtest_echo": {"args": ["two words"], "options": {"--status": ["0"]}},
        },
    }
    path = tmp_path / "crontab"
    path.write_text(CRONTAB)

    out = run("--from", "crontab", str(path))

    made = {s.name: s for s in Schedule.objects.all()}
    assert set(made) == {
        "crontab: manage.py clearsessions",
        "crontab: manage.py schedtest_echo 'two words' --status 0",
        "crontab: manage.py clearsessions (2)",
    }
    first = made["crontab: manage.py clearsessions"]
    assert (first.task, first.args, first.cron, first.timezone) == (
        "django_schedulinator.command",
        ["clearsessions"],
        "30 4 * * *",
        "Europe/Berlin",
    )
    echo = made["crontab: manage.py schedtest_echo 'two words' --status 0"]
    assert (echo.args, echo.cron) == (["schedtest_echo", "two words", "--status", "0"], "0 0 * * *")
    third = made["crontab: manage.py clearsessions (2)"]
    assert (third.cron, third.timezone) == ("*/15 9-17 * * 1-5", "America/New_York")
    assert "skipped crontab:8: it runs no manage.py command" in out
    assert "skipped crontab:9: The management command 'flush' is not in SCHEDULINATOR" in out
    assert "skipped crontab:10: @reboot runs at boot" in out
    assert "skipped crontab:11: cron:" in out  # minute 61: the model says why
    assert "Imported 3 schedule(s); left out 4." in out


def test_a_crontab_line_with_arguments_the_allowlist_does_not_list_is_left_out(
    settings: Any, tmp_path: Path
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "COMMANDS": {"dumpdata": {"args": ["auth"], "options": {"--indent": ["2"]}}},
    }
    path = tmp_path / "crontab"
    path.write_text(
        "0 1 * * * python manage.py dumpdata auth --indent 2\n"
        "0 2 * * * python manage.py dumpdata sessions.session\n"
        "0 3 * * * python manage.py dumpdata auth --out /srv/www/auth.json\n"
    )

    out = run("--from", "crontab", str(path))

    assert [s.args for s in Schedule.objects.all()] == [["dumpdata", "auth", "--indent", "2"]]
    assert "skipped crontab:2: 'sessions.session' is not an argument" in out
    assert "skipped crontab:3: '--out' is not an option" in out


# Each line's meaning needs the shell (or cron's %): left out, the reason naming each token.
SHELL_LINES = {
    "0 1 * * * python manage.py dumpdata | gzip > /backup/x.json.gz": [
        "'|' (a pipe to another command)",
        "'> /backup/x.json.gz' (a redirection)",
    ],
    "0 2 * * * python manage.py dumpdata --output /backup/$(date +\\%F).json": [
        "'$(date +\\%F)' (a command substitution)"
    ],
    "0 3 * * * python manage.py clearsessions && python manage.py flush": [
        "'&&' (runs another command if this one succeeds)"
    ],
    "0 4 * * * python manage.py clearsessions; ./manage.py flush": [
        "';' (runs another command after this one)"
    ],
    "0 5 * * * python manage.py clearsessions || echo failed": [
        "'||' (runs another command if this one fails)"
    ],
    "0 6 * * * python manage.py clearsessions | mail ops": ["'|' (a pipe to another command)"],
    "0 7 * * * python manage.py clearsessions &": ["'&' (runs it in the background)"],
    "0 8 * * * python manage.py schedtest_echo `hostname`": [
        "'`hostname`' (a command substitution)"
    ],
    "0 9 * * * python manage.py schedtest_echo $HOME": ["'$HOME' (a variable)"],
    "0 10 * * * python manage.py loaddata fixtures/*.json": [
        "'fixtures/*.json' (a pattern the shell expands to file names)"
    ],
    "0 11 * * * python manage.py clearsessions < /dev/null": ["'< /dev/null' (a redirection)"],
    "0 12 * * * cd /srv/app; python manage.py clearsessions >> /var/log/cs.log 2>&1": [
        "';' (runs another command after this one)"
    ],
    "0 13 * * * python manage.py schedtest_echo 50%": [
        "'%' (cron sends what follows to the command's input"
    ],
    "0 14 * * * DJANGO_SETTINGS_MODULE=other.settings python manage.py clearsessions": [
        "'DJANGO_SETTINGS_MODULE=other.settings' (sets a variable for the command)"
    ],
}


def test_a_line_whose_meaning_needs_the_shell_is_left_out_with_the_reason(
    settings: Any, tmp_path: Path
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "COMMANDS": {
            "clearsessions": {},
            "dumpdata": {},
            "loaddata": {},
            "schedtest_echo": {"args": ["a > b", "x;y", "$HOME", "*", "100%"]},
        },
    }
    path = tmp_path / "crontab"
    # Macros followed by a tab are read; quoted, the shell's characters are plain text.
    path.write_text(
        "\n".join(SHELL_LINES)
        + "\n@daily\tpython manage.py clearsessions"
        + "\n@hourly\t\tpython manage.py schedtest_echo 'a > b' \"x;y\" '$HOME' '*' 100\\%\n"
    )

    out = run("--from", "crontab", str(path))

    reasons = dict(
        line.removeprefix("skipped crontab:").split(": ", 1)
        for line in out.splitlines()
        if line.startswith("skipped")
    )
    for number, (line, features) in enumerate(SHELL_LINES.items(), start=1):
        reason = reasons[str(number)]
        assert reason.startswith("it needs the shell: "), (line, reason)
        for feature in features:
            assert feature in reason, (line, reason)
    assert "clearsessions;" not in reasons["4"]
    assert "Imported 2 schedule(s); left out 14." in out
    daily = Schedule.objects.get(name="crontab: manage.py clearsessions")
    assert (daily.cron, daily.args) == ("0 0 * * *", ["clearsessions"])
    hourly = Schedule.objects.get(cron="0 * * * *")
    assert hourly.args == ["schedtest_echo", "a > b", "x;y", "$HOME", "*", "100%"]


# The common Django crontab line: cd into the project, run the one command, send its output
# to a file or away. Imported; the report says, per line, what changes.
KEPT_SHAPES = """\
0 1 * * * cd /srv/app && python manage.py clearsessions >> /var/log/cs.log 2>&1
0 2 * * * cd /srv/app && /srv/venv/bin/python3 /srv/app/manage.py clearsessions > /dev/null 2>&1
0 3 * * * www-data cd '/srv/my app' && python3 manage.py schedtest_echo 'two words' > /tmp/echo.log
0 4 * * * python manage.py schedtest_echo 'two words' >> "/var/log/echo out.log"
0 5 * * * cd /srv/app && python manage.py clearsessions
0 6 * * * python manage.py clearsessions 2>&1 # cron mailed it
"""
# Near misses: each stays left out, with the reason as before.
NEAR_MISSES = {
    "0 7 * * * cd /srv/app && python manage.py clearsessions | mail ops": "'|' (a pipe",
    "0 8 * * * cd /srv/app; python manage.py clearsessions": "';' (runs another command",
    "0 9 * * * cd /srv/app && python manage.py clearsessions && python manage.py flush": (
        "'&&' (runs another command if this one succeeds)"
    ),
    "0 10 * * * cd $HOME/app && python manage.py clearsessions": "'$HOME' (a variable)",
    "0 11 * * * cd ~/app && python manage.py clearsessions": "'~/app' (the shell expands ~",
    "0 12 * * * cd /srv/app && DJANGO_SETTINGS_MODULE=x python manage.py clearsessions": (
        "'DJANGO_SETTINGS_MODULE=x' (sets a variable for the command)"
    ),
    "0 13 * * * python manage.py clearsessions > /var/log/cs-$(date +\\%F).log": (
        "'> /var/log/cs-$' (a redirection)"
    ),
    "0 14 * * * python manage.py clearsessions 2>&1 > /var/log/cs.log": "'2>&1' (a redirection)",
    "0 15 * * * python manage.py clearsessions 2> /dev/null": "'2> /dev/null' (a redirection)",
    "0 16 * * * python manage.py clearsessions &> /dev/null": "'&> /dev/null' (a redirection)",
    "0 17 * * * python manage.py clearsessions > /tmp/a > /tmp/b": "'> /tmp/a' (a redirection)",
    "0 18 * * * cd /srv/app && timeout 60 python manage.py clearsessions": "through 'timeout 60'",
    "0 19 * * * cd -P /srv/app && python manage.py clearsessions": "'&&' (runs another command",
    "0 20 * * * python manage.py clearsessions > /tmp/cs%d.log": "'%' (cron sends what follows",
}


def test_a_cd_into_the_project_and_output_to_a_file_or_away_are_imported_saying_what_changes(
    settings: Any, tmp_path: Path
) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "COMMANDS": {
            "clearsessions": {},
            "schedtest_echo": {"args": ["two words"], "keep_output": True},
            "flush": {},
        },
    }
    path = tmp_path / "crontab"
    path.write_text(KEPT_SHAPES + "\n".join(NEAR_MISSES) + "\n")

    out = run("--from", "crontab", str(path))

    assert "Imported 6 schedule(s); left out 14." in out, out
    by_cron = {s.cron: s for s in Schedule.objects.all()}
    assert sorted(by_cron) == [f"0 {hour} * * *" for hour in range(1, 7)]
    for hour in (1, 2, 5, 6):
        assert by_cron[f"0 {hour} * * *"].args == ["clearsessions"]
    for hour in (3, 4):
        assert by_cron[f"0 {hour} * * *"].args == ["schedtest_echo", "two words"]
    lines = out.splitlines()

    def said(number: int) -> list[str]:
        """What the report says changes for the schedule of line ``number``."""
        return [line.strip().removeprefix(f"crontab:{number}: ") for line in lines
                if line.startswith(f"  crontab:{number}: ")]  # fmt: skip

    nowhere = "they go nowhere: the run records only the exit status (SCHEDULINATOR['COMMANDS']"
    kept = "the run's record keeps the end of both (SCHEDULINATOR['COMMANDS']"
    assert said(1) == [
        "cd /srv/app is dropped: the command runs in the process that runs the task (its "
        "project, settings and working directory), not in /srv/app",
        f"its output and errors went to /var/log/cs.log; now {nowhere}['clearsessions'] does "
        "not set keep_output)",
    ]
    assert said(2)[1] == (
        f"its output and errors were discarded; now {nowhere}['clearsessions'] does not set "
        "keep_output)"
    )
    assert said(3)[0].startswith("cd '/srv/my app' is dropped: ")
    assert said(3)[0].endswith(", not in /srv/my app")
    assert said(3)[1] == (
        "its output went to /tmp/echo.log and its errors to cron's mail; now "
        f"{kept}['schedtest_echo'] sets keep_output)"
    )
    assert said(4) == [
        "its output went to /var/log/echo out.log and its errors to cron's mail; now "
        f"{kept}['schedtest_echo'] sets keep_output)"
    ]
    assert said(5)[1] == (
        f"its output and errors went to cron's mail; now {nowhere}['clearsessions'] does not "
        "set keep_output)"
    )
    assert said(6) == [said(5)[1]]
    for number, (line, reason) in enumerate(
        NEAR_MISSES.items(), start=len(KEPT_SHAPES.splitlines()) + 1
    ):
        (skipped,) = [x for x in lines if x.startswith(f"skipped crontab:{number}: ")]
        assert reason in skipped, (line, skipped)


def test_a_line_that_runs_manage_py_through_another_program_is_left_out(
    settings: Any, tmp_path: Path
) -> None:
    """A program before manage.py (other than Python itself) changes what the line does: a
    time limit, a lock, a priority. A schedule cannot keep that, so the line is left out,
    naming the program, instead of being imported without it."""
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "COMMANDS": {"clearsessions": {}}}
    path = tmp_path / "crontab"
    path.write_text(
        "0 1 * * * timeout 60 python manage.py clearsessions\n"
        "0 2 * * * flock -n /tmp/cs.lock /srv/venv/bin/python manage.py clearsessions\n"
        "0 3 * * * nice -n 10 python3 manage.py clearsessions\n"
        "0 4 * * * python -W error manage.py clearsessions\n"
        "0 5 * * * /srv/venv/bin/python3.12 /srv/app/manage.py clearsessions\n"
        "0 6 * * * /srv/venv/bin/django-admin clearsessions\n"
    )

    out = run("--from", "crontab", str(path))

    assert sorted(s.cron for s in Schedule.objects.all()) == ["0 5 * * *", "0 6 * * *"]
    assert "skipped crontab:1: it runs manage.py through 'timeout 60'" in out
    assert "skipped crontab:2: it runs manage.py through 'flock -n /tmp/cs.lock'" in out
    assert "skipped crontab:3: it runs manage.py through 'nice -n 10'" in out
    assert "skipped crontab:4: it runs manage.py through 'python -W error'" in out


def test_imported_schedules_may_be_given_a_grace(beat_schedule: None) -> None:
    out = run("--from", "celery-beat-schedule", "--map", "legacy.ping=tests.record",
              "--grace", "PT10M")  # fmt: skip
    assert "created 'every-five-minutes': every 0:05:00, task 'tests.record', dispatcher " in out
    assert ", grace 0:10:00" in out
    imported = Schedule.objects.filter(name__in=["every-five-minutes", "every-thirty-seconds"])
    assert {s.grace for s in imported} == {timedelta(minutes=10)}
    with pytest.raises(CommandError, match="--grace: 'soon' is not a duration"):
        call_command("import_schedules", "--from", "celery-beat-schedule", grace="soon")
    with pytest.raises(CommandError, match="argument --grace: 'soon' is not a duration"):
        run("--from", "celery-beat-schedule", "--grace", "soon")


def test_the_command_says_what_it_needs() -> None:
    with pytest.raises(CommandError, match="--from crontab needs the file"):
        run("--from", "crontab")
    with pytest.raises(CommandError, match="--map takes NAME=REGISTERED"):
        run("--from", "celery-beat-schedule", "--map", "nonsense")
    with pytest.raises(CommandError, match="Cannot read"):
        run("--from", "crontab", "/no/such/file")
