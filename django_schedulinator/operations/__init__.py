"""Running it in production: each scheduler's ``heartbeat``, the ``health`` of the scheduling,
the ``probes`` and ``metrics`` a scheduler serves, missed-run ``alerts`` and their
``outbox``, and ``retention`` of the ledger and the change log. The notifications: what a
notifier is told (``events``), the ``notifiers``, the outbox's ``delivery`` step, the
``courier`` that sends what a scheduler's threads raise, and the ``receivers`` of the
signals. Below them all and the loop, ``stage``: the one way a thread runs beside it."""
