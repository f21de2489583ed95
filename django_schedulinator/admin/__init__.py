"""The admin: schedules (with live previews, bulk actions and the operations page), the run
ledger, the change log and the calendars of excluded days, each in a module of its own;
HTML in templates, every string translatable. Changes go through
``django_schedulinator.services``."""

from __future__ import annotations

from django_schedulinator.admin.calendars import CalendarAdmin, CalendarForm
from django_schedulinator.admin.changes import ScheduleChangeAdmin
from django_schedulinator.admin.display import local_time
from django_schedulinator.admin.forms import (
    CalendarChoicesWidget,
    JSONEditorWidget,
    ScheduleActionForm,
    ScheduleForm,
)
from django_schedulinator.admin.operations import OperationsEntryAdmin
from django_schedulinator.admin.runs import RunAdmin
from django_schedulinator.admin.schedules import ScheduleAdmin

__all__ = [
    "CalendarAdmin",
    "CalendarChoicesWidget",
    "CalendarForm",
    "JSONEditorWidget",
    "OperationsEntryAdmin",
    "RunAdmin",
    "ScheduleActionForm",
    "ScheduleAdmin",
    "ScheduleChangeAdmin",
    "ScheduleForm",
    "local_time",
]
