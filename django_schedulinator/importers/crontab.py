"""From a crontab file: the lines that run ``manage.py <command>`` become schedules of the
built-in command task.

A line is five time fields (or a macro: ``@hourly``, ``@daily``, ``@midnight``, ``@weekly``,
``@monthly``, ``@yearly``, ``@annually``) and a shell command. The command is read with
shell quoting; the part that runs ``manage.py`` (or ``django-admin``) gives the management
command and its arguments, up to the first shell operator (``&&``, ``;``, ``|``, a
redirection). A system crontab's user column (``/etc/crontab``, ``/etc/cron.d``) is
recognised and dropped. ``CRON_TZ=`` and ``TZ=`` lines set the zone of the lines after
them. Everything else is reported, not imported: a line that runs no ``manage.py``,
``@reboot``, a command outside ``SCHEDULINATOR["COMMANDS"]`` (the command task's
allowlist), a line that cannot be parsed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import PurePath
from typing import Any

from ..command_task import NAME as COMMAND_TASK
from ..command_task import refusal
from . import Found

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
SHELL_OPERATORS = re.compile(r"^(&&|\|\||;|\||&|\d?>>?.*|<.*|2>&1)$")
ENVIRONMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
DJANGO_ENTRY_POINTS = ("manage.py", "django-admin", "django-admin.py")


def from_file(text: str, path: str, timezone: str) -> Iterator[Found]:
    """The ``manage.py`` lines of a crontab (``timezone``: the zone of its times, until a
    ``CRON_TZ=`` or ``TZ=`` line says another)."""
    names: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        source = f"{PurePath(path).name}:{number}"
        variable = ENVIRONMENT.match(stripped)  # NAME=value (a schedule starts otherwise)
        if variable:
            name, value = variable.groups()
            if name in ("CRON_TZ", "TZ"):
                timezone = value.strip().strip("'\"")
            continue
        try:
            cron, command, args = _parse(stripped)
        except ValueError as exc:
            yield Found(source, None, str(exc))
            continue
        problem = refusal(command, args)
        if problem:
            yield Found(source, None, problem)
            continue
        base = "crontab: manage.py " + shlex.join([command, *args])
        base = base[:190]
        names[base] = names.get(base, 0) + 1
        name = base if names[base] == 1 else f"{base} ({names[base]})"
        yield Found(source, _fields(name, cron, command, args, timezone))


def _fields(name: str, cron: str, command: str, args: list[str], timezone: str) -> dict[str, Any]:
    return {
        "name": name,
        "task": COMMAND_TASK,
        "args": [command, *args],
        "kind": "cron",
        "cron": cron,
        "timezone": timezone,
    }


def _parse(line: str) -> tuple[str, str, list[str]]:
    """The cron expression, the management command and its arguments of a line."""
    if line.startswith("@"):
        macro, _, rest = line.partition(" ")
        if macro == "@reboot":
            raise ValueError("@reboot runs at boot, not on a schedule")
        if macro not in MACROS:
            raise ValueError(f"unknown macro {macro!r}")
        cron, rest = MACROS[macro], rest.strip()
    else:
        fields = line.split(None, 5)
        if len(fields) < 6:
            raise ValueError("not five time fields and a command")
        cron, rest = " ".join(fields[:5]), fields[5]
    try:
        words = shlex.split(rest, comments=True)
    except ValueError as exc:
        raise ValueError(f"the command cannot be read: {exc}") from None
    if words and not _is_path_or_program(words[0]) and len(words) > 1:
        words = words[1:]  # a system crontab's user column
    for i, word in enumerate(words):
        if PurePath(word).name in DJANGO_ENTRY_POINTS and i + 1 < len(words):
            tail = []
            for arg in words[i + 1 :]:
                if SHELL_OPERATORS.match(arg):
                    break
                tail.append(arg)
            if not tail or tail[0].startswith("-"):
                raise ValueError("manage.py is called without a command")
            return cron, tail[0], tail[1:]
    raise ValueError("it runs no manage.py command")


def _is_path_or_program(word: str) -> bool:
    """Whether the first word of a command looks like what runs, not a user name (a user
    column holds a bare name; a program is a path, an interpreter or an entry point)."""
    return (
        "/" in word
        or word in ("cd", "python", "python3", "env", "nice", "flock", "timeout")
        or word.startswith("python")
        or PurePath(word).name in DJANGO_ENTRY_POINTS
    )
