"""The benchmark suite: this app beside its peers, each figure from the same run.

    python -m benchmarks.suite --quick            # 1k/10k/100k, every peer, 3 repeats
    python -m benchmarks.suite                    # the same and 1M where a system can hold it
    python -m benchmarks.suite --only schedulinator,apscheduler-redis --repeat 5
    python -m benchmarks.suite --smoke            # this app alone on tiny sizes (CI)

The peers (django-celery-beat, celery-redbeat, rq-scheduler, APScheduler 3 with its
SQLAlchemy and its Redis job store) are installed into venvs of their own, ``.bench-venv/``
and ``.bench-venv-rq/`` (``VENVS``), never into this app's. Each system is driven by a
small script under ``benchmarks/peers/`` (see ``benchmarks/peers/common.py``), every command
in a fresh process, against the local PostgreSQL and Redis, each in its own database and
key prefix. What it measures, and how each peer is driven, is in docs/benchmarks.md.

It writes ``results.json`` (every sample) and ``results.md`` (the tables) to ``--out``
(default ``benchmarks/results/<date>/``, not committed).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.run import add_smoke_option

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "benchmarks" / "peers"
# The peers' venvs, by name: their directory and requirements. rq-scheduler has its own (its
# "crontab" dependency hides the module of the same name that django-celery-beat imports).
VENVS = {
    "peers": (ROOT / ".bench-venv", PEERS / "requirements.txt"),
    "rq": (ROOT / ".bench-venv-rq", PEERS / "requirements-rq.txt"),
}
THIS_APP = "schedulinator"


@dataclass(frozen=True)
class System:
    name: str
    module: str
    venv: str = "peers"  # a key of VENVS; "" for this app (this venv's python)
    store: str = ""
    # The largest size it is asked to hold (setup and idle); None: every size.
    max_size: int | None = None
    # The burst is stopped after this long (seconds), whatever is left: a system that
    # hands off one occurrence per O(N) tick would take many minutes over 10,000.
    burst_cap: float = 60.0

    @property
    def peer(self) -> bool:
        return bool(self.venv)


SYSTEMS = (
    System(THIS_APP, "benchmarks.peers.schedulinator", venv=""),
    System("apscheduler-sqlalchemy", "benchmarks.peers.apscheduler3", store="sqlalchemy"),
    System("apscheduler-redis", "benchmarks.peers.apscheduler3", store="redis"),
    # Holds every schedule in the beat process and compares the whole set on every tick.
    System("celery-beat", "benchmarks.peers.celery_beat", max_size=100_000, burst_cap=30.0),
    System("redbeat", "benchmarks.peers.redbeat"),
    System("rq-scheduler", "benchmarks.peers.rq_scheduler", venv="rq"),
)


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    burst_total: int
    burst_due: int
    passes: int
    repeat: int
    sync_rows: int
    # An idle measure stops after this many seconds of passes (at least 5 passes): a
    # pass that grows with the schedules would take minutes at 100,000.
    idle_seconds: float
    steady_seconds: float  # of each steady run (benchmarks/steady.py)


def plan_for(*, quick: bool, smoke: bool, repeat: int) -> Plan:
    if smoke:
        return Plan((500, 1000), 500, 100, 10, 1, 20, 5.0, 3.0)  # a burst among each size
    sizes = (1_000, 10_000, 100_000) if quick else (1_000, 10_000, 100_000, 1_000_000)
    return Plan(sizes, 100_000, 10_000, 100, repeat, 1000, 10.0, 30.0)


# -- the pure part: figures, ratios, tables (tests/test_benchmarks.py) ------------------------


def summarize(samples: Sequence[float]) -> dict[str, float] | None:
    """Median, min and max of repeated measures (None when there are none)."""
    if not samples:
        return None
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }


def ratio_to_best_peer(
    figures: dict[str, dict[str, float] | None], *, higher_is_better: bool
) -> tuple[float | None, str | None]:
    """This app's median over the best peer's median of the same figure, from the same run,
    and that peer's name. Above 1 means this app's figure is the larger one (better for a
    rate, worse for a time or a memory)."""
    mine = figures.get(THIS_APP)
    peers = {
        name: f["median"]
        for name, f in figures.items()
        if name != THIS_APP and f is not None and f["median"] > 0
    }
    if mine is None or not peers:
        return None, None
    pick = max if higher_is_better else min
    best = pick(peers, key=lambda name: peers[name])
    return mine["median"] / peers[best], best


def format_figure(figure: dict[str, float] | None, unit: str) -> str:
    if figure is None:
        return "-"
    digits = 3 if figure["median"] < 10 else (1 if figure["median"] < 1000 else 0)

    def f(value: float) -> str:
        return f"{value:,.{digits}f}"

    unit = f" {unit}" if unit else ""
    if figure["n"] == 1:
        return f"{f(figure['median'])}{unit}"
    return f"{f(figure['median'])}{unit} ({f(figure['min'])} to {f(figure['max'])})"


@dataclass(frozen=True)
class Measure:
    key: str  # in results["figures"]
    title: str
    unit: str
    higher_is_better: bool


def render_markdown(results: dict[str, Any]) -> str:
    """The tables: one row per measure, one column per system, and the ratio."""
    systems = results["systems"]
    measures = [Measure(**m) for m in results["measures"]]
    head = ["measure", *systems, f"{THIS_APP} / best peer"]
    lines = [
        f"Taken {results['taken']} on {results['machine']}; each figure the median of "
        f"{results['repeat']} (min to max).",
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join(["---"] + ["---:"] * (len(head) - 1)) + " |",
    ]
    for m in measures:
        figures = results["figures"].get(m.key, {})
        cells = [format_figure(figures.get(s), m.unit) for s in systems]
        value, best = ratio_to_best_peer(figures, higher_is_better=m.higher_is_better)
        ratio = f"{value:.2f}x ({best})" if value is not None else "-"
        lines.append("| " + " | ".join([m.title, *cells, ratio]) + " |")
    if results.get("only_this_app"):
        lines += ["", "| this app only | figure |", "| --- | ---: |"]
        for title, figure, unit in results["only_this_app"]:
            lines.append(f"| {title} | {format_figure(figure, unit)} |")
    for note in results.get("notes", []):
        lines += ["", note]
    return "\n".join(lines) + "\n"


# -- running the drivers ------------------------------------------------------------------


def venv_python(name: str, *, install: bool = True) -> Path:
    """The python of the peers' venv ``name``; created and filled from its requirements
    when missing, or when they changed since it was filled."""
    venv, requirements = VENVS[name]
    python = venv / "bin" / "python"
    stamp = venv / "requirements.sha256"
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return python
    if not install:
        raise SystemExit(f"{venv} is missing or out of date: run without --no-install")
    print(f"installing {requirements.name} into {venv} ...", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(requirements)], check=True)
    stamp.write_text(wanted)
    return python


class Runner:
    def __init__(self, *, smoke: bool, install: bool, verbose: bool) -> None:
        self.tag = "bench-suite-smoke" if smoke else "bench-suite"
        self.db_tag = "bench_suite_smoke" if smoke else "bench_suite"
        self.install = install
        self.verbose = verbose

    def env(self, system: System) -> dict[str, str]:
        slug = system.name.replace("-", "_")
        return {
            **os.environ,
            "BENCH_PG_NAME": f"{self.db_tag}_{slug}",
            "BENCH_KEY_PREFIX": f"{self.tag}-{system.name}-{os.getpid()}",
            "PYTHONPATH": str(ROOT),
        }

    def call(self, system: System, *args: str) -> dict[str, Any]:
        python = sys.executable
        if system.peer:
            python = str(venv_python(system.venv, install=self.install))
        command = [python, "-m", system.module, *args]
        if system.store:
            command += ["--store", system.store]
        if self.verbose:
            print("  $", " ".join(command[1:]), flush=True)
        done = subprocess.run(
            command, cwd=ROOT, env=self.env(system), capture_output=True, text=True
        )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        if done.returncode or not lines:
            raise RuntimeError(
                f"{system.name} {' '.join(args)} failed ({done.returncode}):\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
            )
        result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
        return result


def run_suite(
    systems: Sequence[System],
    plan: Plan,
    runner: Runner,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {}
    raw: dict[str, Any] = {}
    notes: list[str] = []

    def add(key: str, system: str, value: float) -> None:
        samples.setdefault(key, {}).setdefault(system, []).append(value)

    def burst(system: System, total: int, key: str) -> None:
        """``plan.burst_due`` of the ``total`` schedules set up made due, then fired."""
        for _ in range(plan.repeat):
            runner.call(system, "arm", "--due", str(plan.burst_due))
            result = runner.call(
                system, "burst", "--due", str(plan.burst_due),
                "--cap-seconds", str(system.burst_cap),
            )  # fmt: skip
            raw[system.name].append({"burst": total, **result})
            add(key, system.name, result["rate"])
            if not result["complete"]:
                add(f"{key}-stopped", system.name, result["handed_off"])
        if stopped := samples.get(f"{key}-stopped", {}).get(system.name):
            notes.append(
                f"{system.name}: the burst among {total:,} was stopped after "
                f"{system.burst_cap:g} s in {len(stopped)} of {plan.repeat} runs, with "
                f"{min(stopped):,.0f} to {max(stopped):,.0f} of {plan.burst_due:,} handed "
                "off; its rate is of those."
            )
        log(f"  burst among {total:,}: {samples[key][system.name]} /s")

    for system in systems:
        log(f"== {system.name}")
        raw[system.name] = runs = []
        try:
            for size in plan.sizes:
                if system.max_size is not None and size > system.max_size:
                    notes.append(f"{system.name}: not asked to hold {size:,} schedules.")
                    continue
                setup = runner.call(system, "setup", "--size", str(size))
                runs.append({"setup": size, **setup})
                if "rebuild_s" in setup:  # this app's setup rebuilds the index, timed
                    add(f"rebuild-{size}", system.name, setup["rebuild_s"])
                log(f"  {size:,} schedules set up in {setup['wall_seconds']:.1f}s")
                for _ in range(plan.repeat):
                    idle = runner.call(
                        system, "idle", "--passes", str(plan.passes),
                        "--max-seconds", str(plan.idle_seconds),
                    )  # fmt: skip
                    add(f"idle-{size}", system.name, statistics.median(idle["pass_ms"]))
                    add(f"rss-{size}", system.name, idle["rss_kib"] / 1024)
                    runs.append({"idle": size, **idle})
                log(f"  idle at {size:,}: {samples[f'idle-{size}'][system.name]} ms")
                if size > plan.burst_total:  # the same burst among more schedules
                    burst(system, size, f"burst-{size}")
            if system.max_size is not None and plan.burst_total > system.max_size:
                continue
            if plan.sizes[-1] != plan.burst_total:  # the last size set up is not the burst's
                runner.call(system, "setup", "--size", str(plan.burst_total))
            burst(system, plan.burst_total, "burst")
            if not system.peer:
                for _ in range(plan.repeat):
                    ceilings = runner.call(system, "ceilings", "--due", str(plan.burst_due))
                    runs.append({"ceilings": plan.burst_due, **ceilings})
                    for key in ("claim_per_s", "advance_per_s", "insert_per_s"):
                        add(f"ceiling-{key}", system.name, ceilings[key])
                    sync = runner.call(system, "sync", "--rows", str(plan.sync_rows))
                    runs.append({"sync": plan.sync_rows, **sync})
                    for key in (
                        "save_ms_with", "save_ms_without",
                        "transaction_ms_with", "transaction_ms_without",
                    ):  # fmt: skip
                        add(f"sync-{key}", system.name, sync[key])
        except RuntimeError as exc:
            # One system's failure is reported, and the others still run.
            log(str(exc))
            notes.append(f"{system.name}: failed: {str(exc).splitlines()[0]}")
        finally:
            runner.call(system, "clean")

    only: list[tuple[str, dict[str, float] | None, str]] = []
    if any(not s.peer for s in systems):
        mine = {k: summarize(v.get(THIS_APP, [])) for k, v in samples.items()}
        only += [
            (f"rebuild of the index at {n:,} schedules (one run)", mine.get(f"rebuild-{n}"), "s")
            for n in plan.sizes
        ]
        only += [
            ("ceiling: Lua claim alone, batches of 500", mine.get("ceiling-claim_per_s"), "/s"),
            ("ceiling: conditional UPDATE alone, batches of 500",
             mine.get("ceiling-advance_per_s"), "/s"),
            ("ceiling: ledger INSERT alone, batches of 500",
             mine.get("ceiling-insert_per_s"), "/s"),
            ("a save of a schedule, with the app (index written after commit)",
             mine.get("sync-save_ms_with"), "ms"),
            ("the same save, the app's receivers off", mine.get("sync-save_ms_without"), "ms"),
            (f"a transaction of {plan.sync_rows:,} saves, with the app",
             mine.get("sync-transaction_ms_with"), "ms"),
            ("the same transaction, the app's receivers off",
             mine.get("sync-transaction_ms_without"), "ms"),
        ]  # fmt: skip
        only += steady_rows(runner, plan, log)
    measures = [
        *(
            {"key": f"idle-{n}", "title": f"idle pass at {n:,} schedules", "unit": "ms",
             "higher_is_better": False}
            for n in plan.sizes
        ),
        *(
            {"key": "burst" if n == plan.burst_total else f"burst-{n}",
             "title": f"burst: {plan.burst_due:,} due among {n:,}", "unit": "/s",
             "higher_is_better": True}
            for n in (plan.burst_total, *(n for n in plan.sizes if n > plan.burst_total))
        ),
        *(
            {"key": f"rss-{n}", "title": f"memory (RSS) idle at {n:,}", "unit": "MiB",
             "higher_is_better": False}
            for n in plan.sizes
        ),
    ]  # fmt: skip
    return {
        "taken": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "repeat": plan.repeat,
        "plan": plan.__dict__,
        "systems": [s.name for s in systems],
        "measures": measures,
        "figures": {
            key: {name: summarize(values) for name, values in by_system.items()}
            for key, by_system in samples.items()
        },
        "only_this_app": only,
        "notes": notes,
        "samples": samples,
        "raw": raw,
    }


STEADY_CASES = ((1000, 1), (5000, 1), (5000, 2), (5000, 4))  # (occurrences/s, processes)


def steady_available() -> bool:
    """Whether benchmarks/steady.py (written beside this suite) is in this tree."""
    return importlib.util.find_spec("benchmarks.steady") is not None


# The figures of one steady run (benchmarks.steady.measure's dict) worth a row, by key:
# (label, unit). Nested dicts give one row per entry. The run's settings (rate, total,
# processes, seconds) are in the row's title; its bookkeeping (setup, exit codes, the Redis
# commands by name) stays in the log.
STEADY_FIGURES = {
    "fired": ("fired", ""),
    "lost": ("lost", ""),
    "doubled": ("doubled", ""),
    "fired_per_second": ("fired per second", "/s"),
    "lateness_ms": ("lateness", "ms"),
    "cpu_ms_per_occurrence": ("CPU per occurrence:", "ms"),
    "cpu_share_of_a_core": ("CPU share of a core:", "cores"),
    "occurrences_per_pass": ("occurrences per pass", ""),
    "transactions_per_occurrence": ("transactions per occurrence", ""),
}


def steady_figures(result: dict[str, Any]) -> list[tuple[str, float, str]]:
    """(label, value, unit) of each figure of one steady run that gets a row."""
    figures: list[tuple[str, float, str]] = []
    for key, (label, unit) in STEADY_FIGURES.items():
        value = result.get(key)
        if isinstance(value, dict):
            figures += [(f"{label} {name}", v, unit) for name, v in value.items()]
        elif isinstance(value, int | float) and not isinstance(value, bool):
            figures.append((label, value, unit))
    return figures


def steady_rows(
    runner: Runner, plan: Plan, log: Callable[[str], None]
) -> list[tuple[str, dict[str, float] | None, str]]:
    """Steady lateness from ``benchmarks.steady.measure``, called in this app's driver
    (its own process, database and key prefix), when that module is there."""
    if not steady_available():
        return [
            (f"steady {rate:,}/s, {processes} process(es): lateness "
             "(TODO: benchmarks/steady.py is not in this tree)", None, "ms")
            for rate, processes in STEADY_CASES
        ]  # fmt: skip
    this_app = next(s for s in SYSTEMS if not s.peer)
    cases = STEADY_CASES[:1] if plan.repeat == 1 else STEADY_CASES
    rows: list[tuple[str, dict[str, float] | None, str]] = []
    for rate, processes in cases:
        total = max(plan.burst_total, rate)  # at least a second's worth: each fires once a cycle
        results = [
            runner.call(
                this_app, "steady", "--rate", str(rate), "--total", str(total),
                "--seconds", str(plan.steady_seconds), "--processes", str(processes),
            )
            for _ in range(plan.repeat)
        ]  # fmt: skip
        log(f"  steady {rate}/s x{processes}: {results}")
        samples: dict[tuple[str, str], list[float]] = {}
        for result in results:
            for label, value, unit in steady_figures(result):
                samples.setdefault((label, unit), []).append(value)
        for (label, unit), values in samples.items():
            title = f"steady {rate:,}/s, {processes} process(es): {label}"
            rows.append((title, summarize(values), unit))
    return rows


def machine() -> str:
    cpus = os.cpu_count()
    try:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return f"{cpus} CPUs, load average {load} at the end, Python {sys.version.split()[0]}"


def parse_only(value: str | None, systems: Iterable[System] = SYSTEMS) -> list[System]:
    by_name = {s.name: s for s in systems}
    if not value:
        return list(by_name.values())
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown system(s): {', '.join(unknown)}; choose from {', '.join(by_name)}"
        )
    return [by_name[n] for n in names]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 100k (no 1M)")
    parser.add_argument(
        "--only", help="comma-separated systems: " + ", ".join(s.name for s in SYSTEMS)
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each figure (>= 3)")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/<date>/")
    parser.add_argument("--no-install", action="store_true", help="never create the peers' venvs")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument(
        "--render", type=Path, metavar="RESULTS_JSON", help="print the tables of a run again"
    )
    add_smoke_option(parser)
    options = parser.parse_args(argv)
    if options.render:
        print(render_markdown(json.loads(options.render.read_text())), end="")
        return
    try:
        systems = parse_only(options.only)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    if options.smoke:
        # This app alone, on tiny sizes: the peers' venv is not needed (CI stays fast).
        systems = [s for s in systems if not s.peer] if not options.only else systems
    elif options.repeat < 3:
        parser.error("--repeat must be at least 3 (each figure is a median with min and max)")
    plan = plan_for(quick=options.quick, smoke=options.smoke, repeat=options.repeat)
    runner = Runner(smoke=options.smoke, install=not options.no_install, verbose=options.verbose)
    started = time.perf_counter()
    results = run_suite(systems, plan, runner)
    results["seconds"] = time.perf_counter() - started
    out = options.out or ROOT / "benchmarks" / "results" / datetime.now(UTC).strftime("%Y-%m-%d")
    if options.smoke:
        out = options.out or ROOT / "benchmarks" / "results" / "smoke"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    table = render_markdown(results)
    (out / "results.md").write_text(table)
    print(table)
    print(f"written to {out} in {results['seconds']:.0f}s")
    if options.smoke and not options.out:
        shutil.rmtree(out)
    failed = [note for note in results.get("notes", []) if ": failed: " in note]
    if options.smoke and failed:  # a smoke exists to fail when a benchmark no longer runs
        raise SystemExit("benchmark smoke failed: " + "; ".join(failed))


if __name__ == "__main__":
    main()
