"""The dispatchers' health: each alias, and its runs that wait on someone else (an outcome
still expected or overdue, a hand-off to retry), counted from the runs in flight. Read by
the whole picture (``health.cluster_status``) and by the metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import router

from django_schedulinator.models.scopes import Scope, runs_in


@dataclass(frozen=True, slots=True)
class DispatcherStatus:
    """One dispatcher alias: what it is, and its runs that wait on someone else."""

    alias: str
    backend: str  # the class name, or why it cannot be built
    reports_outcomes: bool | None  # None: it cannot be built
    awaiting: int  # handed off, their outcome still expected
    past_deadline: int  # handed off, never reported within OUTCOME_TIMEOUT_SECONDS
    retrying: int  # hand-offs that failed, waiting for their backoff to end


def dispatcher_status(
    now: Any, using: str | None = None, *, scope: Scope = None
) -> list[DispatcherStatus]:
    """Every configured alias, and every alias runs still name: three counts per alias from
    the runs in flight (the partial indexes of unfinished and awaited runs serve them), of
    the schedules of ``scope``."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db.models import Count, Q

    from django_schedulinator.dispatch import dispatchers
    from django_schedulinator.models import Run

    db = using or router.db_for_write(Run)
    counts: dict[str, dict[str, Any]] = {
        row["dispatcher"]: dict(row)
        for row in runs_in(scope, db)
        .filter(
            Q(status=Run.Status.DISPATCHED, outcome_due_by__isnull=False)
            | Q(status=Run.Status.PENDING, claim_token="", attempts__gt=0)
        )
        .exclude(status=Run.Status.PENDING, error="")
        .values("dispatcher")
        .annotate(
            awaiting=Count("pk", filter=Q(status=Run.Status.DISPATCHED, outcome_due_by__gt=now)),
            past_deadline=Count(
                "pk", filter=Q(status=Run.Status.DISPATCHED, outcome_due_by__lte=now)
            ),
            retrying=Count("pk", filter=Q(status=Run.Status.PENDING)),
        )
    }
    rows = []
    for alias in sorted(set(dispatchers.aliases()) | set(counts)):
        try:
            dispatcher = dispatchers[alias]
            backend, reports = type(dispatcher).__name__, dispatcher.reports_outcomes
        except ImproperlyConfigured as exc:
            backend, reports = str(exc), None
        found = counts.get(alias, {})
        rows.append(
            DispatcherStatus(
                alias,
                backend,
                reports,
                found.get("awaiting", 0),
                found.get("past_deadline", 0),
                found.get("retrying", 0),
            )
        )
    return rows
