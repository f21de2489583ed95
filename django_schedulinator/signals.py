"""Thin signal handlers: after the transaction commits, mirror the row into the index.

A rolled-back edit never reaches Redis because the write happens in ``on_commit``.
"""

from __future__ import annotations

from typing import Any

from .sync import resync_on_commit


def schedule_changed(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    resync_on_commit([instance.pk], using=using)
