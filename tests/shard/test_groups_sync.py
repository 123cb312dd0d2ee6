"""SyncGroup, Heartbeat, LeaveGroup and session expiry, as a client sees them."""

from __future__ import annotations

from rafka.shard.groups import Errors
from rafka.shard.records import RecordType
from tests.shard.test_groups_context import GroupsTestContext


def _completing(ctx: GroupsTestContext, n: int = 2) -> list[str]:
    """A group whose join phase just completed (CompletingRebalance); leader first."""
    ids, resps = [], []
    for i in range(n):
        m, r = ctx.join_new_member("g", client_id=f"c{i}")
        ids.append(m)
        resps.append(r)
    ctx.sleep(0)
    assert ctx.state("g") == "CompletingRebalance"
    return ids


# ---------------------------------------------------------------- SyncGroup
def test_sync_errors_for_unknown_group_member_and_empty_group_id() -> None:
    ctx = GroupsTestContext()
    assert ctx.sync("", "m", 1).error == Errors.INVALID_GROUP_ID
    assert ctx.sync("nope", "m", 1).error == Errors.UNKNOWN_MEMBER_ID
    ctx.stable_group("g")
    assert ctx.sync("g", "stranger", 1).error == Errors.UNKNOWN_MEMBER_ID


def test_sync_to_an_empty_group_is_unknown_member() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g")
    ctx.leave("g", (m, None))
    assert ctx.sync("g", m, 2).error == Errors.UNKNOWN_MEMBER_ID


def test_sync_with_wrong_generation_is_illegal_generation() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g")
    resp = ctx.sync("g", m, 7)
    assert resp.error == Errors.ILLEGAL_GENERATION and resp["assignment"] == b""


def test_sync_v5_protocol_type_or_name_mismatch_is_inconsistent() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g")
    assert ctx.sync("g", m, 1, protocol_type="connect").error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert ctx.sync("g", m, 1, protocol_name="roundrobin").error == Errors.INCONSISTENT_GROUP_PROTOCOL
    ok = ctx.sync("g", m, 1, protocol_type="consumer", protocol_name="range")
    assert ok.error == Errors.NONE and ok["protocol_name"] == "range" and ok["protocol_type"] == "consumer"


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    ctx = GroupsTestContext()
    leader, follower = ctx.stable_group("g", n=2)
    ctx.join("g", leader)
    assert ctx.sync("g", follower, 1).error == Errors.REBALANCE_IN_PROGRESS


def test_followers_are_parked_until_the_leader_syncs() -> None:
    ctx = GroupsTestContext()
    leader, f1, f2 = _completing(ctx, 3)
    s1 = ctx.sync("g", f1, 1)
    s2 = ctx.sync("g", f2, 1)
    assert not s1.done and not s2.done and ctx.log[-1].type == RecordType.GROUP_METADATA
    records_before = len(ctx.log)
    sl = ctx.sync("g", leader, 1, assignments=[
        {"member_id": leader, "assignment": b"L"}, {"member_id": f1, "assignment": b"F1"}])
    assert sl["assignment"] == b"L" and s1["assignment"] == b"F1"
    assert s2.error == Errors.NONE and s2["assignment"] == b""  # left out by the leader
    assert s1["protocol_name"] == "range" and s1["protocol_type"] == "consumer"
    assert ctx.state("g") == "Stable"
    [record] = ctx.log[records_before:]
    assert record.type == RecordType.GROUP_METADATA and record.key == ("org-a", "g")
    value = record.value
    assert value["generation"] == 1 and value["leader"] == leader and value["protocol"] == "range"
    assert {m["member_id"]: m["assignment"] for m in value["members"]} == {leader: b"L", f1: b"F1", f2: b""}
    assert value["protocol_type"] == "consumer" and value["uid"] == ctx.group("g").uid


def test_sync_in_stable_returns_the_members_current_assignment() -> None:
    ctx = GroupsTestContext()
    _leader, follower = ctx.stable_group("g", n=2)
    resp = ctx.sync("g", follower, 1)
    assert resp.error == Errors.NONE and resp["assignment"] == follower.encode()
    assert ctx.last_records == []


def test_a_second_parked_sync_supersedes_the_first() -> None:
    ctx = GroupsTestContext()
    leader, follower = _completing(ctx)
    first = ctx.sync("g", follower, 1)
    second = ctx.sync("g", follower, 1)
    assert first.error == Errors.REBALANCE_IN_PROGRESS and not second.done
    ctx.sync("g", leader, 1, assignments=[{"member_id": follower, "assignment": b"x"}])
    assert second["assignment"] == b"x"


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    ctx = GroupsTestContext()
    leader, follower = _completing(ctx)
    ctx.sync("g", leader, 1, assignments=[])
    assert ctx.state("g") == "Stable"
    for _ in range(6):  # both heartbeat; the follower never syncs
        ctx.sleep(5000)
        assert ctx.heartbeat("g", leader, 1).error in (Errors.NONE, Errors.REBALANCE_IN_PROGRESS)
        assert ctx.heartbeat("g", follower, 1).error in (Errors.NONE, Errors.UNKNOWN_MEMBER_ID)
    # 30 s rebalance timeout: the follower is dropped and the group rebalances
    assert ctx.state("g") == "PreparingRebalance"
    assert ctx.heartbeat("g", follower, 1).error == Errors.UNKNOWN_MEMBER_ID
    assert ctx.heartbeat("g", leader, 1).error == Errors.REBALANCE_IN_PROGRESS


