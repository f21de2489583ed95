"""``manage.py run_scheduler``: a thin command around the Worker."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...conf import MAX_BATCH_SIZE
from ...services import sync_declared
from ...worker import Worker

logger = logging.getLogger("django_schedulinator.declared")

VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return number


def batch_size(value: str) -> int:
    number = positive_int(value)
    if number > MAX_BATCH_SIZE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BATCH_SIZE}, got {number}")
    return number


# Options whose values call_command() passes through unconverted: the types they must have.
NUMBER_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "batch_size": int,
    "lease": (int, float),
    "max_runs": int,
    "max_seconds": (int, float),
}


def configure_logging(verbosity: int) -> None:
    """Map --verbosity onto the package logger, unless the project's LOGGING handles it."""
    logger = logging.getLogger("django_schedulinator")
    logger.setLevel(VERBOSITY_LEVELS.get(verbosity, logging.DEBUG))
    if not logger.hasHandlers():  # neither it nor an ancestor (root) has a handler
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


class Command(BaseCommand):
    help = "Claim due schedules from the Redis index and fire them. Run as many as you like."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--batch-size",
            type=batch_size,
            default=None,
            help="Entries claimed per pass (default: settings BATCH_SIZE).",
        )
        parser.add_argument(
            "--lease",
            type=positive_float,
            default=None,
            metavar="SECONDS",
            help="How long claimed work stays leased to this process.",
        )
        parser.add_argument("--once", action="store_true", help="Fire what is due now, then exit.")
        parser.add_argument(
            "--max-runs",
            type=positive_int,
            default=None,
            help="Exit after firing this many occurrences.",
        )
        parser.add_argument(
            "--max-seconds", type=positive_float, default=None, help="Exit after running this long."
        )
        parser.add_argument(
            "--worker-id", default=None, help="Name recorded on runs (default: hostname:pid)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # call_command(..., batch_size="10") skips argparse and its type conversion.
        for option, kind in NUMBER_OPTIONS.items():
            value = options[option]
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                flag = "--" + option.replace("_", "-")
                what = "a whole number" if kind is int else "a number"
                raise CommandError(f"{flag} ({option}) must be {what}, got {value!r}.")
        configure_logging(options["verbosity"])
        worker_id = options["worker_id"]
        if worker_id is not None and not (
            isinstance(worker_id, str) and 0 < len(worker_id) <= 200 and worker_id.isprintable()
        ):
            raise CommandError("--worker-id must be 1-200 printable characters.")
        try:
            worker = Worker(
                batch_size=options["batch_size"],
                lease_seconds=options["lease"],
                once=options["once"],
                max_runs=options["max_runs"],
                max_seconds=options["max_seconds"],
                worker_id=worker_id,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        sync_declared_schedules()
        worker.run()


def sync_declared_schedules() -> None:
    """The schedules declared in code, synced before the first claim (every scheduler does
    it: the sync is idempotent). A database that is away now does not stop the scheduler,
    which waits it out; the next start, ``migrate`` or ``sync_schedules`` syncs them."""
    try:
        sync_declared()
    except Exception:
        logger.exception(
            "Could not sync the schedules declared in code; going on with the table as it is."
        )
