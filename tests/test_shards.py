"""A sharded due index (``INDEX_SHARDS``), on the real shared Redis under the test's key
prefix: changes go to each schedule's shard, a pass claims from every shard at one "now",
each shard is built and rebuilt on its own, the reads add the shards up, and an index built
for another shard count is reported, not used. (On a real Redis Cluster, with a master
killed: tests/test_redis_topologies.py.)"""

from __future__ import annotations

import json
import logging
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import CommandError, call_command
from django.urls import reverse

from django_schedulinator import services, signals, timing
from django_schedulinator.errors import RebuildInProgress
from django_schedulinator.index.due import (
    REMOVE,
    SET,
    Change,
    DueIndex,
    ShardsAway,
    get_index,
    shard_tag,
)
from django_schedulinator.index.rebuild import ensure_built, rebuild_index
from django_schedulinator.models import Run, Schedule
from django_schedulinator.operations.health import (
    check_drift,
    cluster_status,
    index_status,
    record_drift,
)
from django_schedulinator.operations.metrics import ClusterCollector
from django_schedulinator.operations.stage import stage_thread
from django_schedulinator.scheduler.worker import Worker

from .support.commits import committed
from .support.processes import wait_for
from .support.schedules import make_due, make_schedule

pytestmark = pytest.mark.django_db

LEASE_MS = 30_000


@pytest.fixture
def sharded(settings: Any, key_prefix: str) -> DueIndex:
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "INDEX_SHARDS": 3}
    index = get_index()
    assert sorted(index.parts) == [0, 1, 2]
    return index


def members(index: DueIndex, shard: int, key: str = "due") -> set[int]:
    client = index.client
    return {int(m) for m in client.zrange(f"{shard_tag(index.prefix, shard)}:{key}", 0, -1)}


def marker(index: DueIndex, shard: int) -> dict[str, Any]:
    raw = index.client.get(f"{shard_tag(index.prefix, shard)}:built")
    assert raw, f"shard {shard} has no marker"
    info: dict[str, Any] = json.loads(raw)
    return info


def test_one_shard_is_the_single_index_of_before(settings: Any, key_prefix: str) -> None:
    index = get_index()
    assert list(index.parts) == [0]
    assert index.due_key == f"{{{key_prefix}}}:due"
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "INDEX_SHARDS": 3}
    sharded = get_index()
    assert sorted(sharded.parts) == [0, 1, 2]
    # Shard 0 keeps the single index's keys (no rebuild to start sharding from them), and
    # the control keys; shard k has a hash tag of its own.
    assert [part.due_key for part in sharded.parts.values()] == [
        f"{{{key_prefix}}}:due",
        f"{{{key_prefix}:1}}:due",
        f"{{{key_prefix}:2}}:due",
    ]
    assert sharded.control.lock_key == f"{{{key_prefix}}}:rebuild-lock"


