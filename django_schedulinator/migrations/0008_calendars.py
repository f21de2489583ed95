# Calendars of excluded days (holidays), the calendars a schedule names and what it does on
# an excluded day, and the skip reason "calendar".

import django.db.models.deletion
from django.db import migrations, models

import django_schedulinator.models
import django_schedulinator.validators


class Migration(migrations.Migration):
    dependencies = [
        ("django_schedulinator", "0007_zone_rules"),
    ]

    operations = [
        migrations.CreateModel(
            name="Calendar",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "name",
                    models.SlugField(
                        help_text="How schedules name it: letters, digits, - and _.",
                        max_length=100,
                        unique=True,
                        verbose_name="name",
                    ),
                ),
                (
                    "description",
                    models.CharField(blank=True, max_length=500, verbose_name="description"),
                ),
                (
                    "timezone",
                    models.CharField(
                        default=django_schedulinator.models.default_timezone,
                        help_text="IANA zone whose midnights start and end its days.",
                        max_length=64,
                        verbose_name="timezone",
                    ),
                ),
                (
                    "weekend",
                    models.JSONField(
                        blank=True,
                        default=django_schedulinator.models.default_weekend,
                        help_text="ISO weekdays (1 is Monday, 7 Sunday) that are not business days: an occurrence is never moved onto one.",
                        validators=[django_schedulinator.validators.validate_weekend],
                        verbose_name="weekend",
                    ),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("manual", "By hand"),
                            ("holidays", "Public holidays (the holidays package)"),
                            ("ical", "An iCalendar file"),
                        ],
                        default="manual",
                        max_length=16,
                        verbose_name="source",
                    ),
                ),
                (
                    "country",
                    models.CharField(
                        blank=True,
                        help_text="Public holidays: an ISO 3166 country code, such as GB or US.",
                        max_length=8,
                        verbose_name="country",
                    ),
                ),
                (
                    "subdivision",
                    models.CharField(
                        blank=True,
                        help_text="Public holidays: a region the holidays package knows, such as ENG or CA.",
                        max_length=16,
                        verbose_name="subdivision",
                    ),
                ),
                (
                    "stamp",
                    models.CharField(
                        default=django_schedulinator.models.new_stamp,
                        editable=False,
                        max_length=32,
                        verbose_name="stamp",
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True, verbose_name="updated at")),
            ],
            options={
                "verbose_name": "calendar",
                "verbose_name_plural": "calendars",
                "ordering": ("name",),
            },
        ),
        migrations.AddField(
            model_name="schedule",
            name="calendar_rule",
            field=models.CharField(
                choices=[
                    ("skip", "Skip it"),
                    ("next_business_day", "Move it to the next business day"),
                ],
                default="skip",
                help_text="An occurrence on a day one of the calendars excludes is skipped, or moved to the same local time on the next business day.",
                max_length=24,
                verbose_name="on an excluded day",
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="calendars",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="Names of calendars of excluded days (holidays): no occurrence fires on them.",
                validators=[django_schedulinator.validators.validate_calendar_names],
                verbose_name="calendars",
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="skip_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("missed", "Missed (catch-up policy)"),
                    ("expired", "Expired (a one-off too late)"),
                    ("dst", "Local time does not exist (DST policy)"),
                    ("overlap", "Previous run still running (overlap policy)"),
                    ("paused", "Schedule paused"),
                    ("replaced", "Replaced by a run now"),
                    ("calendar", "Excluded day (calendar)"),
                ],
                max_length=16,
                verbose_name="skip reason",
            ),
        ),
        migrations.CreateModel(
            name="ExcludedDay",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField(verbose_name="day")),
                ("name", models.CharField(blank=True, max_length=200, verbose_name="name")),
                (
                    "calendar",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="days",
                        to="django_schedulinator.calendar",
                        verbose_name="calendar",
                    ),
                ),
            ],
            options={
                "verbose_name": "excluded day",
                "verbose_name_plural": "excluded days",
                "ordering": ("day",),
                "constraints": [
                    models.UniqueConstraint(
                        fields=("calendar", "day"), name="schedulinator_day_once"
                    )
                ],
            },
        ),
    ]