# ---------------------------------------------------------------- Heartbeat
def test_heartbeat_errors() -> None:
    ctx = GroupsTestContext()
    assert ctx.heartbeat("", "m", 1).error == Errors.INVALID_GROUP_ID
    assert ctx.heartbeat("nope", "m", 1).error == Errors.UNKNOWN_MEMBER_ID
    [m] = ctx.stable_group("g")
    assert ctx.heartbeat("g", "stranger", 1).error == Errors.UNKNOWN_MEMBER_ID
    assert ctx.heartbeat("g", m, 0).error == Errors.ILLEGAL_GENERATION
    assert ctx.heartbeat("g", m, 1).error == Errors.NONE


def test_heartbeat_succeeds_in_completing_rebalance() -> None:
    ctx = GroupsTestContext()
    leader, _ = _completing(ctx)
    assert ctx.heartbeat("g", leader, 1).error == Errors.NONE


def test_heartbeats_keep_a_member_alive_and_silence_removes_it() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g", session=10_000)
    for _ in range(12):
        ctx.sleep(9_000)
        assert ctx.heartbeat("g", m, 1).error == Errors.NONE
    ctx.sleep(9_999)
    assert ctx.state("g") == "Stable"
    records = ctx.sleep(1)
    # the last member expired: the group is Empty with a new generation, durably
    assert ctx.state("g") == "Empty" and ctx.group("g").generation_id == 2
    assert [r.type for r in records] == [RecordType.GROUP_METADATA] and records[0].value["members"] == []
    assert ctx.heartbeat("g", m, 2).error == Errors.UNKNOWN_MEMBER_ID


def test_expired_member_triggers_a_rebalance_of_the_others() -> None:
    ctx = GroupsTestContext()
    a, _b = ctx.stable_group("g", n=2, session=10_000)
    for _ in range(3):
        ctx.sleep(4000)
        ctx.heartbeat("g", a, 1)
    assert ctx.state("g") == "PreparingRebalance"  # b expired at 10 s
    assert ctx.heartbeat("g", a, 1).error == Errors.REBALANCE_IN_PROGRESS
    r = ctx.join("g", a)
    assert r["generation_id"] == 2 and [m["member_id"] for m in r["members"]] == [a]


def test_member_parked_in_sync_is_not_expired_by_its_session() -> None:
    ctx = GroupsTestContext()
    leader, follower = _completing(ctx)
    parked = ctx.sync("g", follower, 1)
    for _ in range(5):  # 25 s > session timeout (10 s), < rebalance timeout (30 s)
        ctx.sleep(5000)
        assert ctx.heartbeat("g", leader, 1).error == Errors.NONE
    assert ctx.group("g").members.get(follower) is not None and not parked.done
    ctx.sync("g", leader, 1, assignments=[{"member_id": follower, "assignment": b"f"}])
    assert parked["assignment"] == b"f"


# ---------------------------------------------------------------- LeaveGroup
def test_leave_errors() -> None:
    ctx = GroupsTestContext()
    assert ctx.leave("", ("m", None)).error == Errors.INVALID_GROUP_ID
    resp = ctx.leave("nope", ("m", None))
    assert resp.error == Errors.NONE
    assert resp["members"] == [{"member_id": "m", "group_instance_id": None, "error_code": Errors.UNKNOWN_MEMBER_ID}]
    ctx.stable_group("g")
    assert ctx.leave("g", ("stranger", None))["members"][0]["error_code"] == Errors.UNKNOWN_MEMBER_ID
    assert ctx.leave("g", ("", None))["members"][0]["error_code"] == Errors.UNKNOWN_MEMBER_ID
    assert ctx.state("g") == "Stable"


def test_leave_of_one_member_rebalances_the_rest() -> None:
    ctx = GroupsTestContext()
    a, b = ctx.stable_group("g", n=2)
    assert ctx.leave("g", (b, None), version=1)["members"][0]["error_code"] == Errors.NONE
    assert ctx.state("g") == "PreparingRebalance"
    r = ctx.join("g", a)  # everyone left is back: completes immediately
    assert r["generation_id"] == 2 and len(r["members"]) == 1


def test_batch_leave_reports_per_member_errors() -> None:
    ctx = GroupsTestContext()
    a, b, c = ctx.stable_group("g", n=3)
    resp = ctx.leave("g", (a, None), ("ghost", None), (c, None))
    assert [m["error_code"] for m in resp["members"]] == [0, Errors.UNKNOWN_MEMBER_ID, 0]
    assert set(ctx.group("g").members) == {b}


def test_leave_answers_a_parked_join_with_unknown_member() -> None:
    ctx = GroupsTestContext()
    a, b = ctx.stable_group("g", n=2)
    parked = ctx.join("g", a)
    ctx.leave("g", (a, None))
    assert parked.error == Errors.UNKNOWN_MEMBER_ID
    # the leaver was the only one missing from the others' view: b rejoins and completes
    r = ctx.join("g", b)
    assert r["leader"] == b and r["generation_id"] == 2


def test_leave_during_preparing_rebalance_completes_the_join_phase() -> None:
    ctx = GroupsTestContext()
    a, b = ctx.stable_group("g", n=2)
    ra = ctx.join("g", a)
    ctx.leave("g", (b, None))
    assert ra.error == Errors.NONE and [m["member_id"] for m in ra["members"]] == [a]


def test_leave_of_a_pending_member_is_accepted() -> None:
    ctx = GroupsTestContext()
    first = ctx.join("g", "")
    resp = ctx.leave("g", (first["member_id"], None))
    assert resp["members"][0]["error_code"] == Errors.NONE
    assert ctx.join("g", first["member_id"]).error == Errors.UNKNOWN_MEMBER_ID
