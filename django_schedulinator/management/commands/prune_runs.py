"""``manage.py prune_runs``: delete old runs (and change log entries) in bounded batches."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from tqdm import tqdm

from django_schedulinator.conf import Settings, app_settings
from django_schedulinator.index import clock
from django_schedulinator.management.commands.run_scheduler import within
from django_schedulinator.operations.retention import PruneReport, parse_age, prune


def age(value: str) -> timedelta:
    try:
        return parse_age(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


keep_last = within(Settings.RUN_KEEP_LAST)
batch_size = within(Settings.PRUNE_BATCH_SIZE)


class Command(BaseCommand):
    help = (
        "Delete runs that ended before an age, in short batches, keeping each schedule's "
        "newest runs and every run not finished; safe while schedulers run."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--older-than",
            type=age,
            default=None,
            metavar="AGE",
            help="Delete runs recorded (ended, handed off or skipped) longer ago than this: "
            "30d, 12h, 90m or 3600s (default: settings RUN_RETENTION_SECONDS).",
        )
        parser.add_argument(
            "--keep-last",
            type=keep_last,
            default=None,
            metavar="N",
            help="Keep each schedule's N newest runs, whatever their age (default: settings "
            "RUN_KEEP_LAST).",
        )
        parser.add_argument(
            "--changes-older-than",
            type=age,
            default=None,
            metavar="AGE",
            help="Also delete change log entries older than this (each schedule keeps its "
            "newest entry and the one that created it; default: settings "
            "CHANGE_RETENTION_SECONDS, as the schedulers' retention does).",
        )
        parser.add_argument(
            "--batch-size",
            type=batch_size,
            default=None,
            metavar="N",
            help=f"Rows per batch, one short DELETE each, at most "
            f"{Settings.PRUNE_BATCH_SIZE.bounds()[1]:,} "
            "(default: settings PRUNE_BATCH_SIZE).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        # call_command() passes the optional options through unconverted.
        # Each age not given is the setting's: the command does what the schedulers'
        # retention does, unless told otherwise.
        run_age = _age_option(options["older_than"], "--older-than") or _setting_age(
            app_settings.RUN_RETENTION_SECONDS
        )
        change_age = _age_option(
            options["changes_older_than"], "--changes-older-than"
        ) or _setting_age(app_settings.CHANGE_RETENTION_SECONDS)
        keep = options["keep_last"]
        if keep is None:
            keep = app_settings.RUN_KEEP_LAST
        size = options["batch_size"]
        if run_age is None:
            raise CommandError(
                "Give --older-than: the schedulers' retention is off "
                "(SCHEDULINATOR['RUN_RETENTION_SECONDS'] is None), so no age is the default."
            )
        now = clock.now()  # Redis TIME, as every due decision; the host's if unreachable
        deleted = PruneReport()
        # tqdm hides itself when stderr is not a terminal (disable=None).
        bar = tqdm(unit=" rows", desc="read", disable=True if options["no_progress"] else None)

        def progress(batch: PruneReport) -> None:
            deleted.add(batch)
            bar.update(batch.read)
            bar.set_postfix(deleted=f"{deleted.runs + deleted.changes:,}", refresh=False)

        try:
            report = prune(
                now=now,
                run_age=run_age,
                keep_last=keep,
                change_age=change_age,
                batch_size=size,
                dry_run=options["dry_run"],
                progress=progress,
            )
        except ValueError as exc:  # options given to call_command() out of range
            raise CommandError(str(exc)) from exc
        except DatabaseError as exc:
            # Each batch is its own transaction: those before the error stay deleted.
            raise CommandError(
                f"Prune failed after deleting {deleted.runs:,} run(s) and {deleted.changes:,} "
                f"change log entries, in whole batches; run it again. {type(exc).__name__}: "
                f"{exc}"
            ) from exc
        finally:
            bar.close()
        verb = "Would delete" if report.dry_run else "Deleted"
        line = (
            f"{verb} {report.runs:,} run(s) recorded before {now - run_age:%Y-%m-%d %H:%M:%S} "
            f"UTC, keeping each schedule's newest {keep}, every run not finished, and every "
            "run that still guards an occurrence"
        )
        if change_age is not None:
            line += (
                f", and {report.changes:,} change log entr{'y' if report.changes == 1 else 'ies'}"
                f" older than {now - change_age:%Y-%m-%d %H:%M:%S} UTC"
            )
        if report.days:
            line += f" ({report.days:,} day(s) of the partitioned ledger dropped whole)"
        self.stdout.write(
            f"{line}. Read {report.read:,} rows in {report.batches:,} batch(es), "
            f"{report.seconds:.1f}s."
        )


def _age_option(value: Any, flag: str) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        if isinstance(value, timedelta) and value <= timedelta(0):
            raise CommandError(f"{flag} must be positive, got {value!r}.")
        return value
    if isinstance(value, str):
        try:
            return parse_age(value)
        except ValueError as exc:
            raise CommandError(f"{flag}: {exc}.") from exc
    raise CommandError(f"{flag} must be an age such as 30d, got {value!r}.")


def _setting_age(seconds: float | None) -> timedelta | None:
    """A retention setting's age (None: that retention is off)."""
    return None if seconds is None else timedelta(seconds=seconds)
