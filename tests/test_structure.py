"""The shape of the package, checked from its source: no import circle, and one write path;
and the docs cite only tests that exist.

Read with ``ast``, without importing anything: an import inside a function counts (it is
how a circle hides), and so does one under ``if TYPE_CHECKING:`` (a module that names a
higher one for its annotations depends on it as much: a Protocol in the lower module says
what it needs instead).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.core.management import call_command

import django_schedulinator
from django_schedulinator import services
from django_schedulinator.conf import CATCH_UP_MODES, NOTIFY_EVENTS
from django_schedulinator.models import Run, Schedule
from django_schedulinator.statuses import OutcomeStatus, ReportedStatus, RunStatus
from django_schedulinator.timing.vocabulary import (
    CalendarRule,
    CatchUpMode,
    DayRule,
    DstFold,
    DstGap,
    Kind,
    NotifyEvent,
    Overlap,
    SkipReason,
)

PACKAGE = "django_schedulinator"
SERVICES = f"{PACKAGE}.services"
MODELS = f"{PACKAGE}.models"
# The package as imported: the installed wheel when the suite runs against it.
ROOT = Path(django_schedulinator.__file__).resolve().parent
PROJECT = Path(__file__).resolve().parent.parent  # the clone: tests, docs


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path for path in ROOT.rglob("*.py") if "migrations" not in path.parts
    }


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports (at any depth of its code)."""
    tree = ast.parse(path.read_text("utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            # "from . import timing" imports the module timing, not a name of the package.
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in known else source)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of the graph, each once (depth-first search from each module)."""
    found: set[tuple[str, ...]] = set()

    def visit(node: str, trail: list[str]) -> None:
        for target in sorted(graph[node]):
            if target in trail:
                circle = trail[trail.index(target) :]
                start = circle.index(min(circle))
                found.add(tuple(circle[start:] + circle[:start]))
            elif target > trail[0]:  # each circle is found from its smallest module
                visit(target, [*trail, target])

    for module in sorted(graph):
        visit(module, [module])
    return [list(c) for c in sorted(found)]


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert f"{PACKAGE}.models" in graph
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    # The check above must be able to fail.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_models_import_neither_the_services_nor_the_change_log() -> None:
    graph = import_graph()
    models = {name for name in graph if name == MODELS or name.startswith(f"{MODELS}.")}
    imported = set().union(*(graph[name] for name in models)) - models
    for module in ("scheduler.claiming", "index.sync", "operations.alerts"):
        assert f"{PACKAGE}.{module}" not in imported
    assert SERVICES not in imported
    assert not {m for m in imported if m.startswith(f"{SERVICES}.")}  # nor any of its modules


# The package's root: the public modules and the packages of the layers, nothing else (a
# module that belongs to a layer lives in its package).
ROOT_MODULES = {
    "__init__", "apps", "checks", "conf", "declared", "errors", "outcomes", "registry",
    "signals", "statuses",
}  # fmt: skip
ROOT_PACKAGES = {
    "admin", "api", "contrib", "dispatch", "importers", "index", "management", "migrations",
    "models", "operations", "scheduler", "services", "timing",
}  # fmt: skip


def test_the_package_root_keeps_the_public_modules_and_the_layers() -> None:
    modules = {path.stem for path in ROOT.glob("*.py")}
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    assert (modules, packages) == (ROOT_MODULES, ROOT_PACKAGES)


# The services' modules (in ``services/``), and those of them each may import: the sync of
# the declarations validates them and goes through the schedules' services, which lock the
# calendars a schedule names (calendars); the re-plans of a calendar's days and of the zone
# rules write through replans; all write with writes. Below them, what every writer shares:
# the run ledger, the failure streaks, the change log and the validation. Nothing points
# back up, and only the package's __init__ imports them all.
SERVICE_MODULES = {
    "declared": {"schedules", "writes", "changelog", "validation"},
    "schedules": {"calendars", "writes", "changelog", "ledger", "validation"},
    "runs": {"writes", "changelog", "ledger"},
    "calendars": {"replans", "writes", "changelog", "ledger"},
    "zones": {"replans", "writes", "changelog"},
    "replans": {"changelog"},
    "writes": {"changelog"},
    "ledger": set(),
    "streaks": set(),
    "changelog": set(),
    "validation": set(),
}
# What the rest of the app may import as modules of the package: the shared layer. The
# services by subject are reached through the package's names (``services.create``).
SHARED_SERVICES = {"ledger", "streaks", "changelog", "validation"}


def test_the_services_modules_import_one_way() -> None:
    graph = import_graph()
    modules = {name for name in graph if name.startswith(f"{SERVICES}.")}
    assert modules == {f"{SERVICES}.{name}" for name in SERVICE_MODULES}
    for name, allowed in SERVICE_MODULES.items():
        imported = {m.removeprefix(f"{SERVICES}.") for m in graph[f"{SERVICES}.{name}"]}
        assert SERVICES not in graph[f"{SERVICES}.{name}"], name  # the package: a circle
        assert imported & set(SERVICE_MODULES) <= allowed, name
    # Outside the package, the services are imported as the package (its public names) or
    # as one of the shared modules, never from a service's own module: the layout inside
    # stays the package's own.
    private = modules - {f"{SERVICES}.{name}" for name in SHARED_SERVICES}
    outside = {
        module: imports & private
        for module, imports in graph.items()
        if module != SERVICES and module not in modules and imports & private
    }
    assert outside == {}


# The scheduler loop's modules (in ``scheduler/``), and those of them each may import: the
# loop (worker) uses its chores, its commit stage (pipeline) and its lanes; a lane hands a
# batch to its dispatcher with a recorder (progress) while the lease keeper (leases) renews
# it, both through the runs the scheduler holds (held, on the loop's clock: now, counting
# into the scheduler's counters: counters); every
# thread beside the loop runs on the one stage (operations.stage, below the loop: see
# test_every_thread_beside_the_loop_runs_on_one_stage_below_it). Nothing points back up.
LOOP_PACKAGE = f"{PACKAGE}.scheduler"
LOOP = {
    "worker": {"chores", "claiming", "counters", "pipeline", "lanes", "leases", "transient"},
    "chores": {"claiming", "counters", "transient"},
    "claiming": {"counters", "held", "now"},
    "pipeline": {"claiming"},
    "lanes": {"claiming", "counters", "held", "leases", "progress", "recording", "transient"},
    "recording": {"held", "leases", "progress", "transient"},
    "leases": {"held", "progress", "transient"},
    "progress": {"held", "transient"},
    "held": {"counters", "now"},
    "counters": set(),
    "now": set(),
    "transient": set(),
}
STAGE = f"{PACKAGE}.operations.stage"


def test_the_loops_modules_import_one_way() -> None:
    graph = import_graph()
    for name, allowed in LOOP.items():
        imported = {m.removeprefix(f"{LOOP_PACKAGE}.") for m in graph[f"{LOOP_PACKAGE}.{name}"]}
        assert imported & set(LOOP) <= allowed, name
    # Outside the loop, only the command that runs it imports it, and the app's ready()
    # the receiver that bounds the lock waits of the connections its threads open.
    users = {
        module: imports & {f"{LOOP_PACKAGE}.{name}" for name in LOOP}
        for module, imports in graph.items()
        if module.removeprefix(f"{LOOP_PACKAGE}.") not in LOOP
        and imports & {f"{LOOP_PACKAGE}.{name}" for name in LOOP}
    }
    assert users.pop(f"{PACKAGE}.apps") == {f"{LOOP_PACKAGE}.transient"}
    assert set(users) == {f"{PACKAGE}.management.commands.run_scheduler"}


def test_every_thread_beside_the_loop_runs_on_one_stage_below_it() -> None:
    # The primitive (bounded, stopped by a deadline, connections closed) is below both the
    # loop and the operations that run threads of their own (the heartbeat, the probes, the
    # courier, the prune): it imports neither, nor the notifications it routes (they read
    # its mark), so neither package ever imports the other back.
    graph = import_graph()
    above = {m for m in graph if m.startswith((f"{LOOP_PACKAGE}.", f"{PACKAGE}.operations."))}
    assert graph[STAGE] & above == set()
    users = {f"{LOOP_PACKAGE}.{name}" for name in ("pipeline", "lanes", "recording", "leases")} | {
        f"{PACKAGE}.operations.{name}" for name in ("heartbeat", "probes", "courier", "retention")
    }
    assert {m for m in users if STAGE not in graph[m]} == set()
    # The operations import nothing of the loop (the loop imports them).
    operations = {m for m in graph if m.startswith(f"{PACKAGE}.operations")}
    assert {m for m in operations if {i for i in graph[m] if i.startswith(LOOP_PACKAGE)}} == set()


# The threads the package starts other than through the stage: those the stage's docstring
# names, which run the user's tasks or send webhooks, not a queue beside the loop.
THREADS_NOT_ON_THE_STAGE = {"dispatch/inline.py", "dispatch/webhook.py", "dispatch/deadlines.py"}


def test_no_thread_is_started_but_through_the_stage() -> None:
    starting = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "Thread"
            ):
                starting.add(path.relative_to(ROOT).as_posix())
    assert starting - {"operations/stage.py"} == THREADS_NOT_ON_THE_STAGE


# The timing rules (``timing/``), in the order its docstring reads them: each module imports
# only those before it, and outside the package only the errors: no model, no setting, no
# Redis. The calendars' days come in as days.
TIMING_PACKAGE = f"{PACKAGE}.timing"
TIMING = [
    "vocabulary", "instants", "solar", "cron", "moments", "walks", "days", "plain",
    "calendars", "spec", "replan", "jitter", "describe", "catchup", "zonedata",
]  # fmt: skip


def test_the_timing_rules_import_one_way_and_nothing_above_them() -> None:
    graph = import_graph()
    prefix = f"{TIMING_PACKAGE}."
    modules = {module.removeprefix(prefix) for module in graph if module.startswith(prefix)}
    assert modules == set(TIMING)
    for position, name in enumerate(TIMING):
        imported = graph[prefix + name]
        inside = {module.removeprefix(prefix) for module in imported if module.startswith(prefix)}
        outside = {module for module in imported if not module.startswith(prefix)}
        assert inside <= set(TIMING[:position]), name
        assert outside <= {f"{PACKAGE}.errors"}, name


def _unlocked_counts(path: Path) -> list[str]:
    """``file:line: code`` for each write to a field of a scheduler's shared counters
    (``<anything>.counters.<field>``) in ``path`` that does not go through ``Counters.add``.
    A pass's own ``Counters`` (a local name, one thread) is not shared."""
    tree = ast.parse(path.read_text("utf-8"))
    found = []
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AugAssign | ast.AnnAssign)
            else []
        )
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Attribute)
                and target.value.attr == "counters"
            ):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_schedulers_shared_counters_change_only_under_their_lock() -> None:
    # A worker's Counters is written by its loop, its commit stage, its lanes and its prune
    # thread: a bare `+=` from two of them at once loses a count (issue 32, item 20). Every
    # change goes through Counters.add, which holds the lock. A race test would need an
    # unlucky thread switch between the read and the write: the source says it for sure.
    sources = sorted(p for p in ROOT.rglob("*.py") if "migrations" not in p.parts)
    assert [line for path in sources for line in _unlocked_counts(path)] == []


