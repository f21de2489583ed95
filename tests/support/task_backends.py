"""A tasks backend that declares it cannot honour priorities, like backends whose queue has
no order: Django's own immediate backend with that one flag changed."""

from __future__ import annotations

from django_schedulinator.dispatch.tasks import framework

tasks = framework()
assert tasks is not None
immediate = __import__(f"{tasks.__name__}.backends.immediate", fromlist=["ImmediateBackend"])


class NoPriorityBackend(immediate.ImmediateBackend):  # type: ignore[misc,name-defined]
    supports_priority = False
