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


def receive(key: str, attempt: int = 1) -> None:
    """What a receiver that dedupes on the key does with one delivery: the first is the effect
    (a Receipt), a repeat is only counted (a Redelivery)."""
    from django.db import IntegrityError
    from django.utils import timezone

    from django_schedulinator.timing import from_ms

    schedule_id, _, ms = key.partition(":")
    received_at = timezone.now()
    try:
        Receipt.objects.create(
            key=key,
            schedule_id=int(schedule_id),
            scheduled_for=from_ms(int(ms)),
            received_at=received_at,
            attempt=attempt,
        )
    except IntegrityError:
        Redelivery.objects.create(key=key, received_at=received_at, attempt=attempt)
