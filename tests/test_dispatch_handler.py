"""The dispatcher aliases as a connection handler (``dispatch.dispatchers``, as Django's
``caches``): an instance per alias and thread, ``all()``, ``close_all()`` when a scheduler
stops and when the setting changes; and ``validate_schedule``, through which a schedule is
checked against what its dispatcher can do."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError

from django_schedulinator import services
from django_schedulinator.dispatch import (
    BaseDispatcher,
    Call,
    DispatcherHandler,
    Occurrence,
    Option,
    Outcome,
    dispatchers,
)
from django_schedulinator.dispatch.celery import CeleryDispatcher
from django_schedulinator.dispatch.inline import InlineDispatcher
from django_schedulinator.errors import InvalidDispatcher, SchedulinatorError, UnknownDispatcher
from django_schedulinator.models import Schedule
from django_schedulinator.scheduler.worker import Worker

from .support.doc_examples import example

CLOSING = "tests.test_dispatch_handler.Closing"


class Closing(BaseDispatcher):
    """Remembers which of its instances were closed."""

    closed: ClassVar[list[Closing]] = []
    options = {"LABEL": Option(str, "A label.", default="first")}

    def send(self, occurrence: Occurrence, call: Call) -> Outcome:
        return Outcome(occurrence.run_id, "dispatched")

    def close(self) -> None:
        self.closed.append(self)


@pytest.fixture
def configure(settings: Any) -> Any:
    Closing.closed.clear()

    def configure(**aliases: dict[str, Any]) -> None:
        settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "DISPATCHERS": aliases}

    yield configure
    dispatchers.close_all()


def test_each_alias_has_one_instance_per_thread(configure: Any) -> None:
    configure(one={"BACKEND": CLOSING}, two={"BACKEND": CLOSING})
    one = dispatchers["one"]
    assert isinstance(one, Closing)
    assert (one.alias, dispatchers["two"].alias) == ("one", "two")
    assert dispatchers["one"] is one
    assert dispatchers["two"] is not one
    # Another thread gets its own: an instance is never shared between threads.
    elsewhere: list[BaseDispatcher] = []
    thread = threading.Thread(target=lambda: elsewhere.append(dispatchers["one"]))
    thread.start()
    thread.join()
    assert isinstance(elsewhere[0], Closing)
    assert elsewhere[0] is not one


def test_create_connection_builds_an_instance_its_caller_owns(configure: Any) -> None:
    configure(one={"BACKEND": CLOSING, "OPTIONS": {"LABEL": "own"}})
    own = dispatchers.create_connection("one")
    assert own is not dispatchers["one"]
    assert own.settings["LABEL"] == "own"
    own.close()
    assert Closing.closed == [own]


def test_all_lists_every_alias_or_those_built(configure: Any) -> None:
    configure(one={"BACKEND": CLOSING}, two={"BACKEND": CLOSING})
    assert dispatchers.all(initialized_only=True) == []
    two = dispatchers["two"]
    assert dispatchers.all(initialized_only=True) == [two]
    every = dispatchers.all()
    assert [d.alias for d in every] == ["default", "one", "two"]
    assert isinstance(every[0], InlineDispatcher)
    assert every[2] is two
    assert dispatchers.aliases() == ["default", "one", "two"]


def test_close_all_closes_and_forgets_the_instances(configure: Any) -> None:
    configure(one={"BACKEND": CLOSING}, two={"BACKEND": CLOSING})
    one = dispatchers["one"]
    dispatchers.close_all()
    assert Closing.closed == [one]  # "two" was never built: nothing to close
    assert dispatchers["one"] is not one  # a new one


def test_a_changed_setting_closes_the_instances_and_is_read_again(configure: Any) -> None:
    configure(one={"BACKEND": CLOSING})
    first = dispatchers["one"]
    assert first.settings["LABEL"] == "first"
    configure(one={"BACKEND": CLOSING, "OPTIONS": {"LABEL": "second"}})
    assert Closing.closed == [first]
    assert dispatchers["one"].settings["LABEL"] == "second"
    configure()
    with pytest.raises(UnknownDispatcher):
        dispatchers["one"]


def test_a_stopping_scheduler_closes_its_threads_instances(configure: Any) -> None:
    configure(one={"BACKEND": CLOSING})
    worker = Worker(worker_id="t", dispatcher=Closing("given"))
    shared = dispatchers["one"]  # as validation or the status would build it in this thread
    worker.close()
    assert {d.alias for d in Closing.closed} == {"given", "one"}
    assert shared in Closing.closed


def test_an_alias_that_is_missing_or_cannot_be_built_raises_the_apps_errors(
    configure: Any,
) -> None:
    configure(broken={"BACKEND": "os.system"})
    with pytest.raises(UnknownDispatcher, match="'nope' is not a dispatcher alias") as unknown:
        dispatchers["nope"]
    with pytest.raises(InvalidDispatcher, match="which is not a BaseDispatcher") as invalid:
        dispatchers["broken"]
    for caught in (unknown, invalid):
        assert isinstance(caught.value, SchedulinatorError)
        assert isinstance(caught.value, ImproperlyConfigured)  # what callers caught before


def test_a_handler_may_be_given_its_aliases() -> None:
    handler = DispatcherHandler({"default": {"BACKEND": CLOSING, "OPTIONS": {"LABEL": "x"}}})
    assert handler.aliases() == ["default"]
    assert handler["default"].settings["LABEL"] == "x"
    handler.close_all()


# -- validate_schedule ----------------------------------------------------------------------


def test_capabilities_are_declared_on_the_class() -> None:
    """Celery's depends on its OPTIONS: a property of the class, not set by the constructor."""
    assert not BaseDispatcher.reports_outcomes
    assert InlineDispatcher.reports_outcomes
    assert InlineDispatcher.runs_in_process
    assert isinstance(CeleryDispatcher.__dict__["reports_outcomes"], property)
    app = {"APP": "myproject.celery.app"}  # not imported until it sends
    assert not CeleryDispatcher("c", app).reports_outcomes
    assert CeleryDispatcher("c", {**app, "REPORTS_OUTCOMES": True}).reports_outcomes


