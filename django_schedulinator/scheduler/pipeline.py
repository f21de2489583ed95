"""The commit stage of a running scheduler's loop: one thread that commits each re-checked
batch (the conditional advance and its runs, then the index) and hands what fired to its
lane, while the loop claims and re-checks the next batch.

A pass used to be serial: claim, re-check, then wait for the commit and the index script
before the next claim. Under a steady load that wait was about half of the loop's time,
and every occurrence due meanwhile waited for it too. Now batch N commits while batch N+1
is claimed and re-checked. It changes nothing of what fires: a schedule is in one claimed
batch at a time (the claim moves its entry in flight until its batch's index write), and
each commit only advances the rows that still hold the revision its re-check read.

At most one batch commits and one waits: ``put`` waits for the commit before it, so a slow
database holds the claim back as before. A commit that fails gives its batch back to the
due set (as a failed pass does) and its error is raised in the loop by the next ``put`` or
``drain``, which then backs off as from any failed pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import connections

from django_schedulinator.scheduler.transient import bound_lock_waits

if TYPE_CHECKING:
    from django_schedulinator.scheduler.claiming import Plan

logger = logging.getLogger("django_schedulinator.worker")

# (plan, claim token, time.monotonic() when its lease began)
Commit = tuple["Plan", str, float]


class CommitStage:
    def __init__(
        self,
        commit: Callable[[Plan, str, float], None],
        give_back: Callable[[Plan, str], None],
    ) -> None:
        """``commit`` commits a plan and hands on what it fired; ``give_back`` returns the
        entries of a plan whose commit failed to the due set."""
        self._commit = commit
        self._give_back = give_back
        self._waiting: Commit | None = None
        self._busy = False  # a commit in progress
        self._error: BaseException | None = None
        self._stopping = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="schedulinator-commit", daemon=True)
        self._thread.start()

    def put(self, plan: Plan, token: str, leased_at: float) -> None:
        """Commit ``plan`` on the stage's thread, once the commit before it has ended.
        Raises that commit's error instead (its batch given back; the caller gives this
        one back)."""
        with self._changed:
            self._wait_idle()
            self._waiting = (plan, token, leased_at)
            self._changed.notify_all()

    def drain(self) -> None:
        """Wait for the commit in progress; raise its error, if it failed."""
        with self._changed:
            self._wait_idle()

    def stop(self) -> None:
        """Finish the commit in progress, then end the thread. An error of that commit is
        logged: its batch went back to the due set."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            logger.warning("The last commit failed (%s: %s).", type(error).__name__, error)

    def _wait_idle(self) -> None:
        while self._busy or self._waiting is not None:
            self._changed.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        bound_lock_waits()
        try:
            while job := self._next():
                plan, token, leased_at = job
                try:
                    self._commit(plan, token, leased_at)
                except BaseException as exc:
                    self._give_back(plan, token)
                    # A broken connection stays broken: the next commit opens another.
                    connections.close_all()
                    with self._changed:
                        self._error = exc
                finally:
                    with self._changed:
                        self._busy = False
                        self._changed.notify_all()
        finally:
            connections.close_all()  # this thread's

    def _next(self) -> Commit | None:
        with self._changed:
            while self._waiting is None and not self._stopping:
                self._changed.wait()
            job, self._waiting = self._waiting, None
            self._busy = job is not None
            return job
