"""The built-in task that runs a Django management command, limited to an allowlist of
commands and of what each may be given.

A schedule of the task ``django_schedulinator.command`` has the command and its arguments
as its args: ``["clearsessions"]``, ``["dumpdata", "auth", "--indent", "2"]``.
``SCHEDULINATOR["COMMANDS"]`` names each command that may run and what its schedules may
pass: the exact positional values, and the options by full name with the exact values each
may take (or as flags). Any other argument, any other option (an abbreviation, a short
form, Django's ``--settings``) is refused: when a schedule is saved, and again when the task
runs (the setting may have changed since, or the row been written around the services). So
whatever the args say, a command does only what its entry allows. Each option is handed to
``call_command`` as one ``--name=value`` word, so argparse reads the arguments exactly as
they were checked, and an entry that disagrees with the command's own parser (a flag listed
for an option that takes a value) is refused.

The command runs with ``call_command`` in the process that runs the task, its output
captured. The run records the exit status; what the command printed (as much of its end as
fits in 4,000 characters) is kept, as its output or in its error, only when the command's entry sets
``keep_output``: a run is read by anyone who may view runs, who need not be allowed to read
what the command prints.
"""

from __future__ import annotations

import argparse
import io
import logging
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError

from django_schedulinator.conf import AllowedCommand, Setting, Settings, app_settings
from django_schedulinator.errors import CommandFailed, CommandRefused
from django_schedulinator.registry import task

NAME = "django_schedulinator.command"
MAX_OUTPUT_CHARS = 4000

logger = logging.getLogger("django_schedulinator.command_task")

# An option in SCHEDULINATOR["COMMANDS"] is named in full, the way argparse matches it
# exactly: no short form (-o), no value (=).
LONG_OPTION_RE = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_\-]*$")
COMMAND_ENTRY_KEYS = ("args", "options", "keep_output")


def parse_commands(
    setting: Setting[dict[str, AllowedCommand]], value: Any
) -> dict[str, AllowedCommand]:
    """SCHEDULINATOR["COMMANDS"]: each allowed command with what its schedules may pass."""
    if isinstance(value, list | tuple):  # the form before arguments were allowlisted
        as_dict: dict[str, dict[str, Any]] = {n: {} for n in value if isinstance(n, str)}
        raise setting.error(
            f"is a list; it is now a dict of each command and what its schedules may pass "
            f"({{}}: no arguments), for example {as_dict!r}; see docs/upgrading.md"
        )
    if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
        raise setting.error(
            f"must be a dict of management command names, each with what its schedules "
            f"may pass, got {value!r}"
        )
    return {name: _allowed_command(setting, name, entry) for name, entry in value.items()}


def _allowed_command(setting: Setting[Any], name: str, entry: Any) -> AllowedCommand:
    """One entry of COMMANDS, checked; the error names the entry and what is wrong with it."""
    where = f"[{name!r}]"
    if not isinstance(entry, dict):
        raise setting.error(
            f"{where} must be a dict of what its schedules may pass ({{}} for no arguments; "
            f"keys: {', '.join(COMMAND_ENTRY_KEYS)}), got {entry!r}"
        )
    setting.refuse_unknown_keys(entry, COMMAND_ENTRY_KEYS, where)
    args = entry.get("args", [])
    if not isinstance(args, list | tuple) or not all(isinstance(a, str) for a in args):
        raise setting.error(f"{where}['args'] must be a list of text, got {args!r}")
    for arg in args:
        if arg.startswith("-"):
            raise setting.error(
                f"{where}['args'] has {arg!r}, which starts with '-': an option goes in "
                f"{where}['options'] with the values it may take"
            )
    options = entry.get("options", {})
    if not isinstance(options, dict):
        raise setting.error(f"{where}['options'] must be a dict, got {options!r}")
    allowed: dict[str, tuple[str, ...] | None] = {}
    for option, values in options.items():
        if not isinstance(option, str) or not LONG_OPTION_RE.match(option):
            raise setting.error(
                f"{where}['options'] has {option!r}: name each option in full, as --name "
                f"(no short form, no value)"
            )
        if values is True:
            allowed[option] = None
        elif (
            isinstance(values, list | tuple) and values and all(isinstance(v, str) for v in values)
        ):
            allowed[option] = tuple(values)
        else:
            raise setting.error(
                f"{where}['options'][{option!r}] must be True (a flag) or a non-empty list of "
                f"the values it may take, got {values!r}"
            )
    keep_output = entry.get("keep_output", False)
    if not isinstance(keep_output, bool):
        raise setting.error(f"{where}['keep_output'] must be True or False, got {keep_output!r}")
    return AllowedCommand(tuple(args), allowed, keep_output)


