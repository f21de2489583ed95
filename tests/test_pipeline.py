"""The commit stage (pipeline.py): while a scheduler's loop runs, each re-checked batch
commits on a thread of its own while the loop claims and re-checks the next. A commit that
fails gives its batch back and the loop backs off as from any failed pass; a stop commits
and dispatches the batch it holds."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import OperationalError
from django.db.models import Count

from django_schedulinator import resync_schedules, signals
from django_schedulinator.index.due import DueIndex
from django_schedulinator.models import Run
from django_schedulinator.scheduler.worker import Worker

from .support.processes import looping, wait_for
from .support.schedules import make_due

pytestmark = pytest.mark.django_db(transaction=True)  # the stage's and the lanes' threads commit


def fired_once_each(ids: list[int]) -> bool:
    runs = Run.objects.filter(schedule_id__in=ids)
    done = runs.filter(status="succeeded").count() == len(ids)
    return done and not runs.values("schedule_id").annotate(n=Count("id")).filter(n__gt=1)


class FirstCommitHeld:
    """Holds the first commit that sends ``occurrence_fired`` (after its transaction, before
    its index write) until ``release``; records the threads that committed."""

    def __init__(self) -> None:
        self.committing = threading.Event()
        self.release = threading.Event()
        self.threads: set[str] = set()

    def __enter__(self) -> FirstCommitHeld:
        signals.occurrence_fired.connect(self.hold)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        signals.occurrence_fired.disconnect(self.hold)

    def hold(self, sender: Any, occurrence: Any, **kwargs: Any) -> None:
        self.threads.add(threading.current_thread().name)
        if not self.committing.is_set():
            self.committing.set()
            assert self.release.wait(30)


def test_the_next_batch_is_claimed_while_one_commits(built_index: DueIndex) -> None:
    ids = make_due(10)
    resync_schedules(ids)
    worker = Worker(worker_id="t", batch_size=5)
    with FirstCommitHeld() as held, looping(worker):
        assert held.committing.wait(30)
        # The first batch is still committing (in flight), and the loop has claimed the
        # second meanwhile: all ten are in flight at once.
        wait_for(lambda: len(built_index.inflight_ids()) == 10, 30)
        held.release.set()
        wait_for(lambda: fired_once_each(ids), 30)

    assert held.threads == {"schedulinator-commit"}
    assert (worker.counters.claimed, worker.counters.fired) == (10, 10)
    assert built_index.inflight_ids() == set()


def test_a_commit_that_fails_gives_its_batch_back_and_the_loop_backs_off(
    built_index: DueIndex, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ids = make_due(6)
    resync_schedules(ids)
    worker = Worker(worker_id="t", batch_size=3)
    monkeypatch.setattr(worker, "_sleep", lambda *args, **kwargs: None)  # no back-off pause
    commit = worker.claimer.commit
    failed: list[int] = []

    def fails_once(plan: Any, token: str) -> Any:
        if not failed:
            failed.append(len(plan.batch.entries))
            raise OperationalError("the database went away mid-commit")
        return commit(plan, token)

    monkeypatch.setattr(worker.claimer, "commit", fails_once)
    with looping(worker):
        wait_for(lambda: fired_once_each(ids), 30)

    assert failed == [3]
    assert worker.counters.fired == 6  # the failed batch fired later, once
    assert "the database went away mid-commit" in caplog.text
    assert "Connections are back" in caplog.text
    assert built_index.inflight_ids() == set()


def test_a_stop_commits_and_dispatches_the_batch_it_holds(built_index: DueIndex) -> None:
    ids = make_due(3)
    resync_schedules(ids)
    worker = Worker(worker_id="t")
    with FirstCommitHeld() as held, looping(worker):
        assert held.committing.wait(30)
        worker.stopping = True  # as SIGTERM does, while the batch commits
        held.release.set()

    assert fired_once_each(ids)
    assert built_index.inflight_ids() == set()
