"""Cron expressions: reading them (5 fields, an optional leading seconds field, or an ``@``
alias; several in one schedule, whose union it fires), and cronsim's walk over the wall
times one matches, under the day rule.

When both the day of the month and the day of the week are restricted (neither starts with
``*``), the **day rule** decides: ``either`` field may match (cron's own rule, the
default: ``1-7 * 1`` is every Monday and every day from the 1st to the 7th), or ``both``
must (Celery's crontab: the first Monday of the month). When either field starts with
``*``, a day matches both under either rule.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime

from cronsim import CronSim, CronSimError

from django_schedulinator.errors import TimingError
from django_schedulinator.timing.vocabulary import DayRule

CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_CRON_LENGTH = 200  # one expression
# Several expressions in one schedule ("0 9 * * 1-5; 0 12 * * 6"): the schedule fires
# their union. Separated by ";" or written on lines of their own.
CRON_SEPARATORS = re.compile(r"[;\n]")
MAX_CRON_EXPRESSIONS = 10
MAX_CRON_TEXT_LENGTH = 1000  # the field that holds them


def normalize_cron(expr: str) -> str:
    """The expression cronsim will evaluate, or TimingError saying what is wrong with it."""
    if not isinstance(expr, str):
        raise TimingError("Enter a cron expression as text.")
    return _normalize_cron(expr)


@functools.lru_cache(maxsize=4096)
def _normalize_cron(expr: str) -> str:
    text = " ".join(expr.split())
    if not text:
        raise TimingError("Enter a cron expression, for example '*/5 * * * *'.")
    if len(text) > MAX_CRON_LENGTH:
        raise TimingError(f"A cron expression has at most {MAX_CRON_LENGTH} characters.")
    if text.startswith("@"):
        try:
            return CRON_ALIASES[text.lower()]
        except KeyError:
            raise TimingError(
                f"Unknown cron alias {text!r}; use one of {', '.join(sorted(CRON_ALIASES))}."
            ) from None
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise TimingError(
            f"A cron expression has 5 fields (minute hour day month weekday) or 6 with a "
            f"leading seconds field; {text!r} has {len(fields)}."
        )
    try:
        next(CronSim(text, datetime(2000, 1, 1)))
    except CronSimError as exc:
        raise TimingError(f"Invalid cron expression {text!r}: {exc}.") from None
    except StopIteration:
        raise TimingError(f"The cron expression {text!r} never matches a date.") from None
    return text


def cron_expressions(text: str) -> tuple[str, ...]:
    """The expressions of a schedule's cron field, each normalized and once, in the order
    written: one, or several separated by ``;`` (or on lines of their own), whose union the
    schedule fires. TimingError says what is wrong, naming the expression."""
    if not isinstance(text, str):
        raise TimingError("Enter a cron expression as text.")
    return _cron_expressions(text)


@functools.lru_cache(maxsize=4096)
def _cron_expressions(text: str) -> tuple[str, ...]:
    parts = [part.strip() for part in CRON_SEPARATORS.split(text) if part.strip()]
    if len(parts) <= 1:
        return (_normalize_cron(parts[0] if parts else ""),)
    if len(text) > MAX_CRON_TEXT_LENGTH:
        raise TimingError(f"The cron expressions have at most {MAX_CRON_TEXT_LENGTH} characters.")
    if len(parts) > MAX_CRON_EXPRESSIONS:
        raise TimingError(
            f"A schedule has at most {MAX_CRON_EXPRESSIONS} cron expressions; this has "
            f"{len(parts)}."
        )
    found: dict[str, None] = {}
    for number, part in enumerate(parts, 1):
        try:
            found[_normalize_cron(part)] = None
        except TimingError as exc:
            raise TimingError(f"Expression {number} of {len(parts)}: {exc}") from None
    return tuple(found)


def both_days_restricted(expr: str) -> bool:
    """Whether neither day field of a normalized expression starts with ``*``: only then
    does the day rule change which days match."""
    fields = expr.split(" ")
    return not (fields[-3].startswith("*") or fields[-1].startswith("*"))


@functools.lru_cache(maxsize=1024)
def check_matches_both(expr: str) -> None:
    """TimingError when no day matches both day fields (``0 0 30 2 1``: no 30 February)."""
    try:
        next(cron_walls(expr, datetime(2000, 1, 1), DayRule.BOTH))
    except StopIteration:
        raise TimingError(
            f"The cron expression {expr!r} never matches a date when both day fields must match."
        ) from None


def cron_field_values(text: str, position: int) -> frozenset[int] | None:
    """The numbers cron reads in one field of a 5-field expression (``position`` 0 is the
    minute, 4 the day of the week, Sunday 0), or None: not a valid field, or one that says
    more than numbers (``L``, ``W``, ``#``)."""
    if not text or text != "".join(text.split()):  # one field: no spaces
        return None
    fields = ["*"] * 5
    fields[position] = text
    try:
        walls = CronSim(" ".join(fields), datetime(2000, 1, 1))
    except CronSimError:
        return None
    values = (walls.minutes, walls.hours, walls.days, walls.months, walls.weekdays)[position]
    if not all(isinstance(v, int) and v >= 0 for v in values):
        return None
    return frozenset(v % 7 if position == 4 else v for v in values if isinstance(v, int))


def cron_walls(expr: str, start: datetime, day_rule: str, *, reverse: bool = False) -> CronSim:
    """cronsim's walk over the wall times ``expr`` matches from ``start`` on.

    cronsim (like Debian cron) requires both day fields to match when either starts with
    ``*``, and either otherwise; it has no argument for the rule, but its matcher reads it
    from ``day_and``, which its constructor sets: under ``both`` it is set for every
    expression, so that cronsim's own matching (``L``, ``W``, ``#``) decides each day.
    """
    walls = CronSim(expr, start, reverse=reverse)
    if day_rule == DayRule.BOTH:
        if not isinstance(getattr(walls, "day_and", None), bool):  # never fire on wrong days
            raise TimingError("The installed cronsim has no day_and: the day rule 'both' needs it.")
        walls.day_and = True
    return walls
