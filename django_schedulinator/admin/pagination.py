"""Lists that may grow without end (the ledger, the change log) count at most so far."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.translation import gettext

from django_schedulinator.admin.display import COUNT_LIMIT, ExactTimes, _ModelAdmin, count_at_most

if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:  # not generic at run time
    _Paginator = Paginator


class CappedCountPaginator(_Paginator):
    """Counts at most ``limit`` rows: ``count`` is exact below it, and ``capped`` says that
    there are at least ``limit`` rows (more than ``limit - 1``)."""

    def __init__(self, object_list: Any, per_page: int, *args: Any, limit: int, **kwargs: Any):
        super().__init__(object_list, per_page, *args, **kwargs)
        self.limit = limit

    @cached_property
    def count(self) -> int:
        objects = self.object_list
        if isinstance(objects, QuerySet):
            return count_at_most(objects, self.limit)
        return min(len(objects), self.limit)  # a list: capped alike

    @property
    def capped(self) -> bool:
        return self.count >= self.limit


class CappedChangeList(ChangeList):
    """A changelist whose paginator stops counting: the page says "More than N ..."."""

    paginator: CappedCountPaginator

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.count_capped = self.paginator.capped
        if self.count_capped:
            # The search bar prints "N results" whenever full_result_count (None: not
            # counted) differs from result_count; made equal, it does not print the cap.
            self.full_result_count = self.result_count

    @property
    def count_text(self) -> str:
        return gettext("More than %(count)s %(items)s") % {
            "count": f"{self.paginator.limit - 1:,}",
            "items": self.opts.verbose_name_plural,
        }

    @property
    def page_range(self) -> list[Any]:
        return list(self.paginator.get_elided_page_range(self.page_num))


class CappedCountAdmin(_ModelAdmin):
    """A list that may grow large: each page counts at most ``count_limit`` rows past its
    start (the next pages stay reachable, a deep page costs its own OFFSET and no more), and
    nothing counts the whole table: no full count, no counts by filter choice."""

    count_limit = COUNT_LIMIT
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    change_list_template = "django_schedulinator/admin/capped_change_list.html"

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return CappedChangeList

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: QuerySet[Any],
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> CappedCountPaginator:
        try:  # read as the changelist reads it
            page = max(int(request.GET.get(PAGE_VAR, 1)), 1)
        except ValueError:
            page = 1
        # At least a page, and more than "show all" may list: a capped count never offers it.
        ahead = max(self.count_limit, per_page, self.list_max_show_all)
        limit = (page - 1) * per_page + ahead + 1
        return CappedCountPaginator(
            queryset, per_page, orphans, allow_empty_first_page, limit=limit
        )


class ReadOnlyAdmin(ExactTimes, CappedCountAdmin):
    """A record the app writes (the run ledger, the change log): nobody adds, edits or
    deletes its rows by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
