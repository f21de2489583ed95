"""One error hierarchy (errors.py): every exception the app defines derives from
``SchedulinatorError``, so a caller can catch everything the app refuses, and each error a
caller catches is importable from ``django_schedulinator.errors``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from django.core.exceptions import ImproperlyConfigured
from rest_framework.exceptions import APIException

import django_schedulinator
from django_schedulinator import errors


def defined_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of the package, by its dotted name."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(django_schedulinator.__path__, "django_schedulinator."):
        if ".migrations." in info.name:
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_exception_of_the_app_derives_from_the_base() -> None:
    found = defined_exceptions()
    assert "django_schedulinator.errors.UnknownDispatcher" in found  # the walk sees them
    assert "django_schedulinator.contrib.sentry_monitors.Inexpressible" in found
    outside = [
        name
        for name, cls in found.items()
        # The API's exceptions are HTTP answers: DRF turns them into responses.
        if not issubclass(cls, errors.SchedulinatorError | APIException)
    ]
    assert outside == []


def test_the_errors_a_caller_catches_live_in_errors() -> None:
    public = {
        name
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, errors.SchedulinatorError)
    }
    assert {
        "InvalidKey", "InvalidDispatcher", "UnknownDispatcher", "Unreachable",
        "CommandRefused", "CommandFailed", "NotifyError", "ServiceError", "VersionConflict",
        "TimingError", "UnknownTask", "InvalidArguments", "TaskTimedOut", "RebuildInProgress",
    } <= public  # fmt: skip
    # Defined there, not re-exported from elsewhere.
    for name in public:
        assert getattr(errors, name).__module__ == "django_schedulinator.errors", name


def test_what_callers_caught_before_still_catches_them() -> None:
    assert issubclass(errors.ServiceError, ValueError)
    assert issubclass(errors.TimingError, ValueError)
    assert issubclass(errors.UnknownTask, LookupError)
    assert issubclass(errors.InvalidKey, ValueError)
    assert issubclass(errors.UnknownDispatcher, ImproperlyConfigured)
    assert issubclass(errors.UnknownDispatcher, errors.InvalidDispatcher)


def test_names_are_no_longer_re_exported_from_where_they_do_not_live() -> None:
    from django_schedulinator import dispatch, outcomes

    assert {"Unreachable", "UnknownDispatcher", "OutcomeStatus"}.isdisjoint(dispatch.__all__)
    assert not hasattr(dispatch, "get_dispatcher")
    assert not hasattr(outcomes, "InvalidKey")
