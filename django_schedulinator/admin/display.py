"""How the admin shows times, counts, lists of names and change-log entries."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.text import Truncator
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext, ngettext

from .. import timing
from ..errors import TimingError
from ..models import ScheduleChange

# Shown in messages; longer selections end in "and N more".
NAMES_SHOWN = 10
CHANGES_SHOWN = 10  # change-log entries on the change form
VALUE_CHARS = 60  # one value in a change summary
SUMMARY_CHARS = 300  # a whole change summary in a list
COUNT_LIMIT = 10_000  # rows a long list counts past the start of its page


def _zone(name: str) -> Any:
    try:
        return timing.get_zone(name)
    except TimingError:  # a row saved before its zone left tzdata: still show it
        return UTC


def local_time(value: datetime, zone_name: str) -> str:
    """``value`` in the zone called ``zone_name``, with the zone's abbreviation."""
    local = value.astimezone(_zone(zone_name))
    return local.strftime(f"%Y-%m-%d %H:%M{':%S' if local.second else ''} %Z")


def relative(value: datetime, now: datetime | None = None) -> str:
    """Relative to now: "in 4 minutes", "3 minutes ago" (two units at most)."""
    now = now or timezone.now()
    if abs(value - now) < timedelta(minutes=1):
        return (
            gettext("in less than a minute") if value > now else gettext("less than a minute ago")
        )
    if value > now:
        return gettext("in %(time)s") % {"time": timeuntil(value, now, depth=2)}
    return gettext("%(time)s ago") % {"time": timesince(value, now, depth=2)}


def iso_text(value: Any) -> str:
    """An ISO 8601 time (as Redis markers and reports hold them) in the admin's zone."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if timezone.is_naive(moment):
        return str(value)
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S %Z}"


def _value_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return Truncator(text).chars(VALUE_CHARS)


def summarise_changes(action: str, changes: Any) -> str:
    """One line for a change-log entry: ``field: before → after`` for edits, the fields set
    for a creation or a deletion, what was asked for the other actions (a pause's note...)."""
    if not isinstance(changes, dict) or not changes:
        return ""
    # A creation or a deletion holds every field: show the side that has the values.
    sides: dict[str, int] = {ScheduleChange.Action.CREATED: 1, ScheduleChange.Action.DELETED: 0}
    whole = sides.get(action)
    parts = []
    for name, value in changes.items():
        pair = isinstance(value, list) and len(value) == 2
        if pair and whole is not None:
            if value[whole] not in (None, "", [], {}):  # the fields left blank say nothing
                parts.append(f"{name}={_value_text(value[whole])}")
        elif pair:
            parts.append(f"{name}: {_value_text(value[0])} → {_value_text(value[1])}")
        else:
            parts.append(f"{name}: {_value_text(value)}")
    return Truncator("; ".join(parts)).chars(SUMMARY_CHARS)


def schedules_text(n: int) -> str:
    return ngettext("%(count)d schedule", "%(count)d schedules", n) % {"count": n}


def runs_text(n: int) -> str:
    return ngettext("%(count)d run", "%(count)d runs", n) % {"count": n}


def names_text(items: Sequence[Any]) -> str:
    """The first NAMES_SHOWN names, and how many more."""
    names = [str(item) for item in items]
    shown = ", ".join(names[:NAMES_SHOWN])
    if len(names) > NAMES_SHOWN:
        shown = gettext("%(names)s and %(count)d more") % {
            "names": shown,
            "count": len(names) - NAMES_SHOWN,
        }
    return shown


def error_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return str(exc)


def changelist_url(model: type[Model], **filters: Any) -> str:
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def may_view(admin_site: admin.AdminSite, request: HttpRequest, model: type[Model]) -> bool:
    """Whether the admin's page of ``model`` would let this user in: a link to it, or what
    it lists, is shown only then."""
    if not admin_site.is_registered(model):
        return False
    return bool(admin_site.get_model_admin(model).has_view_permission(request))


def count_at_most(queryset: QuerySet[Any], limit: int) -> int:
    """The rows of ``queryset``, counted up to ``limit``: a COUNT over a LIMITed subquery
    (without its ordering), so a large table is never counted whole."""
    return queryset.order_by()[:limit].count()
