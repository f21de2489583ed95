"""Schedules: create, read, edit and delete them, and their actions (pause, resume, run now,
backfill, resync, preview, and the preview of a timing not saved).

Edits carry a precondition (``preconditions``). Each change is recorded in the change log
with the user, in the change's own transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, router
from django.http import Http404
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_view
from rest_framework import filters, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from django_schedulinator import services
from django_schedulinator.api.filters import FilterBackend, ScheduleFilter, SearchFilter
from django_schedulinator.api.negotiation import NegotiationMixin
from django_schedulinator.api.permissions import (
    ConfiguredPermissionsMixin,
    SchedulesFilteredByPermissionsMixin,
)
from django_schedulinator.api.schema import DescribedBySpectacular, extend_schema
from django_schedulinator.api.serializers.errors import ErrorSerializer, as_drf_errors
from django_schedulinator.api.serializers.runs import RunSerializer
from django_schedulinator.api.serializers.schedules import (
    BackfillReportSerializer,
    BackfillSerializer,
    PauseSerializer,
    PreviewItemSerializer,
    PreviewQuerySerializer,
    ResumeSerializer,
    RunNowSerializer,
    ScheduleSerializer,
    TimingPreviewResultSerializer,
    TimingPreviewSerializer,
)
from django_schedulinator.api.views.common import PageNumberPagination, api_origin
from django_schedulinator.api.views.errors import (
    INDEX_UNAVAILABLE,
    INVALID,
    NO_PAGE,
    NO_SCHEDULE,
    REFUSED,
    Conflict,
    index_reachable,
)
from django_schedulinator.api.views.preconditions import (
    ETAG,
    IF_MATCH,
    PRECONDITION_RESPONSES,
    etag,
    expected_version,
)
from django_schedulinator.errors import PrunedRange, ScheduleDeleted, ServiceError, VersionConflict
from django_schedulinator.models import Schedule
from django_schedulinator.services import Origin

CHANGE = "django_schedulinator.change_schedule"
VIEW = "django_schedulinator.view_schedule"

LOCATION = OpenApiParameter(
    "Location",
    {"type": "string", "format": "uri"},
    OpenApiParameter.HEADER,
    response=[201],
    required=True,
    description="The new schedule's URL.",
)

# The actions act on one schedule: the list's filters and pages do not apply to them (a
# ?kind= on a pause must not turn it into a 404, and the schema must not list them).
ON_ONE_SCHEDULE: dict[str, Any] = {"filter_backends": [], "pagination_class": None}


@extend_schema(tags=["schedules"])
@extend_schema_view(
    list=extend_schema(responses={200: ScheduleSerializer, **INVALID, **NO_PAGE, **REFUSED})
)
class ScheduleViewSet(
    DescribedBySpectacular,
    NegotiationMixin,
    SchedulesFilteredByPermissionsMixin,
    ConfiguredPermissionsMixin,
    viewsets.ModelViewSet[Schedule],
):
    """Schedules: the canonical rows. Writes are validated by ``services.validate``."""

    queryset = Schedule.objects.all().order_by("name")
    serializer_class = ScheduleSerializer
    pagination_class = PageNumberPagination
    filter_backends = [FilterBackend, SearchFilter, filters.OrderingFilter]
    filterset_class = ScheduleFilter
    search_fields = ["name", "task"]
    ordering_fields = ["name", "next_run_at", "created_at", "updated_at", "id"]
    required_perms = {
        "pause": [VIEW, CHANGE],
        "resume": [VIEW, CHANGE],
        "run_now": [VIEW, CHANGE],
        "backfill": [VIEW, CHANGE],
        "resync": [VIEW, CHANGE],
        "preview": [VIEW],
        "preview_timing": [VIEW],
    }

    @property
    def origin(self) -> Origin:
        return api_origin(self.request)

    @property
    def db(self) -> str:
        return router.db_for_write(Schedule)

    def _respond(self, schedule: Schedule, code: int = status.HTTP_200_OK) -> Response:
        schedule.refresh_from_db()
        data = self.get_serializer(schedule).data
        return Response(data, status=code, headers={"ETag": etag(schedule)})

    # -- CRUD ------------------------------------------------------------------------------

    @extend_schema(parameters=[ETAG], responses={200: ScheduleSerializer, **NO_SCHEDULE, **REFUSED})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # The ETag is the version of the settings, for If-Match; it is no cache validator
        # (If-None-Match), since firing changes next_run_at and the counters, not the version.
        schedule = self.get_object()
        return Response(self.get_serializer(schedule).data, headers={"ETag": etag(schedule)})

    @extend_schema(
        parameters=[ETAG, LOCATION], responses={201: ScheduleSerializer, **INVALID, **REFUSED}
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            schedule = self._act(
                lambda: services.create(serializer.validated_data, origin=self.origin)
            )
        except IntegrityError:  # a concurrent create took the name after validation
            raise ValidationError({"name": ["A schedule with this name already exists."]}) from None
        response = self._respond(schedule, status.HTTP_201_CREATED)
        response["Location"] = request.build_absolute_uri(
            reverse("schedulinator-api:schedule-detail", args=[schedule.pk])
        )
        return response

    @extend_schema(
        parameters=[IF_MATCH, ETAG],
        responses={200: ScheduleSerializer, **PRECONDITION_RESPONSES},
    )
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        partial = kwargs.pop("partial", False)
        schedule = self.get_object()
        expected, refusal = expected_version(request, schedule, required=True)
        serializer = self.get_serializer(schedule, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        try:
            # An update that changes nothing writes nothing: the version stays, so it does
            # not make other clients' edits stale.
            self._act(
                lambda: services.update(
                    schedule,
                    serializer.validated_data,
                    expected_version=expected,
                    origin=self.origin,
                ),
                refusal,
            )
        except IntegrityError:
            raise ValidationError({"name": ["A schedule with this name already exists."]}) from None
        return self._respond(schedule)

    @extend_schema(
        parameters=[IF_MATCH, ETAG],
        responses={200: ScheduleSerializer, **PRECONDITION_RESPONSES},
    )
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        kwargs["partial"] = True
        return self.update(request, *args, **kwargs)

    @extend_schema(
        parameters=[IF_MATCH],
        responses={
            204: None,
            **{code: PRECONDITION_RESPONSES[code] for code in (400, 404, 409, 412, 401, 403)},
        },
    )
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        schedule = self.get_object()
        expected, refusal = expected_version(request, schedule, required=False)
        self._act(
            lambda: services.delete(schedule, expected_version=expected, origin=self.origin),
            refusal,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)

    # -- actions ---------------------------------------------------------------------------

    def _action_schedule(self) -> Schedule:
        return self.get_object()  # permission and 404 handling of the viewset

    @extend_schema(
        request=PauseSerializer,
        parameters=[ETAG],
        responses={200: ScheduleSerializer, **INVALID, **NO_SCHEDULE, **REFUSED},
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        """Stop firing (the schedule keeps its place); the note says why."""
        schedule = self._action_schedule()
        body = PauseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        self._act(
            lambda: services.pause(
                schedule, body.validated_data.get("note", ""), origin=self.origin
            )
        )
        return self._respond(schedule)

    @extend_schema(
        request=ResumeSerializer,
        parameters=[ETAG],
        responses={200: ScheduleSerializer, **INVALID, **NO_SCHEDULE, **REFUSED},
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Fire again from now on; the paused period is recorded as skipped, or caught up."""
        schedule = self._action_schedule()
        body = ResumeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        self._act(
            lambda: services.resume(
                schedule, catch_up=body.validated_data["catch_up"], origin=self.origin
            )
        )
        return self._respond(schedule)

    @extend_schema(
        request=RunNowSerializer,
        responses={202: RunSerializer, **INVALID, **NO_SCHEDULE, **REFUSED},
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["post"], url_path="run-now")
    def run_now(self, request: Request, pk: str | None = None) -> Response:
        """Queue one run now, with a key of its own; any scheduler dispatches it."""
        schedule = self._action_schedule()
        body = RunNowSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = self._act(
            lambda: services.run_now(
                schedule, advance=body.validated_data["advance"], origin=self.origin
            )
        )
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=BackfillSerializer,
        responses={
            200: BackfillReportSerializer,
            **INVALID,
            **NO_SCHEDULE,
            409: OpenApiResponse(
                ErrorSerializer,
                description="Retention deleted runs of the range: whether they ran cannot be "
                "told. The detail names the range; send rerun_pruned to run them again.",
            ),
            **REFUSED,
        },
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["post"])
    def backfill(self, request: Request, pk: str | None = None) -> Response:
        """Fire each occurrence of a past range that has not fired; idempotent."""
        schedule = self._action_schedule()
        body = BackfillSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        report = self._act(
            lambda: services.backfill(
                schedule,
                data["start"],
                data["end"],
                dry_run=data["dry_run"],
                rerun_pruned=data["rerun_pruned"],
                origin=self.origin,
            )
        )
        return Response(BackfillReportSerializer(report).data)

    @extend_schema(
        request=None,
        parameters=[ETAG],
        responses={200: ScheduleSerializer, **NO_SCHEDULE, **INDEX_UNAVAILABLE, **REFUSED},
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["post"])
    def resync(self, request: Request, pk: str | None = None) -> Response:
        """Write this schedule's due-index entry again from its row."""
        schedule = self._action_schedule()
        with index_reachable():
            services.resync([schedule], origin=self.origin)
        return self._respond(schedule)

    @extend_schema(
        parameters=[PreviewQuerySerializer],
        responses={
            200: PreviewItemSerializer(many=True),
            **INVALID,
            **NO_SCHEDULE,
            **REFUSED,
        },
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["get"])
    def preview(self, request: Request, pk: str | None = None) -> Response:
        """The next occurrences in local time and UTC, with DST changes flagged."""
        schedule = self._action_schedule()
        query = PreviewQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        items = schedule.preview(query.validated_data["count"])
        return Response(PreviewItemSerializer(items, many=True).data)

    @extend_schema(
        request=TimingPreviewSerializer,
        responses={200: TimingPreviewResultSerializer, **INVALID, **REFUSED},
    )
    @action(
        detail=False,
        **ON_ONE_SCHEDULE,
        methods=["post"],
        url_path="preview",
        url_name="preview-timing",
    )
    def preview_timing(self, request: Request) -> Response:
        """The description and next occurrences of a timing that is not saved, to check a
        cron expression before creating or changing a schedule. Validated by the model's
        rules; nothing is written."""
        body = TimingPreviewSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        schedule = body.validated_data["schedule"]
        items = schedule.preview(body.validated_data["count"])
        result = {"description": schedule.description, "occurrences": items}
        return Response(TimingPreviewResultSerializer(result).data)

    def _act(
        self, run: Callable[[], Any], refusal: Callable[[int], APIException] | None = None
    ) -> Any:
        """Run a service; its refusals become answers that say why: 400, 404 for a schedule
        deleted meanwhile, ``refusal`` (409 or 412) for one edited meanwhile, and 409 for a
        backfill over runs that retention deleted."""
        try:
            return run()
        except VersionConflict as exc:
            if refusal is None:
                raise ValidationError({"detail": str(exc)}) from None
            raise refusal(exc.current) from None
        except ScheduleDeleted:  # deleted since it was looked up
            raise Http404 from None
        except PrunedRange as exc:  # a backfill over runs retention deleted: 409, says which
            raise Conflict(str(exc)) from None
        except ServiceError as exc:
            raise ValidationError({"detail": str(exc)}) from None
        except DjangoValidationError as exc:
            raise ValidationError(as_drf_errors(exc)) from None
