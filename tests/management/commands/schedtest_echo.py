"""A management command for the tests of the command task: prints its words, exits with
``--status N`` when asked to fail, raises an unexpected error with ``--crash``, and prints
the words ``--repeat N`` times."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Print the words given; fail with --status N; raise an error with --crash."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("words", nargs="*")
        parser.add_argument("--status", type=int, default=0)
        parser.add_argument("--crash", action="store_true")
        parser.add_argument("--repeat", type=int, default=1, help="print the words N times")

    def handle(self, *args: Any, **options: Any) -> None:
        words = " ".join(options["words"])
        for _ in range(options["repeat"]):
            self.stdout.write(words)
        self.stderr.write("to stderr")
        if options["crash"]:
            raise RuntimeError(f"crashed while printing {words}")
        if options["status"]:
            raise CommandError("asked to fail", returncode=options["status"])
