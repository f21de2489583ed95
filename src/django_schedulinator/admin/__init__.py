"""The admin: schedules (with live previews, bulk actions and the operations page), the run
ledger and the change log, each in a module of its own; HTML in templates, every string
translatable. Changes go through ``django_schedulinator.services``."""

from __future__ import annotations

from .changes import ScheduleChangeAdmin
from .display import local_time
from .forms import JSONEditorWidget, ScheduleActionForm, ScheduleForm
from .runs import RunAdmin
from .schedules import ScheduleAdmin

__all__ = [
    "JSONEditorWidget",
    "RunAdmin",
    "ScheduleActionForm",
    "ScheduleAdmin",
    "ScheduleChangeAdmin",
    "ScheduleForm",
    "local_time",
]
