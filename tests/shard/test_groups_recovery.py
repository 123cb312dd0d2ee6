"""Crash recovery: replaying the records onto a fresh coordinator rebuilds groups and offsets."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rafka.shard.groups import Errors, GroupConfig, GroupCoordinator
from rafka.shard.groups.coordinator import GroupCoordinator as _GC
from rafka.shard.groups.offsets_store import pack_entry
from rafka.shard.handlers import ShardState
from rafka.shard.records import Record, RecordType
from rafka.shard.wal import Wal
from tests.shard.test_groups_context import FakeTimer, GroupsTestContext, Response, committed, roundtrip

DURABLE_STATES = ("Stable", "Empty")
TS = 1_764_000_000_000  # commit time of the records the WAL tests write


def durable_view(coord: _GC) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """What must survive a crash: each group's durable image and every committed offset."""
    groups = {}
    for key, g in coord.groups.items():
        members = sorted(
            (m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
             m.rebalance_timeout_ms, tuple(m.protocols), m.assignment)
            for m in g.members.values()
        )
        groups[key] = (g.uid, g.state.value, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id,
                       g.state_ts, tuple(members))
    offsets = {}
    for org, gid in coord.offsets.group_keys():
        for topic in coord.offsets.topics(org, gid):
            for p, entry in coord.offsets.partitions(org, gid, topic):
                offsets[(org, gid, topic, p)] = (entry, coord.offsets.expire_ts(org, gid, topic, p))
    return groups, offsets


def recover(ctx: GroupsTestContext) -> tuple[GroupCoordinator, FakeTimer]:
    """A fresh coordinator that replayed ctx's WAL (through msgpack), then on_loaded."""
    fresh_ctx = GroupsTestContext()
    fresh_ctx.now = ctx.now
    coord = fresh_ctx.coord
    for record in ctx.log:
        coord.replay(roundtrip(record))
    coord.on_loaded(ctx.now)
    fresh_ctx.log = list(ctx.log)
    return coord, fresh_ctx


def assert_recovers(ctx: GroupsTestContext) -> GroupsTestContext:
    coord, fresh = recover(ctx)
    # a compacted WAL (the coordinator's snapshot) must rebuild the very same state
    compacted = GroupsTestContext()
    for record in ctx.coord.snapshot_records():
        compacted.coord.replay(roundtrip(record))
    compacted.coord.on_loaded(ctx.now)
    assert durable_view(compacted.coord) == durable_view(coord)
    live_groups, live_offsets = durable_view(ctx.coord)
    got_groups, got_offsets = durable_view(coord)
    assert got_offsets == live_offsets
    assert set(got_groups) == set(live_groups)
    for key, live in live_groups.items():
        assert got_groups[key][0] == live[0], key  # same cgp_ id whatever the state
        if live[1] in DURABLE_STATES:
            assert got_groups[key] == live, key
    return fresh  # type: ignore[return-value]


def test_replay_rebuilds_stable_empty_and_simple_groups_with_their_offsets() -> None:
    ctx = GroupsTestContext()
    a, b = ctx.stable_group("stable", n=2)
    ctx.commit("stable", {"t": {0: 11, 1: 12}}, generation=1, member_id=a, metadata="m")
    [c] = ctx.stable_group("emptied")
    ctx.commit("emptied", {"t": {0: 5}}, generation=1, member_id=c)
    ctx.leave("emptied", (c, None))
    ctx.commit("simple", {"x": {3: 33}})
    ctx.commit("deleted", {"x": {0: 1}})
    ctx.call("delete_group", {"group_id": "deleted"})
    ctx.commit("stable", {"t": {0: 13}}, generation=1, member_id=b)
    fresh = assert_recovers(ctx)
    g = fresh.group("stable")
    assert g.state.value == "Stable" and g.generation_id == 1 and g.leader_id == a
    assert fresh.group("emptied").state.value == "Empty" and fresh.group("emptied").generation_id == 2
    assert fresh.group("deleted") is None
    assert committed(fresh.fetch("stable")) == {("t", 0): 13, ("t", 1): 12}


def test_recovered_members_keep_working_with_their_generation() -> None:
    ctx = GroupsTestContext()
    a, b = ctx.stable_group("g", n=2)
    fresh = assert_recovers(ctx)
    assert fresh.heartbeat("g", a, 1).error == Errors.NONE
    assert fresh.sync("g", b, 1)["assignment"] == b.encode()
    assert fresh.join("g", b)["generation_id"] == 1  # unchanged follower: current generation
    resp = fresh.commit("g", {"t": {0: 1}}, generation=1, member_id=a)
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0


