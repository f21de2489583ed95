"""The system checks: one small test per check id (``django_schedulinator/checks.py``).

The full table of bad settings (``rejections.SETTINGS_CASES``) is run by the last test.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import ERROR, run_checks

from django_schedulinator import checks
from django_schedulinator.index.due import DueIndex

from .support.redis_server import RedisServer, free_port, lose_redis
from .support.rejections import NOT_A_DICT, SETTINGS_CASES, assert_nothing_written
from .support.schedules import make_schedule
from .support.webhook_receiver import SECRET as WEBHOOK_SECRET


def setting_ids(settings: Any, **overrides: Any) -> list[str]:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, **overrides}
    return [m.id for m in checks.check_settings()]


def test_a_good_configuration_passes() -> None:
    assert checks.check_settings() == []


@pytest.mark.parametrize(
    "overrides",
    [
        {"BATCH_SIZE": 0},
        {"KEY_PREFIX": "bad{prefix}"},
        {"LEASE_SECONDS": "soon"},
        {"LEASE_SECONDS": float("inf")},
        {"LEASE_SECONDS": float("nan")},
        {"LEASE_SECONDS": -1},
        {"LEASE_SECONDS": True},
        {"INDEX_SHARDS": 0},
        {"INDEX_SHARDS": "3"},
        {"INDEX_SHARDS": 2.0},
        {"INDEX_SHARDS": True},
        {"INDEX_SHARDS": 65},
    ],
)
def test_e001_a_bad_value(settings: Any, overrides: dict[str, Any]) -> None:
    assert setting_ids(settings, **overrides) == ["schedulinator.E001"]


def test_w001_an_unknown_key(settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "BATCH_SIZ": 10}
    (message,) = checks.check_settings()
    assert message.id == "schedulinator.W001"
    assert "['BATCH_SIZ'] is not a known setting" in message.msg
    assert "BATCH_SIZE" in (message.hint or "")


def test_e002_a_cache_alias_not_in_caches(settings: Any) -> None:
    assert setting_ids(settings, CACHE_ALIAS="nope") == ["schedulinator.E002"]


def test_e003_a_cache_that_is_not_redis(settings: Any) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    assert setting_ids(settings, CACHE_ALIAS="locmem") == ["schedulinator.E003"]


@pytest.mark.parametrize("dispatcher", ["os.system", "no.such.Dispatcher"])
def test_e004_a_dispatcher_that_is_not_one(settings: Any, dispatcher: str) -> None:
    alias = {"default": {"BACKEND": dispatcher}}
    assert setting_ids(settings, DISPATCHERS=alias) == ["schedulinator.E004"]


def test_e024_a_tasks_dispatcher_without_the_tasks_framework(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither Django 6's django.tasks nor the backport can be imported (E023 is a
    BACKEND_ALIAS that is not in TASKS)."""
    for name in ("django.tasks", "django_tasks"):
        monkeypatch.setitem(sys.modules, name, None)  # what a failed import leaves
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {"t": {"BACKEND": "django_schedulinator.dispatch.tasks.TasksDispatcher"}},
    }
    [error] = checks.check_settings()
    assert error.id == "schedulinator.E024"
    assert "needs Django's tasks framework" in error.msg
    assert error.hint == "pip install 'django-schedulinator[tasks]'"


WEBHOOK = "django_schedulinator.dispatch.webhook.WebhookDispatcher"
CELERY = "django_schedulinator.dispatch.celery.CeleryDispatcher"
RQ = "django_schedulinator.dispatch.rq.RQDispatcher"
TASKS = "django_schedulinator.dispatch.tasks.TasksDispatcher"


def dispatcher_ids(settings: Any, backend: str, options: dict[str, Any] | None = None) -> Any:
    """The messages of one dispatcher alias, as ``check`` (then ``check --database``) gives
    them."""
    alias = {"BACKEND": backend, "OPTIONS": options or {}}
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": {"d": alias}}
    return checks.check_settings()


