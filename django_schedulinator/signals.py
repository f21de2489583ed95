"""Thin signal handlers: after the transaction commits, mirror the row into the index.

A rolled-back edit never reaches Redis because the write happens in ``on_commit``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction

from .sync import resync_after_commit


def schedule_changed(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    transaction.on_commit(partial(resync_after_commit, instance.pk, using), using=using)
