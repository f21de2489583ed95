"""The admin's pictures: the forecast of occurrences per minute (schedules grouped by their
timing, counted across DST changes, jitter spread, bounded work), the lateness histogram of
recent runs, a schedule's strip of its last runs, and the pages that show them, as
well-formed SVG, for users with view permissions."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone

from django_schedulinator import services, timing
from django_schedulinator.admin.display import changelist_url
from django_schedulinator.admin.pictures import drawing as pictures
from django_schedulinator.admin.pictures import families, lateness, marks
from django_schedulinator.admin.pictures import forecast as forecasting
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Calendar, Run, Schedule

from .support.admin_pages import change_url
from .support.commits import Client, committed
from .support.heartbeats import beat
from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db

OPERATIONS = "admin:django_schedulinator_schedule_operations"
SVG = "{http://www.w3.org/2000/svg}"
# The spring-forward day in Europe/Berlin: 02:00 CET (01:00 UTC) jumps to 03:00 CEST.
SPRING = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)
# The fall-back day: 03:00 CEST (01:00 UTC) goes back to 02:00 CET.
AUTUMN = datetime(2026, 10, 25, 0, 0, tzinfo=UTC)


def cron_schedule(
    cron: str, now: datetime, zone: str = "UTC", count: int = 1, **fields: Any
) -> list[Schedule]:
    """``count`` cron schedules whose next run is their first occurrence from ``now`` on."""
    spec = timing.Timing(
        kind="cron",
        cron=cron,
        timezone=zone,
        dst_gap=fields.get("dst_gap", "shift"),
        dst_fold=fields.get("dst_fold", "first"),
    )
    first = timing.first_run_at(spec, now - timing.ONE_MS)
    return [
        make_schedule(kind="cron", cron=cron, timezone=zone, next_run_at=first, **fields)
        for _ in range(count)
    ]


def minutes_with(series: list[Any]) -> dict[int, Any]:
    return {minute: value for minute, value in enumerate(series) if value}


def svg_of(html: str, svg_id: str) -> ET.Element:
    """The SVG element with ``svg_id`` in a page, parsed as XML (it must be well-formed)."""
    found = re.search(rf'<svg [^>]*id="{svg_id}".*?</svg>', html, re.DOTALL)
    assert found is not None, f"no <svg id={svg_id}>"
    return ET.fromstring(found.group(0))


# -- the forecast -----------------------------------------------------------------------------


def test_schedules_with_the_same_timing_are_one_group_expanded_once(
    django_assert_num_queries: Any,
) -> None:
    cron_schedule("0 * * * *", SPRING, count=5)
    cron_schedule("*/15 * * * *", SPRING, zone="Europe/Berlin", count=3)
    paused = cron_schedule("0 * * * *", SPRING)[0]
    services.pause(paused)
    finished = cron_schedule("0 * * * *", SPRING)[0]
    Schedule.objects.filter(pk=finished.pk).update(next_run_at=None)
    anchor = SPRING + timedelta(minutes=10)
    for _ in range(4):
        make_schedule(interval=timedelta(minutes=30), next_run_at=anchor)

    with django_assert_num_queries(1):
        result = forecasting.forecast(SPRING)

    assert result.groups == 3
    assert result.schedules == 12
    assert result.uncounted == 0
    counts = minutes_with(result.nominal)
    for minute in range(WINDOW := forecasting.WINDOW_MINUTES):
        expected = 0
        if minute % 60 == 0:
            expected += 5
        if minute % 15 == 0:
            expected += 3
        if minute >= 10 and (minute - 10) % 30 == 0:
            expected += 4
        assert counts.get(minute, 0) == expected, minute
    assert sum(result.nominal) == 5 * 24 + 3 * 96 + 4 * 48
    assert not any(result.spread)
    assert WINDOW == 1440


def test_counts_per_minute_across_the_spring_forward_change() -> None:
    # 02:30 does not exist on that day: shifted, it fires at 03:30 CEST (01:30 UTC);
    # skipped, not at all within the window.
    cron_schedule("30 2 * * *", SPRING, zone="Europe/Berlin", count=2, dst_gap="shift")
    cron_schedule("30 2 * * *", SPRING, zone="Europe/Berlin", count=7, dst_gap="skip")
    # Every local hour: 24 occurrences in 24 hours of UTC, 02:00 shifted onto 03:00 (once).
    cron_schedule("0 * * * *", SPRING, zone="Europe/Berlin", count=3)

    result = forecasting.forecast(SPRING)

    expected = {hour * 60: 3 for hour in range(24)}
    expected[90] = 2
    assert minutes_with(result.nominal) == expected
    assert result.schedules == 12


def test_the_days_a_calendar_excludes_are_not_counted(admin_client: Client) -> None:
    # 29 March in Auckland (NZDT, UTC+13) ends at 11:00 UTC: hourly runs in UTC that name
    # the calendar fire from then on; one that does not, every hour.
    closed = Calendar(name="auckland", timezone="Pacific/Auckland")
    with committed():
        services.save_calendar(closed, days=[(date(2026, 3, 29), "closed")])
    cron_schedule("0 * * * *", SPRING, count=2, calendars=["auckland"])
    cron_schedule("0 * * * *", SPRING)

    result = forecasting.forecast(SPRING)

    assert minutes_with(result.nominal) == {hour * 60: 1 + 2 * (hour >= 11) for hour in range(24)}
    share = next(s for b in result.busiest for s in b.shares if s.family.timeline.calendars)
    assert share.members == 2
    assert "not on days excluded by auckland" in share.family.label()
    page = admin_client.get(changelist_url(Schedule, timing_group=share.family.token()))
    assert page.context["cl"].result_count == 2


def test_counts_per_minute_across_the_fall_back_change() -> None:
    # 02:30 happens twice: at 00:30 UTC (CEST) and 01:30 UTC (CET).
    cron_schedule("30 2 * * *", AUTUMN, zone="Europe/Berlin", count=2, dst_fold="both")
    cron_schedule("30 2 * * *", AUTUMN, zone="Europe/Berlin", count=5, dst_fold="second")
    cron_schedule("30 2 * * *", AUTUMN, zone="Europe/Berlin", count=1, dst_fold="first")

    result = forecasting.forecast(AUTUMN)

    assert minutes_with(result.nominal) == {30: 2 + 1, 90: 2 + 5}


def test_the_hour_axis_follows_the_admins_zone_across_a_change(settings: Any) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    cron_schedule("0 * * * *", AUTUMN, count=1)
    with timezone.override("Europe/Berlin"):
        context = pictures.forecast_context(forecasting.forecast(AUTUMN))
    # 25 local hours start in these 24 hours of UTC (02:00 comes twice), and the axis ends
    # with the window.
    assert len(context["ticks"]) == 25
    labels = [tick["label"] for tick in context["ticks"] if tick["label"]]
    assert labels[0] == "03:00"  # 02:00 CEST, then 02:00 CET, 03:00 CET
    assert "Mon 26 Oct" in labels
    assert context["bands"][0]["title"].startswith("2026-10-25 02:00:00 CEST to")


def test_jitter_spreads_a_schedules_occurrences_over_its_span() -> None:
    cron_schedule("0 12 * * *", SPRING, count=6, jitter=timedelta(minutes=10))
    cron_schedule("0 12 * * *", SPRING, count=2)

    result = forecasting.forecast(SPRING)

    assert minutes_with(result.nominal) == {720: 2}
    spread = minutes_with(result.spread)
    assert sorted(spread) == list(range(720, 730))
    assert all(value == pytest.approx(0.6) for value in spread.values())
    assert sum(result.totals) == pytest.approx(8)


def test_jitter_is_spread_no_further_than_the_next_occurrence() -> None:
    # A jitter longer than the gap is bounded by it (timing.jitter_delay).
    cron_schedule("*/2 * * * *", SPRING, jitter=timedelta(minutes=30))

    result = forecasting.forecast(SPRING)

    assert not any(result.nominal)
    # Every other minute, spread over the two minutes to the next one.
    assert all(value == pytest.approx(0.5, abs=1e-4) for value in result.spread)
    assert sum(result.spread) == pytest.approx(720, abs=1e-2)


def test_the_window_max_runs_and_the_start_bound_each_group() -> None:
    two_hours = SPRING + timedelta(hours=2)
    cron_schedule("0 * * * *", SPRING, end_at=two_hours)  # 00:00, 01:00, 02:00
    limited = cron_schedule("0 * * * *", SPRING, max_runs=5)[0]
    Schedule.objects.filter(pk=limited.pk).update(run_count=2)  # three left
    # A start later in the day: its next run is there.
    later = SPRING + timedelta(hours=20)
    make_schedule(kind="cron", cron="0 * * * *", start_at=later, next_run_at=later)
    cron_schedule("0 * * * *", SPRING, end_at=SPRING - timedelta(minutes=1))  # over

    result = forecasting.forecast(SPRING)

    assert minutes_with(result.nominal) == {
        0: 2, 60: 2, 120: 2, 1200: 1, 1260: 1, 1320: 1, 1380: 1,
    }  # fmt: skip
    assert result.schedules == 3


def test_a_one_off_is_counted_at_its_minute() -> None:
    now = timing.truncate_ms(timezone.now()).replace(second=0, microsecond=0)
    for _ in range(3):
        make_schedule(kind="once", run_at=now + timedelta(minutes=5, seconds=30))

    result = forecasting.forecast(now + timedelta(seconds=1))

    assert minutes_with(result.nominal) == {5: 3}


def test_an_overdue_interval_goes_on_on_its_own_grid() -> None:
    make_schedule(interval=timedelta(hours=1), next_run_at=SPRING - timedelta(minutes=40))

    result = forecasting.forecast(SPRING)

    assert minutes_with(result.nominal) == {20 + 60 * hour: 1 for hour in range(24)}


def test_the_work_is_bounded_and_the_page_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    cron_schedule("0 * * * *", SPRING, count=3)
    cron_schedule("30 * * * *", SPRING, count=2)
    cron_schedule("15 * * * *", SPRING, count=1)
    monkeypatch.setattr(forecasting, "MAX_GROUPS", 2)

    result = forecasting.forecast(SPRING)

    assert result.groups_capped
    assert (result.schedules, result.uncounted) == (5, 1)
    notes = pictures.forecast_context(result)["notes"]
    assert any("Only the 2 largest groups" in note and ": 1 schedule in" in note for note in notes)


def estimated_from(result: forecasting.Forecast) -> int | None:
    """The first minute whose count is an estimate (a dense timing's average rate)."""
    return next((minute for minute, guess in enumerate(result.estimated) if guess), None)


def test_a_dense_timing_is_counted_exactly_then_at_its_average_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cron_schedule("*/10 * * * * *", SPRING, count=2)  # every 10 seconds: 8,640 a day
    monkeypatch.setattr(forecasting, "MAX_PER_TIMELINE", 600)  # 100 minutes of it

    result = forecasting.forecast(SPRING)

    assert result.dense_timings == 1
    # Expanded to 01:39:50: exact up to its minute, estimated from there on.
    assert estimated_from(result) == 99
    # A steady load: counted apart from the herds.
    assert result.frequent == [12] * 1440
    assert not any(result.nominal)
    context = pictures.forecast_context(result)
    # Two minutes a column.
    assert context["estimated"] == [{"x": pictures.F_LEFT + 49.5, "width": (1440 - 99) / 2}]
    assert any("counted exactly up to the dotted area" in note for note in context["notes"])


def test_a_dense_timing_is_estimated_only_in_the_minutes_it_fires_in() -> None:
    # Every second from 09:00 to 17:59: 32,400 a day, expanded exactly for 1,500 of them
    # (09:00 to 09:24:59), then minute by minute.
    cron_schedule("* * 9-17 * * *", SPRING, count=1)

    result = forecasting.forecast(SPRING)

    assert estimated_from(result) == 9 * 60 + 24
    assert minutes_with(result.frequent) == {minute: 60 for minute in range(9 * 60, 18 * 60)}
    spans = pictures.forecast_context(result)["estimated"]
    assert spans == [
        {"x": pictures.F_LEFT + (9 * 60 + 24) / 2, "width": (18 * 60 - (9 * 60 + 24)) / 2}
    ]


def test_the_expansion_budget_leaves_the_smallest_groups_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cron_schedule("* * * * *", SPRING, count=3)  # 1,440 occurrences
    cron_schedule("0 * * * *", SPRING, count=1)
    monkeypatch.setattr(forecasting, "MAX_OCCURRENCES", 1_000)

    result = forecasting.forecast(SPRING)

    assert result.budget_spent
    assert result.uncounted == 1
    assert result.dense_timings == 0  # a timing started is expanded whole
    assert sum(result.frequent) == 3 * 1440  # every minute: a steady load, counted apart


def test_the_busiest_minutes_name_their_groups_and_suggest_jitter(admin_client: Client) -> None:
    cron_schedule("0 * * * *", SPRING, count=50)
    cron_schedule("0 * * * *", SPRING, count=4, jitter=timedelta(hours=1))
    cron_schedule("*/5 * * * *", SPRING, zone="Europe/Berlin", count=2)

    result = forecasting.forecast(SPRING)

    first = result.busiest[0]
    assert (first.minute, first.at) == (0, SPRING)
    assert first.total == pytest.approx(52 + 4 / 60)
    hourly, jittered, five_minutes = first.shares
    assert (hourly.members, hourly.occurrences) == (50, 50)
    # 50 at once against a day's average of 1.3 a minute: as long as allowed, a quarter of
    # the hour between its runs.
    assert hourly.suggested_jitter == timedelta(minutes=15)
    assert (jittered.members, jittered.suggested_jitter, jittered.note) == (
        4,
        None,
        "already jittered",
    )
    assert (five_minutes.members, five_minutes.occurrences) == (2, 2)
    assert five_minutes.suggested_jitter == timedelta(minutes=1)
    assert five_minutes.family.timeline.timezone == "Europe/Berlin"
    # Each hour's :00 is the same herd: one row, naming the other hours, not 23 alike; then
    # the minutes of the five-minute group alone.
    assert [busy.minute for busy in result.busiest] == [0, 5]
    assert first.alike == [60 * hour for hour in range(1, 24)]
    assert len(result.busiest[1].alike) == 24 * 12 - 24 - 1
    row = pictures.forecast_context(result)["busiest"][0]
    assert (
        row["alike"] == "led by the same schedules also at 01:00, 02:00, 03:00 and 20 more minutes"
    )

    # The link lists the group's schedules.
    url = pictures.forecast_context(result)["busiest"][0]["shares"][0]["url"]
    page = admin_client.get(url)
    assert page.status_code == 200
    assert page.context["cl"].result_count == 50
    assert admin_client.get(f"{url}&_facets=True").status_code == 200  # "Show counts"


def test_schedules_that_fire_every_second_are_drawn_apart_from_the_herds(
    admin_client: Client,
) -> None:
    # Three schedules every second (180 a minute, all day) would flatten a herd of 20 at
    # :00 into a wall: they are counted, drawn and listed apart.
    for _ in range(3):
        make_schedule(interval=timedelta(seconds=1), next_run_at=SPRING)
    cron_schedule("0 * * * *", SPRING, count=20)
    cron_schedule("30 */2 * * *", SPRING, count=5)

    result = forecasting.forecast(SPRING)

    assert result.dense_timings == 1
    assert all(value == pytest.approx(180) for value in result.frequent)
    assert minutes_with(result.nominal) == {
        **{60 * hour: 20 for hour in range(24)},
        **{30 + 120 * n: 5 for n in range(12)},
    }
    assert result.peak == (0, 20)  # the herd, not the steady load
    # The busiest minutes: each herd once, with the minutes it repeats in.
    assert [(busy.minute, busy.total) for busy in result.busiest] == [(0, 20), (30, 5)]
    assert [len(busy.alike) for busy in result.busiest] == [23, 11]
    [every_second] = result.frequent_shares
    assert every_second.description == "Every second"  # not "Every 1 seconds"
    assert (every_second.members, every_second.per_minute) == (3, pytest.approx(180))
    assert every_second.occurrences == pytest.approx(3 * 86_400, rel=0.01)
    assert result.frequent_schedules == 3

    context = pictures.forecast_context(result)
    assert context["y_ticks"][-1]["label"] == "20"  # the main panel's scale: the herds'
    assert context["frequent_y_ticks"][-1]["label"] == "200"
    html = admin_client.get(reverse(OPERATIONS)).content.decode()
    assert 'id="schedulinator-frequent"' in html
    assert "Every second" in html


def test_the_busiest_minutes_are_unlike_each_other() -> None:
    cron_schedule("0 * * * *", SPRING, count=30)
    cron_schedule("15 * * * *", SPRING, count=20)
    cron_schedule("*/30 * * * *", SPRING, count=2)
    cron_schedule("45 9 * * *", SPRING, count=3)

    result = forecasting.forecast(SPRING)

    rows = [
        (busy.minute, busy.total, [s.members for s in busy.shares], len(busy.alike))
        for busy in result.busiest
    ]
    assert rows == [
        (0, 32, [30, 2], 23),  # :00 has the hourly herd and the half-hourly pair
        (15, 20, [20], 23),
        (9 * 60 + 45, 3, [3], 0),
        (30, 2, [2], 23),
    ]
    signatures = [frozenset(s.family for s in busy.shares) for busy in result.busiest]
    assert len(set(signatures)) == len(signatures)


def test_a_busy_minute_is_told_by_the_groups_its_row_names() -> None:
    cron_schedule("0 * * * *", SPRING, count=4)
    cron_schedule("0 * * * *", SPRING, count=3, jitter=timedelta(minutes=10))
    cron_schedule("*/15 * * * *", SPRING, count=2)
    make_schedule(interval=timedelta(minutes=7), next_run_at=SPRING)  # at :00 every 7 hours

    result = forecasting.forecast(SPRING)

    # Every hour's :00 is led by the same three groups (which the row names), whether or
    # not the one every 7 minutes falls there too: one row.
    first = result.busiest[0]
    assert [(s.members, s.family.jitter) for s in first.shares] == [
        (4, None), (3, timedelta(minutes=10)), (2, None)
    ]  # fmt: skip
    assert first.minute == 0
    assert first.alike == [60 * hour for hour in range(1, 24)]


def test_an_interval_groups_link_lists_its_schedules(admin_client: Client) -> None:
    anchor = SPRING + timedelta(minutes=7, seconds=30)
    for _ in range(3):
        make_schedule(interval=timedelta(hours=2), next_run_at=anchor)
    make_schedule(interval=timedelta(hours=2), next_run_at=anchor + timedelta(minutes=1))

    result = forecasting.forecast(SPRING)

    assert minutes_with(result.nominal) == {
        **{7 + 120 * n: 3 for n in range(12)},
        **{8 + 120 * n: 1 for n in range(12)},
    }
    share = result.busiest[0].shares[0]
    page = admin_client.get(pictures.forecast_context(result)["busiest"][0]["shares"][0]["url"])
    assert page.status_code == 200
    assert page.context["cl"].result_count == share.members == 3


@pytest.mark.parametrize(
    "value",
    ["nonsense", "[1, 2]", '["cron", "", "UTC", "either", "shift", "first", -5, null, null]',
     '["cron", 1, "UTC", "either", "shift", "first", null, null, null]'],
)  # fmt: skip
def test_a_timing_group_link_that_names_no_group_is_refused(
    admin_client: Client, value: str
) -> None:
    changelist = reverse("admin:django_schedulinator_schedule_changelist")
    page = admin_client.get(changelist, {"timing_group": value})
    assert page.status_code == 302
    assert page["Location"].endswith("?e=1")


def test_a_timing_group_is_named_as_text(admin_client: Client) -> None:
    changelist = reverse("admin:django_schedulinator_schedule_changelist")
    token = families.Family(families.TimelineKey("cron", cron="<b>x</b>"), None).token()
    html = admin_client.get(changelist, {"timing_group": token}).content.decode()
    assert "&lt;b&gt;x&lt;/b&gt;" in html
    assert "<b>x</b>" not in html


def test_a_timing_group_reads_back_what_it_wrote() -> None:
    key = families.TimelineKey(
        "interval", interval=timedelta(seconds=90), anchor=SPRING + timedelta(minutes=3)
    )
    family = families.Family(key, timedelta(minutes=2))
    assert families.Family.from_token(family.token()) == family
    assert family.label() == (
        "Every 90 seconds, next run in the minute from 2026-03-29 00:03:00 UTC, jitter 2 min"
    )


# -- the lateness histogram -------------------------------------------------------------------


def add_run(schedule: Schedule, ago: timedelta, late_ms: float | None, **fields: Any) -> Run:
    now = timezone.now()
    scheduled = now - ago
    handed = None if late_ms is None else scheduled + timedelta(milliseconds=late_ms)
    fields.setdefault("status", Run.Status.SUCCEEDED)
    fields.setdefault("claimed_at", handed or scheduled)
    return Run.objects.create(
        schedule=schedule,
        scheduled_for=scheduled,
        task=schedule.task,
        dispatched_at=handed,
        worker_id="tests",
        **fields,
    )


def test_the_histogram_buckets_recent_runs_by_lateness() -> None:
    plain = make_schedule()
    jittered = make_schedule(jitter=timedelta(minutes=5))
    lates = [3, 9.9, 10, 49, 60, 120, 499, 700, 1_500, 4_999, 6_000, 29_999, 30_000, 120_000]
    for n, late in enumerate(lates):
        add_run(plain, timedelta(minutes=1, seconds=n), late)
    add_run(jittered, timedelta(minutes=2), 200_000)
    add_run(plain, timedelta(minutes=3), None, status=Run.Status.SKIPPED, skip_reason="missed")
    add_run(plain, timedelta(minutes=4), 90_000_000, trigger=Run.Trigger.BACKFILL)
    add_run(plain, timedelta(hours=2), 5)  # claimed before the last hour
    # Claimed, not handed off yet: late by its claim.
    claimed = timezone.now() - timedelta(minutes=5) + timedelta(milliseconds=20)
    add_run(plain, timedelta(minutes=5), None, status=Run.Status.PENDING, claimed_at=claimed)
    add_run(plain, timedelta(minutes=6), -4)  # before its nominal time: clocks disagree

    result = lateness.histogram()

    assert result.plain == [3, 3, 1, 2, 1, 2, 2, 2]
    assert result.jittered == [0, 0, 0, 0, 0, 0, 0, 1]
    assert result.runs == 17
    assert result.early == 1
    assert not result.limited
    assert result.p50 == 499
    assert result.p99 == 200_000
    assert result.plain_p99 == 120_000


def test_the_histogram_reads_at_most_the_last_runs(
    monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    schedule = make_schedule()
    for n in range(8):
        add_run(schedule, timedelta(minutes=30 - n), 20)
    monkeypatch.setattr(lateness, "RECENT_RUNS", 5)

    with django_assert_num_queries(2):
        result = lateness.histogram()

    assert result.limited
    assert result.runs == 5
    newest_five = Run.objects.order_by("-pk")[:5]
    assert result.since == min(run.claimed_at for run in newest_five)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert lateness.percentile(values, 0.5) == 50
    assert lateness.percentile(values, 0.99) == 99
    assert lateness.percentile([7.0], 0.99) == 7
    assert lateness.percentile([], 0.5) is None
    assert [lateness.bucket_of(ms) for ms in (-1, 9.99, 10, 50, 30_000, 10**9)] == [
        0, 0, 1, 2, 7, 7,
    ]  # fmt: skip
    assert [lateness.ms_text(ms) for ms in (7, 340.4, 1_234, 12_345, 125_000, 7_260_000)] == [
        "7 ms", "340 ms", "1.2 s", "12 s", "2 min 5 s", "2 h 1 min",
    ]  # fmt: skip


# -- a schedule's strip of its last runs --------------------------------------------------------


def test_the_strip_marks_each_status_by_shape_and_letter() -> None:
    schedule = make_schedule()
    statuses = [
        Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.SKIPPED, Run.Status.DISPATCHED,
        Run.Status.PENDING, Run.Status.RUNNING, Run.Status.BUFFERED,
    ]  # fmt: skip
    base = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)
    for n, status in enumerate(statuses):
        Run.objects.create(
            schedule=schedule,
            scheduled_for=base + timedelta(minutes=n),
            status=status,
            skip_reason="paused" if status == Run.Status.SKIPPED else "",
            task=schedule.task,
            claimed_at=base + timedelta(minutes=n, milliseconds=5),
            dispatched_at=base + timedelta(minutes=n, seconds=2)
            if status != Run.Status.SKIPPED
            else None,
            worker_id="tests",
        )
    runs = lateness.recent_runs(schedule.pk, marks.STRIP_RUNS)
    with timezone.override("Europe/Berlin"):
        context = marks.run_strip_context(schedule, runs)

    drawn = context["marks"]
    assert [m["status"] for m in drawn] == statuses  # oldest first
    shapes = {(m["shape"], m["letter"], m["filled"]) for m in drawn}
    assert len(shapes) == len(statuses)  # each status told apart without colour
    assert drawn[0]["title"] == "2026-03-01 13:00:05 CET · Succeeded · handed off 2.0 s late"
    assert drawn[2]["title"] == "2026-03-01 13:02:05 CET · Skipped · Schedule paused"
    assert drawn[2]["bar_top"] is None
    assert drawn[1]["url"] == reverse("admin:django_schedulinator_run_change", args=[runs[1]["pk"]])
    assert [item["count"] for item in context["legend"]] == [1] * len(statuses)
    svg = ET.fromstring(
        re.search(r"<svg xmlns.*?</svg>", marks.run_strip_html(schedule, runs), re.S)[0]  # type: ignore[index]
    )
    assert svg.get("role") == "img"
    titles = [t.text for t in svg.iter(f"{SVG}title")]
    assert "2026-03-01 12:00:05 UTC · Succeeded · handed off 2.0 s late" in titles


def test_the_strip_shows_the_last_forty_runs() -> None:
    schedule = make_schedule()
    base = datetime(2026, 3, 1, tzinfo=UTC)
    Run.objects.bulk_create(
        Run(schedule=schedule, scheduled_for=base + timedelta(minutes=n), status="succeeded",
            task=schedule.task, claimed_at=base + timedelta(minutes=n), worker_id="tests")
        for n in range(75)
    )  # fmt: skip
    runs = lateness.recent_runs(schedule.pk, marks.STRIP_RUNS)
    assert len(runs) == 40
    assert runs[0]["scheduled_for"] == base + timedelta(minutes=35)
    assert runs[-1]["scheduled_for"] == base + timedelta(minutes=74)


# -- the pages ------------------------------------------------------------------------------------


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "admin@example.com", None))
    return client