def test_the_counter_check_finds_an_unlocked_count(tmp_path: Path) -> None:
    # The check above must be able to fail.
    source = tmp_path / "module.py"
    source.write_text(
        "counters.fired += 1\nself.counters.cancelled += n\n"
        "self.counters.add(Counters(cancelled=n))\nworker.counters.missed = 0\n"
    )
    assert _unlocked_counts(source) == [
        "module.py:2: self.counters.cancelled += n",
        "module.py:4: worker.counters.missed = 0",
    ]


def test_the_recorder_handed_to_dispatchers_holds_no_worker() -> None:
    # A dispatcher gets a narrow recorder (progress.BatchProgress), not the scheduler.
    path = ROOT / "scheduler" / "progress.py"
    source = path.read_text("utf-8")
    assert "worker" not in _imports(f"{LOOP_PACKAGE}.progress", path, set(_modules()))
    assert "Worker" not in source


# What writes a model: a method on an instance or a queryset that saves, deletes or updates
# rows. The admin and the API call the service layer instead.
WRITING_CALLS = {
    "save", "delete", "update", "create", "get_or_create", "update_or_create", "bulk_create",
    "bulk_update", "insert_runs", "record", "select_for_update",
}  # fmt: skip


def _writes(path: Path) -> list[str]:
    """``file:line: call`` for each call in ``path`` that writes a model directly."""
    tree = ast.parse(path.read_text("utf-8"))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in WRITING_CALLS
            # services.update(...) and friends are the write path; self.update(...) is a
            # view's own method (partial_update calls update).
            and not (
                isinstance(node.func.value, ast.Name) and node.func.value.id in ("services", "self")
            )
            # super().delete_model(...) and the like are not model writes.
            and not (
                isinstance(node.func.value, ast.Call)
                and isinstance(node.func.value.func, ast.Name)
                and node.func.value.func.id == "super"
            )
        ):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_admin_and_the_api_write_only_through_the_services() -> None:
    sources = [
        path
        for folder in ("admin", "api")
        for path in (
            sorted((ROOT / folder).rglob("*.py"))
            if (ROOT / folder).is_dir()
            else [ROOT / f"{folder}.py"]
        )
    ]
    assert sources
    writes = [line for path in sources for line in _writes(path)]
    assert writes == []
    # ``services.<name>(...)`` is let through above: the names are the package's public
    # ones (its ``__all__``), not a helper of one of its modules.
    used = {name for path in sources for name in _service_names(path)}
    assert used
    assert used <= set(services.__all__)