def test_on_loaded_arms_session_timers_of_recovered_members() -> None:
    ctx = GroupsTestContext()
    a, _b = ctx.stable_group("g", n=2, session=10_000)
    fresh = assert_recovers(ctx)
    for _ in range(3):
        fresh.sleep(6000)
        fresh.heartbeat("g", a, 1)
    # b never came back after the restart: it expired and the group rebalances without it
    assert fresh.state("g") == "PreparingRebalance" and set(fresh.group("g").members) == {a}
    fresh.join("g", a)
    assert fresh.group("g").generation_id == 2


def test_a_group_mid_rebalance_recovers_to_its_last_durable_generation() -> None:
    ctx = GroupsTestContext()
    a, b = ctx.stable_group("g", n=2)
    ctx.join("g", a)  # rebalance in progress, nothing durable yet
    fresh = assert_recovers(ctx)
    g = fresh.group("g")
    assert g.state.value == "Stable" and g.generation_id == 1 and set(g.members) == {a, b}


def test_static_replacement_survives_recovery() -> None:
    ctx = GroupsTestContext()
    r = ctx.join("g", "", instance_id="pod-1")
    ctx.sleep(0)
    ctx.sync("g", r["member_id"], 1, instance_id="pod-1", assignments=[{"member_id": r["member_id"], "assignment": b"A"}])
    new = ctx.join("g", "", instance_id="pod-1")["member_id"]
    fresh = assert_recovers(ctx)
    assert fresh.sync("g", new, 1, instance_id="pod-1")["assignment"] == b"A"
    assert fresh.heartbeat("g", r["member_id"], 1, instance_id="pod-1").error == Errors.FENCED_INSTANCE_ID


def test_replay_on_the_live_path_does_not_disturb_parked_requests() -> None:
    ctx = GroupsTestContext()
    m, parked = ctx.join_new_member("g")
    # the group's creation record was replayed on the live path: the parked join survives
    ctx.sleep(0)
    assert parked.error == Errors.NONE and parked["member_id"] == m


# --------------------------------------------------------- property-based
GROUPS = ["g0", "g1"]
CLIENTS = 4  # clients 0-1 are static members, 2-3 dynamic

join_action = st.tuples(st.just("join"), st.integers(0, 1), st.integers(0, CLIENTS - 1),
                        st.sampled_from([("a",), ("a", "b")]))
action = st.one_of(
    join_action, join_action, join_action,
    st.tuples(st.just("settle"), st.integers(0, 1)),
    st.tuples(st.just("sync"), st.integers(0, 1)),
    st.tuples(st.just("heartbeat"), st.integers(0, 1)),
    st.tuples(st.just("leave"), st.integers(0, 1), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("commit"), st.integers(0, 1), st.integers(0, CLIENTS), st.sampled_from(["a", "b", "c"]),
              st.integers(0, 2), st.integers(0, 10**12)),
    st.tuples(st.just("sleep"), st.sampled_from([0, 0, 1000, 5000, 12_000, 40_000])),
    st.tuples(st.just("delete"), st.integers(0, 1)),
    st.tuples(st.just("offset_delete"), st.integers(0, 1), st.sampled_from(["a", "b", "c"])),
)


class ClientModel:
    """What real clients would remember: their member id and generation per group."""

    def __init__(self, ctx: GroupsTestContext) -> None:
        self.ctx = ctx
        self.member: dict[tuple[str, int], str] = {}
        self.generation: dict[tuple[str, int], int] = {}
        self.pending: list[tuple[tuple[str, int], Response]] = []
        self.all: list[Response] = []

    def track(self, key: tuple[str, int], resp: Response) -> None:
        self.pending.append((key, resp))
        self.all.append(resp)

    def absorb(self) -> None:
        still = []
        for key, resp in self.pending:
            if not resp.done:
                still.append((key, resp))
                continue
            v = resp.value
            if "generation_id" in v and v["error_code"] in (0, Errors.MEMBER_ID_REQUIRED) and v["member_id"]:
                self.member[key] = v["member_id"]
                if v["error_code"] == 0:
                    self.generation[key] = v["generation_id"]
            elif v.get("error_code") in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                self.member.pop(key, None)
        self.pending = still

    def instance(self, client: int) -> str | None:
        return f"pod-{client}" if client < 2 else None


