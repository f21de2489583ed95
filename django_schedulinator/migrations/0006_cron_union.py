# The cron field holds several expressions (their union): a longer field.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_schedulinator", "0005_missed_runs"),
    ]

    operations = [
        migrations.AlterField(
            model_name="schedule",
            name="cron",
            field=models.CharField(
                blank=True,
                help_text="5 fields (minute hour day month weekday), an optional leading seconds field, or @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually. Several expressions separated by ; fire at each time any of them matches.",
                max_length=1000,
                verbose_name="cron",
            ),
        ),
    ]
