"""What the API's views parse and render, whatever the project's REST_FRAMEWORK says.

* JSON bodies are measured before they are parsed: Python's json recurses, and a body
  nested deeper than MAX_JSON_DEPTH is a 400 naming its field, not a RecursionError (500).
* DRF's browsable API (HTML) needs the templates of rest_framework and django_filters: it
  is offered when both apps are installed; otherwise a browser gets JSON, not a 500
  (TemplateDoesNotExist).
"""

from __future__ import annotations

import io
from typing import Any

from django.apps import apps
from rest_framework import parsers, renderers
from rest_framework.exceptions import ParseError, ValidationError

from django_schedulinator.conf import MAX_JSON_DEPTH
from django_schedulinator.models.validators import JSON_TOO_DEEP, json_text_too_deep


def too_deep_message() -> str:
    return JSON_TOO_DEEP % {"limit": MAX_JSON_DEPTH}


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, which first refuses a body nested too deep, naming the member."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", "utf-8")
        raw = stream.read() if stream is not None else b""
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        member = json_text_too_deep(text)
        if isinstance(member, str):
            raise ValidationError({member: [too_deep_message()]})
        if member:
            raise ParseError(too_deep_message())
        return super().parse(io.BytesIO(raw), media_type, parser_context)


# The apps whose templates the browsable API renders (the filters' form: django_filters).
BROWSABLE_API_APPS = ("rest_framework", "django_filters")


class NegotiationMixin:
    """The views' parsers and renderers: the project's, with DRF's JSON parser replaced by
    the one above, and the browsable API left out when its templates are not installed."""

    def get_parsers(self) -> list[parsers.BaseParser]:
        found: list[parsers.BaseParser] = super().get_parsers()  # type: ignore[misc]
        return [JSONParser() if type(p) is parsers.JSONParser else p for p in found]

    def get_renderers(self) -> list[renderers.BaseRenderer]:
        found: list[renderers.BaseRenderer] = super().get_renderers()  # type: ignore[misc]
        if all(apps.is_installed(app) for app in BROWSABLE_API_APPS):
            return found
        usable = [r for r in found if not isinstance(r, renderers.BrowsableAPIRenderer)]
        return usable or [renderers.JSONRenderer()]
