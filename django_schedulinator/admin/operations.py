"""The scheduler's operations page: the schedulers alive, the state of the due index, the
problems ``scheduler_status`` reports, pictures of the next 24 hours and of recent
lateness, and a rebuild on request.

A view with its template, like a dashboard: it reads ``health.cluster_status()`` and shows it,
with the forecast of occurrences per minute (``forecast.py``) and the lateness histogram
(``lateness.py``), drawn by ``pictures/drawing.py`` (the schedulers, by ``pictures/marks.py``);
both read the database only, so they show while Redis is down. The rebuild button only records
the request in Redis; the first scheduler to look performs it with the same function as
``manage.py rebuild_due_index``, under the same lock (a request never runs the rebuild itself,
nor starts a thread that would outlive it).

A schedule admin whose ``get_queryset`` keeps a user to some schedules (Django's way to
restrict an admin's rows) keeps the page to them too (``scopes.of_admin``): its figures,
problems, warnings and pictures count and name those only, and the index's own counts,
which count every schedule, are not shown.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from redis.exceptions import RedisError

from django_schedulinator.admin.display import _ModelAdmin, exact_time, iso_text
from django_schedulinator.admin.pictures import drawing as pictures
from django_schedulinator.admin.pictures import forecast, lateness, marks
from django_schedulinator.conf import app_settings
from django_schedulinator.index.due import get_index
from django_schedulinator.management import run_command
from django_schedulinator.models import Schedule, SchedulerOperations, scopes
from django_schedulinator.operations import dispatcher_health, health, index_health

TEMPLATE = "django_schedulinator/admin/operations.html"
DRIFT_SHOWN = 20  # late or missing schedules linked from the drift row


def operations_view(request: HttpRequest, model_admin: ModelAdmin[Schedule]) -> HttpResponse:
    opts = model_admin.opts
    if not request.user.has_perm(f"{opts.app_label}.view_operations"):
        raise PermissionDenied
    can_rebuild = request.user.has_perm(f"{opts.app_label}.rebuild_index")
    if request.method == "POST":
        if not can_rebuild:
            raise PermissionDenied
        ask_for_rebuild(request, model_admin)
        return HttpResponseRedirect(request.get_full_path())  # POST/redirect/GET
    report: health.ClusterStatus | None = None
    status: index_health.IndexStatus | None = None
    asked: dict[str, Any] | None = None
    redis_error = ""
    scope = scopes.of_admin(model_admin, request)
    try:
        report = health.cluster_status(scope=scope)
        status = report.index
        asked = get_index().control.rebuild_request()
    except RedisError as exc:
        redis_error = str(exc) or type(exc).__name__
    findings = [] if report is None else [*report.problems, *report.warnings]
    schedulers = [] if report is None else scheduler_rows(report)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Scheduler operations"),
        "opts": opts,
        "status": status,
        "checked_at": iso_text(status.checked_at) if status is not None else "",
        "rows": status_rows(status, asked, opts.app_label) if status is not None else [],
        "schedulers": schedulers,
        "no_scheduler": any(f.code == "no-scheduler" for f in findings),
        "run_scheduler": run_command("run_scheduler", html=True),
        "problems": [] if report is None else shown(report.problems),
        "warnings": [] if report is None else shown(report.warnings),
        # Redis away: the ledger still says what waits on each dispatcher.
        "dispatchers": dispatcher_health.dispatcher_status(timezone.now(), scope=scope)
        if report is None
        else report.dispatchers,
        "redis_error": redis_error,
        "can_rebuild": can_rebuild,
        "rebuild_command": run_command("rebuild_due_index", html=True),
        "alive": ""
        if report is None
        else marks.schedulers_html(schedulers, app_settings.PASS_STALE_SECONDS),
        "forecast": pictures.forecast_html(forecast.forecast(scope=scope)),
        "lateness": pictures.lateness_html(lateness.histogram(scope=scope)),
    }
    return TemplateResponse(request, TEMPLATE, context)


# Findings the page shows in notes of their own (the scheduler table, drift, eviction).
SHOWN_APART = ("no-scheduler", "drift", "eviction-risk")


def shown(findings: list[health.Finding]) -> list[health.Finding]:
    return [f for f in findings if f.code not in SHOWN_APART]


STATES = {"healthy": _("healthy"), "stale": _("stale: no recent pass"), "stopping": _("stopping")}


def scheduler_rows(report: health.ClusterStatus) -> list[dict[str, Any]]:
    """One row per scheduler alive: who, since when, its last pass, its lanes, its state."""
    rows = []
    for beat in report.schedulers:
        age = beat.pass_age(report.checked_at)
        state = beat.state(report.checked_at)
        lanes = [
            gettext("%(alias)s: %(waiting)s") % {"alias": alias, "waiting": lane.waiting}
            if not lane.waiting or lane.oldest_seconds is None
            else gettext("%(alias)s: %(waiting)s (oldest %(seconds).1f s)")
            % {"alias": alias, "waiting": lane.waiting, "seconds": lane.oldest_seconds}
            for alias, lane in beat.lanes.items()
        ]
        rows.append(
            {
                "beat": beat,
                "started": exact_time(beat.started_at),
                "last_pass": gettext("none yet")
                if beat.last_pass_at is None or age is None
                else gettext("%(time)s (%(seconds).1f s ago)")
                % {"time": exact_time(beat.last_pass_at), "seconds": age},
                "lanes": ", ".join(lanes),
                "age": age,
                "state": state,
                "state_label": STATES[state],
            }
        )
    return rows


def ask_for_rebuild(request: HttpRequest, model_admin: ModelAdmin[Schedule]) -> None:
    """Record the request; a scheduler performs it (see ``Worker._rebuild_if_asked``)."""
    by = f"admin:{request.user.get_username()}"
    try:
        recorded = get_index().control.request_rebuild({"by": by, "at": timezone.now().isoformat()})
    except RedisError as exc:
        model_admin.message_user(
            request,
            gettext("Redis is unreachable, so no rebuild was asked for (%(error)s).")
            % {"error": exc},
            messages.ERROR,
        )
        return
    if not recorded:
        model_admin.message_user(
            request,
            gettext(
                "A rebuild is already asked for; reload this page to see when a scheduler "
                "has performed it."
            ),
            messages.WARNING,
        )
        return
    model_admin.message_user(
        request,
        format_html(
            gettext(
                "Rebuild asked for: the first scheduler to look (within seconds) rebuilds the "
                "index under the same lock as {command}. With no scheduler running, run "
                "{command} instead."
            ),
            command=run_command("rebuild_due_index", html=True),
        ),
        messages.SUCCESS,
    )


def status_rows(
    status: index_health.IndexStatus, asked: dict[str, Any] | None, app_label: str
) -> list[dict[str, Any]]:
    lag = status.oldest_due_lag_seconds
    # Under a scope the index's own counts (of every schedule) are not shown.
    hidden = gettext("not counted: the index holds every schedule")
    rows: tuple[tuple[str, Any, Any, Any], ...] = (
        ("schedules", _("Schedules"), status.schedules, _("Rows in the database.")),
        ("enabled", _("Enabled"), status.enabled, _("Not paused.")),
        (
            "indexable",
            _("To index"),
            status.indexable,
            _("Enabled with a next run: each calls for one entry in the due index."),
        ),
        (
            "entries",
            _("Entries in the index"),
            hidden if status.entries_due is None else status.entries_due,
            _("Entries of the due index, due or not."),
        ),
        (
            "due-now",
            _("Due now"),
            hidden if status.due_now is None else status.due_now,
            _("Entries whose time has come and that no scheduler has claimed yet."),
        ),
        (
            "in-flight",
            _("In flight (entries)"),
            hidden if status.in_flight is None else status.in_flight,
            _("Entries claimed by a scheduler and not yet written back."),
        ),
        (
            "runs-in-flight",
            _("Runs in flight (ledger)"),
            status.runs_in_flight,
            _("Runs pending or running."),
        ),
        (
            "lag",
            _("Oldest due lag"),
            gettext("none due") if lag is None else f"{lag:.1f} s",
            _("How late the earliest unclaimed due entry is."),
        ),
        ("drift", _("Drift"), drift_html(status.drift, app_label), _("A sampled comparison.")),
        (
            "last-rebuild",
            _("Last rebuild"),
            rebuild_text(status.last_rebuild),
            _("The build marker of the due index."),
        ),
        (
            "rebuild-running",
            _("Rebuild running"),
            gettext("yes") if status.rebuild_running else gettext("no"),
            "",
        ),
        (
            "rebuild-asked",
            _("Rebuild asked for"),
            asked_text(asked),
            _("Performed by the first scheduler to look."),
        ),
    )
    if status.shard_count > 1 or status.other_layout is not None:
        rows += (
            (
                "shards",
                _("Shards"),
                shards_text(status),
                _("INDEX_SHARDS: per shard, its entries, due now and in flight."),
            ),
        )
    return [
        {"key": key, "label": label, "value": value, "help": help_text}
        for key, label, value, help_text in rows
    ]


def drift_html(drift: index_health.DriftReport | None, app_label: str) -> str:
    if drift is None:
        return gettext("not checked")
    late = [
        (pk, reverse(f"admin:{app_label}_schedule_change", args=(pk,)))
        for pk in drift.late_or_missing[:DRIFT_SHOWN]
    ]
    return render_to_string("django_schedulinator/admin/drift.html", {"drift": drift, "late": late})


def shards_text(status: index_health.IndexStatus) -> str:
    """One line per shard, or what the index was built for when it is not INDEX_SHARDS."""
    if status.other_layout is not None:
        return gettext(
            "built for %(built)d shard(s), and INDEX_SHARDS is %(shards)d: nothing fires "
            "until it is rebuilt"
        ) % {"built": status.other_layout, "shards": status.shard_count}
    if status.scoped:  # their entries count every schedule: whether each is built
        return "; ".join(
            gettext("%(shard)d: built") % {"shard": row["shard"]}
            if row["built"]
            else gettext("%(shard)d: not built") % {"shard": row["shard"]}
            for row in status.shards
        )
    return "; ".join(
        gettext("%(shard)d: %(entries)d entries, %(due)d due, %(inflight)d in flight%(state)s")
        % {
            "shard": row["shard"],
            "entries": row["entries_due"],
            "due": row["due_now"],
            "inflight": row["in_flight"],
            "state": "" if row["built"] else gettext(" (not built)"),
        }
        for row in status.shards
    )


def rebuild_text(info: dict[str, Any] | None) -> str:
    if info is None:
        return gettext("never")
    if not info:
        return gettext("unknown (the marker cannot be read)")
    if "rows" not in info:  # under a scope: they count every schedule
        return gettext("%(when)s, by %(by)s") % {
            "when": iso_text(info.get("built_at", gettext("unknown time"))),
            "by": info.get("by", gettext("unknown")),
        }
    return gettext("%(when)s: %(rows)s rows, by %(by)s") % {
        "when": iso_text(info.get("built_at", gettext("unknown time"))),
        "rows": info.get("rows", "?"),
        "by": info.get("by", gettext("unknown")),
    }


def asked_text(asked: dict[str, Any] | None) -> str:
    if asked is None:
        return gettext("no")
    return gettext("%(when)s by %(by)s, waiting for a scheduler") % {
        "when": iso_text(asked.get("at", "?")),
        "by": asked.get("by", gettext("unknown")),
    }


@admin.register(SchedulerOperations)
class OperationsEntryAdmin(_ModelAdmin):
    """The operations page's entry in the admin index and its sidebar: a link, shown to those
    who may see the page (``view_operations``), to the page the schedule admin serves. It
    lists and edits nothing: its only URL sends on to that page."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.view_operations")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name="{}_{}_changelist".format(*info),
            )
        ]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        url = reverse(
            f"admin:{self.opts.app_label}_schedule_operations", current_app=self.admin_site.name
        )
        return HttpResponseRedirect(url)
