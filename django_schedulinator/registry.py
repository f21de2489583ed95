"""The registry of callables that may be scheduled.

Only names registered here can be stored on a schedule or run by a scheduler: no form, API or
worker ever imports a dotted path that came from data.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from django.core.exceptions import ImproperlyConfigured

from .errors import UnknownTask as UnknownTask  # its home was here

F = TypeVar("F", bound=Callable[..., Any])

TASK_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,199}$")
OCCURRENCE_PARAMETER = "occurrence"


@dataclass(frozen=True, slots=True)
class RegisteredTask:
    name: str
    func: Callable[..., Any]
    # True when the function declares an ``occurrence`` parameter; it then receives the
    # Occurrence (idempotency key, nominal time) of the run.
    takes_occurrence: bool
    # Seconds after which the inline dispatcher cuts the task off; None: the setting's value.
    timeout: float | None = None


class TaskRegistry:
    def __init__(self) -> None:
        self._tasks: dict[str, RegisteredTask] = {}

    @overload
    def register(self, func: F, *, name: str | None = None, timeout: float | None = None) -> F: ...
    @overload
    def register(
        self, func: None = None, *, name: str | None = None, timeout: float | None = None
    ) -> Callable[[F], F]: ...

    def register(
        self, func: F | None = None, *, name: str | None = None, timeout: float | None = None
    ) -> Any:
        """Register ``func`` as a schedulable task: ``@task``, ``@task(name=..., timeout=...)``.

        ``timeout`` (seconds) overrides SCHEDULINATOR['TASK_TIMEOUT_SECONDS'] for this task.
        """
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ImproperlyConfigured(
                f"@task(timeout=...) must be a positive number of seconds, got {timeout!r}"
            )

        def decorator(f: F) -> F:
            task_name = name or f"{f.__module__}.{f.__qualname__}"
            if not TASK_NAME_RE.match(task_name):
                raise ImproperlyConfigured(
                    f"Task name {task_name!r} must start with a letter or underscore and hold "
                    "at most 200 characters from A-Z a-z 0-9 _ . : -"
                )
            existing = self._tasks.get(task_name)
            if existing is not None and _qualified(existing.func) != _qualified(f):
                raise ImproperlyConfigured(
                    f"Task name {task_name!r} is already registered for "
                    f"{_qualified(existing.func)}; pass name= to register {_qualified(f)}"
                )
            params = inspect.signature(f).parameters
            self._tasks[task_name] = RegisteredTask(
                task_name, f, takes_occurrence=OCCURRENCE_PARAMETER in params, timeout=timeout
            )
            return f

        return decorator(func) if func is not None else decorator

    def get(self, name: str) -> RegisteredTask:
        try:
            return self._tasks[name]
        except KeyError:
            raise UnknownTask(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def choices(self, current: str | None = None) -> list[tuple[str, str]]:
        """The registered tasks as (value, label) choices. ``current``, a saved schedule's
        task, is offered too when it is no longer registered, marked so: the schedule stays
        editable without picking another task (the model accepts a task it already had)."""
        choices = [(n, n) for n in self.names()]
        if current and current not in self._tasks:
            choices.insert(0, (current, f"{current} (not registered)"))
        return choices


def _qualified(func: Callable[..., Any]) -> str:
    return f"{func.__module__}.{func.__qualname__}"


registry = TaskRegistry()
task = registry.register