def run(ctx: GroupsTestContext, model: ClientModel, step: tuple[Any, ...]) -> None:
    kind = step[0]
    model.absorb()
    if kind == "sleep":
        ctx.sleep(step[1])
    elif kind == "join":
        _, gi, c, topics = step
        key = (GROUPS[gi], c)
        resp = ctx.join(GROUPS[gi], model.member.get(key, ""), instance_id=model.instance(c), client_id=f"c{c}",
                        topics=topics)
        model.track(key, resp)
    elif kind == "settle":  # every client that knows its member id rejoins, then all sync
        g = GROUPS[step[1]]
        for (gg, c), m in list(model.member.items()):
            if gg == g:
                model.track((g, c), ctx.join(g, m, instance_id=model.instance(c), client_id=f"c{c}"))
        ctx.sleep(0)
        run(ctx, model, ("sync", step[1]))
        run(ctx, model, ("sync", step[1]))
    elif kind in ("sync", "heartbeat"):
        g = GROUPS[step[1]]
        known = {c: m for (gg, c), m in model.member.items() if gg == g}
        for c, m in known.items():
            gen = model.generation.get((g, c), -1)
            if kind == "sync":
                assignments = [{"member_id": x, "assignment": x.encode()} for x in known.values()]
                model.track((g, c), ctx.sync(g, m, gen, instance_id=model.instance(c), assignments=assignments))
            else:
                model.track((g, c), ctx.heartbeat(g, m, gen, instance_id=model.instance(c)))
    elif kind == "leave":
        _, gi, c = step
        key = (GROUPS[gi], c)
        model.track(key, ctx.leave(GROUPS[gi], (model.member.get(key, ""), model.instance(c))))
    elif kind == "commit":
        _, gi, c, topic, part, offset = step
        g = GROUPS[gi]
        if c == CLIENTS:  # admin-style commit
            ctx.commit(g, {topic: {part: offset}})
        else:
            ctx.commit(g, {topic: {part: offset}}, member_id=model.member.get((g, c), ""),
                       generation=model.generation.get((g, c), -1), instance_id=model.instance(c))
    elif kind == "delete":
        ctx.call("delete_group", {"group_id": GROUPS[step[1]]})
    elif kind == "offset_delete":
        _, gi, topic = step
        ctx.call("offset_delete", {"group_id": GROUPS[gi], "topics": [
            {"name": topic, "partitions": [{"partition_index": p} for p in range(3)]}]})


def bootstrap(ctx: GroupsTestContext, model: ClientModel, gi: int, n: int) -> None:
    """Bring clients 0..n-1 into group ``gi`` and through one rebalance."""
    for c in range(n):
        run(ctx, model, ("join", gi, c, ("a",)))
        if model.instance(c) is None:
            run(ctx, model, ("join", gi, c, ("a",)))  # rejoin with the id from MEMBER_ID_REQUIRED
    ctx.sleep(0)
    run(ctx, model, ("sync", gi))
    run(ctx, model, ("sync", gi))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(st.integers(0, CLIENTS), st.integers(0, CLIENTS)), st.lists(action, min_size=1, max_size=60))
def test_random_histories_recover_and_answer_every_request(
    initial: tuple[int, int], steps: list[tuple[Any, ...]],
) -> None:
    ctx = GroupsTestContext()
    model = ClientModel(ctx)
    for gi, n in enumerate(initial):
        bootstrap(ctx, model, gi, n)
    for step in steps:
        run(ctx, model, step)
        stats = ctx.coord.group_stats()
        assert stats["offsets"] == len(durable_view(ctx.coord)[1])
        for g in ctx.coord.groups.values():
            assert g.num_awaiting_join == sum(m.awaiting_join is not None for m in g.members.values())
            assert set(g.static_members.values()) <= set(g.members)
    assert_recovers(ctx)
    ctx.sleep(3 * 3600 * 1000)  # far beyond every session, rebalance and join timeout
    assert all(r.done for r in model.all), "a request was parked forever"
    assert all(g.state.value in DURABLE_STATES for g in ctx.coord.groups.values())
    assert_recovers(ctx)


