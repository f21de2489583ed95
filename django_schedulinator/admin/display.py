"""How the admin shows times, counts, lists of names and change-log entries."""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import dateformat, timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.text import Truncator
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext, ngettext

from django_schedulinator import timing
from django_schedulinator.errors import TimingError
from django_schedulinator.models import ScheduleChange

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:  # not generic at run time
    _ModelAdmin = admin.ModelAdmin

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


def local_time(value: datetime, zone_name: str, *, seconds: bool = False) -> str:
    """``value`` in the zone called ``zone_name``, with the zone's abbreviation (and its
    seconds when they are not zero, or with ``seconds``)."""
    local = value.astimezone(_zone(zone_name))
    return local.strftime(f"%Y-%m-%d %H:%M{':%S' if local.second or seconds else ''} %Z")


def short_time(
    value: datetime,
    zone_name: str | None = None,
    *,
    seconds: bool | None = None,
    now: datetime | None = None,
) -> str:
    """``value`` as a list shows it, in the zone called ``zone_name`` (else the admin's):
    the day and month, the year only when it is not this one, the time, and the zone's
    abbreviation ("29 Nov 18:34:42 UTC"). ``seconds``: always (True), never (False), or
    when they are not zero (None)."""
    return " ".join(_short_parts(value, zone_name, seconds=seconds, now=now))


def _short_parts(
    value: datetime, zone_name: str | None, *, seconds: bool | None, now: datetime | None = None
) -> tuple[str, str]:
    """The day ("29 Nov", "29 Nov 2025") and the time with its zone ("18:34:42 UTC")."""
    zone = _zone(zone_name) if zone_name else timezone.get_current_timezone()
    local = value.astimezone(zone)
    this_year = (now or timezone.now()).astimezone(zone).year
    day = dateformat.format(local, "j M" if local.year == this_year else "j M Y")
    show_seconds = bool(local.second) if seconds is None else seconds
    return day, f"{local.strftime('%H:%M:%S' if show_seconds else '%H:%M')} {local:%Z}"


def list_time(
    value: datetime,
    zone_name: str | None = None,
    *,
    seconds: bool | None = True,
    css_class: str = "",
    note: str = "",
) -> str:
    """A time in a list column: ``short_time``, the exact time as its tooltip (then
    ``note``). A narrow column may wrap it between the day and the time, never within
    either."""
    exact = exact_time(value) if zone_name is None else local_time(value, zone_name, seconds=True)
    day, time = _short_parts(value, zone_name, seconds=seconds)
    return format_html(
        '<span class="schedulinator-time{}" title="{}"><span>{}</span> <span>{}</span></span>',
        f" {css_class}" if css_class else "",
        f"{exact} {note}" if note else exact,
        day,
        time,
    )


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


def exact_time(value: datetime) -> str:
    """A moment in the admin's zone, to the second and with the zone's abbreviation: runs
    seconds apart must not look alike, nor a time be read in the wrong zone."""
    return f"{timezone.localtime(value):%Y-%m-%d %H:%M:%S %Z}"


def iso_text(value: Any) -> str:
    """An ISO 8601 time (as Redis markers and reports hold them) in the admin's zone."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if timezone.is_naive(moment):
        return str(value)
    return exact_time(moment)


def _time_of(
    field: models.DateTimeField[Any, Any], shown: Callable[[datetime], str]
) -> Callable[[Model], str | None]:
    """What shows ``field`` as ``shown`` makes it (``list_time`` in a list column,
    ``exact_time`` read-only on a page): named after it, so its column or field keeps the
    field's CSS class, header and help text, and sorted by it."""

    @admin.display(description=field.verbose_name, ordering=field.name)
    def show(obj: Model) -> str | None:
        value = getattr(obj, field.name)
        return None if value is None else shown(value)  # None: the admin's "-"

    show.__name__ = field.name
    return show


class ExactTimes(_ModelAdmin):
    """Shows the date-times of the model that a page shows as text with their seconds and
    zone, where Django's own format drops both ("March 1, 2026, noon"): read-only fields
    with ``exact_time``, list columns shorter with ``list_time`` (the exact time as its
    tooltip), so that a list fits a laptop's screen. Fields that are inputs on the page
    stay inputs."""

    class Media:
        css = {"all": ("django_schedulinator/admin.css",)}

    @cached_property
    def _exact_times(self) -> dict[str, Callable[[Model], str | None]]:
        return self._times(exact_time)

    @cached_property
    def _list_times(self) -> dict[str, Callable[[Model], str | None]]:
        return self._times(list_time)

    def _times(self, shown: Callable[[datetime], str]) -> dict[str, Callable[[Model], str | None]]:
        return {
            field.name: _time_of(field, shown)
            for field in self.model._meta.get_fields()
            if isinstance(field, models.DateTimeField)
        }

    def _exact(self, names: Iterable[Any], only: Container[str] | None = None) -> list[Any]:
        return [self._exact_name(name, only) for name in names]

    def _exact_name(self, name: Any, only: Container[str] | None) -> Any:
        if isinstance(name, list | tuple):  # fields on one line of a fieldset
            return type(name)(self._exact_name(each, only) for each in name)
        if isinstance(name, str) and (only is None or name in only):
            return self._exact_times.get(name, name)
        return name

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        return [
            self._list_times.get(name, name) if isinstance(name, str) else name
            for name in super().get_list_display(request)
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return self._exact(super().get_readonly_fields(request, obj))

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        # The same names as the read-only fields (a subclass may add to them after this
        # class did), or every field on a page the user may only view.
        if obj is not None and not self.has_change_permission(request, obj):
            only = None
        else:
            only = {
                name.__name__ for name in self.get_readonly_fields(request, obj) if callable(name)
            }
        return [
            (title, {**options, "fields": self._exact(options["fields"], only)})
            for title, options in super().get_fieldsets(request, obj)
        ]


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


def duration_text(value: timedelta) -> str:
    """A jitter as people write it: "30 s", "5 min", "1 h 30 min"."""
    seconds = int(value.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{n} {unit}" for n, unit in ((hours, "h"), (minutes, "min"), (seconds, "s")) if n]
    return " ".join(parts) or f"{value / timing.ONE_MS:.0f} ms"
