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

from collections.abc import Callable
from typing import TYPE_CHECKING

from django_schedulinator.operations.stage import Stage

if TYPE_CHECKING:
    from django_schedulinator.scheduler.claiming import Plan

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
        self._stage: Stage[Commit] = Stage(
            "schedulinator-commit",
            self._commit_each,
            capacity=1,
            on_error=self._gave_back,
            raise_errors=True,  # the loop backs off, as from any failed pass
        )

    @property
    def running(self) -> bool:
        return self._stage.running

    def start(self) -> None:
        self._stage.start()

    def put(self, plan: Plan, token: str, leased_at: float) -> None:
        """Commit ``plan`` on the stage's thread, once the commit before it has ended.
        Raises that commit's error instead (its batch given back; the caller gives this
        one back)."""
        self._stage.drain()
        if not self._stage.put((plan, token, leased_at)):
            raise RuntimeError("The commit stage is not running: start the loop (or step).")

    def drain(self) -> None:
        """Wait for the commit in progress; raise its error, if it failed."""
        self._stage.drain()

    def stop(self) -> None:
        """Finish the commit in progress, then end the thread. An error of that commit is
        logged: its batch went back to the due set."""
        self._stage.stop()

    def _commit_each(self, commits: list[Commit]) -> None:
        for plan, token, leased_at in commits:
            self._commit(plan, token, leased_at)

    def _gave_back(self, commits: list[Commit], _exc: Exception) -> bool:
        for plan, token, _leased_at in commits:
            self._give_back(plan, token)
        return False  # and the error goes to the loop
