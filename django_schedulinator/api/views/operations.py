"""Operations, read-only: the due index's health, the schedulers alive (their heartbeats),
and the whole status that ``manage.py scheduler_status --json`` prints. Each needs the
view_operations permission."""

from __future__ import annotations

import math

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_schedulinator import timing
from django_schedulinator.api.negotiation import NegotiationMixin
from django_schedulinator.api.permissions import (
    ConfiguredPermissionsMixin,
    ScopedByPermissionsMixin,
)
from django_schedulinator.api.schema import DescribedBySpectacular, extend_schema
from django_schedulinator.api.serializers.operations import (
    ClusterStatusSerializer,
    IndexStatusSerializer,
    SchedulersSerializer,
)
from django_schedulinator.api.views.errors import (
    INDEX_UNAVAILABLE,
    INVALID,
    REFUSED,
    index_reachable,
)
from django_schedulinator.conf import app_settings
from django_schedulinator.index.due import get_index
from django_schedulinator.operations.health import (
    DEFAULT_MAX_LAG_SECONDS,
    cluster_status,
    schedulers_as_dicts,
)
from django_schedulinator.operations.heartbeat import alive
from django_schedulinator.operations.index_health import index_status


def flag(request: Request, name: str) -> bool:
    """A query-string flag that is on unless it says false, 0 or no."""
    return request.query_params.get(name, "true").lower() not in ("false", "0", "no")


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
        responses={200: IndexStatusSerializer, **INDEX_UNAVAILABLE, **REFUSED},
    )
    def get(self, request: Request) -> Response:
        with index_reachable():
            report = index_status(drift=flag(request, "drift"), scope=self.scope())
        return Response(IndexStatusSerializer(report.as_dict()).data)


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
        responses={200: SchedulersSerializer, **INDEX_UNAVAILABLE, **REFUSED},
    )
    def get(self, request: Request) -> Response:
        scoped = self.scope() is not None
        index = get_index()
        with index_reachable():
            beats = alive(index)
            now = timing.from_ms(index.now_ms())
        data = {
            "checked_at": now.isoformat(),
            "pass_stale_seconds": app_settings.PASS_STALE_SECONDS,
            "schedulers": schedulers_as_dicts(beats, now, scoped=scoped),
        }
        return Response(SchedulersSerializer(data).data)


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
        responses={200: ClusterStatusSerializer, **INVALID, **INDEX_UNAVAILABLE, **REFUSED},
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
        with index_reachable():
            report = cluster_status(
                drift=flag(request, "drift"), max_lag=max_lag, scope=self.scope()
            )
        return Response(ClusterStatusSerializer(report.as_dict()).data)
