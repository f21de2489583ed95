"""What the docs tell a new user, checked against what the code does: the walkthroughs run
as written in a new project (tests/support/doc_project.py), and the statements a test can keep true
(the checks table, the statuses of handed-off runs) are compared with the code."""

from __future__ import annotations

import json
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
from django_schedulinator.index.due import DueIndex

from .support.doc_examples import DOCS, blocks, source
from .support.doc_project import DocProject


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
    """The statuses of the runs now the walkthroughs queue: a schedule's own occurrence may
    fire beside one (a walkthrough started at hh:mm:59, seen in a rehearsal)."""
    sql = "SELECT status FROM django_schedulinator_run WHERE trigger = 'run_now'"
    return [status for (status,) in project.query(sql)]


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
    from .support.celery_app import BROKER
    from .support.celery_support import QUEUE, purge, worker_argv

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


@pytest.mark.django_db(transaction=True)
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
    from django_schedulinator.conf import TABLE

    pages = [p for p in sorted(DOCS.glob("*.md")) if p.name != "upgrading.md"]
    named = {
        f"{page.name}: {name}"
        for page in [*pages, DOCS.parent / "README.md"]
        for name in SETTING_NAMED.findall(page.read_text("utf-8"))
        if name not in TABLE
    }
    assert sorted(named) == []


# -- docs/settings.md's table: a row for each setting, its default and its bounds -------------

EN_DASH = "\u2013"  # of the table's ranges (1-5000 with it)
SETTING_ROW = re.compile(r"^\| `([A-Z_]+)` \| ([^|]+) \| ([^|]+) \| (.+) \|$", re.MULTILINE)


def _number(value: int) -> str:
    """A number as the table writes it: 5000, 10,000."""
    return f"{value:,}" if value >= 10_000 else str(value)


def _shown(default: Any) -> str | None:
    """A default as the table's code span shows it; None: told in words (NOTIFY's)."""
    if isinstance(default, dict) and default:
        return None
    if default is None or isinstance(default, bool):
        return repr(default)
    return json.dumps(default)


def test_the_settings_table_has_a_row_for_each_setting_with_its_default_and_bounds() -> None:
    """The descriptors of conf.Settings are the one place of each default and bound: the
    table says what they say."""
    from django_schedulinator import conf

    rows = SETTING_ROW.findall((DOCS / "settings.md").read_text("utf-8"))
    names = [name for name, *_ in rows]
    assert len(names) == len(set(names)), "a setting with two rows"
    assert sorted(names) == sorted(conf.TABLE)
    kinds = {
        conf.parse_whole_number: "int",
        conf.parse_seconds: "int or float",
        conf.parse_retention: "int, float or `None`",
        conf.parse_repeat: "int, float or `None`",
        conf.parse_text: "str",
    }
    for name, kind, default, limits in rows:
        setting = conf.TABLE[name]
        shown = _shown(setting.default)
        if shown is not None:
            assert default.startswith(f"`{shown}`"), (name, default)
        if setting.parse in kinds:
            assert kind == kinds[setting.parse], (name, kind)
        if setting.parse is conf.parse_seconds:
            assert limits.startswith("> 0"), (name, limits)
        elif setting.parse in (conf.parse_retention, conf.parse_repeat):
            low, high = setting.bounds()
            assert limits.startswith(f"{low} s to {high // 86_400:,} days"), (name, limits)
        elif setting.parse is conf.parse_whole_number:
            low, high = setting.bounds()
            assert limits.startswith(f"{low}{EN_DASH}{_number(high)}"), (name, limits)


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


def test_the_changelogs_links_land_on_pages_and_headings_that_exist() -> None:
    """CHANGELOG.md (outside the docs site, read on the forge) links each note to its page."""
    changelog = DOCS.parent / "CHANGELOG.md"
    links = re.findall(r"\]\((?!https?:)([^)#\s]+)(?:#([\w-]+))?\)", changelog.read_text("utf-8"))
    assert links
    broken = [
        f"{target}#{anchor}" if anchor else target
        for target, anchor in links
        if not (changelog.parent / target).is_file()
        or (anchor and anchor not in heading_anchors(changelog.parent / target))
    ]
    assert broken == []


def test_the_links_to_the_docs_from_code_tests_and_the_changelog_land_on_headings() -> None:
    """Messages, docstrings and comments send readers to ``docs/<page>.md#<heading>``: each
    heading exists (a page split in two keeps every anchor somewhere)."""
    sources = [
        path
        for folder in ("django_schedulinator", "tests", "benchmarks", "example_project")
        for path in sorted((ROOT / folder).rglob("*.py"))
    ] + [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    pages = {page.stem: page for page in DOCS.glob("*.md")}
    links = [
        (source_file.relative_to(ROOT), name, anchor)
        for source_file in sources
        if source_file.is_file()
        for name, anchor in re.findall(
            r"\bdocs/([\w-]+)\.md#([\w-]+)", source_file.read_text("utf-8")
        )
    ]
    assert len(links) > 10  # the search finds them
    broken = [
        f"{where}: docs/{name}.md#{anchor}"
        for where, name, anchor in links
        if name not in pages or anchor not in heading_anchors(pages[name])
    ]
    assert broken == []


def user_pages() -> list[str]:
    """The pages a user reads to set the app up and use it: Home, and the navigation's
    "Getting started" and "Guide" (mkdocs.yml)."""
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text("utf-8"))["nav"]
    found = []
    for entry in nav:
        [(title, target)] = entry.items()
        if isinstance(target, str):
            found.append(target)
        elif title in ("Getting started", "Guide"):
            found += [page for item in target for page in item.values()]
    return found


def test_the_pages_for_users_cite_no_tests() -> None:
    """Test names are evidence for contributors (docs/internals.md, docs/reliability.md's
    failure table), not steps for a user: the pages a user follows name none in their text
    (markers' reasons, HTML comments, are not shown)."""
    pages = user_pages()
    assert {"index.md", "quickstart.md", "concepts.md", "api.md"} <= set(pages)
    test_name = re.compile(r"\btests/[\w/]+\.py\b|\btest_\w+")
    shown = {page: re.sub(r"<!--.*?-->", "", (DOCS / page).read_text("utf-8"), flags=re.S)
             for page in pages}  # fmt: skip
    cited = {page: found for page, text in shown.items() if (found := test_name.findall(text))}
    assert cited == {}


# From the first instant of 2026 (a Thursday), in UTC: the first three times each expression of
# the cheat-sheet fires, worked out by hand from a calendar.
CHEAT_SHEET = {
    "* * * * *": ["2026-01-01 00:01", "2026-01-01 00:02", "2026-01-01 00:03"],
    "*/15 * * * *": ["2026-01-01 00:15", "2026-01-01 00:30", "2026-01-01 00:45"],
    "0 * * * *": ["2026-01-01 01:00", "2026-01-01 02:00", "2026-01-01 03:00"],
    "30 6 * * *": ["2026-01-01 06:30", "2026-01-02 06:30", "2026-01-03 06:30"],
    "0 9,17 * * *": ["2026-01-01 09:00", "2026-01-01 17:00", "2026-01-02 09:00"],
    "0 9 * * 1-5": ["2026-01-01 09:00", "2026-01-02 09:00", "2026-01-05 09:00"],
    "0 9-17/2 * * mon-fri": ["2026-01-01 09:00", "2026-01-01 11:00", "2026-01-01 13:00"],
    "0 0 * * 0": ["2026-01-04 00:00", "2026-01-11 00:00", "2026-01-18 00:00"],
    "0 0 1 * *": ["2026-02-01 00:00", "2026-03-01 00:00", "2026-04-01 00:00"],
    "0 0 L * *": ["2026-01-31 00:00", "2026-02-28 00:00", "2026-03-31 00:00"],
    "0 8 * * 1#1": ["2026-01-05 08:00", "2026-02-02 08:00", "2026-03-02 08:00"],
    "0 18 * * 5L": ["2026-01-30 18:00", "2026-02-27 18:00", "2026-03-27 18:00"],
    "0 12 * jan,jul *": ["2026-01-01 12:00", "2026-01-02 12:00", "2026-01-03 12:00"],
    "0 0 1 1 *": ["2027-01-01 00:00", "2028-01-01 00:00", "2029-01-01 00:00"],
    "*/10 * * * * *": ["2026-01-01 00:00:10", "2026-01-01 00:00:20", "2026-01-01 00:00:30"],
}
# The aliases the cheat-sheet names beside an expression, each the same as it.
ALIASES = {"@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *"}


