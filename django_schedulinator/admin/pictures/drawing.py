"""The admin's bar charts on the operations page: the forecast of occurrences per minute and
the lateness histogram (the strip of a schedule's last runs and the schedulers alive, drawn
as marks, are ``marks.py``'s).

Server-rendered SVG, no JavaScript: each builder here turns the figures into geometry (plain
numbers) and text, and a template draws it, escaping every text. Every picture is readable
without colour: series differ by pattern, statuses by shape and letter, and each has a
legend, a ``<title>`` on what it marks, a text alternative (``role="img"`` with a label and
a description) and a table of the same figures for those who would rather read. Times are
the admin's own (``exact_time``: seconds and the zone).
"""

from __future__ import annotations

import itertools
import math
from datetime import timedelta
from typing import Any

from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.translation import gettext, ngettext

from django_schedulinator.admin.display import changelist_url, duration_text, exact_time
from django_schedulinator.admin.pictures import forecast as forecasting
from django_schedulinator.admin.pictures import lateness
from django_schedulinator.models import Schedule

FORECAST_TEMPLATE = "django_schedulinator/admin/pictures/forecast.html"
LATENESS_TEMPLATE = "django_schedulinator/admin/pictures/lateness.html"


def count_text(value: float) -> str:
    """A count, possibly fractional (jitter spreads an occurrence over minutes)."""
    if value >= 10 or value == int(value):
        return f"{round(value):,}"
    return f"{value:.1f}"


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least ``value``."""
    if value <= 1:
        return 1
    power = 10.0 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value)


def _bar(x: float, base: float, height: float, width: float) -> str:
    """A bar as a path segment (one path per series keeps 1,440 bars small)."""
    return f"M{x:g} {base:.2f}v{-height:.2f}h{width:g}v{height:.2f}z"


# -- the forecast ---------------------------------------------------------------------------

F_LEFT, F_TOP, F_PLOT_H, F_BOTTOM, F_RIGHT = 64, 34, 200, 46, 16
# Two minutes a column: the day fits 720 px, so the picture is drawn at its own size (its
# labels 11 px and more) on a laptop's screen; a column shows the busier of its minutes.
F_MINUTES_PER_COLUMN = 2
# The panel of the timings that fire every minute or more often, under the main one.
F_FREQUENT_GAP, F_FREQUENT_H = 30, 60


def forecast_html(result: forecasting.Forecast) -> str:
    return render_to_string(FORECAST_TEMPLATE, forecast_context(result))


def _column(minute: float) -> float:
    return F_LEFT + minute / F_MINUTES_PER_COLUMN


def forecast_context(result: forecasting.Forecast) -> dict[str, Any]:
    minutes = len(result.nominal)
    columns = math.ceil(minutes / F_MINUTES_PER_COLUMN)
    plot_width = columns
    base = F_TOP + F_PLOT_H
    frequent = any(result.frequent)
    frequent_top = base + F_FREQUENT_GAP
    frequent_base = frequent_top + F_FREQUENT_H
    bottom = frequent_base if frequent else base
    width = F_LEFT + plot_width + F_RIGHT
    height = bottom + F_BOTTOM
    occasional = result.occasional
    peak_minute, peak = result.peak
    top = nice_ceiling(peak)
    scale = F_PLOT_H / top
    nominal_path: list[str] = []
    spread_path: list[str] = []
    for column in range(columns):
        span = range(
            column * F_MINUTES_PER_COLUMN, min((column + 1) * F_MINUTES_PER_COLUMN, minutes)
        )
        minute = max(span, key=lambda i: (occasional[i], -i))  # the busier minute
        plain, spread = result.nominal[minute], result.spread[minute]
        if plain + spread <= 0:
            continue
        x = F_LEFT + column
        plain_h, spread_h = plain * scale, spread * scale
        if plain_h + spread_h < 1:  # a minute with anything in it stays visible
            if plain:
                plain_h = 1 - spread_h
            else:
                spread_h = 1
        if plain:
            nominal_path.append(_bar(x, base, plain_h, 1))
        if spread:
            spread_path.append(_bar(x, base - plain_h, spread_h, 1))
    frequent_top_value = nice_ceiling(max(result.frequent)) if frequent else 1
    frequent_scale = F_FREQUENT_H / frequent_top_value
    frequent_path = []
    for column in range(columns if frequent else 0):
        value = max(
            result.frequent[column * F_MINUTES_PER_COLUMN : (column + 1) * F_MINUTES_PER_COLUMN]
        )
        if value > 0:
            frequent_path.append(
                _bar(F_LEFT + column, frequent_base, max(value * frequent_scale, 1), 1)
            )
    zone = timezone.get_current_timezone()
    ticks, bands = _hour_axis(result, zone, bottom)
    peak_x = _column(peak_minute) + 0.5
    peak_label = gettext("peak: %(count)s in the minute from %(time)s") % {
        "count": count_text(peak),
        "time": f"{timezone.localtime(result.minute_at(peak_minute)):%H:%M %Z}",
    }
    summary = _forecast_summary(result, peak_minute, peak)
    # The dotted background behind the minutes that count a dense timing's estimate (dense
    # timings fire more than once a minute: their panel is the frequent one).
    estimated = [
        {"x": _column(low), "width": (high - low) / F_MINUTES_PER_COLUMN}
        for low, high in _runs_of(result.estimated)
    ]
    right = F_LEFT + plot_width
    late_peak = peak_minute > minutes * 0.7
    return {
        "width": width,
        "height": height,
        "left": F_LEFT,
        "top": F_TOP,
        "base": base,
        "bottom": bottom,
        "right": right,
        "nominal_path": "".join(nominal_path),
        "spread_path": "".join(spread_path),
        "y_ticks": [
            {"y": base - value * scale, "label": count_text(value)} for value in (0, top / 2, top)
        ],
        "ticks": ticks,
        "bands": bands,
        "band_height": bottom - F_TOP,
        "peak": peak > 0,
        "peak_x": peak_x,
        "peak_y": base - peak * scale,
        "peak_label": peak_label,
        "peak_anchor": "end" if late_peak else "start",
        "peak_label_x": peak_x - 6 if late_peak else peak_x + 6,
        "estimated": estimated,
        "frequent": frequent,
        "frequent_path": "".join(frequent_path),
        "frequent_top": frequent_top,
        "frequent_base": frequent_base,
        "frequent_height": F_FREQUENT_H,
        "frequent_title_y": frequent_top - 8,
        "frequent_y_ticks": [
            {"y": frequent_base - value * frequent_scale, "label": count_text(value)}
            for value in (0, frequent_top_value)
        ],
        "frequent_rows": _frequent_rows(result),
        "frequent_schedules": result.frequent_schedules,
        "plot_height": F_PLOT_H,
        "middle": F_TOP + F_PLOT_H / 2,
        "tick_label_x": F_LEFT - 6,
        "label_y": bottom + 20,
        "axis_title_y": bottom + 40,
        "peak_line_top": F_TOP - 10,
        "peak_label_y": F_TOP - 14,
        "any_spread": any(result.spread),
        "zone_name": timezone.get_current_timezone_name(),
        "summary": summary,
        "result": result,
        "now": exact_time(result.now),
        "busiest": _busiest_rows(result),
        "notes": _forecast_notes(result),
        "mean": count_text(result.mean),
    }


def _runs_of(flags: list[bool]) -> list[tuple[int, int]]:
    """The spans (start, end) of consecutive true flags."""
    spans = []
    start = None
    for index, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = index
        elif not flag and start is not None:
            spans.append((start, index))
            start = None
    return spans


def _hour_axis(
    result: forecasting.Forecast, zone: Any, bottom: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Ticks at each local hour of the admin's zone (a label every three hours, the day at
    midnight) under the lowest panel, and a band per hour with a tooltip of its figures."""
    totals = result.totals
    occasional = result.occasional
    frequent = result.frequent
    minutes = len(totals)
    marks = [0]
    ticks = []
    for minute in range(minutes + 1):
        local = result.minute_at(minute).astimezone(zone)
        if local.minute != 0:
            continue
        if minute not in marks:
            marks.append(minute)
        label = ""
        if local.hour == 0:
            label = f"{local:%a %d %b}"
        elif local.hour % 3 == 0:
            label = f"{local:%H:%M}"
        ticks.append(
            {
                "x": _column(minute),
                "label": label,
                "day": local.hour == 0,
                "y2": bottom + (6 if label else 3),
            }
        )
    marks.append(minutes)
    bands = []
    for low, high in itertools.pairwise(marks):
        if high <= low:
            continue
        busiest = max(range(low, high), key=lambda i: (occasional[i], -i))
        title = gettext(
            "%(start)s to %(end)s: %(count)s occurrences; the busiest minute "
            "%(busiest)s (%(busiest_count)s)"
        ) % {
            "start": exact_time(result.minute_at(low)),
            "end": exact_time(result.minute_at(high) - timedelta(seconds=1)),
            "count": count_text(sum(occasional[low:high])),
            "busiest": f"{timezone.localtime(result.minute_at(busiest)):%H:%M}",
            "busiest_count": count_text(occasional[busiest]),
        }
        if any(frequent[low:high]):
            title += gettext(
                "; besides, %(count)s of schedules that fire every minute or more often"
            ) % {"count": count_text(sum(frequent[low:high]))}
        bands.append(
            {
                "x": _column(low),
                "width": (high - low) / F_MINUTES_PER_COLUMN,
                "title": title,
            }
        )
    return ticks, bands


