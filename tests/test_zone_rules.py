"""When a zone's rules change, no stale next run is left: switching between two real
releases of the tz database (2024b and 2025a, which differ for America/Asuncion:
``support/tz_databases.py``), the cron schedules of the zones whose offsets changed are
re-planned through the service layer, recorded in the change log, and the due index
follows; everything else is left alone. The expected instants are worked out by hand from
Paraguay's rules in each release."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.sql import emit_post_migrate_signal

from django_schedulinator import services
from django_schedulinator.checks import check_zone_database
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Schedule, ScheduleChange, ZoneRules
from django_schedulinator.timing import Timing, first_run_at, to_ms, zonedata

from .support import tz_databases
from .support.commits import committed
from .support.schedules import model_fields

pytestmark = pytest.mark.django_db

ASUNCION = "America/Asuncion"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def release() -> Iterator[Any]:
    """``release("2024b")`` makes that release the database in use, until the test ends,
    with no release recorded yet (``migrate`` recorded the system's)."""
    ZoneRules.objects.all().delete()
    with tz_databases.use(tz_databases.database("2024b")):  # restores what was, after

        def switch(name: str) -> None:
            tz_databases.switch([str(tz_databases.database(name))])

        yield switch


def create(name: str, **fields: Any) -> Schedule:
    with committed():
        return services.create(Schedule(**model_fields(name=name, **fields)))


def replan() -> services.ZoneRulesReport | None:
    with committed():
        return services.replan_for_zone_rules()


def test_the_two_releases_disagree_on_asuncion_as_their_rules_say(release: Any) -> None:
    daily = Timing(kind="cron", cron="0 9 * * *", timezone=ASUNCION)
    # 1 May 2027: DST over under 2024b (-04, 13:00 UTC); permanent -03 under 2025a.
    assert first_run_at(daily, utc("2027-05-01T00:00")) == utc("2027-05-01T13:00")
    release("2025a")
    assert first_run_at(daily, utc("2027-05-01T00:00")) == utc("2027-05-01T12:00")


def test_a_rule_change_re_plans_the_schedules_of_the_zones_it_changed(
    release: Any, index: DueIndex
) -> None:
    replan()  # records 2024b as the database the next runs are computed with
    may = utc("2027-05-01T00:00")
    daily = create("asuncion", cron="0 9 * * *", timezone=ASUNCION, start_at=may)
    berlin = create("berlin", cron="0 9 * * *", timezone="Europe/Berlin", start_at=may)
    paused = create("paused", cron="0 9 * * *", timezone=ASUNCION, start_at=may)
    services.pause(paused)
    hourly = create("interval", kind="interval", cron="", interval=timedelta(hours=5))
    assert daily.next_run_at == utc("2027-05-01T13:00")  # 09:00 -04
    untouched = {s.pk: (s.next_run_at, s.version) for s in (berlin, paused, hourly)}

    release("2025a")
    report = replan()

    assert report is not None
    assert report.before is not None
    assert report.before.startswith("2024b (")
    assert report.now.startswith("2025a (")
    assert ASUNCION in report.zones
    assert "Europe/Berlin" not in report.zones
    assert report.replanned == 1
    daily.refresh_from_db()
    assert (daily.next_run_at, daily.due_at) == (utc("2027-05-01T12:00"),) * 2  # 09:00 -03
    assert index.scores([daily.pk]) == {daily.pk: to_ms(utc("2027-05-01T12:00"))}
    [entry] = ScheduleChange.objects.filter(schedule=daily, action="replanned")
    assert (entry.source, entry.actor, entry.version) == ("tzdata", None, daily.version)
    assert entry.changes["next_run_at"] == [
        "2027-05-01T13:00:00+00:00",
        "2027-05-01T12:00:00+00:00",
    ]
    assert [text[:5] for text in entry.changes["tz_database"]] == ["2024b", "2025a"]
    for schedule in (berlin, paused, hourly):
        schedule.refresh_from_db()
        assert (schedule.next_run_at, schedule.version) == untouched[schedule.pk]
    assert ZoneRules.objects.get().version == "2025a"

    assert replan() is None  # once: the database in use is the one recorded
    assert ScheduleChange.objects.filter(action="replanned").count() == 1


def test_a_next_run_shifted_out_of_a_gap_the_new_rules_lack_goes_back_to_its_local_time(
    release: Any,
) -> None:
    # Under 2024b Paraguay springs forward on Sunday 3 October 2027 at 00:00 -04 (04:00
    # UTC) to 01:00 -03: 00:30 does not exist, and the shift policy fires it at 01:30 -03
    # (04:30 UTC). Under 2025a there is no change: 00:30 -03 is 03:30 UTC.
    replan()
    night = create("night", cron="30 0 * * *", timezone=ASUNCION, start_at=utc("2027-10-03T00:00"))
    assert night.next_run_at == utc("2027-10-03T04:30")
    release("2025a")
    replan()
    night.refresh_from_db()
    assert night.next_run_at == utc("2027-10-03T03:30")


def test_what_fired_last_is_never_fired_again(release: Any) -> None:
    # Hourly: the rules move each local time by an hour, and the instants stay on the hour.
    replan()
    hourly = create("hourly", cron="0 * * * *", timezone=ASUNCION, start_at=utc("2027-05-01"))
    assert hourly.next_run_at == utc("2027-05-01T00:00")
    # It fired at 00:00 UTC (20:00 -04 under 2024b) and waits for 01:00 UTC (21:00 -04),
    # as the claim's advance leaves it.
    Schedule.objects.filter(pk=hourly.pk).update(
        fired_through=utc("2027-05-01T00:00"),
        next_run_at=utc("2027-05-01T01:00"),
        last_run_at=utc("2027-05-01T00:00:00.020"),
    )
    release("2025a")
    replan()
    hourly.refresh_from_db()
    # 21:00 -03 is 00:00 UTC, which fired: the next is 01:00 UTC (22:00 -03), unchanged.
    assert hourly.next_run_at == utc("2027-05-01T01:00")
    assert not ScheduleChange.objects.filter(action="replanned").exists()


def test_a_next_run_past_the_recorded_span_is_left_and_logged(
    release: Any, caplog: pytest.LogCaptureFixture
) -> None:
    replan()
    later = create("later", cron="0 9 * * *", timezone=ASUNCION, start_at=utc("2031-05-01"))
    assert later.next_run_at == utc("2031-05-01T13:00")  # 09:00 -04 under 2024b
    release("2025a")
    replan()
    later.refresh_from_db()
    assert later.next_run_at == utc("2031-05-01T13:00")
    assert "1 cron schedule(s) in the zones whose rules changed have a next run" in caplog.text


def test_a_scheduler_starting_with_another_database_re_plans_first(release: Any) -> None:
    replan()
    daily = create("asuncion", cron="0 9 * * *", timezone=ASUNCION, start_at=utc("2027-05-01"))
    release("2025a")
    with committed():
        call_command("run_scheduler", "--once", verbosity=0)
    daily.refresh_from_db()
    assert daily.next_run_at == utc("2027-05-01T12:00")


def test_migrate_with_another_database_re_plans(release: Any) -> None:
    """What ``migrate`` sends once it is done (the migrations of django-celery-beat, in
    the test settings, need a zone the test databases lack: the signal alone)."""
    replan()
    daily = create("asuncion", cron="0 9 * * *", timezone=ASUNCION, start_at=utc("2027-05-01"))
    release("2025a")
    with committed():
        emit_post_migrate_signal(verbosity=0, interactive=False, db="default")
    daily.refresh_from_db()
    assert daily.next_run_at == utc("2027-05-01T12:00")


def test_the_first_record_re_plans_nothing(release: Any) -> None:
    ZoneRules.objects.all().delete()
    create("asuncion", cron="0 9 * * *", timezone=ASUNCION, start_at=utc("2027-05-01"))
    report = replan()
    assert report is not None
    assert (report.before, report.zones, report.replanned) == (None, [], 0)
    assert ZoneRules.objects.get().version == "2024b"


# -- the offsets, by hand ---------------------------------------------------------------------


def test_the_offsets_of_a_zone_change_where_its_rules_say() -> None:
    start, end = utc("2027-01-01T00:00"), utc("2028-01-01T00:00")
    entries = zonedata.offsets({"Europe/Berlin"}, start, end)["Europe/Berlin"]
    # CET, then CEST from 28 March 2027 01:00 UTC, CET again from 31 October 01:00 UTC.
    assert [(datetime.fromtimestamp(at, UTC), offset) for at, offset in entries] == [
        (start, 3600),
        (utc("2027-03-28T01:00"), 7200),
        (utc("2027-10-31T01:00"), 3600),
    ]


def test_changed_zones_compare_only_what_is_still_ahead() -> None:
    old = {"A": [[0, 0], [100, 3600]], "B": [[0, 0], [500, 3600]], "C": [[0, 0]]}
    new = {"A": [[0, 0], [50, 3600]], "B": [[0, 0], [600, 3600]], "C": [[0, 0]]}
    since = datetime.fromtimestamp(200, UTC)
    assert zonedata.changed_zones(old, new, since) == {"B"}  # A's moved change is past
    assert zonedata.changed_zones(old, {**new, "D": [[0, 0]]}, since) == {"B", "D"}


# -- the system check ----------------------------------------------------------------------------


def test_w080_warns_when_the_system_and_the_package_databases_differ(release: Any) -> None:
    package = zonedata.package()
    assert package is not None  # a dependency of the test extra
    [warning] = check_zone_database()
    assert warning.id == "schedulinator.W080"
    assert "system's time-zone database, 2024b" in warning.msg
    assert f"the tzdata package installed is {package.version}" in warning.msg
    assert "PYTHONTZPATH" in (warning.hint or "")
    # About the hosts, not the settings: a deployment check, as Django's own are.
    for deploy in (False, True):
        found = run_checks(include_deployment_checks=deploy, databases=[])
        assert ("schedulinator.W080" in {m.id for m in found}) is deploy


def test_w080_is_quiet_when_zoneinfo_reads_the_package(release: Any) -> None:
    tz_databases.switch([])
    assert zonedata.system() is None
    assert check_zone_database() == []


def test_the_database_in_use_is_the_first_of_tzpath(release: Any) -> None:
    database = zonedata.in_use()
    assert database is not None
    assert (database.version, database.source) == ("2024b", zonedata.SYSTEM)
    assert Path(database.where) == tz_databases.database("2024b")
