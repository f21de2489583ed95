"""``manage.py partition_runs``: the run ledger partitioned by day on PostgreSQL, or back."""

from __future__ import annotations

import math
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, router

from django_schedulinator.conf import app_settings
from django_schedulinator.errors import LedgerLayoutError
from django_schedulinator.index import clock
from django_schedulinator.models import Run
from django_schedulinator.operations import partitions

MAX_DAYS = 3660


def days(value: str) -> int:
    number = int(value)
    if not 0 <= number <= MAX_DAYS:
        raise ValueError(value)
    return number


days.__name__ = "number of days (0 to 3660)"


class Command(BaseCommand):
    help = (
        "Partition the run ledger by day (PostgreSQL), so that retention drops whole days "
        "instead of deleting runs; --undo makes it one table again. Each copies every run "
        "in one transaction that locks the ledger: stop the schedulers first, and start "
        "them after (each reads the ledger's layout when it connects)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--undo", action="store_true", help="Make the ledger one plain table again."
        )
        parser.add_argument(
            "--days-behind",
            type=days,
            default=None,
            metavar="N",
            help="Partitions for the N days before today; older runs go to the default "
            "partition, which retention prunes by deleting (default: the days of "
            "RUN_RETENTION_SECONDS, plus one).",
        )
        parser.add_argument(
            "--days-ahead",
            type=days,
            default=partitions.DAYS_AHEAD,
            metavar="N",
            help=f"Partitions for the N days after today (default: {partitions.DAYS_AHEAD}; "
            "the schedulers' prune chore makes the next ones as days pass).",
        )
        parser.add_argument("--database", default=None, help="The database of the ledger.")

    def handle(self, *args: Any, **options: Any) -> None:
        using = options["database"] or router.db_for_write(Run)
        started = time.monotonic()
        try:
            if options["undo"]:
                done = partitions.unpartition(using=using)
                self.stdout.write(
                    f"The ledger is one table again: {done.runs:,} run(s) copied from "
                    f"{len(done.days)} day partition(s) and the default one, in "
                    f"{time.monotonic() - started:.1f}s. Restart the schedulers: each reads "
                    "the ledger's layout when it connects."
                )
                return
            behind = options["days_behind"]
            if behind is None:
                retention = app_settings.RUN_RETENTION_SECONDS
                behind = 1 if retention is None else math.ceil(retention / 86_400) + 1
            today = clock.now().date()  # Redis TIME, as every due decision
            done = partitions.partition(
                today=today, days_behind=behind, days_ahead=options["days_ahead"], using=using
            )
        except LedgerLayoutError as exc:
            raise CommandError(f"{exc}.") from exc
        except DatabaseError as exc:
            raise CommandError(
                f"Nothing changed (the conversion is one transaction): {type(exc).__name__}: {exc}"
            ) from exc
        self.stdout.write(
            f"The ledger is partitioned by day: {len(done.days)} partition(s), "
            f"{done.days[0]} to {done.days[-1]} (UTC), and a default one; {done.runs:,} "
            f"run(s) copied in {time.monotonic() - started:.1f}s. Retention now drops each "
            "day whole once it has passed RUN_RETENTION_SECONDS. Restart the schedulers: "
            "each reads the ledger's layout when it connects. Undo with "
            "'manage.py partition_runs --undo'."
        )
