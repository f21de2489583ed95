"""Runs: the ledger's rows, and what a worker reports of a handed-off run (and the receipt
it gets back)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from django_schedulinator import outcomes
from django_schedulinator.api.serializers.fields import FieldsBuiltOnce
from django_schedulinator.models import Run
from django_schedulinator.statuses import ReportedStatus


class RunSerializer(FieldsBuiltOnce, serializers.ModelSerializer[Run]):
    idempotency_key = serializers.CharField(read_only=True)
    skip_reason = serializers.ChoiceField(
        choices=Run.SkipReason.choices,
        allow_blank=True,
        read_only=True,
        help_text="Why the occurrence did not fire; empty when it did.",
    )

    class Meta:
        model = Run
        fields = (
            "id",
            "schedule",
            "scheduled_for",
            "idempotency_key",
            "status",
            "trigger",
            "skip_reason",
            "note",
            "task",
            "args",
            "kwargs",
            "dispatcher",
            "dispatch_options",
            "claimed_at",
            "dispatched_at",
            "finished_at",
            "worker_id",
            "attempts",
            "lease_expires_at",
            "external_id",
            "response_status",
            "output",
            "outcome_due_by",
            "error",
            "missed_at",
        )
        read_only_fields = fields


class OutcomeReportSerializer(serializers.Serializer[Any]):
    """What a worker that ran a handed-off occurrence says of it, by the occurrence key."""

    key = serializers.CharField(
        max_length=64, help_text="The occurrence key the run was handed off with."
    )
    status = serializers.ChoiceField(
        choices=[s.value for s in ReportedStatus], help_text="What happened to the run."
    )
    error = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="What went wrong (failed); its last 4,000 characters are kept.",
    )

    def validate_error(self, value: str) -> str:
        # Any length is taken (a long traceback must not lose the report): its end is kept.
        return value[-outcomes.MAX_ERROR_CHARS :]


class OutcomeReceiptSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    changed = serializers.BooleanField(
        help_text="Whether the report changed the run: false for a repeated report, a run "
        "that already ended, or a key not in the ledger."
    )
    run_status = serializers.CharField(
        allow_null=True, help_text="The run's status now; null when the key is not in the ledger."
    )
