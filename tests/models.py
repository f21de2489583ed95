from django.db import models


class Delivery(models.Model):
    """What a test task records each time it runs: the receiver's own view."""

    key = models.CharField(max_length=100, db_index=True)
    schedule_id = models.BigIntegerField()
    scheduled_for = models.DateTimeField()
    attempt = models.PositiveIntegerField()
    received_at = models.DateTimeField(auto_now_add=True)
    payload = models.JSONField(default=dict)

    def __str__(self) -> str:
        return self.key


class Receipt(models.Model):
    """A receiver that dedupes on the idempotency key, as the docs tell users to build one."""

    key = models.CharField(max_length=100, unique=True)
    schedule_id = models.BigIntegerField()
    scheduled_for = models.DateTimeField()
    received_at = models.DateTimeField()
    attempt = models.PositiveIntegerField()

    def __str__(self) -> str:
        return self.key


class Redelivery(models.Model):
    """A delivery of a key the receiver already had (allowed: at least once; counted)."""

    key = models.CharField(max_length=100, db_index=True)
    received_at = models.DateTimeField()
    attempt = models.PositiveIntegerField()

    def __str__(self) -> str:
        return self.key
