"""What the docs tell a new user, checked against what the code does: the walkthroughs run
as written in a new project (tests/doc_project.py), and the statements a test can keep true
(the checks table, the statuses of handed-off runs) are compared with the code."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import django_schedulinator
from django_schedulinator import outcomes
from django_schedulinator.index import DueIndex

from .doc_examples import DOCS, blocks, source
from .doc_project import DocProject


@pytest.fixture
def doc_projects(tmp_path: Path, key_prefix: str) -> Iterator[list[DocProject]]:
    made: list[DocProject] = []
    yield made
    for project in made:
        project.stop_all()


def wait_for(condition: object, what: str, seconds: float = 90) -> None:
    """A bound on what processes of their own do, not a timing under test."""
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def run_statuses(project: DocProject) -> list[str]:
    return [status for (status,) in project.query("SELECT status FROM django_schedulinator_run")]


def commands(name: str, page: str = "dispatch.md") -> list[str]:
    """The command lines of a documented shell block, comments left out."""
    return [line for line in source(name, page).splitlines() if line.split("#")[0].strip()]


@pytest.mark.subprocess
def test_the_django_tasks_walkthrough_runs_a_schedule_on_a_real_db_worker(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """docs/dispatch.md#django-tasks copied top to bottom (on Django 5.2 with the backport,
    on Django 6 with django.tasks): the settings, the task in reports/scheduled_tasks.py,
    the schedule, then migrate, run_scheduler and db_worker as the page writes them."""
    project = DocProject(tmp_path, key_prefix, settings=[source("tasks")], apps=["reports"])
    doc_projects.append(project)
    project.write("reports/scheduled_tasks.py", source("tasks-task"))
    migrate, scheduler, worker = commands("tasks-commands")
    assert migrate.startswith("python manage.py migrate"), migrate

    project.run(migrate)
    project.shell(source("tasks-schedule") + "\nservices.run_now(schedule)")
    project.start(scheduler)
    wait_for(lambda: run_statuses(project) == ["dispatched"], "the hand-off to the backend")
    project.start(worker)
    wait_for(lambda: run_statuses(project) == ["succeeded"], "the worker's report of the end")


# A Celery project's own celery.py, as Celery's "First steps with Django" writes it; the
# page's block adds to it.
CELERY_PY = """\
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "myproject.settings")
app = Celery("myproject")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""


def project_file(block: str, page: str = "dispatch.md") -> tuple[str, str]:
    """(path, text) of a documented module: its first line names the file (``# a/b.py``)."""
    first, _, rest = source(block, page).partition("\n")
    assert re.fullmatch(r"# [\w/]+\.py", first), first
    return first[2:], rest


