"""What a schedule's fields must hold: the validators its fields name (migrations refer to
them by their dotted path), and the checks of JSON, payload size and grace that the model's
``clean()``, the admin's forms and the API share."""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from django_schedulinator.conf import MAX_JSON_DEPTH, app_settings
from django_schedulinator.registry import OCCURRENCE_KEY_PARAMETER, OCCURRENCE_PARAMETER, registry

StrOrPromise = str | Promise  # a message, translated when shown


def validate_registered_task(value: str) -> None:
    if value not in registry:
        known = ", ".join(registry.names()[:10]) or "none registered yet"
        raise ValidationError(
            _(
                "%(value)r is not a registered task (registered: %(known)s). Register it with "
                "@django_schedulinator.task."
            ),
            code="unregistered_task",
            params={"value": value, "known": known},
        )


JSON_TOO_DEEP = _(
    "JSON nested more than %(limit)s levels deep is refused (the list or object itself is "
    "the first level)."
)
# The structure of JSON text: strings whole (they may hold brackets), and the brackets.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:]')


def json_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether lists and dicts nest deeper than ``limit`` (``value`` itself is level 1).
    Iterative: a value too deep for Python's recursion is answered, not crashed on."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def json_text_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> str | bool:
    """Whether JSON text nests deeper than ``limit``, found without parsing it (Python's
    json recurses, and fails on deep text). For a top-level object, each member's value is
    measured on its own, and the name of the first one too deep is returned; otherwise
    True. False when nothing is too deep."""
    depth = 0
    object_at_top = False
    last_string = ""
    member = ""
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth == 1:
                object_at_top = token == "{"
            if depth > limit + (1 if object_at_top else 0):
                return member if object_at_top and member else True
        elif token in "]}":
            depth -= 1
        elif token == ":":
            if depth == 1 and object_at_top:
                member = _json_string(last_string)
        else:
            last_string = token
    return False


def _json_string(literal: str) -> str:
    try:
        decoded = json.loads(literal)
    except ValueError:
        return literal.strip('"')
    return decoded if isinstance(decoded, str) else literal


def json_too_deep_error() -> ValidationError:
    return ValidationError(JSON_TOO_DEEP, code="too_deep", params={"limit": MAX_JSON_DEPTH})


def validate_json_depth(value: Any) -> None:
    if json_too_deep(value):
        raise json_too_deep_error()


MAX_CALENDARS = 10  # on one schedule
MAX_DAYS = 5000  # in one calendar
CALENDAR_NAME = re.compile(r"^[-a-zA-Z0-9_]+\Z")


def validate_calendar_names(value: Any) -> None:
    """A schedule's calendars: a list of distinct calendar names (whether they exist is
    the model's ``clean()``'s question)."""
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValidationError(
            'Enter a list of calendar names, for example ["uk-holidays"].', code="not_names"
        )
    if len(value) > MAX_CALENDARS:
        raise ValidationError(
            "At most %(max)d calendars.", code="too_many", params={"max": MAX_CALENDARS}
        )
    if len(set(value)) != len(value):
        raise ValidationError("A calendar is named twice.", code="twice")
    bad = [name for name in value if not CALENDAR_NAME.match(name)]
    if bad:
        raise ValidationError(
            "Not a calendar name: %(name)r.", code="bad_name", params={"name": bad[0]}
        )


def validate_weekend(value: Any) -> None:
    """A calendar's weekend: distinct ISO weekdays (1 Monday ... 7 Sunday), not all seven."""
    if (
        not isinstance(value, list)
        or not all(type(day) is int and 1 <= day <= 7 for day in value)
        or len(set(value)) != len(value)
    ):
        raise ValidationError(
            "Enter a list of ISO weekdays, 1 (Monday) to 7 (Sunday), for example [6, 7].",
            code="not_weekdays",
        )
    if len(value) == 7:
        raise ValidationError("A week needs at least one business day.", code="no_business_day")


