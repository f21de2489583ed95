"""``manage.py rebuild_due_index``: build the Redis due index from the schedule rows."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from django_schedulinator.conf import Settings, app_settings
from django_schedulinator.errors import RebuildInProgress
from django_schedulinator.index.rebuild import rebuild_index
from django_schedulinator.management.commands.run_scheduler import within
from django_schedulinator.models import Schedule

chunk_size = within(Settings.REBUILD_CHUNK_SIZE)


class Command(BaseCommand):
    help = (
        "Build the due index from SQL. Idempotent and safe while schedulers run; the upgrade "
        "step for existing data."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Report what would be added, removed and fixed; change nothing.",
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Drop the index first (after restoring the database from a "
            "backup, when the index holds revisions newer than the rows).",
        )
        parser.add_argument(
            "--chunk-size",
            type=chunk_size,
            default=None,
            help="Rows per chunk (default: settings REBUILD_CHUNK_SIZE).",
        )
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["dry_run"] and options["reset"]:
            raise CommandError("--dry-run and --reset cannot be combined.")
        size = options["chunk_size"]
        # call_command(chunk_size=...) skips argparse; 0 would silently mean the default.
        low, high = Settings.REBUILD_CHUNK_SIZE.bounds()
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, int) or not low <= size <= high
        ):
            raise CommandError(
                f"--chunk-size must be a whole number from {low} to {high}, got {size!r}."
            )
        total = Schedule.objects.count()
        # tqdm hides itself when stderr is not a terminal (disable=None).
        bar = tqdm(total=total, unit="rows", disable=True if options["no_progress"] else None)
        try:
            report = rebuild_index(
                dry_run=options["dry_run"],
                reset=options["reset"],
                chunk_size=options["chunk_size"],
                progress=bar.update,
            )
        except RebuildInProgress as exc:
            raise CommandError(str(exc)) from exc
        except Exception as exc:
            raise CommandError(f"Rebuild failed: {exc}") from exc
        finally:
            bar.close()

        if report.layout_changed_from is not None:
            shards = app_settings.INDEX_SHARDS
            self.stdout.write(
                f"The due index was built for {report.layout_changed_from} shard(s); "
                f"INDEX_SHARDS is {shards}: "
                + (
                    f"a rebuild drops the entries of the old layout and builds {shards}."
                    if report.dry_run
                    else f"dropped the entries of the old layout, and built {shards}."
                )
            )
        verb = "Would" if report.dry_run else "Did"
        self.stdout.write(
            f"{verb} scan {report.rows} schedules in {report.seconds:.2f}s: "
            f"add {report.added}, fix {report.fixed}, remove {report.removed}, "
            f"remove orphans {report.orphans}, unchanged {report.unchanged}."
        )
        if options["verbosity"] >= 2 or report.dry_run:
            for kind in ("added", "fixed", "removed", "orphans"):
                ids = report.examples.get(kind)
                if ids:
                    more = " ..." if getattr(report, kind) > len(ids) else ""
                    self.stdout.write(f"  {kind}: schedule ids {ids}{more}")
        if report.stale:
            were = "would not be" if report.dry_run else "were not"
            self.stderr.write(
                f"{report.stale} entries {were} written because the index holds a newer "
                "revision than the row read. If the database was restored from a backup, "
                "run again with --reset."
            )
        if not report.dry_run:
            self.stdout.write(self.style.SUCCESS("The due index is built."))
