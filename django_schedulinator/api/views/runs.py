"""Runs: the ledger, read-only (one row per occurrence, fired or skipped), and the reports
of workers that are not Python on the runs handed off to them."""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_schedulinator import outcomes
from django_schedulinator.api.filters import RunFilter
from django_schedulinator.api.negotiation import NegotiationMixin
from django_schedulinator.api.permissions import ConfiguredPermissionsMixin
from django_schedulinator.api.schema import DescribedBySpectacular, extend_schema
from django_schedulinator.api.serializers.runs import (
    OutcomeReceiptSerializer,
    OutcomeReportSerializer,
    RunSerializer,
)
from django_schedulinator.api.views.common import ScheduleLogViewSet, log_schema
from django_schedulinator.api.views.errors import INVALID, REFUSED
from django_schedulinator.errors import InvalidKey
from django_schedulinator.models import Run, Schedule, keys
from django_schedulinator.statuses import ReportedStatus


@extend_schema(tags=["runs"])
@log_schema(RunSerializer, "No such run.")
class RunViewSet(ScheduleLogViewSet[Run]):
    """The ledger: one row per occurrence, fired or skipped (with the reason)."""

    queryset = Run.objects.all()
    serializer_class = RunSerializer
    filterset_class = RunFilter


class OutcomeReportView(
    DescribedBySpectacular, NegotiationMixin, ConfiguredPermissionsMixin, APIView
):
    """Report the start or the end of a handed-off run by its occurrence key: for workers
    that are not Python (``outcomes.report_started``/``report_finished`` are the same in
    Python). A repeated report changes nothing and says so. Needs the report_run
    permission, and sees only the schedules the permission classes let the user see."""

    required_perms = {"POST": ["django_schedulinator.report_run"]}

    @extend_schema(
        tags=["runs"],
        request=OutcomeReportSerializer,
        responses={200: OutcomeReceiptSerializer, **INVALID, **REFUSED},
    )
    def post(self, request: Request) -> Response:
        body = OutcomeReportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key, reported = body.validated_data["key"], body.validated_data["status"]
        try:
            schedule_id, at = keys.parse_key(key)
        except InvalidKey as exc:
            raise ValidationError({"key": [str(exc)]}) from None
        schedule = Schedule.objects.filter(pk=schedule_id).first()
        if schedule is not None:
            self.check_object_permissions(request, schedule)
        if reported == ReportedStatus.STARTED:
            changed = outcomes.report_started(key)
        else:
            changed = outcomes.report_finished(
                key,
                succeeded=reported == ReportedStatus.SUCCEEDED,
                error=body.validated_data["error"],
            )
        run_status = (
            Run.objects.filter(schedule_id=schedule_id, scheduled_for=at)
            .values_list("status", flat=True)
            .first()
        )
        receipt = {"key": key, "changed": changed, "run_status": run_status}
        return Response(OutcomeReceiptSerializer(receipt).data)