def _forecast_summary(result: forecasting.Forecast, peak_minute: int, peak: float) -> str:
    frequent = sum(result.frequent)
    if peak <= 0 and not frequent:
        return gettext("No occurrence in the next 24 hours.")
    steady = (
        " "
        + gettext(
            "Besides, %(schedules)s schedules that fire every minute or more often: "
            "%(total)s occurrences, at most %(most)s in a minute."
        )
        % {
            "schedules": f"{result.frequent_schedules:,}",
            "total": count_text(frequent),
            "most": count_text(max(result.frequent)),
        }
        if frequent
        else ""
    )
    if peak <= 0:
        return steady.strip()
    return (
        gettext(
            "Occurrences per minute over the next 24 hours from %(now)s, %(total)s in all from "
            "%(schedules)s schedules; the busiest minute starts at %(time)s with %(count)s, the "
            "average is %(mean)s a minute."
        )
        % {
            "now": exact_time(result.now),
            "total": count_text(sum(result.occasional)),
            "schedules": f"{result.schedules - result.frequent_schedules:,}",
            "time": exact_time(result.minute_at(peak_minute)),
            "count": count_text(peak),
            "mean": count_text(result.mean),
        }
        + steady
    )


def _forecast_notes(result: forecasting.Forecast) -> list[str]:
    notes = []
    if result.groups_capped:
        notes.append(
            ngettext(
                "Only the %(groups)s largest groups of schedules with the same timing are "
                "counted: %(count)s schedule in smaller groups is not.",
                "Only the %(groups)s largest groups of schedules with the same timing are "
                "counted: %(count)s schedules in smaller groups are not.",
                result.uncounted,
            )
            % {"groups": f"{forecasting.MAX_GROUPS:,}", "count": f"{result.uncounted:,}"}
        )
    if result.budget_spent:
        notes.append(
            gettext(
                "The forecast stopped expanding timings after %(count)s occurrences: the "
                "schedules of the smallest groups are not counted."
            )
            % {"count": f"{forecasting.MAX_OCCURRENCES:,}"}
        )
    if result.dense_timings:
        notes.append(
            ngettext(
                "%(count)d timing fires too often to be expanded over the whole day: it is "
                "counted exactly up to the dotted area, and within it each minute it fires in "
                "counts as many occurrences as its minutes had on average.",
                "%(count)d timings fire too often to be expanded over the whole day: they are "
                "counted exactly up to the dotted area, and within it each minute they fire in "
                "counts as many occurrences as their minutes had on average.",
                result.dense_timings,
            )
            % {"count": result.dense_timings}
        )
    if result.failed_timings:
        notes.append(
            ngettext(
                "%(count)d timing cannot be evaluated (a time zone no longer known?): its "
                "schedules are not counted.",
                "%(count)d timings cannot be evaluated (a time zone no longer known?): their "
                "schedules are not counted.",
                result.failed_timings,
            )
            % {"count": result.failed_timings}
        )
    return notes