Settings.COMMANDS.parsed_by(parse_commands)


def check_args(args: Any, kwargs: Any) -> dict[str, str]:
    """What is wrong with a schedule's arguments for the command task ({} if nothing)."""
    example = '["clearsessions"] or ["dumpdata", "auth", "--indent", "2"]'
    if kwargs:
        return {"kwargs": f"The command task takes no kwargs: give args, for example {example}."}
    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        return {"args": f"Give the command and its arguments as text, for example {example}."}
    problem = refusal(args[0], args[1:])
    return {"args": problem} if problem else {}


def refusal(command: str, args: Sequence[str]) -> str:
    """Why ``command`` may not run with ``args`` ("" if it may)."""
    try:
        allowed_call(command, args)
    except CommandRefused as exc:
        return str(exc)
    return ""


def allowed_call(command: str, args: Sequence[str]) -> tuple[AllowedCommand, list[str]]:
    """The command's entry in COMMANDS, and the arguments to hand to ``call_command`` (each
    option one ``--name=value`` word); CommandRefused says what the entry does not allow."""
    commands = app_settings.COMMANDS
    allowed = commands.get(command)
    if allowed is None:
        listed = ", ".join(commands) if commands else "it is empty"
        raise CommandRefused(
            f"The management command {command!r} is not in SCHEDULINATOR['COMMANDS'] "
            f"({listed}): add it there to schedule it."
        )
    where = f"SCHEDULINATOR['COMMANDS'][{command!r}]"
    words: list[str] = []
    rest = iter(args)
    for arg in rest:
        if not arg.startswith("-"):
            if arg not in allowed.args:
                raise CommandRefused(
                    f"{arg!r} is not an argument {where} allows ({_listing(allowed.args)})."
                )
            words.append(arg)
            continue
        # An option is matched by its full name only: argparse would also take an
        # abbreviation (--out for --output) or a short form with its value (-o/tmp/x).
        name, has_value, value = arg.partition("=")
        if name not in allowed.options:
            raise CommandRefused(
                f"{name!r} is not an option {where} allows ({_listing(allowed.options)}); "
                f"options are matched by their full name."
            )
        values = allowed.options[name]
        if values is None:
            if has_value:
                raise CommandRefused(f"{arg!r}: {name} is a flag and takes no value.")
            words.append(name)
            continue
        shown = arg
        if not has_value:
            following = next(rest, None)
            if following is None:
                raise CommandRefused(f"{name!r} needs a value: {where} allows {_quoted(values)}.")
            value, shown = following, f"{name} {following}"
        if value not in values:
            raise CommandRefused(f"{shown!r}: {where} allows {name} only with {_quoted(values)}.")
        words.append(f"{name}={value}")
    used = {word.partition("=")[0] for word in words if word.startswith("-")}
    problems = disagreements(command, allowed, used)
    if problems:
        raise CommandRefused(problems[0])
    return allowed, words


