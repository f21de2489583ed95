"""A schedule's every rule, checked in one place before any write: the row's own
(``Schedule.full_clean``) and those that need more than the row, which the model does not
know: the schedulers' clock (a new one-off in the future) and the dispatchers (what the
alias a schedule names can serve). ``services.validate`` is this function; the admin's form,
the API, imports and the schedules declared in code call it too.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from django_schedulinator.dispatch import dispatchers
from django_schedulinator.index import clock
from django_schedulinator.models import Schedule


def validate(
    schedule: Schedule,
    *,
    now: datetime | None = None,
    exclude: Collection[str] | None = None,
    validate_unique: bool = False,
) -> None:
    """Every rule a schedule's settings keep, one ``ValidationError`` by field: the row's own
    (``Schedule.full_clean``: fields, timing, calendars, arguments), then what needs more
    than the row: a new one-off runs in the future by ``now`` (default: the schedulers'
    clock, Redis TIME), and the dispatcher it names can serve it. The admin's form, the
    API, imports and the schedules declared in code validate through here."""
    errors: dict[str, list[ValidationError]] = {}
    try:
        schedule.full_clean(
            exclude=exclude, validate_unique=validate_unique, validate_constraints=False
        )
    except ValidationError as exc:
        errors = exc.update_error_dict(errors)
    for name, message in outside_errors(
        schedule, now=now, exclude=exclude, failed=errors.keys()
    ).items():
        errors.setdefault(name, [ValidationError(message)])
    if errors:
        raise ValidationError(errors)
    if not exclude:  # every rule checked: the save that follows needs not check them again
        schedule.mark_validated()


def outside_errors(
    schedule: Schedule,
    *,
    now: datetime | None = None,
    exclude: Collection[str] | None = None,
    failed: Collection[str] = (),
) -> dict[str, Any]:
    """The errors by field that the row alone cannot tell (the fields in ``exclude`` left
    out); ``failed``: the fields the row's own rules refused already."""
    errors: dict[str, Any] = {}
    excluded = set(exclude or ())
    left_out = {*failed, *excluded}
    new_one_off = schedule.kind == Schedule.Kind.ONCE and schedule._state.adding
    if new_one_off and not left_out & {"run_at", "end_at", "max_runs"} and schedule.run_at:
        # A time passed is a mistake in a one-off that would still run (it would fire at
        # once); one with no run left (it ran, or its end came first) is saved finished.
        now = now or clock.now()
        if schedule.run_at < now - timedelta(minutes=1) and schedule.first_run_at(now) is not None:
            errors["run_at"] = _("A new one-off must run in the future.")
    # What the dispatcher cannot do for it; a saved schedule may keep an alias since
    # removed from the settings (its runs then fail saying so).
    loaded = getattr(schedule, "_loaded", {})
    kept = not schedule._state.adding and loaded.get("dispatcher") == schedule.dispatcher
    try:
        dispatchers.validate_schedule(schedule, keeps_unknown_alias=kept)
    except ValidationError as exc:
        for name, messages in exc.message_dict.items():
            errors.setdefault(name, messages[0])
    return {name: error for name, error in errors.items() if name not in excluded}
