"""``manage.py import_schedules``: schedules from django-celery-beat, CELERY_BEAT_SCHEDULE
or a crontab file, created in one transaction."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils.module_loading import import_string

from django_schedulinator.dispatch import DEFAULT_ALIAS
from django_schedulinator.errors import ServiceError, validation_message
from django_schedulinator.importers import TaskNames, import_found
from django_schedulinator.index import clock
from django_schedulinator.management.commands.schedule import duration
from django_schedulinator.models import ScheduleChange
from django_schedulinator.services import Origin
from django_schedulinator.timing.describe import DAY_RULE_TEXT
from django_schedulinator.timing.solar import describe_solar
from django_schedulinator.timing.vocabulary import DayRule

SOURCES = ("django-celery-beat", "celery-beat-schedule", "crontab")


class Command(BaseCommand):
    help = (
        "Import schedules from django-celery-beat's tables, the CELERY_BEAT_SCHEDULE setting "
        "or a crontab file, in one transaction. What cannot be mapped is listed with the "
        "reason and left out; a name that exists is left out, so a second run imports "
        "nothing new. Imported schedules start at their next occurrence after now."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--from", dest="source", choices=SOURCES, required=True)
        parser.add_argument("file", nargs="?", help="The crontab file (--from crontab).")
        parser.add_argument(
            "--map",
            action="append",
            default=[],
            metavar="NAME=REGISTERED",
            help="Send the task NAME of the source to the registered task REGISTERED "
            "(repeatable). Without it, a registered task of the same name is used.",
        )
        parser.add_argument(
            "--dispatcher",
            default=DEFAULT_ALIAS,
            help="The dispatcher alias of the imported schedules (a Celery dispatcher keeps "
            "sending to the same Celery tasks). Default: %(default)s.",
        )
        parser.add_argument(
            "--timezone",
            help="The zone of the crontab's times (default: TIME_ZONE), or of "
            "CELERY_BEAT_SCHEDULE's crontabs (default: CELERY_TIMEZONE, else UTC).",
        )
        parser.add_argument(
            "--celery-app",
            help="With --from celery-beat-schedule: read app.conf.beat_schedule of this "
            "Celery app (a dotted path) instead of the setting.",
        )
        parser.add_argument(
            "--grace",
            type=duration,
            help="The grace of the imported schedules' missed-run alerts: seconds, HH:MM:SS "
            "or ISO 8601 (PT5M). Default: none (no alert).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Print what would be imported; write nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        source = options["source"]
        if (source == "crontab") != bool(options["file"]):
            raise CommandError(
                "--from crontab needs the file to read (and the other sources take none)."
            )
        names = TaskNames(_mapping(options["map"]))
        dispatcher = options["dispatcher"]
        grace = options["grace"]
        if isinstance(grace, str):  # call_command() with grace="..." skips argparse
            try:
                grace = duration(grace)
            except argparse.ArgumentTypeError as exc:
                raise CommandError(f"--grace: {exc}.") from None
        found = list(self._found(source, options, names, dispatcher))
        if grace is not None:
            found = [
                replace(item, fields={**item.fields, "grace": grace})
                if item.fields is not None
                else item
                for item in found
            ]
        try:
            result = import_found(
                found,
                origin=Origin(None, ScheduleChange.Source.COMMAND),
                dry_run=options["dry_run"],
            )
        except (ValidationError, ServiceError) as exc:
            message = validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
            raise CommandError(f"The import stopped and imported nothing: {message}") from None
        verb = "would create" if result.dry_run else "created"
        for schedule in result.created:
            self.stdout.write(f"{verb} {schedule.name!r}: {_describe(schedule)}")
            where, changes = result.changes.get(schedule.name, ("", ()))
            for change in changes:
                self.stdout.write(f"  {where}: {change}")
        for where, reason in result.skipped:
            self.stdout.write(f"skipped {where}: {reason}")
        self.stdout.write(
            f"{'Would import' if result.dry_run else 'Imported'} {len(result.created)} "
            f"schedule(s); left out {len(result.skipped)}."
        )

    def _found(
        self, source: str, options: dict[str, Any], names: TaskNames, dispatcher: str
    ) -> Any:
        if source == "django-celery-beat":
            from django_schedulinator.importers.celery_beat import from_tables

            try:
                return list(from_tables(names, dispatcher))
            except LookupError as exc:
                raise CommandError(str(exc)) from None
        if source == "celery-beat-schedule":
            from django_schedulinator.importers.celery_beat import from_setting

            if options["celery_app"]:
                try:
                    app = import_string(options["celery_app"])
                except ImportError as exc:
                    raise CommandError(f"--celery-app: {exc}") from None
                schedule = app.conf.beat_schedule or {}
                zone = options["timezone"] or str(app.conf.timezone or "UTC")
            else:
                schedule = getattr(settings, "CELERY_BEAT_SCHEDULE", None) or {}
                zone = options["timezone"] or getattr(settings, "CELERY_TIMEZONE", None) or "UTC"
            if not isinstance(schedule, dict):
                raise CommandError(f"The beat schedule must be a dict, got {schedule!r}.")
            return list(from_setting(schedule, names, dispatcher, str(zone)))
        from django_schedulinator.importers.crontab import from_file

        path = Path(options["file"])
        try:
            text = path.read_text()
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc}") from None
        zone = options["timezone"] or settings.TIME_ZONE
        return list(from_file(text, str(path), zone))


def _mapping(pairs: list[str]) -> dict[str, str]:
    mapping = {}
    for pair in pairs:
        name, sep, registered = pair.partition("=")
        if not (sep and name and registered):
            raise CommandError(f"--map takes NAME=REGISTERED, got {pair!r}.")
        mapping[name] = registered
    return mapping


def _describe(schedule: Any) -> str:
    days = ", " + DAY_RULE_TEXT[DayRule.BOTH] if schedule.day_rule == DayRule.BOTH else ""
    timing = {
        "cron": f"cron {schedule.cron!r} in {schedule.timezone}{days}",
        "interval": f"every {schedule.interval}",
        "once": f"once at {schedule.run_at}",
        "solar": "solar: "
        + describe_solar(
            schedule.solar_event, schedule.latitude, schedule.longitude, schedule.solar_offset
        ),
    }[schedule.kind]
    args = f" with args {schedule.args}" if schedule.args else ""
    extra = f", dispatch options {schedule.dispatch_options}" if schedule.dispatch_options else ""
    paused = " (paused)" if not schedule.enabled else ""
    grace = f", grace {schedule.grace}" if schedule.grace is not None else ""
    # Created: its next run as decided; in a dry run, as it would be.
    left = schedule.next_run_at if schedule.pk else schedule.first_run_at(clock.now())
    finished = ", finished: no run left" if left is None else ""
    return (
        f"{timing}, task {schedule.task!r}{args}, dispatcher {schedule.dispatcher!r}{extra}"
        f"{grace}{finished}{paused}"
    )
