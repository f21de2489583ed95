"""Signals to connect to: what the scheduler did, each sent once, after it is committed.

Like Django's own model signals, each is a ``django.dispatch.Signal`` sent with a sender
(the model class the event is about) and keyword arguments; connect a receiver with
``@receiver(occurrence_fired)``. Every one is sent after the database transaction that made
the event true has committed (an event rolled back is never announced), from the thread that
made it: a scheduler's claim loop or one of its dispatcher lanes, or the web or worker
process that recorded an outcome. Receivers must be quick: they run on the scheduler's path.
A receiver that raises is logged and the scheduler goes on (``send_robust``). docs/signals.md
lists the arguments of each.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.dispatch import Signal

logger = logging.getLogger("django_schedulinator.signals")

# sender=Schedule. occurrence: dispatch.Occurrence (its run_id, schedule_id, key,
# scheduled_for, task, dispatcher, ...); worker_id. Sent once per occurrence, when a scheduler
# has committed its run to the ledger and is about to hand it off for the first time (a
# scheduled occurrence, a run now, a backfilled one, a buffered run released).
occurrence_fired = Signal()
# sender=Run. run_id, schedule_id, scheduled_for, key, dispatcher (alias), awaits_outcome:
# whether the receiving system reports the run's end later. Sent when a hand-off is recorded.
run_handed_off = Signal()
# sender=Run. run_id, schedule_id, scheduled_for, key, status ("succeeded" or "failed"),
# error. Sent when a run ends: its outcome came from the dispatcher or from a worker's report,
# or its hand-offs were given up on.
run_finished = Signal()
# sender=Schedule. schedule_id, scheduled_for (the nominal time that had no success in time),
# run_id (None when the occurrence never fired), reason, grace. Sent once per missed run.
run_missed = Signal()
# sender=Schedule. schedule_id, note, auto: True when the scheduler paused it after
# ``pause_after_failures`` failures in a row, False for a pause by a person or code.
schedule_paused = Signal()
# sender=Schedule. schedule_id, entry_ms (where the index held it, epoch ms, None when it
# held none), due_ms (where the row says, None when it no longer belongs in the index), by:
# "claim" (a claim's re-check) or "reconcile".
entry_repaired = Signal()
# sender=DueIndex. rows, added, fixed, removed (the rebuild's report), built_by.
index_rebuilt = Signal()
# sender=DueIndex. since: when it was noticed that no scheduler is alive. Sent once per
# outage, by the process that noticed it (alerts.no_scheduler_alive).
schedulers_down = Signal()


def send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send now to every receiver; one that raises is logged, and the rest still run."""
    if not signal.receivers:  # the common case, on the hot path: nothing to build
        return
    for receiver, result in signal.send_robust(sender, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "A receiver of a schedulinator signal raised: %r",
                receiver,
                exc_info=(type(result), result, result.__traceback__),
            )


def send_after_commit(signal: Signal, sender: Any, *, using: str, **kwargs: Any) -> None:
    """Send once the transaction open on ``using`` commits (at once when none is open)."""
    if signal.receivers:
        transaction.on_commit(lambda: send(signal, sender, **kwargs), using=using)