def disagreements(
    command: str, allowed: AllowedCommand, options: Iterable[str] | None = None
) -> list[str]:
    """Where the entry of ``command`` disagrees with the command itself: it is no management
    command, or the command's parser reads one of ``options`` (default: all it lists)
    otherwise (a flag listed for an option that takes a value would let the next argument
    become that value unchecked)."""
    if command not in get_commands():
        return [f"{command!r} is in SCHEDULINATOR['COMMANDS'] but is not a management command."]
    names = sorted(allowed.options if options is None else options)
    if not names:
        return []
    parser = load_command_class(get_commands()[command], command).create_parser(
        "manage.py", command
    )
    # argparse lists its options only in _actions; call_command reads them there too.
    actions: dict[str, argparse.Action] = {
        option: action for action in parser._actions for option in action.option_strings
    }
    where = f"SCHEDULINATOR['COMMANDS'][{command!r}]['options']"
    problems = []
    for name in names:
        action = actions.get(name)
        if action is None:
            problems.append(f"{where} lists {name}, which {command} does not take.")
        elif allowed.options[name] is None and action.nargs != 0:
            problems.append(
                f"{where} lists {name} as a flag (True), but the command's {name} takes a "
                f"value: list the values it may take."
            )
        elif allowed.options[name] is not None and action.nargs == 0:
            problems.append(
                f"{where} lists values for {name}, but the command's {name} is a flag: list "
                f"it as True."
            )
    return problems


def _listing(values: Iterable[str]) -> str:
    quoted = _quoted(values)
    return f"it allows: {quoted}" if quoted else "it allows none"


def _quoted(values: Iterable[str]) -> str:
    return ", ".join(shlex.quote(v) for v in values)


class _Tail(io.TextIOBase):
    """The last ``limit`` characters written (none with 0): a command that prints a lot holds
    no more than that in memory, and one whose output is not kept holds nothing."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.text = ""
        self.cut = False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.limit:
            joined = self.text + text
            self.cut = self.cut or len(joined) > self.limit
            self.text = joined[-self.limit :]
        return len(text)


def _with_output(first_line: str, out: _Tail) -> str:
    """The first line, then as much of the end of the output as fits in MAX_OUTPUT_CHARS
    (what is left out is marked "..."): dispatchers keep the end of a longer text."""
    room = MAX_OUTPUT_CHARS - len(first_line) - len("\n...")
    if not out.cut and len(out.text) <= room + len("..."):
        return f"{first_line}\n{out.text}"
    return f"{first_line}\n...{out.text[-room:] if room > 0 else ''}"


@task(name=NAME, check_args=check_args)
def run_command(command: str, *args: str) -> str:
    """Run an allowed management command; its exit status (and output, if kept), as text."""
    allowed, words = allowed_call(command, args)
    shown = "manage.py " + shlex.join([command, *args])
    not_kept = f"(output not kept: SCHEDULINATOR['COMMANDS'][{command!r}] does not set keep_output)"
    out = _Tail(MAX_OUTPUT_CHARS if allowed.keep_output else 0)
    status, why = 0, ""
    try:
        call_command(command, *words, stdout=out, stderr=out)
    except CommandError as exc:
        status, why = exc.returncode, f"CommandError: {exc}"
    except SystemExit as exc:  # a command that calls sys.exit(): None and 0 are success
        if isinstance(exc.code, int) or exc.code is None:
            status = exc.code or 0
        else:  # sys.exit("message"): printed, status 1
            status, why = 1, str(exc.code)
    except Exception as exc:
        if allowed.keep_output:
            raise
        # Its message may hold what the command read: the run says only the error's type;
        # the traceback goes to the log of the process that ran it.
        logger.exception("%s raised %s %s.", shown, type(exc).__name__, not_kept)
        raise CommandFailed(f"{shown}: raised {type(exc).__name__} {not_kept}") from None
    if not allowed.keep_output:
        if status:
            logger.warning("%s: exit status %s %s: %s", shown, status, not_kept, why)
            raise CommandFailed(f"{shown}: exit status {status} {not_kept}")
        return f"{shown}: exit status {status} {not_kept}"
    if why:
        out.write(f"{why}\n")
    report = _with_output(f"{shown}: exit status {status}", out)
    if status:
        raise CommandFailed(report)
    return report
