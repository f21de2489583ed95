"""``manage.py schedule``: look at one schedule and act on it by hand.

    schedule preview NAME [--count N]     the next occurrences, local and UTC, DST flagged
    schedule pause NAME [--note TEXT]     stop firing; the note says why
    schedule resume NAME [--catch-up]     fire again (the paused period is skipped, or
                                          caught up under the catch-up policy)
    schedule run-now NAME [--advance]     queue a run now (--advance: in place of the next)
    schedule backfill NAME --from T --to T [--dry-run]
                                          fire each occurrence in the range not yet fired
    schedule grace NAME [DURATION|off]    the grace of its missed-run alerts: set it
                                          (seconds, HH:MM:SS or ISO 8601), clear it, or
                                          show it with the latest occurrence missed

NAME is a schedule's name, or its id. Times are ISO 8601; without an offset they are read
in the schedule's time zone.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_datetime, parse_duration

from django_schedulinator.errors import ServiceError
from django_schedulinator.management.commands.run_scheduler import positive_int
from django_schedulinator.models import Schedule, ScheduleChange
from django_schedulinator.services import Origin, backfill, pause, resume, run_now, update
from django_schedulinator.timing.instants import get_zone

MAX_PREVIEW = 1000
# What clears a grace.
NO_GRACE = ("off", "none")


def duration(text: str) -> timedelta:
    """A duration typed on the command line (an argparse type): seconds (``300``, ``1.5``),
    ``HH:MM:SS``, ``D HH:MM:SS`` or ISO 8601 (``PT5M``), as the REST API takes them."""
    try:
        return timedelta(seconds=float(text))
    except (ValueError, OverflowError):
        pass
    try:
        parsed = parse_duration(text)
    except (ValueError, OverflowError):
        parsed = None
    if parsed is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give seconds (300), HH:MM:SS (00:05:00) or ISO 8601 "
            "(PT5M)"
        )
    return parsed


def grace(text: str) -> timedelta | None:
    """A grace typed on the command line: a ``duration``, or off (none)."""
    if text.lower() in NO_GRACE:
        return None
    try:
        return duration(text)
    except argparse.ArgumentTypeError as exc:
        raise CommandError(f"{exc}, or off.") from None


# Recorded in the change log: a command has no user.
COMMAND = Origin(None, ScheduleChange.Source.COMMAND)


class Command(BaseCommand):
    help = "Preview, pause, resume, run now or backfill one schedule."

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        def action(name: str, help_text: str) -> Any:
            sub = actions.add_parser(name, help=help_text, description=help_text)
            sub.add_argument("schedule", help="The schedule's name, or its id.")
            return sub

        preview = action("preview", "Show the next occurrences, DST changes flagged.")
        preview.add_argument("--count", type=positive_int, default=10)
        action("pause", "Stop firing until resumed.").add_argument(
            "--note", default="", help="Why (shown with the runs it skips)."
        )
        action("resume", "Fire again.").add_argument(
            "--catch-up",
            action="store_true",
            help="Hand the paused period's occurrences to the catch-up policy instead of "
            "recording them as skipped.",
        )
        action("run-now", "Queue a run now.").add_argument(
            "--advance", action="store_true", help="Let it take the place of the next run."
        )
        fill = action("backfill", "Fire each occurrence in a past range that has not fired.")
        fill.add_argument("--from", dest="start", required=True, metavar="TIME")
        fill.add_argument("--to", dest="end", required=True, metavar="TIME")
        fill.add_argument("--dry-run", action="store_true", help="Count, queue nothing.")
        fill.add_argument(
            "--rerun-pruned",
            action="store_true",
            help="Run again the occurrences whose runs retention deleted, although some may "
            "have run (without it, such a range is refused).",
        )
        action(
            "grace",
            "Set, clear or show how long after its nominal time each run must have "
            "succeeded (missed-run alerts).",
        ).add_argument(
            "duration",
            nargs="?",
            help="Seconds, HH:MM:SS or ISO 8601 (PT5M); off clears it. Left out: show it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        # What was typed is checked before the schedule is looked up.
        new_grace: str | None = options.get("duration")
        setting_grace = action == "grace" and new_grace is not None
        graced = grace(new_grace) if new_grace is not None and setting_grace else None
        schedule = self._schedule(options["schedule"])
        try:
            if action == "preview":
                self._preview(schedule, options["count"])
            elif action == "pause":
                pause(schedule, options["note"], origin=COMMAND)
                self.stdout.write(f"Paused {schedule.name!r}.")
            elif action == "resume":
                resume(schedule, catch_up=options["catch_up"], origin=COMMAND)
                self.stdout.write(f"Resumed {schedule.name!r}; next run {schedule.next_run_at}.")
            elif action == "run-now":
                run = run_now(schedule, advance=options["advance"], origin=COMMAND)
                self.stdout.write(f"Queued run {run.pk} (key {run.idempotency_key}).")
            elif action == "backfill":
                self._backfill(schedule, options)
            elif action == "grace":
                self._grace(schedule, setting_grace, graced)
        except ServiceError as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:  # e.g. a pause note longer than the field allows
            problems = "; ".join(f"{f}: {' '.join(m)}" for f, m in exc.message_dict.items())
            raise CommandError(problems) from exc

    def _schedule(self, key: str) -> Schedule:
        found = Schedule.objects.filter(name=key).first()
        if found is None and key.isdigit():
            found = Schedule.objects.filter(pk=int(key)).first()
        if found is None:
            raise CommandError(f"No schedule is named {key!r} (or has that id).")
        return found

    def _preview(self, schedule: Schedule, count: int) -> None:
        if count > MAX_PREVIEW:
            raise CommandError(f"--count must be at most {MAX_PREVIEW}, got {count}.")
        self.stdout.write(f"{schedule.name}: {schedule.description}")
        if not schedule.enabled:
            self.stdout.write("Paused; these are the occurrences after a resume now.")
        for item in schedule.preview(count):
            flag = "skipped " if item.skipped else ""
            line = f"  {item.local:%Y-%m-%d %H:%M:%S %Z}   {item.at:%Y-%m-%d %H:%M:%S} UTC"
            if item.due_at != item.at:
                line += f"   fires {item.due_at:%H:%M:%S.%f}"[:-3] + " UTC"
            if item.note:
                line += f"   {flag}{item.note}"
            self.stdout.write(line)

    def _grace(self, schedule: Schedule, setting: bool, value: timedelta | None) -> None:
        if setting:
            update(schedule, {"grace": value}, origin=COMMAND)
        shown = str(schedule.grace) if schedule.grace is not None else "none (no alert)"
        self.stdout.write(f"{schedule.name}: grace {shown}.")
        if schedule.missed_at is not None:
            local = schedule.missed_at.astimezone(get_zone(schedule.timezone))
            self.stdout.write(f"Latest occurrence missed: {local:%Y-%m-%d %H:%M:%S %Z}.")

    def _backfill(self, schedule: Schedule, options: dict[str, Any]) -> None:
        start = self._time(options["start"], "--from", schedule)
        end = self._time(options["end"], "--to", schedule)
        report = backfill(
            schedule,
            start,
            end,
            dry_run=options["dry_run"],
            rerun_pruned=options["rerun_pruned"],
            origin=COMMAND,
        )
        verb = "Would queue" if report.dry_run else "Queued"
        again = (
            f" ({report.rerun_pruned} of them pruned from the ledger: they may have run)"
            if report.rerun_pruned
            else ""
        )
        self.stdout.write(
            f"{report.occurrences} occurrence(s) from {start.isoformat()} to {end.isoformat()}: "
            f"{verb} {report.queued} new{again} and {report.requeued} skipped before; "
            f"{report.already} already in the ledger."
        )

    def _time(self, text: str, flag: str, schedule: Schedule) -> datetime:
        try:
            value = parse_datetime(text)
        except ValueError:
            value = None
        if value is None:
            raise CommandError(
                f"{flag} {text!r} is not an ISO 8601 date and time, e.g. 2026-03-29T02:30."
            )
        if value.tzinfo is None:
            value = value.replace(tzinfo=get_zone(schedule.timezone))
        return value
