"""Due decisions made outside the scheduler (save, resume, run now, backfill, preview, the
one-off check) take Redis TIME, the clock the schedulers claim by, not the web host's.

A web host whose clock runs ten minutes ahead is made with time-machine, which moves this
process's clock only; Redis TIME stays real. Last, the scheduler's lease renewals, which take
Redis TIME the same way (``clock.redis_or_host_time``).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import redis
import time_machine
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_schedulinator import errors, resync_schedules, services
from django_schedulinator.index import clock
from django_schedulinator.index.connection import get_redis
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run, Schedule
from django_schedulinator.models.spans import Span
from django_schedulinator.scheduler.claiming import Claimer
from django_schedulinator.timing import from_ms

from .support.redis_server import RedisServer, lose_redis
from .support.schedules import make_due, make_schedule

pytestmark = pytest.mark.django_db

AHEAD = timedelta(minutes=10)
MINUTE = timedelta(minutes=1)


def redis_now() -> datetime:
    return from_ms(DueIndex().now_ms())


def next_minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0) + MINUTE


@pytest.fixture
def host_ahead() -> Iterator[None]:
    """This host's clock runs ten minutes ahead of Redis TIME (and keeps ticking)."""
    with time_machine.travel(timezone.now() + AHEAD, tick=True):
        yield


def paused_minutely(minutes_ago: int) -> Schedule:
    """An every-minute cron paused ``minutes_ago`` minutes ago (by Redis TIME)."""
    stopped = redis_now().replace(second=0, microsecond=0) - minutes_ago * MINUTE
    return make_schedule(kind="cron", cron="* * * * *", timezone="UTC", next_run_at=stopped)


def test_resume_skips_only_what_redis_time_has_passed(host_ahead: None) -> None:
    schedule = paused_minutely(3)
    services.pause(schedule)
    before = redis_now()

    services.resume(schedule)

    after = redis_now()
    paused = sorted(
        Run.objects.filter(schedule=schedule, status=Run.Status.SKIPPED).values_list(
            "scheduled_for", flat=True
        )
    )
    # The paused period is the three or four minutes Redis TIME has passed, not the ten
    # more this host believes in: those are still to come, and fire.
    assert paused, "the minutes of the paused period are recorded"
    assert all(at <= after for at in paused), [at for at in paused if at > after]
    assert next_minute(before) <= schedule.next_run_at <= next_minute(after)


def test_saving_a_new_schedule_plans_from_redis_time(host_ahead: None) -> None:
    before = redis_now()
    schedule = make_schedule(kind="cron", cron="* * * * *", timezone="UTC")
    after = redis_now()
    assert next_minute(before) <= schedule.next_run_at <= next_minute(after)
    # A change of timing plans again, from Redis TIME too.
    services.update(schedule, {"cron": "*/2 * * * *"})
    assert schedule.next_run_at <= next_minute(redis_now()) + MINUTE


def test_preview_and_run_now_take_redis_time(host_ahead: None) -> None:
    schedule = paused_minutely(3)
    services.pause(schedule)
    before = redis_now()
    # A paused schedule previews what a resume now gives: from Redis TIME on.
    assert schedule.preview(1)[0].at <= next_minute(redis_now())
    assert schedule.preview(1)[0].at >= next_minute(before)
    run = services.run_now(schedule)
    assert before <= run.scheduled_for <= redis_now()


def test_backfill_refuses_a_range_redis_time_has_not_reached(host_ahead: None) -> None:
    schedule = make_schedule(kind="cron", cron="* * * * *", timezone="UTC")
    end = timezone.now() - MINUTE  # in the past for this host, five minutes ahead of Redis
    with pytest.raises(errors.ServiceError, match="must not be after now"):
        services.backfill(schedule, end - 2 * AHEAD, end)
    report = services.backfill(schedule, redis_now() - 5 * MINUTE, redis_now(), dry_run=True)
    assert report.occurrences in (5, 6)


def test_a_one_off_in_redis_times_future_is_accepted(host_ahead: None) -> None:
    # Five minutes ahead of Redis TIME, five minutes behind this host's clock.
    schedule = make_schedule(kind="once", run_at=redis_now() + 5 * MINUTE)
    assert schedule.next_run_at is not None
    late = Schedule(name="late", task="tests.record", kind="once", run_at=redis_now() - 5 * MINUTE)
    with pytest.raises(ValidationError, match="must run in the future"):
        services.create(late)


