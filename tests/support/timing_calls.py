"""Counting the steps the timing rules take: a function of ``django_schedulinator.timing``
replaced in every module of the package that calls it (each imports it by name from the
module that defines it, so patching that module alone would miss the others' calls)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import django_schedulinator.timing as timing_package


def _modules() -> list[Any]:
    return [
        importlib.import_module(f"{timing_package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(timing_package.__path__)
    ]


@contextmanager
def replaced(name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """Within: ``name`` (a function of the timing package's modules) is ``wrap(original)``
    wherever a module of the package holds it, the package's own names included."""
    holders = [module for module in [timing_package, *_modules()] if hasattr(module, name)]
    originals = {id(getattr(module, name)) for module in holders}
    assert len(originals) == 1, f"{name} names more than one function in the timing package"
    original = getattr(holders[0], name)
    replacement = wrap(original)
    with ExitStack() as stack:
        for module in holders:
            stack.enter_context(mock.patch.object(module, name, replacement))
        yield
