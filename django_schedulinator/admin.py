"""Admin for schedules, their runs and their change log, and the scheduler's operations page.

Tasks are chosen from the registry, never typed. Every change made here is recorded in the
change log (``ScheduleChange``) in the transaction of the change itself, and a change made
from a stale form is refused: the schedule's ``version`` travels with the form.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import NestedObjects, flatten_fieldsets, quote, unquote
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import connections, router, transaction
from django.db.models import Model, OuterRef, QuerySet, Subquery
from django.forms.fields import InvalidJSONInput
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.text import Truncator, capfirst
from django.utils.timesince import timesince, timeuntil
from redis.exceptions import RedisError

from . import health, rebuild, services, sync, timing
from .changelog import Origin
from .conf import app_settings
from .errors import ScheduleDeleted, ServiceError, VersionConflict
from .index import ApplyResult, DueIndex, get_index
from .models import Run, Schedule, ScheduleChange, json_text_too_deep, json_too_deep_error
from .registry import registry

logger = logging.getLogger("django_schedulinator.admin")

# Shown in messages; longer selections end in "and N more".
NAMES_SHOWN = 10
CHANGES_SHOWN = 10  # change-log entries on the change form
VALUE_CHARS = 60  # one value in a change summary
SUMMARY_CHARS = 300  # a whole change summary in a list
COUNT_LIMIT = 10_000  # rows a long list counts past the start of its page


# -- formatting -------------------------------------------------------------------------------


def _zone(name: str) -> Any:
    try:
        return timing.get_zone(name)
    except timing.TimingError:  # a row saved before its zone left tzdata: still show it
        return UTC


def local_time(value: datetime, zone_name: str) -> str:
    """``value`` in the zone called ``zone_name``, with the zone's abbreviation."""
    local = value.astimezone(_zone(zone_name))
    return local.strftime(f"%Y-%m-%d %H:%M{':%S' if local.second else ''} %Z")


def relative(value: datetime, now: datetime | None = None) -> str:
    """Relative to now: "in 4 minutes", "3 minutes ago" (two units at most)."""
    now = now or timezone.now()
    if abs(value - now) < timedelta(minutes=1):
        return "in less than a minute" if value > now else "less than a minute ago"
    if value > now:
        return f"in {timeuntil(value, now, depth=2)}"
    return f"{timesince(value, now, depth=2)} ago"


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


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _names(items: Sequence[Any]) -> str:
    names = [str(item) for item in items]
    shown = ", ".join(names[:NAMES_SHOWN])
    if len(names) > NAMES_SHOWN:
        shown += f" and {len(names) - NAMES_SHOWN} more"
    return shown


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return str(exc)


def _changelist_url(model: type[Model], **filters: Any) -> str:
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def _may_view(admin_site: admin.AdminSite, request: HttpRequest, model: type[Model]) -> bool:
    """Whether the admin's page of ``model`` would let this user in: a link to it, or what
    it lists, is shown only then."""
    if not admin_site.is_registered(model):
        return False
    return bool(admin_site.get_model_admin(model).has_view_permission(request))


def _count_at_most(queryset: QuerySet[Any], limit: int) -> int:
    """The rows of ``queryset``, counted up to ``limit``: a COUNT over a LIMITed subquery
    (without its ordering), so a large table is never counted whole."""
    return queryset.order_by()[:limit].count()


# -- the change form --------------------------------------------------------------------------


class PrettyJSONField(forms.JSONField):
    """Shows the value indented, so that args and kwargs can be read and edited."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            value = ""  # spaces alone are an empty box, not invalid JSON
        if isinstance(value, str) and json_text_too_deep(value):  # json.loads would recurse
            raise json_too_deep_error()
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        if isinstance(data, str) and json_text_too_deep(data):
            return InvalidJSONInput(data)  # shown again as typed, with its error
        return super().bound_data(data, initial)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value  # what was typed, shown again with its error
        return json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)


class JSONEditorWidget(forms.Textarea):
    """A monospace textarea whose script says at once whether the text is valid JSON (and
    of the expected type). The model's validation stays the source of truth."""

    template_name = "django_schedulinator/admin/json_editor.html"

    def __init__(self, attrs: dict[str, Any] | None = None, *, json_type: str = "") -> None:
        defaults = {"class": "schedulinator-json", "cols": "60", "spellcheck": "false"}
        if json_type:
            defaults["data-json-type"] = json_type  # "array" or "object"
        super().__init__({**defaults, **(attrs or {})})

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        lines = str(value or "").count("\n") + 1
        context["widget"]["attrs"]["rows"] = str(min(max(lines + 1, 3), 20))
        return context

    class Media:
        js = ("django_schedulinator/json_editor.js",)
        css = {"all": ("django_schedulinator/admin.css",)}


STALE_EDIT = (
    "This schedule was changed by someone else while you edited it (now version "
    "%(current)s, you started from %(started)s). Reload the page to see their change, then "
    "make yours again."
)