def test_fresh_coordinator_without_on_loaded_finishes_loading_on_first_request() -> None:
    timer = FakeTimer(GroupsTestContext())
    coord = GroupCoordinator(GroupConfig(), timer)
    resp = Response()
    coord.offset_fetch("o", {"group_id": "g", "topics": None}, 0, resp)
    assert resp.value == {"group_id": "g", "error_code": 0, "topics": []}
    assert coord.loading is False


def test_a_wal_loaded_into_a_live_coordinator_rebuilds_its_groups() -> None:
    # partition B's WAL is replayed while group "a" of partition A is mid-rebalance
    other = GroupsTestContext()
    x, y = other.stable_group("b", n=2)
    other.commit("b", {"t": {0: 3}}, generation=1, member_id=x)
    other.leave("b", (y, None))
    other.join("b", x)  # completes at once: x is the only member
    other.sync("b", x, 2, assignments=[{"member_id": x, "assignment": b"all"}])
    ctx = GroupsTestContext()
    a1, a2 = ctx.stable_group("a", n=2)
    parked = ctx.join("a", a1)
    for record in other.log:
        ctx.coord.replay(roundtrip(record))
    ctx.coord.on_loaded(ctx.now)
    b = ctx.group("b")
    assert b.generation_id == 2 and set(b.members) == {x} and b.members[x].assignment == b"all"
    assert committed(ctx.fetch("b", {"t": [0]})) == {("t", 0): 3}
    assert not parked.done and ctx.state("a") == "PreparingRebalance"
    ctx.join("a", a2)
    assert parked["generation_id"] == 2


def test_an_offsets_own_retention_survives_replay_and_compaction() -> None:
    ctx = GroupsTestContext()
    ctx.commit("g", {"t": {0: 1, 1: 2}}, version=2, retention_time=3_600_000)
    ctx.commit("g", {"t": {1: 3}}, version=2)  # committed again without one: the default applies
    fresh = assert_recovers(ctx)
    assert fresh.coord.offsets.expire_ts(ctx.org, "g", "t", 0) == ctx.now + 3_600_000
    assert fresh.coord.offsets.expire_ts(ctx.org, "g", "t", 1) is None


def test_a_shards_recovery_from_its_wal_rebuilds_what_replay_built(tmp_path: Path) -> None:
    """``ShardState.recover`` replays the log's commits from their decoded fields, the other
    records as Records: the state equals the live one (commits dense and sparse, with and without
    their own retention, deleted, and groups)."""
    ctx = GroupsTestContext()
    x, _ = ctx.stable_group("g", n=2)
    ctx.commit("g", {"t": {0: 1, 1: 2, 7: 9}, "u": {3: 4}}, generation=1, member_id=x)
    ctx.commit("simple", {"t": {0: 5, 1: 6}}, version=2, retention_time=3_600_000)
    ctx.commit("simple", {"t": {1: 7}}, version=2)
    ctx.call("offset_delete", {"group_id": "simple", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]})
    fresh = recovered_from_wal(ctx.log, tmp_path)
    fresh.coord.on_loaded(ctx.now)
    assert durable_view(fresh.coord) == durable_view(ctx.coord)
    assert fresh.coord.offsets.get(ctx.org, "simple", "t", 0) is None
    assert fresh.coord.offsets.expire_ts(ctx.org, "simple", "t", 1) is None


def test_recovery_replays_commits_through_a_replayer_registered_in_place_of_the_coordinators(tmp_path: Path) -> None:
    """Live writes and recovery share one replay path, also for commits (which recovery gives the
    coordinator's field replayer unless another replayer was registered for them)."""
    seen: list[Record] = []
    record = Record(RecordType.OFFSET_COMMIT, ("o", "g", "t", 0), pack_entry(5, -1, "", 1))
    for replayed in ("live", "recovered"):
        state = ShardState(0, GroupsTestContext().coord, wal=Wal(tmp_path, set(range(4)), 4, fsync="never"))
        state.register_replay(RecordType.OFFSET_COMMIT, seen.append)
        if replayed == "live":
            state.append([record])
        else:
            list(state.recover())
        state.close()
    assert seen == [record, record]


