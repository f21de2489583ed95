"""Settings, read lazily from the one namespaced ``SCHEDULINATOR`` dict: a table of them.

Each key is one ``Setting`` in the body of ``Settings`` below: its default, the parser that
turns what the project gives into the typed value (or raises ``ImproperlyConfigured`` naming
the key), and its bounds. ``app_settings.BATCH_SIZE`` reads settings.SCHEDULINATOR at every
access (never at import), so ``override_settings`` works. The same descriptors give
``validate()`` (the system check E001), the bounds of the management commands' options that
stand in for a setting (``--batch-size``, ``--chunk-size``, ``--keep-last``), and the test of
docs/settings.md's table.

A nested setting (COMMANDS, DISPATCHERS, NOTIFY, REDIS, SENTRY_CRONS) is parsed by the module
that uses it, which hands its parser to the setting when it is imported
(``Setting.parsed_by``): this module is at the bottom of the package and imports none of
them, not even for typing. ``AppConfig.ready()`` imports them all. The types of the parsed
values stay here, so that every reader of ``app_settings`` gets them typed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Generic, Self, TypeVar, overload

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from django_schedulinator.timing.vocabulary import CatchUpMode, NotifyEvent

SETTING_NAME = "SCHEDULINATOR"

T = TypeVar("T")

# The catch-up modes CATCH_UP takes.
CATCH_UP_MODES = tuple(CatchUpMode)
# What a notifier may be told of (SCHEDULINATOR["NOTIFY"]["EVENTS"]).
NOTIFY_EVENTS = tuple(NotifyEvent)

# Settings that were replaced, and what replaced them: named in the error, not ignored.
REPLACED = {"DISPATCHER": "DISPATCHERS (an alias 'default' with BACKEND and OPTIONS)"}

# Characters safe in a Redis key and in a Cluster hash tag: no braces, no spaces.
KEY_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")
MAX_BATCH_SIZE = 5000
MAX_CHUNK_SIZE = 50_000
# Every pass claims from every shard: a round trip each.
MAX_INDEX_SHARDS = 64
MAX_RECONCILE_BATCH_SIZE = 50_000
MAX_DRIFT_SAMPLE_SIZE = 10_000
MAX_API_PAGE_SIZE = 10_000
MAX_PREVIEW_COUNT = 500
MAX_PRUNE_BATCH_SIZE = 10_000
# Messages a minute to one notifier, and misses one digest lists (a mail, a webhook body).
MAX_NOTIFY_MESSAGES = 10_000
MAX_NOTIFY_REPEAT_SECONDS = 31 * 86400  # a month
MAX_DIGEST_SIZE = 1000
# Each schedule's newest runs kept by a prune are found by reading that many index entries.
MAX_KEEP_LAST = 1000
# Retention ages: at least a second, at most a century (older than that is no date).
MAX_RETENTION_SECONDS = 36_500 * 86_400
# Levels of nesting in a schedule's args and kwargs (the list or object itself is the first):
# deeper JSON is refused before anything recurses through it (Python's json does).
MAX_JSON_DEPTH = 100


def user_settings() -> dict[str, Any]:
    """The project's SCHEDULINATOR, as it is now (the keys it leaves out take defaults)."""
    value = getattr(settings, SETTING_NAME, {})
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{SETTING_NAME} must be a dict, got {type(value).__name__}")
    return value


# -- one setting ------------------------------------------------------------------------------

# The parsers of the nested settings, by name, each handed over by the module that uses it.
_delegates: dict[str, Callable[[Setting[Any], Any], Any]] = {}


