"""django-schedulinator: cron, interval and one-off schedules for Django.

SQL rows are the truth; a Redis sorted set indexes when each is due; any number of
``run_scheduler`` processes claim, re-check and fire each occurrence exactly once.
"""

from __future__ import annotations

from typing import Any

from django_schedulinator.declared import scheduled
from django_schedulinator.registry import registry, task

# The one place the version is written: pyproject.toml's metadata reads it from here (setuptools
# parses this line, without importing the package), so it must stay a plain string literal.
__version__ = "0.1.0.dev0"
__all__ = ["DatabaseNow", "registry", "resync_schedules", "scheduled", "task"]


def __getattr__(name: str) -> Any:
    # Lazy so that importing the package (for @task) never loads models before the app
    # registry is ready.
    if name == "resync_schedules":
        from django_schedulinator.index.sync import resync_schedules

        return resync_schedules
    if name == "DatabaseNow":
        from django_schedulinator.models.dbclock import DatabaseNow

        return DatabaseNow
    raise AttributeError(name)
