"""The benchmarks' settings stay usable: their apps migrate and pass the system checks.

The full benchmark runs as a smoke in .ci/run (``python -m benchmarks.run --smoke``); this
catches the cheapest way for it to rot, an app the migrations depend on missing from
benchmarks/settings.py, within the suite.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings

from benchmarks import settings as bench_settings


@pytest.mark.django_db
def test_the_benchmark_settings_migrate_and_pass_the_checks() -> None:
    # Their apps only; the test settings' TASKS names a backend of an app they leave out.
    with override_settings(INSTALLED_APPS=bench_settings.INSTALLED_APPS, TASKS={}):
        out = StringIO()
        # databases=[]: static checks, on every Django (6.1 otherwise hands the model checks
        # every alias, and a JSONField's check on SQLite queries each).
        call_command("check", databases=[], stdout=out)
        # --plan builds the whole migration graph ("Dependency on unknown app" fails here)
        # and compares it with the test database, without writing anything.
        call_command("migrate", plan=True, stdout=out)


# -- benchmarks/suite.py: the figures, ratios and tables (its smoke runs in .ci/run) -------


def test_a_figure_is_the_median_of_its_runs_with_their_min_and_max() -> None:
    from benchmarks.suite import summarize

    assert summarize([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4}
    assert summarize([]) is None


def test_the_ratio_is_to_the_best_peer_of_the_same_run() -> None:
    from benchmarks.suite import ratio_to_best_peer

    rates = {
        "schedulinator": {"median": 9000.0, "min": 8000.0, "max": 9500.0, "n": 3},
        "redbeat": {"median": 600.0, "min": 500.0, "max": 700.0, "n": 3},
        "apscheduler-redis": {"median": 3000.0, "min": 2900.0, "max": 3100.0, "n": 3},
        "celery-beat": None,  # not measured: left out
    }
    assert ratio_to_best_peer(rates, higher_is_better=True) == (3.0, "apscheduler-redis")
    times = {
        "schedulinator": {"median": 0.2, "min": 0.1, "max": 0.3, "n": 3},
        "redbeat": {"median": 0.8, "min": 0.7, "max": 0.9, "n": 3},
        "rq-scheduler": {"median": 0.4, "min": 0.3, "max": 0.5, "n": 3},
    }
    assert ratio_to_best_peer(times, higher_is_better=False) == (0.5, "rq-scheduler")
    # Without this app's figure, or without a peer's, there is no ratio.
    assert ratio_to_best_peer({"redbeat": times["redbeat"]}, higher_is_better=False) == (
        None,
        None,
    )
    assert ratio_to_best_peer(
        {"schedulinator": times["schedulinator"]}, higher_is_better=False
    ) == (None, None)


def test_the_table_has_a_column_per_system_and_the_ratio() -> None:
    from benchmarks.suite import render_markdown

    results = {
        "taken": "2026-11-26 10:00 UTC",
        "machine": "2 CPUs",
        "repeat": 3,
        "systems": ["schedulinator", "redbeat"],
        "measures": [
            {"key": "burst", "title": "burst", "unit": "/s", "higher_is_better": True},
            {"key": "idle-1000", "title": "idle", "unit": "ms", "higher_is_better": False},
        ],
        "figures": {
            "burst": {
                "schedulinator": {"median": 9000.0, "min": 8000.0, "max": 9500.0, "n": 3},
                "redbeat": {"median": 600.0, "min": 500.0, "max": 700.0, "n": 3},
            },
            "idle-1000": {"redbeat": {"median": 0.75, "min": 0.7, "max": 0.9, "n": 3}},
        },
        "only_this_app": [("ceiling", {"median": 5.0, "min": 5.0, "max": 5.0, "n": 1}, "/s")],
        "notes": ["celery-beat: not asked to hold 1,000,000 schedules."],
    }
    table = render_markdown(results)
    assert "| measure | schedulinator | redbeat | schedulinator / best peer |" in table
    assert (
        "| burst | 9,000 /s (8,000 to 9,500) | 600.0 /s (500.0 to 700.0) | 15.00x (redbeat) |"
        in (table)
    )
    # A figure that was not measured reads "-", and has no ratio.
    assert "| idle | - | 0.750 ms (0.700 to 0.900) | - |" in table
    assert "| ceiling | 5.000 /s |" in table
    assert table.rstrip().endswith("celery-beat: not asked to hold 1,000,000 schedules.")


def test_only_names_known_systems() -> None:
    import argparse

    from benchmarks.suite import parse_only, plan_for

    assert [s.name for s in parse_only("redbeat, schedulinator")] == ["redbeat", "schedulinator"]
    assert len(parse_only(None)) == 6
    with pytest.raises(argparse.ArgumentTypeError, match="unknown system"):
        parse_only("celery")
    # The quick plan leaves out the million; the full one has it.
    assert max(plan_for(quick=True, smoke=False, repeat=3).sizes) == 100_000
    assert max(plan_for(quick=False, smoke=False, repeat=3).sizes) == 1_000_000


def test_a_figure_without_a_unit_and_a_single_run_reads_plainly() -> None:
    from benchmarks.suite import format_figure

    assert format_figure({"median": 12.5, "min": 12.5, "max": 12.5, "n": 1}, "") == "12.5"
    assert format_figure({"median": 1234.4, "min": 1000.0, "max": 2000.0, "n": 3}, "") == (
        "1,234 (1,000 to 2,000)"
    )
    assert format_figure(None, "ms") == "-"


def test_a_steady_run_gives_rows_for_its_lateness_and_cpu_not_for_its_settings() -> None:
    from benchmarks.suite import steady_figures

    result = {
        "rate": 5000, "total": 100000, "processes": 1, "seconds": 30.0, "warm_up": 10.0,
        "expected": 150005, "fired": 150005, "lost": 0, "doubled": 0, "not_succeeded": 0,
        "fired_per_second": 5000.1,
        "lateness_ms": {"p50": 22.9, "p99": 72.4, "max": 135.8},
        "cpu_ms_per_occurrence": {"schedulers": 0.1102, "postgresql": 0.1471, "redis": 0.0151},
        "cpu_share_of_a_core": {"schedulers": 0.551, "postgresql": 0.736, "redis": 0.076},
        "occurrences_per_pass": 66.3, "transactions_per_occurrence": 0.06,
        "redis_commands_per_occurrence": {"zadd": 2.0},
        "setup": {"schedules_created": 0},
        "exit_codes": [0],
        "taken_at": "2026-11-26T16:31:13+00:00",
    }  # fmt: skip
    figures = {label: (value, unit) for label, value, unit in steady_figures(result)}
    assert figures["lateness p99"] == (72.4, "ms")
    assert figures["lateness max"] == (135.8, "ms")
    assert figures["CPU per occurrence: postgresql"] == (0.1471, "ms")
    assert figures["CPU share of a core: schedulers"] == (0.551, "cores")
    assert figures["fired"] == (150005, "")
    assert figures["lost"] == (0, "")
    assert figures["doubled"] == (0, "")
    # The run's own settings and bookkeeping are in the row's title or nowhere.
    for setting in ("rate", "total", "processes", "seconds", "warm_up", "setup", "exit_codes"):
        assert not any(label.startswith(setting) for label in figures)


# -- benchmarks/dispatchers.py: each dispatcher beside its bare ceiling -------------------------


def test_the_ceiling_is_the_fastest_bare_way_and_the_ratio_pairs_runs_of_one_repeat() -> None:
    from benchmarks.dispatchers import figures, render_markdown

    ways = {
        "inline": {"call": "calling the no-op"},
        "rq": {"enqueue": "a loop", "enqueue_many": "a pipeline"},
    }
    samples = {
        "inline": {"dispatcher": [8000.0, 6000.0, 7000.0], "call": [1e6, 1e6, 1e6]},
        "rq": {
            "dispatcher": [2000.0, 1500.0, 1750.0],
            "enqueue": [3000.0, 3000.0, 3000.0],
            "enqueue_many": [10000.0, 5000.0, 7000.0],
        },
    }
    systems = figures(samples, ways)
    rq = systems["rq"]
    assert rq["ceiling_way"] == "enqueue_many"
    assert rq["ceiling"] == {"median": 7000.0, "min": 5000.0, "max": 10000.0, "n": 3}
    # Each repeat's dispatcher over the same repeat's ceiling: 0.2, 0.3 and 0.25.
    assert rq["ratio"] == pytest.approx({"median": 0.25, "min": 0.2, "max": 0.3, "n": 3})
    assert rq["of_inline"]["median"] == 0.25
    table = render_markdown(
        {
            "taken": "2026-11-26 17:00 UTC",
            "machine": "2 CPUs",
            "load_average_1min": {"min": 1.0, "max": 2.5, "samples": [1.0, 2.5]},
            "versions": {"rq": "3.0.0"},
            "total": 100_000,
            "due": 10_000,
            "repeat": 3,
            "systems": systems,
            "notes": ["celery-amqp: left out, RabbitMQ could not be reached."],
        }
    )
    assert (
        "| rq | 1,750 /s (1,500 to 2,000) | 7,000 /s (5,000 to 10,000) | a pipeline "
        "| 0.25x (0.2 to 0.3) | 0.25x (0.25 to 0.25) |" in table
    )
    assert "Other bare ways measured: rq, a loop: 3,000 /s (3,000 to 3,000)." in table
    assert table.rstrip().endswith("RabbitMQ could not be reached.")