def test_the_cron_cheat_sheet_fires_as_it_says() -> None:
    """Each expression of docs/concepts.md's cheat-sheet, as the app matches it (cronsim on
    the schedule's wall clock): its first three times, and its alias's."""
    from datetime import UTC, datetime
    from itertools import islice

    from django_schedulinator import timing

    page = (DOCS / "concepts.md").read_text("utf-8")
    table = page.split("| expression | fires |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \|$", table, re.M)
    assert [expression for expression, _ in rows] == list(CHEAT_SHEET)

    def fires(expression: str) -> list[str]:
        spec = timing.Timing(kind="cron", cron=expression, timezone="UTC")
        assert spec.validate() == {}, expression
        start = datetime(2026, 1, 1, tzinfo=UTC)
        shown = "%Y-%m-%d %H:%M:%S" if len(expression.split()) == 6 else "%Y-%m-%d %H:%M"
        return [m.at.strftime(shown) for m in islice(timing.occurrences(spec, start), 3)]

    for expression, _meaning in rows:
        assert fires(expression) == CHEAT_SHEET[expression], expression
    for alias, expression in ALIASES.items():
        assert f"(`{alias}`)" in dict(rows)[expression], alias
        assert fires(alias) == fires(expression), alias
    # What the page says is refused.
    assert "`0 0 31 2 *`" in page
    assert timing.Timing(kind="cron", cron="0 0 31 2 *", timezone="UTC").validate()


# -- installing before a release (README.md) ---------------------------------------------------

ROOT = DOCS.parent


