"""The SQL of a batch: the shapes of the rows a claim advances and records (``Advance``,
``NewRun``), a batch's rows carried as one JSON parameter (``json_ids``, ``json_rows``,
``per_row``), the prepared statements the hot path reuses (``PreparedQuery``), and how the
advance tells a lock wait that ran out. The querysets (``querysets``) build their statements
from these; the services and the scheduler give their batches in these shapes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.db import connections, models
from django.db.models import Case, F, Value, When
from django.db.models.expressions import Col, RawSQL
from django.db.models.utils import create_namedtuple_class

from django_schedulinator.models import spans
from django_schedulinator.models.spans import Span
from django_schedulinator.statuses import RunStatus


class Advance(NamedTuple):
    """Move one schedule past its due occurrences, if its row still holds ``revision``."""

    schedule_id: int
    revision: int
    next_run_at: datetime | None
    due_at: datetime | None
    fired: int  # occurrences that fire (or wait, buffered): added to run_count
    # The latest occurrence the claim decided: ``Schedule.fired_through`` moves up to it.
    through: datetime | None = None


class NewRun(NamedTuple):
    """One occurrence to enter the ledger, with what will be (or would have been) run."""

    schedule_id: int
    scheduled_for: datetime
    task: str
    args: Any
    kwargs: Any
    dispatcher: str
    dispatch_options: Any
    status: str = RunStatus.PENDING
    trigger: str = "schedule"
    skip_reason: str = ""
    note: str = ""
    attempts: int = 1
    # Pending runs only: the lease of the process that dispatches them. A run queued for
    # any scheduler to take (run now, backfill) carries one that has already expired.
    lease_expires_at: datetime | None = None
    # Runs of a schedule with a grace (not skipped ones): when the run is missed unless it
    # has succeeded (Run.alert_at).
    alert_at: datetime | None = None

    @classmethod
    def of(cls, source: Any, at: datetime, **fields: Any) -> NewRun:
        """A run of ``source`` (a Schedule, or a row with its pk, task, args, kwargs,
        dispatcher and dispatch options) at ``at``: what it runs, and where, is a snapshot
        of the schedule's."""
        return cls(
            source.pk,
            at,
            source.task,
            source.args,
            source.kwargs,
            source.dispatcher,
            source.dispatch_options,
            **fields,
        )


# The defaults of NewRun's fields after kwargs: a run that has them all is sent short.
PLAIN_RUN = (RunStatus.PENDING, "schedule", "", "", 1, None, None)


# Backends whose batches travel as one JSON parameter: the SQL text stays short and constant
# (the driver parses it once), whatever the batch size, and nothing is quoted per value.
JSON_BATCH_VENDORS = ("postgresql", "sqlite")


def batches_as_json(connection: Any) -> bool:
    # RETURNING arrived in SQLite 3.35; Django's flag tracks it for both backends.
    return (
        connection.vendor in JSON_BATCH_VENDORS
        and connection.features.can_return_columns_from_insert
    )


# Earlier than any run's alert_at (RunQuerySet.done).
NO_ALERT_BEFORE = datetime(1970, 1, 1, tzinfo=UTC)


def json_ids(ids: Sequence[int], using: str) -> RawSQL:
    """A subquery yielding ``ids``, for ``filter(pk__in=json_ids(...))`` on large batches."""
    connection = connections[using]
    if connection.vendor in IDS_SQL:
        return RawSQL(IDS_SQL[connection.vendor], [ids_param(connection, ids)])
    return RawSQL(", ".join(["%s"] * len(ids)), list(ids))  # plain IN list elsewhere


