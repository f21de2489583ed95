"""System checks. Ids are stable; those needing Redis run only under ``check --database``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from django_schedulinator.conf import DEFAULTS, SETTING_NAME, app_settings
from django_schedulinator.index import connection
from django_schedulinator.management import run_command

REDIS_BACKEND = "django_redis.cache.RedisCache"


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = [
        Error(str(problem), id="schedulinator.E001") for problem in app_settings.validate()
    ]
    if messages:
        return messages
    for key in app_settings.unknown_keys():
        messages.append(
            Warning(
                f"{SETTING_NAME}[{key!r}] is not a known setting and is ignored.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="schedulinator.W001",
            )
        )
    alias = app_settings.CACHE_ALIAS
    cache = settings.CACHES.get(alias)
    if app_settings.REDIS is not None:
        pass  # the index has a Redis of its own: the cache alias is not used
    elif cache is None:
        messages.append(
            Error(
                f"{SETTING_NAME}['CACHE_ALIAS'] is {alias!r}, which is not in CACHES.",
                hint=f"Add a django-redis cache named {alias!r} to CACHES.",
                id="schedulinator.E002",
            )
        )
    elif cache.get("BACKEND") != REDIS_BACKEND:
        messages.append(
            Error(
                f"CACHES[{alias!r}] must use {REDIS_BACKEND!r} to hold the due index.",
                hint="Point SCHEDULINATOR['CACHE_ALIAS'] at a django-redis cache.",
                id="schedulinator.E003",
            )
        )
    if not settings.USE_TZ:
        messages.append(
            Error(
                "django-schedulinator stores and compares UTC instants and needs USE_TZ = True.",
                id="schedulinator.E005",
            )
        )
    messages += dispatcher_messages(connect=False)
    return messages


def dispatcher_messages(*, connect: bool) -> list[CheckMessage]:
    """Each dispatcher alias: its BACKEND and OPTIONS (E004), then its own checks; with
    ``connect``, whether what it hands off to can be reached."""
    from django_schedulinator.dispatch import dispatchers

    messages: list[CheckMessage] = []
    for alias in dispatchers.aliases():
        try:
            dispatcher = dispatchers[alias]
        except ImproperlyConfigured as exc:
            if not connect:  # said once, by the check without --database
                messages.append(Error(str(exc), id="schedulinator.E004"))
            continue
        messages += dispatcher.check(connect=connect)
    return messages


@register(Tags.database)
def check_dispatchers(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    if not databases:  # only under `check --database`: it talks to brokers and receivers
        return []
    try:
        app_settings.DISPATCHERS  # noqa: B018 - a bad setting is check_settings' E001
    except ImproperlyConfigured:
        return []
    return dispatcher_messages(connect=True)


@register(Tags.database)
def check_index(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    from django_schedulinator.index.due import get_index
    from django_schedulinator.operations.index_health import eviction_risk

    if not databases:  # only under `check --database`: it talks to Redis
        return []

    try:
        index = get_index()
        built = index.is_built()
    except ImproperlyConfigured:
        return []  # reported by check_settings
    except Exception as exc:
        return [
            Warning(
                f"Redis for the due index is not reachable: {exc}",
                hint=f"Check the address of {connection.describe()}.",
                id="schedulinator.W010",
            )
        ]
    messages: list[CheckMessage] = []
    other = index.other_layout()
    if other is not None:
        messages.append(
            Warning(
                f"The due index was built for {other} shard(s), and INDEX_SHARDS is "
                f"{index.shard_count}: schedulers claim nothing until it is rebuilt.",
                hint=f"Give every process the same INDEX_SHARDS, then run "
                f"{run_command('rebuild_due_index')}.",
                id="schedulinator.W011",
            )
        )
    elif not built and schedules_wait(databases):
        messages.append(
            Warning(
                "The due index has not been built in this Redis.",
                hint=f"Run {run_command('rebuild_due_index')} (run_scheduler also builds it "
                "on start).",
                id="schedulinator.W011",
            )
        )
    risk = eviction_risk(index.client)
    if risk:
        messages.append(
            Warning(
                risk,
                hint="CONFIG SET maxmemory-policy noeviction (or volatile-lru), or set it in "
                "your managed Redis's parameter group.",
                id="schedulinator.W012",
            )
        )
    return messages


def schedules_wait(databases: Any) -> bool:
    """Whether a schedule of the checked databases belongs in the index (enabled, with a
    next run): what an index not built keeps from firing. A new project has none, nor a
    table yet when ``migrate`` runs the checks, so W011 tells it nothing it must do."""
    from django.db import DatabaseError, connections, router

    from django_schedulinator.index.sync import IN_INDEX
    from django_schedulinator.models import Schedule

    alias = router.db_for_read(Schedule)
    if alias not in databases:
        return False
    try:
        if Schedule._meta.db_table not in connections[alias].introspection.table_names():
            return False  # not migrated yet
        return Schedule.objects.using(alias).filter(IN_INDEX).exists()
    except DatabaseError:
        return False  # a database the check cannot read: Django's own checks say so


@register()
def check_notify(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The notifier of missed runs: a BACKEND that cannot be used (E050), OPTIONS it does
    not take or that name what is not configured, such as a webhook target (E051); a mail
    notifier set up explicitly with nobody in ADMINS (W050)."""
    from django_schedulinator.operations.notifiers import WHERE, MailNotifier, backend_class

    try:
        config = app_settings.NOTIFY
    except ImproperlyConfigured:
        return []  # E001 says so
    if config is None:
        return []
    try:
        cls = backend_class(config)
    except ImproperlyConfigured as exc:
        return [
            Error(
                str(exc),
                hint="Name a subclass of django_schedulinator.operations.notifiers.BaseNotifier, "
                "such as django_schedulinator.operations.notifiers.MailNotifier or "
                "django_schedulinator.operations.notifiers.WebhookNotifier.",
                id="schedulinator.E050",
            )
        ]
    problems = cls.option_problems(config.options)
    if problems:
        return [Error(f"{WHERE}['OPTIONS']: {'; '.join(problems)}.", id="schedulinator.E051")]
    explicit = "NOTIFY" in app_settings.user_keys()
    if issubclass(cls, MailNotifier) and explicit and not settings.ADMINS:
        return [
            Warning(
                f"{WHERE} mails ADMINS, which is empty: nobody is told of missed runs.",
                hint="Set ADMINS, or another notifier (docs/alerts.md).",
                id="schedulinator.W050",
            )
        ]
    return []


