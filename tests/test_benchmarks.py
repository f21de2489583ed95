"""The benchmarks' settings stay usable: their apps migrate and pass the system checks.

The full benchmark runs as a smoke in .ci/run (``python -m benchmarks.run --smoke``); this
catches the cheapest way for it to rot, an app the migrations depend on missing from
benchmarks/settings.py, within the suite.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings

from benchmarks import settings as bench_settings


@pytest.mark.django_db
def test_the_benchmark_settings_migrate_and_pass_the_checks() -> None:
    # Their apps only; the test settings' TASKS names a backend of an app they leave out.
    with override_settings(INSTALLED_APPS=bench_settings.INSTALLED_APPS, TASKS={}):
        out = StringIO()
        call_command("check", stdout=out)
        # --plan builds the whole migration graph ("Dependency on unknown app" fails here)
        # and compares it with the test database, without writing anything.
        call_command("migrate", plan=True, stdout=out)
