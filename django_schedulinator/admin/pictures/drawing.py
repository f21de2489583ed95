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


def forecast_html(result: forecasting.Forecast) -> str:
    return render_to_string(FORECAST_TEMPLATE, forecast_context(result))


def forecast_context(result: forecasting.Forecast) -> dict[str, Any]:
    minutes = len(result.nominal)
    width = F_LEFT + minutes + F_RIGHT
    height = F_TOP + F_PLOT_H + F_BOTTOM
    base = F_TOP + F_PLOT_H
    totals = result.totals
    peak_minute, peak = result.peak
    top = nice_ceiling(peak)
    scale = F_PLOT_H / top
    nominal_path: list[str] = []
    spread_path: list[str] = []
    for minute, (plain, spread) in enumerate(zip(result.nominal, result.spread, strict=True)):
        if plain + spread <= 0:
            continue
        x = F_LEFT + minute
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
    zone = timezone.get_current_timezone()
    ticks, bands = _hour_axis(result, zone, totals)
    peak_x = F_LEFT + peak_minute + 0.5
    peak_label = gettext("peak: %(count)s in the minute from %(time)s") % {
        "count": count_text(peak),
        "time": f"{timezone.localtime(result.minute_at(peak_minute)):%H:%M %Z}",
    }
    summary = _forecast_summary(result, peak_minute, peak)
    # The dotted background behind the minutes that count a dense timing's estimate.
    estimated = [
        {"x": F_LEFT + low, "width": high - low} for low, high in _runs_of(result.estimated)
    ]
    return {
        "width": width,
        "height": height,
        "left": F_LEFT,
        "top": F_TOP,
        "base": base,
        "right": F_LEFT + minutes,
        "nominal_path": "".join(nominal_path),
        "spread_path": "".join(spread_path),
        "y_ticks": [
            {"y": base - value * scale, "label": count_text(value)} for value in (0, top / 2, top)
        ],
        "ticks": ticks,
        "bands": bands,
        "peak": peak > 0,
        "peak_x": peak_x,
        "peak_y": base - peak * scale,
        "peak_label": peak_label,
        "peak_anchor": "end" if peak_minute > minutes * 0.7 else "start",
        "peak_label_x": peak_x - 6 if peak_minute > minutes * 0.7 else peak_x + 6,
        "estimated": estimated,
        "plot_height": F_PLOT_H,
        "middle": F_TOP + F_PLOT_H / 2,
        "tick_label_x": F_LEFT - 6,
        "label_y": base + 20,
        "axis_title_y": base + 40,
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
    result: forecasting.Forecast, zone: Any, totals: list[float]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Ticks at each local hour of the admin's zone (a label every three hours, the day at
    midnight), and a band per hour with a tooltip of its figures."""
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
                "x": F_LEFT + minute,
                "label": label,
                "day": local.hour == 0,
                "y2": F_TOP + F_PLOT_H + (6 if label else 3),
            }
        )
    marks.append(minutes)
    bands = []
    for low, high in itertools.pairwise(marks):
        if high <= low:
            continue
        span = totals[low:high]
        busiest = max(range(low, high), key=lambda i: (totals[i], -i))
        bands.append(
            {
                "x": F_LEFT + low,
                "width": high - low,
                "title": gettext(
                    "%(start)s to %(end)s: %(count)s occurrences; the busiest minute "
                    "%(busiest)s (%(busiest_count)s)"
                )
                % {
                    "start": exact_time(result.minute_at(low)),
                    "end": exact_time(result.minute_at(high) - timedelta(seconds=1)),
                    "count": count_text(sum(span)),
                    "busiest": f"{timezone.localtime(result.minute_at(busiest)):%H:%M}",
                    "busiest_count": count_text(totals[busiest]),
                },
            }
        )
    return ticks, bands


def _forecast_summary(result: forecasting.Forecast, peak_minute: int, peak: float) -> str:
    if peak <= 0:
        return gettext("No occurrence in the next 24 hours.")
    return gettext(
        "Occurrences per minute over the next 24 hours from %(now)s, %(total)s in all from "
        "%(schedules)s schedules; the busiest minute starts at %(time)s with %(count)s, the "
        "average is %(mean)s a minute."
    ) % {
        "now": exact_time(result.now),
        "total": count_text(sum(result.totals)),
        "schedules": f"{result.schedules:,}",
        "time": exact_time(result.minute_at(peak_minute)),
        "count": count_text(peak),
        "mean": count_text(result.mean),
    }


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
        rows.append({"at": exact_time(busy.at), "total": count_text(busy.total), "shares": shares})
    return rows


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
