"""Time-zone rule changes: when the tz database in use is not the one recorded, the cron
schedules of the zones whose offsets changed are re-planned.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import router, transaction

from django_schedulinator.errors import OutdatedZoneRules, TimingError
from django_schedulinator.index import clock
from django_schedulinator.models import Calendar, Schedule, ScheduleChange, ZoneRules
from django_schedulinator.services import changelog
from django_schedulinator.services.changelog import Origin
from django_schedulinator.services.replans import _ids_naming, _Replanned, _write_replanned
from django_schedulinator.services.writes import logger
from django_schedulinator.timing import zonedata

# A re-plan after the time-zone database's rules changed.
TZDATA = Origin(None, ScheduleChange.Source.TZDATA)


@dataclass(frozen=True, slots=True)
class ZoneRulesReport:
    """What ``replan_for_zone_rules`` found: the database recorded before (None: none was)
    and the one in use, the zones whose offsets changed, and the schedules re-planned."""

    before: str | None
    now: str
    zones: list[str]
    replanned: int


def replan_for_zone_rules(*, using: str | None = None) -> ZoneRulesReport | None:
    """When the tz database in use is not the one recorded (``ZoneRules``), re-plan the
    enabled cron schedules of every zone whose offsets changed: each next run moves to the
    instant its local occurrence has under the new rules, recorded in the change log
    (origin "tzdata", action "replanned"); then record the database in use. None when
    nothing changed (the usual case: one small read), or when no database is installed.

    The schedulers call it when they start, and ``migrate`` when it is done; two at once
    take turns on the row, and the second finds the work done."""
    database = zonedata.in_use()
    if database is None:
        return None
    db = using or router.db_for_write(ZoneRules)
    recorded = ZoneRules.objects.using(db).filter(pk=1).first()
    if recorded is not None and (recorded.version, recorded.source) == (
        database.version,
        database.source,
    ):
        return None
    _refuse_older(recorded, database)
    now = clock.now()
    start, end = now - timedelta(days=1), now + zonedata.HORIZON
    offsets = zonedata.offsets(zonedata.zones(), start, end)
    with transaction.atomic(using=db):
        recorded = ZoneRules.objects.using(db).select_for_update().filter(pk=1).first()
        if recorded is not None and (recorded.version, recorded.source) == (
            database.version,
            database.source,
        ):
            return None  # another process recorded it meanwhile
        _refuse_older(recorded, database)
        changed = (
            set() if recorded is None else zonedata.changed_zones(recorded.offsets, offsets, now)
        )
        before = (
            None
            if recorded is None
            else str(zonedata.Database(recorded.version, recorded.source, recorded.location))
        )
        moved = 0
        if recorded is not None and changed:
            moved = _replan(recorded, changed, str(before), str(database), db)
        ZoneRules.objects.using(db).update_or_create(
            pk=1,
            defaults={
                "version": database.version,
                "source": database.source,
                "location": database.where,
                "start": start,
                "end": end,
                "offsets": offsets,
                "recorded_at": now,
            },
        )
    report = ZoneRulesReport(before, str(database), sorted(changed), moved)
    if recorded is None:
        logger.info(
            "Recorded the time-zone database the next runs are computed with: %s.", database
        )
    else:
        logger.warning(
            "The time-zone database changed from %s to %s: %d zone(s) changed their offsets "
            "(%s); re-planned %d cron schedule(s) in them.",
            report.before,
            report.now,
            len(report.zones),
            ", ".join(report.zones[:20]) + (", ..." if len(report.zones) > 20 else "") or "none",
            moved,
        )
    return report


def _refuse_older(recorded: ZoneRules | None, database: zonedata.Database) -> None:
    """An older database never replaces a newer one (a process of the old release during
    a rolling restart would plan the runs back to the old rules)."""
    if recorded is not None and zonedata.newer(recorded.version, database.version):
        raise OutdatedZoneRules(zonedata.outdated_message(recorded.version, database.version))


def _replan(recorded: ZoneRules, zones: set[str], before: str, after: str, db: str) -> int:
    """Move the next run of each enabled cron schedule in ``zones`` to where its local
    occurrence is under the rules in use, never at or before what it fired through; how
    many moved. A next run past the span the old offsets were recorded for cannot be read
    back to its local time: it is left, and logged.

    Every schedule whose plan reads those zones' rules (a cron in one of them, or one that
    names a calendar whose days are drawn in one) changes revision, moved or not: a claim
    of a process still on the old rules that read the row before this commits loses its
    conditional advance (and each pass of such a process then refuses: ``Claimer``)."""
    candidates = Schedule.objects.using(db).filter(
        enabled=True, kind=Schedule.Kind.CRON, timezone__in=zones, next_run_at__isnull=False
    )
    beyond = candidates.filter(next_run_at__gt=recorded.end).count()
    if beyond:
        logger.warning(
            "%d cron schedule(s) in the zones whose rules changed have a next run after %s, "
            "past the span the old offsets were recorded for: left as they are.",
            beyond,
            recorded.end.isoformat(),
        )
    replanned: list[_Replanned] = []
    within = candidates.filter(next_run_at__lte=recorded.end).select_for_update().order_by("pk")
    for current in within.iterator(chunk_size=500):
        entries = recorded.offsets.get(current.timezone)
        if entries is None or current.next_run_at is None:
            continue
        try:
            new = zonedata.replanned(
                current.timing_spec,
                current.next_run_at,
                entries,
                not_before=current.fired_through or current.last_run_at,
            )
        except TimingError as exc:
            logger.warning("Schedule %s could not be re-planned: %s", current.pk, exc)
            continue
        if new is None or new == current.next_run_at:
            continue
        replanned.append(
            _Replanned(
                current,
                {"next_run_at": new, "due_at": current.due_at_for(new)},
                {
                    "next_run_at": [changelog.as_json(current.next_run_at), changelog.as_json(new)],
                    "tz_database": [before, after],
                },
            )
        )
    reading = set(
        Schedule.objects.using(db)
        .filter(kind=Schedule.Kind.CRON, timezone__in=zones)
        .values_list("pk", flat=True)
    )
    for calendar_name in (
        Calendar.objects.using(db).filter(timezone__in=zones).values_list("name", flat=True)
    ):
        reading.update(_ids_naming(calendar_name, db))
    return _write_replanned(replanned, reading, TZDATA, db)
