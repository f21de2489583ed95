"""The models (``django_schedulinator/models.py``): validation (a field-named error and
nothing written, for every bad value of the matrix in ``tests/support/rejections.py``), what
``save()`` does and refuses (it validates and writes; the services decide), what a row
derives on its own (previews, descriptions), and a delete racing a scheduler."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from django_schedulinator import models, services
from django_schedulinator.conf import MAX_JSON_DEPTH
from django_schedulinator.index import clock
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.models.batches import Advance
from django_schedulinator.timing import to_ms, truncate_ms

from .support.commits import Client, committed
from .support.doc_examples import example
from .support.rejections import (
    DEEP,
    MODEL_CASES,
    ODD_NAMES,
    assert_field_error,
    assert_nothing_written,
    deep_value,
)
from .support.schedules import make_schedule, model_fields
from .support.simulation import Simulation, utc

# -- validation: a field-named error, and nothing written -------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"cron": "61 * * * *"}, "cron", "Bad minute"),
        ({"cron": "* * *"}, "cron", "has 3"),
        ({"cron": ""}, "cron", "Enter a cron expression"),
        ({"cron": "@fortnightly"}, "cron", "Unknown cron alias"),
        ({"cron": "0 0 30 2 *"}, "cron", "Bad day-of-month"),
        ({"cron": "* * */20 * 1L"}, "cron", "never matches"),
        ({"cron": "* " * 300}, "cron", "at most 200"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", "Unknown time zone"),
        ({"timezone": "../../etc/passwd"}, "timezone", "Unknown time zone"),
        ({"task": "os.system"}, "task", "not a registered task"),
        ({"task": "tests.nope"}, "task", "not a registered task"),
        ({"args": {"a": 1}}, "args", "JSON list"),
        ({"args": "[1, 2"}, "args", "JSON list"),
        ({"args": [object()]}, "args", "valid JSON"),
        ({"kwargs": [1]}, "kwargs", "JSON object"),
        ({"kwargs": {"occurrence": 1}}, "kwargs", "reserved"),
        ({"kind": "interval", "interval": timedelta(0)}, "interval", "at least"),
        ({"kind": "interval", "interval": None}, "interval", "needs an interval"),
        ({"kind": "once", "run_at": None}, "run_at", "needs a time"),
        ({"kind": "weekly"}, "kind", "not a valid choice"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(
    overrides: dict[str, Any], field: str, fragment: str, index: DueIndex
) -> None:
    with pytest.raises(ValidationError) as caught:
        Schedule(**model_fields(**overrides)).save()
    errors = caught.value.message_dict
    assert field in errors, errors
    assert any(fragment in message for message in errors[field]), errors
    assert not Schedule.objects.exists()
    assert index.client.zcard(index.due_key) == 0


@pytest.mark.django_db
def test_a_new_one_off_in_the_past_is_refused_by_the_services_and_save_reads_no_clock(
    index: DueIndex,
) -> None:
    fields = model_fields(kind="once", run_at=timezone.now() - timedelta(days=1))
    for path in (services.validate, services.create):
        with pytest.raises(ValidationError) as caught:
            path(Schedule(**fields))
        assert_field_error(caught.value.message_dict, "run_at", "future")
    assert not Schedule.objects.exists()
    # The row's own rules hold it valid: whether its time has passed needs the
    # schedulers' clock, which only the services read (docs/concepts.md).
    Schedule(**fields).full_clean()


@pytest.mark.django_db
def test_valid_schedule_is_saved_with_its_next_run() -> None:
    schedule = services.create(Schedule(**model_fields()))
    schedule.refresh_from_db()
    assert schedule.next_run_at is not None
    assert schedule.next_run_at > timezone.now()
    assert schedule.revision == 1


# -- save() validates and writes; the services decide (docs/concepts.md#the-write-path-services)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "save_it",
    [
        pytest.param(lambda fields: Schedule(**fields).save(), id="save"),
        pytest.param(lambda fields: Schedule.objects.create(**fields), id="objects.create"),
    ],
)
def test_a_new_schedule_saved_without_its_first_run_is_refused(
    save_it: Any, key_prefix: str, redis_client: Any
) -> None:
    # save() reads no clock, so it cannot decide the first run: it says who does.
    with pytest.raises(ValidationError) as caught:
        save_it(model_fields())
    [message] = caught.value.message_dict["next_run_at"]
    assert "services.create()" in message
    assert "set_first_run(now)" in message
    assert_nothing_written(redis_client, key_prefix)


@pytest.mark.django_db
def test_set_first_run_decides_at_the_callers_now(index: DueIndex) -> None:
    now = datetime(2031, 5, 6, 1, 0, tzinfo=UTC)  # not the clock's: the caller's
    schedule = Schedule(**model_fields(cron="0 3 * * *", timezone="UTC"))
    schedule.set_first_run(now)
    assert (schedule.next_run_at, schedule.due_at) == (now.replace(hour=3),) * 2
    with committed():
        schedule.save()
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == now.replace(hour=3)
    assert index.scores([schedule.pk]) == {schedule.pk: to_ms(now.replace(hour=3))}


@pytest.mark.django_db
def test_the_docs_example_of_saving_a_new_schedule_yourself(index: DueIndex) -> None:
    schedule = example("save-yourself", "concepts.md")["schedule"]
    row = Schedule.objects.get(pk=schedule.pk)
    assert row.next_run_at is not None
    assert row.next_run_at == row.first_run_at(row.next_run_at - timedelta(minutes=1))
    assert index.scores([row.pk]) == {row.pk: to_ms(row.next_run_at)}


@pytest.mark.django_db
def test_set_first_run_of_a_paused_schedule_records_when_it_was_paused() -> None:
    now = timezone.now()
    schedule = Schedule(**model_fields(enabled=False))
    schedule.set_first_run(now)
    schedule.save()
    assert (schedule.paused_at, schedule.next_run_at) == (now, schedule.first_run_at(now))


@pytest.mark.django_db
def test_a_new_schedule_with_a_next_run_is_saved_as_given(index: DueIndex) -> None:
    at = timezone.now() + timedelta(hours=5, microseconds=123_456)
    schedule = Schedule(**model_fields(next_run_at=at))
    with committed():
        schedule.save()
    stored = Schedule.objects.get(pk=schedule.pk)
    assert stored.next_run_at == truncate_ms(at)  # the index's precision, nothing decided
    assert index.scores([schedule.pk]) == {schedule.pk: to_ms(at)}


@pytest.mark.django_db
def test_a_new_paused_schedule_without_its_pause_time_is_refused() -> None:
    fields = model_fields(enabled=False, next_run_at=timezone.now() + timedelta(hours=1))
    with pytest.raises(ValidationError) as caught:
        Schedule(**fields).save()
    assert "services.pause()" in caught.value.message_dict["enabled"][0]


@pytest.mark.django_db
def test_save_reads_no_clock_and_moves_the_counters() -> None:
    schedule = make_schedule()
    before = Schedule.objects.get(pk=schedule.pk)
    schedule.args = ["edited"]
    with (
        mock.patch.object(clock, "now", side_effect=AssertionError("save() read Redis TIME")),
        mock.patch.object(timezone, "now", side_effect=AssertionError("save() read the host")),
    ):
        schedule.save()
    after = Schedule.objects.get(pk=schedule.pk)
    assert after.args == ["edited"]
    assert (after.revision, after.version) == (before.revision + 1, before.version + 1)
    assert after.updated_at >= before.updated_at
    assert (after.next_run_at, after.due_at) == (before.next_run_at, before.due_at)


@pytest.mark.django_db
def test_a_timing_change_saved_alone_is_refused() -> None:
    schedule = make_schedule(kind="cron", cron="0 9 * * *", timezone="UTC")
    schedule.cron = "15 10 * * *"
    with pytest.raises(ValidationError) as caught:
        schedule.save()
    [message] = caught.value.message_dict["next_run_at"]
    assert "(cron)" in message
    assert "services.update()" in message
    assert Schedule.objects.get(pk=schedule.pk).cron == "0 9 * * *"


@pytest.mark.django_db
def test_a_timing_change_with_its_next_run_is_saved_as_given() -> None:
    schedule = make_schedule(kind="cron", cron="0 9 * * *", timezone="UTC")
    chosen = truncate_ms(timezone.now()) + timedelta(days=3)  # not on the grid: the caller's
    schedule.cron = "15 10 * * *"
    schedule.next_run_at = chosen
    schedule.save()
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.cron, row.next_run_at) == ("15 10 * * *", chosen)


@pytest.mark.django_db
@pytest.mark.parametrize("enabled", [False, True])
def test_pausing_or_resuming_with_save_alone_is_refused(enabled: bool) -> None:
    schedule = make_schedule(enabled=not enabled)
    schedule.enabled = enabled
    with pytest.raises(ValidationError) as caught:
        schedule.save()
    service = "services.resume()" if enabled else "services.pause()"
    assert service in caught.value.message_dict["enabled"][0]
    assert Schedule.objects.get(pk=schedule.pk).enabled is not enabled


@pytest.mark.django_db
def test_a_pause_written_by_hand_is_saved_as_given(index: DueIndex) -> None:
    schedule = make_schedule()
    kept = schedule.next_run_at
    schedule.enabled, schedule.paused_at = False, timezone.now()
    with committed():
        schedule.save()
    row = Schedule.objects.get(pk=schedule.pk)
    assert (row.enabled, row.next_run_at) == (False, kept)
    assert index.scores([schedule.pk]) == {schedule.pk: None}


@pytest.mark.django_db
def test_update_fields_that_change_the_timing_must_name_the_next_run() -> None:
    schedule = make_schedule(kind="cron", cron="0 9 * * *", timezone="UTC")
    schedule.cron = "15 10 * * *"
    with pytest.raises(ValidationError):
        schedule.save(update_fields=["cron"])
    schedule.next_run_at = schedule.first_run_at(timezone.now())
    schedule.save(update_fields=["cron", "next_run_at"])
    assert Schedule.objects.get(pk=schedule.pk).version == 2


@pytest.mark.django_db
def test_the_counters_move_in_one_place_and_the_advance_moves_the_revision_alone() -> None:
    schedule = make_schedule()
    rows = Schedule.objects.filter(pk=schedule.pk)
    before = rows.get()
    assert rows.change(pause_note="noted") == 1
    changed = rows.get()
    assert (changed.revision, changed.version) == (before.revision + 1, before.version + 1)
    assert changed.updated_at >= before.updated_at
    nominal = truncate_ms(timezone.now()) + timedelta(hours=2)
    advance = Advance(schedule.pk, changed.revision, nominal, nominal, 1)
    with transaction.atomic():
        rows.advance([advance], timezone.now())
    fired = rows.get()
    assert (fired.revision, fired.version) == (changed.revision + 1, changed.version)
    assert fired.updated_at == changed.updated_at
    # Nothing else in the package moves the version: every change goes through
    # querysets.counters_moved (save() and ScheduleQuerySet.change).
    package = Path(models.__file__).parent
    sources = [p.read_text("utf-8") for p in package.rglob("*.py") if "migrations" not in p.parts]
    assert sum(source.count('F("version")') for source in sources) == 1


# -- validation: the bad-input matrix (tests/support/rejections.py) ------------------------------


def create(schedule: Schedule) -> None:
    services.create(schedule)


def validate(schedule: Schedule) -> None:
    services.validate(schedule)


@pytest.mark.usefixtures("small_payload_limit")
@pytest.mark.parametrize(
    "path",
    [
        # create() commits: a sync to Redis (on commit) could happen, were anything saved.
        pytest.param(create, id="create", marks=pytest.mark.django_db),
        # validate() writes nothing by itself: a rolled-back test transaction will do.
        pytest.param(validate, id="validate", marks=pytest.mark.django_db),
    ],
)
@pytest.mark.parametrize(("overrides", "field", "fragment"), MODEL_CASES)
def test_model_rejects_bad_input(
    path: Any,
    overrides: dict[str, Any],
    field: str,
    fragment: str,
    key_prefix: str,
    redis_client: Any,
) -> None:
    with pytest.raises(ValidationError) as caught:
        path(Schedule(**model_fields(**overrides)))
    assert_field_error(caught.value.message_dict, field, fragment)
    assert_nothing_written(redis_client, key_prefix)


@pytest.mark.django_db
def test_model_full_clean_rejects_a_duplicate_name(key_prefix: str, redis_client: Any) -> None:
    # Created in bulk: no signal, so the index stays empty and any key would be new.
    Schedule.objects.bulk_create([Schedule(**model_fields())])
    with pytest.raises(ValidationError) as caught:
        Schedule(**model_fields(cron="0 4 * * *")).full_clean()
    assert_field_error(caught.value.message_dict, "name", "already exists")
    assert_nothing_written(redis_client, key_prefix, schedules=1)


# -- positive controls: odd names are data, never part of a Redis key or script ---------------


@pytest.mark.django_db
@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_but_valid_names_are_saved_and_indexed_by_id(name: str, index: DueIndex) -> None:
    with committed():
        schedule = services.create(Schedule(**model_fields(name=name)))
    assert Schedule.objects.get(pk=schedule.pk).name == name
    assert index.scores([schedule.pk]) == {schedule.pk: to_ms(schedule.next_run_at)}
    members = index.client.zrange(index.due_key, 0, -1)
    assert members == [str(schedule.pk).encode()]


# -- JSON nested deeper than Python's json (and the databases) can take -----------------------


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["args", "kwargs"])
@pytest.mark.parametrize("levels", [DEEP, MAX_JSON_DEPTH + 1])
def test_model_validation_names_args_nested_too_deep(
    key_prefix: str, redis_client: Any, field: str, levels: int
) -> None:
    schedule = Schedule(**model_fields(**{field: deep_value(field, levels)}))
    with pytest.raises(ValidationError) as caught:
        schedule.full_clean()
    assert f"{MAX_JSON_DEPTH} levels" in " ".join(caught.value.message_dict[field])
    with pytest.raises(ValidationError):
        schedule.save()
    assert_nothing_written(redis_client, key_prefix)


# -- previews and descriptions ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_preview_shows_local_and_utc_times_and_flags_dst(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="30 2 * * *", timezone="Europe/Berlin")
    items = schedule.preview(3)

    assert [i.at for i in items] == [
        utc("2026-03-28T01:30"), utc("2026-03-29T01:30"), utc("2026-03-30T00:30"),
    ]  # fmt: skip
    assert [f"{i.local:%H:%M %Z}" for i in items] == ["02:30 CET", "03:30 CEST", "02:30 CEST"]
    assert [i.dst for i in items] == ["", "shifted", ""]
    assert "runs at 03:30 CEST instead" in items[1].note
    assert schedule.description == "At 02:30 (Europe/Berlin)"


# -- a delete racing a scheduler --------------------------------------------------------------


def _delete_by(how: str, schedule: Schedule) -> None:
    if how == "model":
        schedule.delete()
    elif how == "queryset":
        Schedule.objects.filter(pk=schedule.pk).delete()
    else:
        client = Client()
        client.force_login(User.objects.create_superuser("admin", "a@example.com", None))
        if how == "admin":
            url = reverse("admin:django_schedulinator_schedule_delete", args=[schedule.pk])
            response = client.post(url, {"post": "yes"})
        else:  # the changelist's bulk delete
            response = client.post(
                reverse("admin:django_schedulinator_schedule_changelist"),
                {"action": "delete_selected", "_selected_action": [schedule.pk], "post": "yes"},
            )
        assert response.status_code == 302, response.content


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="needs real row locks: SQLite serialises whole write transactions",
)
@pytest.mark.parametrize("how", ["model", "queryset", "admin", "admin bulk"])
def test_a_delete_racing_a_schedulers_run_insert_deletes_both(how: str) -> None:
    """A scheduler's transaction advances the schedule and inserts a run of it while the
    delete runs: the delete waits for it and takes the run with it,
    instead of failing at commit on the run's deferred foreign key (IntegrityError, a 500
    in the admin) and leaving the schedule in place."""
    schedule = make_schedule()
    inserted, saw_delete_waiting = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def scheduler() -> None:
        # A real second connection (Django gives each thread its own), as a scheduler's.
        try:
            with transaction.atomic():
                # The scheduler's shape: the conditional advance of the row (which locks
                # it), then the run, whose foreign key is checked at commit.
                Schedule.objects.filter(pk=schedule.pk).update(revision=F("revision") + 1)
                Run.objects.create(
                    schedule_id=schedule.pk,
                    scheduled_for=timezone.now(),
                    task=schedule.task,
                    claimed_at=timezone.now(),
                    worker_id="racing-scheduler",
                )
                inserted.set()
                # Commit only once the delete waits on this transaction's lock.
                with connection.cursor() as cursor:
                    for _ in range(600):
                        cursor.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                            "'Lock' AND datname = current_database() AND pid <> pg_backend_pid()"
                        )
                        if cursor.fetchone()[0]:
                            saw_delete_waiting.set()
                            break
                        time.sleep(0.05)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
            inserted.set()
        finally:
            connection.close()

    thread = threading.Thread(target=scheduler)
    thread.start()
    assert inserted.wait(30)
    try:
        _delete_by(how, schedule)
    finally:
        thread.join(60)
    assert not errors, errors
    assert saw_delete_waiting.is_set()  # the race did happen
    assert not Schedule.objects.filter(pk=schedule.pk).exists()
    assert not Run.objects.filter(schedule_id=schedule.pk).exists()