# The fields whose values decide the next runs: the preview follows them as they are edited.
PREVIEW_FIELDS = Schedule.TIMING_FIELDS

ARGS_EXPECTED = 'Enter a JSON list: [] for no arguments, or for example [1, "a"].'
KWARGS_EXPECTED = 'Enter a JSON object: {} for no keyword arguments, or for example {"a": 1}.'


class ScheduleForm(forms.ModelForm):
    # The version the form was loaded at: an edit based on an older one is refused. Text,
    # read in clean(): an error of a hidden field would not be seen.
    version = forms.CharField(required=False, widget=forms.HiddenInput)

    class Meta:
        model = Schedule
        fields = Schedule.SETTINGS_FIELDS
        field_classes = {"args": PrettyJSONField, "kwargs": PrettyJSONField}
        widgets = {
            "args": JSONEditorWidget(json_type="array"),
            "kwargs": JSONEditorWidget(json_type="object"),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A choice list from the registry: a dotted path typed into the admin can never
        # reach the scheduler. A saved schedule's task stays a choice when it is no longer
        # registered, so the schedule remains editable; no other unregistered name is one.
        current = self.instance.task if self.instance.pk is not None else None
        self.fields["task"] = forms.ChoiceField(
            choices=[("", "---------"), *registry.choices(current)],
            help_text=Schedule._meta.get_field("task").help_text,
        )
        if "version" in self.fields and self.instance.pk is not None:
            self.fields["version"].initial = self.instance.version

    # An empty box reaches the model as None, whose error names a Python type: say what
    # to type instead. Empty is an error, not [] or {}, so that a box cleared by mistake
    # never drops the arguments silently.
    def clean_args(self) -> Any:
        value = self.cleaned_data.get("args")
        if not isinstance(value, list):
            raise ValidationError(ARGS_EXPECTED, code="not_a_list")
        return value

    def clean_kwargs(self) -> Any:
        value = self.cleaned_data.get("kwargs")
        if not isinstance(value, dict):
            raise ValidationError(KWARGS_EXPECTED, code="not_an_object")
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.instance.pk is not None and "version" in self.fields:
            self._check_version(cleaned.get("version"))
        return cleaned

    def _check_version(self, posted: str | None) -> None:
        try:
            started_from: int | None = int(posted or "")
        except ValueError:
            started_from = None
        if started_from is None:
            raise ValidationError(
                "The form does not say which version of the schedule it edits. Reload the "
                "page, then make your change again.",
                code="no_version",
            )
        # The admin's change view runs in a transaction: the service keeps the row locked
        # until the save, so no other edit can slip in between this check and the write.
        try:
            services.lock_for_edit(self.instance, started_from)
        except ScheduleDeleted:
            raise ValidationError(
                "This schedule was deleted while you edited it.", code="deleted"
            ) from None
        except VersionConflict as exc:
            raise ValidationError(
                STALE_EDIT,
                code="stale",
                params={"current": exc.current, "started": started_from},
            ) from None


PAUSE_NOTE_MAX = Schedule._meta.get_field("pause_note").max_length


class ScheduleActionForm(helpers.ActionForm):
    # No max_length here: any error of this form makes Django say "No action selected."
    # The pause action checks the note with the model's own rules and says what is wrong;
    # the browser's maxlength only helps while typing.
    note = forms.CharField(
        required=False,
        label="Note (for pause)",
        widget=forms.TextInput(attrs={"maxlength": str(PAUSE_NOTE_MAX)}),
    )


# -- changelist filters ------------------------------------------------------------------------

UNREGISTERED = "__unregistered__"
NEVER_RUN = "never"


class TaskFilter(admin.SimpleListFilter):
    """The registered tasks (the dispatcher is process-wide: the task is what differs)."""

    title = "task"
    parameter_name = "task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*registry.choices(), (UNREGISTERED, "Not registered (cannot run)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == UNREGISTERED:
            return queryset.exclude(task__in=registry.names())
        if value:
            return queryset.filter(task=value)
        return queryset


class LastRunStatusFilter(admin.SimpleListFilter):
    """The status of each schedule's most recent run (an annotation of the changelist)."""

    title = "status of last run"
    parameter_name = "last_run_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [*Run.Status.choices, (NEVER_RUN, "Never run")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == NEVER_RUN:
            return queryset.filter(last_run_status__isnull=True)
        if value:
            return queryset.filter(last_run_status=value)
        return queryset


# -- deleting -----------------------------------------------------------------------------------


class _RunsCountedCollector(NestedObjects):
    """What a delete takes with it, except the runs: a schedule may have millions, so they
    are counted rather than listed (and never loaded)."""

    def can_fast_delete(self, objs: Any, from_field: Any = None) -> bool:
        if hasattr(objs, "_meta"):  # a model (the relations of what is collected)
            return objs._meta.model is Run
        if hasattr(objs, "_raw_delete"):  # a queryset
            return objs.model is Run
        return False


# -- the schedule admin ---------------------------------------------------------------------------

STATE_FIELDS = (
    "next_run_at",
    "due_at",
    "last_run_at",
    "run_count",
    "failure_streak",
    "paused_at",
    "settings_version",
    "revision",
    "created_at",
    "updated_at",
)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    action_form = ScheduleActionForm
    change_list_template = "django_schedulinator/admin/schedule_change_list.html"
    operations_template = "django_schedulinator/admin/operations.html"
    actions = ["pause", "resume", "run_now", "resync_index"]
    list_display = (
        "name",
        "task",
        "kind",
        "description",
        "timezone",
        "next_run",
        "last_run",
        "enabled",
        "runs_link",
    )
    list_filter = ("kind", "enabled", TaskFilter, LastRunStatusFilter)
    search_fields = ("name", "task")
    readonly_fields = ("description", "preview", "run_ledger", "recent_changes", *STATE_FIELDS)
    fieldsets = (
        (
            None,
            {"fields": ("name", "task", "args", "kwargs", "enabled", "pause_note", "version")},
        ),
        ("Next runs", {"fields": ("description", "preview")}),
        ("When", {"fields": ("kind", "cron", "interval", "run_at", "timezone", "anchor_at")}),
        ("Daylight saving time (cron)", {"fields": ("dst_gap", "dst_fold")}),
        ("Window and limits", {"fields": ("start_at", "end_at", "max_runs", "jitter")}),
        (
            "Missed runs, overlap and failures",
            {"fields": ("catch_up", "catch_up_window", "overlap", "pause_after_failures")},
        ),
        ("State", {"fields": STATE_FIELDS}),
        ("History", {"fields": ("run_ledger", "recent_changes")}),
    )

    class Media:
        js = ("django_schedulinator/preview.js",)
        css = {"all": ("django_schedulinator/admin.css",)}

    # -- queryset and form ----------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        # The most recent run of each schedule, as two subqueries served by the unique
        # (schedule, scheduled_for) index: a page costs the same queries whatever its size.
        latest = Run.objects.filter(schedule=OuterRef("pk")).order_by("-scheduled_for")
        return (
            super()
            .get_queryset(request)
            .annotate(
                last_run_status=Subquery(latest.values("status")[:1]),
                last_run_time=Subquery(latest.values("scheduled_for")[:1]),
            )
        )

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:  # nothing to show yet
            return [fs for fs in fieldsets if fs[0] != "History"]
        # The runs and the change log (before/after values of args and kwargs) only for
        # those whose permissions open their own pages.
        hidden = {
            name
            for name, model in (("run_ledger", Run), ("recent_changes", ScheduleChange))
            if not _may_view(self.admin_site, request, model)
        }
        shown = []
        for title, options in fieldsets:
            fields = [f for f in options["fields"] if f not in hidden]
            if fields:
                shown.append((title, {**options, "fields": fields}))
        return shown

    def get_list_display(self, request: HttpRequest) -> list[Any] | tuple[Any, ...]:
        columns = super().get_list_display(request)
        if _may_view(self.admin_site, request, Run):
            return columns
        return [c for c in columns if c != "runs_link"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        fields = kwargs.get("fields")
        if fields is None:
            fields = flatten_fieldsets(self.get_fieldsets(request, obj))
        # "version" is the form's own hidden field; as a model field it is not editable, and
        # naming it would make the form factory refuse it.
        kwargs["fields"] = [name for name in fields if name != "version"]
        return super().get_form(request, obj, change, **kwargs)

    # -- changelist columns ---------------------------------------------------------------

    @admin.display(description="description")
    def description(self, obj: Schedule) -> str:
        # On the change form, preview.js replaces the text as the timing is edited.
        text = obj.description if obj.pk is not None else "Fill in the timing to see it here."
        return format_html('<span id="schedulinator-description">{}</span>', text)

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj: Schedule) -> str | None:
        if obj.next_run_at is None:
            return None  # finished: the admin's empty value
        if not obj.enabled:
            return format_html(
                '<span class="schedulinator-paused" title="{}">paused</span>', obj.pause_note
            )
        # The local nominal time; "in ..." counts to when it fires (jitter included).
        return format_html(
            '<span class="schedulinator-time">{}</span><br>'
            '<span class="schedulinator-relative">{}</span>',
            local_time(obj.next_run_at, obj.timezone),
            relative(obj.due_at or obj.next_run_at),
        )

    @admin.display(description="last run", ordering="last_run_time")
    def last_run(self, obj: Schedule) -> str:
        status = getattr(obj, "last_run_status", None)
        at = getattr(obj, "last_run_time", None)
        if status is None or at is None:
            return format_html('<span class="schedulinator-status">{}</span>', "never run")
        label = Run.Status(status).label if status in Run.Status.values else status
        return format_html(
            '<span class="schedulinator-status schedulinator-status-{}">{}</span><br>'
            '<span class="schedulinator-time">{}</span><br>'
            '<span class="schedulinator-relative">{}</span>',
            status,
            label,
            local_time(at, obj.timezone),
            relative(at),
        )

    @admin.display(description="runs")
    def runs_link(self, obj: Schedule) -> str:
        return format_html(
            '<a href="{}">Runs</a>', _changelist_url(Run, schedule__id__exact=obj.pk)
        )

    # -- change form (read-only parts) ----------------------------------------------------

    @admin.display(description="next runs")
    def preview(self, obj: Schedule) -> str:
        # preview.js posts the form to preview_url as the timing is edited and puts what
        # preview_view answers in this box: the next runs before the form is saved.
        info = self.opts.app_label, self.opts.model_name
        if obj.pk is None:
            url = reverse("admin:{}_{}_preview".format(*info))
            shown = "Fill in the timing to see the next runs here."
        else:
            url = reverse("admin:{}_{}_preview_change".format(*info), args=[quote(obj.pk)])
            shown = self._preview_html(obj)
        return format_html(
            '<div id="schedulinator-preview-box" data-preview-url="{}" data-timing-fields="{}" '
            'aria-live="polite">{}</div>',
            url,
            " ".join(PREVIEW_FIELDS),
            shown,
        )

    def _preview_html(self, obj: Schedule) -> str:
        try:
            items = obj.preview(app_settings.PREVIEW_COUNT)
        except (ValueError, TypeError) as exc:  # a form shown again with invalid timing
            return format_html("<p>No preview while the timing is invalid ({}).</p>", exc)
        intro: str = ""
        if not obj.enabled:
            intro = format_html(
                '<p class="schedulinator-paused-note">{}</p>',
                "The schedule is paused: these are the runs that would follow a resume now.",
            )
        if not items:
            return format_html(
                "{}<p>{}</p>", intro, "No more runs: the schedule has finished or ended."
            )
        rows = format_html_join(
            "\n",
            '<tr class="{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (self._preview_row(obj, item) for item in items),
        )
        return format_html(
            '{}<table id="schedulinator-preview" class="schedulinator-preview">'
            "<thead><tr><th>Local time</th><th>UTC</th><th>Fires at</th><th>DST</th></tr>"
            "</thead><tbody>{}</tbody></table>",
            intro,
            rows,
        )

    @staticmethod
    def _preview_row(obj: Schedule, item: timing.PreviewItem) -> tuple[str, ...]:
        flagged = bool(item.dst or item.note or item.skipped)
        classes = " ".join(
            name for name, applies in (("dst", flagged), ("skipped", item.skipped)) if applies
        )
        if item.skipped:
            fires = "does not fire"
        elif item.due_at != item.at:  # jitter
            fires = local_time(item.due_at, obj.timezone)
        else:
            fires = ""
        note: str = ""
        if flagged:
            note = format_html(
                '<span class="schedulinator-dst-flag">⚠ DST</span> {}',
                item.note or "Skipped: this local time does not exist.",
            )
        return (
            classes,
            f"{item.local:%a %Y-%m-%d %H:%M:%S %Z}",
            f"{item.at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC",
            fires,
            note,
        )

    @admin.display(description="version")
    def settings_version(self, obj: Schedule) -> int | None:
        # Not "version": that name is the form's hidden field, which a read-only field of
        # the same name would remove.
        return obj.version if obj.pk is not None else None

    @admin.display(description="runs")
    def run_ledger(self, obj: Schedule) -> str:
        if obj.pk is None:
            return ""
        # One schedule's runs may be many: counted as far as the runs list counts them.
        count = _count_at_most(Run.objects.filter(schedule_id=obj.pk), COUNT_LIMIT + 1)
        text = f"More than {COUNT_LIMIT:,} runs" if count > COUNT_LIMIT else _count(count, "run")
        return format_html(
            '<a href="{}" id="schedulinator-runs-link">{}</a>',
            _changelist_url(Run, schedule__id__exact=obj.pk),
            text,
        )

    @admin.display(description="change log")
    def recent_changes(self, obj: Schedule) -> str:
        if obj.pk is None:
            return ""
        entries = list(ScheduleChange.objects.filter(schedule_id=obj.pk)[:CHANGES_SHOWN])
        link = format_html(
            '<a href="{}" id="schedulinator-changes-link">{}</a>',
            _changelist_url(ScheduleChange, schedule__id__exact=obj.pk),
            "The whole change log of this schedule",
        )
        if not entries:
            return format_html("<p>{}</p>{}", "No changes recorded yet.", link)
        rows = format_html_join(
            "\n",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    f"{timezone.localtime(entry.at):%Y-%m-%d %H:%M:%S %Z}",
                    entry.actor_name or "—",
                    entry.get_source_display(),
                    entry.get_action_display(),
                    summarise_changes(entry.action, entry.changes),
                )
                for entry in entries
            ),
        )
        return format_html(
            '<table id="schedulinator-changes" class="schedulinator-changes"><thead><tr>'
            "<th>When</th><th>Who</th><th>Source</th><th>Action</th><th>Changes</th>"
            "</tr></thead><tbody>{}</tbody></table><p>{}</p>",
            rows,
            link,
        )

    # -- saving and deleting: recorded in the change log, in the same transaction ---------

    @staticmethod
    def _origin(request: HttpRequest) -> Origin:
        return Origin(getattr(request, "user", None), ScheduleChange.Source.ADMIN)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        if change:
            services.update(obj, origin=self._origin(request))
        else:
            services.create(obj, origin=self._origin(request))

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        services.delete(obj, origin=self._origin(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        services.delete_many(list(queryset), origin=self._origin(request))

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """Django's list of what a delete takes with it, with the runs counted: they are
        the schedules' own ledger (read-only in the admin) and go with their schedule."""
        objs = list(objs)
        if not objs:
            return [], {}, set(), []
        collector = _RunsCountedCollector(using=router.db_for_write(Schedule), origin=objs)
        collector.collect(objs)
        perms_needed: set[str] = set()

        def describe(obj: Any) -> str:
            opts = obj._meta
            if not self.admin_site.is_registered(type(obj)):
                return f"{capfirst(opts.verbose_name)}: {obj}"
            if not self.admin_site.get_model_admin(type(obj)).has_delete_permission(request, obj):
                perms_needed.add(str(opts.verbose_name))
            try:
                url = reverse(
                    f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_change",
                    args=(quote(obj.pk),),
                )
            except NoReverseMatch:
                return f"{capfirst(opts.verbose_name)}: {obj}"
            return format_html('{}: <a href="{}">{}</a>', capfirst(opts.verbose_name), url, obj)

        to_delete = collector.nested(describe)
        protected = [describe(obj) for obj in collector.protected]
        collected: dict[Any, Any] = collector.model_objs  # typed loosely by the stubs
        model_count = {
            str(model._meta.verbose_name_plural): len(instances)
            for model, instances in collected.items()
        }
        runs = sum(qs.count() for qs in collector.fast_deletes if qs.model is Run)
        if runs:
            model_count[str(Run._meta.verbose_name_plural)] = runs
            to_delete.append(f"{capfirst(_count(runs, 'run'))}: the ledger of the schedules above")
        return to_delete, model_count, perms_needed, protected

    # -- actions --------------------------------------------------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # An action the user may not run is refused outright rather than ignored.
        action = request.POST.get("action") if request.method == "POST" else None
        if action and action not in self.get_actions(request):
            raise PermissionDenied
        extra_context = {
            **(extra_context or {}),
            "can_view_operations": request.user.has_perm(f"{self.opts.app_label}.view_operations"),
        }
        return super().changelist_view(request, extra_context)

    def _resync(self, request: HttpRequest, ids: list[int]) -> ApplyResult | None:
        """Bring the index entries of ``ids`` in line with their committed rows, or say
        why not."""
        if not ids:
            return None
        db = router.db_for_write(Schedule)
        try:
            return sync.resync_schedules(ids, using=db)
        except RedisError as exc:
            logger.warning("Could not update the due index for schedules %s: %s", ids, exc)
            self.message_user(
                request,
                f"The due index could not be updated ({exc}). The changes are saved; the "
                "schedulers' reconcile brings the index in line once Redis is reachable.",
                messages.ERROR,
            )
            return None

    def _resync_on_commit(self, request: HttpRequest, ids: list[int]) -> None:
        """``_resync`` once the action's changes are committed: at once in autocommit, at
        the end of the request's transaction under ATOMIC_REQUESTS (still before the
        messages are stored, so a failure is reported; it is logged in any case). Before the
        commit it would index rows that may yet roll back."""
        if ids:
            db = router.db_for_write(Schedule)
            # robust: the rows are committed by then, so no error may turn into a 500.
            transaction.on_commit(partial(self._resync, request, ids), using=db, robust=True)

    def _report_failures(self, request: HttpRequest, failed: list[tuple[Schedule, str]]) -> None:
        for schedule, error in failed[:NAMES_SHOWN]:
            self.message_user(request, f"{schedule.name}: {error}", messages.ERROR)
        if len(failed) > NAMES_SHOWN:
            self.message_user(
                request,
                f"And {_count(len(failed) - NAMES_SHOWN, 'more schedule')} failed: "
                f"{_names([s for s, _error in failed[NAMES_SHOWN:]])}.",
                messages.ERROR,
            )

    @admin.action(description="Pause selected schedules", permissions=("change",))
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        note = str(request.POST.get("note", "")).strip()
        try:  # once, with the model's rules: the same error for every schedule says nothing
            Schedule._meta.get_field("pause_note").clean(note, None)
        except ValidationError as exc:
            self.message_user(
                request,
                f"Nothing was paused. Note (for pause): {_error_text(exc)}",
                messages.ERROR,
            )
            return
        origin = self._origin(request)
        paused: list[Schedule] = []
        already: list[Schedule] = []
        failed: list[tuple[Schedule, str]] = []
        for schedule in queryset:
            if not schedule.enabled:
                already.append(schedule)
                continue
            try:
                services.pause(schedule, note, origin=origin)
            except (ServiceError, ValidationError) as exc:
                failed.append((schedule, _error_text(exc)))
                continue
            paused.append(schedule)
        if paused:
            with_note = f' with the note "{note}"' if note else ""
            self.message_user(
                request,
                f"Paused {_count(len(paused), 'schedule')}{with_note}: {_names(paused)}.",
                messages.SUCCESS,
            )
        if already:
            self.message_user(
                request,
                f"Already paused, left as they were: {_names(already)}.",
                messages.WARNING,
            )
        self._report_failures(request, failed)
        self._resync_on_commit(request, [s.pk for s in paused])

    @admin.action(description="Resume selected schedules", permissions=("change",))
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        origin = self._origin(request)
        resumed: list[Schedule] = []
        running: list[Schedule] = []
        failed: list[tuple[Schedule, str]] = []
        for schedule in queryset:
            if schedule.enabled:
                running.append(schedule)
                continue
            try:
                services.resume(schedule, origin=origin)
            except (ServiceError, ValidationError) as exc:
                failed.append((schedule, _error_text(exc)))
                continue
            resumed.append(schedule)
        if resumed:
            self.message_user(
                request,
                f"Resumed {_count(len(resumed), 'schedule')}: {_names(resumed)}.",
                messages.SUCCESS,
            )
        if running:
            self.message_user(
                request, f"Not paused, left as they were: {_names(running)}.", messages.WARNING
            )
        self._report_failures(request, failed)
        self._resync_on_commit(request, [s.pk for s in resumed])

    @admin.action(description="Run selected schedules now", permissions=("change",))
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        origin = self._origin(request)
        queued: list[Schedule] = []
        failed: list[tuple[Schedule, str]] = []
        for schedule in queryset:
            try:
                services.run_now(schedule, origin=origin)
            except (ServiceError, ValidationError) as exc:
                failed.append((schedule, _error_text(exc)))
                continue
            queued.append(schedule)
        if queued:
            self.message_user(
                request,
                f"Queued {_count(len(queued), 'run')} now: {_names(queued)}. A running "
                "scheduler dispatches them at once.",
                messages.SUCCESS,
            )
        self._report_failures(request, failed)

    @admin.action(
        description="Resync the due index for selected schedules", permissions=("change",)
    )
    def resync_index(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        schedules = list(queryset)
        try:
            result = services.resync(schedules, origin=self._origin(request))
        except RedisError as exc:
            logger.warning(
                "Could not resync the due index for %d schedules: %s", len(schedules), exc
            )
            self.message_user(
                request,
                f"The due index could not be updated ({exc}). The changes are saved; the "
                "schedulers' reconcile brings the index in line once Redis is reachable.",
                messages.ERROR,
            )
            return
        stale = f"; {result.stale} refused: the index held a newer write" if result.stale else ""
        self.message_user(
            request,
            f"Resynced the due index for {_count(len(schedules), 'schedule')} "
            f"({result.changed} index entries added, moved or removed{stale}): "
            f"{_names(schedules)}.",
            messages.SUCCESS,
        )

    # -- the operations page --------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "operations/",
                self.admin_site.admin_view(self.operations_view),
                name="{}_{}_operations".format(*info),
            ),
            path(
                "preview/",
                self.admin_site.admin_view(self.preview_view),
                name="{}_{}_preview".format(*info),
            ),
            path(
                "<path:object_id>/preview/",
                self.admin_site.admin_view(self.preview_view),
                name="{}_{}_preview_change".format(*info),
            ),
            *super().get_urls(),
        ]

    def preview_view(self, request: HttpRequest, object_id: str | None = None) -> HttpResponse:
        """The description and next runs of the timing in a posted add or change form, not
        saved: validated by the form's own rules (the model's), so what it shows is what
        saving would give. Writes nothing; needs the permission to save that form."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = None
        if object_id is not None:
            obj = self.get_object(request, unquote(object_id))
            if obj is None:
                raise Http404("No such schedule.")
            if not self.has_change_permission(request, obj):
                raise PermissionDenied
        elif not self.has_add_permission(request):
            raise PermissionDenied
        form = self.get_form(request, obj, change=obj is not None)(request.POST, instance=obj)
        form.is_valid()  # sets on the instance what is valid, and collects the errors
        errors = [
            (form.fields[name].label if name in form.fields else name, message)
            for name, messages_ in form.errors.items()
            if name in PREVIEW_FIELDS
            for message in messages_
        ]
        if errors:
            return JsonResponse(
                {
                    "description": "",
                    "preview": format_html(
                        '<p class="schedulinator-preview-invalid">{}</p><ul>{}</ul>',
                        "The next runs show here once the timing is valid:",
                        format_html_join("", "<li>{}: {}</li>", errors),
                    ),
                }
            )
        schedule = form.instance
        return JsonResponse(
            {"description": schedule.description, "preview": self._preview_html(schedule)}
        )

    def operations_view(self, request: HttpRequest) -> HttpResponse:
        label = self.opts.app_label
        if not request.user.has_perm(f"{label}.view_operations"):
            raise PermissionDenied
        can_rebuild = request.user.has_perm(f"{label}.rebuild_index")
        if request.method == "POST":
            if not can_rebuild:
                raise PermissionDenied
            self._start_rebuild(request)
            return HttpResponseRedirect(request.get_full_path())  # POST/redirect/GET
        status: health.IndexStatus | None = None
        redis_error = ""
        try:
            status = health.index_status()
        except RedisError as exc:
            redis_error = str(exc) or type(exc).__name__
        context = {
            **self.admin_site.each_context(request),
            "title": "Scheduler operations",
            "opts": self.opts,
            "status": status,
            "checked_at": iso_text(status.checked_at) if status is not None else "",
            "rows": self._status_rows(status) if status is not None else [],
            "redis_error": redis_error,
            "can_rebuild": can_rebuild,
        }
        return TemplateResponse(request, self.operations_template, context)

    def _status_rows(self, status: health.IndexStatus) -> list[dict[str, Any]]:
        lag = status.oldest_due_lag_seconds
        return [
            {"key": key, "label": label, "value": value, "help": help_text}
            for key, label, value, help_text in (
                ("schedules", "Schedules", status.schedules, "Rows in the database."),
                ("enabled", "Enabled", status.enabled, "Not paused."),
                (
                    "indexable",
                    "To index",
                    status.indexable,
                    "Enabled with a next run: each calls for one entry in the due index.",
                ),
                (
                    "entries",
                    "Entries in the index",
                    status.entries_due,
                    "Entries of the due index, due or not.",
                ),
                (
                    "due-now",
                    "Due now",
                    status.due_now,
                    "Entries whose time has come and that no scheduler has claimed yet.",
                ),
                (
                    "in-flight",
                    "In flight (entries)",
                    status.in_flight,
                    "Entries claimed by a scheduler and not yet written back.",
                ),
                (
                    "runs-in-flight",
                    "Runs in flight (ledger)",
                    status.runs_in_flight,
                    "Runs pending or running.",
                ),
                (
                    "lag",
                    "Oldest due lag",
                    "none due" if lag is None else f"{lag:.1f} s",
                    "How late the earliest unclaimed due entry is.",
                ),
                ("drift", "Drift", self._drift_text(status.drift), "A sampled comparison."),
                (
                    "last-rebuild",
                    "Last rebuild",
                    self._rebuild_text(status.last_rebuild),
                    "The build marker of the due index.",
                ),
                (
                    "rebuild-running",
                    "Rebuild running",
                    "yes" if status.rebuild_running else "no",
                    "",
                ),
            )
        ]

    def _drift_text(self, drift: health.DriftReport | None) -> str:
        if drift is None:
            return "not checked"
        if drift.ok:
            return format_html('<span class="schedulinator-ok">{}</span>', drift.summary())
        links = format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            (
                (reverse(f"admin:{self.opts.app_label}_schedule_change", args=(pk,)), pk)
                for pk in drift.late_or_missing[:20]
            ),
        )
        return format_html(
            '<span class="schedulinator-drift">{}</span><br>Late or missing: {}',
            drift.summary(),
            links,
        )

    @staticmethod
    def _rebuild_text(info: dict[str, Any] | None) -> str:
        if info is None:
            return "never"
        if not info:
            return "unknown (the marker cannot be read)"
        return (
            f"{iso_text(info.get('built_at', 'unknown time'))}: {info.get('rows', '?')} rows, by "
            f"{info.get('by', 'unknown')}"
        )

    def _start_rebuild(self, request: HttpRequest) -> None:
        try:
            index = get_index()
            # Taken here, so the page can say whether the rebuild runs; the thread releases it.
            lock = rebuild.take_rebuild_lock(index)
        except RedisError as exc:
            self.message_user(
                request, f"Redis is unreachable, so no rebuild was started ({exc}).", messages.ERROR
            )
            return
        except rebuild.RebuildInProgress:
            self.message_user(
                request,
                "A rebuild is already running; reload this page to see when it has finished.",
                messages.WARNING,
            )
            return
        built_by = f"admin:{request.user.get_username()}"
        thread = threading.Thread(
            target=_rebuild_in_background,
            args=(index, lock, built_by),
            name="schedulinator-admin-rebuild",
            daemon=True,
        )
        thread.start()
        self.message_user(
            request,
            "Rebuild started: it runs in the background under the same lock as manage.py "
            "rebuild_due_index. Reload this page to see when it has finished.",
            messages.SUCCESS,
        )


def _rebuild_in_background(index: DueIndex, lock: Any, built_by: str) -> None:
    """The body of the operations page's rebuild thread: a request must not wait for it."""
    try:
        report = rebuild.rebuild_index(index, built_by=built_by, lock=lock)
        logger.info("Rebuild of the due index by %s done: %d rows.", built_by, report.rows)
    except Exception:
        logger.exception("Rebuild of the due index requested by %s failed.", built_by)
    finally:
        connections.close_all()  # this thread's own connections


# -- the ledger and the change log: read-only -------------------------------------------------


class CappedCountPaginator(Paginator):
    """Counts at most ``limit`` rows: ``count`` is exact below it, and ``capped`` says that
    there are at least ``limit`` rows (more than ``limit - 1``)."""

    def __init__(self, object_list: Any, per_page: int, *args: Any, limit: int, **kwargs: Any):
        super().__init__(object_list, per_page, *args, **kwargs)
        self.limit = limit

    @cached_property
    def count(self) -> int:
        objects = self.object_list
        if isinstance(objects, QuerySet):
            return _count_at_most(objects, self.limit)
        return min(len(objects), self.limit)  # a list: capped alike

    @property
    def capped(self) -> bool:
        return self.count >= self.limit


class CappedChangeList(ChangeList):
    """A changelist whose paginator stops counting: the page says "More than N ..."."""

    paginator: CappedCountPaginator

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.count_capped = self.paginator.capped
        if self.count_capped:
            # The search bar prints "N results" whenever full_result_count (None: not
            # counted) differs from result_count; made equal, it does not print the cap.
            self.full_result_count = self.result_count

    @property
    def count_text(self) -> str:
        return f"More than {self.paginator.limit - 1:,} {self.opts.verbose_name_plural}"

    @property
    def page_range(self) -> list[Any]:
        return list(self.paginator.get_elided_page_range(self.page_num))


class CappedCountAdmin(admin.ModelAdmin):
    """A list that may grow large: each page counts at most ``count_limit`` rows past its
    start (the next pages stay reachable, a deep page costs its own OFFSET and no more), and
    nothing counts the whole table: no full count, no counts by filter choice."""

    count_limit = COUNT_LIMIT
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    change_list_template = "django_schedulinator/admin/capped_change_list.html"

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return CappedChangeList

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: QuerySet[Any],
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> CappedCountPaginator:
        try:  # read as the changelist reads it
            page = max(int(request.GET.get(PAGE_VAR, 1)), 1)
        except ValueError:
            page = 1
        # At least a page, and more than "show all" may list: a capped count never offers it.
        ahead = max(self.count_limit, per_page, self.list_max_show_all)
        limit = (page - 1) * per_page + ahead + 1
        return CappedCountPaginator(
            queryset, per_page, orphans, allow_empty_first_page, limit=limit
        )


@admin.register(Run)
class RunAdmin(CappedCountAdmin):
    list_display = (
        "schedule",
        "scheduled_for",
        "status",
        "trigger",
        "skip_reason",
        "attempts",
        "worker_id",
        "claimed_at",
        "finished_at",
        "short_note",
    )
    list_filter = ("status", "skip_reason", "trigger")
    list_select_related = ("schedule",)
    search_fields = ("schedule__name", "task")

    def get_ordering(self, request: HttpRequest) -> tuple[str, ...]:
        # Orders an index can serve, so a page never sorts the whole ledger: one schedule's
        # runs by time (the unique (schedule, scheduled_for) index), all runs newest first
        # by id. An index on scheduled_for alone would cost every run insert.
        if "schedule__id__exact" in request.GET:
            return ("-scheduled_for",)
        return ("-id",)

    @admin.display(description="note")
    def short_note(self, obj: Run) -> str:
        return Truncator(obj.note).chars(80)

    # The ledger records what happened: nobody adds, edits or deletes runs by hand.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ScheduleChange)
class ScheduleChangeAdmin(CappedCountAdmin):
    list_display = ("at", "schedule_link", "actor_name", "source", "action", "summary")
    list_filter = ("source", "action")
    search_fields = ("schedule_name", "actor_name")
    date_hierarchy = "at"

    @admin.display(description="schedule", ordering="schedule_name")
    def schedule_link(self, obj: ScheduleChange) -> str:
        # Not named schedule_name: the model field of that name would take its place.
        if obj.schedule_id is None:  # deleted since
            return obj.schedule_name
        url = reverse(
            f"admin:{Schedule._meta.app_label}_{Schedule._meta.model_name}_change",
            args=(quote(obj.schedule_id),),
        )
        return format_html('<a href="{}">{}</a>', url, obj.schedule_name)

    @admin.display(description="changes")
    def summary(self, obj: ScheduleChange) -> str:
        return summarise_changes(obj.action, obj.changes)

    # The audit trail is written by the changes themselves, never by hand.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


__all__ = [
    "JSONEditorWidget",
    "RunAdmin",
    "ScheduleActionForm",
    "ScheduleAdmin",
    "ScheduleChangeAdmin",
    "ScheduleForm",
]
