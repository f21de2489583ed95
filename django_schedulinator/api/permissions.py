"""Who may use the API: by default authenticated staff whose Django model permissions allow
the request. Anonymous users can neither read nor write.

Views say what they need in ``required_perms`` (a method or action name mapped to permission
names); SCHEDULINATOR["API_PERMISSION_CLASSES"] replaces the default class.

Object permissions: a class that refuses single schedules (``has_object_permission``) says
which schedules a user may see in SQL, with ``filter_schedules(request, view, queryset)``;
every view applies it (schedules, runs, the change log; the status, the index health and the
schedulers through their ``scope``, which ``health`` counts and names by; a calendar's
refusals), so no answer shows what a detail view refuses. A class that refuses objects
without that method gets its lists and aggregates refused.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils.module_loading import import_string
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from django_schedulinator.conf import app_settings
from django_schedulinator.models import Schedule
from django_schedulinator.models.scopes import Scope

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


def refuses_objects(permission: Any) -> bool:
    """Whether a permission class decides per object (overrides has_object_permission)."""
    method = getattr(type(permission), "has_object_permission", None)
    return method is not None and method is not BasePermission.has_object_permission


def visible_schedules(request: Request, view: Any, *, listing: bool) -> QuerySet[Schedule] | None:
    """The schedules the permission classes let this request see, as a queryset (one SQL
    subquery, whatever the page); None when they let it see all.

    A class that refuses single schedules must say which in ``filter_schedules``; without
    it a list cannot leave them out, so a list is refused (a single object is still
    decided by its ``has_object_permission``)."""
    visible: QuerySet[Schedule] | None = None
    for permission in view.get_permissions():
        hook = getattr(permission, "filter_schedules", None)
        if hook is not None:
            visible = hook(request, view, Schedule.objects.all() if visible is None else visible)
        elif listing and refuses_objects(permission):
            raise PermissionDenied(
                f"{type(permission).__qualname__} refuses single schedules but has no "
                "filter_schedules(request, view, queryset) to leave them out of lists, so "
                "lists are refused. Give the permission class that method."
            )
    return visible


class ScopedByPermissionsMixin:
    """A view whose answers count or name schedules (the status, the index health, the
    schedulers, a calendar's refusals): what it reads is kept to the schedules the
    permission classes let the user see (``models/scopes.py``)."""

    def scope(self) -> Scope:
        view: Any = self  # a DRF view: it has the request
        return visible_schedules(view.request, view, listing=True)


class SchedulesFilteredByPermissionsMixin:
    """Every view of schedules, runs and changes shows only what the permission classes'
    ``filter_schedules`` lets the user see (see :func:`visible_schedules`)."""

    # The path from the view's model to its schedule; "" for the schedules themselves.
    schedule_lookup = ""

    def get_queryset(self) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset()  # type: ignore[misc]
        view: Any = self  # a DRF view: it has the request and (viewsets) the action
        listing = getattr(view, "action", None) == "list"
        visible = visible_schedules(view.request, view, listing=listing)
        if visible is None:
            return queryset
        lookup = f"{self.schedule_lookup}__in" if self.schedule_lookup else "pk__in"
        return queryset.filter(**{lookup: visible.values("pk")})
