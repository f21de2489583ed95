"""The one way a thread runs beside a scheduler's loop (``operations/stage.py``): a stage
thread is marked as one while it runs and closes its database connections as it ends; a
stage is drained until a deadline, its thread going on."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import DEFAULT_DB_ALIAS, connections

from django_schedulinator.operations.stage import Stage, on_stage_thread, stage_thread

from .support.threads import Opened

pytestmark = pytest.mark.django_db(transaction=True)  # the threads query the database


def test_a_stage_thread_is_marked_and_closes_its_connections_when_it_ends() -> None:
    opened = Opened()
    marked: list[bool] = []

    def target() -> None:
        marked.append(on_stage_thread())
        opened()

    stage_thread("schedulinator-test", target).join(10)
    assert marked == [True]
    assert not on_stage_thread()  # this thread is none
    assert opened.still_open() == []


def test_a_drain_waits_until_its_deadline_and_the_thread_goes_on() -> None:
    release = threading.Event()
    handled: list[int] = []
    started: list[bool] = []

    def handle(items: list[int]) -> None:
        release.wait(10)
        handled.extend(items)

    stage: Stage[int] = Stage(
        "schedulinator-test", handle, capacity=2, on_start=lambda: started.append(on_stage_thread())
    )
    stage.start()
    try:
        assert stage.put(1, timeout=0)
        began = time.monotonic()
        assert not stage.drain(time.monotonic() + 0.2)  # still handling: not idle in time
        assert 0.15 <= time.monotonic() - began < 5
        assert stage.alive
        release.set()
        assert stage.drain(time.monotonic() + 10)
        assert handled == [1]
        assert started == [True]  # on the thread, before it handled anything
    finally:
        release.set()
        assert stage.stop(time.monotonic() + 10)
    assert not stage.alive


def test_the_check_finds_a_thread_that_left_its_connection_open() -> None:
    # The checks above must be able to fail: a plain thread closes nothing.
    opened = Opened()

    def leave_open() -> None:
        opened()
        connections[DEFAULT_DB_ALIAS].inc_thread_sharing()  # for this test to close it

    plain = threading.Thread(target=leave_open, name="plain")
    plain.start()
    plain.join(10)
    try:
        assert opened.still_open() == ["plain"]
    finally:
        for _thread, connection in opened.seen:
            connection.close()
            connection.dec_thread_sharing()
