"""The ledger's rows: a ``Run`` per occurrence, and ``PrunedRuns``, what retention deleted."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from django_schedulinator import statuses, timing
from django_schedulinator.models.keys import occurrence_key
from django_schedulinator.models.querysets import (
    RunQuerySet,
)
from django_schedulinator.models.schedule import DEFAULT_DISPATCHER, Schedule
from django_schedulinator.statuses import RunStatus


class Run(models.Model):
    """One occurrence of a schedule: the ledger that makes firing exactly-once decidable.

    Occurrences that did not fire are in it too, as ``skipped`` with a reason.
    """

    Status = RunStatus

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule", _("Schedule")
        RUN_NOW = "run_now", _("Run now")
        BACKFILL = "backfill", _("Backfill")

    class SkipReason(models.TextChoices):
        MISSED = timing.SkipReason.MISSED, _("Missed (catch-up policy)")
        EXPIRED = timing.SkipReason.EXPIRED, _("Expired (a one-off too late)")
        DST = timing.SkipReason.DST, _("Local time does not exist (DST policy)")
        OVERLAP = timing.SkipReason.OVERLAP, _("Previous run still running (overlap policy)")
        PAUSED = timing.SkipReason.PAUSED, _("Schedule paused")
        REPLACED = timing.SkipReason.REPLACED, _("Replaced by a run now")
        CALENDAR = timing.SkipReason.CALENDAR, _("Excluded day (calendar)")

    # Unfinished: a process holds it under a lease; a take-over dispatches it if that lapses.
    UNFINISHED = statuses.UNFINISHED

    # No index of its own: the unique (schedule, scheduled_for) constraint serves lookups.
    schedule = models.ForeignKey(
        Schedule,
        on_delete=models.CASCADE,
        related_name="runs",
        db_index=False,
        verbose_name=_("schedule"),
    )
    scheduled_for = models.DateTimeField(
        _("scheduled for"), help_text=_("The nominal time of the occurrence.")
    )
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.PENDING
    )
    trigger = models.CharField(
        _("trigger"), max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULE
    )
    skip_reason = models.CharField(
        _("skip reason"), max_length=16, choices=SkipReason.choices, blank=True
    )
    # What was dispatched, as it was at claim time: a re-dispatch sends exactly the same.
    task = models.CharField(_("task"), max_length=200)
    args = models.JSONField(_("args"), default=list)
    kwargs = models.JSONField(_("kwargs"), default=dict)
    dispatcher = models.CharField(_("dispatcher"), max_length=100, default=DEFAULT_DISPATCHER)
    dispatch_options = models.JSONField(_("dispatch options"), default=dict)
    claimed_at = models.DateTimeField(_("claimed at"))
    dispatched_at = models.DateTimeField(_("dispatched at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    worker_id = models.CharField(_("worker id"), max_length=200)
    # The claim batch that owns an unfinished run; a takeover writes a new one.
    claim_token = models.CharField(_("claim token"), max_length=40)
    lease_expires_at = models.DateTimeField(_("lease expires at"), null=True, blank=True)
    attempts = models.PositiveIntegerField(_("attempts"), default=1)
    # What the receiving system said of a hand-off: its id for it, the HTTP status.
    output = models.TextField(
        _("output"),
        blank=True,
        help_text=_(
            "What the task returned as text (a management command: its exit status and "
            "output), its last 4,000 characters."
        ),
    )
    external_id = models.CharField(
        _("external id"),
        max_length=255,
        blank=True,
        help_text=_("The id the receiving system gave it: a task result id, a job id."),
    )
    response_status = models.PositiveSmallIntegerField(_("response status"), null=True, blank=True)
    # A handed-off run counts as in progress (for overlap) until its outcome is reported or
    # this time passes; then it stays "dispatched", its outcome unknown.
    outcome_due_by = models.DateTimeField(_("outcome due by"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True)
    note = models.TextField(
        _("note"), blank=True, help_text=_("Why it was skipped, or how it was queued.")
    )
    # While a run of a schedule with a grace has not succeeded: when it is missed (its
    # nominal time, or when it was queued, plus the grace). Cleared by the success, or when
    # the missed-run check raises it (alerts.py), which reads only runs that have one.
    alert_at = models.DateTimeField(_("alert at"), null=True, blank=True)
    missed_at = models.DateTimeField(
        _("missed at"),
        null=True,
        blank=True,
        help_text=_("When the missed-run check found it had no success within the grace."),
    )

    objects: ClassVar[RunQuerySet[Run]] = RunQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        ordering = ("-scheduled_for",)
        permissions = [
            ("report_run", _("Can report the outcome of handed-off runs (worker services)")),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "scheduled_for"], name="schedulinator_run_once"
            )
        ]
        indexes = [
            # Only unfinished runs: it stays as small as the work in flight.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status__in=list(statuses.UNFINISHED)),
                name="schedulinator_run_lease",
            ),
            # The overlap policies ask whether a schedule has a run in progress or waiting
            # (RunQuerySet.in_progress): handed-off runs awaiting their outcome included.
            models.Index(
                fields=["schedule"],
                condition=Q(status__in=[*statuses.UNFINISHED, RunStatus.BUFFERED])
                | Q(status=RunStatus.DISPATCHED, outcome_due_by__isnull=False),
                name="schedulinator_run_active",
            ),
            # The missed-run check: only runs that may yet be missed, a few at any time.
            models.Index(
                fields=["alert_at"],
                condition=Q(alert_at__isnull=False),
                name="schedulinator_run_alert",
            ),
            # The runs raised as missed, newest first (the admin's and the API's filter).
            models.Index(
                fields=["id"],
                condition=Q(missed_at__isnull=False),
                name="schedulinator_run_missed",
            ),
            # The outcome of a Django task arrives with its result id.
            models.Index(
                fields=["external_id"],
                condition=~Q(external_id=""),
                name="schedulinator_run_external",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id}@{self.scheduled_for.isoformat()} ({self.status})"

    @property
    def idempotency_key(self) -> str:
        return occurrence_key(self.schedule_id, self.scheduled_for)


class PrunedRuns(models.Model):
    """What retention deleted of one schedule's runs: how far (the latest nominal time of a
    run it deleted) and how many. Written in the transaction of each delete (``retention``),
    a row of its own so that a prune never locks the schedule's row. A backfill reads it:
    an occurrence at or before ``through`` that the ledger lacks may have run, and whether
    it did can no longer be told."""

    schedule = models.OneToOneField(
        Schedule,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="pruned_runs",
        verbose_name=_("schedule"),
    )
    through = models.DateTimeField(
        _("pruned through"), help_text=_("The latest nominal time of a run retention deleted.")
    )
    runs = models.PositiveBigIntegerField(_("runs pruned"), default=0)
    pruned_at = models.DateTimeField(_("last pruned at"))

    class Meta:
        verbose_name = _("pruned runs")
        verbose_name_plural = _("pruned runs")

    def __str__(self) -> str:
        return f"{self.schedule_id}: {self.runs} run(s) through {self.through.isoformat()}"
