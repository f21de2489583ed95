"""The package's management commands, and how its messages name them."""

from __future__ import annotations

import os
import shlex
import sys

from django.utils.html import format_html


def run_command(*args: str, html: bool = False) -> str:
    """How a message tells the user to run one of the commands, e.g. ``rebuild_due_index``.

    In a process started as ``<python> <path>/manage.py ...`` (``check``, ``run_scheduler``)
    the same interpreter and manage.py, relative to the current directory when that is
    shorter, so that the command works as printed whether or not a virtualenv is active.
    Elsewhere (a web server) the process cannot know how the project runs its commands, so the
    message names the command instead of printing a command line that may not work.

    The command is in backticks, for logs and the terminal; with ``html``, in ``<code>``
    (safe HTML, for a page).
    """
    line = _command_line(args)
    shown = line or shlex.join(args)
    code = format_html("<code>{}</code>", shown) if html else f"`{shown}`"
    if line:
        return code
    return (
        format_html("the management command {}", code)
        if html
        else (f"the management command {code}")
    )


def _command_line(args: tuple[str, ...]) -> str:
    """``<python> <manage.py> args`` as this process was started, or "" when it was not
    started through manage.py."""
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) != "manage.py" or not sys.executable:
        return ""
    python = _shorter(sys.executable)
    if os.sep not in python:  # a bare name would be looked up in PATH
        python = os.curdir + os.sep + python
    return shlex.join([python, _shorter(script), *args])


def _shorter(path: str) -> str:
    absolute = os.path.abspath(path)  # not realpath: a virtualenv's python is a symlink
    try:
        relative = os.path.relpath(absolute)
    except ValueError:  # another drive (Windows)
        return absolute
    return relative if len(relative) < len(absolute) else absolute
