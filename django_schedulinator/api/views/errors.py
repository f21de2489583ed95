"""The API's refusals of a request as a whole (precondition, conflict, Redis unreachable),
and the errors each operation documents, with their bodies, so that generated clients can
read them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from drf_spectacular.utils import OpenApiResponse
from redis.exceptions import RedisError
from rest_framework import status
from rest_framework.exceptions import APIException

from django_schedulinator.api.serializers.errors import ErrorSerializer, ValidationErrorSerializer


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


# Every operation can be refused: 403 for a user without the permissions; for an anonymous
# request 401 when the project's first authentication class asks for credentials
# (WWW-Authenticate), else 403 (DRF's rule).
REFUSED = {
    401: OpenApiResponse(
        ErrorSerializer,
        description="Not authenticated (when the first authentication class of the project "
        "asks for credentials; otherwise 403).",
    ),
    403: OpenApiResponse(
        ErrorSerializer,
        description="Not authenticated, or not staff with the model permissions needed.",
    ),
}
INVALID = {
    400: OpenApiResponse(
        ValidationErrorSerializer, description="Invalid: each error names its field."
    )
}
NO_SCHEDULE = {404: OpenApiResponse(ErrorSerializer, description="No such schedule.")}
NO_PAGE = {404: OpenApiResponse(ErrorSerializer, description="No such page, or an invalid cursor.")}
INDEX_UNAVAILABLE = {
    503: OpenApiResponse(
        ErrorSerializer, description="Redis, which holds the due index, is unreachable."
    )
}
NO_CALENDAR = {404: OpenApiResponse(ErrorSerializer, description="No such calendar.")}


@contextmanager
def index_reachable() -> Iterator[None]:
    """Redis unreachable (it holds the due index): 503, saying why, instead of a 500."""
    try:
        yield
    except RedisError as exc:
        raise IndexUnavailable(f"Redis is unreachable: {exc}") from None
