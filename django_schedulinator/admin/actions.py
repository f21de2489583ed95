"""What the schedule admin's bulk actions share: each selected schedule through its service,
and the messages that say what was done, left alone or refused.

The actions write no index themselves: the services make it follow once the changes commit
(the model's signals, ``sync.resync_on_commit``). A write that fails then is logged, never
raised; the message here tells the user as well.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import router, transaction
from django.http import HttpRequest
from django.utils.translation import gettext, ngettext

from django_schedulinator.admin.display import (
    NAMES_SHOWN,
    error_text,
    names_text,
    runs_text,
    schedules_text,
)
from django_schedulinator.errors import ServiceError
from django_schedulinator.index import sync
from django_schedulinator.models import Schedule

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    _ModelAdmin = ModelAdmin[Any]


def each(
    schedules: Iterable[Schedule],
    act: Callable[[Schedule], Any],
    *,
    skip: Callable[[Schedule], bool] = lambda schedule: False,
) -> tuple[list[Schedule], list[Schedule], list[tuple[Schedule, str]]]:
    """Run a bulk action's service on each schedule: those it acted on, those skipped (left
    as they were), and those it refused with why."""
    done: list[Schedule] = []
    skipped: list[Schedule] = []
    failed: list[tuple[Schedule, str]] = []
    for schedule in schedules:
        if skip(schedule):
            skipped.append(schedule)
            continue
        try:
            act(schedule)
        except (ServiceError, ValidationError) as exc:
            failed.append((schedule, error_text(exc)))
            continue
        done.append(schedule)
    return done, skipped, failed


def report(
    model_admin: _ModelAdmin,
    request: HttpRequest,
    schedules: Sequence[Schedule],
    text: str,
    level: int = messages.SUCCESS,
    **values: Any,
) -> None:
    """One message about ``schedules``, none when there are none. ``text`` (translated) may
    name them by ``%(schedules)s`` ("2 schedules"), ``%(runs)s`` ("2 runs") and
    ``%(names)s`` (the first names, "and N more"), and by the keys of ``values``."""
    if not schedules:
        return
    count = len(schedules)
    filled = {
        "schedules": schedules_text(count),
        "runs": runs_text(count),
        "names": names_text(schedules),
        **values,
    }
    model_admin.message_user(request, text % filled, level)


def report_failures(
    model_admin: _ModelAdmin, request: HttpRequest, failed: list[tuple[Schedule, str]]
) -> None:
    """An error message for each schedule refused (the first few), and one for the rest."""
    for schedule, error in failed[:NAMES_SHOWN]:
        model_admin.message_user(request, f"{schedule.name}: {error}", messages.ERROR)
    rest = [schedule for schedule, _error in failed[NAMES_SHOWN:]]
    report(
        model_admin,
        request,
        rest,
        ngettext(
            "And %(count)d more schedule failed: %(names)s.",
            "And %(count)d more schedules failed: %(names)s.",
            len(rest),
        ),
        messages.ERROR,
        count=len(rest),
    )


def index_not_updated(exc: Exception | None) -> str:
    return gettext(
        "The due index could not be updated (%(error)s). The changes are saved; the "
        "schedulers' reconcile brings the index in line once Redis is reachable."
    ) % {"error": exc}


def report_index_failure_on_commit(
    model_admin: _ModelAdmin, request: HttpRequest, failures_before: int
) -> None:
    """Once the action's changes are committed, and the services' index writes with them,
    say so if one of them failed: at once in autocommit, at the end of the request's
    transaction under ATOMIC_REQUESTS (still before the messages are stored).
    ``failures_before`` is ``sync.failed_writes()``'s count before the action changed
    anything."""

    def tell() -> None:
        count, error = sync.failed_writes()
        if count > failures_before:
            model_admin.message_user(request, index_not_updated(error), messages.ERROR)

    # robust: the rows are committed by then, so nothing may turn into a 500.
    transaction.on_commit(tell, using=router.db_for_write(Schedule), robust=True)
