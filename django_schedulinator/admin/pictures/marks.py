"""The admin's pictures drawn as one mark per item, a shape with a letter: the strip of a
schedule's last runs (on its page) and the schedulers alive (on the operations page). Each
status or state has its shape, its letter and whether it is filled; the colour only repeats
them. Drawn as ``drawing.py``'s are: geometry here, a template that escapes every text, a
legend, a text alternative and a table.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.translation import gettext, ngettext

from django_schedulinator.admin.display import changelist_url, duration_text, exact_time
from django_schedulinator.admin.pictures import lateness
from django_schedulinator.models import Run, Schedule

STRIP_TEMPLATE = "django_schedulinator/admin/pictures/run_strip.html"
# The runs a schedule's strip shows: 800 px wide, drawn at its own size (labels 11 px) on a
# laptop's screen.
STRIP_RUNS = 40


# -- a schedule's last runs -----------------------------------------------------------------

S_LEFT, S_TOP, S_PLOT_H, S_SLOT, S_RIGHT = 64, 12, 96, 18, 16
S_GLYPH = 7  # the half-size of a status mark
S_LABEL_WIDTH = 360  # room for two times side by side under the strip
S_LOG_TOP = math.log10(300_000)  # 5 minutes: the top of the lateness scale
# Each status: its shape, its letter, and whether the shape is filled (the CSS class gives
# the colour, which only repeats what shape and letter say).
STATUS_MARKS: dict[str, tuple[str, str, bool]] = {
    Run.Status.SUCCEEDED: ("circle", "S", True),
    Run.Status.FAILED: ("square", "F", True),
    Run.Status.DISPATCHED: ("diamond", "D", True),
    Run.Status.PENDING: ("square", "P", False),
    Run.Status.RUNNING: ("diamond", "R", False),
    Run.Status.BUFFERED: ("triangle", "B", False),
    Run.Status.SKIPPED: ("circle", "-", False),
}
STRIP_TICKS_MS = ((10, "10 ms"), (100, "100 ms"), (1_000, "1 s"), (10_000, "10 s"),
                  (60_000, "1 min"))  # fmt: skip


def _strip_y(ms: float, base: float) -> float:
    value = math.log10(min(max(ms, 1), 300_000))
    return base - value / S_LOG_TOP * S_PLOT_H


def run_strip_html(schedule: Schedule, runs: list[dict[str, Any]]) -> str:
    return render_to_string(STRIP_TEMPLATE, run_strip_context(schedule, runs))


def run_strip_context(schedule: Schedule, runs: list[dict[str, Any]]) -> dict[str, Any]:
    base = S_TOP + S_PLOT_H
    glyph_y = base + 8 + S_GLYPH
    marks = []
    statuses: Counter[str] = Counter()
    # A slot for each of the STRIP_RUNS runs, the newest always at the right end.
    empty = max(STRIP_RUNS - len(runs), 0)
    for n, run in enumerate(runs):
        status = run["status"]
        statuses[status] += 1
        shape, letter, filled = STATUS_MARKS.get(status, ("circle", "?", False))
        x = S_LEFT + (empty + n) * S_SLOT + S_SLOT / 2
        late = (
            None
            if status == Run.Status.SKIPPED
            else lateness.lateness_ms(run["scheduled_for"], run["dispatched_at"], run["claimed_at"])
        )
        label = Run.Status(status).label if status in Run.Status.values else status
        details = [exact_time(run["scheduled_for"]), str(label)]
        if status == Run.Status.SKIPPED and run["skip_reason"]:
            reason = run["skip_reason"]
            reasons = dict(Run.SkipReason.choices)
            details.append(str(reasons.get(reason, reason)))
        if late is not None:
            details.append(gettext("handed off %(late)s late") % {"late": lateness.ms_text(late)})
        if run["trigger"] != Run.Trigger.SCHEDULE:
            details.append(str(dict(Run.Trigger.choices).get(run["trigger"], run["trigger"])))
        if run["attempts"] > 1:
            details.append(gettext("attempt %(n)s") % {"n": run["attempts"]})
        marks.append(
            {
                "x": x,
                "y": glyph_y,
                "shape": shape,
                "points": _shape_points(shape, x, glyph_y),
                "corner_x": x - S_GLYPH,
                "corner_y": glyph_y - S_GLYPH,
                "letter": letter,
                "filled": filled,
                "status": status,
                "bar_top": _strip_y(late, base) if late is not None else None,
                "bar_height": base - _strip_y(late, base) if late is not None else 0,
                "bar_x": x - 3,
                "slot_x": x - S_SLOT / 2,
                "title": " · ".join(details),
                "url": reverse("admin:django_schedulinator_run_change", args=[run["pk"]]),
                "time": exact_time(run["scheduled_for"]),
                "status_label": label,
                "lateness": lateness.ms_text(late) if late is not None else "",
            }
        )
    width = S_LEFT + max(STRIP_RUNS, len(runs)) * S_SLOT + S_RIGHT
    # The oldest run's time under it, the newest's at the right end; a row apart when close.
    time_y = glyph_y + S_GLYPH + 18
    first_x = marks[0]["x"] - S_SLOT / 2 if marks else S_LEFT
    close = marks and width - S_RIGHT - first_x < S_LABEL_WIDTH
    legend = [
        {
            "status": status,
            "label": Run.Status(status).label,
            "shape": shape,
            "letter": letter,
            "filled": filled,
            "count": statuses.get(status, 0),
            "x": S_GLYPH + 2,
            "y": S_GLYPH + 2,
            "points": _shape_points(shape, S_GLYPH + 2, S_GLYPH + 2),
            "corner_x": 2,
            "corner_y": 2,
            "size": 2 * S_GLYPH + 4,
        }
        for status, (shape, letter, filled) in STATUS_MARKS.items()
        if statuses.get(status)
    ]
    return {
        "width": width,
        "height": time_y + (22 if close else 8),
        "left": S_LEFT,
        "top": S_TOP,
        "base": base,
        "right": width - S_RIGHT,
        "marks": marks,
        "legend": legend,
        "slot": S_SLOT,
        "slot_height": glyph_y + S_GLYPH - S_TOP,
        "tick_label_x": S_LEFT - 6,
        "y_ticks": [{"y": _strip_y(ms, base), "label": text} for ms, text in STRIP_TICKS_MS],
        "first": marks[0]["time"] if marks else "",
        "last": marks[-1]["time"] if marks else "",
        "first_x": first_x,
        "time_y": time_y,
        "last_time_y": time_y + 14 if close else time_y,
        "summary": _strip_summary(schedule, runs, statuses),
        "jitter": duration_text(schedule.jitter) if schedule.jitter else "",
        "runs_url": changelist_url(Run, schedule__id__exact=schedule.pk),
    }


def _shape_points(shape: str, x: float, y: float) -> str:
    """The polygon of a diamond or a triangle centred on (x, y)."""
    g = S_GLYPH + 1
    points: tuple[tuple[float, float], ...]
    if shape == "diamond":
        points = ((x, y - g), (x + g, y), (x, y + g), (x - g, y))
    elif shape == "triangle":
        points = ((x, y - g), (x + g, y + g - 1), (x - g, y + g - 1))
    else:
        return ""
    return " ".join(f"{px:g},{py:g}" for px, py in points)


def _strip_summary(schedule: Schedule, runs: list[dict[str, Any]], statuses: Counter[str]) -> str:
    if not runs:
        return gettext("No runs yet.")
    counts = ", ".join(
        f"{count} {Run.Status(status).label.lower() if status in Run.Status.values else status}"
        for status, count in statuses.most_common()
    )
    return ngettext(
        "The last run, at %(last)s: %(counts)s.",
        "The last %(n)s runs, from %(first)s to %(last)s: %(counts)s.",
        len(runs),
    ) % {
        "n": len(runs),
        "first": exact_time(runs[0]["scheduled_for"]),
        "last": exact_time(runs[-1]["scheduled_for"]),
        "counts": counts,
    }


# -- the schedulers alive -------------------------------------------------------------------

SCHEDULERS_TEMPLATE = "django_schedulinator/admin/pictures/schedulers.html"
A_LEFT, A_TOP, A_ROW, A_PLOT_W, A_RIGHT = 230, 30, 30, 420, 150
A_SHOWN = 50  # schedulers drawn; the table above lists them all
A_LOW_SECONDS = 0.1  # the left end of the pass-age scale
# A state's mark: shape, letter, filled (the colour only repeats them), and its CSS status.
STATE_MARKS = {
    "healthy": ("circle", "H", True, "succeeded"),
    "stale": ("triangle", "!", True, "failed"),
    "stopping": ("square", "S", False, "skipped"),
}


def schedulers_html(rows: list[dict[str, Any]], stale_seconds: float) -> str:
    return render_to_string(SCHEDULERS_TEMPLATE, schedulers_context(rows, stale_seconds))


def schedulers_context(rows: list[dict[str, Any]], stale_seconds: float) -> dict[str, Any]:
    """Each scheduler alive as a bar: how long ago its loop completed a pass, on a log scale
    whose dashed line is ``PASS_STALE_SECONDS`` (past it, the scheduler is stale). The
    rows are ``operations.scheduler_rows``: ``beat``, ``age`` (seconds or None), ``state``."""
    top_seconds = stale_seconds * 2
    span = math.log10(top_seconds / A_LOW_SECONDS)

    def x_of(seconds: float) -> float:
        clamped = min(max(seconds, A_LOW_SECONDS), top_seconds)
        return A_LEFT + A_PLOT_W * math.log10(clamped / A_LOW_SECONDS) / span

    bars = []
    for n, row in enumerate(rows[:A_SHOWN]):
        beat, age, state = row["beat"], row["age"], row["state"]
        y = A_TOP + n * A_ROW
        shape, letter, filled, status = STATE_MARKS[state]
        mark_x, mark_y = A_LEFT + A_PLOT_W + 16, y + A_ROW / 2
        waiting = sum(lane.waiting for lane in beat.lanes.values())
        if age is None:
            age_text = gettext("no pass yet")
        else:
            age_text = gettext("last pass %(seconds).1f s ago") % {"seconds": age}
        details = [beat.id, f"{beat.host}, pid {beat.pid}, {beat.version}", age_text]
        details.append(
            ngettext("%(n)d batch waiting", "%(n)d batches waiting", waiting) % {"n": waiting}
        )
        if beat.last_error:
            details.append(beat.last_error)
        bars.append(
            {
                "label": beat.id if len(beat.id) <= 32 else beat.id[:31] + "…",
                "label_y": y + A_ROW / 2,
                "y": y + 7,
                "width": 0 if age is None else max(x_of(age) - A_LEFT, 1),
                "past_stale": age is not None and age >= stale_seconds,
                "state_label": row["state_label"],
                "title": " · ".join(details),
                "mark": {
                    "status": status,
                    "filled": filled,
                    "shape": shape,
                    "letter": letter,
                    "x": mark_x,
                    "y": mark_y,
                    "corner_x": mark_x - S_GLYPH,
                    "corner_y": mark_y - S_GLYPH,
                    "points": _shape_points(shape, mark_x, mark_y),
                },
                "text_x": mark_x + 14,
            }
        )
    height = A_TOP + max(len(bars), 1) * A_ROW + 34
    ticks = [
        {"x": x_of(s), "label": f"{s:g} s"}
        for s in (0.1, 1, 10, 100, 1000, 10000)
        if A_LOW_SECONDS <= s <= top_seconds and abs(s - stale_seconds) > stale_seconds / 4
    ]
    stale = sum(bar["past_stale"] for bar in bars)
    summary = ngettext("%(n)d scheduler alive", "%(n)d schedulers alive", len(rows)) % {
        "n": len(rows)
    } + (
        ngettext(", %(stale)d of them stale", ", %(stale)d of them stale", stale) % {"stale": stale}
        if stale
        else ""
    )
    return {
        "bars": bars,
        "more": max(len(rows) - A_SHOWN, 0),
        "width": A_LEFT + A_PLOT_W + A_RIGHT,
        "height": height,
        "left": A_LEFT,
        "right": A_LEFT + A_PLOT_W,
        "top": A_TOP - 6,
        "base": height - 28,
        "label_x": A_LEFT - 8,
        "tick_label_y": height - 12,
        "ticks": ticks,
        "stale_x": x_of(stale_seconds),
        "stale_label": gettext("stale after %(seconds)g s") % {"seconds": stale_seconds},
        "summary": summary,
    }
