"""A project on SQLite installs no PostgreSQL driver (the demo's venv has none): nothing in
the firing path may import psycopg or psycopg2 before it knows the database is PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from .support.processes import ROOT

# Fire one due schedule on a fresh SQLite file, through the real claim, re-check, advance,
# ledger and inline dispatch, with both drivers unimportable (None in sys.modules makes an
# import raise ImportError, as on a machine without them).
SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["psycopg"] = None
    sys.modules["psycopg2"] = None

    import django
    django.setup()
    from datetime import timedelta
    from django.core.management import call_command
    from django.utils import timezone
    from django_schedulinator.models import Run, Schedule
    from django_schedulinator.scheduler.worker import Worker

    call_command("migrate", run_syncdb=True, verbosity=0)  # the tests app has no migrations
    Schedule.objects.create(
        name="due", task="tests.record", kind=Schedule.Kind.INTERVAL,
        interval=timedelta(hours=1), next_run_at=timezone.now() - timedelta(seconds=1),
    )
    Worker(once=True, worker_id="no-driver").run()
    runs = list(Run.objects.values_list("status", "error"))
    assert [status for status, _ in runs] == ["succeeded"], runs
    print("fired without a PostgreSQL driver")
    """
)


def test_a_sqlite_project_fires_without_a_postgresql_driver(
    tmp_path: Path, key_prefix: str
) -> None:
    database = tmp_path / "db.sqlite3"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "SCHEDULINATOR_TEST_DB": "sqlite",
            "SCHEDULINATOR_TEST_DB_NAME": str(database),
            "SCHEDULINATOR_TEST_PREFIX": key_prefix,  # removed after the test
            "PYTHONPATH": str(ROOT),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fired without a PostgreSQL driver" in result.stdout