def test_e020_a_webhook_dispatcher_without_httpx(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # what a failed import leaves
    targets = {"ops": {"URL": "https://alerts.internal/", "SECRET": WEBHOOK_SECRET}}
    [error] = dispatcher_ids(settings, WEBHOOK, {"TARGETS": targets})
    assert error.id == "schedulinator.E020"
    assert error.hint == "pip install 'django-schedulinator[webhook]'"


def test_e021_a_celery_dispatcher_without_celery(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "celery", None)
    [error] = dispatcher_ids(settings, CELERY, {"APP": "tests.support.celery_app.app"})
    assert error.id == "schedulinator.E021"
    assert error.hint == "pip install 'django-schedulinator[celery]'"


def test_e022_an_rq_dispatcher_without_django_rq(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "django_rq", None)
    [error] = dispatcher_ids(settings, RQ)
    assert error.id == "schedulinator.E022"
    assert error.hint == "pip install 'django-schedulinator[rq]'"


def test_e023_a_tasks_backend_alias_not_in_tasks(settings: Any) -> None:
    [error] = dispatcher_ids(settings, TASKS, {"BACKEND_ALIAS": "x"})
    assert error.id == "schedulinator.E023"
    assert "uses the tasks backend 'x'" in error.msg


def test_e025_a_celery_app_that_cannot_be_imported(settings: Any) -> None:
    [error] = dispatcher_ids(settings, CELERY, {"APP": "no.such.app"})
    assert error.id == "schedulinator.E025"
    assert "'no.such.app', which cannot be imported" in error.msg


def test_e026_an_rq_queue_not_in_rq_queues(settings: Any) -> None:
    [error] = dispatcher_ids(settings, RQ, {"QUEUE": "nowhere"})
    assert error.id == "schedulinator.E026"
    assert "'nowhere', which is not in RQ_QUEUES" in error.msg


def test_w020_a_webhook_target_that_cannot_be_reached(settings: Any) -> None:
    url = f"http://127.0.0.1:{free_port()}/"  # nothing listens: refused at once
    targets = {"ops": {"URL": url, "SECRET": WEBHOOK_SECRET}}
    assert dispatcher_ids(settings, WEBHOOK, {"TARGETS": targets}) == []
    [warning] = checks.check_dispatchers(databases=["default"])
    assert warning.id == "schedulinator.W020"
    assert "The webhook target 'ops' of the dispatcher 'd'" in warning.msg


def test_w021_a_celery_broker_that_cannot_be_reached(settings: Any) -> None:
    assert dispatcher_ids(settings, CELERY, {"APP": "tests.test_dispatch_celery.DOWN"}) == []
    [warning] = checks.check_dispatchers(databases=["default"])
    assert warning.id == "schedulinator.W021"
    assert "The Celery broker of the dispatcher 'd' cannot be reached" in warning.msg


def test_w022_an_rq_redis_that_cannot_be_reached(settings: Any) -> None:
    assert dispatcher_ids(settings, RQ, {"QUEUE": "down"}) == []  # in RQ_QUEUES, port 1
    [warning] = checks.check_dispatchers(databases=["default"])
    assert warning.id == "schedulinator.W022"
    assert "The Redis of the RQ queue 'down' (dispatcher 'd')" in warning.msg


def test_w030_a_schedule_declared_in_code_that_is_invalid(settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "SCHEDULES": {"nightly": {"task": "tests.record", "cron": "61 * * * *"}},
    }
    [warning] = checks.check_declared()
    assert warning.id == "schedulinator.W030"
    assert "'nightly' declared in" in warning.msg


def test_e005_use_tz_is_required(settings: Any) -> None:
    settings.USE_TZ = False
    assert setting_ids(settings) == ["schedulinator.E005"]


def test_w040_an_entry_of_commands_that_disagrees_with_its_command(settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "COMMANDS": {
            "clearsessions": {},
            "no_such_command": {},
            "schedtest_echo": {
                "args": ["x"],
                "options": {
                    "--status": True,
                    "--crash": ["yes"],
                    "--nope": True,
                    "--no-color": True,
                },
            },
        },
    }
    messages = checks.check_commands()
    assert {m.id for m in messages} == {"schedulinator.W040"}
    where = "SCHEDULINATOR['COMMANDS']['schedtest_echo']['options']"
    assert [m.msg for m in messages] == [
        "'no_such_command' is in SCHEDULINATOR['COMMANDS'] but is not a management command.",
        f"{where} lists values for --crash, but the command's --crash is a flag: list it as True.",
        f"{where} lists --nope, which schedtest_echo does not take.",
        f"{where} lists --status as a flag (True), but the command's --status takes a value: "
        "list the values it may take.",
    ]


def notify_messages(settings: Any, notify: Any) -> list[Any]:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "NOTIFY": notify}
    return checks.check_notify()


def test_the_default_notifier_passes_with_or_without_admins(settings: Any) -> None:
    settings.ADMINS = []
    assert checks.check_notify() == []  # not set: whoever has not asked is not warned
    assert notify_messages(settings, None) == []


@pytest.mark.parametrize("backend", ["os.system", "no.such.Notifier"])
def test_e050_a_notifier_that_is_not_one(settings: Any, backend: str) -> None:
    [error] = notify_messages(settings, {"BACKEND": backend})
    assert error.id == "schedulinator.E050"
    assert error.msg.startswith(f"SCHEDULINATOR['NOTIFY']['BACKEND'] is {backend!r}, which ")
    assert "BaseNotifier" in (error.hint or "")