_commit_histories = st.lists(st.one_of(
    # a run of consecutive partitions of one group's topic, as a compacted WAL writes them
    st.tuples(st.just("run"), st.sampled_from("gh"), st.sampled_from("tu"), st.integers(0, 70), st.integers(1, 40)),
    st.tuples(st.just("tombstone"), st.sampled_from("gh"), st.sampled_from("tu"), st.integers(0, 110)),
    st.tuples(st.just("own retention"), st.sampled_from("gh"), st.sampled_from("tu"), st.integers(0, 110)),
    st.tuples(st.just("group tombstone"), st.sampled_from("gh")),
    st.tuples(st.just("malformed key"), st.sampled_from([("o", "g"), ("o", "g", "t"), ("o", "g", "t", 1, 2)])),
    st.tuples(st.just("malformed value"), st.sampled_from("tu"), st.integers(0, 110), st.sampled_from([7, "x", (1, 2, 3)])),
), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=_commit_histories)
@example(history=[("run", "g", "t", 0, 10), ("tombstone", "g", "t", 5), ("run", "g", "t", 3, 10)])
def test_recovery_of_any_commit_history_equals_replaying_it_one_record_at_a_time(tmp_path: Path, history: Any) -> None:
    """Recovery stores runs of consecutive partitions at once; whatever surrounds or breaks a run
    (tombstones, offsets with their own retention, a group deleted, records that cannot be replayed,
    the 10,000-record progress steps) it ends with the state the live path's ``replay`` builds."""
    records: list[Record] = []
    for step in history:
        kind = step[0]
        if kind == "run":
            _, group, topic, first, count = step
            records += [_commit(group, topic, p, _entry(p * 10 + len(records))) for p in range(first, first + count)]
        elif kind == "tombstone":
            records.append(_commit(step[1], step[2], step[3], None))
        elif kind == "own retention":
            records.append(_commit(step[1], step[2], step[3], (_entry(len(records), 0, "m"), TS + 60_000)))
        elif kind == "group tombstone":
            records.append(Record(RecordType.GROUP_METADATA, ("o", step[1]), None))
        elif kind == "malformed key":
            records.append(Record(RecordType.OFFSET_COMMIT, step[1], _entry(1)))
        else:
            records.append(_commit("g", step[1], step[2], step[3]))
    assert_recovery_equals_replay(records, tmp_path / str(len(list(tmp_path.iterdir()))))


def test_a_run_of_commits_longer_than_a_progress_step_is_recovered_whole(tmp_path: Path) -> None:
    """A topic's 25,000 partitions in order, with a record that cannot be replayed amid them."""
    records = [_commit("g", "t", p, _entry(p)) for p in range(25_000)]
    records[12_345] = _commit("g", "t", 12_345, 7)
    assert_recovery_equals_replay(records, tmp_path)


def assert_recovery_equals_replay(records: list[Record], data_dir: Path) -> None:
    """``records`` recovered from a real WAL give the state their replay on the live path gives
    (where that raises, recovery skips the record)."""
    live = GroupsTestContext()
    for record in records:
        with contextlib.suppress(Exception):  # recovery skips it with a log line
            live.coord.replay(roundtrip(record))
    fresh = recovered_from_wal(records, data_dir)
    assert durable_view(fresh.coord) == durable_view(live.coord)
    assert fresh.coord.offsets.count == live.coord.offsets.count


def test_a_commit_whose_partition_is_not_an_int_starts_no_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A float partition (never written by rafka) is replayed as the live path replays it, and
    the commits after it too: nothing fails, nothing is skipped or replayed twice."""
    records = [_commit("g", "t", 0.0, _entry(1)), *(_commit("g", "t", p, _entry(p)) for p in range(1, 50))]
    assert_recovery_equals_replay(records, tmp_path)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def recovered_from_wal(records: list[Record], data_dir: Path) -> GroupsTestContext:
    """A fresh coordinator that recovered ``records`` from a real WAL through ``ShardState.recover``
    (whose progress counts every record)."""
    wal = Wal(data_dir, {0}, 1, fsync="never")
    wal.append(records)
    wal.close()
    fresh = GroupsTestContext()
    state = ShardState(0, fresh.coord, wal=Wal(data_dir, {0}, 1, fsync="never"))
    assert list(state.recover())[-1] == len(records)
    state.close()
    return fresh


def _commit(group: str, topic: Any, partition: Any, value: Any) -> Record:
    return Record(RecordType.OFFSET_COMMIT, ("o", group, topic, partition), value)


def _entry(offset: int, leader_epoch: int = -1, metadata: str = "") -> bytes:
    return pack_entry(offset, leader_epoch, metadata, TS)
