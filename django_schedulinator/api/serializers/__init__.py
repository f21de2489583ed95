"""Serializers of the API. Validation is ``services.validate``'s (the model's own rules and
what the dispatcher and the clock decide): one set of rules for the admin, the API and
code, and each error names its field.

By subject, one module each: ``fields`` (the API's own fields), ``schedules`` (a schedule,
its actions' bodies and its previews), ``runs`` (the ledger and the workers' reports),
``changes`` (the change log), ``calendars``, ``operations`` (the index's health, the
schedulers, the status) and ``errors`` (the errors' bodies). Every name is here too, as it
was when this was one module.
"""

from __future__ import annotations

from django_schedulinator.api.serializers.calendars import (
    CalendarSerializer,
    ExcludedDaySerializer,
)
from django_schedulinator.api.serializers.changes import ScheduleChangeSerializer
from django_schedulinator.api.serializers.errors import (
    ErrorSerializer,
    ValidationErrorSchema,
    ValidationErrorSerializer,
)
from django_schedulinator.api.serializers.fields import (
    DURATION_LIMIT,
    DateTimeField,
    DurationField,
    DurationFieldSchema,
    FieldsBuiltOnce,
    FlatListField,
    JSONField,
    TaskField,
    TaskFieldSchema,
)
from django_schedulinator.api.serializers.operations import (
    AutoPausedScheduleSerializer,
    AutoPausedSerializer,
    ClusterStatusSerializer,
    DispatcherStatusSerializer,
    DriftSerializer,
    FindingSerializer,
    IndexStatusSerializer,
    LaneDepthSerializer,
    RecorderBacklogSerializer,
    SchedulerSerializer,
    SchedulersSerializer,
    ShardStatusSerializer,
)
from django_schedulinator.api.serializers.runs import (
    OutcomeReceiptSerializer,
    OutcomeReportSerializer,
    RunSerializer,
)
from django_schedulinator.api.serializers.schedules import (
    SHOWN_MACHINE_FIELDS,
    BackfillReportSerializer,
    BackfillSerializer,
    PauseSerializer,
    PreviewItemSerializer,
    PreviewQuerySerializer,
    ResumeSerializer,
    RunNowSerializer,
    ScheduleSchema,
    ScheduleSerializer,
    TimingPreviewResultSerializer,
    TimingPreviewSerializer,
    apply_model_validation,
)

__all__ = [
    "DURATION_LIMIT",
    "SHOWN_MACHINE_FIELDS",
    "AutoPausedScheduleSerializer",
    "AutoPausedSerializer",
    "BackfillReportSerializer",
    "BackfillSerializer",
    "CalendarSerializer",
    "ClusterStatusSerializer",
    "DateTimeField",
    "DispatcherStatusSerializer",
    "DriftSerializer",
    "DurationField",
    "DurationFieldSchema",
    "ErrorSerializer",
    "ExcludedDaySerializer",
    "FieldsBuiltOnce",
    "FindingSerializer",
    "FlatListField",
    "IndexStatusSerializer",
    "JSONField",
    "LaneDepthSerializer",
    "OutcomeReceiptSerializer",
    "OutcomeReportSerializer",
    "PauseSerializer",
    "PreviewItemSerializer",
    "PreviewQuerySerializer",
    "RecorderBacklogSerializer",
    "ResumeSerializer",
    "RunNowSerializer",
    "RunSerializer",
    "ScheduleChangeSerializer",
    "ScheduleSchema",
    "ScheduleSerializer",
    "SchedulerSerializer",
    "SchedulersSerializer",
    "ShardStatusSerializer",
    "TaskField",
    "TaskFieldSchema",
    "TimingPreviewResultSerializer",
    "TimingPreviewSerializer",
    "ValidationErrorSchema",
    "ValidationErrorSerializer",
    "apply_model_validation",
]
