"""The reads of every pass, compiled once (``batches.PreparedQuery``): the same rows as
the ORM gives, converted the same way, for any batch of ids and any value."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_schedulinator.models import Run, Schedule, ZoneRules, spans
from django_schedulinator.models.spans import Span
from django_schedulinator.scheduler.claiming import RECHECK, ROW_FIELDS
from django_schedulinator.scheduler.held import HELD

from .support.schedules import make_schedule

pytestmark = pytest.mark.django_db


def test_the_recheck_reads_what_the_orm_reads() -> None:
    schedules = [
        make_schedule(args=[1, "two", {"three": None}], kwargs={"k": [True]}, jitter=timedelta(0)),
        make_schedule(kind=Schedule.Kind.CRON, cron="*/5 * * * *", timezone="Asia/Kathmandu"),
        make_schedule(
            kind=Schedule.Kind.ONCE, run_at=timezone.now() + timedelta(days=3), grace=timedelta(1)
        ),
    ]
    ids = [s.pk for s in schedules]
    expected = list(Schedule.objects.filter(pk__in=ids).values_list(*ROW_FIELDS, named=True))

    for batch in (ids, ids[:1], [*ids, 10**9]):
        # Each row also carries the tz release the next runs were planned with (below).
        rows = [(*row[: len(ROW_FIELDS)],) for row in RECHECK.rows("default", batch)]
        assert sorted(rows) == sorted(r for r in expected if r.pk in batch)
    # Fields are named and typed as Django gives them.
    [row] = RECHECK.rows("default", ids[:1])
    assert (row.args, row.kwargs, row.enabled) == ([1, "two", {"three": None}], {"k": [True]}, True)
    assert row.next_run_at.tzinfo is not None


def test_one_compilation_serves_every_batch_and_value(built_index: Any) -> None:
    schedule = make_schedule(next_run_at=timezone.now() - timedelta(seconds=1))
    run = Run.objects.create(
        schedule=schedule,
        scheduled_for=timezone.now(),
        task=schedule.task,
        claim_token="mine",
        claimed_at=timezone.now(),
        lease_expires_at=timezone.now() + timedelta(minutes=1),
    )
    span = Span.of([run.scheduled_for])
    assert HELD.rows("default", [run.pk], "mine", span=span) == [(run.pk, "schedule", True)]
    compiled = HELD._compiled.default  # this thread's, for this database (a plain ledger)
    assert HELD.rows("default", [run.pk], "theirs", span=span) == []
    assert HELD.rows("default", [run.pk, run.pk + 1], "mine", span=span) == [
        (run.pk, "schedule", True)
    ]
    assert HELD.rows("default", [], "mine", span=span) == []
    assert HELD._compiled.default is compiled


def test_a_spanned_query_is_bounded_by_each_executions_own_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The span's ends are slots of the compiled statement, like the ids: each execution
    finds the runs within its own span, both ends included, and none outside it; without
    a span, the statement compiled without the bound finds them all. (Bounds are written
    where the ledger is partitioned: here the plain table stands in for one.)"""
    monkeypatch.setattr(spans, "ledger_partitioned", lambda using: True)
    schedule = make_schedule()
    now = timezone.now().replace(microsecond=0)
    times = [now - timedelta(days=3), now, now + timedelta(days=2, milliseconds=1)]
    runs = [
        Run.objects.create(
            schedule=schedule,
            scheduled_for=at,
            task=schedule.task,
            claim_token="mine",
            claimed_at=now,
            lease_expires_at=now + timedelta(minutes=1),
        )
        for at in times
    ]
    ids = [r.pk for r in runs]

    def held(span: Span | None) -> set[int]:
        return {row.pk for row in HELD.rows("default", ids, "mine", span=span)}

    assert held(Span.of(times)) == set(ids)
    assert held(Span(times[1], times[1])) == {ids[1]}
    assert held(Span(times[0], times[1])) == set(ids[:2])
    assert held(Span(times[1] + timedelta(milliseconds=1), times[2])) == {ids[2]}
    assert held(Span(times[2] + timedelta(milliseconds=1), times[2] + timedelta(days=1))) == set()
    assert held(None) == set(ids)
    assert HELD._spanned.default is not HELD._compiled.default


def test_on_a_plain_ledger_a_span_changes_no_statement() -> None:
    """A bound prunes nothing on a plain table, and a range of fresh times misleads
    PostgreSQL's estimates (spans.py): the statements stay as they were."""
    span = Span.of([timezone.now()])
    HELD._spanned.__dict__.pop("default", None)  # another test's, in this thread
    assert not spans.ledger_partitioned("default")
    assert str(Run.objects.within(span).pending().query) == str(Run.objects.pending().query)
    HELD.rows("default", [1], "mine", span=span)
    assert "default" not in HELD._spanned.__dict__


def test_a_query_made_without_a_span_refuses_one() -> None:
    with pytest.raises(TypeError):
        RECHECK.rows("default", [1], span=Span.of([timezone.now()]))


def test_the_recheck_converts_as_django_does_and_gives_each_row_its_own_values() -> None:
    """Empty arguments are made without the JSON decoder and timestamps loaded by psycopg's
    own loader where the connection is on UTC: the values, their types and their zones are
    Django's, and no two rows share a list or a dict (a task may change its arguments)."""
    first = timezone.now().replace(microsecond=123000) + timedelta(hours=1)
    schedules = [
        make_schedule(next_run_at=first),
        make_schedule(next_run_at=first),
        make_schedule(args=["[]", "{}"], kwargs={"{}": []}, dispatch_options={"queue": "q"}),
    ]
    ids = [s.pk for s in schedules]
    expected = {
        r.pk: r for r in Schedule.objects.filter(pk__in=ids).values_list(*ROW_FIELDS, named=True)
    }

    rows = {row.pk: row for row in RECHECK.rows("default", ids)}

    assert {pk: (*row[: len(ROW_FIELDS)],) for pk, row in rows.items()} == expected
    for pk, row in rows.items():
        for name in ROW_FIELDS:
            value, orm = getattr(row, name), getattr(expected[pk], name)
            assert type(value) is type(orm), name
            if hasattr(orm, "tzinfo"):
                assert value.tzinfo == orm.tzinfo, name
                assert value.utcoffset() == orm.utcoffset(), name
    one, two, three = (rows[pk] for pk in ids)
    assert one.next_run_at == first
    assert (one.args, one.kwargs, one.dispatch_options) == ([], {}, {})
    assert one.args is not two.args
    assert one.kwargs is not two.kwargs
    assert (three.args, three.kwargs) == (["[]", "{}"], {"{}": []})


def test_the_recheck_reads_the_release_the_next_runs_were_planned_with() -> None:
    schedule = make_schedule()
    now = timezone.now()
    ZoneRules.objects.update_or_create(
        pk=1,
        defaults={"version": "2031a", "source": "tzdata", "start": now, "end": now,
                  "offsets": {}, "recorded_at": now},
    )  # fmt: skip

    [row] = RECHECK.rows("default", [schedule.pk])

    assert row.planned_with == "2031a"
