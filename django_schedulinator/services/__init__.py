"""Every change to a schedule, whoever makes it: the one write path (``services.schedules``,
re-exported here by its public names)."""

from __future__ import annotations

from django_schedulinator.changelog import Origin as Origin
from django_schedulinator.errors import ServiceError as ServiceError
from django_schedulinator.errors import VersionConflict as VersionConflict
from django_schedulinator.services.schedules import *  # noqa: F403
from django_schedulinator.services.schedules import __all__ as __all__
