from __future__ import annotations

from django.apps import AppConfig


class SchedulinatorConfig(AppConfig):
    name = "django_schedulinator"
    verbose_name = "Schedulinator"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Wiring only, no I/O: signals, system checks, and the apps' task modules.
        from django.core.signals import setting_changed
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_delete, post_migrate, post_save
        from django.utils.module_loading import autodiscover_modules

        # Imported for what they register: the checks, the built-in command task, and the
        # parsers of the nested settings (conf.Setting.parsed_by: the command task's, the
        # Redis connection's, and those of dispatch, the notifiers and contrib.sentry, below).
        from django_schedulinator import checks  # noqa: F401
        from django_schedulinator.conf import app_settings
        from django_schedulinator.index import connection  # noqa: F401
        from django_schedulinator.index.receivers import (
            replan_after_migrate,
            schedule_changed,
            sync_after_migrate,
        )
        from django_schedulinator.management import task as command_task  # noqa: F401
        from django_schedulinator.models import Schedule
        from django_schedulinator.operations import notifiers  # noqa: F401
        from django_schedulinator.operations.receivers import connect_receivers, settings_changed

        post_migrate.connect(
            replan_after_migrate, sender=self, dispatch_uid="schedulinator_zone_rules"
        )
        post_migrate.connect(
            sync_after_migrate, sender=self, dispatch_uid="schedulinator_sync_declared"
        )
        post_save.connect(schedule_changed, sender=Schedule, dispatch_uid="schedulinator_save")
        post_delete.connect(schedule_changed, sender=Schedule, dispatch_uid="schedulinator_delete")
        # A scheduler's threads bound their row-lock waits on the connections they open too.
        from django_schedulinator.scheduler.transient import bound_new_connections

        connection_created.connect(bound_new_connections, dispatch_uid="schedulinator_lock_waits")
        # The notifier hears the signals of the events it is told of (NOTIFY's EVENTS).
        connect_receivers()
        setting_changed.connect(settings_changed, dispatch_uid="schedulinator_notify_settings")
        # The dispatcher aliases follow the setting (override_settings), as Django's caches.
        from django_schedulinator.dispatch import settings_changed as dispatchers_changed

        setting_changed.connect(dispatchers_changed, dispatch_uid="schedulinator_dispatchers")
        autodiscover_modules(app_settings.TASKS_MODULE)
        # Outcomes of Django tasks come back through that framework's signals, if installed.
        from django_schedulinator.dispatch.tasks import connect_signals

        connect_signals()
        # Sentry Crons check-ins, when SENTRY_CRONS is on and sentry-sdk is installed; again
        # whenever the setting changes (override_settings).
        from django_schedulinator.contrib import sentry

        sentry.connect()
        setting_changed.connect(sentry.connect, dispatch_uid="schedulinator_sentry_setting")