@pytest.mark.subprocess
def test_the_celery_walkthrough_runs_a_schedule_on_a_real_celery_worker(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """docs/dispatch.md#celery in a Celery project: the registration where the page puts
    it must be found by the process that saves the schedule and by the worker, and the
    hook must report the end (on the real RabbitMQ, the test process's own queue)."""
    from .celery_app import BROKER
    from .celery_support import QUEUE, purge, worker_argv

    hook_path, hook = project_file("celery-hook")
    task_path, task = project_file("celery-task")
    assert hook_path == "myproject/celery.py"
    app_name = task_path.split("/")[0]
    project = DocProject(
        tmp_path, key_prefix, settings=[source("celery"), f"CELERY_BROKER_URL = {BROKER!r}"],
        apps=[app_name],
    )  # fmt: skip
    doc_projects.append(project)
    project.write(hook_path, CELERY_PY + hook)
    project.write(task_path, task)
    purge()

    project.run("python manage.py migrate")
    project.shell(
        "from django_schedulinator import services\n"
        "schedule = services.create({'name': 'invoices', 'task': 'billing.invoice_run', "
        "'kind': 'cron', 'cron': '0 6 * * *', 'dispatcher': 'celery', "
        f"'dispatch_options': {{'queue': {QUEUE!r}}}}})\n"
        "services.run_now(schedule)"
    )
    project.start("python manage.py run_scheduler")
    wait_for(lambda: run_statuses(project) == ["dispatched"], "the hand-off to the broker")
    project.popen([*worker_argv()[:3], "-A", "myproject", *worker_argv()[5:]])
    wait_for(lambda: run_statuses(project) == ["succeeded"], "the worker's report of the end")
    purge()


# -- the checks table of docs/checks.md -----------------------------------------------------

PACKAGE = Path(django_schedulinator.__file__).resolve().parent  # as installed
CHECK_ID = r"schedulinator\.[EW]\d{3}"


def ids_the_code_emits() -> set[str]:
    return {
        found
        for path in PACKAGE.rglob("*.py")
        for found in re.findall(rf'\bid="({CHECK_ID})"', path.read_text("utf-8"))
    }


def ids_in_the_checks_table() -> list[str]:
    page = (DOCS / "checks.md").read_text("utf-8")
    return re.findall(rf"^\| `({CHECK_ID})` \|", page, re.MULTILINE)


def test_every_check_id_the_code_emits_has_one_row_in_the_checks_table() -> None:
    emitted = ids_the_code_emits()
    documented = ids_in_the_checks_table()
    assert "schedulinator.E001" in emitted  # the search finds them
    assert len(documented) == len(set(documented)), "an id with two rows"
    assert sorted(emitted - set(documented)) == [], "emitted, with no row in docs/checks.md"
    assert sorted(set(documented) - emitted) == [], "a row for an id the code never emits"


# -- what a handed-off run is after OUTCOME_TIMEOUT_SECONDS (docs/dispatch.md) ---------------


def table_row(page: str, starts: str) -> str:
    text = (DOCS / page).read_text("utf-8")
    [row] = [line for line in text.splitlines() if line.startswith(starts)]
    return row


@pytest.mark.django_db
@pytest.mark.parametrize("started", [True, False], ids=["start reported", "never reported"])
def test_a_handed_off_run_keeps_its_status_when_its_outcome_timeout_passes(
    settings: Any, built_index: DueIndex, started: bool
) -> None:
    """The Django tasks, Celery and RQ integrations all report the start: such a run stays
    `running`, not `dispatched`, once overlap stops waiting for it."""
    from .test_outcomes import REPORTING, fire_again, handed_off

    reporting = {**REPORTING, "OPTIONS": {"REPORTS": True, "OUTCOME_TIMEOUT_SECONDS": 1}}
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": {"queue": reporting}}
    schedule, first = handed_off(overlap="skip")
    if started:
        assert outcomes.report_started(first.idempotency_key)
    time.sleep(1.1)  # past the outcome timeout

    assert fire_again(schedule)[-1].status == "dispatched"  # overlap no longer waits
    first.refresh_from_db()
    kept = "running" if started else "dispatched"
    assert first.status == kept
    assert f"`{kept}`" in table_row("dispatch.md", "| overlap `skip` |")


# -- settings the docs name --------------------------------------------------------------------

# The pages that tell of settings that are gone (the upgrade guide, the changelog) are left
# out: the others must name settings that exist.
SETTING_NAMED = re.compile(r"""SCHEDULINATOR\[["']([A-Z_]+)["']\]""")


def test_the_docs_name_only_settings_that_exist() -> None:
    from django_schedulinator.conf import DEFAULTS

    pages = [p for p in sorted(DOCS.glob("*.md")) if p.name != "upgrading.md"]
    named = {
        f"{page.name}: {name}"
        for page in [*pages, DOCS.parent / "README.md"]
        for name in SETTING_NAMED.findall(page.read_text("utf-8"))
        if name not in DEFAULTS
    }
    assert sorted(named) == []


# Writes of schedules that skip the service layer (no change log, no version check).
AROUND_THE_SERVICES = re.compile(
    r"Schedule\.objects\.(?:create|update_or_create|get_or_create|bulk_create)\(|"
    r"\bschedule\.save\(|\bschedule\.delete\("
)


def test_the_docs_write_schedules_through_the_services() -> None:
    """What the docs show a user to copy goes through the one write path. The pages that
    explain writes around it (bulk writes and resync_schedules, the upgrade guide) say so
    in their text; their code blocks name the escape hatch on purpose."""
    on_purpose = {"concepts.md", "upgrading.md"}
    pages = [p for p in sorted(DOCS.glob("*.md")) if p.name not in on_purpose]
    found = [
        f"{page.name}: {match}"
        for page in [*pages, DOCS.parent / "README.md"]
        for block in re.findall(r"```python\n(.*?)```", page.read_text("utf-8"), re.S)
        for match in AROUND_THE_SERVICES.findall(block)
    ]
    assert found == []


# -- links between the pages ---------------------------------------------------------------


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    as hyphens."""
    headings = re.findall(r"^#+ (.*)$", page.read_text("utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_links_between_the_pages_land_on_headings_that_exist() -> None:
    pages = [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]
    broken = [
        f"{page.name}: {target}#{anchor}"
        for page in pages
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#([\w-]+)\)", page.read_text())
        if anchor not in heading_anchors(page.parent / target if target else page)
    ]
    assert broken == []


# -- installing before a release (README.md) ---------------------------------------------------

ROOT = DOCS.parent


@pytest.mark.subprocess
def test_the_readme_wheel_installs_by_name_and_carries_the_license(tmp_path: Path) -> None:
    """Nothing is on PyPI yet: the README builds a wheel from the clone and installs it by
    name from that directory. Offline here: no dependencies, into a directory of its own."""
    build, install = commands("wheel", "../README.md")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(line: str, *more: str) -> None:
        program, *words = shlex.split(line.replace("/path/to/django-schedulinator", str(ROOT)))
        python = {"python": [sys.executable], "pip": [sys.executable, "-m", "pip"]}[program]
        done = subprocess.run(
            [*python, *words, *more], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"

    run(build)
    [wheel] = (tmp_path / "dist").glob("django_schedulinator-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    [license_file] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    text = zipfile.ZipFile(wheel).read(license_file).decode()
    assert text == (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License\n\nCopyright (c) 2026, the django-schedulinator")

    run(install, "--no-deps", "--no-index", "--target", str(tmp_path / "site"))
    assert (tmp_path / "site" / "django_schedulinator" / "lua" / "claim.lua").is_file()


# -- the quick start (docs/quickstart.md) ------------------------------------------------------

QUICKSTART = "quickstart.md"


@pytest.mark.subprocess
def test_the_quick_start_fires_a_schedule(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """docs/quickstart.md copied top to bottom into a new project: its settings (their Redis
    pointed at the tests'), the task module, migrate, the schedule pasted into the shell, and
    the scheduler, which runs the task with its occurrence."""
    redis = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    settings = source("quickstart-settings", QUICKSTART)
    assert "redis://127.0.0.1:6379/1" in settings
    project = DocProject(
        tmp_path, key_prefix, settings=[settings.replace("redis://127.0.0.1:6379/1", redis)],
        apps=["reports"],
    )  # fmt: skip
    doc_projects.append(project)
    task_path, task = project_file("quickstart-task", QUICKSTART)
    project.write(task_path, task)
    [migrate] = commands("quickstart-migrate", QUICKSTART)
    [run] = commands("quickstart-run", QUICKSTART)

    project.run(migrate)
    project.shell(source("quickstart-schedule", QUICKSTART))
    scheduler = project.start(run)
    wait_for(lambda: run_statuses(project) == ["succeeded"], "the run now to succeed")
    scheduler.terminate()
    scheduler.wait(timeout=60)
    assert scheduler.stdout is not None
    output = scheduler.stdout.read()
    assert re.search(r"hello, world \(\d+:\d+\)", output), output


# -- every block a user would copy is run by a test ------------------------------------------

# What a block in `text` shows is output (or a picture), nothing to copy. Every other block is
# run by a test (`<!-- example: NAME -->`, NAME cited by a test) or says why it is not
# (`<!-- not run: REASON -->`), except the ones counted here, which are still to cover: a new
# block must be one or the other, and a page whose count goes down updates its number.
NOT_YET_RUN = {
    "alerts.md": 2,
    "api.md": 27,
    "benchmarks.md": 7,
    "commands.md": 7,
    "concepts.md": 5,
    "dispatch.md": 4,
    "metrics.md": 8,
    "migrating-from-celery-beat.md": 7,
    "operations.md": 4,
    "reliability.md": 5,
    "schedules-in-code.md": 3,
    "scheduling.md": 8,
    "sentry.md": 2,
    "settings.md": 3,
    "signals.md": 1,
    "upgrading.md": 6,
}
TESTS = Path(__file__).resolve().parent


def pages() -> list[str]:
    return [*(p.name for p in sorted(DOCS.glob("*.md"))), "../README.md"]


def test_every_block_to_copy_is_run_by_a_test_or_says_why_not() -> None:
    unmarked = {
        page: [b for b in blocks(page) if b.lang != "text" and b.kind is None] for page in pages()
    }
    counts = {page: len(found) for page, found in unmarked.items() if found}
    assert counts == NOT_YET_RUN, (
        "A block with neither marker, or one less: give it `<!-- example: NAME -->` and a "
        "test, or `<!-- not run: REASON -->` (rare), and update NOT_YET_RUN. Unmarked: "
        + ", ".join(str(b) for found in unmarked.values() for b in found)
    )


def test_every_example_marker_names_a_block_a_test_runs() -> None:
    """A marker is a promise: its name is cited by a test (as a string), once per page."""
    cited = "\n".join(path.read_text("utf-8") for path in TESTS.rglob("*.py"))
    examples = [b for page in pages() for b in blocks(page) if b.kind == "example"]
    assert len(examples) > 20  # the markers are found
    names = [(b.page, b.what) for b in examples]
    assert len(names) == len(set(names)), "an example name used twice in a page"
    uncited = [f"{b}: {b.what}" for b in examples if f'"{b.what}"' not in cited]
    assert uncited == []
    reasonless = [str(b) for page in pages() for b in blocks(page)
                  if b.kind == "not run" and len(b.what) < 20]  # fmt: skip
    assert reasonless == [], "a block not run must say why"


# -- installation and first schedule (docs/install.md) --------------------------------------

INSTALL = "install.md"
# Django's startproject line, which the SQLite block's BASE_DIR comes from.
BASE_DIR = "from pathlib import Path\n\nBASE_DIR = Path(__file__).resolve().parent.parent\n"


def install_settings(redis: str) -> str:
    """The Configure block, with what it leaves to the project filled in: the project's other
    apps (``# ...``), its usual default cache (``{...}``), and the tests' Redis."""
    block = source("install-settings", INSTALL)
    for shown in ("    # ...\n", '"default": {...}', "redis://127.0.0.1:6379/1"):
        assert shown in block, shown
    locmem = '"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}'
    return (
        block.replace("    # ...\n", "    ...,\n")
        .replace('"default": {...}', locmem)
        .replace("redis://127.0.0.1:6379/1", redis)
    )


@pytest.mark.subprocess
def test_the_install_page_walks_to_a_schedule_that_fires(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """docs/install.md in a new project: the settings and the SQLite options for several
    schedulers, check, migrate, the task module, the three schedules pasted into the shell,
    and the scheduler, which runs one of them now."""
    redis = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    project = DocProject(
        tmp_path, key_prefix,
        settings=[install_settings(redis), BASE_DIR + source("install-sqlite", INSTALL)],
        apps=["reports"],
    )  # fmt: skip
    doc_projects.append(project)
    tasks_path, tasks = project_file("install-tasks", INSTALL)
    project.write(tasks_path, tasks)
    [check] = commands("install-check", INSTALL)
    [migrate] = commands("install-migrate", INSTALL)
    [run] = commands("install-run", INSTALL)

    project.run(check)
    project.run(migrate)
    project.shell(
        source("install-schedules", INSTALL)
        + "\nservices.run_now(Schedule.objects.get(name='totals'))"
    )
    names = project.query("SELECT name FROM django_schedulinator_schedule ORDER BY name")
    assert names == [("launch",), ("nightly-digest",), ("totals",)]
    project.start(run)
    wait_for(lambda: run_statuses(project) == ["succeeded"], "the run now to succeed")
    [(journal,)] = project.query("PRAGMA journal_mode")
    assert journal == "wal"  # the SQLite block's options are the ones in use


def test_the_install_pages_wheel_is_the_readmes() -> None:
    """docs/install.md builds and installs the wheel with the README's commands (which
    test_the_readme_wheel_installs_by_name_and_carries_the_license runs), from a clone in
    ./django-schedulinator."""
    readme = source("wheel", "../README.md").replace("/path/to/", "./")
    assert source("install-wheel", INSTALL) == readme


def test_the_install_pages_urls_serve_the_api() -> None:
    """docs/install.md's one line in urls.py (``...`` stands for the project's own URLs)."""
    import types

    from django.urls import include, path, resolve

    urls = types.ModuleType("install_urls")
    exec(source("install-urls", INSTALL), {"path": path, "include": include}, urls.__dict__)
    urls.urlpatterns = [p for p in urls.urlpatterns if p is not ...]
    assert resolve("/api/schedulinator/schema/", urlconf=urls).url_name == "schema"


# Lines that install the app: from a clone (editable), or from the wheel's directory.
PIP_INSTALL = re.compile(
    r"""pip install (?:-e |--find-links dist )?["']?(?:\./|/path/to/)?django-schedulinator"""
    r"""\[(?P<extras>[\w,-]+)\]["']?"""
)


@pytest.mark.parametrize(
    ("page", "name"),
    [
        (INSTALL, "install-api"),
        (INSTALL, "install-wheel"),
        ("../README.md", "wheel"),
        ("../README.md", "readme-install"),
        ("../README.md", "readme-api"),
    ],
)
def test_the_pip_install_lines_name_extras_that_exist(page: str, name: str) -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    installs = [m for line in commands(name, page) if (m := PIP_INSTALL.search(line))]
    assert installs, f"no pip install of the app in {page} {name}"
    named = {extra for m in installs for extra in m["extras"].split(",")}
    assert named - set(extras) == set()


# -- the README's usage ---------------------------------------------------------------------

README = "../README.md"


def readme_settings(redis: str) -> str:
    """The README's settings, with its ``{...}`` (the project's usual cache) and its Redis
    filled in."""
    block = source("readme-settings", README)
    locmem = '"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}'
    for shown in ('"default": {...}', "redis://127.0.0.1:6379/1"):
        assert shown in block, shown
    return block.replace('"default": {...}', locmem).replace("redis://127.0.0.1:6379/1", redis)


def status_exit(project: DocProject) -> int:
    """The exit status of ``scheduler_status``: 0 once a scheduler is alive and the index
    healthy."""
    argv = project.argv("python manage.py scheduler_status")
    done = subprocess.run(
        argv, cwd=project.root, env=project.env(), capture_output=True, timeout=60
    )
    return done.returncode


@pytest.mark.subprocess
def test_the_readme_usage_runs_in_a_new_project(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """The README's usage, top to bottom: its settings, its task module, migrate, the
    schedule created and paused through the services, the index rebuilt, a scheduler."""
    redis = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    task_path, task = project_file("readme-task", README)
    app = task_path.split("/")[0]
    project = DocProject(tmp_path, key_prefix, settings=[readme_settings(redis)], apps=[app])
    doc_projects.append(project)
    project.write(task_path, task)
    run, rebuild = commands("readme-commands", README)
    assert run.startswith("python manage.py run_scheduler "), run
    assert rebuild.startswith("python manage.py rebuild_due_index "), rebuild

    project.run("python manage.py migrate")
    project.shell(source("readme-services", README))
    [(enabled, note)] = project.query(
        "SELECT enabled, pause_note FROM django_schedulinator_schedule"
    )
    assert (enabled, note) == (0, "month-end freeze")
    project.run(rebuild)
    project.start(run)
    wait_for(lambda: status_exit(project) == 0, "scheduler_status to see the scheduler")


@pytest.mark.subprocess
def test_the_readme_declaration_makes_its_schedule_at_migrate(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """The README's ``@scheduled`` above ``@task``, in an app's scheduled_tasks.py: migrate
    syncs the declared schedule into the table."""
    redis = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    project = DocProject(tmp_path, key_prefix, settings=[readme_settings(redis)], apps=["myapp"])
    doc_projects.append(project)
    project.write("myapp/scheduled_tasks.py", source("readme-scheduled", README))

    project.run("python manage.py migrate")
    rows = project.query(
        "SELECT name, task, cron, timezone, args FROM django_schedulinator_schedule"
        " WHERE declared_in != ''"
    )
    assert rows == [
        ("invoices-eu", "billing.send_invoices", "0 6 * * 1-5", "Europe/Berlin", '["eu"]')
    ]


def test_the_readme_urls_serve_the_api() -> None:
    import types

    from django.urls import resolve

    urls = types.ModuleType("readme_urls")
    exec(source("readme-urls", README), urls.__dict__)
    urls.urlpatterns = [p for p in urls.urlpatterns if p is not ...]
    assert resolve("/api/schedulinator/schema/", urlconf=urls).url_name == "schema"


def test_the_readmes_two_commands_are_the_ones_ci_runs() -> None:
    """``scripts/demo`` and ``scripts/test`` as the README writes them are what .ci/run runs
    (steps 1 and 3; tests/test_demo.py runs the demo too)."""
    ci = (ROOT / ".ci" / "run").read_text()
    for name, script in (("readme-demo", "scripts/demo"), ("readme-test", "scripts/test")):
        assert commands(name, README) == [script]
        assert os.access(ROOT / script, os.X_OK)
        assert re.search(rf"(?<![\w/.-]){script}\b", ci), f"{script} is not in .ci/run"