def test_one_shard_claims_with_one_script_call(
    built_index: DueIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is the hot path: with one shard, a pass's claim is one round trip."""
    built_index.apply([Change(sid, 1, SET, 1_000) for sid in (1, 2)])
    built_index.claim(1, LEASE_MS, "warm", None)  # the script loaded (SCRIPT LOAD) once
    client = built_index.client
    sent: list[str] = []
    real = client.execute_command

    def counted(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return real(*args, **options)

    monkeypatch.setattr(client, "execute_command", counted)
    batch = get_index().claim(10, LEASE_MS, "t", None)
    assert [sid for sid, _ in batch.entries] == [2]
    assert sent == ["EVALSHA"]


def test_apply_writes_each_schedule_to_its_shard(sharded: DueIndex) -> None:
    result = sharded.apply([Change(sid, 1, SET, 1_000 + sid) for sid in range(1, 10)])
    assert result.applied == result.changed == 9
    for shard in range(3):
        assert members(sharded, shard) == {sid for sid in range(1, 10) if sid % 3 == shard}
    assert sharded.scores([4, 5, 6, 99]) == {4: 1_004, 5: 1_005, 6: 1_006, 99: None}
    assert sharded.counts() == (9, 0)
    sharded.apply([Change(5, 2, REMOVE)])
    assert members(sharded, 2) == {2, 8}
    assert sharded.apply([Change(5, 1, SET, 1)]).stale == 1  # revision-guarded, per shard


def test_a_claim_takes_from_every_shard_at_one_now(sharded: DueIndex) -> None:
    sharded.mark_built({"by": "tests"})
    now = sharded.now_ms()
    sharded.apply([Change(sid, 1, SET, now - 60_000 + sid) for sid in range(1, 91)])
    for _ in range(20):
        batch = sharded.claim(3, LEASE_MS, "t", None)
        assert batch.built
        # A batch of 3 from 3 shards with due entries: one from each.
        assert sorted(sid % 3 for sid, _score in batch.entries) == [0, 1, 2]
    # Every claim of a pass leased its entries from the same "now" (shard 0's TIME, given
    # to the others): every in-flight entry of a pass has the same deadline.
    for _ in range(10):
        batch = sharded.claim(3, LEASE_MS, f"pass{_}", None)
        deadlines = {
            score
            for part in sharded.parts.values()
            for member, score in part.client.zrange(part.inflight_key, 0, -1, withscores=True)
            if member.endswith(f"@pass{_}".encode())
        }
        assert deadlines == {batch.now_ms + LEASE_MS}


def test_the_shard_that_gets_a_short_batch_turns_from_pass_to_pass(
    sharded: DueIndex,
) -> None:
    sharded.mark_built({"by": "tests"})
    now = sharded.now_ms()
    sharded.apply([Change(sid, 1, SET, now - 1_000) for sid in range(1, 31)])
    # A batch of one (max_runs near its end): each shard in turn, none left behind.
    taken = [sharded.claim(1, LEASE_MS, "t", None).entries for _ in range(6)]
    assert [sid % 3 for [(sid, _score)] in taken] == [0, 1, 2, 0, 1, 2]


def test_a_share_a_shard_leaves_unused_goes_to_the_shards_with_more_due(
    sharded: DueIndex,
) -> None:
    sharded.mark_built({"by": "tests"})
    now = sharded.now_ms()
    on_one = [sid for sid in range(1, 40) if sid % 3 == 1]
    sharded.apply([Change(sid, 1, SET, now - 1_000) for sid in on_one])
    sharded.apply([Change(3, 1, SET, now + 5_000), Change(5, 1, SET, now + 3_000)])
    batch = sharded.claim(9, LEASE_MS, "t", None)
    assert len(batch.entries) == 9
    assert {sid % 3 for sid, _ in batch.entries} == {1}
    # The next wake-up is the earliest head of all shards.
    rest = sharded.claim(100, LEASE_MS, "u", None)
    assert len(rest.entries) == len(on_one) - 9
    assert rest.next_due_ms == now + 3_000


def test_a_claim_that_fails_on_one_shard_gives_back_what_the_others_gave(
    sharded: DueIndex,
) -> None:
    sharded.mark_built({"by": "tests"})
    now = sharded.now_ms()
    sharded.apply([Change(sid, 1, SET, now - 1_000) for sid in (3, 4)])
    # Shard 2's due set is a string: its claim script fails (WRONGTYPE), a real error.
    sharded.client.set(sharded.parts[2].due_key, "not a sorted set")
    with pytest.raises(redis.ResponseError):
        sharded.claim(10, LEASE_MS, "t", None)
    assert members(sharded, 0) == {3}
    assert members(sharded, 1) == {4}
    assert sharded.parts[0].counts()[1] == sharded.parts[1].counts()[1] == 0


def test_each_shard_is_rebuilt_from_its_rows(sharded: DueIndex) -> None:
    ids = make_due(10)
    report = rebuild_index(sharded)
    assert report.rows == 10
    assert report.added == 10
    for shard in range(3):
        assert members(sharded, shard) == {sid for sid in ids if sid % 3 == shard}
        assert marker(sharded, shard)["shards"] == 3
    assert sharded.is_built()
    assert sharded.built_info() is not None
    assert sharded.built_info()["rows"] == 10


def test_a_shard_that_lost_its_data_is_rebuilt_alone(
    sharded: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    ids = make_due(12)
    rebuild_index(sharded, built_by="first build")
    lost = sharded.parts[1]
    lost.client.delete(*lost.data_keys)  # a fail-over to a replica that had none of it

    batch = sharded.claim(100, LEASE_MS, "t", None)
    assert not batch.built
    assert batch.entries == []
    # What the built shards gave is back in their due sets, not left to its lease.
    assert members(sharded, 0) | members(sharded, 2) == {sid for sid in ids if sid % 3 != 1}
    assert sharded.counts()[1] == 0
    assert sharded.missing_shards() == [1]

    with caplog.at_level(logging.WARNING, logger="django_schedulinator.rebuild"):
        assert ensure_built(sharded, built_by="second build", should_stop=lambda: False)
    assert "Shard(s) 1 of the due index lost their data" in caplog.text
    assert members(sharded, 1) == {sid for sid in ids if sid % 3 == 1}
    assert marker(sharded, 1)["by"] == "second build"
    assert marker(sharded, 1)["rows"] == len([sid for sid in ids if sid % 3 == 1])
    assert marker(sharded, 0)["by"] == marker(sharded, 2)["by"] == "first build"
    assert sharded.claim(100, LEASE_MS, "u", None).built


@pytest.mark.django_db(transaction=True)  # the inline dispatcher's threads
def test_a_scheduler_fires_the_due_schedules_of_every_shard(sharded: DueIndex) -> None:
    ids = make_due(9, task="tests.record")
    worker = Worker(once=True)
    worker.run()
    assert worker.counters.fired == 9
    assert set(Schedule.objects.filter(runs__isnull=False).values_list("pk", flat=True)) == set(ids)
    # Each row's next run went back to its own shard.
    for shard in range(3):
        assert members(sharded, shard) == {sid for sid in ids if sid % 3 == shard}


def test_counts_health_and_metrics_add_the_shards_up(sharded: DueIndex) -> None:
    ids = make_due(9)
    rebuild_index(sharded)
    status = index_status(sharded)
    assert (status.entries_due, status.due_now, status.in_flight) == (9, 9, 0)
    assert status.shard_count == 3
    assert status.other_layout is None
    assert [(row["shard"], row["entries_due"]) for row in status.shards] == [
        (k, len([sid for sid in ids if sid % 3 == k])) for k in range(3)
    ]
    assert all(row["oldest_due_lag_seconds"] > 0 for row in status.shards)
    assert status.drift is not None
    assert status.drift.ok
    assert status.drift.sampled == 9
    report = cluster_status(sharded)
    assert "index-not-built" not in {p.code for p in report.problems}
    assert report.as_dict()["index"]["shards"][2]["shard"] == 2

    text = StringIO()
    with pytest.raises(CommandError, match="Unhealthy"):  # no scheduler runs
        call_command("scheduler_status", "--no-drift", stdout=text)
    for k in range(3):
        assert f"  shard {k}: entries 3, due now 3, in flight 0" in text.getvalue()

    record_drift(sharded, check_drift(sharded))
    families = {family.name: family for family in ClusterCollector(sharded).collect()}
    entries = families["schedulinator_index_entries"].samples
    assert {s.labels["shard"]: s.value for s in entries} == {"0": 3.0, "1": 3.0, "2": 3.0}
    late = families["schedulinator_drift_late_or_missing"].samples
    assert {s.labels["shard"] for s in late} == {"0", "1", "2"}

    sharded.parts[2].client.delete(*sharded.parts[2].data_keys)
    problems = {p.code: p.message for p in cluster_status(sharded, drift=False).problems}
    assert problems["index-not-built"].startswith("Shard(s) 2 of the due index are not built")


def test_run_now_wakes_the_schedules_shard(sharded: DueIndex) -> None:
    schedule = make_schedule(task="tests.record")
    with committed():  # the wake goes on commit
        services.run_now(schedule)
    woken = {k for k, part in sharded.parts.items() if part.client.exists(part.wake_key)}
    assert woken == {schedule.pk % 3}
    sharded.wake()
    assert all(part.client.exists(part.wake_key) for part in sharded.parts.values())


def test_an_index_built_for_another_shard_count_is_reported_and_rebuilt_by_the_command(
    settings: Any, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    ids = make_due(6)
    single = get_index()
    rebuild_index(single)  # built for one shard, before INDEX_SHARDS changed
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "INDEX_SHARDS": 3}
    sharded = get_index()

    batch = sharded.claim(100, LEASE_MS, "t", None)
    assert not batch.built
    assert batch.other_layout == 1
    assert batch.entries == []
    assert members(sharded, 0) == set(ids)  # given back, as it was
    with caplog.at_level(logging.ERROR):
        assert not ensure_built(sharded, built_by="tests", should_stop=lambda: False)
    assert "The due index was built for 1 shard(s), and INDEX_SHARDS is 3" in caplog.text
    assert "rebuild_due_index" in caplog.text
    problems = {p.code for p in cluster_status(sharded, drift=False).problems}
    assert "index-layout" in problems
    # A scheduler says so once, and claims nothing.
    caplog.clear()
    worker = Worker(once=True)
    with caplog.at_level(logging.ERROR, logger="django_schedulinator.worker"):
        worker.run()
    assert worker.counters.claimed == 0
    assert caplog.text.count("was built for 1 shard(s)") == 1

    out = StringIO()
    call_command("rebuild_due_index", "--no-progress", stdout=out)
    assert "The due index was built for 1 shard(s); INDEX_SHARDS is 3" in out.getvalue()
    for shard in range(3):
        assert members(sharded, shard) == {sid for sid in ids if sid % 3 == shard}
        assert marker(sharded, shard)["shards"] == 3
    assert sharded.is_built()

    # And back to one shard: the command drops the three shards' entries by the count the
    # markers recorded.
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "INDEX_SHARDS": 1}
    assert get_index().other_layout() == 3
    call_command("rebuild_due_index", "--no-progress", stdout=StringIO())
    assert members(sharded, 0) == set(ids)
    assert not sharded.client.exists(*sharded.parts[1].data_keys, *sharded.parts[2].data_keys)
    assert get_index().is_built()


def test_the_operations_page_shows_each_shard(
    sharded: DueIndex, admin_client: Any, fast_password_hashing: None
) -> None:
    make_due(3)
    rebuild_index(sharded)
    html = admin_client.get(reverse("admin:django_schedulinator_schedule_operations")).content
    assert b"0: 1 entries, 1 due, 0 in flight; 1: 1 entries" in html


def test_a_process_with_another_shard_count_writes_to_the_shards_of_the_index(
    sharded: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    sharded.mark_built({"by": "tests"})
    now = sharded.now_ms()
    # A web host still on one shard writes schedule 4's entry to shard 0 (4 % 3 is 1):
    # shard 0 is laid out for three, and refuses it; it goes to shard 1.
    with caplog.at_level(logging.WARNING, logger="django_schedulinator.index"):
        result = DueIndex(shards=1).apply([Change(4, 1, SET, now - 1_000)])
    assert (result.applied, result.rerouted, result.refused) == (1, 1, 0)
    assert members(sharded, 0) == set()
    assert members(sharded, 1) == {4}
    assert "routes the due index's writes by 1 shard(s)" in caplog.text
    assert [sid for sid, _ in sharded.claim(10, LEASE_MS, "u", None).entries] == [4]


def test_entries_a_process_with_another_shard_count_wrote_are_moved_to_their_shard(
    sharded: DueIndex,
) -> None:
    sharded.mark_built({"by": "tests"})
    now = sharded.now_ms()
    # Schedule 4's entry in shard 0 (4 % 3 is 1), as a version that did not check the
    # layout wrote it.
    sharded.client.zadd(sharded.parts[0].due_key, {"4": now - 1_000})
    assert members(sharded, 0) == {4}
    batch = sharded.claim(10, LEASE_MS, "t", None)
    assert batch.entries == []  # not fired from the wrong shard
    assert members(sharded, 0) == set()
    assert members(sharded, 0, "inflight") == set()
    assert members(sharded, 1) == {4}  # but moved to its own, at its score
    assert [sid for sid, _ in sharded.claim(10, LEASE_MS, "u", None).entries] == [4]


def test_the_system_check_names_another_shard_count(settings: Any, key_prefix: str) -> None:
    from django_schedulinator import checks

    DueIndex().mark_built({"by": "tests"})  # built for one shard
    settings.SCHEDULINATOR = {**settings.SCHEDULINATOR, "INDEX_SHARDS": 3}
    [warning] = checks.check_index(databases=["default"])
    assert warning.id == "schedulinator.W011"
    assert "built for 1 shard(s), and INDEX_SHARDS is 3" in warning.msg


def keys_of(index: DueIndex, shard: int) -> set[str]:
    tag = shard_tag(index.prefix, shard)
    return {key.decode() for key in index.client.keys(f"{tag}*")}


@pytest.mark.django_db(transaction=True)  # the scheduler's threads commit
def test_a_write_back_after_a_rebuild_for_another_shard_count_lands_in_the_new_layout(
    sharded: DueIndex, key_prefix: str
) -> None:
    """A scheduler still on three shards claims a batch; INDEX_SHARDS becomes two and
    rebuild_due_index runs between its claim and its write-back (issue 32, item 21). Its
    write-back must neither bring the dropped shard 2 back (orphan keys no claim ever reads)
    nor put an entry in a shard of the new layout it does not belong in. The rows are the
    truth: every schedule ends with one entry, in its new shard, at its row's next run."""
    ids = make_due(12)
    rebuild_index(sharded, built_by="three shards")
    new = DueIndex(shards=2)
    rebuilt: list[Any] = []

    def rebuild_in_the_window(sender: Any, **kwargs: Any) -> None:
        # Sent after the batch's SQL commit, before its index write-back (claiming.py).
        if not rebuilt:
            rebuilt.append(rebuild_index(new, built_by="two shards"))

    signals.occurrence_fired.connect(rebuild_in_the_window, weak=False)
    try:
        worker = Worker(worker_id="three", once=True)  # built on INDEX_SHARDS 3
        worker.run()
    finally:
        signals.occurrence_fired.disconnect(rebuild_in_the_window)

    assert rebuilt
    assert rebuilt[0].layout_changed_from == 3
    assert worker.counters.fired == len(ids)
    # The dropped shard keeps only the record of the layout that dropped it.
    assert keys_of(new, 2) == {f"{shard_tag(key_prefix, 2)}:layout"}
    rows = dict(Schedule.objects.values_list("pk", "next_run_at"))
    for shard in (0, 1):
        belong = {sid for sid in ids if sid % 2 == shard}
        assert members(new, shard) == belong
        assert members(new, shard, "inflight") == set()
        revisions = new.client.hkeys(f"{shard_tag(key_prefix, shard)}:rev")
        assert {int(sid) for sid in revisions} == belong
    assert new.scores(ids) == {sid: timing.to_ms(rows[sid]) for sid in ids}
    assert new.is_built()
    assert set(Run.objects.values_list("status", flat=True)) == {"succeeded"}
    assert Run.objects.count() == len(ids)


def test_once_a_rebuild_records_a_new_layout_the_old_one_claims_nothing(
    sharded: DueIndex,
) -> None:
    """Between the moment a rebuild for another shard count records its layout and the
    moment it drops the old entries, the old markers still say three: the layout keys say
    two, and a claim routed by three takes nothing (what it took would be dropped under it)."""
    ids = make_due(6)
    rebuild_index(sharded)
    DueIndex(shards=2).record_layout(dropped=3)
    batch = sharded.claim(100, LEASE_MS, "t", None)
    assert (batch.built, batch.other_layout, batch.entries) == (False, 2, [])
    assert sharded.counts() == (len(ids), 0)
    assert sharded.other_layout() == 2
    assert not sharded.is_built()
    # A rebuild routed by three that a rebuild for two overtook stops, refused.
    with pytest.raises(RebuildInProgress, match="laid out for 2 shard"):
        sharded.rebuild_entries([Change(ids[0], 1, SET, 0)])


def test_changes_that_layouts_keep_refusing_are_left_to_the_rows(
    sharded: DueIndex, caplog: pytest.LogCaptureFixture
) -> None:
    # Layout keys that send a change round (shard 0 says two, shard 1 says one): it is
    # given up after a few hops, logged, and nothing is written anywhere.
    client, prefix = sharded.client, sharded.prefix
    client.set(f"{shard_tag(prefix, 0)}:layout", 2)
    client.set(f"{shard_tag(prefix, 1)}:layout", 1)
    with caplog.at_level(logging.WARNING, logger="django_schedulinator.index"):
        result = DueIndex(shards=1).apply([Change(1, 1, SET, 1_000)])
    assert (result.applied, result.refused) == (0, 1)
    assert "Could not write 1 change(s) to the due index" in caplog.text
    assert members(sharded, 0) == members(sharded, 1) == set()


# -- a shard whose node is away (issue 34, item 3; on a real cluster: test_redis_topologies) --


def node_away(monkeypatch: pytest.MonkeyPatch, index: DueIndex, shard: int) -> list[str]:
    """Every call of ``shard``'s claim, write and clock fails as a node that is away does;
    the calls tried, by name."""
    tried: list[str] = []

    def away(name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            tried.append(name)
            raise redis.ConnectionError(f"node of shard {shard} away")

        return fail

    for name in ("claim", "write", "now_ms"):
        monkeypatch.setattr(index.parts[shard], name, away(name))
    return tried


def test_a_shard_whose_node_is_away_is_backed_off_from_alone(
    sharded: DueIndex, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sharded.watch_shards(stage_thread)  # as a scheduler's index
    sharded.mark_built({"by": "tests"})
    now = sharded.now_ms()
    sharded.apply([Change(sid, 1, SET, now - 1_000) for sid in range(1, 10)])
    with monkeypatch.context() as patch:
        tried = node_away(patch, sharded, 1)
        batch = sharded.claim(100, LEASE_MS, "t", None)
        # The pass goes on with the others; the shard away is retried after its back-off.
        assert sorted(sid for sid, _ in batch.entries) == [2, 3, 5, 6, 8, 9]
        assert tried.count("claim") == 1
        assert sharded.health.away == [1]
        assert batch.next_due_ms is not None
        assert batch.next_due_ms <= batch.now_ms + 5_000
        assert sharded.claim(100, LEASE_MS, "u", None).entries == []
        assert tried.count("claim") == 1  # backed off from: its probe looks, not the claim
    assert caplog.text.count("Shard 1 of the due index is away") == 1
    # Back: once its back-off ends, its entries are claimed, and it is said once.
    wait_for(lambda: sharded.health.away == [])  # its probe found it back
    batch = sharded.claim(100, LEASE_MS, "v", None)
    assert sorted(sid for sid, _ in batch.entries) == [1, 4, 7]
    assert sharded.health.away == []
    assert caplog.text.count("Shard 1 of the due index answers again") == 1


def test_while_shard_0_is_away_the_pass_reads_time_on_another_shards_node(
    sharded: DueIndex, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sharded.watch_shards(stage_thread)  # as a scheduler's index
    sharded.mark_built({"by": "tests"})
    now = sharded.now_ms()
    sharded.apply([Change(sid, 1, SET, now - 1_000) for sid in range(1, 7)])
    node_away(monkeypatch, sharded, 0)
    before = sharded.parts[1].now_ms()
    batch = sharded.claim(100, LEASE_MS, "t", None)
    assert sorted(sid for sid, _ in batch.entries) == [1, 2, 4, 5]
    assert before <= batch.now_ms <= sharded.parts[1].now_ms()  # Redis time, shard 1's node
    assert before <= sharded.now_ms() <= sharded.parts[2].now_ms()
    assert "the passes read Redis TIME on shard 1's node" in caplog.text
    monkeypatch.undo()
    wait_for(lambda: sharded.health.away == [])  # its probe ends (and logs) in this test


def test_an_apply_that_fails_on_one_shard_writes_the_others(
    sharded: DueIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    sharded.watch_shards(stage_thread)
    now = sharded.now_ms()
    node_away(monkeypatch, sharded, 1)
    with pytest.raises(ShardsAway) as raised:
        sharded.apply([Change(sid, 1, SET, now + 60_000) for sid in range(1, 10)])
    assert sorted(raised.value.shards) == [1]
    assert raised.value.result.applied == 6
    assert isinstance(raised.value, redis.ConnectionError)  # an outage to its callers
    assert members(sharded, 0) == {3, 6, 9}
    assert members(sharded, 2) == {2, 5, 8}
    monkeypatch.undo()
    wait_for(lambda: sharded.health.away == [])  # its probe ends (and logs) in this test


@pytest.mark.django_db(transaction=True)  # the commit stage's thread commits
def test_a_scheduler_fires_the_other_shards_while_one_is_away_and_it_heals_after(
    sharded: DueIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = make_due(9, task="tests.record")
    with monkeypatch.context() as patch:
        node_away(patch, sharded, 2)
        worker = Worker(once=True, index=sharded)
        worker.run()
        assert worker.exit_error == ""
        fired = set(Schedule.objects.filter(runs__isnull=False).values_list("pk", flat=True))
        assert fired == {sid for sid in ids if sid % 3 != 2}
    # Back: its schedules fire, the others' do not fire twice.
    wait_for(lambda: sharded.health.away == [])  # its probe found it back
    worker = Worker(once=True, index=sharded)
    worker.run()
    assert worker.counters.fired == 3
    assert Run.objects.count() == 9
    assert set(Run.objects.values_list("schedule_id", flat=True)) == set(ids)
