"""An admin that keeps each user to the schedules of their team, the way Django restricts an
admin's rows (``ModelAdmin.get_queryset``): the URLs of tests/test_scopes.py's admin."""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import include, path

from django_schedulinator.admin import RunAdmin, ScheduleAdmin, ScheduleChangeAdmin
from django_schedulinator.admin.calendars import CalendarAdmin
from django_schedulinator.models import Calendar, Run, Schedule, ScheduleChange


class TeamScheduleAdmin(ScheduleAdmin):
    """The schedules whose kwargs name the user's team (its last name here)."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        team = getattr(request.user, "last_name", "")
        return super().get_queryset(request).filter(kwargs__team=team)


site = AdminSite(name="admin")
site.register(Schedule, TeamScheduleAdmin)
site.register(Run, RunAdmin)
site.register(ScheduleChange, ScheduleChangeAdmin)
site.register(Calendar, CalendarAdmin)

urlpatterns = [
    path("admin/", site.urls),
    path("api/schedulinator/", include("django_schedulinator.api.urls")),
]
