"""The API's views: schedules (CRUD and actions), runs, the change log, calendars of
excluded days, index health, the schedulers alive and the scheduling's status.

Edits carry a precondition: the schedule's ``version`` as an ``If-Match`` header (a stale
one gets 412) or as the ``version`` field of the body (409). The version changes with every
edit, pause and resume, not when the schedule fires, so an edit only ever loses to another
edit. Each change is recorded in the change log with the user, in the change's own
transaction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, router
from django.http import Http404
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_view
from redis.exceptions import RedisError
from rest_framework import filters, pagination, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_schedulinator import outcomes, services, timing
from django_schedulinator.api import serializers as s
from django_schedulinator.api.filters import (
    FilterBackend,
    RunFilter,
    ScheduleChangeFilter,
    ScheduleFilter,
    SearchFilter,
)
from django_schedulinator.api.negotiation import NegotiationMixin
from django_schedulinator.api.permissions import (
    ConfiguredPermissionsMixin,
    SchedulesFilteredByPermissionsMixin,
    ScopedByPermissionsMixin,
)
from django_schedulinator.api.schema import DescribedBySpectacular, extend_schema
from django_schedulinator.conf import app_settings
from django_schedulinator.errors import (
    InvalidKey,
    PrunedRange,
    ScheduleDeleted,
    ServiceError,
    VersionConflict,
)
from django_schedulinator.importers import days as calendars
from django_schedulinator.index import clock
from django_schedulinator.index.due import get_index
from django_schedulinator.models import Calendar, Run, Schedule, ScheduleChange, keys
from django_schedulinator.models.scopes import Scope
from django_schedulinator.operations.health import (
    DEFAULT_MAX_LAG_SECONDS,
    cluster_status,
    index_status,
    schedulers_as_dicts,
)
from django_schedulinator.operations.heartbeat import alive
from django_schedulinator.services import Origin
from django_schedulinator.statuses import ReportedStatus

CHANGE = "django_schedulinator.change_schedule"
VIEW = "django_schedulinator.view_schedule"


class PreconditionFailed(APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_code = "precondition_failed"


class PreconditionRequired(APIException):
    status_code = status.HTTP_428_PRECONDITION_REQUIRED
    default_code = "precondition_required"
    default_detail = (
        "Send the version you edited: an If-Match header with the schedule's ETag, or the "
        "'version' field. Read both from GET."
    )


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class IndexUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "index_unavailable"


class SizedFromSettings:
    """Page sizes read from the settings per request (so override_settings works)."""

    page_size_query_param: str | None = "page_size"
    page_size: int | None
    max_page_size: int | None

    def __init__(self) -> None:
        self.page_size = app_settings.API_PAGE_SIZE
        self.max_page_size = app_settings.API_MAX_PAGE_SIZE


class PageNumberPagination(SizedFromSettings, pagination.PageNumberPagination):
    pass


class NewestFirstCursorPagination(SizedFromSettings, pagination.CursorPagination):
    """The ledger and the change log grow without end: a cursor costs the same on any page,
    where page numbers would count and skip rows. Newest (highest id) first."""

    ordering = "-id"

    def decode_cursor(self, request: Request) -> Any:
        # DRF trusts the position inside a well-formed cursor; one that is not an id would
        # reach the query. Any bad cursor is "Invalid cursor" (404), as DRF answers others.
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            try:
                int(cursor.position)
            except (TypeError, ValueError):
                raise NotFound(self.invalid_cursor_message) from None
        return cursor


def etag(schedule: Schedule) -> str:
    return f'"{schedule.version}"'


def _tags(header: str) -> set[str]:
    return {tag.strip().removeprefix("W/").strip('"') for tag in header.split(",") if tag.strip()}


IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="The ETag of the version you edited (from GET). A stale one gets 412.",
)
# The schedule's ETag, sent with each answer that shows a schedule.
ETAG = OpenApiParameter(
    "ETag",
    {"type": "string", "pattern": r'^"[0-9]+"$'},
    OpenApiParameter.HEADER,
    response=[200, 201],
    required=True,
    description="The schedule's version, quoted: send it back as If-Match to edit.",
)
LOCATION = OpenApiParameter(
    "Location",
    {"type": "string", "format": "uri"},
    OpenApiParameter.HEADER,
    response=[201],
    required=True,
    description="The new schedule's URL.",
)

# The errors, documented with their bodies so that generated clients can read them.
# Every operation can be refused: 403 for a user without the permissions; for an anonymous
# request 401 when the project's first authentication class asks for credentials
# (WWW-Authenticate), else 403 (DRF's rule).
REFUSED = {
    401: OpenApiResponse(
        s.ErrorSerializer,
        description="Not authenticated (when the first authentication class of the project "
        "asks for credentials; otherwise 403).",
    ),
    403: OpenApiResponse(
        s.ErrorSerializer,
        description="Not authenticated, or not staff with the model permissions needed.",
    ),
}
INVALID = {
    400: OpenApiResponse(
        s.ValidationErrorSerializer, description="Invalid: each error names its field."
    )
}
NO_SCHEDULE = {404: OpenApiResponse(s.ErrorSerializer, description="No such schedule.")}
NO_PAGE = {
    404: OpenApiResponse(s.ErrorSerializer, description="No such page, or an invalid cursor.")
}
INDEX_UNAVAILABLE = {
    503: OpenApiResponse(
        s.ErrorSerializer, description="Redis, which holds the due index, is unreachable."
    )
}
PRECONDITION_RESPONSES = {
    **INVALID,
    **NO_SCHEDULE,
    409: OpenApiResponse(
        s.ErrorSerializer, description="The 'version' in the body is not the current one."
    ),
    412: OpenApiResponse(
        s.ErrorSerializer, description="The If-Match ETag is not the current version."
    ),
    428: OpenApiResponse(s.ErrorSerializer, description="Neither If-Match nor 'version' was sent."),
    **REFUSED,
}


# The actions act on one schedule: the list's filters and pages do not apply to them (a
# ?kind= on a pause must not turn it into a 404, and the schema must not list them).
ON_ONE_SCHEDULE: dict[str, Any] = {"filter_backends": [], "pagination_class": None}


@extend_schema(tags=["schedules"])
@extend_schema_view(
    list=extend_schema(responses={200: s.ScheduleSerializer, **INVALID, **NO_PAGE, **REFUSED})
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
    serializer_class = s.ScheduleSerializer
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
        return Origin(self.request.user, ScheduleChange.Source.API)

    @property
    def db(self) -> str:
        return router.db_for_write(Schedule)

    def _expected_version(
        self, schedule: Schedule, *, required: bool
    ) -> tuple[int | None, Callable[[int], APIException]]:
        """The version the client's edit starts from (If-Match, else ``version`` in the
        body; None: any), and the refusal for a schedule at another version: 412 for
        If-Match, 409 for the body. Checked here against the schedule as read, and again
        by the service under the row's lock, so an edit in between is refused too."""
        header = self.request.headers.get("If-Match")
        if header is not None:
            tags = _tags(header)

            def failed(current: int) -> APIException:
                return PreconditionFailed(
                    f"The schedule changed since you read it: it is at version {current} "
                    f'(ETag "{current}"), not {header.strip()}.'
                )

            if "*" in tags:
                return None, failed
            if str(schedule.version) not in tags:
                raise failed(schedule.version)
            return schedule.version, failed
        data = self.request.data
        sent = data.get("version") if isinstance(data, dict) else None

        def conflict(current: int) -> APIException:
            return Conflict(
                f"The schedule changed since you read it: it is at version {current}, not "
                f"{sent}. Read it again and apply your change to it."
            )

        if sent is None:
            if required:
                raise PreconditionRequired()
            return None, conflict
        try:
            if isinstance(sent, bool) or not isinstance(sent, int | str):
                raise ValueError
            version = int(sent)
        except (ValueError, OverflowError):
            raise ValidationError({"version": ["A valid integer is required."]}) from None
        if version != schedule.version:
            raise conflict(schedule.version)
        return version, conflict

    def _respond(self, schedule: Schedule, code: int = status.HTTP_200_OK) -> Response:
        schedule.refresh_from_db()
        data = self.get_serializer(schedule).data
        return Response(data, status=code, headers={"ETag": etag(schedule)})

    # -- CRUD ------------------------------------------------------------------------------

    @extend_schema(
        parameters=[ETAG], responses={200: s.ScheduleSerializer, **NO_SCHEDULE, **REFUSED}
    )
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # The ETag is the version of the settings, for If-Match; it is no cache validator
        # (If-None-Match), since firing changes next_run_at and the counters, not the version.
        schedule = self.get_object()
        return Response(self.get_serializer(schedule).data, headers={"ETag": etag(schedule)})

    @extend_schema(
        parameters=[ETAG, LOCATION], responses={201: s.ScheduleSerializer, **INVALID, **REFUSED}
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
        responses={200: s.ScheduleSerializer, **PRECONDITION_RESPONSES},
    )
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        partial = kwargs.pop("partial", False)
        schedule = self.get_object()
        expected, refusal = self._expected_version(schedule, required=True)
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
        responses={200: s.ScheduleSerializer, **PRECONDITION_RESPONSES},
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
        expected, refusal = self._expected_version(schedule, required=False)
        self._act(
            lambda: services.delete(schedule, expected_version=expected, origin=self.origin),
            refusal,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)

    # -- actions ---------------------------------------------------------------------------

    def _action_schedule(self) -> Schedule:
        return self.get_object()  # permission and 404 handling of the viewset

    @extend_schema(
        request=s.PauseSerializer,
        parameters=[ETAG],
        responses={200: s.ScheduleSerializer, **INVALID, **NO_SCHEDULE, **REFUSED},
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        """Stop firing (the schedule keeps its place); the note says why."""
        schedule = self._action_schedule()
        body = s.PauseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        self._act(
            lambda: services.pause(
                schedule, body.validated_data.get("note", ""), origin=self.origin
            )
        )
        return self._respond(schedule)

    @extend_schema(
        request=s.ResumeSerializer,
        parameters=[ETAG],
        responses={200: s.ScheduleSerializer, **INVALID, **NO_SCHEDULE, **REFUSED},
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Fire again from now on; the paused period is recorded as skipped, or caught up."""
        schedule = self._action_schedule()
        body = s.ResumeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        self._act(
            lambda: services.resume(
                schedule, catch_up=body.validated_data["catch_up"], origin=self.origin
            )
        )
        return self._respond(schedule)

    @extend_schema(
        request=s.RunNowSerializer,
        responses={202: s.RunSerializer, **INVALID, **NO_SCHEDULE, **REFUSED},
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["post"], url_path="run-now")
    def run_now(self, request: Request, pk: str | None = None) -> Response:
        """Queue one run now, with a key of its own; any scheduler dispatches it."""
        schedule = self._action_schedule()
        body = s.RunNowSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = self._act(
            lambda: services.run_now(
                schedule, advance=body.validated_data["advance"], origin=self.origin
            )
        )
        return Response(s.RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=s.BackfillSerializer,
        responses={
            200: s.BackfillReportSerializer,
            **INVALID,
            **NO_SCHEDULE,
            409: OpenApiResponse(
                s.ErrorSerializer,
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
        body = s.BackfillSerializer(data=request.data)
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
        return Response(s.BackfillReportSerializer(report).data)

    @extend_schema(
        request=None,
        parameters=[ETAG],
        responses={200: s.ScheduleSerializer, **NO_SCHEDULE, **INDEX_UNAVAILABLE, **REFUSED},
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["post"])
    def resync(self, request: Request, pk: str | None = None) -> Response:
        """Write this schedule's due-index entry again from its row."""
        schedule = self._action_schedule()
        try:
            services.resync([schedule], origin=self.origin)
        except RedisError as exc:
            raise IndexUnavailable(f"Redis is unreachable: {exc}") from None
        return self._respond(schedule)

    @extend_schema(
        parameters=[s.PreviewQuerySerializer],
        responses={
            200: s.PreviewItemSerializer(many=True),
            **INVALID,
            **NO_SCHEDULE,
            **REFUSED,
        },
    )
    @action(detail=True, **ON_ONE_SCHEDULE, methods=["get"])
    def preview(self, request: Request, pk: str | None = None) -> Response:
        """The next occurrences in local time and UTC, with DST changes flagged."""
        schedule = self._action_schedule()
        query = s.PreviewQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        items = schedule.preview(query.validated_data["count"])
        return Response(s.PreviewItemSerializer(items, many=True).data)

    @extend_schema(
        request=s.TimingPreviewSerializer,
        responses={200: s.TimingPreviewResultSerializer, **INVALID, **REFUSED},
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
        body = s.TimingPreviewSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        schedule = body.validated_data["schedule"]
        items = schedule.preview(body.validated_data["count"])
        result = {"description": schedule.description, "occurrences": items}
        return Response(s.TimingPreviewResultSerializer(result).data)

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
            raise ValidationError(s._as_drf_errors(exc)) from None


@extend_schema(tags=["runs"])
@extend_schema_view(
    list=extend_schema(responses={200: s.RunSerializer, **INVALID, **NO_PAGE, **REFUSED}),
    retrieve=extend_schema(
        responses={
            200: s.RunSerializer,
            404: OpenApiResponse(s.ErrorSerializer, description="No such run."),
            **REFUSED,
        }
    ),
)
class RunViewSet(
    DescribedBySpectacular,
    NegotiationMixin,
    SchedulesFilteredByPermissionsMixin,
    ConfiguredPermissionsMixin,
    viewsets.ReadOnlyModelViewSet[Run],
):
    """The ledger: one row per occurrence, fired or skipped (with the reason)."""

    queryset = Run.objects.all()
    schedule_lookup = "schedule"
    serializer_class = s.RunSerializer
    pagination_class = NewestFirstCursorPagination
    filter_backends = [FilterBackend]
    filterset_class = RunFilter


@extend_schema(tags=["changes"])
@extend_schema_view(
    list=extend_schema(
        responses={200: s.ScheduleChangeSerializer, **INVALID, **NO_PAGE, **REFUSED}
    ),
    retrieve=extend_schema(
        responses={
            200: s.ScheduleChangeSerializer,
            404: OpenApiResponse(s.ErrorSerializer, description="No such change-log entry."),
            **REFUSED,
        }
    ),
)
class ScheduleChangeViewSet(
    DescribedBySpectacular,
    NegotiationMixin,
    SchedulesFilteredByPermissionsMixin,
    ConfiguredPermissionsMixin,
    viewsets.ReadOnlyModelViewSet[ScheduleChange],
):
    """The change log: who changed which schedule, when, through what, and how."""

    queryset = ScheduleChange.objects.all()
    # Entries of deleted schedules have none: under a filter_schedules they are hidden.
    schedule_lookup = "schedule"
    serializer_class = s.ScheduleChangeSerializer
    pagination_class = NewestFirstCursorPagination
    filter_backends = [FilterBackend]
    filterset_class = ScheduleChangeFilter


def _on_field(field: str, read: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``read(...)``, its error without a field of its own put on ``field`` (the years not
    understood, an iCalendar text that cannot be read): each error names its field."""
    try:
        return read(*args, **kwargs)
    except DjangoValidationError as exc:
        if hasattr(exc, "error_dict"):
            raise
        raise DjangoValidationError({field: exc.messages}) from None


NO_CALENDAR = {404: OpenApiResponse(s.ErrorSerializer, description="No such calendar.")}


@extend_schema(tags=["calendars"])
@extend_schema_view(
    list=extend_schema(responses={200: s.CalendarSerializer, **NO_PAGE, **REFUSED}),
    retrieve=extend_schema(responses={200: s.CalendarSerializer, **NO_CALENDAR, **REFUSED}),
    create=extend_schema(responses={201: s.CalendarSerializer, **INVALID, **REFUSED}),
    update=extend_schema(
        responses={200: s.CalendarSerializer, **INVALID, **NO_CALENDAR, **REFUSED}
    ),
    partial_update=extend_schema(
        responses={200: s.CalendarSerializer, **INVALID, **NO_CALENDAR, **REFUSED}
    ),
    destroy=extend_schema(
        responses={
            204: None,
            409: OpenApiResponse(
                s.ErrorSerializer, description="Schedules name it: take it out of them first."
            ),
            **NO_CALENDAR,
            **REFUSED,
        }
    ),
)
class CalendarViewSet(
    DescribedBySpectacular,
    NegotiationMixin,
    ScopedByPermissionsMixin,
    ConfiguredPermissionsMixin,
    viewsets.ModelViewSet[Calendar],
):
    """Calendars of excluded days (holidays) that schedules name. Each change goes through
    the service layer, which re-plans the schedules that name the calendar. A rename or a
    delete under schedules that name it is refused, naming those the user may see."""

    queryset = Calendar.objects.all().prefetch_related("days").order_by("name")
    serializer_class = s.CalendarSerializer
    pagination_class = PageNumberPagination

    def _users_scope(self) -> Scope:
        """The schedules a refusal may name; none when the permission classes refuse
        schedules without saying which (an edit of a calendar is not refused for that)."""
        try:
            return self.scope()
        except PermissionDenied:
            return Schedule.objects.none()

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = self._save(Calendar(), serializer.validated_data, adding=True)

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = self._save(serializer.instance, serializer.validated_data)

    def _save(self, calendar: Calendar, data: dict[str, Any], *, adding: bool = False) -> Calendar:
        data = dict(data)
        typed = data.pop("days", None)
        years_text = data.pop("years", "")
        ical = data.pop("icalendar", None)
        for name, value in data.items():
            setattr(calendar, name, value)
        origin = Origin(self.request.user, ScheduleChange.Source.API)
        try:
            days: list[tuple[Any, str]] | None = None
            if calendar.source == Calendar.Source.MANUAL:
                if typed is not None or adding:
                    days = [(d["day"], d.get("name", "")) for d in typed or ()]
            elif ical is not None or adding or calendar.source == Calendar.Source.HOLIDAYS:
                years = _on_field("years", calendars.parse_years, years_text or "",
                                  clock.now().date())  # fmt: skip
                days = _on_field(
                    "icalendar", calendars.days_from_source, calendar, years=years, icalendar=ical
                )
            services.save_calendar(calendar, days=days, origin=origin, scope=self._users_scope())
        except DjangoValidationError as exc:
            raise ValidationError(s._as_drf_errors(exc)) from None
        except IntegrityError:  # a concurrent create took the name
            raise ValidationError({"name": ["A calendar with this name already exists."]}) from None
        return Calendar.objects.prefetch_related("days").get(pk=calendar.pk)

    def perform_destroy(self, instance: Calendar) -> None:
        try:
            services.delete_calendar(
                instance,
                origin=Origin(self.request.user, ScheduleChange.Source.API),
                scope=self._users_scope(),
            )
        except DjangoValidationError as exc:
            raise Conflict(" ".join(exc.messages)) from None


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
        request=s.OutcomeReportSerializer,
        responses={200: s.OutcomeReceiptSerializer, **INVALID, **REFUSED},
    )
    def post(self, request: Request) -> Response:
        body = s.OutcomeReportSerializer(data=request.data)
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
        return Response(s.OutcomeReceiptSerializer(receipt).data)


class IndexHealthView(
    DescribedBySpectacular,
    NegotiationMixin,
    ScopedByPermissionsMixin,
    ConfiguredPermissionsMixin,
    APIView,
):
    """Counts from the rows and the due index, the oldest due lag, the last rebuild and a
    drift check (``?drift=false`` leaves it out). Needs the view_operations permission.
    Under a ``filter_schedules``, of the schedules the user may see (``scoped``)."""

    required_perms = {"GET": ["django_schedulinator.view_operations"]}

    @extend_schema(
        tags=["index"],
        parameters=[
            OpenApiParameter("drift", OpenApiTypes.BOOL, description="Run the drift check.")
        ],
        responses={200: s.IndexStatusSerializer, **INDEX_UNAVAILABLE, **REFUSED},
    )
    def get(self, request: Request) -> Response:
        try:
            report = index_status(drift=flag(request, "drift"), scope=self.scope())
        except RedisError as exc:
            raise IndexUnavailable(f"Redis is unreachable: {exc}") from None
        return Response(s.IndexStatusSerializer(report.as_dict()).data)


def flag(request: Request, name: str) -> bool:
    """A query-string flag that is on unless it says false, 0 or no."""
    return request.query_params.get(name, "true").lower() not in ("false", "0", "no")


class SchedulersView(
    DescribedBySpectacular,
    NegotiationMixin,
    ScopedByPermissionsMixin,
    ConfiguredPermissionsMixin,
    APIView,
):
    """The schedulers alive (their heartbeats in Redis), newest beat first, with how old
    each one's last pass is and its state. Needs the view_operations permission. Under a
    ``filter_schedules``, without their counters (of every schedule's occurrences)."""

    required_perms = {"GET": ["django_schedulinator.view_operations"]}

    @extend_schema(
        tags=["operations"],
        responses={200: s.SchedulersSerializer, **INDEX_UNAVAILABLE, **REFUSED},
    )
    def get(self, request: Request) -> Response:
        scoped = self.scope() is not None
        index = get_index()
        try:
            beats = alive(index)
            now = timing.from_ms(index.now_ms())
        except RedisError as exc:
            raise IndexUnavailable(f"Redis is unreachable: {exc}") from None
        data = {
            "checked_at": now.isoformat(),
            "pass_stale_seconds": app_settings.PASS_STALE_SECONDS,
            "schedulers": schedulers_as_dicts(beats, now, scoped=scoped),
        }
        return Response(s.SchedulersSerializer(data).data)


class StatusView(
    DescribedBySpectacular,
    NegotiationMixin,
    ScopedByPermissionsMixin,
    ConfiguredPermissionsMixin,
    APIView,
):
    """Whether the scheduling is healthy: the report ``manage.py scheduler_status --json``
    prints (the schedulers alive, the index and its drift, the oldest due lag, the runs
    waiting on each dispatcher, the auto-paused schedules, and the problems and warnings
    they make). 200 whether healthy or not: read ``healthy``. Needs the view_operations
    permission. Under a ``filter_schedules``, of the schedules the user may see."""

    required_perms = {"GET": ["django_schedulinator.view_operations"]}

    @extend_schema(
        tags=["operations"],
        parameters=[
            OpenApiParameter("drift", OpenApiTypes.BOOL, description="Run the drift check."),
            OpenApiParameter(
                "max_lag",
                OpenApiTypes.DOUBLE,
                description="How late the oldest due entry may be, in seconds (default "
                f"{DEFAULT_MAX_LAG_SECONDS:g}).",
            ),
        ],
        responses={200: s.ClusterStatusSerializer, **INVALID, **INDEX_UNAVAILABLE, **REFUSED},
    )
    def get(self, request: Request) -> Response:
        raw = request.query_params.get("max_lag")
        max_lag = DEFAULT_MAX_LAG_SECONDS
        if raw is not None:
            try:
                max_lag = float(raw)
            except ValueError:
                max_lag = -1.0
            if not (math.isfinite(max_lag) and max_lag >= 0):
                raise ValidationError({"max_lag": ["A number of seconds, 0 or more."]})
        try:
            report = cluster_status(
                drift=flag(request, "drift"), max_lag=max_lag, scope=self.scope()
            )
        except RedisError as exc:
            raise IndexUnavailable(f"Redis is unreachable: {exc}") from None
        return Response(s.ClusterStatusSerializer(report.as_dict()).data)
