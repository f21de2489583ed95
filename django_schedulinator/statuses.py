"""The statuses compared across the app, as enumerations: a run's (``RunStatus``, the
choices of ``Run.status``) and what a dispatcher reports of one (``OutcomeStatus``).

Below the models (querysets and the dispatch seam compare them too); it imports nothing of
the app. Both are ``str`` subclasses, so a row's value or a plain string a dispatcher returns
compares equal to its member.
"""

from __future__ import annotations

from enum import StrEnum

from django.db import models
from django.utils.translation import gettext_lazy as _


class RunStatus(models.TextChoices):
    PENDING = "pending", _("Pending")  # committed, waiting for (or in) dispatch
    RUNNING = "running", _("Running")  # the dispatcher reported it started
    BUFFERED = "buffered", _("Buffered")  # overlap "buffer": waits for the previous run
    DISPATCHED = "dispatched", _("Dispatched")  # handed off to another system
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    SKIPPED = "skipped", _("Skipped")


class OutcomeStatus(StrEnum):
    """What a dispatcher reports of one run. The first three are the run's status they
    lead to (``RunStatus`` members of the same value)."""

    DISPATCHED = RunStatus.DISPATCHED.value  # handed off to another system
    SUCCEEDED = RunStatus.SUCCEEDED.value
    FAILED = RunStatus.FAILED.value
    # The hand-off failed in a way that may pass later (a broker down, a timeout, an HTTP
    # 5xx); the run is dispatched again, with the same key, after a backoff.
    RETRY = "retry"


# Unfinished: a process holds it under a lease; a take-over dispatches it if that lapses.
UNFINISHED = (RunStatus.PENDING, RunStatus.RUNNING)


class ReportedStatus(StrEnum):
    """What a worker reports of a run handed off to it, by occurrence key (``outcomes``,
    the API's outcome endpoint, the Celery, RQ and Django tasks hooks)."""

    STARTED = "started"
    SUCCEEDED = RunStatus.SUCCEEDED.value
    FAILED = RunStatus.FAILED.value