def test_without_redis_save_and_resume_use_the_host_clock_and_say_so(
    settings: object, caplog: pytest.LogCaptureFixture
) -> None:
    clock.now()  # Redis answers: no outage so far (an earlier test's ends here, logged)
    schedule = paused_minutely(3)
    services.pause(schedule)
    lose_redis(settings)
    caplog.set_level(logging.INFO, logger="django_schedulinator.clock")
    caplog.clear()

    before = timezone.now()
    created = make_schedule(kind="cron", cron="* * * * *", timezone="UTC")
    services.resume(schedule)
    after = timezone.now()

    # The host's clock was read between the two (a minute may begin meanwhile).
    assert next_minute(before) <= created.next_run_at <= next_minute(after)
    assert next_minute(before) <= schedule.next_run_at <= next_minute(after)
    assert Run.objects.filter(schedule=schedule, skip_reason="paused").count() in (3, 4)
    warnings = [r for r in caplog.records if r.name == "django_schedulinator.clock"]
    # Once per outage, not once per decision.
    assert [r.levelname for r in warnings] == ["WARNING"]
    assert "this host's clock" in warnings[0].getMessage()


def test_a_backfill_up_to_this_moment_is_accepted() -> None:
    # Redis runs on this host here: its TIME, read after the argument was taken, is later,
    # to the microsecond (a millisecond-truncated "now" refused it).
    schedule = make_schedule(kind="cron", cron="* * * * *", timezone="UTC")
    report = services.backfill(schedule, timezone.now() - 5 * MINUTE, timezone.now(), dry_run=True)
    assert report.occurrences in (5, 6)


def test_a_redis_that_does_not_answer_costs_a_short_timeout(
    private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A stopped (not dead) server accepts connections and never answers: the read of its
    TIME gives up after clock.TIMEOUT_SECONDS, not the connection's own five seconds."""
    clock.now()  # answers: no outage so far
    quick = clock._quick_client(get_redis())
    kwargs = quick.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == clock.TIMEOUT_SECONDS
    assert private_redis.proc is not None
    private_redis.proc.send_signal(signal.SIGSTOP)
    try:
        quick.connection_pool.disconnect()  # a new connection: the stopped server's backlog
        before = timezone.now()
        schedule = make_schedule(kind="cron", cron="* * * * *", timezone="UTC")
        after = timezone.now()
    finally:
        private_redis.proc.send_signal(signal.SIGCONT)
    # The host's clock was read between the two (a minute may begin meanwhile).
    assert next_minute(before) <= schedule.next_run_at <= next_minute(after)
    assert "Timeout" in caplog.text
    assert "this host's clock" in caplog.text


# -- lease renewals ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_any_redis_error_while_renewing_leases_means_redis_is_unavailable(
    private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis that answers TIME with an error nobody expected (here: an ACL refusal) is
    treated as unreachable: the leases are renewed on this host's clock, and it is logged,
    instead of the error dropping the batch (issue 12, item 6)."""
    clock.now()  # an earlier test's outage ends here: this one is logged anew
    index = DueIndex()
    index.mark_built({"by": "tests"})
    make_due(2)
    resync_schedules()
    claimer = Claimer(worker_id="test", lease_seconds=30, index=index)
    batch, token = claimer.claim(10)
    occurrences, _ = claimer.commit(claimer.recheck(batch), token)
    private_redis.client().acl_setuser(
        "no-time", enabled=True, nopass=True, keys=["*"], commands=["+@all", "-time"]
    )
    refused = redis.Redis(port=private_redis.port, username="no-time", socket_timeout=5)
    renewing = Claimer(
        worker_id="test", lease_seconds=30, index=DueIndex(client=refused, prefix=index.prefix)
    )

    held = renewing.held_runs().renew_leases(
        [o.run_id for o in occurrences],
        token,
        span=Span.of(o.scheduled_for for o in occurrences),
    )

    assert held == {o.run_id for o in occurrences}
    assert "this host's clock" in caplog.text