def _busiest_rows(result: forecasting.Forecast) -> list[dict[str, Any]]:
    rows = []
    for busy in result.busiest:
        shares = [
            {
                "description": share.description,
                "members": share.members,
                "occurrences": f"{share.occurrences:,}",
                "jitter": duration_text(share.family.jitter) if share.family.jitter else "",
                "suggested": duration_text(share.suggested_jitter)
                if share.suggested_jitter
                else "",
                "note": share.note,
                "url": changelist_url(Schedule, timing_group=share.family.token()),
            }
            for share in busy.shares
        ]
        rows.append(
            {
                "at": exact_time(busy.at),
                "total": count_text(busy.total),
                "shares": shares,
                "alike": _alike_text(result, busy.alike),
            }
        )
    return rows


ALIKE_SHOWN = 3  # the other minutes named, before "and N more"


def _alike_text(result: forecasting.Forecast, alike: list[int]) -> str:
    """The other minutes led by the same timings: "led by the same schedules also at 13:00,
    14:00, 15:00 and 20 more minutes"."""
    if not alike:
        return ""
    times = ", ".join(
        f"{timezone.localtime(result.minute_at(minute)):%H:%M}" for minute in alike[:ALIKE_SHOWN]
    )
    more = len(alike) - ALIKE_SHOWN
    if more > 0:
        return ngettext(
            "led by the same schedules also at %(times)s and %(count)s more minute",
            "led by the same schedules also at %(times)s and %(count)s more minutes",
            more,
        ) % {"times": times, "count": more}
    return gettext("led by the same schedules also at %(times)s") % {"times": times}


