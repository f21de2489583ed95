"""How long reconcile takes to heal a lost sync write behind a large bulk write.

    python -m benchmarks.reconcile --total 100000
    python -m benchmarks.reconcile --smoke   # a few seconds on tiny sizes (CI)

Creates ``--total`` schedules, builds the index and lets reconcile catch up. Then it touches
every row as docs/concepts.md advises for bulk writes (``update(updated_at=DatabaseNow())``),
saves one more schedule and drops its index entry (a sync write that never landed), and runs
reconcile slices back to back, as the scheduler holding reconcile's turn does while it is
behind, until the entry is back. It prints the slices that took, the rows they read, their
time, and the time to heal: at most RECONCILE_SECONDS until the turn and the settle window
(``reconcile.SETTLE``), plus the slices.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

from benchmarks.run import add_smoke_option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total", type=int, default=100_000)
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="RECONCILE_MAX_SECONDS (default: setting)"
    )
    add_smoke_option(parser)
    options = parser.parse_args()

    from benchmarks.run import start

    if options.smoke:
        options.total = 2000
    index = start(smoke=options.smoke)
    from django.utils import timezone

    from django_schedulinator.conf import app_settings
    from django_schedulinator.index.rebuild import rebuild_index
    from django_schedulinator.index.reconcile import SETTLE, reconcile
    from django_schedulinator.models import Schedule
    from django_schedulinator.models.dbclock import DatabaseNow

    later = timezone.now() + timedelta(days=1)
    chunk = 20_000
    for offset in range(0, options.total, chunk):
        Schedule.objects.bulk_create(
            Schedule(
                name=f"bench-{i}",
                task="bench.noop",
                kind=Schedule.Kind.INTERVAL,
                interval=timedelta(hours=1),
                next_run_at=later,
            )
            for i in range(offset, min(offset + chunk, options.total))
        )
    rebuild_index(index)
    while not reconcile(index, settle=timedelta(0)).caught_up:
        pass

    started = time.perf_counter()
    Schedule.objects.update(updated_at=DatabaseNow())
    print(f"bulk touch of {options.total} rows: {time.perf_counter() - started:.1f}s")
    lost = Schedule(
        name="bench-lost",
        task="bench.noop",
        kind=Schedule.Kind.INTERVAL,
        interval=timedelta(hours=1),
    )
    lost.set_first_run(timezone.now())  # save() decides no first run
    lost.save()
    index.client.zrem(index.due_key, lost.pk)
    index.client.hdel(index.revisions_key, lost.pk)

    # What the scheduler holding reconcile's turn does: a slice of RECONCILE_MAX_SECONDS
    # after each claim pass, back to back, until it has caught up (its claim passes, short
    # when idle, are left out). The rows count as settled at once: the settle window is a
    # wait, not work, and is added to the bound below.
    slices = rows = 0
    spent = 0.0
    while index.scores([lost.pk])[lost.pk] is None:
        started = time.perf_counter()
        report = reconcile(index, max_seconds=options.max_seconds, settle=timedelta(0))
        spent += time.perf_counter() - started
        slices, rows = slices + 1, rows + report.rows
    period = app_settings.RECONCILE_SECONDS + SETTLE.total_seconds()
    budget = (
        app_settings.RECONCILE_MAX_SECONDS if options.max_seconds is None else options.max_seconds
    )
    print(
        f"healed after {slices} slice(s) of {budget:g}s (batch "
        f"{app_settings.RECONCILE_BATCH_SIZE}): {rows} rows read in {spent:.1f}s "
        f"({rows / spent:,.0f} rows/s); healed within {period + spent:.0f}s of the lost write "
        f"at RECONCILE_SECONDS={app_settings.RECONCILE_SECONDS:g} (a turn, the settle window "
        f"of {SETTLE.total_seconds():g}s, then the slices)"
    )
    index.drop()


if __name__ == "__main__":
    main()
