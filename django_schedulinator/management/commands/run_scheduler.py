"""``manage.py run_scheduler``: a thin command around the Worker."""

from __future__ import annotations

import argparse
import errno
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from django_schedulinator.conf import Setting, Settings
from django_schedulinator.errors import OutdatedZoneRules
from django_schedulinator.scheduler.worker import Worker
from django_schedulinator.services import replan_for_zone_rules, sync_declared

if TYPE_CHECKING:
    from django_schedulinator.operations.probes import ProbeServer

logger = logging.getLogger("django_schedulinator.declared")

# Where --metrics-port listens unless --metrics-addr says otherwise: this host only. The
# metrics say what runs here and when, with no authentication; exposing them is a choice
# (a pod's address, --metrics-addr 0.0.0.0, for Prometheus and the kubelet's probes).
DEFAULT_METRICS_ADDR = "127.0.0.1"
METRICS_EXTRA = "pip install 'django-schedulinator[metrics]'"

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


def port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0-65535 (0: a free port), got {number}")
    return number


def whole_number_up_to(maximum: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to ``maximum``."""

    def parse(value: str) -> int:
        number = positive_int(value)
        if number > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {number}")
        return number

    return parse


def within(setting: Setting[int]) -> Callable[[str], int]:
    """An argparse type for an option that stands in for ``setting``, a whole number from 1:
    the setting's own bounds."""
    low, high = setting.bounds()
    if low != 1:
        raise TypeError(f"{setting.name} does not start at 1")
    return whole_number_up_to(high)


batch_size = within(Settings.BATCH_SIZE)


# Options whose values call_command() passes through unconverted: the types they must have.
NUMBER_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "batch_size": int,
    "lease": (int, float),
    "max_runs": int,
    "max_seconds": (int, float),
    "metrics_port": int,
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
        parser.add_argument(
            "--metrics-port",
            type=port,
            default=None,
            metavar="PORT",
            help="Serve /metrics (Prometheus), /healthz and /readyz on this port (0: a free "
            "port, logged). Needs the metrics extra.",
        )
        parser.add_argument(
            "--metrics-addr",
            default=None,
            metavar="ADDR",
            help=f"The address --metrics-port listens on (default: {DEFAULT_METRICS_ADDR}; "
            "0.0.0.0 for Prometheus and probes from other hosts, as in Kubernetes).",
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
        metrics_port, metrics_addr = options["metrics_port"], options["metrics_addr"]
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise CommandError(f"--metrics-port must be 0-65535, got {metrics_port!r}.")
        if metrics_addr is not None:
            if metrics_port is None:
                raise CommandError("--metrics-addr needs --metrics-port.")
            if not isinstance(metrics_addr, str) or not metrics_addr.strip():
                raise CommandError("--metrics-addr must be a host name or an IP address.")
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
        server = None
        if metrics_port is not None:
            # Before anything runs: a port in use fails the start, not a running loop.
            server = serve_metrics(worker, metrics_port, metrics_addr or DEFAULT_METRICS_ADDR)
        try:
            check_zone_rules()
            sync_declared_schedules()
            worker.run()
        finally:
            if server is not None:
                server.close()
        if worker.exit_error:
            raise CommandError(worker.exit_error)


def serve_metrics(worker: Worker, port: int, addr: str) -> ProbeServer:
    """Start the metrics and probes server, or fail with what to do."""
    try:
        from django_schedulinator.operations.metrics import serve
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "prometheus_client":
            raise
        raise CommandError(
            f"--metrics-port needs prometheus-client, which is not installed; install it "
            f"with: {METRICS_EXTRA}"
        ) from exc
    where = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
    try:
        return serve(worker, port=port, addr=addr)
    except socket.gaierror as exc:
        raise CommandError(
            f"--metrics-addr {addr!r} is not an address of this host: {exc.strerror}."
        ) from exc
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CommandError(
                f"Cannot serve metrics on {where}: the port is in use (by another scheduler "
                f"on this host?). Give each scheduler a port of its own, or --metrics-port 0 "
                f"for a free one."
            ) from exc
        raise CommandError(f"Cannot serve metrics on {where}: {exc.strerror or exc}.") from exc


def check_zone_rules() -> None:
    """Before the first claim: if the time-zone database is not the one the next runs were
    computed with, re-plan the schedules of the zones whose rules changed (docs/scheduling.md,
    "When a zone's rules change"). A failure is logged, and the scheduler goes on."""
    try:
        replan_for_zone_rules()
    except OutdatedZoneRules as exc:  # this process must not plan at all
        raise CommandError(str(exc)) from exc
    except Exception:
        logger.exception(
            "Could not compare the time-zone database with the one the next runs were "
            "computed with; going on with the next runs as they are."
        )


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