@register()
def check_declared(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Schedules declared in code that cannot be synced (an invalid field, a name declared
    twice). Warnings, not errors: one bad declaration must not stop the schedulers (or
    migrate) of all the others; the sync leaves it out and logs it, and
    ``sync_schedules --dry-run`` exits 1 on it, to gate a deploy. A clash with a schedule
    made by hand needs the database: that command finds it too."""
    from django_schedulinator.services import validated_declarations

    try:
        _, problems = validated_declarations()
    except ImproperlyConfigured as exc:  # SCHEDULES is not a dict: E001 says so
        return [Warning(str(exc), id="schedulinator.W030")]
    return [
        Warning(problem, hint="Fix the declaration in the code.", id="schedulinator.W030")
        for problem in problems
    ]


@register()
def check_commands(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Each entry of COMMANDS against its command: a name that is no management command,
    an option the command does not take, a flag listed for an option that takes a value
    (or values for a flag). Warnings, like W030: the schedules that use such an entry are
    refused when saved and when run, and the schedulers of all the others go on."""
    from django_schedulinator.management.task import disagreements

    try:
        commands = app_settings.COMMANDS
    except ImproperlyConfigured:  # E001 says so
        return []
    return [
        Warning(
            problem,
            hint="Schedules that use it are refused when they are saved and when they run.",
            id="schedulinator.W040",
        )
        for name, allowed in commands.items()
        for problem in disagreements(name, allowed)
    ]


@register()
def check_sentry(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """SENTRY_CRONS switched on: sentry-sdk must be installed (E070), and initialised with a
    DSN in this process (W070), or no check-in is ever sent."""
    from django_schedulinator.contrib import sentry

    if sentry.switched_on() is None:  # off, or invalid: E001 says so
        return []
    if not sentry.available():
        return [
            Error(
                f"{SETTING_NAME}['SENTRY_CRONS'] is on, and sentry-sdk is not installed.",
                hint="pip install 'django-schedulinator[sentry]'",
                id="schedulinator.E070",
            )
        ]
    import sentry_sdk

    if not sentry_sdk.get_client().is_active():
        return [
            Warning(
                f"{SETTING_NAME}['SENTRY_CRONS'] is on, and Sentry is not initialised in this "
                "process: no check-in will be sent from it.",
                hint="Call sentry_sdk.init(dsn=...) in settings.py, so that run_scheduler and "
                "your workers initialise it too.",
                id="schedulinator.W070",
            )
        ]
    return []


@register(deploy=True)
def check_zone_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W080, under ``check --deploy``: ``zoneinfo`` reads the system's time-zone database,
    and the ``tzdata`` package installed is another release. A host without the system's (a
    slim container) reads the package's instead, and computes other next runs for a zone
    whose rules differ between the two: a concern of hosts that run in production, not of a
    laptop's."""
    from django_schedulinator.timing import zonedata

    system, package = zonedata.system(), zonedata.package()
    if system is None or package is None or system.version == package.version:
        return []
    return [
        Warning(
            f"zoneinfo reads the system's time-zone database, {system.version} "
            f"({system.where}), and the tzdata package installed is {package.version}: a "
            "host without the system's database computes next runs with the package's, "
            "which may differ for a zone whose rules changed between the two.",
            hint="Set PYTHONTZPATH to an empty value for every process of the project, so "
            "that zoneinfo reads the tzdata package on every host, or keep the system's "
            "database and the package at one release.",
            id="schedulinator.W080",
        )
    ]
