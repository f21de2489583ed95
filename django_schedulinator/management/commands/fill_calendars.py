"""``manage.py fill_calendars``: read the days of calendars again from their source (the
public holidays of a country, or an iCalendar file), through the services, which re-plan
the schedules that name them. Run it once a year, and after upgrading ``holidays``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from django_schedulinator import services
from django_schedulinator.importers import days as calendars
from django_schedulinator.index import clock
from django_schedulinator.models import Calendar, ScheduleChange
from django_schedulinator.services import Origin


def years(value: str) -> range:
    try:
        return calendars.parse_years(value, clock.now().date())
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(exc.messages[0]) from None


class Command(BaseCommand):
    help = (
        "Read the days of calendars again from their source: every calendar of public "
        "holidays, or those named; one named calendar from an iCalendar file. The schedules "
        "that name them are re-planned."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME", help="The calendars to fill.")
        parser.add_argument(
            "--years",
            type=years,
            default=None,
            metavar="FIRST-LAST",
            help="The years to fill, such as 2026-2036 (default: last year to ten years ahead).",
        )
        parser.add_argument(
            "--icalendar",
            type=Path,
            default=None,
            metavar="FILE",
            help="An iCalendar file to read the days of the one calendar named from.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        names: list[str] = options["names"]
        ical_path: Path | None = options["icalendar"]
        span = options["years"]
        if isinstance(span, str):  # call_command() passes it through unconverted
            span = years(span)
        data = None
        if ical_path is not None:
            if len(names) != 1:
                raise CommandError("--icalendar fills one calendar: name it.")
            try:
                data = ical_path.read_bytes()
            except OSError as exc:
                raise CommandError(f"Cannot read {ical_path}: {exc.strerror}.") from None
        if names:
            found = {c.name: c for c in Calendar.objects.filter(name__in=names)}
            missing = [name for name in names if name not in found]
            if missing:
                raise CommandError(f"No calendar is named {', '.join(missing)}.")
            chosen = [found[name] for name in names]
        else:
            chosen = list(Calendar.objects.filter(source=Calendar.Source.HOLIDAYS))
            if not chosen:
                self.stdout.write("No calendar is filled from public holidays.")
                return
        origin = Origin(None, ScheduleChange.Source.COMMAND)
        failed = 0
        for calendar in chosen:
            try:
                moved = services.fill_calendar(calendar, years=span, icalendar=data, origin=origin)
            except ValidationError as exc:
                failed += 1
                self.stderr.write(f"{calendar.name}: {' '.join(exc.messages)}")
                continue
            self.stdout.write(
                f"{calendar.name}: {calendar.days.count()} day(s); re-planned {moved} schedule(s)."
            )
        if failed:
            raise CommandError(f"{failed} calendar(s) could not be filled.")
