"""Pluggable dispatch: the dispatchers configured in SCHEDULINATOR['DISPATCHERS'], by alias.

``dispatchers`` is a connection handler, as Django's ``caches`` and django-tasks'
``task_backends`` are: ``dispatchers[alias]`` is this thread's instance of an alias, for
validation, the checks and the status pages (a dispatcher's constructor connects to
nothing); ``dispatchers.all()`` lists them; ``dispatchers.close_all()`` closes and forgets
them. ``dispatchers.create_connection(alias)`` is a new instance its caller owns and closes:
each lane of a running scheduler builds its own (lanes.py).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from asgiref.local import Local
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.utils.connection import BaseConnectionHandler
from django.utils.module_loading import import_string

from django_schedulinator.conf import Setting, Settings, app_settings
from django_schedulinator.dispatch.base import (
    COMMON_OPTIONS,
    DEFAULT_ALIAS,
    BaseDispatcher,
    Call,
    Occurrence,
    Option,
    Outcome,
    Progress,
)
from django_schedulinator.errors import InvalidDispatcher, UnknownDispatcher

if TYPE_CHECKING:
    from django_schedulinator.models import Schedule

__all__ = [
    "COMMON_OPTIONS",
    "DEFAULT_ALIAS",
    "BaseDispatcher",
    "Call",
    "DispatcherHandler",
    "Occurrence",
    "Option",
    "Outcome",
    "Progress",
    "dispatchers",
]


INLINE_DISPATCHER = "django_schedulinator.dispatch.inline.InlineDispatcher"
DISPATCHER_ALIAS_RE = re.compile(r"^[A-Za-z0-9_\-]{1,100}$")


def parse_dispatchers(
    setting: Setting[dict[str, dict[str, Any]]], value: Any
) -> dict[str, dict[str, Any]]:
    """SCHEDULINATOR["DISPATCHERS"]: every alias with its BACKEND and OPTIONS; "default" is
    always there (the inline dispatcher, unless the setting says otherwise)."""
    if not isinstance(value, dict):
        raise setting.error(f"must be a dict of aliases, got {value!r}")
    aliases: dict[str, dict[str, Any]] = {
        DEFAULT_ALIAS: {"BACKEND": INLINE_DISPATCHER, "OPTIONS": {}}
    }
    for alias, config in value.items():
        if not isinstance(alias, str) or not DISPATCHER_ALIAS_RE.match(alias):
            raise setting.error(
                f"has the alias {alias!r}; an alias is 1-100 characters from A-Z a-z 0-9 _ -"
            )
        if not isinstance(config, dict) or set(config) - {"BACKEND", "OPTIONS"}:
            raise setting.error(
                f"[{alias!r}] must be a dict with BACKEND (a dotted path) and OPTIONS (a "
                f"dict), got {config!r}"
            )
        backend = config.get("BACKEND")
        options = config.get("OPTIONS", {})
        if not isinstance(backend, str) or not backend:
            raise setting.error(f"[{alias!r}]['BACKEND'] must be a dotted path")
        if not isinstance(options, dict):
            raise setting.error(f"[{alias!r}]['OPTIONS'] must be a dict")
        aliases[alias] = {"BACKEND": backend, "OPTIONS": options}
    return aliases


Settings.DISPATCHERS.parsed_by(parse_dispatchers)


if TYPE_CHECKING:
    _Handler = BaseConnectionHandler[BaseDispatcher]
else:
    _Handler = BaseConnectionHandler


class DispatcherHandler(_Handler):
    """The dispatcher aliases of ``SCHEDULINATOR['DISPATCHERS']``, an instance of each per
    thread (Django's ``Local``, as for caches): no instance is shared between threads, so a
    dispatcher need not be thread-safe. The scheduler's lanes each own one from
    ``create_connection`` instead, which its lane thread uses alone and closes."""

    settings_name = "SCHEDULINATOR"
    exception_class = UnknownDispatcher

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        super().__init__(settings)
        self._given = settings

    def configure_settings(self, settings: dict[str, Any] | None) -> dict[str, Any]:
        # Through conf: validated, and the alias "default" is always there.
        return app_settings.DISPATCHERS if settings is None else settings

    def aliases(self) -> list[str]:
        return sorted(self.settings)

    def config(self, alias: str) -> dict[str, Any]:
        try:
            return dict(self.settings[alias])
        except KeyError:
            raise UnknownDispatcher(alias, self.settings) from None

    def backend_class(self, alias: str) -> type[BaseDispatcher]:
        """The class an alias names (a path from settings, never from data)."""
        path = self.config(alias)["BACKEND"]
        where = f"SCHEDULINATOR['DISPATCHERS'][{alias!r}]['BACKEND']"
        try:
            cls = import_string(path)
        except ImportError as exc:
            raise InvalidDispatcher(
                f"{where} is {path!r}, which cannot be imported: {exc}"
            ) from exc
        if not (isinstance(cls, type) and issubclass(cls, BaseDispatcher)):
            raise InvalidDispatcher(f"{where} is {path!r}, which is not a BaseDispatcher.")
        return cls

    def create_connection(self, alias: str = DEFAULT_ALIAS) -> BaseDispatcher:
        """A new instance of the alias's dispatcher, its options checked first; the caller
        owns it and closes it."""
        cls = self.backend_class(alias)
        options = self.config(alias).get("OPTIONS", {})
        problems = cls.option_problems(options)
        if problems:
            raise InvalidDispatcher(
                f"SCHEDULINATOR['DISPATCHERS'][{alias!r}]['OPTIONS']: {'; '.join(problems)}."
            )
        return cls(alias, options)

    def validate_schedule(self, schedule: Schedule, *, keeps_unknown_alias: bool = False) -> None:
        """Refuse a schedule its alias cannot serve, with ``ValidationError`` by field: an
        alias that is not configured (but with ``keeps_unknown_alias``: a saved schedule
        that keeps an alias since removed, whose runs then fail saying so), one that cannot
        be built, or what the alias's ``BaseDispatcher.validate_schedule`` refuses."""
        try:
            dispatcher = self[schedule.dispatcher]
        except UnknownDispatcher as exc:
            if keeps_unknown_alias:
                return
            raise ValidationError({"dispatcher": str(exc)}) from None
        except ImproperlyConfigured as exc:  # its BACKEND or OPTIONS (check E004)
            raise ValidationError({"dispatcher": str(exc)}) from None
        dispatcher.validate_schedule(schedule)

    def __getitem__(self, alias: str) -> BaseDispatcher:
        if alias not in self.settings:
            raise UnknownDispatcher(alias, self.settings)
        return super().__getitem__(alias)

    def all(self, initialized_only: bool = False) -> list[BaseDispatcher]:
        """This thread's instance of every alias (only those built so far with
        ``initialized_only``)."""
        return list(super().all(initialized_only))

    def close_all(self) -> None:
        """Close this thread's instances and forget them: the next ``dispatchers[alias]``
        builds a new one (a closed dispatcher need not work again)."""
        for alias in list(self):
            dispatcher = getattr(self._connections, alias, None)
            if dispatcher is not None:
                del self[alias]
                dispatcher.close()

    def reset(self) -> None:
        """Close this thread's instances and read the setting again (``setting_changed``,
        as Django does for ``CACHES``)."""
        if "settings" in self.__dict__:  # read before (so instances may exist): the old aliases
            self.close_all()
            del self.__dict__["settings"]  # the cached_property
        self._settings = self._given
        self._connections = Local(self.thread_critical)


dispatchers = DispatcherHandler()


def settings_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` (override_settings): the aliases follow SCHEDULINATOR."""
    if setting == DispatcherHandler.settings_name:
        dispatchers.reset()
