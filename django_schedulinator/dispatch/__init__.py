"""Pluggable dispatch: the class named by SCHEDULINATOR['DISPATCHER']."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..conf import app_settings
from .base import BaseDispatcher, Occurrence, Outcome, Progress

__all__ = [
    "BaseDispatcher",
    "Occurrence",
    "Outcome",
    "Progress",
    "dispatcher_class",
    "get_dispatcher",
]


def get_dispatcher() -> BaseDispatcher:
    """A new instance of the configured dispatcher."""
    return dispatcher_class()()


def dispatcher_class() -> type[BaseDispatcher]:
    """The class named by SCHEDULINATOR['DISPATCHER'] (a path from settings, never from data)."""
    path = app_settings.DISPATCHER
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"SCHEDULINATOR['DISPATCHER'] is {path!r}, which cannot be imported: {exc}"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, BaseDispatcher)):
        raise ImproperlyConfigured(
            f"SCHEDULINATOR['DISPATCHER'] is {path!r}, which is not a BaseDispatcher subclass."
        )
    return cls
