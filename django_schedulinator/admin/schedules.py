"""The schedule admin: list, change form with live previews, and the bulk actions.

Tasks are chosen from the registry, never typed. Every change made here goes through the
services (``django_schedulinator.services``), which record it in the change log in the
transaction of the change itself; a change made from a stale form is refused: the
schedule's ``version`` travels with the form.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.utils import NestedObjects, flatten_fieldsets, quote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import router
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, URLPattern, reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import capfirst
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from redis.exceptions import RedisError

from django_schedulinator import declared, services
from django_schedulinator.admin import views
from django_schedulinator.admin.actions import (
    each,
    index_not_updated,
    report,
    report_failures,
    report_index_failure_on_commit,
)
from django_schedulinator.admin.display import (
    CHANGES_SHOWN,
    COUNT_LIMIT,
    ExactTimes,
    changelist_url,
    count_at_most,
    error_text,
    exact_time,
    list_time,
    may_view,
    relative,
    runs_text,
    summarise_changes,
)
from django_schedulinator.admin.filters import (
    LastRunStatusFilter,
    MissedFilter,
    TaskFilter,
    TimingGroupFilter,
)
from django_schedulinator.admin.forms import PREVIEW_FIELDS, ScheduleActionForm, ScheduleForm
from django_schedulinator.admin.pictures import lateness, marks
from django_schedulinator.index import sync
from django_schedulinator.models import Calendar, Run, Schedule, ScheduleChange
from django_schedulinator.models.querysets import ScheduleQuerySet
from django_schedulinator.services import Origin

logger = logging.getLogger("django_schedulinator.admin")


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
    "fired_through",
    "run_count",
    "failure_streak",
    "missed_at",
    "paused_at",
    "settings_version",
    "revision",
    "created_at",
    "updated_at",
)


HISTORY = _("History")
MAIN_FIELDS = ("name", "task", "args", "kwargs", "enabled", "pause_note")


def _declared(schedule: Schedule) -> bool:
    """Declared in code now: its definition is read-only here, and it cannot be deleted."""
    return bool(schedule.declared_in) and schedule.name in declared.declared_names()


@admin.register(Schedule)
class ScheduleAdmin(ExactTimes):
    form = ScheduleForm
    action_form = ScheduleActionForm
    change_list_template = "django_schedulinator/admin/schedule_change_list.html"
    actions = ["pause", "resume", "run_now", "resync_index"]
    # What fits a laptop's screen (1,366 px wide, with the filters beside it): the kind and
    # the zone are in the description, the times carry the zone's abbreviation, and the
    # rest is on the change page.
    list_display = (
        "name",
        "task_name",
        "timing_text",
        "next_run",
        "last_run",
        "missed",
        "enabled",
        "runs_link",
    )
    list_filter = (
        "kind", "enabled", TaskFilter, LastRunStatusFilter, MissedFilter, TimingGroupFilter
    )  # fmt: skip
    search_fields = ("name", "task")
    readonly_fields = (
        "declared_in", "description", "preview", "last_runs", "run_ledger", "recent_changes",
        *STATE_FIELDS,
    )  # fmt: skip
    fieldsets = (
        (
            None,
            {"fields": (*MAIN_FIELDS, "declared_in", "version")},
        ),
        (_("Next runs"), {"fields": ("description", "preview")}),
        (
            _("When"),
            {"fields": ("kind", "cron", "day_rule", "interval", "run_at", "timezone", "anchor_at")},
        ),
        (
            _("Sun (solar)"),
            {"fields": ("solar_event", ("latitude", "longitude"), "solar_offset")},
        ),
        (_("Daylight saving time (cron)"), {"fields": ("dst_gap", "dst_fold")}),
        (_("Excluded days"), {"fields": ("calendars", "calendar_rule")}),
        (_("Window and limits"), {"fields": ("start_at", "end_at", "max_runs", "jitter")}),
        (
            _("Missed runs, overlap and failures"),
            {"fields": ("catch_up", "catch_up_window", "overlap", "pause_after_failures", "grace")},
        ),
        (_("Dispatch"), {"fields": ("dispatcher", "dispatch_options")}),
        (_("State"), {"fields": STATE_FIELDS}),
        (HISTORY, {"fields": ("last_runs", "run_ledger", "recent_changes")}),
    )

    class Media:
        js = ("django_schedulinator/preview.js",)
        css = {"all": ("django_schedulinator/admin.css",)}

    # -- queryset and form ----------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        # The most recent run of each schedule, as two subqueries served by the unique
        # (schedule, scheduled_for) index: a page costs the same queries whatever its size.
        latest = Run.objects.filter(schedule=OuterRef("pk")).order_by("-scheduled_for")
        schedules = super().get_queryset(request)
        assert isinstance(schedules, ScheduleQuerySet)
        return (
            cast("ScheduleQuerySet[Schedule]", schedules)
            .with_missed_mark()
            .annotate(
                last_run_status=Subquery(latest.values("status")[:1]),
                last_run_time=Subquery(latest.values("scheduled_for")[:1]),
            )
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_readonly_fields(request, obj)
        if obj is not None and _declared(obj):
            # Its definition is the code's; its pause state stays editable here.
            return (*fields, "name", *declared.definition_fields())
        return fields

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or not obj.declared_in:  # made by hand: nothing declared to show
            fieldsets = [
                (title, {**options, "fields": [f for f in options["fields"] if f != "declared_in"]})
                for title, options in fieldsets
            ]
        if obj is None:  # nothing to show yet
            return [fs for fs in fieldsets if fs[0] != HISTORY]
        # The runs and the change log (before/after values of args and kwargs) only for
        # those whose permissions open their own pages.
        hidden = {
            name
            for name, model in (
                ("last_runs", Run),
                ("run_ledger", Run),
                ("recent_changes", ScheduleChange),
            )
            if not may_view(self.admin_site, request, model)
        }
        shown = []
        for title, options in fieldsets:
            fields = [f for f in options["fields"] if f not in hidden]
            if fields:
                shown.append((title, {**options, "fields": fields}))
        return shown

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        columns = super().get_list_display(request)
        if may_view(self.admin_site, request, Run):
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
        form = cast("type[ScheduleForm]", super().get_form(request, obj, change, **kwargs))
        # A class of this request's own (the factory makes one per call).
        form.calendar_add_url = self._calendar_add_url(request)
        return form

    def _calendar_add_url(self, request: HttpRequest) -> str:
        """The calendar admin's add page, for a user who may add a calendar; else ""."""
        if not self.admin_site.is_registered(Calendar):
            return ""
        if not self.admin_site.get_model_admin(Calendar).has_add_permission(request):
            return ""
        return reverse(f"{self.admin_site.name}:{Calendar._meta.app_label}_calendar_add")

    # -- changelist columns ---------------------------------------------------------------

    @admin.display(description=_("description"))
    def description(self, obj: Schedule) -> str:
        # On the change form, preview.js replaces the text as the timing is edited.
        text = (
            obj.description if obj.pk is not None else gettext("Fill in the timing to see it here.")
        )
        return format_html('<span id="schedulinator-description">{}</span>', text)

    @admin.display(description=_("description"))
    def timing_text(self, obj: Schedule) -> str:
        """The description, which a narrow column may break after a slash too (in a zone's
        name: "Europe/<wbr>Berlin")."""
        slash = format_html("{}<wbr>", "/")
        return format_html_join(slash, "{}", ((part,) for part in obj.description.split("/")))

    @admin.display(description=_("task"), ordering="task")
    def task_name(self, obj: Schedule) -> str:
        """The task's dotted path, which a narrow column may break after a dot only."""
        dot = format_html("{}<wbr>", ".")
        return format_html_join(dot, "{}", ((part,) for part in obj.task.split(".")))

    @admin.display(description=_("next run"), ordering="next_run_at")
    def next_run(self, obj: Schedule) -> str | None:
        if obj.next_run_at is None:
            return None  # finished: the admin's empty value
        if not obj.enabled:
            return format_html(
                '<span class="schedulinator-paused" title="{}">paused</span>', obj.pause_note
            )
        # The local nominal time; "in ..." counts to when it fires (jitter included).
        return format_html(
            '{}<br><span class="schedulinator-relative">{}</span>',
            list_time(obj.next_run_at, obj.timezone, seconds=None),
            relative(obj.due_at or obj.next_run_at),
        )

    @admin.display(description=_("last run"), ordering="last_run_time")
    def last_run(self, obj: Schedule) -> str:
        status = getattr(obj, "last_run_status", None)
        at = getattr(obj, "last_run_time", None)
        if status is None or at is None:
            return format_html('<span class="schedulinator-status">{}</span>', gettext("never run"))
        label = Run.Status(status).label if status in Run.Status.values else status
        return format_html(
            '<span class="schedulinator-status schedulinator-status-{}">{}</span><br>'
            '{}<br><span class="schedulinator-relative">{}</span>',
            status,
            label,
            list_time(at, obj.timezone, seconds=None),
            relative(at),
        )

    @admin.display(description=_("missed"), ordering="missed_at")
    def missed(self, obj: Schedule) -> str:
        """The latest occurrence with no success within the grace, until a run at or after
        it succeeds (docs/alerts.md)."""
        if obj.missed_at is None or not getattr(obj, "missed_open", True):
            return ""
        # The column says "missed": the time alone, the exact one in the tooltip.
        return list_time(
            obj.missed_at,
            obj.timezone,
            seconds=True,
            css_class="schedulinator-missed",
            note=gettext("No successful run within the grace; none has succeeded since."),
        )

    @admin.display(description=_("runs"))
    def runs_link(self, obj: Schedule) -> str:
        return format_html(
            '<a href="{}">{}</a>', changelist_url(Run, schedule__id__exact=obj.pk), gettext("Runs")
        )

    # -- change form (read-only parts) ----------------------------------------------------

    @admin.display(description=_("next runs"))
    def preview(self, obj: Schedule) -> str:
        # preview.js posts the form to preview_url as the timing is edited and puts what
        # preview_view answers in this box: the next runs before the form is saved.
        info = self.opts.app_label, self.opts.model_name
        if obj.pk is None:
            url = reverse("admin:{}_{}_preview".format(*info))
            shown = gettext("Fill in the timing to see the next runs here.")
        else:
            url = reverse("admin:{}_{}_preview_change".format(*info), args=[quote(obj.pk)])
            shown = views.preview_html(obj)
        return format_html(
            '<div id="schedulinator-preview-box" data-preview-url="{}" data-timing-fields="{}" '
            'aria-live="polite">{}</div>',
            url,
            " ".join(PREVIEW_FIELDS),
            shown,
        )

    @admin.display(description=_("version"))
    def settings_version(self, obj: Schedule) -> int | None:
        # Not "version": that name is the form's hidden field, which a read-only field of
        # the same name would remove.
        return obj.version if obj.pk is not None else None

    @admin.display(description=_("last runs"))
    def last_runs(self, obj: Schedule) -> str:
        if obj.pk is None:
            return ""
        runs = lateness.recent_runs(obj.pk, marks.STRIP_RUNS)
        return marks.run_strip_html(obj, runs)

    @admin.display(description=_("runs"))
    def run_ledger(self, obj: Schedule) -> str:
        if obj.pk is None:
            return ""
        # One schedule's runs may be many: counted as far as the runs list counts them.
        count = count_at_most(Run.objects.filter(schedule_id=obj.pk), COUNT_LIMIT + 1)
        text = (
            gettext("More than %(count)s runs") % {"count": f"{COUNT_LIMIT:,}"}
            if count > COUNT_LIMIT
            else runs_text(count)
        )
        return format_html(
            '<a href="{}" id="schedulinator-runs-link">{}</a>',
            changelist_url(Run, schedule__id__exact=obj.pk),
            text,
        )

    @admin.display(description=_("change log"))
    def recent_changes(self, obj: Schedule) -> str:
        if obj.pk is None:
            return ""
        entries = [
            {
                "when": exact_time(entry.at),
                "who": entry.actor_name or "—",
                "source": entry.get_source_display(),
                "action": entry.get_action_display(),
                "summary": summarise_changes(entry.action, entry.changes),
            }
            for entry in ScheduleChange.objects.filter(schedule_id=obj.pk)[:CHANGES_SHOWN]
        ]
        url = changelist_url(ScheduleChange, schedule__id__exact=obj.pk)
        return render_to_string(
            "django_schedulinator/admin/recent_changes.html", {"entries": entries, "url": url}
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
        # Declared in code: deleted here, the next sync would create it again.
        protected += [
            format_html(
                "{} {}",
                describe(obj),
                gettext("(declared in code, in %(where)s: remove it there)")
                % {"where": obj.declared_in},
            )
            for obj in objs
            if isinstance(obj, Schedule) and _declared(obj)
        ]
        collected: dict[Any, Any] = collector.model_objs  # typed loosely by the stubs
        model_count = {
            str(model._meta.verbose_name_plural): len(instances)
            for model, instances in collected.items()
        }
        runs = sum(qs.count() for qs in collector.fast_deletes if qs.model is Run)
        if runs:
            model_count[str(Run._meta.verbose_name_plural)] = runs
            to_delete.append(
                gettext("%(runs)s: the ledger of the schedules above")
                % {"runs": capfirst(runs_text(runs))}
            )
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

    @admin.action(description=_("Pause selected schedules"), permissions=("change",))
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        note = str(request.POST.get("note", "")).strip()
        try:  # once, with the model's rules: the same error for every schedule says nothing
            Schedule._meta.get_field("pause_note").clean(note, None)
        except ValidationError as exc:
            self.message_user(
                request,
                gettext("Nothing was paused. Note (for pause): %(error)s")
                % {"error": error_text(exc)},
                messages.ERROR,
            )
            return
        origin = self._origin(request)
        failures_before, _error = sync.failed_writes()
        paused, already, failed = each(
            queryset,
            lambda schedule: services.pause(schedule, note, origin=origin),
            skip=lambda schedule: not schedule.enabled,
        )
        report(
            self,
            request,
            paused,
            gettext('Paused %(schedules)s with the note "%(note)s": %(names)s.')
            if note
            else gettext("Paused %(schedules)s: %(names)s."),
            note=note,
        )
        report(
            self,
            request,
            already,
            gettext("Already paused, left as they were: %(names)s."),
            messages.WARNING,
        )
        report_failures(self, request, failed)
        if paused:
            report_index_failure_on_commit(self, request, failures_before)

    @admin.action(description=_("Resume selected schedules"), permissions=("change",))
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        origin = self._origin(request)
        failures_before, _error = sync.failed_writes()
        resumed, running, failed = each(
            queryset,
            lambda schedule: services.resume(schedule, origin=origin),
            skip=lambda schedule: schedule.enabled,
        )
        report(self, request, resumed, gettext("Resumed %(schedules)s: %(names)s."))
        report(
            self,
            request,
            running,
            gettext("Not paused, left as they were: %(names)s."),
            messages.WARNING,
        )
        report_failures(self, request, failed)
        if resumed:
            report_index_failure_on_commit(self, request, failures_before)

    @admin.action(description=_("Run selected schedules now"), permissions=("change",))
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        origin = self._origin(request)
        queued, _skipped, failed = each(
            queryset, lambda schedule: services.run_now(schedule, origin=origin)
        )
        report(
            self,
            request,
            queued,
            gettext("Queued %(runs)s now: %(names)s. A running scheduler dispatches them at once."),
        )
        report_failures(self, request, failed)

    @admin.action(
        description=_("Resync the due index for selected schedules"), permissions=("change",)
    )
    def resync_index(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        schedules = list(queryset)
        try:
            result = services.resync(schedules, origin=self._origin(request))
        except RedisError as exc:
            logger.warning(
                "Could not resync the due index for %d schedules: %s", len(schedules), exc
            )
            self.message_user(request, index_not_updated(exc), messages.ERROR)
            return
        report(
            self,
            request,
            schedules,
            gettext(
                "Resynced the due index for %(schedules)s (%(changed)s index entries added, "
                "moved or removed; %(stale)s refused: the index held a newer write): %(names)s."
            )
            if result.stale
            else gettext(
                "Resynced the due index for %(schedules)s (%(changed)s index entries added, "
                "moved or removed): %(names)s."
            ),
            changed=result.changed,
            stale=result.stale,
        )

    # -- the preview and the operations page (views.py) --------------------------------

    def get_urls(self) -> list[URLPattern]:
        return [*views.urls(self), *super().get_urls()]
