"""Command lines the demo prints, built so that they work exactly as printed.

A printed ``python manage.py ...`` only works in a shell whose virtualenv is active and whose
current directory is the repository. The demo usually runs as ``scripts/demo``, with neither:
the script changes to the repository and runs ``.venv/bin/python``. So a printed command names
the interpreter that runs now and this checkout's manage.py, relative to the directory the user
is in when that is shorter, and repeats the environment the settings read.

Standard library only: embedded_redis imports this before Django is set up.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
MANAGE_PY = REPO_DIR / "manage.py"
# scripts/demo sets it to the directory it was started from before it changes directory.
CALLER_DIR_ENV = "DEMO_CALLER_DIR"
# What the settings read: a command run without it would use another database or Redis than
# the demo that printed it. (PGPASSWORD is left out: never print a password.)
SETTINGS_ENV = ("REDIS_URL", "DEMO_DB", "DEMO_DIR", "DEMO_KEY_PREFIX", "PGDATABASE", "PGPORT")
PATH_ENV = {"DEMO_DIR"}


def caller_dir() -> Path:
    return Path(os.environ.get(CALLER_DIR_ENV) or os.getcwd())


def shell_path(path: str | os.PathLike[str], *, program: bool = False) -> str:
    """``path`` as typed in the user's directory: relative when that is shorter. A program
    gets a ``./`` when relative without a slash (a bare name would be looked up in PATH)."""
    absolute = os.path.abspath(path)  # not resolve(): a venv's python is a symlink
    try:
        relative = os.path.relpath(absolute, caller_dir())
    except ValueError:  # another drive (Windows)
        relative = absolute
    chosen = relative if len(relative) < len(absolute) else absolute
    if program and os.sep not in chosen:
        chosen = os.curdir + os.sep + chosen
    return chosen


def python() -> str:
    """The interpreter that runs now (the venv's, even when it is not activated)."""
    return shell_path(sys.executable or "python3", program=True)


def command(*argv: str, env: Mapping[str, str] | None = None) -> str:
    """A shell command line: the settings' environment, then ``env``, then ``argv`` quoted."""
    assignments = []
    for name in SETTINGS_ENV:
        value = os.environ.get(name)
        if value:
            if name in PATH_ENV:  # relative to this process's directory, not the user's
                value = shell_path(value)
            assignments.append(f"{name}={shlex.quote(value)}")
    assignments += [f"{name}={shlex.quote(value)}" for name, value in (env or {}).items()]
    return " ".join([*assignments, shlex.join(argv)])


def manage_py(*args: str, env: Mapping[str, str] | None = None) -> str:
    """``<python> <manage.py> args...``, to paste in the user's directory as it is."""
    return command(python(), shell_path(MANAGE_PY), *args, env=env)
