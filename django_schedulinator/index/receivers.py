"""Thin signal handlers: after the transaction commits, mirror the row into the index.

A rolled-back edit never reaches Redis because the write happens in ``on_commit``.
"""

from __future__ import annotations

from typing import Any

from django_schedulinator.index.sync import resync_on_commit


def schedule_changed(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    resync_on_commit([instance.pk], using=using)


def sync_after_migrate(sender: Any, using: str, verbosity: int = 1, **kwargs: Any) -> None:
    """After ``migrate``: the schedules declared in code, synced into the table (on the
    database that holds it, once its table is there)."""
    import sys

    from django.db import DatabaseError, connections, router

    from django_schedulinator.models import Schedule
    from django_schedulinator.services import sync_declared

    if router.db_for_write(Schedule) != using:
        return
    if Schedule._meta.db_table not in connections[using].introspection.table_names():
        return  # migrated back to before this app
    try:
        result = sync_declared()
    except DatabaseError as exc:  # migrated back to before declared_in, say
        print(f"  Schedules declared in code were not synced: {exc}", file=sys.stderr)
        return
    if verbosity:
        for line in result.lines():
            print(f"  Schedules declared in code: {line}")
    for problem in result.problems:
        print(f"  Schedules declared in code: error: {problem}", file=sys.stderr)


def replan_after_migrate(sender: Any, using: str, **kwargs: Any) -> None:
    """After ``migrate``: if the time-zone database is not the one the next runs were
    computed with, re-plan the schedules of the zones whose rules changed (on the database
    that holds them, once the table is there)."""
    import logging

    from django.db import connections, router

    from django_schedulinator.models import ZoneRules
    from django_schedulinator.services import replan_for_zone_rules

    if router.db_for_write(ZoneRules) != using:
        return
    if ZoneRules._meta.db_table not in connections[using].introspection.table_names():
        return  # migrated back to before it
    try:
        replan_for_zone_rules(using=using)
    except Exception:
        logging.getLogger("django_schedulinator.services").exception(
            "Could not compare the time-zone database with the one the next runs were "
            "computed with; run manage.py migrate again to retry."
        )
