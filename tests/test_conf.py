"""The table of settings (conf.py): one descriptor per key, read at every access; the nested
settings parsed by the modules that use them."""

from __future__ import annotations

from typing import Any

import pytest

from django_schedulinator import conf
from django_schedulinator.conf import Settings, app_settings

from .test_structure import PACKAGE, import_graph


def test_each_nested_setting_is_parsed_by_the_module_it_names() -> None:
    # conf imports nothing of the package but the vocabularies its values take (timing's,
    # which import nothing): each module hands its parser over when it is imported, and
    # AppConfig.ready() imports them all.
    assert import_graph()[f"{PACKAGE}.conf"] == {f"{PACKAGE}.timing.vocabulary"}
    assert import_graph()[f"{PACKAGE}.timing.vocabulary"] == set()
    nested = {name: s for name, s in conf.TABLE.items() if s.parse is conf.parse_nested}
    assert sorted(nested) == ["COMMANDS", "DISPATCHERS", "NOTIFY", "REDIS", "SENTRY_CRONS"]
    for name, setting in nested.items():
        assert conf._delegates[name].__module__ == setting.parsed_in, name


def test_a_nested_setting_whose_parser_was_not_handed_over_says_which_module_parses_it() -> None:
    orphan = conf.nested("ORPHAN", {}, "somewhere.else")
    with pytest.raises(RuntimeError, match=r"\['ORPHAN'\] is parsed by somewhere\.else"):
        orphan.read()


def test_only_a_nested_setting_takes_a_parser() -> None:
    with pytest.raises(TypeError, match="BATCH_SIZE"):
        Settings.BATCH_SIZE.parsed_by(conf.parse_whole_number)


def test_a_setting_is_declared_under_its_own_name() -> None:
    with pytest.raises((TypeError, RuntimeError)) as caught:

        class Wrong:
            OTHER = conf.whole("BATCH_SIZE", 500, 5000)

    error = caught.value.__cause__ or caught.value  # Python 3.11 wraps it in a RuntimeError
    assert "'BATCH_SIZE' is declared as 'OTHER'" in str(error)


def test_a_setting_is_read_at_every_access(settings: Any) -> None:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "BATCH_SIZE": 7}
    assert app_settings.BATCH_SIZE == 7
    settings.SCHEDULINATOR = {k: v for k, v in settings.SCHEDULINATOR.items() if k != "BATCH_SIZE"}
    assert app_settings.BATCH_SIZE == Settings.BATCH_SIZE.default == conf.DEFAULTS["BATCH_SIZE"]


@pytest.mark.parametrize("name", ["MailNotifier", "WebhookNotifier"])
def test_a_built_in_notifiers_former_path_is_read_as_its_path_now(settings: Any, name: str) -> None:
    # The notifiers moved from django_schedulinator.notify: a BACKEND that names one where
    # it was still works, and is the notifier where it is.
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "NOTIFY": {"BACKEND": f"django_schedulinator.notify.{name}"},
    }
    config = app_settings.NOTIFY
    assert config is not None
    assert config.backend == f"{PACKAGE}.operations.notifiers.{name}"
    # Any other path is taken as written.
    settings.SCHEDULINATOR = {
        **settings.SCHEDULINATOR,
        "NOTIFY": {"BACKEND": "django_schedulinator.notify.Other"},
    }
    config = app_settings.NOTIFY
    assert config is not None
    assert config.backend == "django_schedulinator.notify.Other"