@pytest.fixture
def staff_client() -> Callable[..., Client]:
    def login(*codenames: str) -> Client:
        user = User.objects.create_user("viewer", password=None, is_staff=True)
        user.user_permissions.add(
            *Permission.objects.filter(
                content_type__app_label="django_schedulinator", codename__in=codenames
            )
        )
        client = Client()
        client.force_login(user)
        return client

    return login


def test_the_operations_page_shows_both_pictures_to_a_viewer(
    staff_client: Callable[..., Client],
) -> None:
    cron_schedule("0 * * * *", timezone.now(), count=20)
    schedule = cron_schedule("*/5 * * * *", timezone.now(), zone="Europe/Berlin")[0]
    add_run(schedule, timedelta(minutes=1), 35)
    add_run(schedule, timedelta(minutes=2), 2_500)
    viewer = staff_client("view_schedule", "view_operations")

    page = viewer.get(reverse(OPERATIONS))

    assert page.status_code == 200
    html = page.content.decode()
    chart = svg_of(html, "schedulinator-forecast-svg")
    assert chart.get("role") == "img"
    assert (
        chart.get("aria-labelledby") == "schedulinator-forecast-title schedulinator-forecast-desc"
    )
    desc = chart.find(f"{SVG}desc")
    assert desc is not None
    assert desc.text is not None
    assert "the busiest minute starts at" in desc.text
    assert chart.find(f".//{SVG}g[@id='schedulinator-forecast-peak']") is not None
    assert len(list(chart.iter(f"{SVG}title"))) > 24  # each hour has its tooltip
    histogram = svg_of(html, "schedulinator-lateness-svg")
    assert histogram.get("role") == "img"
    assert 'id="schedulinator-lateness-percentiles"' in html
    assert 'id="schedulinator-busiest"' in html
    assert "?timing_group=" in html  # the groups link to the schedule list
    # No scheduler beats here: the picture of the schedulers alive says so.
    alive = svg_of(html, "schedulinator-alive-svg")
    assert "No scheduler has recorded a heartbeat recently." in "".join(alive.itertext())


