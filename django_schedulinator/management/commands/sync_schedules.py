"""``manage.py sync_schedules``: make the table match the schedules declared in code."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_schedulinator.services import sync_declared


class Command(BaseCommand):
    help = (
        "Create, update and pause schedules so that the table matches those declared in code "
        "(@scheduled and SCHEDULINATOR['SCHEDULES']). migrate and run_scheduler do it too. "
        "Exits non-zero when a declaration is invalid or clashes with a schedule made by hand."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print what would be created, changed, resumed and paused; change nothing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = bool(options["dry_run"])
        plan = sync_declared(dry_run=dry_run)
        prefix = "would " if dry_run else ""
        for line in plan.lines():
            self.stdout.write(prefix + line)
        if not plan:
            self.stdout.write("The schedules declared in code are in the table as declared.")
        if plan.problems:
            for problem in plan.problems:
                self.stderr.write(f"error: {problem}")
            raise CommandError(
                f"{len(plan.problems)} declaration(s) could not be synced; the others "
                + ("would be." if dry_run else "were.")
            )
