"""Settings, read lazily from the one namespaced ``SCHEDULINATOR`` dict.

Every value is read at access time (never at import), so ``override_settings`` works and a
mistake is reported with the name of the setting that holds it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from django_schedulinator.timing.vocabulary import CatchUpMode, NotifyEvent

SETTING_NAME = "SCHEDULINATOR"

DEFAULTS: dict[str, Any] = {
    # Schedules declared in this setting, by name, each a dict of a schedule's fields
    # ({"task": ..., "cron": ..., ...}), synced into the table like those of @scheduled.
    "SCHEDULES": {},
    # The management commands the built-in task "django_schedulinator.command" may run, each
    # with what its schedules may pass: {"clearsessions": {}, "dumpdata": {"args": ["auth"],
    # "options": {"--indent": ["2"]}, "keep_output": False}}. Nothing else can be run
    # through it, whatever a schedule's args say.
    "COMMANDS": {},
    # The django-redis cache alias whose connection holds the due index.
    "CACHE_ALIAS": "default",
    # Or a Redis of the app's own, in place of CACHE_ALIAS's: {"URL": "redis://host:6379/0"},
    # {"URL": a node's URL, or a list of several (the startup nodes), "CLUSTER": True} for a
    # Redis Cluster, or {"SENTINELS":
    # [["host", 26379], ...], "SERVICE_NAME": "mymaster"} for Sentinel; "OPTIONS": the
    # redis-py client's keyword arguments (timeouts, password, ssl, db), "SENTINEL_OPTIONS":
    # those of the connections to the sentinels. None: CACHE_ALIAS's connection.
    "REDIS": None,
    # Namespaces every Redis key; also the Redis Cluster hash tag of the index.
    "KEY_PREFIX": "schedulinator",
    # Independent due indexes, each under a hash tag of its own ({KEY_PREFIX} for shard 0,
    # {KEY_PREFIX:k} for shard k), so that a Redis Cluster spreads them over its masters. A
    # schedule lives in shard id % INDEX_SHARDS. Changing it is a rebuild (docs/scaling.md).
    "INDEX_SHARDS": 1,
    # Dispatchers by alias, shaped like CACHES: {"alias": {"BACKEND": dotted path of a
    # dispatch.base.BaseDispatcher subclass, "OPTIONS": {...}}}. Each schedule names one
    # (Schedule.dispatcher); "default" is the inline dispatcher unless set here.
    "DISPATCHERS": {},
    # The scheduler's own statements wait at most this long for a row lock that another
    # transaction holds (PostgreSQL's lock_timeout on its connections; tasks keep theirs).
    # Due rows held locked are skipped, not waited for; this bounds every other wait.
    "LOCK_TIMEOUT_SECONDS": 2.0,
    # Threads of the inline dispatcher's bounded pool.
    "INLINE_MAX_WORKERS": 8,
    # Entries claimed per Lua call (and rows per SQL batch) by run_scheduler.
    "BATCH_SIZE": 500,
    # Seconds a claimed entry (Redis) or a pending run (SQL) stays leased to one process.
    "LEASE_SECONDS": 30.0,
    # Upper bound of the sleep between passes; the real sleep is jittered below it.
    "MAX_SLEEP_SECONDS": 1.0,
    # Rows per chunk when rebuilding or resyncing the index.
    "REBUILD_CHUNK_SIZE": 2000,
    # Module name looked up in every installed app for @task registrations.
    "TASKS_MODULE": "scheduled_tasks",
    # Largest args + kwargs of one schedule, in bytes of JSON: every occurrence copies them
    # into the ledger, so a runaway payload would multiply.
    "MAX_PAYLOAD_BYTES": 65_536,
    # An inline task running longer than this is cut off: its run is recorded as failed and
    # its thread is abandoned (a task may set its own with @task(timeout=...)).
    "TASK_TIMEOUT_SECONDS": 300.0,
    # How often one of the schedulers re-indexes rows changed since the last reconcile
    # (heals sync writes that never reached Redis), and how many rows one pass reads.
    "RECONCILE_SECONDS": 10.0,
    "RECONCILE_BATCH_SIZE": 1000,
    # Each reconcile looks this far behind its watermark again: a row saved by a transaction
    # that committed late carries an earlier updated_at.
    "RECONCILE_LOOKBACK_SECONDS": 300.0,
    # A reconcile pass that is behind (a bulk write touched many rows) reads batches for up
    # to this long (a monotonic clock), between two claim passes of the scheduler doing it;
    # that scheduler goes on with slice after slice, without sleeping, until it has caught up.
    "RECONCILE_MAX_SECONDS": 0.1,
    # How often one of the schedulers compares the index with the rows and logs the result,
    # and how many entries and rows it samples.
    "DRIFT_CHECK_SECONDS": 300.0,
    "DRIFT_SAMPLE_SIZE": 200,
    # How often each scheduler logs its counters (claimed, fired, repaired, ...) at INFO.
    "LOG_STATS_SECONDS": 60.0,
    # How often each scheduler records its heartbeat in Redis; a heartbeat expires after three
    # of these, so a scheduler killed outright drops off the list within that.
    "HEARTBEAT_SECONDS": 5.0,
    # A scheduler whose loop has not completed a pass for this long is unhealthy (its
    # /healthz fails, scheduler_status says so): stuck, or backing off from an outage.
    # /healthz (a liveness probe) still passes while the loop backs off, or a rebuild moves
    # on: a restart would not end an outage (its /readyz says which dependency is away).
    "PASS_STALE_SECONDS": 60.0,
    # How often one of the schedulers looks for occurrences that had no successful run
    # within their schedule's grace (missed-run alerts, docs/alerts.md).
    "MISSED_CHECK_SECONDS": 10.0,
    # Who is told of missed runs (and, as EVENTS says, failed runs, auto-pauses and no
    # scheduler alive): BACKEND, a dotted path of a notify.BaseNotifier subclass; its
    # OPTIONS; EVENTS, those it is told of; BASE_URL, the site's address, for links to the
    # admin. None: nobody (the signals are still sent).
    "NOTIFY": {
        "BACKEND": "django_schedulinator.notify.MailNotifier",
        "OPTIONS": {},
        "EVENTS": [NotifyEvent.MISSED, NotifyEvent.AUTO_PAUSED, NotifyEvent.NO_SCHEDULER],
        "BASE_URL": "",
    },
    # Delivery of the missed runs raised (the outbox, docs/alerts.md): at most this many
    # messages a minute to the notifier; when more misses wait than that lets through one
    # by one, they go as one digest, which lists the first NOTIFY_DIGEST_SIZE and counts the
    # rest. A delivery step (a scheduler's, or scheduler_status --notify) sends for at most
    # NOTIFY_DELIVERY_SECONDS, checked between two messages; what it has not sent by then
    # waits for the next.
    "NOTIFY_MESSAGES_PER_MINUTE": 10,
    "NOTIFY_DIGEST_SIZE": 50,
    "NOTIFY_DELIVERY_SECONDS": 20.0,
    # run_scheduler --metrics-port: how long the cluster-wide gauges (index size, due
    # backlog, drift, reconcile lag, runs awaiting an outcome) are kept between the queries
    # that compute them; every scheduler that is scraped computes them at most this often.
    "METRICS_CLUSTER_SECONDS": 5.0,
    # Retention (retention.py): every PRUNE_SECONDS one of the schedulers (Redis decides
    # which) deletes the runs that ended more than RUN_RETENTION_SECONDS ago (30 days; None
    # keeps every run), except each schedule's newest RUN_KEEP_LAST, and the change log's
    # entries older than CHANGE_RETENTION_SECONDS (a year; None keeps them). A schedule every
    # second writes 86,400 runs a day: unpruned, the ledger grows for ever.
    "RUN_RETENTION_SECONDS": 30 * 86_400.0,
    "RUN_KEEP_LAST": 10,
    "CHANGE_RETENTION_SECONDS": 365 * 86_400.0,
    "PRUNE_SECONDS": 600.0,
    # Rows read, and at most deleted, per statement (one short transaction each; Oban's
    # pruner deletes at most 10,000 a pass), and how long a prune that is behind works between
    # two claim passes of the scheduler doing it, slice after slice, until it has caught up.
    "PRUNE_BATCH_SIZE": 2000,
    "PRUNE_MAX_SECONDS": 0.1,
    # Catch-up for schedules that leave theirs blank: which of several due occurrences fire
    # when a scheduler comes to a schedule late. "latest": the most recent one; "skip": none
    # more than MISFIRE_GRACE_SECONDS late; "all": each one at most CATCH_UP_WINDOW_SECONDS
    # late (a schedule may set its own window), at most CATCH_UP_MAX_RUNS at once.
    "CATCH_UP": CatchUpMode.LATEST,
    "CATCH_UP_WINDOW_SECONDS": 3600.0,
    "CATCH_UP_MAX_RUNS": 100,
    "MISFIRE_GRACE_SECONDS": 60.0,
    # Occurrences that do not fire are recorded as skipped runs; one catch-up, pause or
    # backfill records at most this many (the most recent), so an outage costs bounded rows.
    "MAX_SKIPS_RECORDED": 100,
    # The largest backfill one request may queue.
    "MAX_BACKFILL_RUNS": 10_000,
    # The REST API (django_schedulinator.api): who may use it (DRF permission classes, by
    # dotted path: settings are code), and its page sizes (?page_size= up to the maximum).
    "API_PERMISSION_CLASSES": ["django_schedulinator.api.permissions.StaffWithModelPermissions"],
    "API_PAGE_SIZE": 50,
    "API_MAX_PAGE_SIZE": 500,
    # Occurrences shown by the admin's preview and returned by the API's preview by default.
    "PREVIEW_COUNT": 10,
    # Sentry Crons check-ins (django_schedulinator.contrib.sentry, the "sentry" extra): False,
    # True for every recurring schedule, or a dict: {"SCHEDULES": "all" or a list of names
    # and fnmatch patterns, "EXCLUDE": [names and patterns], "MONITOR_CONFIG": {what every
    # monitor gets besides its schedule: checkin_margin (minutes, when the schedule has no
    # grace), failure_issue_threshold, recovery_threshold, owner}}.
    "SENTRY_CRONS": False,
}

CATCH_UP_MODES = tuple(CatchUpMode)

INLINE_DISPATCHER = "django_schedulinator.dispatch.inline.InlineDispatcher"
DISPATCHER_ALIAS_RE = re.compile(r"^[A-Za-z0-9_\-]{1,100}$")
# Settings that were replaced, and what replaced them: named in the error, not ignored.
REPLACED = {"DISPATCHER": "DISPATCHERS (an alias 'default' with BACKEND and OPTIONS)"}

# An option in SCHEDULINATOR["COMMANDS"] is named in full, the way argparse matches it
# exactly: no short form (-o), no value (=).
LONG_OPTION_RE = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_\-]*$")
COMMAND_ENTRY_KEYS = ("args", "options", "keep_output")

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
MAX_DIGEST_SIZE = 1000
# Each schedule's newest runs kept by a prune are found by reading that many index entries.
MAX_KEEP_LAST = 1000
# Retention ages: at least a second, at most a century (older than that is no date).
MAX_RETENTION_SECONDS = 36_500 * 86_400
# Levels of nesting in a schedule's args and kwargs (the list or object itself is the first):
# deeper JSON is refused before anything recurses through it (Python's json does).
MAX_JSON_DEPTH = 100
SENTRY_CRONS_KEYS = ("SCHEDULES", "EXCLUDE", "MONITOR_CONFIG")
# What MONITOR_CONFIG may add to the monitor config derived from each schedule. Sentry takes
# minutes up to 28 days (40,320) for the margin.
SENTRY_MONITOR_KEYS = ("checkin_margin", "failure_issue_threshold", "recovery_threshold", "owner")
SENTRY_MAX_MINUTES = 40_320


def _error(key: str, problem: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{SETTING_NAME}[{key!r}] {problem}")


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


def _patterns(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise _error(
            "SENTRY_CRONS",
            f"[{key!r}] must be a list of schedule names and fnmatch patterns (such as "
            f"'reports-*'), got {value!r}",
        )
    return tuple(value)


def _sentry_crons(value: Any) -> SentryCrons | None:
    """SENTRY_CRONS, checked: None when it is off."""
    if value is False or value is None:
        return None
    if value is True:
        return SentryCrons()
    if not isinstance(value, dict):
        raise _error(
            "SENTRY_CRONS",
            f"must be False, True (every recurring schedule) or a dict with the keys "
            f"{', '.join(SENTRY_CRONS_KEYS)}, got {value!r}",
        )
    unknown = sorted(str(key) for key in set(value) - set(SENTRY_CRONS_KEYS))
    if unknown:
        raise _error(
            "SENTRY_CRONS",
            f"has unknown keys {', '.join(unknown)}; the keys are {', '.join(SENTRY_CRONS_KEYS)}",
        )
    schedules = value.get("SCHEDULES", "all")
    chosen = None if schedules == "all" else _patterns("SCHEDULES", schedules)
    exclude = _patterns("EXCLUDE", value.get("EXCLUDE", []))
    extra = value.get("MONITOR_CONFIG", {})
    if not isinstance(extra, dict):
        raise _error("SENTRY_CRONS", f"['MONITOR_CONFIG'] must be a dict, got {extra!r}")
    for key, item in extra.items():
        where = f"['MONITOR_CONFIG'][{key!r}]"
        if key not in SENTRY_MONITOR_KEYS:
            raise _error(
                "SENTRY_CRONS",
                f"{where} is not taken; the keys are {', '.join(SENTRY_MONITOR_KEYS)} (the "
                f"schedule, time zone and maximum runtime come from each schedule)",
            )
        if key == "owner":
            if not isinstance(item, str) or not item:
                raise _error(
                    "SENTRY_CRONS", f"{where} must be 'user:<id>' or 'team:<id>', got {item!r}"
                )
        elif (
            isinstance(item, bool)
            or not isinstance(item, int)
            or not 1 <= item <= SENTRY_MAX_MINUTES
        ):
            raise _error(
                "SENTRY_CRONS",
                f"{where} must be a whole number from 1 to {SENTRY_MAX_MINUTES}, got {item!r}",
            )
    return SentryCrons(chosen, exclude, dict(extra))


def _allowed_command(name: str, entry: Any) -> AllowedCommand:
    """One entry of COMMANDS, checked; the error names the entry and what is wrong with it."""
    where = f"[{name!r}]"
    if not isinstance(entry, dict):
        raise _error(
            "COMMANDS",
            f"{where} must be a dict of what its schedules may pass ({{}} for no arguments; "
            f"keys: {', '.join(COMMAND_ENTRY_KEYS)}), got {entry!r}",
        )
    unknown = sorted(str(key) for key in set(entry) - set(COMMAND_ENTRY_KEYS))
    if unknown:
        raise _error(
            "COMMANDS",
            f"{where} has unknown keys {', '.join(unknown)}; the keys are "
            f"{', '.join(COMMAND_ENTRY_KEYS)}",
        )
    args = entry.get("args", [])
    if not isinstance(args, list | tuple) or not all(isinstance(a, str) for a in args):
        raise _error("COMMANDS", f"{where}['args'] must be a list of text, got {args!r}")
    for arg in args:
        if arg.startswith("-"):
            raise _error(
                "COMMANDS",
                f"{where}['args'] has {arg!r}, which starts with '-': an option goes in "
                f"{where}['options'] with the values it may take",
            )
    options = entry.get("options", {})
    if not isinstance(options, dict):
        raise _error("COMMANDS", f"{where}['options'] must be a dict, got {options!r}")
    allowed: dict[str, tuple[str, ...] | None] = {}
    for option, values in options.items():
        if not isinstance(option, str) or not LONG_OPTION_RE.match(option):
            raise _error(
                "COMMANDS",
                f"{where}['options'] has {option!r}: name each option in full, as --name "
                f"(no short form, no value)",
            )
        if values is True:
            allowed[option] = None
        elif (
            isinstance(values, list | tuple) and values and all(isinstance(v, str) for v in values)
        ):
            allowed[option] = tuple(values)
        else:
            raise _error(
                "COMMANDS",
                f"{where}['options'][{option!r}] must be True (a flag) or a non-empty list of "
                f"the values it may take, got {values!r}",
            )
    keep_output = entry.get("keep_output", False)
    if not isinstance(keep_output, bool):
        raise _error(
            "COMMANDS", f"{where}['keep_output'] must be True or False, got {keep_output!r}"
        )
    return AllowedCommand(tuple(args), allowed, keep_output)


# What a notifier may be told of (SCHEDULINATOR["NOTIFY"]["EVENTS"]).
NOTIFY_EVENTS = tuple(NotifyEvent)
NOTIFY_KEYS = ("BACKEND", "OPTIONS", "EVENTS", "BASE_URL")


@dataclass(frozen=True)
class NotifyConfig:
    """SCHEDULINATOR["NOTIFY"], checked, with its defaults."""

    backend: str
    options: dict[str, Any]
    events: tuple[str, ...]
    base_url: str  # without a trailing slash; "" when not given


REDIS_KEYS = ("URL", "CLUSTER", "SENTINELS", "SERVICE_NAME", "OPTIONS", "SENTINEL_OPTIONS")


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


def _redis_config(value: Any) -> RedisConfig | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _error(
            "REDIS", f"must be None or a dict with the keys {', '.join(REDIS_KEYS)}, got {value!r}"
        )
    unknown = sorted(str(key) for key in set(value) - set(REDIS_KEYS))
    if unknown:
        raise _error(
            "REDIS", f"has unknown keys {', '.join(unknown)}; the keys are {', '.join(REDIS_KEYS)}"
        )
    for key in ("OPTIONS", "SENTINEL_OPTIONS"):
        if not isinstance(value.get(key, {}), dict):
            raise _error(
                "REDIS", f"[{key!r}] must be a dict of redis-py options, got {value[key]!r}"
            )
    cluster = value.get("CLUSTER", False)
    if not isinstance(cluster, bool):
        raise _error("REDIS", f"['CLUSTER'] must be True or False, got {cluster!r}")
    options, sentinel_options = value.get("OPTIONS", {}), value.get("SENTINEL_OPTIONS", {})
    if "SENTINELS" in value:
        sentinels = value["SENTINELS"]
        if (
            not isinstance(sentinels, list | tuple)
            or not sentinels
            or not all(
                isinstance(s, list | tuple)
                and len(s) == 2
                and isinstance(s[0], str)
                and isinstance(s[1], int)
                and not isinstance(s[1], bool)
                for s in sentinels
            )
        ):
            raise _error(
                "REDIS",
                f"['SENTINELS'] must be a non-empty list of [host, port] pairs, got {sentinels!r}",
            )
        service = value.get("SERVICE_NAME")
        if not isinstance(service, str) or not service:
            raise _error(
                "REDIS",
                f"['SERVICE_NAME'] must name the Sentinel service (its master's name) when "
                f"SENTINELS is given, got {service!r}",
            )
        if "URL" in value or cluster:
            raise _error(
                "REDIS", "takes SENTINELS and SERVICE_NAME, or URL (and CLUSTER), not both"
            )
        pairs = tuple((host, port) for host, port in sentinels)
        return RedisConfig(None, False, (), pairs, service, options, sentinel_options)
    if "SERVICE_NAME" in value:
        raise _error("REDIS", "['SERVICE_NAME'] goes with SENTINELS, not with URL")
    url = value.get("URL")
    if isinstance(url, list | tuple):
        first, others = _startup_nodes(url, cluster)
        return RedisConfig(first, cluster, others, (), None, options, sentinel_options)
    if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
        raise _error(
            "REDIS",
            f"['URL'] must be a redis://, rediss:// or unix:// URL, or a list of a Redis "
            f"Cluster's node URLs (or give SENTINELS and SERVICE_NAME), got {url!r}",
        )
    return RedisConfig(url, cluster, (), (), None, options, sentinel_options)


def _startup_nodes(
    urls: list[Any] | tuple[Any, ...], cluster: bool
) -> tuple[str, tuple[tuple[str, int], ...]]:
    """A Redis Cluster's startup nodes, given as a list of URLs: the first URL (whose
    credentials and options the client takes), and the others' hosts and ports. Every URL
    must say the same but for its host and port."""
    from redis.connection import parse_url

    if not cluster:
        raise _error(
            "REDIS",
            "['URL'] is a list of startup nodes, which only a Redis Cluster takes (with "
            "CLUSTER: True); give one URL for a single server",
        )
    if not urls:
        raise _error("REDIS", "['URL'] must list at least one node's URL")
    nodes: list[tuple[str, int]] = []
    shared: dict[str, Any] | None = None
    for position, url in enumerate(urls):
        where = f"['URL'][{position}]"
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://")):
            raise _error(
                "REDIS", f"{where} must be a redis:// or rediss:// URL of a node, got {url!r}"
            )
        try:
            parsed = parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            raise _error("REDIS", f"{where} cannot be read: {exc}") from None
        host, port = parsed.pop("host", None), parsed.pop("port", 6379)
        if not host:
            raise _error("REDIS", f"{where} names no host, got {url!r}")
        if shared is None:
            shared = parsed
        elif parsed != shared:
            raise _error(
                "REDIS",
                f"{where} differs from ['URL'][0] in more than its host and port (the scheme, "
                f"the credentials or the options): the client connects to every node alike",
            )
        nodes.append((str(host), int(port)))
    return urls[0], tuple(nodes[1:])


class Settings:
    """Typed, lazy accessors; ``app_settings.BATCH_SIZE`` reads settings.SCHEDULINATOR now."""

    @property
    def _user(self) -> dict[str, Any]:
        value = getattr(settings, SETTING_NAME, {})
        if not isinstance(value, dict):
            raise ImproperlyConfigured(f"{SETTING_NAME} must be a dict, got {type(value).__name__}")
        return value

    def _get(self, key: str) -> Any:
        return self._user.get(key, DEFAULTS[key])

    def user_keys(self) -> set[str]:
        """The keys the project's setting gives (the rest take their defaults)."""
        return set(self._user)

    def unknown_keys(self) -> list[str]:
        return sorted(set(self._user) - set(DEFAULTS) - set(REPLACED))

    def replaced_keys(self) -> list[str]:
        return sorted(set(self._user) & set(REPLACED))

    def _positive_int(self, key: str, maximum: int | None = None) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _error(key, f"must be a positive integer, got {value!r}")
        if maximum is not None and value > maximum:
            raise _error(key, f"must be at most {maximum}, got {value!r}")
        return value

    def _non_negative_int(self, key: str, maximum: int) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
            raise _error(key, f"must be a whole number from 0 to {maximum}, got {value!r}")
        return value

    def _positive_number(self, key: str) -> float:
        value = self._get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise _error(key, f"must be a positive, finite number of seconds, got {value!r}")
        return float(value)

    def _string(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, str) or not value:
            raise _error(key, f"must be a non-empty string, got {value!r}")
        return value

    @property
    def SCHEDULES(self) -> dict[str, Any]:
        """The declarations by name (each entry is checked by the sync, and the check)."""
        value = self._get("SCHEDULES")
        if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
            raise _error("SCHEDULES", f"must be a dict of schedules by name, got {value!r}")
        return value

    @property
    def COMMANDS(self) -> dict[str, AllowedCommand]:
        """Each allowed command with what its schedules may pass."""
        value = self._get("COMMANDS")
        if isinstance(value, list | tuple):  # the form before arguments were allowlisted
            as_dict: dict[str, dict[str, Any]] = {n: {} for n in value if isinstance(n, str)}
            raise _error(
                "COMMANDS",
                f"is a list; it is now a dict of each command and what its schedules may pass "
                f"({{}}: no arguments), for example {as_dict!r}; see docs/upgrading.md",
            )
        if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
            raise _error(
                "COMMANDS",
                f"must be a dict of management command names, each with what its schedules "
                f"may pass, got {value!r}",
            )
        return {name: _allowed_command(name, entry) for name, entry in value.items()}

    @property
    def CACHE_ALIAS(self) -> str:
        return self._string("CACHE_ALIAS")

    @property
    def REDIS(self) -> RedisConfig | None:
        return _redis_config(self._get("REDIS"))

    @property
    def KEY_PREFIX(self) -> str:
        value = self._string("KEY_PREFIX")
        if not KEY_PREFIX_RE.match(value):
            raise _error(
                "KEY_PREFIX",
                f"must be 1-64 characters from A-Z a-z 0-9 _ . : - (no braces or spaces, "
                f"which would break the Redis Cluster hash tag), got {value!r}",
            )
        return value

    @property
    def INDEX_SHARDS(self) -> int:
        return self._positive_int("INDEX_SHARDS", maximum=MAX_INDEX_SHARDS)

    @property
    def DISPATCHERS(self) -> dict[str, dict[str, Any]]:
        """Every alias with its BACKEND and OPTIONS; "default" is always there."""
        value = self._get("DISPATCHERS")
        if not isinstance(value, dict):
            raise _error("DISPATCHERS", f"must be a dict of aliases, got {value!r}")
        aliases: dict[str, dict[str, Any]] = {
            "default": {"BACKEND": INLINE_DISPATCHER, "OPTIONS": {}}
        }
        for alias, config in value.items():
            if not isinstance(alias, str) or not DISPATCHER_ALIAS_RE.match(alias):
                raise _error(
                    "DISPATCHERS",
                    f"has the alias {alias!r}; an alias is 1-100 characters from A-Z a-z 0-9 _ -",
                )
            if not isinstance(config, dict) or set(config) - {"BACKEND", "OPTIONS"}:
                raise _error(
                    "DISPATCHERS",
                    f"[{alias!r}] must be a dict with BACKEND (a dotted path) and OPTIONS (a "
                    f"dict), got {config!r}",
                )
            backend = config.get("BACKEND")
            options = config.get("OPTIONS", {})
            if not isinstance(backend, str) or not backend:
                raise _error("DISPATCHERS", f"[{alias!r}]['BACKEND'] must be a dotted path")
            if not isinstance(options, dict):
                raise _error("DISPATCHERS", f"[{alias!r}]['OPTIONS'] must be a dict")
            aliases[alias] = {"BACKEND": backend, "OPTIONS": options}
        return aliases

    @property
    def LOCK_TIMEOUT_SECONDS(self) -> float:
        return self._positive_number("LOCK_TIMEOUT_SECONDS")

    @property
    def INLINE_MAX_WORKERS(self) -> int:
        return self._positive_int("INLINE_MAX_WORKERS", maximum=256)

    @property
    def BATCH_SIZE(self) -> int:
        return self._positive_int("BATCH_SIZE", maximum=MAX_BATCH_SIZE)

    @property
    def LEASE_SECONDS(self) -> float:
        return self._positive_number("LEASE_SECONDS")

    @property
    def MAX_SLEEP_SECONDS(self) -> float:
        return self._positive_number("MAX_SLEEP_SECONDS")

    @property
    def REBUILD_CHUNK_SIZE(self) -> int:
        return self._positive_int("REBUILD_CHUNK_SIZE", maximum=MAX_CHUNK_SIZE)

    @property
    def TASKS_MODULE(self) -> str:
        return self._string("TASKS_MODULE")

    @property
    def MAX_PAYLOAD_BYTES(self) -> int:
        return self._positive_int("MAX_PAYLOAD_BYTES", maximum=16 * 1024 * 1024)

    @property
    def TASK_TIMEOUT_SECONDS(self) -> float:
        return self._positive_number("TASK_TIMEOUT_SECONDS")

    @property
    def RECONCILE_SECONDS(self) -> float:
        return self._positive_number("RECONCILE_SECONDS")

    @property
    def RECONCILE_BATCH_SIZE(self) -> int:
        return self._positive_int("RECONCILE_BATCH_SIZE", maximum=MAX_RECONCILE_BATCH_SIZE)

    @property
    def RECONCILE_LOOKBACK_SECONDS(self) -> float:
        return self._positive_number("RECONCILE_LOOKBACK_SECONDS")

    @property
    def RECONCILE_MAX_SECONDS(self) -> float:
        return self._positive_number("RECONCILE_MAX_SECONDS")

    @property
    def DRIFT_CHECK_SECONDS(self) -> float:
        return self._positive_number("DRIFT_CHECK_SECONDS")

    @property
    def LOG_STATS_SECONDS(self) -> float:
        return self._positive_number("LOG_STATS_SECONDS")

    @property
    def HEARTBEAT_SECONDS(self) -> float:
        return self._positive_number("HEARTBEAT_SECONDS")

    @property
    def PASS_STALE_SECONDS(self) -> float:
        return self._positive_number("PASS_STALE_SECONDS")

    @property
    def MISSED_CHECK_SECONDS(self) -> float:
        return self._positive_number("MISSED_CHECK_SECONDS")

    @property
    def NOTIFY(self) -> NotifyConfig | None:
        """The notifier's configuration, the defaults filled in; None: no notifier."""
        value = self._get("NOTIFY")
        if value is None:
            return None
        if not isinstance(value, dict) or set(value) - set(NOTIFY_KEYS):
            raise _error(
                "NOTIFY",
                f"must be None or a dict with {', '.join(NOTIFY_KEYS)}, got {value!r}",
            )
        default = DEFAULTS["NOTIFY"]
        backend = value.get("BACKEND", default["BACKEND"])
        if not isinstance(backend, str) or not backend:
            raise _error("NOTIFY", f"['BACKEND'] must be a dotted path, got {backend!r}")
        options = value.get("OPTIONS", {})
        if not isinstance(options, dict):
            raise _error("NOTIFY", f"['OPTIONS'] must be a dict, got {options!r}")
        events = value.get("EVENTS", default["EVENTS"])
        if (
            not isinstance(events, list | tuple)
            or not all(isinstance(e, str) for e in events)
            or set(events) - set(NOTIFY_EVENTS)
        ):
            raise _error(
                "NOTIFY",
                f"['EVENTS'] must be a list of {', '.join(NOTIFY_EVENTS)}, got {events!r}",
            )
        base_url = value.get("BASE_URL", "")
        if not isinstance(base_url, str) or (
            base_url and not re.match(r"^https?://[^/\s]+(/\S*)?$", base_url)
        ):
            raise _error(
                "NOTIFY",
                f"['BASE_URL'] must be an http:// or https:// address (the site's, for links "
                f"to the admin) or empty, got {base_url!r}",
            )
        return NotifyConfig(backend, options, tuple(events), base_url.rstrip("/"))

    @property
    def NOTIFY_MESSAGES_PER_MINUTE(self) -> int:
        return self._positive_int("NOTIFY_MESSAGES_PER_MINUTE", maximum=MAX_NOTIFY_MESSAGES)

    @property
    def NOTIFY_DIGEST_SIZE(self) -> int:
        return self._positive_int("NOTIFY_DIGEST_SIZE", maximum=MAX_DIGEST_SIZE)

    @property
    def NOTIFY_DELIVERY_SECONDS(self) -> float:
        return self._positive_number("NOTIFY_DELIVERY_SECONDS")

    @property
    def METRICS_CLUSTER_SECONDS(self) -> float:
        return self._positive_number("METRICS_CLUSTER_SECONDS")

    @property
    def DRIFT_SAMPLE_SIZE(self) -> int:
        return self._positive_int("DRIFT_SAMPLE_SIZE", maximum=MAX_DRIFT_SAMPLE_SIZE)

    def _retention(self, key: str) -> float | None:
        value = self._get(key)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 1 <= value <= MAX_RETENTION_SECONDS
        ):
            raise _error(
                key,
                f"must be None (keep everything) or a number of seconds from 1 to "
                f"{MAX_RETENTION_SECONDS:,} (a century), got {value!r}",
            )
        return float(value)

    @property
    def RUN_RETENTION_SECONDS(self) -> float | None:
        return self._retention("RUN_RETENTION_SECONDS")

    @property
    def RUN_KEEP_LAST(self) -> int:
        return self._positive_int("RUN_KEEP_LAST", maximum=MAX_KEEP_LAST)

    @property
    def CHANGE_RETENTION_SECONDS(self) -> float | None:
        return self._retention("CHANGE_RETENTION_SECONDS")

    @property
    def PRUNE_SECONDS(self) -> float:
        return self._positive_number("PRUNE_SECONDS")

    @property
    def PRUNE_BATCH_SIZE(self) -> int:
        return self._positive_int("PRUNE_BATCH_SIZE", maximum=MAX_PRUNE_BATCH_SIZE)

    @property
    def PRUNE_MAX_SECONDS(self) -> float:
        return self._positive_number("PRUNE_MAX_SECONDS")

    @property
    def CATCH_UP(self) -> str:
        value = self._get("CATCH_UP")
        if value not in CATCH_UP_MODES:
            raise _error("CATCH_UP", f"must be one of {', '.join(CATCH_UP_MODES)}, got {value!r}")
        return str(value)

    @property
    def CATCH_UP_WINDOW_SECONDS(self) -> float:
        return self._positive_number("CATCH_UP_WINDOW_SECONDS")

    @property
    def CATCH_UP_MAX_RUNS(self) -> int:
        return self._positive_int("CATCH_UP_MAX_RUNS", maximum=MAX_BATCH_SIZE)

    @property
    def MISFIRE_GRACE_SECONDS(self) -> float:
        return self._positive_number("MISFIRE_GRACE_SECONDS")

    @property
    def MAX_SKIPS_RECORDED(self) -> int:
        return self._non_negative_int("MAX_SKIPS_RECORDED", maximum=MAX_BATCH_SIZE)

    @property
    def MAX_BACKFILL_RUNS(self) -> int:
        return self._positive_int("MAX_BACKFILL_RUNS", maximum=1_000_000)

    @property
    def API_PERMISSION_CLASSES(self) -> list[str]:
        value = self._get("API_PERMISSION_CLASSES")
        if (
            not isinstance(value, list | tuple)
            or not value
            or not all(isinstance(v, str) and v for v in value)
        ):
            raise _error(
                "API_PERMISSION_CLASSES",
                f"must be a non-empty list of dotted paths of DRF permission classes, "
                f"got {value!r}",
            )
        return list(value)

    @property
    def API_PAGE_SIZE(self) -> int:
        return self._positive_int("API_PAGE_SIZE", maximum=MAX_API_PAGE_SIZE)

    @property
    def API_MAX_PAGE_SIZE(self) -> int:
        return self._positive_int("API_MAX_PAGE_SIZE", maximum=MAX_API_PAGE_SIZE)

    @property
    def PREVIEW_COUNT(self) -> int:
        return self._positive_int("PREVIEW_COUNT", maximum=MAX_PREVIEW_COUNT)

    @property
    def SENTRY_CRONS(self) -> SentryCrons | None:
        """Which schedules check in with Sentry Crons; None: the integration is off."""
        return _sentry_crons(self._get("SENTRY_CRONS"))

    def validate(self) -> list[ImproperlyConfigured]:
        """Every setting problem at once, for the system check."""
        problems: list[ImproperlyConfigured] = []
        try:
            self._user  # noqa: B018 - the access validates the outer type
        except ImproperlyConfigured as exc:
            return [exc]
        for key in DEFAULTS:
            try:
                getattr(self, key)
            except ImproperlyConfigured as exc:
                problems.append(exc)
        for key in self.replaced_keys():
            problems.append(_error(key, f"was replaced by {REPLACED[key]}; see docs/dispatch.md"))
        return problems


app_settings = Settings()