def _service_names(path: Path) -> set[str]:
    """The names ``path`` takes from the services: ``services.<name>``, and what it imports
    from the package or one of its modules."""
    tree = ast.parse(path.read_text("utf-8"))
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "services"
        ):
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module == SERVICES:
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{SERVICES}."):
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


# Every status the app compares, by its enumeration (statuses.py): a literal compared with a
# status, or given as one to a query, is a typo waiting to happen.
STATUS_VALUES = {
    member.value for kind in (RunStatus, OutcomeStatus, ReportedStatus) for member in kind
}


def _status_literals(path: Path) -> list[str]:
    """``file:line: code`` for each status literal compared with a status in ``path``."""

    def literal(node: ast.AST) -> bool:
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(literal(element) for element in node.elts)
        return isinstance(node, ast.Constant) and node.value in STATUS_VALUES

    tree = ast.parse(path.read_text("utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(literal(o) for o in operands) and "status" in ast.unparse(node):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.keyword)
            and node.arg in ("status", "status__in")
            and literal(node.value)
        ):
            found.append(f"{path.name}:{node.value.lineno}: {ast.unparse(node)}")
    return found


def test_statuses_are_compared_by_their_enumerations() -> None:
    sources = sorted(p for p in ROOT.rglob("*.py") if "migrations" not in p.parts)
    literals = [line for path in sources for line in _status_literals(path)]
    assert literals == []


def test_the_status_check_finds_a_literal(tmp_path: Path) -> None:
    # The check above must be able to fail.
    source = tmp_path / "module.py"
    source.write_text(
        "ok = o.status == Status.FAILED\nbad = o.status in ('failed', 'retry')\n"
        "runs.filter(status='pending')\nkind == 'failed'\n"
    )
    assert _status_literals(source) == [
        "module.py:2: o.status in ('failed', 'retry')",
        "module.py:3: status='pending'",
    ]


def test_the_outcome_and_report_statuses_are_run_statuses() -> None:
    # What a dispatcher or a worker reports is recorded as the run's status of that value.
    run_statuses = set(RunStatus.values)
    assert {s.value for s in OutcomeStatus} - run_statuses == {"retry"}
    assert {s.value for s in ReportedStatus} - run_statuses == {"started"}
    assert Run.Status is RunStatus


# Each vocabulary is spelled once, in timing/vocabulary.py: the models' choices and the
# settings' accepted values are built from it, value for value.
def test_the_choices_and_the_settings_are_built_from_the_vocabularies() -> None:
    built = {
        Schedule.Kind: Kind,
        Schedule.DstGap: DstGap,
        Schedule.DstFold: DstFold,
        Schedule.DayRule: DayRule,
        Schedule.CalendarRule: CalendarRule,
        Schedule.CatchUp: CatchUpMode,
        Schedule.Overlap: Overlap,
        Run.SkipReason: SkipReason,
    }
    for choices, vocabulary in built.items():
        assert sorted(choices.values) == sorted(vocabulary), choices.__qualname__
        # Plain strings, as a migration writes them (a member would be written as itself).
        assert {type(value) for value in choices.values} == {str}, choices.__qualname__
    assert tuple(CatchUpMode) == CATCH_UP_MODES
    assert tuple(NotifyEvent) == NOTIFY_EVENTS


def test_the_service_name_check_finds_a_module_of_the_package(tmp_path: Path) -> None:
    # The check of the names the admin and the API take from the services must be able to
    # fail.
    source = tmp_path / "module.py"
    source.write_text(
        "from django_schedulinator.services import pause\n"
        "from django_schedulinator.services.schedules import update\n"
        "services.create(s)\nservices.writes._locked(s, db)\n"
    )
    names = _service_names(source)
    assert names == {
        "pause", "django_schedulinator.services.schedules.update", "create", "writes",
    }  # fmt: skip
    assert names - set(services.__all__) == {
        "django_schedulinator.services.schedules.update", "writes",
    }  # fmt: skip


def test_the_write_check_finds_a_write(tmp_path: Path) -> None:
    # The check above must be able to fail.
    source = tmp_path / "module.py"
    source.write_text("def f(schedule):\n    schedule.save()\n    services.update(schedule)\n")
    assert _writes(source) == ["module.py:2: schedule.save()"]


@pytest.mark.django_db
def test_the_migrations_match_the_models() -> None:
    # makemigrations --check exits non-zero when a model change has no migration.
    call_command("makemigrations", "django_schedulinator", "--check", "--dry-run", verbosity=0)
    # The development migrations are squashed into one before the first release: each
    # feature after it adds one.
    assert _migration_names() == ["0001_initial"]


def _migration_names() -> list[str]:
    return sorted(path.stem for path in (ROOT / "migrations").glob("0*.py"))


# -- the docs cite tests that exist -------------------------------------------------------------

TESTS = PROJECT / "tests"
# `tests/test_claiming.py`, `tests/support/rejections.py`, `test_claiming.py::test_name[param]`: a
# file under tests/, and maybe a test function in it (a parametrized id is left out).
CITATION = re.compile(
    r"(?<![\w/.-])(?:tests/(?P<path>[\w/.-]+?\.py)|(?P<name>test_\w+\.py))(?:::(?P<test>\w+))?"
)


def _documents() -> list[Path]:
    return [*sorted((PROJECT / "docs").glob("*.md")), PROJECT / "README.md",
            PROJECT / "CHANGELOG.md"]  # fmt: skip


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _missing_citations(text: str) -> list[str]:
    """What ``text`` cites under tests/ that does not exist: a file, or a test in a file."""
    missing = []
    for match in CITATION.finditer(text):
        path = TESTS / (match["path"] or match["name"])
        if not path.is_file():
            missing.append(f"no file tests/{path.relative_to(TESTS)}")
        elif match["test"] and match["test"] not in _functions(path):
            missing.append(f"no {match['test']} in tests/{path.relative_to(TESTS)}")
    return missing


def test_the_docs_name_tests_that_exist() -> None:
    # The check must be able to fail.
    assert _missing_citations(
        "`test_structure.py::test_nothing_like_it`, `tests/test_nowhere.py`, "
        "`test_processes.py::test_a_scheduler_killed_mid_way_loses_nothing_and_fires_once[claim]`"
    ) == ["no test_nothing_like_it in tests/test_structure.py", "no file tests/test_nowhere.py"]

    missing = {
        f"{document.relative_to(PROJECT)}: {problem}"
        for document in _documents()
        for problem in _missing_citations(document.read_text("utf-8"))
    }
    assert sorted(missing) == []


def test_a_schedules_default_dispatcher_is_the_dispatchers_default_alias() -> None:
    from django_schedulinator.dispatch import DEFAULT_ALIAS
    from django_schedulinator.models import Schedule

    # Spelled twice: the row does not import the dispatchers.
    assert Schedule._meta.get_field("dispatcher").default == DEFAULT_ALIAS
    assert Run._meta.get_field("dispatcher").default == DEFAULT_ALIAS
