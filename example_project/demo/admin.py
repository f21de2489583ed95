from django.contrib import admin

from .models import Firing


@admin.register(Firing)
class FiringAdmin(admin.ModelAdmin):
    list_display = ("schedule_name", "scheduled_for", "fired_at", "key")
    list_filter = ("schedule_name",)
    search_fields = ("key", "schedule_name")
    date_hierarchy = "scheduled_for"
