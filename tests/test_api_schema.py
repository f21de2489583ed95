"""The served OpenAPI schema, fuzzed: every answer to a request that schemathesis generates
from it is the one the schema documents, and none is a server error.

The schema is loaded the way a client gets it (GET /api/schedulinator/schema/ through
Django's WSGI application, as a superuser with HTTP Basic), and every operation it lists is
fuzzed through the same WSGI application against the real database and the real Redis, with
data that fits the schema (positive) and data that does not (negative), edge values mixed
in. Path ids mostly point at existing rows, edits are sometimes sent with ``If-Match: *``,
and schedule writes sometimes get a typed body (a valid timing, extreme times and
durations), so generated values get past 404, 428 and the first validation error into the
model, the timing code and the writes. Schedules created that way are then put through
every action (preview, run now, pause, resume, backfill, resync, delete).

What this proves, for every answer to those requests and actions (errors included): it is no
server error, and its status code, content type, headers (the ETag, Location) and body are
the ones the schema documents for the operation (schemathesis' ``not_a_server_error``,
``status_code_conformance``, ``content_type_conformance``, ``response_headers_conformance``
and ``response_schema_conformance``), so a client generated from the schema can read it.
A request whose generated path parameter turned it into another URL (a "/", "..", a format
suffix such as ".json") did not reach the operation: it is checked for server errors only.
(A NUL in ?search= used to get a bare list as its 400 body; a test pins the fix.)
Other tests check the same for what the fuzzing does not reach: every seeded row (a
schedule whose task is no longer registered among them), refusals (403) for every operation,
and the 503 of an unreachable Redis. Whether the answers are the right ones is for
test_api.py.

Requests that were server errors (all fixed) run first as explicit examples, on every run.

Schemathesis' own pytest plugin (``schema.parametrize()``) fails under pytest 9 (it sets
``Item._nodeid``), so each operation is a pytest test of its own that drives the public
``APIOperation.as_strategy()`` with Hypothesis: derandomized, a bounded number of examples.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core.signals import request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.urls import Resolver404, ResolverMatch, resolve
from django.utils import timezone
from django.utils.duration import duration_iso_string, duration_string
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import CheckFunction, not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from django_schedulinator.models import Run, Schedule, ScheduleChange

from .support.commits import APIClient
from .support.redis_server import lose_redis

pytestmark = pytest.mark.django_db

API = "/api/schedulinator/"
USERNAME, PASSWORD = "fuzzer", "fuzzer-password"
RETIRED_TASK = "tests.retired"  # registered by no code, like a task whose code was removed
# Bounded so that the whole file runs in well under two minutes on either database.
EXAMPLES_PER_OPERATION = 40
ACTION_CHAINS = 30  # schedules created, each put through every action

# Every operation of the schema; test_every_served_operation_is_fuzzed keeps the list whole.
OPERATIONS = [
    "GET /api/schedulinator/calendars/",
    "POST /api/schedulinator/calendars/",
    "GET /api/schedulinator/calendars/{id}/",
    "PUT /api/schedulinator/calendars/{id}/",
    "PATCH /api/schedulinator/calendars/{id}/",
    "DELETE /api/schedulinator/calendars/{id}/",
    "GET /api/schedulinator/changes/",
    "GET /api/schedulinator/changes/{id}/",
    "GET /api/schedulinator/index/",
    "GET /api/schedulinator/schedulers/",
    "GET /api/schedulinator/status/",
    "GET /api/schedulinator/runs/",
    "GET /api/schedulinator/runs/{id}/",
    "POST /api/schedulinator/runs/report/",
    "GET /api/schedulinator/schedules/",
    "POST /api/schedulinator/schedules/",
    "GET /api/schedulinator/schedules/{id}/",
    "PUT /api/schedulinator/schedules/{id}/",
    "PATCH /api/schedulinator/schedules/{id}/",
    "DELETE /api/schedulinator/schedules/{id}/",
    "POST /api/schedulinator/schedules/{id}/backfill/",
    "POST /api/schedulinator/schedules/{id}/pause/",
    "GET /api/schedulinator/schedules/{id}/preview/",
    "POST /api/schedulinator/schedules/preview/",
    "POST /api/schedulinator/schedules/{id}/resume/",
    "POST /api/schedulinator/schedules/{id}/resync/",
    "POST /api/schedulinator/schedules/{id}/run-now/",
]
CALENDAR_WRITES = {
    f"POST {API}calendars/",
    f"PUT {API}calendars/{{id}}/",
    f"PATCH {API}calendars/{{id}}/",
}
SCHEDULE_WRITES = {
    f"POST {API}schedules/",
    f"PUT {API}schedules/{{id}}/",
    f"PATCH {API}schedules/{{id}}/",
}

# Mixed into generated strings (schemathesis "dictionaries"): the ends of the datetime range,
# offsets PostgreSQL does not take (it allows less than 16 hours), NUL characters (which
# PostgreSQL's text and jsonb refuse). Random generation alone almost never hits these.
EDGE_VALUES = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00.000500Z",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-23:00",
    "2030-01-01T00:00:00+16:00",
    "999999 00:00:00",
    "a\u0000b",
]


# Requests that were or are server errors run first, as explicit examples, on every run: the
# random search finds such edges only now and then. EXISTING is replaced by the id of a
# seeded schedule (in Europe/Berlin).
EXISTING = -1
FORGED_CURSOR = base64.b64encode(b"p=abc").decode()  # a position that is not an id
NEW = {"name": "explicit", "task": "tests.noop"}
# A one-off at the end of 9999 UTC: with jitter it used to overflow; in a zone east of UTC
# its local time does (now refused as invalid).
END_OF_TIME = {"kind": "once", "cron": "", "run_at": "9999-12-31T23:59:59Z", "jitter": 100}
PAST_9999_IN_BERLIN = {**END_OF_TIME, "timezone": "Europe/Berlin", "jitter": None}
EXPLICIT_EXAMPLES: dict[str, list[dict[str, Any]]] = {
    f"GET {API}runs/": [
        {"query": {"scheduled_after": "9999-12-31T23:59:59-23:00"}},
        {"query": {"scheduled_before": "2030-01-01T00:00:00+16:00"}},
        {"query": {"cursor": FORGED_CURSOR}},
    ],
    f"GET {API}changes/": [{"query": {"cursor": FORGED_CURSOR}}],
    f"POST {API}schedules/": [
        {"body": {**NEW, "kind": "interval", "interval": 60, "args": ["\x00"]}},
        {"body": {**NEW, **END_OF_TIME, "timezone": "UTC"}},
        {"body": {**NEW, **PAST_9999_IN_BERLIN}},
    ],
    f"PUT {API}schedules/{{id}}/": [
        {
            "path_parameters": {"id": EXISTING},
            "headers": {"If-Match": "*"},
            "body": {**NEW, **PAST_9999_IN_BERLIN},
        }
    ],
    f"PATCH {API}schedules/{{id}}/": [
        {"path_parameters": {"id": EXISTING}, "headers": {"If-Match": "*"}, "body": END_OF_TIME}
    ],
    f"POST {API}schedules/{{id}}/backfill/": [
        {
            "path_parameters": {"id": EXISTING},
            "body": {"start": "0001-01-01T00:00:00Z", "end": "0001-01-02T00:00:00Z"},
        }
    ],
}


@dataclass
class FuzzTarget:
    """The loaded schema, the credentials, and the rows that exist."""

    schema: Any
    headers: dict[str, str]
    ids: dict[str, list[int]]
    # Schedules as seeded: put back when a fuzzed DELETE removed them.
    saved: dict[int, dict[str, Any]] = field(default_factory=dict)

    def restore(self) -> None:
        present = set(Schedule.objects.filter(pk__in=self.saved).values_list("pk", flat=True))
        for pk, row in self.saved.items():
            if pk not in present:
                # save() takes a registered task only: a retired one is put back by update().
                Schedule(**{**row, "task": "tests.noop"}).save()
                Schedule.objects.filter(pk=pk).update(task=row["task"])


def seed_rows(client: APIClient) -> dict[str, list[int]]:
    """Schedules of each kind (one across DST changes, one with jitter, one paused, one whose
    task is no longer registered, one that names a calendar), runs, change-log entries and
    calendars (one in use), made through the API."""
    now = timezone.now()
    bodies: list[dict[str, Any]] = [
        {
            "name": "berlin-0230",
            "task": "tests.record",
            "kind": "cron",
            "cron": "30 2 * * *",
            "timezone": "Europe/Berlin",
        },
        {
            "name": "hourly-jitter",
            "task": "tests.noop",
            "kind": "interval",
            "interval": 3600,
            "jitter": 60,
            "grace": 300,
            "args": [1, "a"],
            "kwargs": {"k": "v"},
        },
        {
            "name": "one-off",
            "task": "tests.noop",
            "kind": "once",
            "run_at": (now + timedelta(days=1)).isoformat(),
        },
        {
            "name": "paused-catch-up-all",
            "task": "tests.record",
            "kind": "cron",
            "cron": "*/5 * * * *",
            "catch_up": "all",
            "catch_up_window": "PT2H",
            "overlap": "buffer",
            "max_runs": 3,
        },
        {"name": "task-retired", "task": "tests.noop", "kind": "interval", "interval": 600},
    ]
    calendars = []
    for name, days in (("seeded-holidays", ["2030-01-01", "2030-12-25"]), ("seeded-unused", [])):
        response = client.post(
            f"{API}calendars/",
            {"name": name, "timezone": "Pacific/Auckland", "days": [{"day": d} for d in days]},
            format="json",
        )
        assert response.status_code == 201, response.content
        calendars.append(response.json()["id"])
    bodies.append(
        {"name": "weekdays-moved", "task": "tests.noop", "cron": "0 9 * * 1-5",
         "calendars": ["seeded-holidays"], "calendar_rule": "next_business_day"}
    )  # fmt: skip
    ids = []
    for body in bodies:
        response = client.post(f"{API}schedules/", body, format="json")
        assert response.status_code == 201, response.content
        ids.append(response.json()["id"])
    # The API takes registered tasks only; a schedule keeps its task when the code is gone.
    Schedule.objects.filter(pk=ids[4]).update(task=RETIRED_TASK)
    pause = client.post(f"{API}schedules/{ids[3]}/pause/", {"note": "seeded"}, format="json")
    assert pause.status_code == 200, pause.content
    for sid in ids[:2]:
        assert client.post(f"{API}schedules/{sid}/run-now/", {}, format="json").status_code == 202
    backfill = client.post(
        f"{API}schedules/{ids[1]}/backfill/",
        {"start": (now - timedelta(hours=5)).isoformat(), "end": now.isoformat()},
        format="json",
    )
    assert backfill.status_code == 200, backfill.content
    # A missed occurrence, as the missed-run check marks it (the schedule and its run).
    missed = Run.objects.filter(schedule_id=ids[1]).order_by("scheduled_for").first()
    assert missed is not None
    Run.objects.filter(pk=missed.pk).update(missed_at=now, alert_at=None)
    Schedule.objects.filter(pk=ids[1]).update(missed_at=missed.scheduled_for)
    return {
        "schedules": ids,
        "runs": list(Run.objects.values_list("pk", flat=True)),
        "changes": list(ScheduleChange.objects.values_list("pk", flat=True)),
        "calendars": calendars,
    }


@pytest.fixture
def target(settings: Any, index: Any) -> Iterator[FuzzTarget]:
    # The WSGI client sends "Host: localhost". HTTP Basic checks the password on every
    # request: a fast hasher keeps that from dominating the run.
    settings.ALLOWED_HOSTS = ["localhost", "testserver"]
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    user = User.objects.create_superuser(USERNAME, "fuzzer@example.com", PASSWORD)
    client = APIClient()
    client.force_authenticate(user)
    ids = seed_rows(client)
    token = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    headers = {"Authorization": f"Basic {token}"}
    config = schemathesis.Config.from_dict(
        {
            "dictionaries": {"edges": {"values": EDGE_VALUES}},
            "generation": {
                # We authenticate ourselves: no generated credentials or session cookies.
                "with-security-parameters": False,
                "dictionaries": {"string": {"dictionary": "edges", "probability": 0.2}},
            },
        }
    )
    # Like Django's test client: the WSGI handler would otherwise close the test's database
    # connection at the start of every request (CONN_MAX_AGE = 0).
    request_started.disconnect(close_old_connections)
    try:
        schema = schemathesis.openapi.from_wsgi(
            f"{API}schema/?format=json", get_wsgi_application(), config=config, headers=headers
        )
        rows = Schedule.objects.filter(pk__in=ids["schedules"]).values()
        saved: dict[int, dict[str, Any]] = {row["id"]: {**row} for row in rows}
        yield FuzzTarget(schema=schema, headers=headers, ids=ids, saved=saved)
    finally:
        request_started.connect(close_old_connections)


# The schema types some fields loosely: args and kwargs as any JSON, durations as a number
# or any string, and a generated cron expression or time zone is almost never valid. So schedule
# writes sometimes get a body whose timing is valid and whose other fields come from typed
# strategies, extremes included: those get past validation into the model, the timing code
# and the writes.
UTC_OFFSETS = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(
    lambda minutes: dt_timezone(timedelta(minutes=minutes))
)


def times(after: datetime = datetime.min) -> st.SearchStrategy[str]:
    """ISO 8601 times with any offset Python allows, often near either end of the range."""
    zones = st.one_of(st.just(UTC), UTC_OFFSETS)
    hour = timedelta(hours=1)
    near_the_ends = [
        (datetime.min, datetime.min + hour),
        (datetime.min + 23 * hour, datetime.min + 24 * hour),
        (datetime.max - 24 * hour, datetime.max - 23 * hour),
        (datetime.max - hour, datetime.max),
    ]
    return st.one_of(
        st.datetimes(min_value=after, timezones=zones),
        *(
            st.datetimes(min_value=low, max_value=high, timezones=zones)
            for low, high in near_the_ends
            if low >= after
        ),
    ).map(datetime.isoformat)


def durations(most: timedelta) -> st.SearchStrategy[float | str]:
    """Seconds, "D HH:MM:SS" or ISO 8601, as the API takes them."""
    return st.timedeltas(min_value=timedelta(0), max_value=most).flatmap(
        lambda d: st.sampled_from([d.total_seconds(), duration_string(d), duration_iso_string(d)])
    )


JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
COMMON_FIELDS = {
    # UTC, and zones west and east of it (Kiritimati: UTC+14).
    "timezone": st.sampled_from(["UTC", "America/New_York", "Europe/Berlin", "Pacific/Kiritimati"]),
    "args": st.lists(JSON_VALUES, max_size=3),
    "kwargs": st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=2),
    "jitter": st.one_of(durations(timedelta(days=1)), durations(timedelta(days=999_999))),
    "max_runs": st.integers(1, 2**31 - 1),
    "catch_up": st.sampled_from(["", "latest", "skip", "all"]),
    "catch_up_window": durations(timedelta(days=999_999)),
    "grace": durations(timedelta(days=40)),
    "overlap": st.sampled_from(["allow", "skip", "buffer"]),
    "enabled": st.booleans(),
}
BOUNDS = {"start_at": times(), "end_at": times()}
TYPED_BODIES = st.one_of(
    st.fixed_dictionaries(
        {
            "kind": st.just("cron"),
            "cron": st.sampled_from(
                ["30 2 * * *", "*/10 * * * *", "0 0 29 2 *", "@yearly", "30 6 1-7 * 1"]
            ),
        },
        optional={
            "dst_gap": st.sampled_from(["shift", "skip"]),
            "dst_fold": st.sampled_from(["first", "second", "both"]),
            "day_rule": st.sampled_from(["either", "both"]),
            **BOUNDS,
            **COMMON_FIELDS,
        },
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("interval"),
            "cron": st.just(""),
            "interval": durations(timedelta(days=999_999)),
        },
        optional={"anchor_at": times(), **BOUNDS, **COMMON_FIELDS},
    ),
    st.fixed_dictionaries(
        {"kind": st.just("once"), "cron": st.just(""), "run_at": times(after=datetime(2030, 1, 1))},
        optional=COMMON_FIELDS,
    ),
)
NAMES = itertools.count()


@st.composite
def cases_for(
    draw: st.DrawFn, operation: Any, generated: dict[GenerationMode, Any], existing: list[int]
) -> Any:
    """A generated case of either mode; its id mostly one of an existing row; edits
    sometimes with ``If-Match: *``; schedule writes sometimes with a typed body."""
    mode = draw(st.sampled_from(list(generated)))
    case = draw(generated[mode])
    if case.query:
        # Each optional query parameter only some of the time: with all of them, one is
        # nearly always invalid and the request stops at 400 before the others are used.
        kept = draw(st.lists(st.booleans(), min_size=len(case.query), max_size=len(case.query)))
        pairs = zip(case.query.items(), kept, strict=True)
        case.query = {key: value for (key, value), keep in pairs if keep}
    if (
        existing
        and draw(st.sampled_from(["existing row"] * 3 + ["generated id"])) != "generated id"
    ):
        case.path_parameters = {**case.path_parameters, "id": draw(st.sampled_from(existing))}
    if any(p.name == "If-Match" for p in operation.headers) and draw(st.booleans()):
        case.headers = {**(case.headers or {}), "If-Match": "*"}
    if operation.label in SCHEDULE_WRITES and draw(st.booleans()):
        name = f"fuzzed-{next(NAMES)}"  # unique: a taken name stops at the first check
        case.body = {"name": name, "task": "tests.noop", **draw(TYPED_BODIES)}
        case.media_type = "application/json"
    elif operation.label in CALENDAR_WRITES and isinstance(case.body, dict):
        # The schema allows an iCalendar text of a megabyte and 5,000 days; a multipart body
        # of more than 500 kB is spooled by the WSGI test client (werkzeug) to a temporary
        # file it never closes, a ResourceWarning later. The limits are the serializer's.
        if isinstance(case.body.get("icalendar"), str):
            case.body = {**case.body, "icalendar": case.body["icalendar"][:2000]}
        if isinstance(case.body.get("days"), list):
            case.body = {**case.body, "days": case.body["days"][:50]}
    elif operation.label == f"POST {API}schedules/preview/" and draw(st.booleans()):
        case.body = draw(TYPED_BODIES)  # a timing: what it previews
        case.media_type = "application/json"
    return case


def test_every_served_operation_is_fuzzed(target: FuzzTarget) -> None:
    operations = target.schema.get_all_operations()
    served = {result.ok().label for result in operations if isinstance(result, Ok)}
    assert served == set(OPERATIONS)


def bounded(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,  # the same generated requests on every run
        database=None,
        suppress_health_check=list(HealthCheck),
    )


# What every answer is checked for: no server error, and the status code, content type,
# headers and body the schema documents for the operation.
AS_DOCUMENTED: list[CheckFunction] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def route(path: str) -> ResolverMatch | None:
    try:
        return resolve(path)
    except Resolver404:
        return None


def reached(case: Any, response: Any) -> bool:
    """Whether the request reached the operation it was made for. A generated path parameter
    with a "/" or ".." makes the URL another one (which Django answers: an HTML 404, the API
    root), and one with a suffix (".json", ".api") asks for another format."""
    sent = route(unquote(urlsplit(response.request.url).path))
    meant = route(case.operation.path.replace("{id}", "1"))
    return (
        sent is not None
        and meant is not None
        and "format" not in sent.kwargs
        and sent.view_name == meant.view_name
    )


def validate(case: Any, response: Any) -> None:
    """Raises with the request (as a curl command) and the response on any failed check."""
    checks: list[CheckFunction] = AS_DOCUMENTED if reached(case, response) else [not_a_server_error]
    case.validate_response(response, checks=checks)


def explicit_case(operation: Any, **parts: Any) -> Any:
    """A case of given parts, its body sent as JSON."""
    if "body" in parts:
        parts["media_type"] = "application/json"
    return operation.Case(**parts)


@pytest.mark.parametrize("label", OPERATIONS)
def test_every_generated_request_answers_as_documented(target: FuzzTarget, label: str) -> None:
    operation = target.schema.find_operation_by_label(label)
    assert operation is not None, f"{label} is not in the served schema"
    generated = {mode: operation.as_strategy(generation_mode=mode) for mode in GenerationMode}
    resource = operation.path.removeprefix(API).split("/", 1)[0]
    existing = target.ids[resource] if "{id}" in operation.path else []

    def check(case: Any) -> None:
        validate(case, case.call(headers=target.headers))
        if case.method == "DELETE":
            target.restore()

    fuzz = given(case=cases_for(operation, generated, existing))(check)
    for parts in EXPLICIT_EXAMPLES.get(label, []):
        if parts.get("path_parameters") == {"id": EXISTING}:
            parts = {**parts, "path_parameters": {"id": existing[0]}}
        fuzz = example(case=explicit_case(operation, **parts))(fuzz)
    bounded(EXAMPLES_PER_OPERATION)(fuzz)()


# What every created schedule goes through, in order.
ACTIONS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "preview/", {"query": {"count": 500}}),
    ("POST", "run-now/", {"body": {"advance": True}}),
    ("POST", "pause/", {"body": {"note": "fuzzed"}}),
    ("POST", "resume/", {"body": {"catch_up": True}}),
    ("POST", "backfill/", {"body": {"start": "2020-01-01T00:00Z", "end": "2020-01-03T00:00Z"}}),
    ("POST", "resync/", {}),
    ("GET", "preview/", {"query": {"count": 500}}),
    ("DELETE", "", {}),
]


def test_every_action_on_a_created_schedule_answers_as_documented(target: FuzzTarget) -> None:
    """Schedules created from typed bodies (extreme times and durations included), each
    previewed, run now, paused, resumed with catch-up, backfilled, resynced, deleted."""
    operation = target.schema.find_operation_by_label

    def check(body: dict[str, Any]) -> None:
        create = explicit_case(
            operation(f"POST {API}schedules/"),
            body={"name": f"chained-{next(NAMES)}", "task": "tests.noop", **body},
        )
        response = create.call(headers=target.headers)
        validate(create, response)
        if response.status_code != 201:
            return
        sid = response.json()["id"]
        for method, suffix, parts in ACTIONS:
            case = explicit_case(
                operation(f"{method} {API}schedules/{{id}}/{suffix}"),
                path_parameters={"id": sid},
                **parts,
            )
            validate(case, case.call(headers=target.headers))

    fuzz = given(body=TYPED_BODIES)(check)
    for body in (
        {**END_OF_TIME, "timezone": "UTC"},
        PAST_9999_IN_BERLIN,
        {
            "kind": "interval",
            "cron": "",
            "interval": 60,
            "start_at": "9999-12-31T23:00:00Z",
            "timezone": "Europe/Berlin",
        },
    ):
        fuzz = example(body=body)(fuzz)
    bounded(ACTION_CHAINS)(fuzz)()


def test_every_seeded_row_answers_as_documented(target: FuzzTarget) -> None:
    """Every seeded row, whatever the fuzzing happened to pick: each schedule (one whose task
    is no longer registered, which the schema must not refuse) and its preview, each run,
    each change-log entry, the lists and the index health."""
    operation = target.schema.find_operation_by_label
    cases = [
        operation(f"GET {API}{resource}/").Case()
        for resource in ("schedules", "runs", "changes", "index", "schedulers", "status")
    ]
    for resource, ids in target.ids.items():
        cases += [
            operation(f"GET {API}{resource}/{{id}}/").Case(path_parameters={"id": pk}) for pk in ids
        ]
    cases += [
        operation(f"GET {API}schedules/{{id}}/preview/").Case(path_parameters={"id": pk})
        for pk in target.ids["schedules"]
    ]
    for case in cases:
        response = case.call(headers=target.headers)
        assert response.status_code == 200, (case.formatted_path, response.text)
        validate(case, response)


@pytest.mark.parametrize("who", ["anonymous", "staff without permissions"])
def test_a_refused_request_answers_as_documented(target: FuzzTarget, who: str) -> None:
    """Every operation refuses a user it does not admit with its documented 403."""
    headers: dict[str, str] = {}
    if who == "staff without permissions":
        User.objects.create_user("plain", password="plain-password", is_staff=True)
        token = base64.b64encode(b"plain:plain-password").decode()
        headers = {"Authorization": f"Basic {token}"}
    sid = target.ids["schedules"][0]
    for label in OPERATIONS:
        operation = target.schema.find_operation_by_label(label)
        resource = operation.path.removeprefix(API).split("/", 1)[0]
        ids = {"id": target.ids[resource][0]} if "{id}" in operation.path else {}
        # Permissions are checked before the body is read: an empty body will do.
        case = operation.Case(path_parameters=ids)
        response = case.call(headers=headers)
        # Anonymous gets 403 too, not 401: the first authentication class (session) asks
        # for no credentials.
        assert response.status_code == 403, (label, response.text)
        validate(case, response)
    assert Schedule.objects.filter(pk=sid).exists()  # the DELETE was refused too


@pytest.mark.parametrize(
    "label",
    [
        f"GET {API}index/",
        f"GET {API}schedulers/",
        f"GET {API}status/",
        f"POST {API}schedules/{{id}}/resync/",
    ],
)
def test_an_unreachable_index_answers_as_documented(
    target: FuzzTarget, settings: Any, label: str
) -> None:
    lose_redis(settings)
    operation = target.schema.find_operation_by_label(label)
    ids = {"id": target.ids["schedules"][0]} if "{id}" in operation.path else {}
    case = operation.Case(path_parameters=ids)
    response = case.call(headers=target.headers)
    assert response.status_code == 503, response.text
    # A 503 is the answer here: every check but the one against server errors.
    documented = [check for check in AS_DOCUMENTED if check is not not_a_server_error]
    case.validate_response(response, checks=documented)


def test_a_search_with_a_nul_answers_as_documented(target: FuzzTarget) -> None:
    operation = target.schema.find_operation_by_label(f"GET {API}schedules/")
    case = operation.Case(query={"search": "a\x00b"})
    response = case.call(headers=target.headers)
    assert response.status_code == 400, response.text
    case.validate_response(response, checks=AS_DOCUMENTED)


def test_a_body_of_a_media_type_not_parsed_answers_415_as_documented(target: FuzzTarget) -> None:
    """Every operation that takes a body documents DRF's 415 (a fuzzed multipart body once
    reached the API without its Content-Type and got it, undocumented)."""
    with_bodies = [
        label
        for label in OPERATIONS
        if target.schema.find_operation_by_label(label).definition.raw.get("requestBody")
    ]
    assert f"POST {API}runs/report/" in with_bodies
    for label in with_bodies:
        operation = target.schema.find_operation_by_label(label)
        resource = operation.path.removeprefix(API).split("/", 1)[0]
        ids = {"id": target.ids[resource][0]} if "{id}" in operation.path else {}
        case = operation.Case(path_parameters=ids)
        headers = {**target.headers, "Content-Type": "text/plain"}
        response = case.call(headers=headers, data=b"not a body the API parses")
        assert response.status_code == 415, (label, response.text)
        validate(case, response)
