"""URLs of the example project: the admin, where schedules and runs can be edited and watched."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
