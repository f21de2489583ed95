"""Every walk over a schedule's timeline does bounded work, even for a cron whose matches
are (nearly) all local times the DST policy skips: the crons that make it hard.

``30 2 * 3 0L`` (the last Sunday of March at 02:30) in Europe/Berlin never exists since
1980: the clocks jump from 02:00 to 03:00 that very night. With ``dst_gap="skip"``, looking
for its next occurrence walked one skipped time a year up to the year 9999 (seconds of CPU
per request). The work is counted in wall times examined (``_moments_of_wall``), as
test_timing_properties.py counts it, never timed: the ``walls`` fixture (``conftest.py``)
counts them and stops a walk that passes its bound (``TooMuchWork``), so a regression fails at
once instead of running for seconds.

The walks of the timing module are tested in ``test_timing_walks.py``; backfills of these
crons in ``test_services.py``, ``test_commands.py`` and ``test_api.py``.
"""

from __future__ import annotations

from django_schedulinator.timing import Kind, Timing

NEVER = Timing(kind=Kind.CRON, cron="30 2 * 3 0L", timezone="Europe/Berlin", dst_gap="skip")


NEVER_DENSE = Timing(kind=Kind.CRON, cron="* * 2 * 3 0L", timezone="Europe/Berlin", dst_gap="skip")


class TooMuchWork(AssertionError):
    pass
