"""URLs of the example project: the admin, where schedules and runs can be edited and watched,
and the REST API with its OpenAPI schema at /api/schedulinator/schema/."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schedulinator/", include("django_schedulinator.api.urls")),
]
