"""Who may use the API: by default authenticated staff whose Django model permissions allow
the request. Anonymous users can neither read nor write.

Views say what they need in ``required_perms`` (a method or action name mapped to permission
names); SCHEDULINATOR["API_PERMISSION_CLASSES"] replaces the default class.
"""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from ..conf import app_settings

# Model permissions for each HTTP method, like the admin's: reading needs "view".
METHOD_ACTIONS = {
    "GET": "view",
    "HEAD": "view",
    "OPTIONS": "view",
    "POST": "add",
    "PUT": "change",
    "PATCH": "change",
    "DELETE": "delete",
}


def required_permissions(request: Request, view: Any) -> list[str]:
    """The permissions a request needs: the view's own for its action, else the model's
    permission for the HTTP method (view, add, change, delete)."""
    declared: dict[str, list[str]] = getattr(view, "required_perms", {})
    action = getattr(view, "action", None)
    if action in declared:
        return declared[action]
    # HEAD and OPTIONS read what GET reads: they need what GET needs.
    method = "GET" if request.method in ("HEAD", "OPTIONS") else request.method
    if method in declared:
        return declared[method]
    queryset = getattr(view, "queryset", None)
    if queryset is None:
        return []
    opts = queryset.model._meta
    verb = METHOD_ACTIONS.get(request.method or "", "change")
    return [f"{opts.app_label}.{verb}_{opts.model_name}"]


class StaffWithModelPermissions(BasePermission):
    """Authenticated, active staff with the model permissions of the request."""

    message = "You need a staff account with the model permissions for this request."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated and user.is_active and user.is_staff):
            return False
        return user.has_perms(required_permissions(request, view))


def configured_permissions() -> list[BasePermission]:
    """Instances of SCHEDULINATOR["API_PERMISSION_CLASSES"], read at request time."""
    return [import_string(path)() for path in app_settings.API_PERMISSION_CLASSES]


class ConfiguredPermissionsMixin:
    """Every view of the API takes its permission classes from the settings."""

    def get_permissions(self) -> list[BasePermission]:
        return configured_permissions()