def per_row(
    model: type[models.Model], field_name: str, values: Mapping[int, Any], using: str
) -> Any:
    """The value of ``field_name`` in one UPDATE of ``model``'s rows: ``values[pk]`` for
    the rows it names, the column's own value for the others. On PostgreSQL and SQLite the
    values are one JSON parameter looked up by each row's pk; a CASE with a WHEN per row
    cost Django about a millisecond a row to build and compile (and the database one
    comparison per WHEN per row), and it remains the way elsewhere."""
    connection = connections[using]
    field = model._meta.get_field(field_name)
    assert isinstance(field, models.Field)  # a column, not a relation's reverse side
    if connection.vendor not in ("postgresql", "sqlite"):
        whens = [When(pk=pk, then=Value(value)) for pk, value in values.items()]
        return Case(*whens, default=F(field_name), output_field=field)
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    pk_field = model._meta.pk
    assert pk_field is not None
    assert pk_field.column is not None
    assert field.column is not None
    pk = f"{table}.{qn(pk_field.column)}"
    column = f"{table}.{qn(field.column)}"
    payload = json.dumps({str(key): value for key, value in values.items()})
    if connection.vendor == "postgresql":
        # -> gives SQL NULL for a pk it does not name, JSON null for a value that is None.
        cast = field.db_type(connection)
        sql = (
            f"CASE WHEN (%s::jsonb -> {pk}::text) IS NOT NULL "
            f"THEN (%s::jsonb ->> {pk}::text)::{cast} ELSE {column} END"
        )
    else:  # SQLite: json_type is NULL for a missing key, 'null' for a value that is None.
        path = f"'$.\"' || {pk} || '\"'"
        sql = (
            f"CASE WHEN json_type(%s, {path}) IS NOT NULL "
            f"THEN json_extract(%s, {path}) ELSE {column} END"
        )
    return RawSQL(sql, [payload, payload], output_field=field)


# The subquery of ids as one parameter. PostgreSQL: an array, not JSON: the planner knows
# how many rows unnest() of it yields (it guessed 100 for a JSON array, and joined them
# against every unfinished run).
IDS_SQL = {"postgresql": "SELECT unnest(%s::bigint[])", "sqlite": "SELECT value FROM json_each(%s)"}


def ids_param(connection: Any, ids: Sequence[int]) -> Any:
    """A batch's ids as one parameter: on PostgreSQL the array's text, which the SQL casts
    (``%s::bigint[]``), elsewhere JSON. psycopg's dumper of a list of ints
    cost about 0.15 ms of CPU for a batch of 500, which the hot path paid several times a
    batch (the re-check, the check before dispatch, the outcomes)."""
    if connection.vendor == "postgresql":
        return "{%s}" % ",".join([str(int(i)) for i in ids])  # noqa: UP031
    return json.dumps(list(ids))


class _Compiled(NamedTuple):
    connection: Any
    compiler: Any
    sql: str
    params: tuple[Any, ...]
    # The positions of the ids, then of each value, then of the span's ends, among the params.
    slots: tuple[int, ...]
    converters: dict[int, Any]
    row: Any  # the named tuple class of a row
    # psycopg's own loader of timestamptz, where it gives what Django's would (``_utc_loader``)
    timestamps: Any


def _json_value(value: Any, expression: Any, connection: Any) -> Any:
    """``JSONField.from_db_value`` without a decoder of its own, for a column: an empty list
    or object (what most schedules' arguments, options and calendars hold) is made without
    the JSON decoder, which cost about a microsecond a field, five fields a row. Each row
    gets its own list or object, as from the decoder."""
    if value is None:
        return None
    if value == "[]":
        return []
    if value == "{}":
        return {}
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _fast_converters(converters: dict[int, Any]) -> dict[int, Any]:
    """Django's converters, but ``_json_value`` for a JSON column that has no decoder of
    its own (a column: a key's transform is converted as Django does)."""
    fast = {}
    for pos, (convs, expression) in converters.items():
        convs = [
            _json_value
            if getattr(c, "__func__", None) is models.JSONField.from_db_value
            and getattr(c.__self__, "decoder", None) is None
            and isinstance(expression, Col)
            else c
            for c in convs
        ]
        fast[pos] = (convs, expression)
    return fast


def _utc_loader(connection: Any) -> Any:
    """psycopg's own text loader of ``timestamptz`` (in C with psycopg's binary package),
    when it gives what Django's does: Django's is a Python subclass of psycopg's Python
    loader that replaces the zone by the connection's, about 2.5 microseconds a value (the
    re-check reads three or more a row). They agree when the connection's zone is UTC
    (``USE_TZ`` and no ``TIME_ZONE`` of the database), which Django also sets as the
    session's: psycopg's then gives ``datetime.UTC``. None elsewhere (psycopg 2 too)."""
    if connection.vendor != "postgresql" or connection.timezone is not UTC:
        return None
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return None
    import psycopg

    oid = psycopg.adapters.types["timestamptz"].oid
    return psycopg.adapters.get_loader(oid, psycopg.pq.Format.TEXT)


