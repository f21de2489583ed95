"""The built-in task that runs a Django management command, limited to an allowlist.

A schedule of the task ``django_schedulinator.command`` has the command and its arguments
as its args: ``["clearsessions"]``, ``["dumpdata", "auth", "--output", "/backups/auth.json"]``.
Only the commands named in ``SCHEDULINATOR["COMMANDS"]`` run: a schedule naming another is
refused when it is saved, and the task refuses it again when it runs (the allowlist may have
changed since), so nothing outside the list can be run whatever the args say. The command
runs with ``call_command`` in the process that runs the task, its output captured: the run
records the exit status and the output (the last 4,000 characters), as its output when it
succeeds and as its error when it fails.
"""

from __future__ import annotations

import io
import shlex
from typing import Any

from django.core.management import call_command, get_commands
from django.core.management.base import CommandError

from .conf import app_settings
from .errors import SchedulinatorError
from .registry import task

NAME = "django_schedulinator.command"
MAX_OUTPUT_CHARS = 4000


class CommandRefused(SchedulinatorError):
    """The command is not in the allowlist (or not a command at all)."""


class CommandFailed(SchedulinatorError):
    """The command exited with a status other than 0; the message has its output."""


def check_args(args: Any, kwargs: Any) -> dict[str, str]:
    """What is wrong with a schedule's arguments for the command task ({} if nothing)."""
    example = '["clearsessions"] or ["dumpdata", "auth", "--output", "auth.json"]'
    if kwargs:
        return {"kwargs": f"The command task takes no kwargs: give args, for example {example}."}
    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        return {"args": f"Give the command and its arguments as text, for example {example}."}
    problem = refusal(args[0])
    return {"args": problem} if problem else {}


def refusal(command: str) -> str:
    """Why ``command`` may not run ("" if it may)."""
    allowed = app_settings.COMMANDS
    if command not in allowed:
        listed = ", ".join(allowed) if allowed else "it is empty"
        return (
            f"The management command {command!r} is not in SCHEDULINATOR['COMMANDS'] "
            f"({listed}): add it there to schedule it."
        )
    if command not in get_commands():
        return f"{command!r} is in SCHEDULINATOR['COMMANDS'] but is not a management command."
    return ""


@task(name=NAME, check_args=check_args)
def run_command(command: str, *args: str) -> str:
    """Run an allowed management command; its exit status and output, as text."""
    problem = refusal(command)
    if problem:
        raise CommandRefused(problem)
    shown = "manage.py " + shlex.join([command, *args])
    out = io.StringIO()
    status = 0
    try:
        call_command(command, *args, stdout=out, stderr=out)
    except CommandError as exc:
        status = exc.returncode
        out.write(f"CommandError: {exc}\n")
    except SystemExit as exc:  # a command that calls sys.exit(): None and 0 are success
        if isinstance(exc.code, int) or exc.code is None:
            status = exc.code or 0
        else:  # sys.exit("message"): printed, status 1
            status = 1
            out.write(f"{exc.code}\n")
    report = f"{shown}: exit status {status}\n{out.getvalue()}"
    if len(report) > MAX_OUTPUT_CHARS:
        report = f"{shown}: exit status {status}\n...{out.getvalue()[-MAX_OUTPUT_CHARS:]}"
    if status:
        raise CommandFailed(report)
    return report
