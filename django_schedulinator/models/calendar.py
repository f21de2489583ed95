"""Calendars of excluded days, and what a process keeps of the days it loaded."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Sequence
from datetime import date

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from django_schedulinator import timing
from django_schedulinator.errors import TimingError
from django_schedulinator.models.validators import (
    validate_weekend,
)
from django_schedulinator.timing.days import LoadedCalendar, calendar_of


def default_timezone() -> str:
    """The zone a schedule or a calendar gets when it names none: the project's."""
    return settings.TIME_ZONE or "UTC"


def default_weekend() -> list[int]:
    return [6, 7]  # Saturday and Sunday


def new_stamp() -> str:
    return uuid.uuid4().hex


class Calendar(models.Model):
    """A named set of excluded days (holidays), each a whole day in the calendar's zone.
    Schedules name the calendars they keep away from (``Schedule.calendars``). Every change
    goes through ``services`` (``create_calendar``, ``update_calendar``, ``fill_calendar``,
    ``delete_calendar``), which re-plans the schedules that use it."""

    class Source(models.TextChoices):
        MANUAL = "manual", _("By hand")
        HOLIDAYS = "holidays", _("Public holidays (the holidays package)")
        ICALENDAR = "ical", _("An iCalendar file")

    name = models.SlugField(
        _("name"),
        max_length=100,
        unique=True,
        help_text=_("How schedules name it: letters, digits, - and _."),
    )
    description = models.CharField(_("description"), max_length=500, blank=True)
    timezone = models.CharField(
        _("timezone"),
        max_length=64,
        default=default_timezone,
        help_text=_("IANA zone whose midnights start and end its days."),
    )
    weekend = models.JSONField(
        _("weekend"),
        default=default_weekend,
        blank=True,
        validators=[validate_weekend],
        help_text=_(
            "ISO weekdays (1 is Monday, 7 Sunday) that are not business days: an occurrence "
            "is never moved onto one."
        ),
    )
    source = models.CharField(
        _("source"), max_length=16, choices=Source.choices, default=Source.MANUAL
    )
    country = models.CharField(
        _("country"),
        max_length=8,
        blank=True,
        help_text=_("Public holidays: an ISO 3166 country code, such as GB or US."),
    )
    subdivision = models.CharField(
        _("subdivision"),
        max_length=16,
        blank=True,
        help_text=_("Public holidays: a region the holidays package knows, such as ENG or CA."),
    )
    # A new one on every change: what the schedulers' cache of excluded days is keyed on.
    stamp = models.CharField(_("stamp"), max_length=32, editable=False, default=new_stamp)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("calendar")
        verbose_name_plural = _("calendars")
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        try:
            timing.get_zone(self.timezone)
        except TimingError as exc:
            raise ValidationError({"timezone": str(exc)}) from exc
        if self.source == self.Source.HOLIDAYS and not self.country:
            raise ValidationError({"country": _("Public holidays need a country.")})


class ExcludedDay(models.Model):
    """One day a calendar excludes."""

    calendar = models.ForeignKey(
        Calendar, on_delete=models.CASCADE, related_name="days", verbose_name=_("calendar")
    )
    day = models.DateField(_("day"))
    name = models.CharField(_("name"), max_length=200, blank=True)

    class Meta:
        verbose_name = _("excluded day")
        verbose_name_plural = _("excluded days")
        ordering = ("day",)
        constraints = [
            models.UniqueConstraint(fields=["calendar", "day"], name="schedulinator_day_once")
        ]

    def __str__(self) -> str:
        return f"{self.day:%Y-%m-%d} {self.name}".strip()


# -- the excluded days a process loaded ----------------------------------------------------
#
# Schedulers and web processes keep the days they loaded, keyed on each calendar's ``stamp``
# (a new one on every change): a claim costs one small query for the stamps of the calendars
# its schedules name, and reads the days again only after a change. What the timing rules
# see of them (``DayCalendar``) is built from what was loaded, without a row
# (``timing.days.calendar_of``).

_loaded: dict[tuple[str, str], LoadedCalendar] = {}  # (database alias, name) -> the latest loaded
_lock = threading.Lock()


def load_calendars(names: Iterable[str], *, using: str) -> dict[str, LoadedCalendar]:
    """The calendars named (those that exist), their days read again only where their
    stamp moved since this process last read them."""
    wanted = set(names)
    if not wanted:
        return {}
    rows = Calendar.objects.using(using).filter(name__in=wanted)
    current = {
        name: (stamp, zone, weekend)
        for name, stamp, zone, weekend in rows.values_list("name", "stamp", "timezone", "weekend")
    }
    stale = [
        name
        for name, (stamp, _zone, _weekend) in current.items()
        if (cached := _loaded.get((using, name))) is None or cached.stamp != stamp
    ]
    if stale:
        days: dict[str, list[tuple[date, str]]] = {name: [] for name in stale}
        found = (
            ExcludedDay.objects.using(using)
            .filter(calendar__name__in=stale)
            .order_by("day")
            .values_list("calendar__name", "day", "name")
        )
        for name, day, label in found:
            days[name].append((day, label))
        with _lock:
            for name in stale:
                stamp, zone, weekend = current[name]
                _loaded[(using, name)] = LoadedCalendar(
                    stamp, zone, frozenset(weekend or ()), tuple(days[name])
                )
    return {name: _loaded[(using, name)] for name in current}


def day_calendar(
    names: Sequence[str],
    rule: str,
    *,
    using: str,
    loaded: dict[str, LoadedCalendar] | None = None,
) -> timing.DayCalendar:
    """The excluded days of the calendars ``names`` (a name that has no calendar is left
    out: the schedule's validation says so), for the timing rules. ``loaded``: what a
    claim loaded for its whole batch (``load_calendars``)."""
    found = load_calendars(names, using=using) if loaded is None else loaded
    return calendar_of(found, names, rule)