def _frequent_rows(result: forecasting.Forecast) -> list[dict[str, Any]]:
    return [
        {
            "description": share.description,
            "members": share.members,
            "occurrences": count_text(share.occurrences),
            "per_minute": count_text(share.per_minute),
            "jitter": duration_text(share.family.jitter) if share.family.jitter else "",
            "url": changelist_url(Schedule, timing_group=share.family.token()),
        }
        for share in result.frequent_shares
    ]


# -- the lateness histogram -----------------------------------------------------------------

L_LEFT, L_TOP, L_PLOT_H, L_BOTTOM, L_RIGHT = 64, 46, 160, 40, 16
L_SLOT, L_BAR = 84, 60


def lateness_html(result: lateness.Histogram) -> str:
    return render_to_string(LATENESS_TEMPLATE, lateness_context(result))


def lateness_context(result: lateness.Histogram) -> dict[str, Any]:
    counts = result.counts
    top = nice_ceiling(max(counts))
    scale = L_PLOT_H / top
    base = L_TOP + L_PLOT_H
    bars = []
    plain_path, jittered_path = [], []
    for index, (label, plain, jittered) in enumerate(
        zip(lateness.BUCKET_LABELS, result.plain, result.jittered, strict=True)
    ):
        x = L_LEFT + index * L_SLOT + (L_SLOT - L_BAR) / 2
        plain_h = plain * scale if not plain else max(plain * scale, 1)
        jittered_h = jittered * scale if not jittered else max(jittered * scale, 1)
        if plain:
            plain_path.append(_bar(x, base, plain_h, L_BAR))
        if jittered:
            jittered_path.append(_bar(x, base - plain_h, jittered_h, L_BAR))
        count = plain + jittered
        share = count / result.runs if result.runs else 0
        bars.append(
            {
                "x": x,
                "center": x + L_BAR / 2,
                "top": base - plain_h - jittered_h,
                "height": plain_h + jittered_h,
                "label": str(label),
                "count": f"{count:,}",
                "jittered": f"{jittered:,}",
                "count_y": base - plain_h - jittered_h - 4,
                "slot_x": L_LEFT + index * L_SLOT,
                "title": gettext("%(bucket)s: %(count)s runs (%(share)s)")
                % {"bucket": label, "count": f"{count:,}", "share": f"{share:.1%}"}
                + (
                    gettext(", %(jittered)s of them of jittered schedules")
                    % {"jittered": f"{jittered:,}"}
                    if jittered
                    else ""
                ),
            }
        )
    markers = []
    for n, (name, value) in enumerate((("p50", result.p50), ("p99", result.p99))):
        if value is not None:
            markers.append(
                {
                    "x": _lateness_x(value),
                    "label": f"{name} {lateness.ms_text(value)}",
                    "y": L_TOP - 24 + n * 13,
                }
            )
    return {
        "width": L_LEFT + len(bars) * L_SLOT + L_RIGHT,
        "height": L_TOP + L_PLOT_H + L_BOTTOM,
        "left": L_LEFT,
        "top": L_TOP,
        "base": base,
        "right": L_LEFT + len(bars) * L_SLOT,
        "plain_path": "".join(plain_path),
        "jittered_path": "".join(jittered_path),
        "bars": bars,
        "markers": markers,
        "slot": L_SLOT,
        "plot_height": L_PLOT_H,
        "middle": L_TOP + L_PLOT_H / 2,
        "tick_label_x": L_LEFT - 6,
        "label_y": base + 18,
        "y_ticks": [
            {"y": base - value * scale, "label": count_text(value)} for value in (0, top / 2, top)
        ],
        "result": result,
        "since": exact_time(result.since),
        "p50": lateness.ms_text(result.p50),
        "p99": lateness.ms_text(result.p99),
        "plain_p50": lateness.ms_text(result.plain_p50),
        "plain_p99": lateness.ms_text(result.plain_p99),
        "summary": _lateness_summary(result),
    }


def _lateness_x(ms: float) -> float:
    """Where a lateness falls on the bucket axis: within its bucket, on a log scale."""
    index = lateness.bucket_of(ms)
    low = lateness.BOUNDS_MS[index - 1] if index else 1
    high = lateness.BOUNDS_MS[index] if index < len(lateness.BOUNDS_MS) else 300_000
    value = min(max(ms, low), high)
    fraction = (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low))
    return L_LEFT + (index + fraction) * L_SLOT


def _lateness_summary(result: lateness.Histogram) -> str:
    if not result.runs:
        return gettext("No run handed off since %(since)s.") % {"since": exact_time(result.since)}
    parts = [
        f"{label}: {count:,}"
        for label, count in zip(lateness.BUCKET_LABELS, result.counts, strict=True)
    ]
    return gettext(
        "Lateness of %(runs)s runs handed off since %(since)s, from their nominal time to "
        "their hand-off: p50 %(p50)s, p99 %(p99)s. %(buckets)s."
    ) % {
        "runs": f"{result.runs:,}",
        "since": exact_time(result.since),
        "p50": lateness.ms_text(result.p50),
        "p99": lateness.ms_text(result.p99),
        "buckets": "; ".join(parts),
    }
