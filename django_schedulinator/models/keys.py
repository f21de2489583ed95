"""The occurrence key, built and read here only: ``"<schedule id>:<epoch ms of nominal
time>"``. It is the idempotency key every (re-)dispatch of one occurrence carries, so a
receiver can drop duplicates, and the name a worker reports an outcome by."""

from __future__ import annotations

import re
from datetime import datetime

from django_schedulinator import timing
from django_schedulinator.errors import InvalidKey

# ASCII digits only: str.isdigit() and int() also take "²" and other scripts' digits.
KEY_PATTERN = re.compile(r"([0-9]{1,19}):(-?[0-9]{1,15})")
# A schedule's primary key is a bigint.
MAX_SCHEDULE_ID = 2**63 - 1


def occurrence_key(schedule_id: int, scheduled_for: datetime) -> str:
    """The idempotency key of one occurrence. Deterministic, so every (re-)dispatch of the
    same occurrence carries the same key and a receiver can dedupe on it."""
    return f"{schedule_id}:{timing.to_ms(scheduled_for)}"


def parse_key(key: str) -> tuple[int, datetime]:
    """The schedule id and nominal time an occurrence key stands for. Something else, or a
    key whose numbers no schedule id or datetime can hold, raises ``InvalidKey``."""
    match = KEY_PATTERN.fullmatch(str(key))
    if match and int(match[1]) <= MAX_SCHEDULE_ID:
        try:
            return int(match[1]), timing.from_ms(int(match[2]))
        except OverflowError:  # past the years 1-9999
            pass
    raise InvalidKey(f"{key!r} is not an occurrence key ('<schedule id>:<epoch ms>')")
