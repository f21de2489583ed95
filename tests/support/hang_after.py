"""A scheduler that dies mid-way: claims (and optionally commits the advance), then hangs
until the test SIGKILLs it. Usage: python -m tests.support.hang_after claim|advance LIMIT"""

from __future__ import annotations

import sys
import time

import django


def main() -> None:
    django.setup()
    from django_schedulinator.scheduler.claiming import Claimer

    stage, limit = sys.argv[1], int(sys.argv[2])
    claimer = Claimer(worker_id="doomed", lease_seconds=2)
    batch, token = claimer.claim(limit)
    if stage == "advance":
        occurrences, _ = claimer.commit(claimer.recheck(batch), token)
        print(f"advanced {len(occurrences)}", flush=True)
    else:
        print(f"claimed {len(batch.entries)}", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