@dataclass(frozen=True, eq=False)
class Setting(Generic[T]):
    """One key of SCHEDULINATOR. A descriptor: read through an instance (``app_settings``),
    it is the key's value now, parsed; read through the class (``Settings.BATCH_SIZE``), it
    is itself, for its default and bounds."""

    name: str
    # What the key is when the project's setting leaves it out (before it is parsed).
    default: Any
    # The value given (or the default) to the typed value; raises ``setting.error(...)``.
    parse: Callable[[Setting[T], Any], T]
    # The bounds of a number, inclusive, that ``parse`` holds it to; None: none, or not a
    # number. Options of the commands that stand in for the setting take the same.
    minimum: int | None = None
    maximum: int | None = None
    # The module that parses a nested setting (``parse_nested``) and hands its parser over
    # (``parsed_by``), named for the reader and for the error when it has not; None for
    # the settings parsed here.
    parsed_in: str | None = None

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"the setting {self.name!r} is declared as {name!r}")

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, instance: Settings, owner: type | None = None) -> T: ...

    def __get__(self, instance: Settings | None, owner: type | None = None) -> Self | T:
        return self if instance is None else self.read()

    def read(self) -> T:
        """The value now: the project's, or the default; parsed."""
        return self.parse(self, user_settings().get(self.name, self.default))

    def bounds(self) -> tuple[int, int]:
        """The least and the greatest value of a bounded number."""
        if self.minimum is None or self.maximum is None:
            raise TypeError(f"{SETTING_NAME}[{self.name!r}] is no bounded number")
        return self.minimum, self.maximum

    def error(self, problem: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(f"{SETTING_NAME}[{self.name!r}] {problem}")

    def refuse_unknown_keys(
        self, value: dict[Any, Any], keys: Sequence[str], where: str = ""
    ) -> None:
        """Raise ``error`` naming the keys of ``value`` (a nested dict, ``where`` in the
        setting) that are not ``keys``."""
        unknown = sorted(str(key) for key in set(value) - set(keys))
        if unknown:
            raise self.error(
                f"{where}{' ' if where else ''}has unknown keys {', '.join(unknown)}; the keys "
                f"are {', '.join(keys)}"
            )

    def parsed_by(self, parse: Callable[[Setting[T], Any], T]) -> None:
        """Hand a nested setting its parser (the module that uses the setting does, when
        it is imported)."""
        if self.parse is not parse_nested:
            raise TypeError(f"{SETTING_NAME}[{self.name!r}] is parsed in {__name__}")
        _delegates[self.name] = parse


def parse_nested(setting: Setting[T], value: Any) -> T:
    """The parser of a nested setting: the one its module handed over."""
    try:
        parse: Callable[[Setting[T], Any], T] = _delegates[setting.name]
    except KeyError:
        raise RuntimeError(
            f"{SETTING_NAME}[{setting.name!r}] is parsed by {setting.parsed_in}, which has not "
            f"handed its parser over (it does when it is imported, as AppConfig.ready() does): "
            f"is django_schedulinator in INSTALLED_APPS, and Django set up?"
        ) from None
    return parse(setting, value)


# -- the kinds of setting ---------------------------------------------------------------------


def parse_whole_number(setting: Setting[int], value: Any) -> int:
    """A whole number from ``minimum`` (1: "positive") to ``maximum``."""
    low, high = setting.bounds()
    if low == 1:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise setting.error(f"must be a positive integer, got {value!r}")
        if value > high:
            raise setting.error(f"must be at most {high}, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise setting.error(f"must be a whole number from {low} to {high}, got {value!r}")
    return value


def parse_seconds(setting: Setting[float], value: Any) -> float:
    """A positive, finite number of seconds."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise setting.error(f"must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def parse_retention(setting: Setting[float | None], value: Any) -> float | None:
    """A retention age in seconds, from ``minimum`` to ``maximum``; None keeps everything."""
    if value is None:
        return None
    low, high = setting.bounds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise setting.error(
            f"must be None (keep everything) or a number of seconds from {low} to "
            f"{high:,} (a century), got {value!r}"
        )
    return float(value)


def parse_repeat(setting: Setting[float | None], value: Any) -> float | None:
    """A number of seconds from ``minimum`` to ``maximum``; None turns the grouping off."""
    if value is None:
        return None
    low, high = setting.bounds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise setting.error(
            f"must be None (each alert a message of its own) or a number of seconds from "
            f"{low} to {high:,}, got {value!r}"
        )
    return float(value)


def parse_text(setting: Setting[str], value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise setting.error(f"must be a non-empty string, got {value!r}")
    return value


def whole(name: str, default: int, maximum: int, *, minimum: int = 1) -> Setting[int]:
    return Setting(name, default, parse_whole_number, minimum, maximum)


def seconds(name: str, default: float) -> Setting[float]:
    return Setting(name, default, parse_seconds)


def retention(name: str, default: float) -> Setting[float | None]:
    return Setting(name, default, parse_retention, 1, MAX_RETENTION_SECONDS)


def text(name: str, default: str) -> Setting[str]:
    return Setting(name, default, parse_text)


def nested(name: str, default: Any, parsed_in: str) -> Setting[Any]:
    return Setting(name, default, parse_nested, parsed_in=parsed_in)


# -- the settings parsed here that are of no kind above ---------------------------------------


def parse_schedules(setting: Setting[dict[str, Any]], value: Any) -> dict[str, Any]:
    """The declarations by name (each entry is checked by the sync, and the check)."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
        raise setting.error(f"must be a dict of schedules by name, got {value!r}")
    return value


def parse_key_prefix(setting: Setting[str], value: Any) -> str:
    prefix = parse_text(setting, value)
    if not KEY_PREFIX_RE.match(prefix):
        raise setting.error(
            f"must be 1-64 characters from A-Z a-z 0-9 _ . : - (no braces or spaces, "
            f"which would break the Redis Cluster hash tag), got {prefix!r}"
        )
    return prefix


def parse_catch_up(setting: Setting[str], value: Any) -> str:
    if value not in CATCH_UP_MODES:
        raise setting.error(f"must be one of {', '.join(CATCH_UP_MODES)}, got {value!r}")
    return str(value)


def parse_permission_classes(setting: Setting[list[str]], value: Any) -> list[str]:
    if (
        not isinstance(value, list | tuple)
        or not value
        or not all(isinstance(v, str) and v for v in value)
    ):
        raise setting.error(
            f"must be a non-empty list of dotted paths of DRF permission classes, got {value!r}"
        )
    return list(value)


# -- what the nested settings are, parsed (by the modules that use them) -----------------------


@dataclass(frozen=True)
class AllowedCommand:
    """What the schedules of one command in SCHEDULINATOR["COMMANDS"] may pass to it."""

    # The positional arguments they may give, each exactly as written here.
    args: tuple[str, ...] = ()
    # Each option they may give, by its full name: the values it may take, or None for a
    # flag, which takes none.
    options: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    # Whether the run keeps what the command prints (its output, or the error it fails with).
    keep_output: bool = False


@dataclass(frozen=True)
class SentryCrons:
    """Which schedules check in with Sentry Crons, and what their monitors get besides the
    configuration derived from each schedule."""

    # Names and fnmatch patterns of the monitored schedules; None: all of them.
    schedules: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    monitor_config: dict[str, int | str] = field(default_factory=dict)

    def monitors(self, name: str) -> bool:
        """Whether the schedule called ``name`` checks in (patterns match case-sensitively)."""
        if any(fnmatchcase(name, pattern) for pattern in self.exclude):
            return False
        return self.schedules is None or any(fnmatchcase(name, p) for p in self.schedules)


@dataclass(frozen=True)
class NotifyConfig:
    """SCHEDULINATOR["NOTIFY"], checked, with its defaults."""

    backend: str
    options: dict[str, Any]
    events: tuple[str, ...]
    base_url: str  # without a trailing slash; "" when not given


@dataclass(frozen=True)
class RedisConfig:
    """SCHEDULINATOR["REDIS"], checked: one server, a cluster, or a Sentinel service."""

    url: str | None = None  # with CLUSTER, the first startup node's (and the options')
    cluster: bool = False
    # The cluster's other startup nodes (host, port): a client started while the first is
    # down asks them for the slot map.
    startup_nodes: tuple[tuple[str, int], ...] = ()
    sentinels: tuple[tuple[str, int], ...] = ()
    service_name: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    sentinel_options: dict[str, Any] = field(default_factory=dict)


# -- the table ----------------------------------------------------------------------------------


class Settings:
    """Every setting (docs/settings.md has a row for each); ``app_settings.BATCH_SIZE`` reads
    settings.SCHEDULINATOR now. ``validate()`` reports them in this order."""

    # Schedules declared in this setting, by name, each a dict of a schedule's fields
    # ({"task": ..., "cron": ..., ...}), synced into the table like those of @scheduled.
    SCHEDULES = Setting("SCHEDULES", {}, parse_schedules)
    # The management commands the built-in task "django_schedulinator.command" may run, each
    # with what its schedules may pass: {"clearsessions": {}, "dumpdata": {"args": ["auth"],
    # "options": {"--indent": ["2"]}, "keep_output": False}}. Nothing else can be run
    # through it, whatever a schedule's args say.
    COMMANDS: Setting[dict[str, AllowedCommand]] = nested(
        "COMMANDS", {}, "django_schedulinator.management.task"
    )
    # The django-redis cache alias whose connection holds the due index.
    CACHE_ALIAS = text("CACHE_ALIAS", "default")
    # Or a Redis of the app's own, in place of CACHE_ALIAS's: {"URL": "redis://host:6379/0"},
    # {"URL": a node's URL, or a list of several (the startup nodes), "CLUSTER": True} for a
    # Redis Cluster, or {"SENTINELS":
    # [["host", 26379], ...], "SERVICE_NAME": "mymaster"} for Sentinel; "OPTIONS": the
    # redis-py client's keyword arguments (timeouts, password, ssl, db), "SENTINEL_OPTIONS":
    # those of the connections to the sentinels. None: CACHE_ALIAS's connection.
    REDIS: Setting[RedisConfig | None] = nested(
        "REDIS", None, "django_schedulinator.index.connection"
    )
    # Namespaces every Redis key; also the Redis Cluster hash tag of the index.
    KEY_PREFIX = Setting("KEY_PREFIX", "schedulinator", parse_key_prefix)
    # Independent due indexes, each under a hash tag of its own ({KEY_PREFIX} for shard 0,
    # {KEY_PREFIX:k} for shard k), so that a Redis Cluster spreads them over its masters. A
    # schedule lives in shard id % INDEX_SHARDS. Changing it is a rebuild (docs/scaling.md).
    INDEX_SHARDS = whole("INDEX_SHARDS", 1, MAX_INDEX_SHARDS)
    # Dispatchers by alias, shaped like CACHES: {"alias": {"BACKEND": dotted path of a
    # dispatch.base.BaseDispatcher subclass, "OPTIONS": {...}}}. Each schedule names one
    # (Schedule.dispatcher); "default" is the inline dispatcher unless set here. Parsed:
    # every alias with its BACKEND and OPTIONS; "default" is always there.
    DISPATCHERS: Setting[dict[str, dict[str, Any]]] = nested(
        "DISPATCHERS", {}, "django_schedulinator.dispatch"
    )
    # The scheduler's own statements wait at most this long for a row lock that another
    # transaction holds (PostgreSQL's lock_timeout on its connections; tasks keep theirs).
    # Due rows held locked are skipped, not waited for; this bounds every other wait.
    LOCK_TIMEOUT_SECONDS = seconds("LOCK_TIMEOUT_SECONDS", 2.0)
    # Threads of the inline dispatcher's bounded pool.
    INLINE_MAX_WORKERS = whole("INLINE_MAX_WORKERS", 8, 256)
    # Entries claimed per Lua call (and rows per SQL batch) by run_scheduler.
    BATCH_SIZE = whole("BATCH_SIZE", 500, MAX_BATCH_SIZE)
    # Seconds a claimed entry (Redis) or a pending run (SQL) stays leased to one process.
    LEASE_SECONDS = seconds("LEASE_SECONDS", 30.0)
    # Upper bound of the sleep between passes; the real sleep is jittered below it.
    MAX_SLEEP_SECONDS = seconds("MAX_SLEEP_SECONDS", 1.0)
    # Rows per chunk when rebuilding or resyncing the index.
    REBUILD_CHUNK_SIZE = whole("REBUILD_CHUNK_SIZE", 2000, MAX_CHUNK_SIZE)
    # Module name looked up in every installed app for @task registrations.
    TASKS_MODULE = text("TASKS_MODULE", "scheduled_tasks")
    # Largest args + kwargs of one schedule, in bytes of JSON: every occurrence copies them
    # into the ledger, so a runaway payload would multiply.
    MAX_PAYLOAD_BYTES = whole("MAX_PAYLOAD_BYTES", 65_536, 16 * 1024 * 1024)
    # An inline task running longer than this is cut off: its run is recorded as failed and
    # its thread is abandoned (a task may set its own with @task(timeout=...)).
    TASK_TIMEOUT_SECONDS = seconds("TASK_TIMEOUT_SECONDS", 300.0)
    # How often one of the schedulers re-indexes rows changed since the last reconcile
    # (heals sync writes that never reached Redis), and how many rows one pass reads.
    RECONCILE_SECONDS = seconds("RECONCILE_SECONDS", 10.0)
    RECONCILE_BATCH_SIZE = whole("RECONCILE_BATCH_SIZE", 1000, MAX_RECONCILE_BATCH_SIZE)
    # Each reconcile looks this far behind its watermark again: a row saved by a transaction
    # that committed late carries an earlier updated_at.
    RECONCILE_LOOKBACK_SECONDS = seconds("RECONCILE_LOOKBACK_SECONDS", 300.0)
    # A reconcile pass that is behind (a bulk write touched many rows) reads batches for up
    # to this long (a monotonic clock), between two claim passes of the scheduler doing it;
    # that scheduler goes on with slice after slice, without sleeping, until it has caught up.
    RECONCILE_MAX_SECONDS = seconds("RECONCILE_MAX_SECONDS", 0.1)
    # How often one of the schedulers compares the index with the rows and logs the result,
    # and how many entries and rows it samples.
    DRIFT_CHECK_SECONDS = seconds("DRIFT_CHECK_SECONDS", 300.0)
    DRIFT_SAMPLE_SIZE = whole("DRIFT_SAMPLE_SIZE", 200, MAX_DRIFT_SAMPLE_SIZE)
    # How often each scheduler logs its counters (claimed, fired, repaired, ...) at INFO.
    LOG_STATS_SECONDS = seconds("LOG_STATS_SECONDS", 60.0)
    # How often each scheduler records its heartbeat in Redis; a heartbeat expires after three
    # of these, so a scheduler killed outright drops off the list within that.
    HEARTBEAT_SECONDS = seconds("HEARTBEAT_SECONDS", 5.0)
    # A scheduler whose loop has not completed a pass for this long is unhealthy (its
    # /healthz fails, scheduler_status says so): stuck, or backing off from an outage.
    # /healthz (a liveness probe) still passes while the loop backs off, or a rebuild moves
    # on: a restart would not end an outage (its /readyz says which dependency is away).
    PASS_STALE_SECONDS = seconds("PASS_STALE_SECONDS", 60.0)
    # How often one of the schedulers looks for occurrences that had no successful run
    # within their schedule's grace (missed-run alerts, docs/alerts.md).
    MISSED_CHECK_SECONDS = seconds("MISSED_CHECK_SECONDS", 10.0)
    # Who is told of missed runs (and, as EVENTS says, failed runs, auto-pauses and no
    # scheduler alive): BACKEND, a dotted path of an operations.notifiers.BaseNotifier subclass; its
    # OPTIONS; EVENTS, those it is told of; BASE_URL, the site's address, for links to the
    # admin. None: nobody (the signals are still sent). Parsed: the notifier's configuration,
    # the defaults filled in; None: no notifier.
    NOTIFY: Setting[NotifyConfig | None] = nested(
        "NOTIFY",
        {
            "BACKEND": "django_schedulinator.operations.notifiers.MailNotifier",
            "OPTIONS": {},
            "EVENTS": [NotifyEvent.MISSED, NotifyEvent.AUTO_PAUSED, NotifyEvent.NO_SCHEDULER],
            "BASE_URL": "",
        },
        "django_schedulinator.operations.notifiers",
    )
    # Delivery of the missed runs raised (the outbox, docs/alerts.md): at most this many
    # messages a minute to the notifier; when more misses wait than that lets through one
    # by one, they go as one digest, which lists the first NOTIFY_DIGEST_SIZE and counts the
    # rest. A delivery step (a scheduler's, or scheduler_status --notify) sends for at most
    # NOTIFY_DELIVERY_SECONDS, checked between two messages; what it has not sent by then
    # waits for the next.
    NOTIFY_MESSAGES_PER_MINUTE = whole("NOTIFY_MESSAGES_PER_MINUTE", 10, MAX_NOTIFY_MESSAGES)
    NOTIFY_DIGEST_SIZE = whole("NOTIFY_DIGEST_SIZE", 50, MAX_DIGEST_SIZE)
    NOTIFY_DELIVERY_SECONDS = seconds("NOTIFY_DELIVERY_SECONDS", 20.0)
    # The throttle of a schedule that keeps failing (or missing runs): its first alert of
    # an event is sent, the next ones are grouped with it, a reminder that counts them goes
    # at most this often, and one message says when a run succeeds again. None: every
    # alert a message of its own.
    NOTIFY_REPEAT_SECONDS = Setting(
        "NOTIFY_REPEAT_SECONDS", 3600.0, parse_repeat, 1, MAX_NOTIFY_REPEAT_SECONDS
    )
    # run_scheduler --metrics-port: how long the cluster-wide gauges (index size, due
    # backlog, drift, reconcile lag, runs awaiting an outcome) are kept between the queries
    # that compute them; every scheduler that is scraped computes them at most this often.
    METRICS_CLUSTER_SECONDS = seconds("METRICS_CLUSTER_SECONDS", 5.0)
    # Retention (operations/retention.py): every PRUNE_SECONDS one of the schedulers (Redis
    # decides which) deletes the runs that ended more than RUN_RETENTION_SECONDS ago (30
    # days; None keeps every run), except each schedule's newest RUN_KEEP_LAST, and the
    # change log's entries older than CHANGE_RETENTION_SECONDS (a year; None keeps them). A
    # schedule every second writes 86,400 runs a day: unpruned, the ledger grows for ever.
    RUN_RETENTION_SECONDS = retention("RUN_RETENTION_SECONDS", 30 * 86_400.0)
    RUN_KEEP_LAST = whole("RUN_KEEP_LAST", 10, MAX_KEEP_LAST)
    CHANGE_RETENTION_SECONDS = retention("CHANGE_RETENTION_SECONDS", 365 * 86_400.0)
    PRUNE_SECONDS = seconds("PRUNE_SECONDS", 600.0)
    # Rows read, and at most deleted, per statement (one short transaction each; Oban's
    # pruner deletes at most 10,000 a pass), and how long a prune that is behind works between
    # two claim passes of the scheduler doing it, slice after slice, until it has caught up.
    PRUNE_BATCH_SIZE = whole("PRUNE_BATCH_SIZE", 2000, MAX_PRUNE_BATCH_SIZE)
    PRUNE_MAX_SECONDS = seconds("PRUNE_MAX_SECONDS", 0.1)
    # Catch-up for schedules that leave theirs blank: which of several due occurrences fire
    # when a scheduler comes to a schedule late. "latest": the most recent one; "skip": none
    # more than MISFIRE_GRACE_SECONDS late; "all": each one at most CATCH_UP_WINDOW_SECONDS
    # late (a schedule may set its own window), at most CATCH_UP_MAX_RUNS at once.
    CATCH_UP = Setting("CATCH_UP", CatchUpMode.LATEST, parse_catch_up)
    CATCH_UP_WINDOW_SECONDS = seconds("CATCH_UP_WINDOW_SECONDS", 3600.0)
    CATCH_UP_MAX_RUNS = whole("CATCH_UP_MAX_RUNS", 100, MAX_BATCH_SIZE)
    MISFIRE_GRACE_SECONDS = seconds("MISFIRE_GRACE_SECONDS", 60.0)
    # Occurrences that do not fire are recorded as skipped runs; one catch-up, pause or
    # backfill records at most this many (the most recent), so an outage costs bounded rows.
    MAX_SKIPS_RECORDED = whole("MAX_SKIPS_RECORDED", 100, MAX_BATCH_SIZE, minimum=0)
    # The largest backfill one request may queue.
    MAX_BACKFILL_RUNS = whole("MAX_BACKFILL_RUNS", 10_000, 1_000_000)
    # The REST API (django_schedulinator.api): who may use it (DRF permission classes, by
    # dotted path: settings are code), and its page sizes (?page_size= up to the maximum).
    API_PERMISSION_CLASSES = Setting(
        "API_PERMISSION_CLASSES",
        ["django_schedulinator.api.permissions.StaffWithModelPermissions"],
        parse_permission_classes,
    )
    API_PAGE_SIZE = whole("API_PAGE_SIZE", 50, MAX_API_PAGE_SIZE)
    API_MAX_PAGE_SIZE = whole("API_MAX_PAGE_SIZE", 500, MAX_API_PAGE_SIZE)
    # Occurrences shown by the admin's preview and returned by the API's preview by default.
    PREVIEW_COUNT = whole("PREVIEW_COUNT", 10, MAX_PREVIEW_COUNT)
    # Sentry Crons check-ins (django_schedulinator.contrib.sentry, the "sentry" extra): False,
    # True for every recurring schedule, or a dict: {"SCHEDULES": "all" or a list of names
    # and fnmatch patterns, "EXCLUDE": [names and patterns], "MONITOR_CONFIG": {what every
    # monitor gets besides its schedule: checkin_margin (minutes, when the schedule has no
    # grace), failure_issue_threshold, recovery_threshold, owner}}. Parsed: None when off.
    SENTRY_CRONS: Setting[SentryCrons | None] = nested(
        "SENTRY_CRONS", False, "django_schedulinator.contrib.sentry"
    )

    def user_keys(self) -> set[str]:
        """The keys the project's setting gives (the rest take their defaults)."""
        return set(user_settings())

    def unknown_keys(self) -> list[str]:
        return sorted(set(user_settings()) - set(TABLE) - set(REPLACED))

    def replaced_keys(self) -> list[str]:
        return sorted(set(user_settings()) & set(REPLACED))

    def validate(self) -> list[ImproperlyConfigured]:
        """Every setting problem at once, for the system check."""
        problems: list[ImproperlyConfigured] = []
        try:
            user_settings()
        except ImproperlyConfigured as exc:
            return [exc]
        for setting in TABLE.values():
            try:
                setting.read()
            except ImproperlyConfigured as exc:
                problems.append(exc)
        for key in self.replaced_keys():
            problems.append(
                ImproperlyConfigured(
                    f"{SETTING_NAME}[{key!r}] was replaced by {REPLACED[key]}; see docs/dispatch.md"
                )
            )
        return problems


# Every setting by name, in the order of the class body.
TABLE: Mapping[str, Setting[Any]] = {
    value.name: value for value in vars(Settings).values() if isinstance(value, Setting)
}
# What each key is when the project leaves it out.
DEFAULTS: dict[str, Any] = {name: setting.default for name, setting in TABLE.items()}

app_settings = Settings()