def validate_json_list(value: Any) -> None:
    if not isinstance(value, list):
        raise ValidationError(
            'Enter a JSON list of positional arguments, for example [1, "a"]; got %(type)s.',
            code="not_a_list",
            params={"type": type(value).__name__},
        )
    _validate_strict_json(value)


def _validate_strict_json(value: Any) -> None:
    validate_json_depth(value)  # first: json.dumps below recurses
    # json.dumps writes NaN and Infinity by default; they are not JSON (PostgreSQL refuses them).
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        raise ValidationError(
            _("NaN and Infinity are not valid JSON numbers."), code="not_json"
        ) from None
    except TypeError:
        return  # not JSON at all: the field's own validation says so
    # PostgreSQL's jsonb refuses \u0000 (SQLite would store it): refuse it everywhere, so a
    # schedule is valid on every database.
    if _holds_nul(value):
        raise ValidationError(
            _("Text in JSON cannot hold the NUL character (\\u0000)."), code="nul_character"
        )


def _holds_nul(value: Any) -> bool:
    stack = [value]  # iterative, like json_too_deep
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def validate_json_object(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValidationError(
            'Enter a JSON object of keyword arguments, for example {"a": 1}; got %(type)s.',
            code="not_an_object",
            params={"type": type(value).__name__},
        )
    for reserved in (OCCURRENCE_PARAMETER, OCCURRENCE_KEY_PARAMETER):
        if reserved in value:
            raise ValidationError(
                _("%(name)r is reserved: the scheduler passes the occurrence itself."),
                code="reserved_kwarg",
                params={"name": reserved},
            )
    _validate_strict_json(value)


def validate_name(value: str) -> None:
    # Spaces and invisible format characters (zero-width space, ...) alone make no name.
    if not any(c.isprintable() and not c.isspace() for c in value):
        raise ValidationError(
            _("Enter a name that is not only spaces or invisible characters."), code="blank_name"
        )
    bad = sorted({c for c in value if unicodedata.category(c) in ("Cc", "Zl", "Zp")})
    if bad:
        raise ValidationError(
            _("A name cannot hold control characters or line breaks (found %(chars)s)."),
            code="control_characters",
            params={"chars": ", ".join(f"U+{ord(c):04X}" for c in bad)},
        )


def payload_errors(args: Any, kwargs: Any) -> dict[str, str]:
    """A size error for the larger of args and kwargs when together they exceed the limit.

    Every occurrence copies both into the ledger, so the limit bounds what each run costs.
    """
    if json_too_deep(args) or json_too_deep(kwargs):
        return {}  # the field's own validation says so (json.dumps would recurse)
    try:
        sizes = {
            "args": len(json.dumps(args).encode()),
            "kwargs": len(json.dumps(kwargs).encode()),
        }
    except (TypeError, ValueError):
        return {}  # not JSON: the field's own validation says so
    limit = app_settings.MAX_PAYLOAD_BYTES
    total = sum(sizes.values())
    if total <= limit:
        return {}
    field = max(sizes, key=lambda name: sizes[name])
    return {
        field: f"args and kwargs take {total:,} bytes of JSON together; the limit is "
        f"{limit:,} (SCHEDULINATOR['MAX_PAYLOAD_BYTES'])."
    }


# The longest grace: a monthly job may have the month; beyond that, an alert says nothing.
MAX_GRACE = timedelta(days=31)


def grace_errors(grace: Any, jitter: Any) -> dict[str, StrOrPromise]:
    """What is wrong with a schedule's grace (an error on ``grace``, or none)."""
    if not isinstance(grace, timedelta):
        return {}  # blank (no alert), or a type clean_fields() reports
    if grace < timedelta(seconds=1):
        return {"grace": _("The grace must be at least 1 second.")}
    if grace > MAX_GRACE:
        return {"grace": _("The grace must be at most 31 days.")}
    if isinstance(jitter, timedelta) and grace <= jitter:
        return {
            "grace": _(
                "The grace must be longer than the jitter (%(jitter)s): an occurrence may "
                "fire that late, and would be missed before it ran."
            )
            % {"jitter": jitter}
        }
    return {}
