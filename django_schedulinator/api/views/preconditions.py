"""A schedule's edits carry a precondition: its ``version`` as an ``If-Match`` header (a
stale one gets 412) or as the ``version`` field of the body (409); an edit without either
gets 428. The version changes with every edit, pause and resume, not when the schedule
fires, so an edit only ever loses to another edit."""

from __future__ import annotations

from collections.abc import Callable

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request

from django_schedulinator.api.serializers.errors import ErrorSerializer
from django_schedulinator.api.views.errors import (
    INVALID,
    NO_SCHEDULE,
    REFUSED,
    Conflict,
    PreconditionFailed,
    PreconditionRequired,
)
from django_schedulinator.models import Schedule


def etag(schedule: Schedule) -> str:
    """The schedule's ETag: its version, quoted."""
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
# The errors of an edit that carries a precondition.
PRECONDITION_RESPONSES = {
    **INVALID,
    **NO_SCHEDULE,
    409: OpenApiResponse(
        ErrorSerializer, description="The 'version' in the body is not the current one."
    ),
    412: OpenApiResponse(
        ErrorSerializer, description="The If-Match ETag is not the current version."
    ),
    428: OpenApiResponse(ErrorSerializer, description="Neither If-Match nor 'version' was sent."),
    **REFUSED,
}


def expected_version(
    request: Request, schedule: Schedule, *, required: bool
) -> tuple[int | None, Callable[[int], APIException]]:
    """The version the client's edit starts from (If-Match, else ``version`` in the
    body; None: any), and the refusal for a schedule at another version: 412 for
    If-Match, 409 for the body. Checked here against the schedule as read, and again
    by the service under the row's lock, so an edit in between is refused too."""
    header = request.headers.get("If-Match")
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
    data = request.data
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
