"""Commits inside a rolled-back test.

A ``django_db`` test without ``transaction=True`` runs in a transaction that is rolled back,
so ``on_commit`` callbacks (the index writes after a save, the signals the engine sends once
a run is recorded, the schedulers' wake) never run by themselves. ``committed()`` runs those
of the code inside it when that code is done, as its commit would: Django's
``TestCase.captureOnCommitCallbacks(execute=True)``, which also runs the callbacks that
callbacks add and never those of a block that rolled back (Django drops them with its
savepoint).

Blocks nest: only the outermost runs the callbacks, once, so a helper that commits (such as
``make_schedule``) can be called inside a test's own ``committed()``. In a
``transaction=True`` test it does nothing: real commits run the callbacks there, and a block
rolled back drops them.

Only tests that need more take ``transaction=True`` and its table flush: other connections
(threads, subprocesses) seeing the commit, or the commit itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import django.test
import rest_framework.test
from django.db import DEFAULT_DB_ALIAS
from django.test import TestCase

_open = threading.local()
_test = {"rolled_back": False}  # the running test's: conftest's ``rolled_back`` fixture


@contextmanager
def rolled_back(flag: bool) -> Iterator[None]:
    """For the test inside: whether it runs in a transaction that is rolled back."""
    _test["rolled_back"] = flag
    try:
        yield
    finally:
        _test["rolled_back"] = False


@contextmanager
def committed(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Run the ``on_commit`` callbacks that the code inside registers on ``using`` when it
    is done, as if its outermost atomic block had committed. Outside a rolled-back test
    it does nothing: the code's own commits run them."""
    depth: dict[str, int] = _open.__dict__.setdefault("depth", {})
    if not _test["rolled_back"]:
        yield  # real commits run the callbacks
        return
    depth[using] = depth.get(using, 0) + 1
    try:
        if depth[using] > 1:
            yield  # the outermost block runs them
        else:
            with TestCase.captureOnCommitCallbacks(using=using, execute=True):
                yield
    finally:
        depth[using] -= 1


class CommittingRequests:
    """A test client whose requests each commit when they are answered, as a server's do
    (autocommit, or ``ATOMIC_REQUESTS``): mixed into Django's ``Client`` and DRF's
    ``APIClient`` (``Client`` and ``APIClient`` here)."""

    def request(self, **request: Any) -> Any:
        with committed():
            return super().request(**request)  # type: ignore[misc]


class Client(CommittingRequests, django.test.Client):
    """Django's test client, each request committed (``CommittingRequests``)."""


class APIClient(CommittingRequests, rest_framework.test.APIClient):
    """DRF's test client, each request committed (``CommittingRequests``)."""
