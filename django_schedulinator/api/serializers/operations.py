"""Operations: the due index's health, the schedulers alive (their heartbeats) and the whole
status that ``manage.py scheduler_status --json`` prints. Answers only: nothing is written."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class DriftSerializer(serializers.Serializer[Any]):
    ok = serializers.BooleanField(help_text="No entry late or missing in the sample.")
    summary = serializers.CharField()
    rows_indexable = serializers.IntegerField()
    sampled = serializers.IntegerField()
    late_or_missing = serializers.ListField(child=serializers.IntegerField())
    early_or_orphaned = serializers.ListField(child=serializers.IntegerField())


class ShardStatusSerializer(serializers.Serializer[Any]):
    shard = serializers.IntegerField(help_text="Schedules with id % shard_count == shard.")
    built = serializers.BooleanField(help_text="Its build marker is there.")
    entries_due = serializers.IntegerField(allow_null=True, help_text="Entries in the shard.")
    due_now = serializers.IntegerField(
        allow_null=True, help_text="Entries whose time has come, not claimed."
    )
    in_flight = serializers.IntegerField(
        allow_null=True, help_text="Entries claimed by a scheduler."
    )
    oldest_due_lag_seconds = serializers.FloatField(
        allow_null=True, help_text="How late its earliest unclaimed due entry is."
    )


class IndexStatusSerializer(serializers.Serializer[Any]):
    schedules = serializers.IntegerField()
    enabled = serializers.IntegerField()
    indexable = serializers.IntegerField(help_text="Enabled schedules with a next run.")
    entries_due = serializers.IntegerField(
        allow_null=True, help_text="Entries in the due index (null when scoped)."
    )
    due_now = serializers.IntegerField(
        allow_null=True, help_text="Entries whose time has come, not claimed (null when scoped)."
    )
    in_flight = serializers.IntegerField(
        allow_null=True, help_text="Entries claimed by a scheduler (null when scoped)."
    )
    oldest_due_lag_seconds = serializers.FloatField(
        allow_null=True, help_text="How late the earliest unclaimed due entry is."
    )
    oldest_due_schedule = serializers.IntegerField(
        allow_null=True,
        help_text="The schedule of that entry (null when none is due, or it is one the "
        "permission classes hide).",
    )
    runs_in_flight = serializers.IntegerField(help_text="Runs pending or running.")
    last_rebuild = serializers.DictField(allow_null=True)
    rebuild_running = serializers.BooleanField()
    drift = DriftSerializer(allow_null=True)
    eviction_warning = serializers.CharField(allow_null=True)
    checked_at = serializers.DateTimeField()
    shard_count = serializers.IntegerField(help_text="INDEX_SHARDS: the shards of the index.")
    shards = ShardStatusSerializer(many=True, help_text="Each shard's figures.")
    other_layout = serializers.IntegerField(
        allow_null=True,
        help_text="The shard count the index was built for, when it is not INDEX_SHARDS "
        "(nothing fires until it is rebuilt).",
    )
    scoped = serializers.BooleanField(
        help_text="Counted for the schedules the permission classes' filter_schedules lets "
        "the user see; the index's own counts (of every schedule) are then null."
    )


class LaneDepthSerializer(serializers.Serializer[Any]):
    waiting = serializers.IntegerField(help_text="Batches waiting for the dispatcher.")
    oldest_seconds = serializers.FloatField(
        allow_null=True, help_text="How long the oldest has waited (null when none waits)."
    )


class RecorderBacklogSerializer(serializers.Serializer[Any]):
    batches = serializers.IntegerField(
        help_text="Batches handed to the recorder whose outcomes are not written yet."
    )
    outcomes = serializers.IntegerField(help_text="Their outcomes: runs whose end is not written.")
    oldest_seconds = serializers.FloatField(
        allow_null=True,
        help_text="How long ago the oldest was handed over (null when nothing waits).",
    )


class SchedulerSerializer(serializers.Serializer[Any]):
    """A scheduler as its last heartbeat recorded it (docs/operations.md#heartbeats)."""

    id = serializers.CharField(help_text="The worker id (--worker-id, by default host:pid).")
    host = serializers.CharField()
    pid = serializers.IntegerField()
    version = serializers.CharField(help_text="The django-schedulinator version it runs.")
    started_at = serializers.DateTimeField()
    beat_at = serializers.DateTimeField(help_text="When it wrote this heartbeat.")
    last_pass_at = serializers.DateTimeField(
        allow_null=True, help_text="When its loop last completed a pass."
    )
    last_error = serializers.CharField(
        allow_blank=True, help_text="Why its passes fail now; empty while they work."
    )
    counters = serializers.DictField(child=serializers.IntegerField())
    lanes = serializers.DictField(child=LaneDepthSerializer(), help_text="By dispatcher alias.")
    recorder = RecorderBacklogSerializer(help_text="The outcomes waiting to be written.")
    metrics_port = serializers.IntegerField(allow_null=True)
    stopping = serializers.BooleanField()
    pass_age_seconds = serializers.FloatField(
        allow_null=True, help_text="Seconds since its last pass (null before the first)."
    )
    state = serializers.ChoiceField(choices=["healthy", "stale", "stopping"])


class SchedulersSerializer(serializers.Serializer[Any]):
    checked_at = serializers.DateTimeField(help_text="Redis time of the read.")
    pass_stale_seconds = serializers.FloatField()
    schedulers = SchedulerSerializer(many=True, help_text="Newest heartbeat first.")


class FindingSerializer(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="Stable: see docs/operations.md.")
    message = serializers.CharField()


class DispatcherStatusSerializer(serializers.Serializer[Any]):
    alias = serializers.CharField()
    backend = serializers.CharField(help_text="Its class name, or why it cannot be built.")
    reports_outcomes = serializers.BooleanField(allow_null=True)
    awaiting = serializers.IntegerField(help_text="Handed off, their outcome awaited.")
    past_deadline = serializers.IntegerField(
        help_text="Handed off, never reported within OUTCOME_TIMEOUT_SECONDS."
    )
    retrying = serializers.IntegerField(help_text="Failed hand-offs waiting for their retry.")


class AutoPausedScheduleSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    paused_at = serializers.DateTimeField(allow_null=True)
    failure_streak = serializers.IntegerField()


class AutoPausedSerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField()
    schedules = AutoPausedScheduleSerializer(many=True, help_text="The 20 paused last.")


class ClusterStatusSerializer(serializers.Serializer[Any]):
    """What ``manage.py scheduler_status --json`` prints (docs/operations.md)."""

    healthy = serializers.BooleanField()
    checked_at = serializers.DateTimeField(help_text="Redis time of the read.")
    problems = FindingSerializer(many=True)
    warnings = FindingSerializer(many=True)
    max_lag_seconds = serializers.FloatField()
    pass_stale_seconds = serializers.FloatField()
    schedulers = SchedulerSerializer(many=True)
    index = IndexStatusSerializer()
    dispatchers = DispatcherStatusSerializer(many=True)
    auto_paused = AutoPausedSerializer()