def test_e051_a_webhook_target_that_does_not_exist(settings: Any) -> None:
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "DISPATCHERS": {
            "hooks": {
                "BACKEND": "django_schedulinator.dispatch.webhook.WebhookDispatcher",
                "OPTIONS": {
                    "TARGETS": {
                        "ops": {"URL": "https://alerts.internal/", "SECRET": WEBHOOK_SECRET}
                    }
                },
            }
        },
    }
    notifier = "django_schedulinator.operations.notifiers.WebhookNotifier"
    [error] = notify_messages(
        settings, {"BACKEND": notifier, "OPTIONS": {"DISPATCHER": "hooks", "TARGET": "pager"}}
    )
    assert error.id == "schedulinator.E051"
    assert error.msg == (
        "SCHEDULINATOR['NOTIFY']['OPTIONS']: 'TARGET' 'pager' is not one of the TARGETS of "
        "the dispatcher 'hooks' (ops)."
    )
    [error] = notify_messages(
        settings, {"BACKEND": notifier, "OPTIONS": {"DISPATCHER": "default", "TARGET": "ops"}}
    )
    assert "'DISPATCHER' 'default' is not a webhook dispatcher (its BACKEND is Inline" in error.msg
    fine = {"BACKEND": notifier, "OPTIONS": {"DISPATCHER": "hooks", "TARGET": "ops"}}
    assert notify_messages(settings, fine) == []


def test_w050_mail_to_nobody(settings: Any) -> None:
    settings.ADMINS = []
    mail = "django_schedulinator.operations.notifiers.MailNotifier"
    [warning] = notify_messages(settings, {"BACKEND": mail})
    assert warning.id == "schedulinator.W050"
    assert "ADMINS, which is empty" in warning.msg
    settings.ADMINS = [("Ops", "ops@example.com")]
    assert checks.check_notify() == []


def test_the_index_checks_run_only_under_check_database(index: DueIndex) -> None:
    assert checks.check_index(databases=None) == []


def test_w010_redis_unreachable(settings: Any) -> None:
    lose_redis(settings)
    (message,) = checks.check_index(databases=["default"])
    assert message.id == "schedulinator.W010"
    assert "not reachable" in message.msg


@pytest.mark.django_db
def test_w011_the_index_is_not_built(index: DueIndex) -> None:
    """Only while a schedule waits for it: a new project (no schedule yet, as at its first
    ``migrate``) has nothing the missing index keeps from firing, and is told nothing."""
    assert checks.check_index(databases=["default"]) == []
    make_schedule()  # enabled, with a next run: it belongs in the index
    (message,) = checks.check_index(databases=["default"])
    assert message.id == "schedulinator.W011"
    assert "`rebuild_due_index`" in (message.hint or "")
    index.mark_built({})
    assert checks.check_index(databases=["default"]) == []


@pytest.mark.django_db  # the index is not built: W011 asks whether a schedule waits
def test_w012_redis_may_evict_the_index(private_redis: RedisServer, key_prefix: str) -> None:
    client = private_redis.client()
    client.config_set("maxmemory-policy", "allkeys-lru")
    ids = [m.id for m in checks.check_index(databases=["default"])]
    assert "schedulinator.W012" in ids
    client.config_set("maxmemory-policy", "volatile-lru")  # only keys with a TTL: fine
    assert "schedulinator.W012" not in [m.id for m in checks.check_index(databases=["default"])]


# -- one test per id ----------------------------------------------------------------------------


def test_every_check_id_the_code_emits_has_a_test_named_for_it() -> None:
    """``test_e004_...`` for ``schedulinator.E004``: a new id without its test fails here
    (docs/settings.md's table of them is compared with the code in test_docs.py)."""
    package = Path(checks.__file__).resolve().parent  # as installed
    emitted = {
        found.lower()
        for path in package.rglob("*.py")
        for found in re.findall(r'\bid="schedulinator\.([EW]\d{3})"', path.read_text("utf-8"))
    }
    assert "e001" in emitted  # the search finds them
    named = {
        found.lower()
        for path in Path(__file__).parent.glob("test_*.py")
        for found in re.findall(r"^def test_([ew]\d{3})_", path.read_text("utf-8"), re.M | re.I)
    }
    assert sorted(emitted - named) == [], "emitted, with no test named for it"
    assert sorted(named - emitted) == [], "a test named for an id the code never emits"


# -- bad settings: the bad-input matrix (tests/support/rejections.py) ----------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("key", "value", "fragment", "check_id"), SETTINGS_CASES)
def test_system_checks_reject_bad_settings(
    settings: Any,
    key: Any,
    value: Any,
    fragment: str,
    check_id: str,
    key_prefix: str,
    redis_client: Any,
) -> None:
    if key is NOT_A_DICT:
        settings.SCHEDULINATOR = value
        named = "SCHEDULINATOR"
    else:
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, key: value}
        named = f"SCHEDULINATOR[{key!r}]"
    # databases=[]: the app's settings checks only. Django 6.1 otherwise hands the model
    # checks every alias, and a JSONField's check on SQLite queries each (the replica too).
    errors = [m for m in run_checks(databases=[]) if m.id == check_id and m.level >= ERROR]
    assert errors, f"no {check_id}"
    assert any(named in e.msg and fragment in e.msg for e in errors), [e.msg for e in errors]
    assert_nothing_written(redis_client, key_prefix)
