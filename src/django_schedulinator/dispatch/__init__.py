"""Pluggable dispatch: the dispatchers configured in SCHEDULINATOR['DISPATCHERS'], by alias.

``dispatchers[alias]`` is this process's shared instance, for validation and the checks (a
dispatcher's constructor connects to nothing); ``dispatchers.create(alias)`` is a new one
that its caller owns and closes (each scheduler process builds its own).
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..conf import app_settings
from .base import (
    COMMON_OPTIONS,
    DEFAULT_ALIAS,
    BaseDispatcher,
    Call,
    Occurrence,
    Option,
    Outcome,
    OutcomeStatus,
    Progress,
    Unreachable,
)

__all__ = [
    "COMMON_OPTIONS",
    "DEFAULT_ALIAS",
    "BaseDispatcher",
    "Call",
    "Occurrence",
    "Option",
    "Outcome",
    "OutcomeStatus",
    "Progress",
    "UnknownDispatcher",
    "Unreachable",
    "dispatchers",
    "get_dispatcher",
]

# Modules whose absence means an extra is not installed, and the extra that installs them.
EXTRAS = {
    "celery": "celery",
    "rq": "rq",
    "django_rq": "rq",
    "django_tasks": "tasks",
    "httpx": "webhook",
}


class UnknownDispatcher(ImproperlyConfigured):
    """A schedule or run names an alias that SCHEDULINATOR['DISPATCHERS'] does not have."""

    def __init__(self, alias: str) -> None:
        configured = ", ".join(sorted(app_settings.DISPATCHERS))
        super().__init__(
            f"{alias!r} is not a dispatcher alias (configured: {configured}); add it to "
            f"SCHEDULINATOR['DISPATCHERS']."
        )


class Dispatchers:
    def __init__(self) -> None:
        self._shared: dict[tuple[str, str], BaseDispatcher] = {}
        self._lock = threading.Lock()

    def aliases(self) -> list[str]:
        return sorted(app_settings.DISPATCHERS)

    def config(self, alias: str) -> dict[str, Any]:
        try:
            return app_settings.DISPATCHERS[alias]
        except KeyError:
            raise UnknownDispatcher(alias) from None

    def backend_class(self, alias: str) -> type[BaseDispatcher]:
        """The class an alias names (a path from settings, never from data), with the
        extra to install when its dependency is missing."""
        path = self.config(alias)["BACKEND"]
        where = f"SCHEDULINATOR['DISPATCHERS'][{alias!r}]['BACKEND']"
        try:
            cls = import_string(path)
        except ImportError as exc:
            missing = getattr(exc, "name", None) or ""
            extra = EXTRAS.get(missing.partition(".")[0])
            hint = (
                f"; install it with: pip install 'django-schedulinator[{extra}]'" if extra else ""
            )
            raise ImproperlyConfigured(
                f"{where} is {path!r}, which cannot be imported: {exc}{hint}"
            ) from exc
        if not (isinstance(cls, type) and issubclass(cls, BaseDispatcher)):
            raise ImproperlyConfigured(f"{where} is {path!r}, which is not a BaseDispatcher.")
        return cls

    def create(self, alias: str = DEFAULT_ALIAS) -> BaseDispatcher:
        """A new instance of the alias's dispatcher, its options checked first."""
        cls = self.backend_class(alias)
        options = self.config(alias)["OPTIONS"]
        problems = cls.option_problems(options)
        if problems:
            raise ImproperlyConfigured(
                f"SCHEDULINATOR['DISPATCHERS'][{alias!r}]['OPTIONS']: {'; '.join(problems)}."
            )
        return cls(alias, options)

    def __getitem__(self, alias: str) -> BaseDispatcher:
        # Keyed by the configuration too: a changed setting (override_settings) builds anew.
        key = (alias, repr(self.config(alias)))
        with self._lock:
            shared = self._shared.get(key)
            if shared is None:
                shared = self._shared[key] = self.create(alias)
            return shared


dispatchers = Dispatchers()


def get_dispatcher(alias: str = DEFAULT_ALIAS) -> BaseDispatcher:
    """A new instance of the alias's dispatcher (the caller closes it)."""
    return dispatchers.create(alias)
