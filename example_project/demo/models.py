"""What the demo's heartbeat task records: one row per occurrence, keyed by its idempotency key."""

from django.db import models
from django.utils import timezone


class Firing(models.Model):
    # The occurrence's idempotency key: unique, so a re-dispatched occurrence (same key)
    # cannot be recorded twice.
    key = models.CharField(max_length=64, unique=True)
    schedule_name = models.CharField(max_length=200)
    scheduled_for = models.DateTimeField(help_text="The nominal time of the occurrence.")
    fired_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("-scheduled_for",)

    def __str__(self) -> str:
        return f"{self.schedule_name} @ {self.scheduled_for.isoformat()}"
