"""Schedules declared in code, and their sync into the table.

A schedule is declared next to its task, with ``@scheduled`` above ``@task``, or in the
setting ``SCHEDULINATOR["SCHEDULES"]`` (a dict shaped like ``CELERY_BEAT_SCHEDULE``). The
code owns its definition; the table stays the truth the scheduler reads. ``sync`` makes
the table match the code through the service layer (the change log names the source
"code"), at ``migrate``, when a scheduler starts and with ``manage.py sync_schedules``:

- a declaration with no row is created; one whose definition changed is updated (its
  revision and version bumped);
- a row the code no longer declares leaves it, once: it is paused (if it runs), not
  deleted, with a note saying so, and no longer marked as declared (``declared_in`` is
  cleared). Its runs and history stay; it is an ordinary schedule from then on, editable,
  deletable and resumable by hand, which later syncs leave alone. Declared again (a row the
  sync created), it takes the definition back and resumes if the sync had paused it;
- a declaration named like a schedule made by hand is a conflict, reported with both, and
  neither is touched.

The pause state is not part of a definition: pause, resume and run now work on declared
schedules as on any other (``enabled`` in a declaration applies when it is created). The
sync is idempotent and safe to run from many processes at once: each item is one service
call in its own transaction, a create that loses the race to another process is dropped,
and an update that finds the row already as declared writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from django.core.exceptions import ImproperlyConfigured

from django_schedulinator.registry import qualified_name, registry

if TYPE_CHECKING:
    pass

logger = logging.getLogger("django_schedulinator.declared")

F = TypeVar("F", bound=Callable[..., Any])

SETTING = "SCHEDULINATOR['SCHEDULES']"
# The note of a schedule paused because no code declares it any more; declared again, a
# schedule paused with this note resumes (one paused by hand stays paused).
REMOVED_PREFIX = "No longer declared in code"
REMOVED_NOTE = REMOVED_PREFIX + " (it was in {where}): paused, not deleted."
# Durations a declaration may also give as a number of seconds.
SECONDS_FIELDS = ("interval", "grace", "solar_offset")
# Each timing field, and the kind it makes (a solar one takes its latitude and longitude too).
TIMINGS = {"cron": "cron", "interval": "interval", "run_at": "once", "solar_event": "solar"}
# Not part of what code declares: the name is the identity, the pause state is the people's
# (the only settings of a declared schedule that change outside the code).
PAUSE_STATE = ("enabled", "pause_note")
NOT_DEFINITION = ("name", *PAUSE_STATE)


def definition_fields() -> tuple[str, ...]:
    """The settings a declaration owns (read-only elsewhere while it is declared)."""
    from django_schedulinator.models import Schedule

    return tuple(f for f in Schedule.SETTINGS_FIELDS if f not in NOT_DEFINITION)


@dataclass(frozen=True)
class Declaration:
    """One schedule as the code declares it: ``values`` are its settings as written there
    (the task's registered name included), ``declared_in`` where (a function, or the
    setting)."""

    name: str
    values: Mapping[str, Any]
    declared_in: str

    def fields(self) -> dict[str, Any]:
        """The model's fields for these values: the kind from the timing given, an interval
        in seconds as a ``timedelta``. Raises ``ImproperlyConfigured`` naming the mistake."""
        allowed = set(definition_fields()) - {"kind"} | {"enabled"}
        unknown = sorted(set(self.values) - allowed)
        if unknown:
            raise ImproperlyConfigured(
                f"{self}: unknown field(s) {', '.join(map(repr, unknown))} (a declaration takes "
                f"{', '.join(sorted(allowed))})"
            )
        timings = [name for name in TIMINGS if self.values.get(name) not in (None, "")]
        if len(timings) != 1:
            raise ImproperlyConfigured(
                f"{self}: give exactly one of cron, interval, run_at and solar_event"
                + (f" (got {', '.join(timings)})" if timings else "")
            )
        values = dict(self.values)
        for name in SECONDS_FIELDS:
            value = values.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                values[name] = timedelta(seconds=value)
        return {**values, "kind": TIMINGS[timings[0]]}

    def __str__(self) -> str:
        return f"The schedule {self.name!r} declared in {self.declared_in}"


class Declarations:
    """The schedules declared with ``@scheduled`` (filled as task modules are imported)."""

    def __init__(self) -> None:
        self._declared: dict[str, Declaration] = {}

    def add(self, declaration: Declaration) -> None:
        existing = self._declared.get(declaration.name)
        if existing is not None and existing.declared_in != declaration.declared_in:
            raise ImproperlyConfigured(
                f"{declaration} has the name of the one declared in {existing.declared_in}."
            )
        self._declared[declaration.name] = declaration  # the same place again: a re-import

    def decorated(self) -> list[Declaration]:
        return list(self._declared.values())


declarations = Declarations()


def scheduled(name: str, **values: Any) -> Callable[[F], F]:
    """Declare a schedule of the task below it (a function registered with ``@task``, or a
    Django task registered with it): ``@scheduled("nightly-report", cron="0 3 * * *",
    timezone="Europe/Paris")`` above ``@task(...)``. Takes one of ``cron``, ``interval`` (a
    ``timedelta`` or seconds), ``run_at`` and ``solar_event`` (with ``latitude`` and
    ``longitude``, and a ``solar_offset``: a ``timedelta`` or seconds), and any other setting
    of a schedule (args, kwargs, dispatcher, dispatch_options, policies). Several may be
    stacked."""
    if "task" in values:
        raise ImproperlyConfigured(f"@scheduled({name!r}): the task is the function below it")

    def decorator(f: F) -> F:
        task_name = registry.name_of(f)
        if task_name is None:
            raise ImproperlyConfigured(
                f"@scheduled({name!r}) is on {_qualified(f)}, which is not a registered task: "
                "put it above @task."
            )
        declarations.add(Declaration(name, {"task": task_name, **values}, _qualified(f)))
        return f

    return decorator


class Declared(NamedTuple):
    """What the code declares: the usable declarations, the problems of the others (a name
    declared twice, a setting entry that is not a dict), and every name declared, usable or
    not (a broken declaration is still a declaration: its schedule is left as it is)."""

    usable: list[Declaration]
    problems: list[str]
    names: set[str]


def declared() -> Declared:
    """Every declaration: decorators, then the setting."""
    from django_schedulinator.conf import app_settings

    found = {d.name: d for d in declarations.decorated()}
    names = set(found)
    problems: list[str] = []
    for name, values in app_settings.SCHEDULES.items():
        names.add(name)
        where = f"{SETTING}[{name!r}]"
        if not isinstance(values, Mapping):
            problems.append(f"{where} must be a dict of a schedule's fields, got {values!r}")
            continue
        declaration = Declaration(name, dict(values), where)
        if name in found:
            problems.append(f"{declaration} has the name of the one declared in "
                            f"{found[name].declared_in}.")  # fmt: skip
            found.pop(name)
            continue
        found[name] = declaration
    return Declared(list(found.values()), problems, names)


def declared_names() -> set[str]:
    """The names the code declares now (what the admin and the API keep read-only)."""
    try:
        return declared().names
    except ImproperlyConfigured:
        return set()


def _qualified(f: Any) -> str:
    return qualified_name(getattr(f, "func", f))  # a Django task: its function