def test_the_pictures_are_numbers_whatever_the_language(
    admin_client: Client, settings: Any
) -> None:
    settings.USE_THOUSAND_SEPARATOR = True
    settings.LANGUAGE_CODE = "de"
    cron_schedule("0 * * * *", timezone.now(), count=1, jitter=timedelta(seconds=90))
    html = admin_client.get(reverse(OPERATIONS)).content.decode()
    chart = svg_of(html, "schedulinator-forecast-svg")
    spread = chart.find(f".//{SVG}path[@class='schedulinator-spread']")
    assert spread is not None
    assert re.fullmatch(r"(M[\d.]+ [\d.]+v-?[\d.]+h[\d.]+v-?[\d.]+z)+", spread.get("d", ""))
    for element in chart.iter():
        for name in ("x", "y", "x1", "x2", "y1", "y2", "width", "height"):
            if element.get(name) is not None:
                float(element.get(name, ""))  # "12,5" would fail


def test_the_operations_page_with_no_schedules_and_no_runs(admin_client: Client) -> None:
    html = admin_client.get(reverse(OPERATIONS)).content.decode()
    chart = svg_of(html, "schedulinator-forecast-svg")
    desc = chart.find(f"{SVG}desc")
    assert desc is not None
    assert desc.text == "No occurrence in the next 24 hours."
    assert 'id="schedulinator-lateness-empty"' in html