@pytest.mark.subprocess
def test_the_readme_wheel_installs_by_name_and_carries_the_license(tmp_path: Path) -> None:
    """Nothing is on PyPI yet: the README builds a wheel from the clone (python -m build)
    and installs it by name from that directory. The install is offline here: no
    dependencies, into a directory of its own."""
    install_build, build, install = commands("wheel", "../README.md")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The clone itself: under the matrix the suite runs in a copy without the package
    # (scripts/tree-without-package), and tox says where the clone is.
    clone = os.environ.get("SCHEDULINATOR_CLONE") or str(ROOT)

    def run(line: str, *more: str) -> None:
        program, *words = shlex.split(line.replace("/path/to/django-schedulinator", clone))
        python = {"python": [sys.executable], "pip": [sys.executable, "-m", "pip"]}[program]
        done = subprocess.run(
            [*python, *words, *more], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"

    run(install_build)  # the test extra has it already
    run(build)
    [wheel] = (tmp_path / "dist").glob("django_schedulinator-*.whl")
    assert wheel.name.startswith(f"django_schedulinator-{django_schedulinator.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    [license_file] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    text = zipfile.ZipFile(wheel).read(license_file).decode()
    assert text == (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License\n\nCopyright (c) 2026, the django-schedulinator")

    run(install, "--no-deps", "--no-index", "--target", str(tmp_path / "site"))
    assert (tmp_path / "site" / "django_schedulinator" / "index" / "lua" / "claim.lua").is_file()


# -- the quick start (docs/quickstart.md) ------------------------------------------------------

QUICKSTART = "quickstart.md"


@pytest.mark.subprocess
def test_the_quick_start_fires_a_schedule(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """docs/quickstart.md copied top to bottom into a new project: the app made by
    ``startapp`` and named in its settings (their Redis pointed at the tests'), the task
    module, migrate (which warns of nothing), the schedule pasted into the shell, and the
    scheduler, which runs the task with its occurrence and logs what the page shows."""
    redis = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    settings = source("quickstart-settings", QUICKSTART)
    assert "redis://127.0.0.1:6379/1" in settings
    # The project as step 3 finds it (its settings not yet the page's), where startapp
    # makes the app; then step 4's settings, which name it.
    [startapp] = commands("quickstart-startapp", QUICKSTART)
    DocProject(tmp_path, key_prefix, settings=[], apps=[]).run(startapp)
    project = DocProject(
        tmp_path, key_prefix, settings=[settings.replace("redis://127.0.0.1:6379/1", redis)],
        apps=[],  # the page's startapp made it, and its settings name it
    )  # fmt: skip
    doc_projects.append(project)
    task_path, task = project_file("quickstart-task", QUICKSTART)
    assert (tmp_path / task_path).parent.joinpath("apps.py").is_file()  # the app startapp made
    project.write(task_path, task)
    [migrate] = commands("quickstart-migrate", QUICKSTART)
    [run] = commands("quickstart-run", QUICKSTART)

    printed, told = project.run_told(migrate)
    assert "Applying django_schedulinator.0001" in printed, printed
    assert "WARNING" not in told, told  # the page: "It warns of nothing"
    assert "schedulinator.W" not in told, told
    project.shell(source("quickstart-schedule", QUICKSTART))
    scheduler = project.start(run)
    wait_for(lambda: run_statuses(project) == ["succeeded"], "the run now to succeed")
    scheduler.terminate()
    scheduler.wait(timeout=60)
    assert scheduler.stdout is not None
    output = scheduler.stdout.read()
    assert re.search(r"hello, world \(\d+:\d+\)", output), output
    # The line the page shows is one of these, its key an example.
    [shown] = [b.text for b in blocks(QUICKSTART) if b.lang == "text"]
    assert re.fullmatch(r"hello, world \(\d+:\d+\)", shown.strip()), shown


# -- every block a user would copy is run by a test ------------------------------------------

# What a block in `text` shows is output (or a picture), nothing to copy. Every other block is
# run by a test (`<!-- example: NAME -->`, NAME cited by a test) or says why it is not
# (`<!-- not run: REASON -->`, rare). Blocks left to cover would be counted here, by page,
# while a test for them is written: none are.
NOT_YET_RUN: dict[str, int] = {}
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
        ("migrating-from-celery-beat.md", "migrate-install"),
        ("sentry.md", "sentry-install"),
        ("api.md", "api-install"),
        ("metrics.md", "metrics-install"),
        ("dispatch.md", "tasks-install"),
        (QUICKSTART, "quickstart-install"),
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


def test_the_install_page_lists_every_extra() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    table = (DOCS / "install.md").read_text("utf-8").split("| extra | adds |", 1)[1]
    rows = table.split("\n\n", 1)[0]
    listed = {name for cell in re.findall(r"^\| ([^|]+) \|", rows, re.M)
              for name in re.findall(r"`([\w-]+)`", cell)}  # fmt: skip
    assert listed == set(extras)


def test_the_home_page_names_every_command_and_dispatcher() -> None:
    home = (DOCS / "index.md").read_text("utf-8")
    commands = re.findall(r"^## `(\w+)`", (DOCS / "commands.md").read_text("utf-8"), re.M)
    assert len(commands) > 5
    assert [c for c in commands if f"`{c}`" not in home] == []
    for dispatcher in ("inline", "Celery", "RQ", "Django's tasks", "webhooks"):
        assert dispatcher in home, dispatcher


# -- the README's usage ---------------------------------------------------------------------

README = "../README.md"
API_PAGE = "api.md"


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


@pytest.mark.parametrize(("page", "name"), [(README, "readme-urls"), (API_PAGE, "api-urls")])
def test_the_urls_modules_serve_the_api(page: str, name: str) -> None:
    import types

    from django.urls import resolve

    urls = types.ModuleType("doc_urls")
    exec(source(name, page), urls.__dict__)
    urls.urlpatterns = [p for p in urls.urlpatterns if p is not ...]
    assert resolve("/api/schedulinator/schema/", urlconf=urls).url_name == "schema"


def test_the_readmes_two_commands_are_the_ones_ci_runs() -> None:
    """``scripts/demo`` and ``scripts/test`` as the README writes them are what CI runs
    (tests/test_demo.py runs the demo too)."""
    # .ci/run, and the tox or nox file it may run the suite through.
    ci = "\n".join(
        path.read_text() for path in (ROOT / ".ci" / "run", ROOT / "tox.ini", ROOT / "noxfile.py")
        if path.is_file()
    )  # fmt: skip
    for name, script in (("readme-demo", "scripts/demo"), ("readme-test", "scripts/test")):
        assert commands(name, README) == [script]
        assert os.access(ROOT / script, os.X_OK)
        assert re.search(rf"(?<![\w/.-]){script}\b", ci), f"CI does not run {script}"


def test_the_readmes_matrix_commands_name_what_tox_ini_has_and_ci_runs() -> None:
    """The matrix as the README runs it: CI runs ``scripts/test --matrix``, and the one
    environment it names is one of tox.ini's (tests/test_packaging.py holds tox.ini to the
    classifiers; CI runs every environment)."""
    every, one = (line.split("#")[0].strip() for line in commands("readme-matrix", README))
    assert every == "scripts/test --matrix"
    assert "scripts/test --matrix" in (ROOT / ".ci" / "run").read_text()
    environment = shlex.split(one)[shlex.split(one).index("-e") + 1]
    env_list = re.search(r"^env_list =\n((?:[ \t]+\S+\n)+)", (ROOT / "tox.ini").read_text(), re.M)
    assert env_list is not None
    assert environment in env_list[1].split()


# -- settings snippets: what the app's own validation (checks E001 and W001) says of them ------

SETTINGS_SNIPPETS = [
    ("settings.md", "settings-prefix"),
    ("settings.md", "settings-redis"),
    ("settings.md", "settings-api-permissions"),
    ("schedules-in-code.md", "schedules-setting"),
    ("alerts.md", "notify-custom-setting"),
    ("alerts.md", "notify-rate-setting"),
    ("settings.md", "notify-repeat-setting"),
    ("migrating-from-celery-beat.md", "migrate-settings"),
]


@pytest.mark.parametrize(("page", "name"), SETTINGS_SNIPPETS)
def test_the_settings_snippets_are_valid_settings(page: str, name: str, settings: Any) -> None:
    """Each ``SCHEDULINATOR = {...}`` of the block (one block may show several), as the
    system checks validate it: no invalid value (E001), no unknown key (W001). What a value
    names in the project (a task, a class, a cache alias) is the project's."""
    import ast

    from django_schedulinator.conf import app_settings

    values = [
        node.value
        for node in ast.parse(source(name, page)).body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "SCHEDULINATOR"
    ]
    assert values, f"no SCHEDULINATOR in {page} {name}"
    for value in values:
        settings.SCHEDULINATOR = eval(compile(ast.Expression(value), page, "eval"), {})
        assert [str(p) for p in app_settings.validate()] == []
        assert app_settings.unknown_keys() == []


# -- command lines: the commands and options they name exist ----------------------------------

# Blocks of `python manage.py ...` lines. A line with placeholders (`[--dry-run]`, `NAME`) is
# a synopsis: the options it names exist. Any other line is parsed by its command's parser.
COMMAND_LINES = [
    ("commands.md", "synopsis-run_scheduler"),
    ("commands.md", "synopsis-rebuild_due_index"),
    ("commands.md", "synopsis-scheduler_status"),
    ("commands.md", "synopsis-prune_runs"),
    ("commands.md", "synopsis-partition_runs"),
    ("commands.md", "synopsis-schedule"),
    ("commands.md", "synopsis-sync_schedules"),
    ("commands.md", "synopsis-import_schedules"),
    ("commands.md", "synopsis-fill_calendars"),
    ("schedules-in-code.md", "sync-synopsis"),
    ("upgrading.md", "upgrade-migrate"),
    ("upgrading.md", "upgrade-rebuild"),
    ("upgrading.md", "restore-rebuild"),
    ("upgrading.md", "lost-redis-rebuild"),
    ("migrating-from-celery-beat.md", "import-tables"),
    ("migrating-from-celery-beat.md", "import-setting"),
    ("migrating-from-celery-beat.md", "migrate-run"),
    ("migrating-from-celery-beat.md", "import-crontab"),
    ("operations.md", "ops-status-synopsis"),
    ("operations.md", "ops-status-jq"),
    ("operations.md", "ops-status-cron"),
    ("operations.md", "ops-cronjob"),
    ("metrics.md", "metrics-deployment"),
]
PLACEHOLDER = re.compile(r"\[|\.\.\.|\b[A-Z]{2,}\b")


def command_parsers(name: str) -> dict[str | None, Any]:
    """The parser of command ``name`` (key None), and of each of its subcommands."""
    import argparse

    from django.core.management import get_commands, load_command_class

    parser = load_command_class(get_commands()[name], name).create_parser("manage.py", name)
    found: dict[str | None, Any] = {None: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def long_options(parser: Any) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings if o.startswith("--")}


def command_lines(page: str, name: str) -> list[str]:
    """The ``python manage.py`` command lines of a block: in a shell block, each line (one
    continued on an indented line joined to it) up to a pipe, a redirection or a comment;
    in a YAML block, each ``command`` list of a container."""
    text = source(name, page)
    if next(b for b in blocks(page) if b.what == name).lang == "yaml":
        import yaml

        found: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                command = node.get("command")
                if isinstance(command, list) and command[:2] == ["python", "manage.py"]:
                    found.append(shlex.join(command))
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        for document in yaml.safe_load_all(text):
            walk(document)
        return found
    text = re.sub(r"\n[ \t]+(?=\[)", " ", text)
    lines = []
    for line in text.splitlines():
        start = line.find("python manage.py ")
        if start >= 0:
            lines.append(re.split(r"\s(?:#|\||\|\||&&|>|2>&1)\s", line[start:] + " ")[0].strip())
    return lines


@pytest.mark.parametrize(("page", "name"), COMMAND_LINES)
def test_the_command_lines_name_commands_and_options_that_exist(page: str, name: str) -> None:
    assert command_lines(page, name), f"no command line in {page} {name}"
    for line in command_lines(page, name):
        words = shlex.split(line)
        assert words[:2] == ["python", "manage.py"], line
        parsers = command_parsers(words[2])
        sub = words[3] if len(words) > 3 and words[3] in parsers else None
        parser = parsers[sub]
        if PLACEHOLDER.search(line):
            named = set(re.findall(r"--[\w-]+", line))
            assert named - long_options(parser) == set(), line
        else:
            parser.parse_args(words[3:])  # exits (SystemExit) on what it does not take


def test_the_commands_page_has_every_option_of_every_command() -> None:
    """docs/commands.md's synopses, together, name every option and subcommand of each
    command (Django's own options, which every command has, left out)."""
    from django.core.management import BaseCommand

    django_own = long_options(BaseCommand().create_parser("manage.py", "any"))
    shown: dict[tuple[str, str | None], set[str]] = {}
    for page, name in COMMAND_LINES:
        if page != "commands.md":
            continue
        for line in command_lines(page, name):
            words = line.split()
            sub = words[3] if len(words) > 3 and words[3] in command_parsers(words[2]) else None
            shown.setdefault((words[2], sub), set()).update(re.findall(r"--[\w-]+", line))
    missing = {}
    for command in {command for command, _ in shown}:
        for sub, parser in command_parsers(command).items():
            if sub is None and len(command_parsers(command)) > 1:
                continue  # the subcommands' own options are what count
            lacking = long_options(parser) - django_own - shown.get((command, sub), set())
            if lacking or (command, sub) not in shown:
                missing[f"{command} {sub or ''}".strip()] = sorted(lacking)
    assert missing == {}


# -- docs/scheduling.md's calls, in one session --------------------------------------------

SCHEDULING = "scheduling.md"


@pytest.fixture
def page_tasks() -> Iterator[None]:
    """The tasks the page's schedules name, registered for the test (and only for it)."""
    from django_schedulinator import registry

    names = ["billing.send_invoices", "feeds.poll", "garden.lights_on"]
    for name in names:
        registry.register(lambda *args, **kwargs: None, name=name)
    yield
    for name in names:
        registry._tasks.pop(name)


@pytest.mark.django_db
@pytest.mark.usefixtures("page_tasks")
def test_the_scheduling_pages_calls_run_in_one_session(
    built_index: DueIndex, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's blocks pasted one after the other into ``manage.py shell``, where the
    names the page takes as given are: ``services``, ``timedelta``, ``schedule`` (the cron
    schedule of the first block) and a ``start`` and ``end`` in the past."""
    from datetime import timedelta

    from django.utils import timezone

    from django_schedulinator import services

    session: dict[str, Any] = {"services": services, "timedelta": timedelta}

    def paste(name: str) -> None:
        exec(compile(source(name, SCHEDULING), f"docs/{SCHEDULING} {name}", "exec"), session)

    paste("scheduling-cron")
    paste("scheduling-cron-union")
    paste("scheduling-interval")
    paste("scheduling-solar")
    paste("scheduling-calendar")
    from django_schedulinator.models import Run, Schedule

    payroll = Schedule.objects.get(name="payroll")
    assert payroll.description.endswith(
        "; on a day excluded by uk-holidays, moved to the next business day"
    )
    assert payroll.timing_spec.calendar is not None
    assert len(payroll.timing_spec.calendar.spans) >= 90  # 8 or more a year, 12 years

    assert Schedule.objects.get(name="reports").description == (
        "At 09:00, Monday through Friday; and at 12:00, only on Saturday (Europe/Berlin)"
    )

    assert Schedule.objects.get(name="poll").interval == timedelta(minutes=10)
    lights = Schedule.objects.get(name="lights-on")
    assert lights.description == "Sunset at 52.52, 13.405, -15 min"
    assert lights.next_run_at is not None
    assert lights.next_run_at - timezone.now() < timedelta(days=1)
    session["schedule"] = schedule = Schedule.objects.get(name="invoices")
    paste("scheduling-pause")
    schedule.refresh_from_db()
    assert schedule.enabled
    paste("scheduling-run-now")
    assert Run.objects.filter(schedule=schedule, trigger="run_now").count() == 2
    session["end"] = timezone.now() - timedelta(minutes=1)
    session["start"] = session["end"] - timedelta(days=7)
    paste("scheduling-backfill")
    assert session["report"].occurrences == 5  # a week of weekdays at 06:00
    paste("scheduling-preview")
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 5
    # The comment of the block is what the expression gives.
    comment = re.search(r'# "(.*)"', source("scheduling-preview", SCHEDULING))
    assert comment is not None
    assert schedule.description == comment[1]


# -- a signal receiver (docs/signals.md) -----------------------------------------------------


@pytest.mark.django_db(transaction=True)  # signals are sent after real commits
def test_the_signals_pages_receiver_takes_what_run_finished_sends(built_index: DueIndex) -> None:
    """The page's receiver, connected as it is written, called by a real run's end: it
    accepts the arguments the signal is sent with (a receiver that raised would only be
    logged, so the call is watched)."""
    from django_schedulinator import resync_schedules, signals
    from django_schedulinator.scheduler.worker import Worker

    from .support.schedules import make_due

    namespace: dict[str, Any] = {}
    exec(source("signals-receiver", "signals.md"), namespace)
    receiver = namespace["count_failures"]
    calls: list[str] = []

    def watched(sender: Any, **kwargs: Any) -> None:
        receiver(sender, **kwargs)  # raises here, into the test, if it does not fit
        calls.append(kwargs["status"])

    assert signals.run_finished.disconnect(receiver)  # connected by its @receiver
    signals.run_finished.connect(watched, weak=False)
    try:
        ids = make_due(1, task="tests.boom")
        resync_schedules(ids)
        Worker(once=True, worker_id="docs").run()
    finally:
        signals.run_finished.disconnect(watched)
    assert calls == ["failed"]


# -- bulk writes, then resync_schedules (docs/upgrading.md) -----------------------------------


@pytest.mark.django_db(transaction=True)  # on_commit runs at a real commit
def test_the_upgrade_pages_resync_puts_bulk_written_rows_in_the_index(
    built_index: DueIndex,
) -> None:
    """Rows written with ``bulk_create`` (no signals) are not in the index until the page's
    two lines resync them: ``ids`` a list, ``queryset`` a QuerySet."""
    from django.db import transaction

    from django_schedulinator.models import Schedule

    from .support.schedules import make_due

    ids = make_due(2)
    assert built_index.scores(ids) == {ids[0]: None, ids[1]: None}
    with transaction.atomic():
        exec(
            source("bulk-resync", "upgrading.md"),
            {"ids": ids[:1], "queryset": Schedule.objects.filter(pk=ids[1])},
        )
        assert built_index.scores(ids) == {ids[0]: None, ids[1]: None}  # not before the commit
    assert None not in built_index.scores(ids).values()


# -- @scheduled (docs/schedules-in-code.md) ----------------------------------------------------


@pytest.mark.subprocess
def test_the_scheduled_module_declares_its_two_schedules_at_migrate(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """The page's module, two ``@scheduled`` above one ``@task``: migrate syncs both."""
    redis = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    path, module = project_file("scheduled-module", "schedules-in-code.md")
    project = DocProject(
        tmp_path, key_prefix, settings=[readme_settings(redis)], apps=[path.split("/")[0]]
    )
    doc_projects.append(project)
    project.write(path, module)

    project.run("python manage.py migrate")
    rows = project.query(
        "SELECT name, kind, cron, timezone, interval, kwargs FROM django_schedulinator_schedule"
        " WHERE declared_in != '' ORDER BY name"
    )
    assert [row[:4] for row in rows] == [
        ("nightly-report", "cron", "0 3 * * *", "Europe/Paris"),
        ("report-every-ten-minutes", "interval", "", rows[1][3]),
    ]
    assert rows[1][5] == '{"quick": true}'


# -- the JSON bodies the pages show, against what the code sends -------------------------------


def test_the_webhook_body_is_what_the_webhook_dispatcher_posts() -> None:
    """docs/dispatch.md's body of a POST, rebuilt from its own values by the dispatcher."""
    import json
    from datetime import datetime

    from django_schedulinator.dispatch import Occurrence
    from django_schedulinator.dispatch.webhook import body_of

    shown = json.loads(source("webhook-body"))
    occurrence = Occurrence(
        key=shown["key"], run_id=1, schedule_id=shown["schedule_id"],
        schedule_name=shown["schedule"], task=shown["task"],
        scheduled_for=datetime.fromisoformat(shown["scheduled_for"]),
        attempt=shown["attempt"], args=shown["args"], kwargs=shown["kwargs"],
    )  # fmt: skip
    assert json.loads(body_of(occurrence)) == shown


def test_the_alert_body_is_what_the_webhook_notifier_sends() -> None:
    """docs/alerts.md's body of a missed-run alert, rebuilt from its own values (its text
    is shown up to "...")."""
    import json
    from datetime import datetime, timedelta

    from django_schedulinator.operations.events import Event

    shown = json.loads(source("alert-body", "alerts.md"))
    event = Event(
        kind=shown["type"].removeprefix("alert."),
        noticed_at=datetime.fromisoformat(shown["noticed_at"]),
        schedule_id=shown["schedule_id"], schedule_name=shown["schedule"],
        timezone=shown["timezone"], scheduled_for=datetime.fromisoformat(shown["scheduled_for"]),
        run_id=shown["run_id"], reason=shown["reason"], role=shown["role"],
        grace=timedelta(seconds=shown["grace_seconds"]), admin_url=shown["admin_url"],
    )  # fmt: skip
    sent = event.as_dict()
    text, shown_text = sent.pop("text"), shown.pop("text")
    assert sent == shown
    assert shown_text.endswith(" ...")
    assert text.startswith(shown_text.removesuffix(" ..."))


def test_the_digest_body_is_what_the_webhook_notifier_sends() -> None:
    """docs/alerts.md's body of a digest, rebuilt from its own values."""
    import json
    from datetime import datetime, timedelta

    from django_schedulinator.operations.events import Event

    shown = json.loads(source("alert-digest-body", "alerts.md"))
    listed = tuple(
        Event(
            kind="missed",
            noticed_at=datetime.fromisoformat(m["noticed_at"]),
            schedule_id=m["schedule_id"],
            schedule_name=m["schedule"],
            timezone=m["timezone"],
            scheduled_for=datetime.fromisoformat(m["scheduled_for"]),
            run_id=m["run_id"],
            reason=m["reason"],
            grace=timedelta(seconds=m["grace_seconds"]),
            role=m["role"],
        )
        for m in shown["listed"]
    )
    digest = Event(
        "digest", datetime.fromisoformat(shown["noticed_at"]), listed=listed, count=len(listed)
    )
    sent = digest.as_dict()
    text, shown_text = sent.pop("text"), shown.pop("text")
    assert sent == shown
    assert shown_text.endswith(" ...")
    assert text.startswith(shown_text.removesuffix(" ..."))


# -- Sentry Crons set up as docs/sentry.md says -----------------------------------------------


@pytest.mark.subprocess
def test_the_sentry_page_sends_the_check_ins_of_a_run(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject], monkeypatch: Any
) -> None:
    """sentry.md's ``sentry_sdk.init`` (its DSN a local ingest endpoint) and setting, in the
    settings of a new project: a schedule its patterns select checks in when its run starts
    and when it ends."""
    from .support.sentry_receiver import sentry_receiver

    redis = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    with sentry_receiver() as receiver:
        monkeypatch.setenv("SENTRY_DSN", receiver.dsn)
        project = DocProject(
            tmp_path, key_prefix,
            settings=[
                readme_settings(redis), source("sentry-init", "sentry.md"),
                source("sentry-setting", "sentry.md"),
            ],
            apps=["reports"],
        )  # fmt: skip
        doc_projects.append(project)
        project.write(*project_file("quickstart-task", QUICKSTART))
        project.run("python manage.py migrate")
        project.shell(
            "from django_schedulinator import services\n"
            "schedule = services.create({'name': 'reports-daily', 'task': 'reports.say_hello',"
            " 'args': ['sentry'], 'kind': 'cron', 'cron': '0 6 * * *'})\n"
            "services.run_now(schedule)"
        )
        project.start("python manage.py run_scheduler")
        wait_for(lambda: len(receiver.check_ins()) >= 2, "the check-ins")
        statuses = [c["status"] for c in receiver.check_ins()]
        assert statuses[:2] == ["in_progress", "ok"], statuses
        assert {c["environment"] for c in receiver.check_ins()} == {"production"}


def test_the_migration_guides_celery_hook_is_the_one_the_celery_walkthrough_runs() -> None:
    """docs/migrating-from-celery-beat.md's lines in celery.py are docs/dispatch.md's (which
    test_the_celery_walkthrough_runs_a_schedule_on_a_real_celery_worker runs), comments
    aside."""

    def code(text: str) -> list[str]:
        return [line.split("  #")[0] for line in text.splitlines()]

    migrating = source("migrate-celery-hook", "migrating-from-celery-beat.md")
    assert code(migrating) == code(source("celery-hook"))


# -- the benchmarks' command lines (docs/benchmarks.md) ---------------------------------------

BENCHMARK_LINES = [
    "bench-run", "bench-suite", "bench-dispatchers", "bench-rebuild", "bench-api",
    "bench-steady", "bench-prune", "bench-partitions", "bench-calendars", "bench-failover",
]  # fmt: skip
# Runs a benchmark module as `python -m` does, up to its arguments' parse: exit 0 when they
# parse, argparse's exit 2 (with its message) when not. Nothing is measured.
PARSE_ONLY = """\
import argparse, runpy, sys
real = argparse.ArgumentParser.parse_args
def parse(self, args=None, namespace=None):
    real(self, args, namespace)
    print("parsed")
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("name", BENCHMARK_LINES)
def test_the_benchmark_lines_run_modules_that_take_their_arguments(name: str) -> None:
    """Each ``.venv/bin/python -m benchmarks.X ...`` line of the page, its arguments parsed
    by the module's own parser (.ci/run runs every benchmark's smoke for real); the page's
    ``pip install`` names extras that exist."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for line in commands(name, "benchmarks.md"):
        words = shlex.split(line, comments=True)
        if words[0] == ".venv/bin/pip":
            named = re.fullmatch(r"\.\[([\w,-]+)\]", words[-1])
            assert named is not None, line
            assert set(named[1].split(",")) - set(extras) == set(), line
            continue
        assert words[:3] == [".venv/bin/python", "-m", words[2]], line
        assert words[2].startswith("benchmarks."), line
        done = subprocess.run(
            [sys.executable, "-c", PARSE_ONLY, *words[2:]], cwd=ROOT, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert (done.returncode, done.stdout.strip()[-6:]) == (0, "parsed"), (
            f"{line}\n{done.stdout}\n{done.stderr}"
        )


# -- docs/metrics.md's Prometheus and Kubernetes configurations ------------------------------


def metrics_yaml(name: str) -> Any:
    import yaml

    return yaml.safe_load(source(name, "metrics.md"))


def test_the_alert_rules_query_metrics_the_schedulers_expose() -> None:
    """Every metric the rules (and their comments) name is in the page's table of metrics,
    which tests/test_metrics.py holds to what a scheduler exposes; the labels they group by
    are the metric's; the job is the scrape config's."""
    page = (DOCS / "metrics.md").read_text("utf-8")
    table = dict(re.findall(r"^\| `(schedulinator_\w+)` \|[^|]*\|([^|]*)\|", page, re.M))
    rules = metrics_yaml("metrics-alerts")["groups"][0]["rules"]
    text = source("metrics-alerts", "metrics.md")
    named = set(re.findall(r"\bschedulinator_\w+", text)) - {"schedulinator"}
    assert len(named) >= 5
    for metric in named:
        base = re.sub(r"_(bucket|count|sum)$", "", metric)
        assert base in table, metric
    for rule in rules:
        for labels, metric in re.findall(
            r"by \(([\w, ]+)\) \(\w*\(?(schedulinator_\w+)", rule["expr"]
        ):
            base = re.sub(r"_(bucket|count|sum)$", "", metric)
            for label in labels.replace(" ", "").split(","):
                assert label == "le" or f"`{label}`" in table[base], (rule["alert"], label)
    [job] = metrics_yaml("metrics-scrape")["scrape_configs"]
    assert f'up{{job="{job["job_name"]}"}}' in text


def test_the_kubernetes_manifests_agree_with_the_command_line() -> None:
    """The Deployment serves metrics and both probes where its command says (the command
    itself is parsed by test_the_command_lines_name_commands_and_options_that_exist), with
    the annotations and the PodMonitor pointing at the same port and path."""
    deployment = metrics_yaml("metrics-deployment")
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    command = container["command"]
    port = int(command[command.index("--metrics-port") + 1])
    [named_port] = container["ports"]
    assert named_port["containerPort"] == port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": named_port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": named_port["name"]}
    annotations = pod["metadata"]["annotations"]
    assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == (
        str(port),
        "/metrics",
    )
    monitor = metrics_yaml("metrics-podmonitor")["spec"]
    assert monitor["selector"]["matchLabels"] == pod["metadata"]["labels"]
    [endpoint] = monitor["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == (named_port["name"], "/metrics")


# -- the Python blocks of concepts, reliability, upgrading and dispatch, pasted into a shell ----


def paste(page: str, name: str, **given: Any) -> dict[str, Any]:
    """Run a block as ``manage.py shell`` would, with the names the page takes as given."""
    session = dict(given)
    exec(compile(source(name, page), f"docs/{page} {name}", "exec"), session)
    return session


@pytest.mark.django_db
@pytest.mark.usefixtures("page_tasks")
def test_the_write_path_tour_runs(built_index: DueIndex) -> None:
    """docs/concepts.md's tour of the services, one call after the other, a person's
    ``request`` at hand (as in a view) and a week in the past to backfill."""
    from datetime import timedelta
    from types import SimpleNamespace

    from django.contrib.auth.models import User
    from django.utils import timezone

    from django_schedulinator.models import Schedule, ScheduleChange

    end = timezone.now() - timedelta(minutes=1)
    request = SimpleNamespace(user=User.objects.create(username="ops"))
    session = paste(
        "concepts.md", "concepts-services", request=request, start=end - timedelta(days=7), end=end
    )
    assert session["report"].dry_run
    assert session["run"].trigger == "run_now"
    assert not Schedule.objects.filter(name="invoices").exists()
    actions = list(ScheduleChange.objects.order_by("id").values_list("action", flat=True))
    assert actions[:4] == ["created", "changed", "paused", "resumed"]
    assert actions[-1] == "deleted"
    assert ScheduleChange.objects.get(action="paused").actor == request.user


@pytest.mark.django_db(transaction=True)  # on_commit runs at a real commit
def test_the_bulk_update_of_concepts_takes_its_rows_out_of_the_index(
    built_index: DueIndex,
) -> None:
    from .support.schedules import make_schedule

    reports = [make_schedule(f"report-{n}") for n in range(2)]
    other = make_schedule("invoices")
    ids = [s.pk for s in [*reports, other]]
    assert None not in built_index.scores(ids).values()
    paste("concepts.md", "concepts-bulk-update")
    scores = built_index.scores(ids)
    assert (scores[reports[0].pk], scores[reports[1].pk]) == (None, None)
    assert scores[other.pk] is not None


@pytest.mark.django_db(transaction=True)
def test_the_bulk_create_of_concepts_indexes_its_rows(built_index: DueIndex) -> None:
    from datetime import timedelta

    from django_schedulinator import resync_schedules
    from django_schedulinator.models import Schedule

    rows = [
        Schedule(
            name=f"bulk-{n}", task="tests.record", kind="interval", interval=timedelta(hours=1)
        )
        for n in range(3)
    ]
    session = paste(
        "concepts.md", "concepts-bulk-create",
        rows=rows, Schedule=Schedule, resync_schedules=resync_schedules,
    )  # fmt: skip
    ids = [row.pk for row in session["created"]]
    assert len(ids) == 3
    assert None not in built_index.scores(ids).values()


@pytest.mark.django_db
def test_the_reliability_pages_reconcile_and_drift_check_run(built_index: DueIndex) -> None:
    from .support.schedules import make_schedule

    make_schedule()
    report = paste("reliability.md", "reliability-reconcile")["report"]
    assert report.caught_up
    session = paste("reliability.md", "reliability-drift")
    drift = session["report"]
    assert drift.ok
    assert drift.late_or_missing == []
    assert "schedules to index" in drift.summary()


@pytest.mark.django_db
def test_the_upgrade_pages_loop_finds_the_command_args_the_setting_refuses(
    settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows saved before the allow-list (written here around the services) that it now
    refuses are printed, with the reason."""
    from datetime import timedelta

    from django_schedulinator.management.task import NAME
    from django_schedulinator.models import Schedule

    from .support.doc_examples import example

    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "COMMANDS": example("clearsessions", "schedules-in-code.md")["SCHEDULINATOR"]["COMMANDS"],
    }
    Schedule.objects.bulk_create(
        [
            Schedule(name=name, task=NAME, args=args, kind="interval", interval=timedelta(hours=1))
            for name, args in (("fine", ["clearsessions"]), ("dump", ["dumpdata", "sessions"]))
        ]
    )
    paste("upgrading.md", "upgrade-command-args")
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1
    assert printed[0].startswith("dump 'sessions' is not an argument")


@pytest.mark.django_db(transaction=True)
def test_the_workers_reports_by_key_end_a_handed_off_run(
    settings: Any, built_index: DueIndex
) -> None:
    """docs/dispatch.md's three reports, as a worker sends them for a run handed off to it:
    the start, the end (the last, a failure, comes after the end and changes nothing)."""
    from .test_outcomes import REPORTING, handed_off

    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": {"queue": REPORTING}}
    _schedule, run = handed_off()
    assert run.status == "dispatched"
    paste("dispatch.md", "outcomes-report", key=run.idempotency_key, traceback_text="Traceback")
    run.refresh_from_db()
    assert run.status == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_a_receiver_verifies_the_webhook_as_the_page_shows(
    settings: Any, built_index: DueIndex
) -> None:
    """docs/dispatch.md's verification, with the Standard Webhooks library, of the request
    the configuration of the page's webhook dispatcher sends: its raw body and headers."""
    import threading
    from datetime import timedelta
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from types import SimpleNamespace

    from django.utils import timezone

    from django_schedulinator import resync_schedules
    from django_schedulinator.models import Schedule
    from django_schedulinator.scheduler.worker import Worker
    from django_schedulinator.timing import truncate_ms

    from .support.doc_examples import example

    received: list[SimpleNamespace] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            received.append(SimpleNamespace(body=body, headers=dict(self.headers.items())))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = example("webhook")["SCHEDULINATOR"]
        target = config["DISPATCHERS"]["partners"]["OPTIONS"]["TARGETS"]["billing"]
        target["URL"] = f"http://127.0.0.1:{server.server_port}/hook"
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **config}
        schedule = example("webhook-schedule")["schedule"]
        Schedule.objects.filter(pk=schedule.pk).update(
            fired_through=None,
            next_run_at=truncate_ms(timezone.now() - timedelta(seconds=5)),
            due_at=None,
        )
        resync_schedules([schedule.pk])
        worker = Worker(worker_id="docs")
        worker.step()
        worker.close()
    finally:
        server.shutdown()
        server.server_close()

    [request] = received
    payload = paste("dispatch.md", "webhook-verify", secret=target["SECRET"], request=request)[
        "payload"
    ]
    assert payload["schedule"] == "invoice run"
    from standardwebhooks.webhooks import WebhookVerificationError

    forged = SimpleNamespace(
        body=request.body.replace(b"invoice", b"Invoice"), headers=request.headers
    )
    with pytest.raises(WebhookVerificationError):
        paste("dispatch.md", "webhook-verify", secret=target["SECRET"], request=forged)


@pytest.mark.django_db(transaction=True)  # the readiness check reads on a connection of its own
def test_the_probe_bodies_have_the_fields_the_page_shows(built_index: DueIndex) -> None:
    """docs/metrics.md's ``/healthz`` body of a loop backing off, and ``/readyz`` body: the
    fields the probes answer with, and the status the page's example says."""
    import json

    from django_schedulinator.operations.probes import Readiness, health
    from django_schedulinator.scheduler.worker import Worker

    shown_health = json.loads(source("healthz-body", "metrics.md"))
    shown_ready = json.loads(source("readyz-body", "metrics.md"))
    worker = Worker(worker_id=shown_health["worker_id"])
    try:
        worker.last_error = shown_health["last_error"]
        live, body = health(worker, since=time.monotonic())
        assert live
        assert body["status"] == shown_health["status"]
        assert set(body) == set(shown_health)
        _ready, body = Readiness(worker)()
        assert set(body) == set(shown_ready)
        assert (body["database"], body["redis"]) == ("ok", "ok")
    finally:
        worker.close()


# -- docs/api.md's curl session, against the API of a project ---------------------------------

SERVER = "http://127.0.0.1:8000"


class Curl:
    """One ``curl`` command line of the page: what it sends, and the answer a ``# {...}``
    (or ``# Header: value``) comment right after it shows."""

    def __init__(self, line: str, shown: str = "") -> None:
        self.line, self.shown = line, shown
        words = shlex.split(line.split(" | ")[0])
        assert words[0] == "curl", line
        self.user, self.method, self.data = "", "", ""
        self.headers: dict[str, str] = {}
        self.url = ""
        rest = iter(words[1:])
        for word in rest:
            if word == "-u":
                self.user = next(rest)
            elif word == "-H":
                name, _, value = next(rest).partition(": ")
                self.headers[name] = value
            elif word == "-d":
                self.data = next(rest)
            elif word == "-X":
                self.method = next(rest)
            elif word == "-o":
                next(rest)  # where the answer is saved
            elif word == "-si":
                pass  # the answer's headers too
            else:
                assert word.startswith(SERVER), (word, line)
                self.url = word
        self.method = self.method or ("POST" if self.data else "GET")

    def send(self, client: Any, ids: dict[str, str]) -> Any:
        """Send it with the test's client, the page's ids and keys replaced by ``ids``."""
        import base64

        url, data = self.url.removeprefix(SERVER), self.data
        for shown, real in ids.items():
            url, data = url.replace(shown, real), data.replace(shown, real)
        credentials = base64.b64encode(self.user.encode()).decode()
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in self.headers.items()}
        extra.pop("HTTP_CONTENT_TYPE", None)
        return client.generic(
            self.method, url, data, content_type=self.headers.get("Content-Type", ""),
            HTTP_AUTHORIZATION=f"Basic {credentials}", **extra,
        )  # fmt: skip


def open_quote(line: str) -> bool:
    try:
        shlex.split(line, comments=True)
    except ValueError:
        return True
    return False


def curls(name: str) -> list[Curl]:
    text = source(name, API_PAGE).replace("\\\n", " ")
    found: list[Curl] = []
    lines: list[str] = []
    for part in text.splitlines():
        # A quoted argument (a JSON body) may go on over lines.
        lines[-1:] = (
            [f"{lines[-1]} {part.strip()}"]
            if lines and open_quote(lines[-1])
            else [*lines[-1:], part]
        )
    for line in lines:
        if line.startswith("curl "):
            found.append(Curl(line))
        elif (
            line.startswith("# ")
            and found
            and not found[-1].shown
            and (line.startswith("# {") or re.match(r"# [\w-]+: ", line))
        ):
            found[-1].shown = line[2:]
    return found


def answer(name: str) -> Any:
    import json

    return json.loads(source(name, API_PAGE))


def same_fields(got: Any, shown: Any) -> None:
    """``got`` has the fields ``shown`` has (a ``"..."`` stands for more of them)."""
    if isinstance(shown, dict):
        assert isinstance(got, dict), got
        listed = {k for k in shown if k != "..."}
        assert listed <= set(got), sorted(listed - set(got))
        if "..." not in shown:
            assert set(got) == listed, sorted(set(got) - listed)
        for key in listed:
            same_fields(got[key], shown[key])
    elif isinstance(shown, list) and shown and got:
        same_fields(got[0], shown[0])


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("page_tasks")
def test_the_api_pages_curl_session_runs_against_the_api(
    settings: Any, built_index: DueIndex, client: Any
) -> None:
    """Every ``curl`` of docs/api.md, in the page's order, sent to the API in its URLs, as
    the page's users ``admin`` and ``worker`` (basic authentication, as ``-u`` sends): the
    status each gets, and the answers the page shows, field for field where it shows a
    whole answer (``"..."`` stands for more fields), value for value where it shows one in
    a comment."""
    import json

    from django.contrib.auth.models import Permission, User

    from django_schedulinator.models import Run

    from .test_outcomes import REPORTING, handed_off

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": {"queue": REPORTING}}
    User.objects.create_superuser("admin", password="secret")
    worker = User.objects.create_user("worker", password="secret", is_staff=True)
    worker.user_permissions.add(Permission.objects.get(codename="report_run"))
    ids: dict[str, str] = {}

    def send(request: Curl, *expected: int) -> Any:
        response = request.send(client, ids)
        assert response.status_code in expected, (request.line, response.content)
        if request.shown.startswith("{"):
            assert response.json() == json.loads(request.shown), request.line
        elif request.shown:
            header, _, value = request.shown.partition(": ")
            assert response.headers[header] == value, request.line
        return response

    [schema] = curls("api-schema")
    assert send(schema, 200).json()["openapi"]

    [create] = curls("api-create")
    created = send(create, 201).json()
    shown = answer("api-create-answer")
    same_fields(created, shown)
    for field in ("name", "task", "args", "kind", "cron", "timezone", "description", "version"):
        assert created[field] == shown[field], field
    ids[f"/schedules/{shown['id']}/"] = f"/schedules/{created['id']}/"
    ids[f"schedule={shown['id']}"] = f"schedule={created['id']}"

    [invalid] = curls("api-invalid")
    assert send(invalid, 400).json() == answer("api-invalid-answer")
    # Once the fields pass (a registered task), the model's rules, together.
    registered = Curl(invalid.line.replace("os.system", "billing.send_invoices"))
    assert send(registered, 400).json() == answer("api-invalid-model-answer")

    # The two ways to send the version, each stale once the other changed the schedule:
    # If-Match gets 412 (the answer the page shows), the body's version 409.
    read, if_match, in_body = curls("api-concurrency")
    send(read, 200)
    send(if_match, 200)
    assert send(if_match, 412).json() == answer("api-stale-answer")
    send(in_body, 409)

    [listed] = curls("api-list")
    assert send(listed, 200).json()["count"] == 1

    for request in curls("api-actions"):
        send(request, 200, 202)

    [preview] = curls("api-preview")
    previewed = send(preview, 200).json()
    same_fields(previewed, answer("api-preview-answer"))
    assert previewed["description"] == answer("api-preview-answer")["description"]

    run = Run.objects.filter(schedule_id=created["id"], trigger="run_now").first()
    assert run is not None
    ids["/runs/1234/"] = f"/runs/{run.pk}/"
    for request in curls("api-runs"):
        send(request, 200)

    _schedule, handed = handed_off()
    ids["42:1764050400000"] = handed.idempotency_key
    [report] = curls("api-report")
    shown = {**answer("api-report-answer"), "key": handed.idempotency_key}
    assert send(report, 200).json() == shown

    [changes] = curls("api-changes")
    changed = send(changes, 200).json()
    shown = answer("api-changes-answer")["results"][0]
    assert set(changed) == set(answer("api-changes-answer"))
    assert {frozenset(row) for row in changed["results"]} == {frozenset(shown)}
    [edit] = [c for c in changed["results"] if c["version"] == 2 and c["action"] == "changed"]
    for field in ("schedule_name", "actor_name", "source", "action", "changes", "version"):
        assert edit[field] == shown[field], field

    [index] = curls("api-index")
    # The fields of the answer (what each holds depends on the index: its shards, its
    # last rebuild, the drift check's sample).
    assert set(send(index, 200).json()) == set(answer("api-index-answer"))

    [schedulers] = curls("api-schedulers")
    same_fields(send(schedulers, 200).json(), answer("api-schedulers-answer"))

    [status] = curls("api-status")
    send(status, 200, 503)  # 503: no scheduler is alive here


def test_the_api_pages_apps_are_apps() -> None:
    """The apps docs/api.md adds for the browsable API are the packages the api extra
    installs (``...`` stands for the project's own)."""
    from django.apps import apps

    namespace = paste(API_PAGE, "api-settings")
    listed = [app for app in namespace["INSTALLED_APPS"] if app is not ...]
    assert listed == ["rest_framework", "django_filters", "django_schedulinator"]
    for app in listed:
        assert apps.is_installed(app), app  # installed in the tests' settings too


@pytest.mark.subprocess
def test_the_api_pages_token_setup_lets_a_program_in(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """docs/api.md#tokens-for-programs in a new project: its settings, then migrate and
    drf_create_token as the page writes them, and its curl, with the token printed, sent to
    the project's server (runserver): the schedules come back; without the header, or with
    a token nobody has, they do not."""
    import socket

    from .support.redis_server import free_port

    project = DocProject(
        tmp_path, key_prefix,
        settings=[
            source("api-token-settings", API_PAGE),
            # What the page leaves to the project: its URLs (api-urls) and its host.
            'ROOT_URLCONF = "myproject.urls"\nALLOWED_HOSTS = ["127.0.0.1"]',
        ],
        apps=[],
    )  # fmt: skip
    doc_projects.append(project)
    urls = source("api-urls", API_PAGE)
    assert "    ...,\n" in urls  # the project's own URLs
    project.write("myproject/urls.py", urls.replace("    ...,\n", ""))
    migrate, create_token = commands("api-token-commands", API_PAGE)
    [curl] = commands("api-token-request", API_PAGE)

    project.run(migrate)
    project.shell(  # the user the page's token is for: staff, with every permission
        "from django.contrib.auth.models import User\n"
        "User.objects.create_superuser('worker', 'worker@example.com', None)"
    )
    printed = project.run(create_token)
    found = re.fullmatch(r"Generated token (\w{40}) for user worker", printed.strip())
    assert found, printed
    port = free_port()
    project.popen([sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"])

    def answers() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_for(answers, "runserver to listen")

    shown = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"  # the page's example token

    def send(line: str) -> tuple[int, str]:
        words = shlex.split(line.replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
        assert words[0] == "curl", line
        done = subprocess.run(
            [*words, "-s", "-w", "\n%{http_code}"], capture_output=True, text=True, timeout=60
        )
        body, _, status = done.stdout.rpartition("\n")
        return int(status), body

    status, body = send(curl.replace(shown, found[1]))
    assert status == 200, body
    assert json.loads(body)["count"] == 0  # the new project's schedules: none yet
    # Refused with a 401, as the page says of the token's class first in the list.
    assert send(curl.replace(shown, "0" * 40)) == (401, '{"detail":"Invalid token."}')
    without = curl.replace(f'-H "Authorization: Token {shown}" ', "")
    assert without != curl
    assert send(without)[0] == 401  # no credentials


# -- testing with a travelling clock (docs/scheduling.md) --------------------------------------


@pytest.mark.django_db(transaction=True)  # the inline dispatcher's threads: real commits
def test_the_testing_recipes_run_two_days_of_an_hourly_schedule(built_index: DueIndex) -> None:
    """The page's recipe over an hourly cron due at the start of its travel: 48 passes an
    hour apart fire 48 occurrences; then a pause, and the resume under the travelling clock
    the second recipe patches in, ends the paused period at the travelling now."""
    from datetime import UTC, datetime, timedelta

    import time_machine
    from django.utils import timezone

    from django_schedulinator import resync_schedules, services
    from django_schedulinator.models import Run, Schedule

    from .support.schedules import make_schedule

    schedule = make_schedule(kind="cron", cron="0 * * * *", timezone="UTC")
    start = datetime(2026, 3, 28, 1, tzinfo=UTC)  # the first hour the recipe shifts to
    Schedule.objects.filter(pk=schedule.pk).update(
        fired_through=None, next_run_at=start, due_at=None
    )
    resync_schedules([schedule.pk])

    paste(SCHEDULING, "testing-time-travel")
    fired = Run.objects.filter(schedule=schedule).values_list("scheduled_for", flat=True)
    assert sorted(fired) == [start + timedelta(hours=n) for n in range(48)]

    services.pause(schedule, "a test")
    with time_machine.travel("2026-04-01 12:30Z", tick=False):
        paste(SCHEDULING, "testing-clock", services=services, schedule=schedule, timezone=timezone)
    schedule.refresh_from_db()
    assert schedule.enabled
    assert schedule.next_run_at == datetime(2026, 4, 1, 13, tzinfo=UTC)


# -- recording the key under a unique constraint (docs/concepts.md, docs/reliability.md) --------


@pytest.mark.subprocess
def test_the_receivers_unique_key_drops_a_repeat(
    tmp_path: Path, key_prefix: str, doc_projects: list[DocProject]
) -> None:
    """concepts.md's model and task, and reliability.md's task, in an app of a new project
    (its migration made by makemigrations): the same occurrence delivered twice takes effect
    once."""
    redis = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    project = DocProject(tmp_path, key_prefix, settings=[readme_settings(redis)], apps=["billing"])
    doc_projects.append(project)
    project.write("billing/models.py", source("processed-occurrence", "concepts.md"))
    project.write(
        "billing/reminders.py",
        "from billing.models import ProcessedOccurrence\n\nDONE = []\n\n\n"
        "def do_the_work():\n    DONE.append(1)\n\n\n"
        + source("processed-occurrence-integrity", "reliability.md"),
    )
    project.run("python manage.py makemigrations billing")
    project.run("python manage.py migrate")
    printed = project.shell(
        "from types import SimpleNamespace\n"
        "from billing.models import ProcessedOccurrence, charge_subscriptions\n"
        "from billing import reminders\n"
        "occurrence = SimpleNamespace(key='42:1767225600000')\n"
        "for _ in range(2):\n"
        "    charge_subscriptions(occurrence=occurrence)\n"
        "    reminders.send_invoice_reminders(occurrence=SimpleNamespace(key='43:1767225600000'))\n"
        "print(ProcessedOccurrence.objects.count(), len(reminders.DONE))"
    )
    assert printed.splitlines()[-1].split() == ["2", "1"]
