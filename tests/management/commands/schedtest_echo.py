"""A management command for the tests of the command task: prints its words, and exits
with ``--status N`` when asked to fail."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Print the words given; fail with --status N."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("words", nargs="*")
        parser.add_argument("--status", type=int, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(" ".join(options["words"]))
        self.stderr.write("to stderr")
        if options["status"]:
            raise CommandError("asked to fail", returncode=options["status"])
