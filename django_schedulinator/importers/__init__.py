"""Importers: schedules from another scheduler, created through the service layer.

Each source (``celery_beat``: django-celery-beat's tables and the ``CELERY_BEAT_SCHEDULE``
setting; ``crontab``: a crontab file) yields what it found as ``Found`` items: a schedule's
fields, or why the entry cannot be mapped. ``import_found`` then creates them all in one
transaction, so an import is never half done: an entry that cannot be mapped (a solar
schedule, an unregistered task, an option no dispatcher takes, invalid for the model) is
listed with the reason and left out; one whose name is taken already (imported before) is
left out too, so a second import creates nothing new. A name another writer takes while
the import runs stops it (``ServiceError``, nothing imported), and so does anything else the
service refuses: the error names the entry it stopped on. Imported schedules start at
their next occurrence after now: an import never fires a burst of missed runs; one with no
occurrence left is imported finished (no next run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from django_schedulinator.errors import ServiceError, validation_message
from django_schedulinator.registry import registry

if TYPE_CHECKING:
    from django_schedulinator.models import Schedule
    from django_schedulinator.services import Origin


@dataclass(frozen=True)
class Found:
    """One entry of the source: ``fields`` of the schedule it becomes, or None and
    ``reason`` when it cannot become one. ``source`` says where it is, for the report."""

    source: str
    fields: Mapping[str, Any] | None
    reason: str = ""
    # What the schedule does otherwise than the entry did, said in the report.
    changes: tuple[str, ...] = ()


@dataclass
class ImportResult:
    dry_run: bool
    created: list[Schedule] = field(default_factory=list)
    # (where in the source, why it was left out)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # The name of a schedule created -> (where in the source, what it does otherwise)
    changes: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)


class TaskNames:
    """Maps a source's task names to registered ones: ``mapping`` first, then a registered
    name equal to the source's."""

    def __init__(self, mapping: Mapping[str, str] | None = None) -> None:
        self.mapping = dict(mapping or {})

    def registered(self, name: str) -> tuple[str | None, str]:
        """The registered name for ``name``, or None and why not."""
        mapped = self.mapping.get(name, name)
        if mapped in registry:
            return mapped, ""
        if name in self.mapping:
            return None, f"--map sends the task {name!r} to {mapped!r}, which is not registered"
        return None, (
            f"the task {name!r} is not registered: register it under that name "
            f"(@django_schedulinator.task(name={name!r})), or map it with --map {name}=NAME"
        )


def import_found(found: Iterable[Found], *, origin: Origin, dry_run: bool) -> ImportResult:
    """Create the schedules found, in one transaction (none with ``dry_run``)."""
    from django_schedulinator import services
    from django_schedulinator.models import Schedule
    from django_schedulinator.services import validate

    result = ImportResult(dry_run=dry_run)
    found = list(found)
    names = [item.fields["name"] for item in found if item.fields is not None]
    with transaction.atomic():
        # The names taken among these (not every schedule's name: the table may be large).
        taken = set(Schedule.objects.filter(name__in=names).values_list("name", flat=True))
        for item in found:
            if item.fields is None:
                result.skipped.append((item.source, item.reason))
                continue
            name = item.fields["name"]
            if name in taken:
                result.skipped.append(
                    (item.source, f"a schedule named {name!r} exists (imported before?)")
                )
                continue
            schedule = Schedule(**item.fields)
            try:
                validate(schedule)
            except ValidationError as exc:
                result.skipped.append((item.source, validation_message(exc)))
                continue
            if not dry_run:
                try:
                    services.create(schedule, origin=origin)
                except IntegrityError:  # another writer took the name since it was read
                    raise ServiceError(
                        f"{item.source}: a schedule named {name!r} was created while the "
                        "import ran (run it again: it leaves out the names that exist)"
                    ) from None
                except (ValidationError, ServiceError) as exc:
                    # What stops the import names the entry it stopped on.
                    raise ServiceError(f"{item.source}: {_message(exc)}") from exc
            taken.add(name)
            result.created.append(schedule)
            if item.changes:
                result.changes[name] = (item.source, item.changes)
    return result


def _message(exc: ValidationError | ServiceError) -> str:
    return validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
