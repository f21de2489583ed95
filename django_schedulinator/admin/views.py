"""The schedule admin's own pages, beside Django's: the live preview of the timing in an add
or change form, and the operations page (its content in ``operations.py``).

Each is routed through ``admin_site.admin_view`` by ``urls()``, which the ModelAdmin's
``get_urls`` puts before Django's own.
"""

from __future__ import annotations

from datetime import UTC
from functools import partial
from typing import Any

from django.contrib.admin import ModelAdmin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.template.loader import render_to_string
from django.urls import URLPattern, path
from django.utils.translation import gettext

from django_schedulinator import timing
from django_schedulinator.admin.display import local_time
from django_schedulinator.admin.forms import PREVIEW_FIELDS
from django_schedulinator.admin.operations import operations_view
from django_schedulinator.conf import app_settings
from django_schedulinator.models import Schedule

PREVIEW_TEMPLATE = "django_schedulinator/admin/preview.html"


def urls(model_admin: ModelAdmin[Schedule]) -> list[URLPattern]:
    info = model_admin.opts.app_label, model_admin.opts.model_name
    admin_view = model_admin.admin_site.admin_view
    preview = admin_view(partial(preview_view, model_admin=model_admin))
    return [
        path(
            "operations/",
            admin_view(partial(operations_view, model_admin=model_admin)),
            name="{}_{}_operations".format(*info),
        ),
        path("preview/", preview, name="{}_{}_preview".format(*info)),
        path("<path:object_id>/preview/", preview, name="{}_{}_preview_change".format(*info)),
    ]


def preview_view(
    request: HttpRequest, object_id: str | None = None, *, model_admin: ModelAdmin[Schedule]
) -> HttpResponse:
    """The description and next runs of the timing in a posted add or change form, not
    saved: validated by the form's own rules (the model's), so what it shows is what
    saving would give. Writes nothing; needs the permission to save that form."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    obj = None
    if object_id is not None:
        obj = model_admin.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(gettext("No such schedule."))
        if not model_admin.has_change_permission(request, obj):
            raise PermissionDenied
    elif not model_admin.has_add_permission(request):
        raise PermissionDenied
    form = model_admin.get_form(request, obj, change=obj is not None)(request.POST, instance=obj)
    form.is_valid()  # sets on the instance what is valid, and collects the errors
    errors = [
        (form.fields[name].label if name in form.fields else name, message)
        for name, messages_ in form.errors.items()
        if name in PREVIEW_FIELDS
        for message in messages_
    ]
    if errors:
        return JsonResponse(
            {
                "description": "",
                "preview": render_to_string(
                    "django_schedulinator/admin/preview_invalid.html", {"errors": errors}
                ),
            }
        )
    schedule = form.instance
    return JsonResponse({"description": schedule.description, "preview": preview_html(schedule)})


def preview_html(obj: Schedule) -> str:
    """The next runs of ``obj``, as the change form's preview box shows them."""
    try:
        items = obj.preview(app_settings.PREVIEW_COUNT)
    except (ValueError, TypeError) as exc:  # a form shown again with invalid timing
        return render_to_string(PREVIEW_TEMPLATE, {"error": exc})
    return render_to_string(
        PREVIEW_TEMPLATE,
        {"paused": not obj.enabled, "items": [_preview_row(obj, i) for i in items]},
    )


def _preview_row(obj: Schedule, item: timing.PreviewItem) -> dict[str, Any]:
    flagged = bool(item.dst or item.note or item.skipped)
    if item.skipped:
        fires = gettext("does not fire")
    elif item.due_at != item.at:  # jitter
        fires = local_time(item.due_at, obj.timezone)
    else:
        fires = ""
    return {
        "classes": " ".join(
            name for name, applies in (("dst", flagged), ("skipped", item.skipped)) if applies
        ),
        "local": f"{item.local:%a %Y-%m-%d %H:%M:%S %Z}",
        "utc": f"{item.at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC",
        "fires": fires,
        "flagged": flagged,
        # The flag names a DST change only for one (an excluded day, or the first solar
        # event after days without one, has its sentence alone).
        "dst": bool(item.dst),
        "note": item.note or gettext("Skipped: this local time does not exist."),
    }
