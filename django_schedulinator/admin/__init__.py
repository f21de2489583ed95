"""The admin: schedules (with live previews, bulk actions and the operations page), the run
ledger, the change log and the calendars of excluded days, each in a module of its own;
HTML in templates, every string translatable. Changes go through
``django_schedulinator.services``."""

from __future__ import annotations

from .calendars import CalendarAdmin, CalendarForm
from .changes import ScheduleChangeAdmin
from .display import local_time
from .forms import JSONEditorWidget, ScheduleActionForm, ScheduleForm
from .runs import RunAdmin
from .schedules import ScheduleAdmin

__all__ = [
    "CalendarAdmin",
    "CalendarForm",
    "JSONEditorWidget",
    "RunAdmin",
    "ScheduleActionForm",
    "ScheduleAdmin",
    "ScheduleChangeAdmin",
    "ScheduleForm",
    "local_time",
]
