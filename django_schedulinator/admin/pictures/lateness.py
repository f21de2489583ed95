"""How late runs were handed off: from the ledger, for the operations page's histogram and a
schedule's strip of its last runs.

A run's lateness is the time from its nominal time (``scheduled_for``) to its hand-off
(``dispatched_at``; ``claimed_at`` while it waits for it), as the lateness metric measures
it. It includes the schedule's jitter, a delay asked for: the histogram shows the runs of
jittered schedules apart. Skipped runs never fired and have none; backfilled runs are
late by design (a past occurrence fired on request) and are left out of the histogram.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import router
from django.db.models import BooleanField, DurationField, ExpressionWrapper, F, Q
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_lazy as _

from django_schedulinator.index import clock
from django_schedulinator.models import Run
from django_schedulinator.models.scopes import Scope, runs_in

RECENT = timedelta(hours=1)
RECENT_RUNS = 10_000  # the histogram reads the last runs, at most this many
# The upper bounds of the buckets, in milliseconds; the last bucket has none.
BOUNDS_MS = (10, 50, 100, 500, 1_000, 5_000, 30_000)
BUCKET_LABELS = (
    _("< 10 ms"),
    _("10-50 ms"),
    _("50-100 ms"),
    _("0.1-0.5 s"),
    _("0.5-1 s"),
    _("1-5 s"),
    _("5-30 s"),
    _("≥ 30 s"),
)


def lateness_ms(
    scheduled_for: datetime, dispatched_at: datetime | None, claimed_at: datetime | None
) -> float | None:
    """Nominal time to hand-off (or to the claim, before it), in ms; None if neither."""
    handed = dispatched_at or claimed_at
    if handed is None:
        return None
    return (handed - scheduled_for) / timedelta(milliseconds=1)


def bucket_of(ms: float) -> int:
    """The histogram bucket of a lateness (an early run, from clock skew, goes in the first)."""
    for index, bound in enumerate(BOUNDS_MS):
        if ms < bound:
            return index
    return len(BOUNDS_MS)


def percentile(ordered: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of sorted values."""
    if not ordered:
        return None
    rank = math.ceil(round(fraction * len(ordered), 9))  # rounded: 0.99 * 100 is not 99.0
    return ordered[min(max(rank, 1), len(ordered)) - 1]


@dataclass(slots=True)
class Histogram:
    since: datetime  # the runs claimed from then on (the oldest of the last runs, if limited)
    plain: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_MS) + 1))
    jittered: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_MS) + 1))
    runs: int = 0
    early: int = 0  # handed off before their nominal time: clocks disagree
    limited: bool = False  # the last RECENT_RUNS runs reached back less than RECENT
    p50: float | None = None
    p99: float | None = None
    plain_p50: float | None = None  # runs of schedules without jitter, when some have it
    plain_p99: float | None = None

    @property
    def counts(self) -> list[int]:
        return [a + b for a, b in zip(self.plain, self.jittered, strict=True)]

    @property
    def any_jittered(self) -> bool:
        return any(self.jittered)


def histogram(
    now: datetime | None = None, *, using: str | None = None, scope: Scope = None
) -> Histogram:
    """The lateness of the runs of the last hour, or of the last 10,000 runs if fewer, of
    the schedules of ``scope``.

    Two small queries whatever the size of the ledger: where the last RECENT_RUNS runs
    begin (the primary key's index, read backwards), then those of them claimed in the last
    hour, each run's lateness computed by the database (reading its times would cost more
    than the rest of the page)."""
    now = now or clock.now()
    since = now - RECENT
    db = using or router.db_for_read(Run)
    runs = runs_in(scope, db)
    result = Histogram(since=since)
    boundary = runs.order_by("-pk").values_list("pk", "claimed_at")[RECENT_RUNS - 1 : RECENT_RUNS]
    oldest = next(iter(boundary), None)
    if oldest is not None:
        runs = runs.filter(pk__gte=oldest[0])
        if oldest[1] > since:  # the hour holds more runs than that
            result.limited = True
            result.since = oldest[1]
    handed = ExpressionWrapper(
        Coalesce("dispatched_at", "claimed_at") - F("scheduled_for"), output_field=DurationField()
    )
    jittered = ExpressionWrapper(Q(schedule__jitter__gt=timedelta(0)), output_field=BooleanField())
    rows = list(
        runs.filter(claimed_at__gte=since)
        .exclude(status=Run.Status.SKIPPED)  # never fired
        .exclude(trigger=Run.Trigger.BACKFILL)  # late by design
        .annotate(late=handed, jittered=jittered)
        .values_list("late", "jittered")
    )
    all_values: list[float] = []
    plain_values: list[float] = []
    for late, is_jittered in rows:
        ms = late / timedelta(milliseconds=1)
        if ms < 0:
            result.early += 1
        series = result.jittered if is_jittered else result.plain
        series[bucket_of(ms)] += 1
        all_values.append(ms)
        if not is_jittered:
            plain_values.append(ms)
    result.runs = len(all_values)
    all_values.sort()
    result.p50, result.p99 = percentile(all_values, 0.5), percentile(all_values, 0.99)
    if result.any_jittered:
        plain_values.sort()
        result.plain_p50 = percentile(plain_values, 0.5)
        result.plain_p99 = percentile(plain_values, 0.99)
    return result


def ms_text(ms: float | None) -> str:
    """A lateness people read: "7 ms", "340 ms", "1.2 s", "2 min 5 s" ("" for none)."""
    if ms is None:
        return ""
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1_000:
        return f"{sign}{ms:.0f} ms"
    if ms < 60_000:
        return f"{sign}{ms / 1000:.{1 if ms < 10_000 else 0}f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    if minutes < 60:
        return f"{sign}{minutes} min {seconds} s" if seconds else f"{sign}{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours} h {minutes} min" if minutes else f"{sign}{hours} h"


def recent_runs(schedule_id: int, count: int, using: str | None = None) -> list[Any]:
    """The schedule's last ``count`` runs, oldest first (the unique (schedule, nominal time)
    index serves it)."""
    db = using or router.db_for_read(Run)
    rows = list(
        Run.objects.using(db)
        .filter(schedule_id=schedule_id)
        .order_by("-scheduled_for")
        .values(
            "pk",
            "scheduled_for",
            "status",
            "trigger",
            "skip_reason",
            "dispatched_at",
            "claimed_at",
            "attempts",
        )[:count]
    )
    rows.reverse()
    return rows