def test_a_schedule_page_shows_its_strip_to_a_viewer_of_runs(
    staff_client: Callable[..., Client],
) -> None:
    schedule = make_schedule()
    add_run(schedule, timedelta(minutes=3), 12)
    add_run(schedule, timedelta(minutes=2), 40_000, status=Run.Status.FAILED)
    viewer = staff_client("view_schedule", "view_run")

    html = viewer.get(change_url(schedule)).content.decode()

    strip = svg_of(html, "schedulinator-run-strip-svg")
    links = list(strip.iter(f"{SVG}a"))
    assert len(links) == 2
    run = Run.objects.get(status="failed")
    assert links[1].get("href") == reverse("admin:django_schedulinator_run_change", args=[run.pk])
    assert 'id="schedulinator-run-strip-table"' in html


def test_a_schedule_page_leaves_the_strip_out_without_the_run_permission(
    staff_client: Callable[..., Client],
) -> None:
    schedule = make_schedule()
    add_run(schedule, timedelta(minutes=3), 12)
    html = staff_client("view_schedule").get(change_url(schedule)).content.decode()
    assert "schedulinator-run-strip" not in html


def test_the_schedulers_alive_are_bars_of_their_last_pass(
    admin_client: Client, index: DueIndex
) -> None:
    beat(index, "sched-a", pass_ago=0.4)
    beat(index, "sched-b", pass_ago=90)  # PASS_STALE_SECONDS is 60 in the tests
    beat(index, "sched-c", pass_ago=None)

    html = admin_client.get(reverse(OPERATIONS)).content.decode()

    chart = svg_of(html, "schedulinator-alive-svg")
    bars = {
        bar.find(f"{SVG}title").text.split(" · ")[0]: bar
        for bar in chart.iter(f"{SVG}g")
        if bar.get("class") == "schedulinator-scheduler-bar"
    }
    assert set(bars) == {"sched-a", "sched-b", "sched-c"}
    fresh, stale, unborn = bars["sched-a"], bars["sched-b"], bars["sched-c"]
    # The state is said by shape, letter and word, not by colour alone.
    assert "healthy" in "".join(fresh.itertext())
    assert "stale" in "".join(stale.itertext())
    assert stale.find(f"{SVG}rect").get("fill") == "url(#schedulinator-alive-hatch)"
    assert fresh.find(f"{SVG}rect").get("fill") is None
    widths = [float(b.find(f"{SVG}rect").get("width")) for b in (fresh, stale)]
    assert widths[0] < widths[1]
    assert "no pass yet" in unborn.find(f"{SVG}title").text
    assert "last pass 90." in stale.find(f"{SVG}title").text
    assert "stale after 60 s" in "".join(chart.itertext())
    assert "1 of them stale" in chart.find(f"{SVG}desc").text