class PreparedQuery:
    """A ``values_list(*fields, named=True)`` query over a batch of ids, compiled by Django
    once per thread and database, then only executed with the next batch's ids: Django's
    compiler costs about a millisecond of CPU whatever the batch's size, which a scheduler
    paid twice per pass (the re-check, the dispatch check). ``build(ids, *values)`` makes
    the queryset from the ids' subquery and the values ``rows`` is given (each used once,
    as a parameter of its own); the rows come back as Django gives them, converted.
    Databases other than PostgreSQL and SQLite run the query through the ORM each time.

    ``spanned``: the query is on runs, and ``build`` takes a last argument, the runs'
    ``Span`` (``RunQuerySet.within``), which ``rows`` is given as ``span``: its two ends
    are slots of their own in the compiled SQL, like the ids, so that each execution is
    bounded by its own batch's nominal times, where the ledger is partitioned
    (``spans.py``). A span of None, or a plain ledger, runs the query compiled without the
    bound."""

    def __init__(self, build: Any, fields: Sequence[str], *, spanned: bool = False) -> None:
        self.build = build
        self.fields = tuple(fields)
        self.spanned = spanned
        self._compiled = threading.local()  # without a bound, by database
        self._spanned = threading.local()  # with one, by database

    def rows(
        self, using: str, ids: Sequence[int], *values: Any, span: Span | None = None
    ) -> list[Any]:
        if span is not None and not self.spanned:
            raise TypeError("This query takes no span: it was not made with spanned=True.")
        connection = connections[using]
        if span is not None and not spans.ledger_partitioned(using):
            span = None  # a plain ledger: the statement without the bound (spans.py)
        bound = (span,) if self.spanned else ()
        if connection.vendor not in IDS_SQL:
            queryset = self.build(json_ids(ids, using), *values, *bound).using(using)
            return list(queryset.values_list(*self.fields, named=True))
        cache = self._compiled if span is None else self._spanned
        compiled = cache.__dict__.get(using)
        if compiled is None or compiled.connection is not connection:
            compiled = self._compile(connection, using, len(values), span is not None)
            cache.__dict__[using] = compiled
        params = list(compiled.params)
        given = [ids_param(connection, ids), *values]
        if span is not None:
            adapt = connection.ops.adapt_datetimefield_value
            given += [adapt(span.first), adapt(span.last)]
        for slot, value in zip(compiled.slots, given, strict=True):
            params[slot] = value
        with connection.cursor() as cursor:
            if compiled.timestamps is not None:
                # This cursor's alone: the connection's other queries load as Django does.
                cursor.cursor.adapters.register_loader("timestamptz", compiled.timestamps)
            cursor.execute(compiled.sql, params)
            rows: Any = cursor.fetchall()
        if compiled.converters:
            rows = compiled.compiler.apply_converters(rows, compiled.converters)
        return [compiled.row._make(r) for r in rows]

    def _compile(self, connection: Any, using: str, count: int, bounded: bool) -> _Compiled:
        # Stand-ins for the ids and the values until each execution, found by equality
        # among the compiled parameters (a field's preparation may copy a value).
        markers: list[Any] = [f"\x00schedulinator-prepared-{i}" for i in range(count + 1)]
        bound: tuple[Span | None, ...] = ()
        if self.spanned:
            bound = (Span(*SPAN_MARKERS) if bounded else None,)
        queryset = self.build(
            RawSQL(IDS_SQL[connection.vendor], [markers[0]]), *markers[1:], *bound
        )
        compiler = (
            queryset.using(using).values_list(*self.fields, named=True).query.get_compiler(using)
        )
        sql, params = compiler.as_sql()
        if bounded:  # as the field prepared them: datetimes, or SQLite's text
            markers += [connection.ops.adapt_datetimefield_value(m) for m in SPAN_MARKERS]
        slots = tuple(params.index(marker) for marker in markers)
        columns = [column for column, _alias, _annotation in compiler.select[: compiler.col_count]]
        return _Compiled(
            connection,
            compiler,
            sql,
            tuple(params),
            slots,
            _fast_converters(compiler.get_converters(columns)),
            create_namedtuple_class(*self.fields),
            _utc_loader(connection),
        )


