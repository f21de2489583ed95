"""The models (``django_schedulinator/models.py``): what a row derives on its own (previews,
descriptions)."""

from __future__ import annotations

import pytest

from .conftest import make_schedule
from .simulation import Simulation, utc

# -- previews and descriptions ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # scheduler threads: real commits
def test_preview_shows_local_and_utc_times_and_flags_dst(sim: Simulation) -> None:
    schedule = make_schedule(kind="cron", cron="30 2 * * *", timezone="Europe/Berlin")
    items = schedule.preview(3)

    assert [i.at for i in items] == [
        utc("2026-03-28T01:30"), utc("2026-03-29T01:30"), utc("2026-03-30T00:30"),
    ]  # fmt: skip
    assert [f"{i.local:%H:%M %Z}" for i in items] == ["02:30 CET", "03:30 CEST", "02:30 CEST"]
    assert [i.dst for i in items] == ["", "shifted", ""]
    assert "runs at 03:30 CEST instead" in items[1].note
    assert schedule.description == "At 02:30 (Europe/Berlin)"
