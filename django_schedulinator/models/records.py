"""What the app keeps beside schedules and runs: the alerts' outbox, the change log, the
time-zone rules the next runs were computed with."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from django_schedulinator.models.schedule import Schedule


class Notification(models.Model):
    """An alert someone must be told of (a missed run, a failed run, or the end of a streak
    of them): an entry of the outbox (``outbox.py``) until its notifier accepted it. Written
    in the transaction that raises it, one per notifier, with its place in its schedule's
    streak (``role``, decided there: ``grouping.py``); sent, alone or in a digest, by the
    delivery step (``delivery.deliver_outbox``), and kept a while once delivered."""

    # NOTIFY's BACKEND (a dotted path) it is for.
    notifier = models.CharField(_("notifier"), max_length=200)
    # The event: "missed" or "failed" (NotifyEvent).
    kind = models.CharField(_("kind"), max_length=16, default="missed")
    # Its place in its schedule's streak of this event (AlertRole): sent alone, the first of
    # a streak, grouped into one (not sent), a reminder, or the streak's end.
    role = models.CharField(_("role"), max_length=16, default="alone")
    # A reminder: the alerts it stands for, since ``since``; the end of a streak: the
    # alerts of the streak, which began at ``since`` (the nominal time of its first).
    count = models.PositiveIntegerField(_("count"), default=1)
    since = models.DateTimeField(_("since"), null=True, blank=True)
    # A failed run's error (its end, bounded like the run's).
    error = models.TextField(_("error"), blank=True)
    # The schedule's id, no foreign key: a schedule deleted before its alert went out is
    # still told of ("#42 (deleted)").
    schedule_id = models.BigIntegerField(_("schedule id"))
    scheduled_for = models.DateTimeField(_("scheduled for"))
    run_id = models.BigIntegerField(_("run id"), null=True, blank=True)
    reason = models.CharField(_("reason"), max_length=32)
    grace = models.DurationField(_("grace"), null=True, blank=True)
    raised_at = models.DateTimeField(_("raised at"))
    # Not before this (a back-off after a failure); None: at once.
    next_attempt_at = models.DateTimeField(_("next attempt at"), null=True, blank=True)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    # The delivery step that holds it, until when (then another may take it).
    claimed_by = models.CharField(_("claimed by"), max_length=40, blank=True)
    claimed_until = models.DateTimeField(_("claimed until"), null=True, blank=True)
    # The id of the message it went out in, or goes out in: a message whose sender died
    # mid-way is sent again as it was, with the same id, for the receiver to drop.
    message = models.CharField(_("message"), max_length=200, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    delivered_at = models.DateTimeField(_("delivered at"), null=True, blank=True)

    class Meta:
        verbose_name = _("notification")
        verbose_name_plural = _("notifications")
        ordering = ("-id",)
        indexes = [
            # The delivery step reads only what waits: as few as the misses not told yet.
            models.Index(
                fields=["notifier", "id"],
                condition=Q(delivered_at__isnull=True),
                name="schedulinator_note_pending",
            ),
            # The rate limit counts the messages of the last minute; old ones are pruned.
            models.Index(
                fields=["delivered_at"],
                condition=Q(delivered_at__isnull=False),
                name="schedulinator_note_delivered",
            ),
        ]

    def __str__(self) -> str:
        state = "delivered" if self.delivered_at else "waiting"
        return f"{self.kind} {self.schedule_id}@{self.scheduled_for.isoformat()} ({state})"


class AlertStreak(models.Model):
    """A schedule that keeps failing, or missing its runs: one event's alerts in a row,
    from the first to the success that ends it (``grouping.py``). Its first alert is sent,
    the next ones are counted here and told of in a reminder at most every
    NOTIFY_REPEAT_SECONDS, and its end is one message. Changed only in the transactions
    that raise its alerts (under their schedule's row lock) and in the check that ends it:
    the decision to send or to group is as durable as the alert."""

    # The schedule's id, no foreign key: a streak outlives its schedule until it is ended.
    schedule_id = models.BigIntegerField(_("schedule id"))
    kind = models.CharField(_("kind"), max_length=16)  # "missed" or "failed"
    # The nominal times of its first and its latest occurrence raised.
    first_at = models.DateTimeField(_("first at"))
    last_at = models.DateTimeField(_("last at"))
    count = models.PositiveIntegerField(_("count"), default=1)  # alerts in the streak
    # When its last message (its first alert, or a reminder) was raised, and how many of
    # its alerts that message and those before it told of.
    told_at = models.DateTimeField(_("told at"))
    told = models.PositiveIntegerField(_("told"), default=1)
    opened_at = models.DateTimeField(_("opened at"))
    # A run after ``last_at`` succeeded (or the schedule is gone): the streak is over.
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)

    class Meta:
        verbose_name = _("alert streak")
        verbose_name_plural = _("alert streaks")
        ordering = ("-id",)
        constraints = [
            # One streak in progress per schedule and event.
            models.UniqueConstraint(
                fields=["schedule_id", "kind"],
                condition=Q(ended_at__isnull=True),
                name="schedulinator_streak_open",
            ),
        ]

    def __str__(self) -> str:
        state = "ended" if self.ended_at else "in progress"
        return f"{self.kind} streak of schedule {self.schedule_id}: {self.count} ({state})"


class ScheduleChange(models.Model):
    """Who changed which schedule, when, through what, and how: the audit trail of the
    admin, the API and ``manage.py schedule``. Kept when the schedule is deleted."""

    class Source(models.TextChoices):
        ADMIN = "admin", _("Admin")
        API = "api", _("REST API")
        COMMAND = "command", _("Management command")
        SCHEDULER = "scheduler", _("Scheduler")  # auto-pause after failures
        PYTHON = "python", _("Python code")  # a service called by code, with no origin given
        CODE = "code", _("Declared in code")  # the sync of schedules declared in code
        TZDATA = "tzdata", _("Time-zone database")  # a re-plan after its rules changed

    class Action(models.TextChoices):
        CREATED = "created", _("Created")
        CHANGED = "changed", _("Changed")
        DELETED = "deleted", _("Deleted")
        PAUSED = "paused", _("Paused")
        RESUMED = "resumed", _("Resumed")
        RUN_NOW = "run_now", _("Run now")
        BACKFILL = "backfill", _("Backfill")
        RESYNCED = "resynced", _("Index resynced")
        REPLANNED = "replanned", _("Re-planned")  # the next run, after a tz rule change

    schedule = models.ForeignKey(
        Schedule,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="changes",
        verbose_name=_("schedule"),
    )
    schedule_name = models.CharField(_("schedule name"), max_length=200)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("actor"),
    )
    # The user name at the time: stays readable after the user is deleted or renamed.
    actor_name = models.CharField(_("actor name"), max_length=150, blank=True)
    source = models.CharField(_("source"), max_length=16, choices=Source.choices)
    action = models.CharField(_("action"), max_length=16, choices=Action.choices)
    # {field: [before, after]} for created, changed and deleted; what was asked for the
    # other actions (the note of a pause, the range of a backfill, the key of a run now).
    changes = models.JSONField(_("changes"), default=dict, blank=True)
    version = models.PositiveBigIntegerField(
        _("version"), null=True, blank=True, help_text=_("The schedule's version after the change.")
    )
    at = models.DateTimeField(_("at"), default=timezone.now, db_index=True)

    class Meta:
        verbose_name = _("schedule change")
        verbose_name_plural = _("schedule changes")
        ordering = ("-at", "-id")
        indexes = [models.Index(fields=["schedule", "-at"], name="schedulinator_change_of")]

    def __str__(self) -> str:
        who = self.actor_name or "someone"
        return f"{self.schedule_name}: {self.get_action_display().lower()} by {who}"


class ZoneRules(models.Model):
    """The time-zone database the next runs were computed with, and the UTC offsets it gave
    each zone over the next years (``zonedata``): one row. A scheduler or ``migrate`` that
    reads another database re-plans the cron schedules of the zones whose offsets changed
    (``services.replan_for_zone_rules``) and records the new one here."""

    version = models.CharField(_("version"), max_length=32)
    source = models.CharField(_("source"), max_length=16)
    location = models.CharField(_("location"), max_length=500, blank=True)
    start = models.DateTimeField(_("from"))
    end = models.DateTimeField(_("until"))
    # {zone: [[epoch seconds, UTC offset in seconds from then on], ...]}
    offsets = models.JSONField(_("offsets"), default=dict)
    recorded_at = models.DateTimeField(_("recorded at"))

    class Meta:
        verbose_name = _("time-zone rules")
        verbose_name_plural = _("time-zone rules")

    def __str__(self) -> str:
        return f"tz database {self.version} ({self.source})"