# The ends of a span while a spanned PreparedQuery compiles: instants no batch's own
# parameters hold, found among the compiled ones like the other stand-ins.
SPAN_MARKERS = (
    datetime(2000, 1, 1, 0, 0, 0, 417, tzinfo=UTC),
    datetime(2000, 1, 1, 0, 0, 0, 419, tzinfo=UTC),
)


def json_rows(connection: Any, *types: str) -> str:
    """SQL that turns a JSON array of arrays (one parameter) into typed rows."""
    if connection.vendor == "postgresql":
        pg = {"bigint": "bigint", "timestamp": "timestamptz", "text": "text"}
        columns = [
            f"e->{i}" if kind == "json" else f"(e->>{i})::{pg[kind]}"
            for i, kind in enumerate(types)
        ]
        return f"SELECT {', '.join(columns)} FROM jsonb_array_elements(%s::jsonb) AS e"
    # SQLite: json_extract returns arrays and objects as JSON text, which is how Django
    # stores a JSONField there, but a string as bare text: json_quote makes any value JSON
    # again (it leaves arrays and objects as they are), or a bulk-written args "abc" would
    # fail the JSON check of the whole batch's insert.
    columns = [
        f"json_quote(json_extract(value, '$[{i}]'))"
        if kind == "json"
        else f"json_extract(value, '$[{i}]')"
        for i, kind in enumerate(types)
    ]
    return f"SELECT {', '.join(columns)} FROM json_each(%s)"


def json_time(connection: Any, value: datetime | None) -> str | None:
    if value is None:
        return None
    if connection.vendor == "postgresql":
        return value.isoformat()
    return str(connection.ops.adapt_datetimefield_value(value))  # Django's SQLite text form


def json_times(connection: Any) -> Any:
    """``json_time`` for one batch, each instant written once: a burst's occurrences share
    their nominal and next times, three instants a run."""
    memo: dict[datetime, str | None] = {}

    def json_time_of(value: datetime | None) -> str | None:
        if value is None:
            return None
        text = memo.get(value)
        if text is None:
            text = memo[value] = json_time(connection, value)
        return text

    return json_time_of


def table_and_columns(model: Any, connection: Any) -> tuple[str, dict[str, str]]:
    qn = connection.ops.quote_name
    meta = model._meta
    return qn(meta.db_table), {f.name: qn(f.column) for f in meta.concrete_fields}


# The JSON row types of NewRun, in field order.
INSERT_TYPES = (
    "bigint", "timestamp", "text", "json", "json", "text", "json", "text", "text", "text",
    "text", "bigint", "timestamp", "timestamp",
)  # fmt: skip
# Where NewRun's fields after the snapshot of the schedule begin.
PLAIN_FROM = 7


# How long the advance waits for a row lock before it skips the rows that are held, and
# PostgreSQL's code for that wait running out (lock_not_available).
FIRST_LOCK_WAIT_MS = 100
LOCK_NOT_AVAILABLE = "55P03"


def is_lock_timeout(exc: BaseException) -> bool:
    """Whether a database error is a lock wait that ran out (``lock_timeout``)."""
    return getattr(exc.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE


class Advanced(NamedTuple):
    moved: dict[int, int]  # schedule id -> new revision, for the rows that moved
    locked: set[int]  # rows another transaction held: skipped, not moved
    # The runs the same statement inserted, {(schedule id, epoch ms): run id}, when it was
    # given runs to insert (``ClaimedRuns``).
    inserted: dict[tuple[int, int], int] | None = None


class ClaimedRuns(NamedTuple):
    """The runs a claim records for each schedule it advances (those of a schedule that
    does not move are left out), and the claim they are leased to."""

    runs: dict[int, list[NewRun]]  # by schedule id
    claimed_at: datetime
    worker_id: str
    claim_token: str
    lease_expires_at: datetime


def advances_in_one_statement(connection: Any) -> bool:
    """Whether the claim's advance and its runs go in one statement that is its own
    transaction: on PostgreSQL through psycopg 3's client-side binding (Django's default),
    which sends the transaction's ``lock_timeout`` and the statement in one round trip.
    Elsewhere (SQLite, server-side binding, psycopg 2) two statements in a transaction."""
    if connection.vendor != "postgresql":
        return False  # asked before the driver: a SQLite project installs none
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3) and (
        connection.settings_dict["OPTIONS"].get("server_side_binding") is not True
    )
