"""The registry of callables that may be scheduled.

Only names registered here can be stored on a schedule or run by a scheduler: no form, API or
worker ever imports a dotted path that came from data.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured

from django_schedulinator.errors import TaskTimedOut, UnknownTask

F = TypeVar("F", bound=Callable[..., Any])

TASK_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,199}$")
OCCURRENCE_PARAMETER = "occurrence"
# A Django task (its arguments are JSON) gets the key, not the Occurrence, in this parameter.
OCCURRENCE_KEY_PARAMETER = "occurrence_key"


def is_django_task(obj: Any) -> bool:
    """Whether ``obj`` is a task of Django's tasks framework (``@task`` of django.tasks, or of
    the django-tasks backport): it has a function, and is enqueued with ``using()``."""
    return (
        callable(getattr(obj, "enqueue", None))
        and callable(getattr(obj, "using", None))
        and (callable(getattr(obj, "func", None)))
    )


@dataclass(frozen=True, slots=True)
class RegisteredTask:
    name: str
    func: Callable[..., Any]
    # True when the function declares an ``occurrence`` parameter; it then receives the
    # Occurrence (idempotency key, nominal time) of the run.
    takes_occurrence: bool
    # Seconds after which the inline dispatcher cuts the task off; None: the setting's value.
    timeout: float | None = None
    # The Django task (django.tasks) registered, which the tasks dispatcher enqueues; ``func``
    # is its function, which the inline dispatcher calls.
    django_task: Any = None
    # The function declares ``occurrence_key``: it receives the key (a string).
    takes_key: bool = False
    # Checks a schedule's args and kwargs for this task when the schedule is saved: returns
    # what is wrong with them, by field ("args", "kwargs"); {} when they will do.
    check_args: Callable[[Any, Any], dict[str, str]] | None = None
    # ``async def``: calling it only makes a coroutine, which ``call`` runs to its end.
    is_async: bool = False

    def call(self, args: list[Any], kwargs: dict[str, Any], *, timeout: float | None = None) -> Any:
        """Call the function and return what it returned, the one way the app calls a
        registered function in its own processes (the inline dispatcher, RQ's runner).

        An async function runs to its end on an event loop of its own, as Django's tasks
        run one (``async_to_sync``: its ``sync_to_async`` ORM calls come back to this thread,
        and its connections), and past ``timeout`` seconds it is cancelled and
        ``TaskTimedOut`` raised. A plain function is called as it is (only its caller can
        stop waiting for it). Whatever returns something to await (a callable object with
        an async ``__call__``) has that awaited too: work that did not happen never counts
        as done."""
        if self.is_async:
            return _run_to_end(lambda: self.func(*args, **kwargs), timeout)
        result = self.func(*args, **kwargs)
        if inspect.isawaitable(result):
            return _run_to_end(lambda: result, timeout)
        return result


def _run_to_end(start: Callable[[], Awaitable[Any]], timeout: float | None) -> Any:
    async def bounded() -> Any:
        if timeout is None:
            return await start()
        try:
            async with asyncio.timeout(timeout) as scope:
                return await start()
        except TimeoutError:
            if scope.expired():
                raise TaskTimedOut(timeout) from None
            raise  # the task's own

    return async_to_sync(bounded)()


class TaskRegistry:
    def __init__(self) -> None:
        self._tasks: dict[str, RegisteredTask] = {}

    @overload
    def register(
        self,
        func: F,
        *,
        name: str | None = None,
        timeout: float | None = None,
        check_args: Callable[[Any, Any], dict[str, str]] | None = None,
    ) -> F: ...
    @overload
    def register(
        self,
        func: None = None,
        *,
        name: str | None = None,
        timeout: float | None = None,
        check_args: Callable[[Any, Any], dict[str, str]] | None = None,
    ) -> Callable[[F], F]: ...

    def register(
        self,
        func: F | None = None,
        *,
        name: str | None = None,
        timeout: float | None = None,
        check_args: Callable[[Any, Any], dict[str, str]] | None = None,
    ) -> Any:
        """Register ``func`` as a schedulable task: ``@task``, ``@task(name=..., timeout=...)``.

        ``timeout`` (seconds) overrides SCHEDULINATOR['TASK_TIMEOUT_SECONDS'] for this task.
        ``check_args(args, kwargs)`` checks a schedule's arguments for this task when the
        schedule is saved, returning what is wrong by field ({} when nothing is).
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
            django_task: Any = f if is_django_task(f) else None
            func: Callable[..., Any] = django_task.func if django_task is not None else f
            task_name = name or f"{func.__module__}.{func.__qualname__}"
            if not TASK_NAME_RE.match(task_name):
                raise ImproperlyConfigured(
                    f"Task name {task_name!r} must start with a letter or underscore and hold "
                    "at most 200 characters from A-Z a-z 0-9 _ . : -"
                )
            existing = self._tasks.get(task_name)
            if existing is not None and qualified_name(existing.func) != qualified_name(func):
                raise ImproperlyConfigured(
                    f"Task name {task_name!r} is already registered for "
                    f"{qualified_name(existing.func)}; pass name= to register "
                    f"{qualified_name(func)}"
                )
            params = inspect.signature(func).parameters
            self._tasks[task_name] = RegisteredTask(
                task_name,
                func,
                takes_occurrence=OCCURRENCE_PARAMETER in params,
                timeout=timeout,
                django_task=django_task,
                takes_key=OCCURRENCE_KEY_PARAMETER in params,
                check_args=check_args,
                is_async=inspect.iscoroutinefunction(func),
            )
            return f

        return decorator(func) if func is not None else decorator

    def get(self, name: str) -> RegisteredTask:
        try:
            return self._tasks[name]
        except KeyError:
            raise UnknownTask(name) from None

    def longest_timeout(self) -> float | None:
        """The longest ``@task(timeout=...)`` registered, if any sets one."""
        return max((t.timeout for t in self._tasks.values() if t.timeout), default=None)

    def name_of(self, obj: Any) -> str | None:
        """The name ``obj`` (a function, or a Django task) is registered under; None if
        it is not registered."""
        for registered in self._tasks.values():
            if registered.func is obj or (
                registered.django_task is not None and registered.django_task is obj
            ):
                return registered.name
        return None

    def is_scheduled_function(self, func: Any) -> bool:
        """Whether ``func`` is the function of a registered Django task."""
        return func is not None and any(
            t.func is func for t in self._tasks.values() if t.django_task is not None
        )

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


def qualified_name(func: Callable[..., Any]) -> str:
    """``module.qualname`` of a function, for messages and for where code declares things."""
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


registry = TaskRegistry()
task = registry.register
