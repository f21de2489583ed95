"""Include with ``path("api/schedulinator/", include("django_schedulinator.api.urls"))``.

schedules/                      list (filter, search, paginate), create
schedules/{id}/                 retrieve, update, partial update, delete
schedules/{id}/pause/ resume/ run-now/ backfill/ resync/ preview/
runs/, runs/{id}/               the ledger, read-only
runs/report/                    POST: a worker reports a handed-off run's start or end
changes/, changes/{id}/         the change log, read-only
calendars/, calendars/{id}/     calendars of excluded days: list, create, update, delete
index/                          index health, read-only
schedulers/                     the schedulers alive (heartbeats), read-only
status/                         the whole status (manage.py scheduler_status), read-only
schema/                         the OpenAPI 3 schema of these endpoints
"""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import DefaultRouter

from django_schedulinator.api.schema import SchemaView
from django_schedulinator.api.views import (
    CalendarViewSet,
    IndexHealthView,
    OutcomeReportView,
    RunViewSet,
    ScheduleChangeViewSet,
    SchedulersView,
    ScheduleViewSet,
    StatusView,
)

app_name = "schedulinator-api"

router = DefaultRouter()
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("runs", RunViewSet, basename="run")
router.register("changes", ScheduleChangeViewSet, basename="change")
router.register("calendars", CalendarViewSet, basename="calendar")

urlpatterns = [
    path("index/", IndexHealthView.as_view(), name="index-health"),
    path("schedulers/", SchedulersView.as_view(), name="schedulers"),
    path("status/", StatusView.as_view(), name="status"),
    # Before the router's runs/{id}/.
    path("runs/report/", OutcomeReportView.as_view(), name="run-report"),
    path("schema/", SchemaView.as_view(), name="schema"),
    *router.urls,
]
