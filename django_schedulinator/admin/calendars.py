"""Calendars of excluded days in the admin. The form reads the days from the calendar's
source (the lines typed, the public holidays of a country, an iCalendar file) and reports a
source it cannot read on its fields; each save and delete goes through the services, which
re-plan the schedules that name the calendar and refuse to delete one in use.

The schedules that name a calendar are named as the schedule admin shows them: one whose
``get_queryset`` keeps a user to some schedules (``scopes.of_admin``) names only those, and
says that others name it too."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils.text import capfirst
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_schedulinator import services
from django_schedulinator.admin.display import ExactTimes
from django_schedulinator.importers import days as calendars
from django_schedulinator.index import clock
from django_schedulinator.models import Calendar, Schedule, ScheduleChange, scopes
from django_schedulinator.services import Origin

WEEKDAYS = [
    (1, _("Monday")), (2, _("Tuesday")), (3, _("Wednesday")), (4, _("Thursday")),
    (5, _("Friday")), (6, _("Saturday")), (7, _("Sunday")),
]  # fmt: skip

if TYPE_CHECKING:
    _ModelForm = forms.ModelForm[Calendar]
else:  # not generic at run time
    _ModelForm = forms.ModelForm


class CalendarForm(_ModelForm):
    weekend = forms.TypedMultipleChoiceField(
        label=capfirst(_("weekend")),
        choices=WEEKDAYS,
        coerce=int,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_(
            "Not business days: an occurrence is never moved onto one. Public holidays take "
            "the country's."
        ),
    )
    days_text = forms.CharField(
        label=capfirst(_("days")),
        required=False,
        widget=forms.Textarea(attrs={"rows": 12, "cols": 60, "class": "schedulinator-json"}),
        help_text=_(
            "By hand: a day a line, YYYY-MM-DD and an optional name, such as "
            "“2026-12-25 Christmas Day”. Filled from a source, the days it gave."
        ),
    )
    icalendar_file = forms.FileField(
        label=_("iCalendar file"),
        required=False,
        help_text=_("Source iCalendar: the .ics file to read the days from (at most 1 MB)."),
    )
    years = forms.CharField(
        label=capfirst(_("years")),
        required=False,
        max_length=9,
        help_text=_(
            "Public holidays and iCalendar: the years to fill, such as 2026-2036 (blank: "
            "last year to ten years ahead)."
        ),
    )

    class Meta:
        model = Calendar
        fields = ("name", "description", "timezone", "weekend", "source", "country", "subdivision")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.days: list[tuple[date, str]] | None = None  # None: the days stay as they are
        if self.instance.pk is not None:
            # Every day (at most MAX_DAYS): the box is what a save by hand keeps.
            days = self.instance.days.all()
            self.fields["days_text"].initial = "\n".join(str(day) for day in days)

    def clean_years(self) -> range:
        return calendars.parse_years(self.cleaned_data.get("years") or "", clock.now().date())

    # The schedules its user may see (set by CalendarAdmin.get_form; None: all).
    scope: scopes.Scope = None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        renamed = self.instance.pk is not None and cleaned.get("name") not in (
            None,
            self.instance.name,
        )
        users, others = (
            services.calendar_use(self.instance.name, scope=self.scope) if renamed else ([], False)
        )
        if users or others:
            self.add_error(
                "name",
                gettext("Schedules name this calendar (%(names)s): it keeps its name.")
                % {"names": users_text(users, others)},
            )
        source = cleaned.get("source")
        if source == Calendar.Source.MANUAL:
            self.days = self._typed_days(cleaned.get("days_text") or "")
            return cleaned
        years = cleaned.get("years")
        if not isinstance(years, range):
            return cleaned  # its error is shown
        probe = Calendar(
            source=source or "",
            country=cleaned.get("country") or "",
            subdivision=cleaned.get("subdivision") or "",
        )
        upload = cleaned.get("icalendar_file")
        if source == Calendar.Source.ICALENDAR and upload is None:
            if self.instance.pk is None or self.instance.source != source:
                self.add_error("icalendar_file", _("Choose the iCalendar file to read."))
            return cleaned  # kept: the days read from the last file
        if source == Calendar.Source.HOLIDAYS and not probe.country:
            return cleaned  # the model says the country is missing
        data = upload.read(calendars.MAX_ICALENDAR_BYTES + 1) if upload is not None else None
        try:
            self.days = calendars.days_from_source(probe, years=years, icalendar=data)
        except ValidationError as exc:
            self.add_error(None if hasattr(exc, "error_dict") else "icalendar_file", exc)
            return cleaned
        if source == Calendar.Source.HOLIDAYS:
            cleaned["weekend"] = probe.weekend
        return cleaned

    def _typed_days(self, text: str) -> list[tuple[date, str]] | None:
        days: list[tuple[date, str]] = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            day, _space, name = line.strip().partition(" ")
            try:
                days.append((date.fromisoformat(day), name.strip()))
            except ValueError:
                self.add_error(
                    "days_text",
                    gettext("Line %(number)d: %(day)r is not a date (YYYY-MM-DD).")
                    % {"number": number, "day": day},
                )
                return None
        return days


def users_text(users: list[str], others: bool) -> str:
    """The names of the schedules that name a calendar, and whether others the user may
    not see name it too."""
    shown = ", ".join(users[:10]) + (", ..." if len(users) > 10 else "")
    if not others:
        return shown
    if not users:
        return gettext("schedules you cannot see")
    return gettext("%(names)s and schedules you cannot see") % {"names": shown}


@admin.register(Calendar)
class CalendarAdmin(ExactTimes):
    form = CalendarForm
    list_display = ("name", "description", "timezone", "source", "country", "subdivision",
                    "day_count", "updated_at")  # fmt: skip
    list_filter = ("source",)
    search_fields = ("name", "description")
    readonly_fields = ("used_by", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "description", "timezone", "weekend")}),
        (
            _("Days"),
            {
                "fields": (
                    "source",
                    "country",
                    "subdivision",
                    "icalendar_file",
                    "years",
                    "days_text",
                )
            },
        ),
        (_("Schedules"), {"fields": ("used_by", "updated_at")}),
    )

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if request.user.has_perm(f"{Schedule._meta.app_label}.view_schedule"):
            return fieldsets
        # Which schedules name it is theirs to see: only with the schedules' permission.
        return [fs for fs in fieldsets if "used_by" not in fs[1]["fields"]]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Calendar]:
        # The days counted in the list's one query, not one query a row.
        rows: QuerySet[Calendar] = super().get_queryset(request)
        return rows.annotate(day_total=Count("days"))

    @admin.display(description=_("days"), ordering="day_total")
    def day_count(self, obj: Calendar) -> int:
        return int(getattr(obj, "day_total", 0))

    def _scope(self, request: HttpRequest) -> scopes.Scope:
        """The schedules the schedule admin of this site shows the user (None: all)."""
        try:
            schedule_admin = self.admin_site.get_model_admin(Schedule)
        except NotRegistered:
            return None
        return scopes.of_admin(schedule_admin, request)

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:  # who uses it, as this user may see them (``used_by``)
            obj.used_as_shown = services.calendar_use(obj.name, scope=self._scope(request))
        return obj

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"scope": self._scope(request)})

    @admin.display(description=_("used by"))
    def used_by(self, obj: Calendar) -> str:
        users, others = getattr(obj, "used_as_shown", None) or services.calendar_use(obj.name)
        return users_text(users, others) if users or others else gettext("no schedule")

    @staticmethod
    def _origin(request: HttpRequest) -> Origin:
        return Origin(getattr(request, "user", None), ScheduleChange.Source.ADMIN)

    def save_model(self, request: HttpRequest, obj: Calendar, form: Any, change: bool) -> None:
        moved = services.save_calendar(
            obj, days=form.days, origin=self._origin(request), scope=self._scope(request)
        )
        if moved:
            self.message_user(
                request,
                gettext("Re-planned %(count)d schedule(s) that name this calendar.")
                % {"count": moved},
            )

    def delete_model(self, request: HttpRequest, obj: Calendar) -> None:
        services.delete_calendar(obj, origin=self._origin(request), scope=self._scope(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        scope = self._scope(request)
        for calendar in queryset:
            services.delete_calendar(calendar, origin=self._origin(request), scope=scope)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """Django's list, with the schedules that name a calendar as protected: a calendar
        in use is not deleted (take it out of them first)."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        scope = self._scope(request)
        for calendar in objs:
            users, others = services.calendar_use(calendar.name, scope=scope)
            protected.extend(
                gettext("Schedule %(name)s names the calendar %(calendar)s.")
                % {"name": name, "calendar": calendar.name}
                for name in users
            )
            if others:
                protected.append(
                    gettext("Schedules you cannot see name the calendar %(calendar)s.")
                    % {"calendar": calendar.name}
                )
        return deleted, counts, perms_needed, protected
