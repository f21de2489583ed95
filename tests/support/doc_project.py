"""A new Django project made of the docs' own blocks, run the way a user runs one.

The blocks a page tells the user to copy (settings, a module of tasks, the commands to run)
go into a project under a test's temporary directory as they are written: settings blocks
are appended to a bare ``settings.py`` (the ``...`` in their ``INSTALLED_APPS`` stands for
the project's other apps), module blocks become files, and command lines run as
``python manage.py ...`` in the project's directory, in processes of their own. Only what a
page leaves to the project is filled in: a SQLite file, the Redis of the tests (under the
test's key prefix), and the broker's address.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

SETTINGS = '''\
"""A new project: what the docs leave to it, then the docs' blocks, then the apps."""

import os

SECRET_KEY = "doc-project"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {db!r}}}}}
CACHES = {{
    "default": {{"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    "scheduler": {{"BACKEND": "django_redis.cache.RedisCache", "LOCATION": {redis!r}}},
}}
INSTALLED_APPS = [..., "django_schedulinator"]
SCHEDULINATOR = {{}}

# -- from the docs --
{blocks}
# -- the project around them --
PROJECT_APPS = ["django.contrib.auth", "django.contrib.contenttypes", *{apps!r}]
INSTALLED_APPS = list(
    dict.fromkeys(
        name
        for entry in INSTALLED_APPS
        for name in (PROJECT_APPS if entry is ... else [entry])
    )
)
SCHEDULINATOR = {{"CACHE_ALIAS": "scheduler", "KEY_PREFIX": {prefix!r}, **SCHEDULINATOR}}
'''

MANAGE_PY = """\
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "myproject.settings")
from django.core.management import execute_from_command_line

execute_from_command_line(sys.argv)
"""


class DocProject:
    """``myproject`` (settings) and the apps given, in ``root``."""

    def __init__(
        self, root: Path, key_prefix: str, *, settings: list[str], apps: list[str]
    ) -> None:
        self.root = root
        self.db = root / "db.sqlite3"
        self.processes: list[subprocess.Popen[str]] = []
        redis = os.environ.get("SCHEDULINATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
        self.write("manage.py", MANAGE_PY)
        self.write("myproject/__init__.py", "")
        self.write(
            "myproject/settings.py",
            SETTINGS.format(
                db=str(self.db), redis=redis, prefix=key_prefix, apps=apps,
                blocks="\n\n".join(settings),
            ),
        )  # fmt: skip
        for app in apps:
            self.write(f"{app}/__init__.py", "")

    def write(self, path: str, text: str) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text).rstrip() + "\n")

    def env(self) -> dict[str, str]:
        env = {
            name: value
            for name, value in os.environ.items()
            if name not in {"DJANGO_SETTINGS_MODULE", "PYTHONPATH"}
        }
        # The interpreter of the tests stands for the user's `python`; the checkout's
        # package is installed in it (editable), not put on the path by hand.
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def argv(self, line: str) -> list[str]:
        """A documented command line (``python manage.py ...``) as this project runs it."""
        words = shlex.split(line, comments=True)
        assert words[:2] == ["python", "manage.py"], line
        return [sys.executable, "manage.py", *words[2:]]

    def run(self, line: str) -> str:
        """Run a documented command line to its end; what it printed."""
        return self._finish(self.argv(line)).stdout

    def run_told(self, line: str) -> tuple[str, str]:
        """Run a documented command line to its end; what it printed, and what it wrote to
        stderr (where Django writes the system checks' warnings)."""
        done = self._finish(self.argv(line))
        return done.stdout, done.stderr

    def shell(self, code: str) -> str:
        """Run ``code`` in ``manage.py shell``, as a user pastes a block there."""
        return self._finish([sys.executable, "manage.py", "shell", "-c", code]).stdout

    def _finish(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv, cwd=self.root, env=self.env(), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{shlex.join(argv)}\n{done.stdout}\n{done.stderr}"
        return done

    def start(self, line: str) -> subprocess.Popen[str]:
        """Start a long-running documented command (killed by ``stop_all``)."""
        return self.popen(self.argv(line))

    def popen(self, argv: list[str]) -> subprocess.Popen[str]:
        """Start ``argv`` in the project (killed by ``stop_all``)."""
        proc = subprocess.Popen(
            argv, cwd=self.root, env=self.env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.processes.append(proc)
        return proc

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(self.db, timeout=30)) as db:
            return db.execute(sql, params).fetchall()

    def stop_all(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            output = proc.communicate(timeout=30)[0]
            # Shown by pytest when the test failed.
            print(f"--- {shlex.join(map(str, proc.args))} (exit {proc.returncode})\n{output}")
