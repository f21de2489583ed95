"""The database's clock: the one clock every host that writes schedules shares.

``Schedule.updated_at`` is reconcile's watermark. Taken from each saving host's clock, one
host running ahead would move the watermark past later saves (they would never be healed),
and one running behind would write rows under it. So every write takes the time from the
database, in the statement that writes the row, and reconcile reads the same clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, models
from django.db.models import signals
from django.db.models.expressions import Combinable
from django.db.models.functions import Now
from django.db.models.sql import Query


class DatabaseNow(Now):
    """The database's time when the statement runs (``Now()`` on PostgreSQL).

    Bulk writes set ``updated_at=DatabaseNow()``. On SQLite it writes the text Django writes
    for a datetime (``Now()`` writes milliseconds only, ``"...:05.250"`` where Django writes
    ``"...:05.250000"``): SQLite compares that text, and reconcile pages through it.
    """

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # 'now' is one instant for the whole statement; Django leaves out a zero fraction.
        template = (
            "(CASE WHEN STRFTIME('%%%%f', 'now') LIKE '%%%%.000' "
            "THEN STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%S', 'now') "
            "ELSE STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f', 'now') || '000' END)"
        )
        return self.as_sql(compiler, connection, template=template, **extra_context)


def database_now(using: str) -> datetime:
    """What the database ``using`` says the time is (aware, UTC: the app needs USE_TZ)."""
    connection = connections[using]
    query = Query(None)
    expression = DatabaseNow().resolve_expression(query)
    sql, params = query.get_compiler(connection=connection).compile(expression)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        (value,) = cursor.fetchone()
    converters = [
        *connection.ops.get_db_converters(expression),
        *expression.get_db_converters(connection),
    ]
    for converter in converters:
        value = converter(value, expression, connection)
    assert isinstance(value, datetime)
    return value


if TYPE_CHECKING:
    _DateTimeField = models.DateTimeField[datetime | Combinable, datetime]
else:  # Django's fields take no type arguments at run time
    _DateTimeField = models.DateTimeField


class DatabaseClockField(_DateTimeField):
    """A ``DateTimeField(auto_now=True)`` that takes the database's clock, not the host's.

    Every insert and update writes ``DatabaseNow()`` in its own statement (``bulk_create``
    too); after ``save()`` the instance reads the stored value back (one query). Bulk
    updates, which skip this, set it with ``DatabaseNow()``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["editable"] = False
        kwargs["blank"] = True
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        del kwargs["editable"], kwargs["blank"]
        return name, path, args, kwargs

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        # Only the statement gets the expression: the instance keeps a plain value (None
        # until saved), and _read_back gives it the stored one after save().
        return DatabaseNow()

    def contribute_to_class(self, cls: Any, name: str, *args: Any, **kwargs: Any) -> None:
        super().contribute_to_class(cls, name, *args, **kwargs)
        if not cls._meta.abstract:
            # Weak: the historical models that migrations build come and go.
            signals.post_save.connect(self._read_back, sender=cls)

    def _read_back(
        self,
        sender: Any,
        instance: Any,
        using: str,
        raw: bool = False,
        update_fields: Any = None,
        **kwargs: Any,
    ) -> None:
        if raw or (update_fields is not None and self.name not in update_fields):
            return  # this save did not write the field
        value = (
            sender._base_manager.using(using)
            .filter(pk=instance.pk)
            .values_list(self.attname, flat=True)
            .first()
        )
        setattr(instance, self.attname, value)