def schedule(**fields: Any) -> Schedule:
    fields.setdefault("name", "s")
    fields.setdefault("kind", Schedule.Kind.INTERVAL)
    fields.setdefault("interval", timedelta(hours=1))
    return Schedule(task="tests.record", **fields)


def test_the_base_class_refuses_options_and_policies_it_cannot_serve() -> None:
    class NeverLearns(BaseDispatcher):
        schedule_options = {"queue": Option(str, "A queue.")}

        def send(self, occurrence: Occurrence, call: Call) -> Outcome:
            raise AssertionError

    with pytest.raises(ValidationError) as caught:
        NeverLearns("fire").validate_schedule(
            schedule(dispatch_options={"route": "x"}, overlap="skip", pause_after_failures=2)
        )
    errors = caught.value.message_dict
    assert set(errors) == {"dispatch_options", "overlap", "pause_after_failures"}
    assert "has no option 'route' (options it takes: queue)" in errors["dispatch_options"][0]
    assert "'fire' (NeverLearns) never learns" in errors["overlap"][0]
    NeverLearns("fire").validate_schedule(schedule(dispatch_options={"queue": "q"}))


def test_the_validate_schedule_example_of_the_docs_adds_its_own_check() -> None:
    """docs/dispatch.md "What a dispatcher declares", as written."""
    daily = example("validate-schedule")["DailyOnlyDispatcher"]("daily")
    with pytest.raises(ValidationError) as caught:
        daily.validate_schedule(schedule(interval=timedelta(hours=1)))
    assert caught.value.message_dict == {"interval": ["This receiver takes at most one run a day."]}
    daily.validate_schedule(schedule(interval=timedelta(days=1)))
    with pytest.raises(ValidationError, match="has no option"):  # the base class's checks first
        daily.validate_schedule(schedule(interval=timedelta(days=1), dispatch_options={"q": 1}))


@pytest.mark.django_db
def test_a_schedules_validation_asks_its_dispatcher_through_the_handler(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(one={"BACKEND": CLOSING})
    asked: list[tuple[str, str]] = []

    def validate_schedule(self: BaseDispatcher, schedule: Schedule) -> None:
        asked.append((self.alias, schedule.name))
        raise ValidationError({"dispatch_options": "Refused by the dispatcher."})

    monkeypatch.setattr(Closing, "validate_schedule", validate_schedule)
    with pytest.raises(ValidationError) as caught:
        services.create(schedule(name="mine", dispatcher="one"))
    assert caught.value.message_dict["dispatch_options"] == ["Refused by the dispatcher."]
    assert asked == [("one", "mine")]


def test_the_handler_refuses_an_alias_it_does_not_have(configure: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        dispatchers.validate_schedule(schedule(dispatcher="gone"))
    assert "'gone' is not a dispatcher alias" in caught.value.message_dict["dispatcher"][0]
    # A saved schedule that keeps an alias since removed is not refused for it.
    dispatchers.validate_schedule(schedule(dispatcher="gone"), keeps_unknown_alias=True)