def test_solar_schedules_are_counted_at_their_event_and_grouped_by_place() -> None:
    """Three sunsets in Berlin (one group) and one sunrise in London: each counted in the
    minute of its event, and the busiest minute's group links to its members."""
    berlin = {"solar_event": "sunset", "latitude": 52.52, "longitude": 13.405}
    london = {"solar_event": "sunrise", "latitude": 51.5074, "longitude": -0.1278}
    sunset = timing.solar_next("sunset", 52.52, 13.405, None, SPRING)
    sunrise = timing.solar_next("sunrise", 51.5074, -0.1278, None, SPRING)
    assert sunset is not None
    assert sunrise is not None
    for _ in range(3):
        make_schedule(kind="solar", next_run_at=sunset, **berlin)
    make_schedule(kind="solar", next_run_at=sunrise, **london)

    result = forecasting.forecast(SPRING)

    def minute(at: datetime) -> int:
        return int((at - SPRING) // timedelta(minutes=1))

    assert minutes_with(result.nominal) == {minute(sunrise): 1, minute(sunset): 3}
    assert result.failed_timings == 0
    busiest = result.busiest[0]
    assert busiest.at == SPRING + timedelta(minutes=minute(sunset))
    family = busiest.shares[0].family
    assert busiest.shares[0].description == "Sunset at 52.52, 13.405"
    assert families.Family.from_token(family.token()) == family
    assert Schedule.objects.filter(family.members()).count() == 3
