"""Solar schedules: the kind "solar", its event of the sun, its place (latitude, longitude)
and its offset; nullable or blank, so existing rows need nothing."""

from django.db import migrations, models

import django_schedulinator.models.calendar


class Migration(migrations.Migration):
    dependencies = [
        ("django_schedulinator", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="latitude",
            field=models.FloatField(
                blank=True,
                help_text="Solar: degrees north (negative: south), -90 to 90.",
                null=True,
                verbose_name="latitude",
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="longitude",
            field=models.FloatField(
                blank=True,
                help_text="Solar: degrees east (negative: west), -180 to 180.",
                null=True,
                verbose_name="longitude",
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="solar_event",
            field=models.CharField(
                blank=True,
                choices=[
                    ("dawn_astronomical", "Astronomical dawn (-18°)"),
                    ("dawn_nautical", "Nautical dawn (-12°)"),
                    ("dawn_civil", "Civil dawn (-6°)"),
                    ("sunrise", "Sunrise"),
                    ("solar_noon", "Solar noon"),
                    ("sunset", "Sunset"),
                    ("dusk_civil", "Civil dusk (-6°)"),
                    ("dusk_nautical", "Nautical dusk (-12°)"),
                    ("dusk_astronomical", "Astronomical dusk (-18°)"),
                ],
                help_text="Solar: the event of the sun it fires at, each day it happens at the place (the polar night and the midnight sun pass days over).",
                max_length=24,
                verbose_name="solar event",
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="solar_offset",
            field=models.DurationField(
                blank=True,
                help_text="Solar: fire this long after the event (negative: before it), at most 12 hours either way; for example -00:30:00 for half an hour before sunset.",
                null=True,
                verbose_name="solar offset",
            ),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="kind",
            field=models.CharField(
                choices=[
                    ("cron", "Cron"),
                    ("interval", "Interval"),
                    ("once", "One-off"),
                    ("solar", "Solar (sunrise, sunset, ...)"),
                ],
                default="cron",
                max_length=16,
                verbose_name="kind",
            ),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="timezone",
            field=models.CharField(
                default=django_schedulinator.models.calendar.default_timezone,
                help_text="IANA zone in which the cron expression is evaluated, the previews are shown and the calendars' days are read.",
                max_length=64,
                verbose_name="timezone",
            ),
        ),
    ]
