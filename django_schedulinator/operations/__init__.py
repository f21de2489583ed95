"""Running it in production: each scheduler's ``heartbeat``, the ``health`` of the scheduling,
the ``probes`` and ``metrics`` a scheduler serves, missed-run ``alerts`` and their
``outbox``, and ``retention`` of the ledger and the change log."""
