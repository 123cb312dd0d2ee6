"""JoinGroup and the join phase, as a client sees them."""

from __future__ import annotations

from rafka.shard.groups import Errors
from rafka.shard.groups.classic import java_hash_order
from rafka.shard.records import RecordType
from tests.shard.test_groups_context import GroupsTestContext, meta


def test_empty_group_id_is_invalid() -> None:
    ctx = GroupsTestContext()
    resp = ctx.join("", "")
    assert resp.error == Errors.INVALID_GROUP_ID
    assert ctx.log == [] and ctx.coord.groups == {}


def test_session_timeout_outside_bounds_is_invalid() -> None:
    ctx = GroupsTestContext(min_session_timeout_ms=6000, max_session_timeout_ms=300_000)
    assert ctx.join("g", session=5999).error == Errors.INVALID_SESSION_TIMEOUT
    assert ctx.join("g", session=300_001).error == Errors.INVALID_SESSION_TIMEOUT
    assert ctx.join("g", session=6000).error == Errors.MEMBER_ID_REQUIRED


def test_v4_dynamic_member_gets_member_id_required_then_joins_with_it() -> None:
    ctx = GroupsTestContext()
    first = ctx.join("g", "", client_id="app", version=4)
    assert first.error == Errors.MEMBER_ID_REQUIRED
    assert first["member_id"] == "app-uuid1"
    # the group exists (Empty) and is durable with its cgp_ id, but has no member yet
    assert ctx.state("g") == "Empty"
    assert [r.type for r in ctx.last_records] == [RecordType.GROUP_METADATA]
    assert ctx.last_records[0].value["uid"].startswith("cgp_")
    second = ctx.join("g", "app-uuid1", client_id="app", version=4)
    assert not second.done  # parked until the join phase completes
    ctx.sleep(0)
    assert second.error == Errors.NONE
    assert second["member_id"] == "app-uuid1" and second["leader"] == "app-uuid1"
    assert second["generation_id"] == 1 and second["protocol_name"] == "range"
    assert second["protocol_type"] == "consumer" and second["skip_assignment"] is False
    assert second["members"] == [{"member_id": "app-uuid1", "group_instance_id": None, "metadata": meta("t")}]
    assert ctx.state("g") == "CompletingRebalance"


def test_pending_member_id_expires_after_session_timeout() -> None:
    ctx = GroupsTestContext()
    first = ctx.join("g", "", session=10_000)
    ctx.sleep(10_000)
    late = ctx.join("g", first["member_id"], session=10_000)
    assert late.error == Errors.UNKNOWN_MEMBER_ID


def test_pre_v4_member_joins_without_member_id_required() -> None:
    ctx = GroupsTestContext()
    resp = ctx.join("g", "", client_id="old", version=3)
    assert not resp.done
    ctx.sleep(0)
    assert resp.error == Errors.NONE and resp["member_id"] == "old-uuid1" and resp["generation_id"] == 1


def test_v0_join_uses_the_session_timeout_as_rebalance_timeout() -> None:
    ctx = GroupsTestContext()
    resp = ctx.join("g", "", version=0, session=7000, rebalance=None)
    ctx.sleep(0)
    member = ctx.group("g").members[resp["member_id"]]
    assert member.rebalance_timeout_ms == 7000


def test_known_member_id_for_unknown_group_is_unknown_member() -> None:
    ctx = GroupsTestContext()
    resp = ctx.join("nope", "client-123")
    assert resp.error == Errors.UNKNOWN_MEMBER_ID and resp["member_id"] == "client-123"
    assert ctx.coord.groups == {}


def test_known_member_id_for_empty_group_is_unknown_member() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g")
    ctx.leave("g", (m, None))
    assert ctx.state("g") == "Empty"
    assert ctx.join("g", m).error == Errors.UNKNOWN_MEMBER_ID


def test_protocol_type_must_match_and_be_non_empty() -> None:
    ctx = GroupsTestContext()
    assert ctx.join("g", "", protocol_type="").error == Errors.INCONSISTENT_GROUP_PROTOCOL
    ctx.stable_group("h")
    assert ctx.join("h", "", protocol_type="connect").error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert ctx.join("h", "", protocols=[]).error == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_a_common_protocol_must_exist() -> None:
    ctx = GroupsTestContext()
    ctx.stable_group("g")  # range + cooperative-sticky
    resp = ctx.join("g", "", protocols=[("roundrobin", meta("t"))])
    assert resp.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert ctx.state("g") == "Stable"


def test_protocol_is_chosen_by_vote_among_protocols_all_members_support() -> None:
    ctx = GroupsTestContext()
    a, ra = ctx.join_new_member("g", protocols=[("range", b"1"), ("rr", b"2"), ("sticky", b"3")])
    b, rb = ctx.join_new_member("g", protocols=[("rr", b"4"), ("range", b"5")])
    c, rc = ctx.join_new_member("g", protocols=[("rr", b"6"), ("range", b"7")])
    ctx.sleep(0)
    assert ra["protocol_name"] == rb["protocol_name"] == rc["protocol_name"] == "rr"
    # the leader sees every member's metadata for the chosen protocol
    assert {m["member_id"]: m["metadata"] for m in ra["members"]} == {a: b"2", b: b"4", c: b"6"}
    assert rb["members"] == [] and rc["members"] == []


def test_a_tied_vote_goes_where_kafkas_hashmap_puts_it_whoever_joined_first() -> None:
    # Kafka's ClassicGroup.selectProtocol takes the first maximum of a java.util.HashMap: "range"
    # (bucket 9 of 16) iterates before "roundrobin" (bucket 10)
    for first, second in ((["roundrobin", "range"], ["range", "roundrobin"]),
                          (["range", "roundrobin"], ["roundrobin", "range"])):
        ctx = GroupsTestContext()
        _, r1 = ctx.join_new_member("g", protocols=[(n, b"") for n in first])
        _, r2 = ctx.join_new_member("g", protocols=[(n, b"") for n in second])
        ctx.sleep(0)
        assert r1["protocol_name"] == r2["protocol_name"] == "range"


def test_java_hash_order_is_a_hashmaps_iteration_order() -> None:
    # String.hashCode: "range" 108280125, "roundrobin" -128548644, "sticky" -892259863,
    # "cooperative-sticky" 1843682987; spread and masked to 16 buckets: 9, 10, 8, 15
    assert java_hash_order(["cooperative-sticky", "roundrobin", "range", "sticky"]) == [
        "sticky", "range", "roundrobin", "cooperative-sticky"]
    # "Aa" and "BB" share a hash code (2112): one bucket, insertion order
    assert java_hash_order(["BB", "Aa"]) == ["BB", "Aa"] and java_hash_order(["Aa", "BB"]) == ["Aa", "BB"]
    # 16 keys: 32 buckets (as printed by a java.util.HashMap filled in this order on OpenJDK)
    keys = [f"p{i}" for i in range(13)] + ["zz", "é", "ü-x"]
    assert ",".join(java_hash_order(keys)) == "p0,zz,p1,p2,p3,p4,ü-x,p5,p6,p7,p8,p9,é,p10,p12,p11"


def test_protocol_vote_only_counts_protocols_every_member_supports() -> None:
    ctx = GroupsTestContext()
    _, r1 = ctx.join_new_member("g", protocols=[("a", b""), ("b", b"")])
    _, r2 = ctx.join_new_member("g", protocols=[("b", b"")])
    ctx.sleep(0)
    assert r1["protocol_name"] == r2["protocol_name"] == "b"


def test_zero_initial_delay_completes_on_the_next_tick_with_every_member() -> None:
    ctx = GroupsTestContext(initial_rebalance_delay_ms=0)
    m1, r1 = ctx.join_new_member("g", client_id="a")
    m2, r2 = ctx.join_new_member("g", client_id="b")
    assert not r1.done and not r2.done
    ctx.sleep(0)
    assert r1["leader"] == m1 == r2["leader"]
    assert {m["member_id"] for m in r1["members"]} == {m1, m2}


def test_initial_delay_is_rearmed_while_members_keep_arriving() -> None:
    ctx = GroupsTestContext(initial_rebalance_delay_ms=3000)
    _, r1 = ctx.join_new_member("g", rebalance=60_000)
    ctx.sleep(2999)
    _, r2 = ctx.join_new_member("g", rebalance=60_000)
    ctx.sleep(3000)  # t=5999: the delay was re-armed at t=3000
    assert not r1.done and not r2.done
    ctx.sleep(1)  # t=6000
    assert r1.error == r2.error == Errors.NONE
    assert len(r1["members"]) == 2


def test_initial_delay_is_bounded_by_the_rebalance_timeout() -> None:
    ctx = GroupsTestContext(initial_rebalance_delay_ms=3000)
    start = ctx.now
    _, first = ctx.join_new_member("g", rebalance=10_000)
    while not first.done:
        ctx.sleep(2000)
        if not first.done:
            ctx.join_new_member("g", rebalance=10_000)
    assert ctx.now - start == 10_000
    assert first.error == Errors.NONE and len(first["members"]) == 5


def test_join_phase_completes_when_the_last_known_member_rejoins() -> None:
    ctx = GroupsTestContext()
    leader, follower = ctx.stable_group("g", n=2)
    r1 = ctx.join("g", leader)  # the leader rejoining forces a rebalance
    assert ctx.state("g") == "PreparingRebalance" and not r1.done
    assert ctx.heartbeat("g", follower, 1).error == Errors.REBALANCE_IN_PROGRESS
    r2 = ctx.join("g", follower)
    assert r1.done and r2.done  # no timer needed: everyone is back
    assert r1["generation_id"] == r2["generation_id"] == 2
    assert r1["leader"] == leader and len(r1["members"]) == 2


def test_members_that_do_not_rejoin_are_removed_at_the_rebalance_timeout() -> None:
    ctx = GroupsTestContext()
    leader, follower = ctx.stable_group("g", n=2, rebalance=30_000)
    r1 = ctx.join("g", leader, rebalance=30_000)
    for _ in range(5):  # the follower stays alive but never rejoins
        ctx.sleep(5000)
        assert ctx.heartbeat("g", follower, 1).error == Errors.REBALANCE_IN_PROGRESS
    assert not r1.done
    ctx.sleep(5000)  # t = 30 s
    assert r1.error == Errors.NONE and r1["generation_id"] == 2
    assert [m["member_id"] for m in r1["members"]] == [leader]
    assert ctx.heartbeat("g", follower, 2).error == Errors.UNKNOWN_MEMBER_ID


def test_silent_member_is_removed_at_its_session_timeout_during_a_rebalance() -> None:
    ctx = GroupsTestContext()
    leader, _follower = ctx.stable_group("g", n=2, session=10_000, rebalance=60_000)
    ctx.sleep(9000)
    r1 = ctx.join("g", leader, session=10_000, rebalance=60_000)
    ctx.sleep(999)
    assert not r1.done
    ctx.sleep(1)  # follower's session (armed when it synced) expires: join completes without it
    assert r1.error == Errors.NONE and [m["member_id"] for m in r1["members"]] == [leader]


def test_new_leader_is_elected_when_the_leader_does_not_rejoin() -> None:
    ctx = GroupsTestContext()
    leader, follower = ctx.stable_group("g", n=2)
    _, new = ctx.join_new_member("g", client_id="new")  # triggers a rebalance
    ctx.sleep(1000)
    r2 = ctx.join("g", follower)
    ctx.heartbeat("g", leader, 1)
    ctx.sleep(30_000)
    assert r2["leader"] == follower and new["leader"] == follower
    assert {m["member_id"] for m in r2["members"]} == {follower, new["member_id"]}


def test_group_becomes_empty_with_a_new_generation_when_the_last_member_leaves() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g")
    resp = ctx.leave("g", (m, None))
    assert resp["members"] == [{"member_id": m, "group_instance_id": None, "error_code": 0}]
    group = ctx.group("g")
    assert group.state.value == "Empty" and group.generation_id == 2 and group.leader_id is None
    [record] = ctx.last_records
    assert record.type == RecordType.GROUP_METADATA and record.value["members"] == []
    assert record.value["generation"] == 2 and record.value["uid"] == group.uid


def test_group_max_size_rejects_extra_members() -> None:
    ctx = GroupsTestContext(max_size=2)
    ctx.join_new_member("g", client_id="a")
    ctx.join_new_member("g", client_id="b")
    third = ctx.join("g", "", client_id="c")
    assert third.error == Errors.GROUP_MAX_SIZE_REACHED and third["member_id"] == ""
    ctx.sleep(0)
    assert len(ctx.group("g").members) == 2


def test_group_max_size_applies_to_a_stable_group() -> None:
    ctx = GroupsTestContext(max_size=1)
    [m] = ctx.stable_group("g")
    assert ctx.join("g", "").error == Errors.GROUP_MAX_SIZE_REACHED
    assert ctx.join("g", m).error == Errors.NONE  # an existing member is still accepted


def test_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation() -> None:
    ctx = GroupsTestContext()
    leader, follower = ctx.stable_group("g", n=2)
    resp = ctx.join("g", follower)
    assert resp.error == Errors.NONE and resp["generation_id"] == 1
    assert resp["leader"] == leader and resp["members"] == []
    assert ctx.state("g") == "Stable"


def test_follower_rejoining_with_new_metadata_triggers_a_rebalance() -> None:
    ctx = GroupsTestContext()
    leader, follower = ctx.stable_group("g", n=2)
    resp = ctx.join("g", follower, topics=("t", "u"))
    assert not resp.done and ctx.state("g") == "PreparingRebalance"
    ctx.join("g", leader)
    assert resp["generation_id"] == 2


def test_new_member_joining_a_stable_group_triggers_a_rebalance() -> None:
    ctx = GroupsTestContext()
    [m1] = ctx.stable_group("g")
    m2, r2 = ctx.join_new_member("g", client_id="second")
    assert ctx.state("g") == "PreparingRebalance"
    assert ctx.heartbeat("g", m1, 1).error == Errors.REBALANCE_IN_PROGRESS
    r1 = ctx.join("g", m1)
    assert r1["generation_id"] == r2["generation_id"] == 2 and r1["leader"] == m1
    assert {m["member_id"] for m in r1["members"]} == {m1, m2}


def test_rejoin_in_completing_rebalance_with_same_metadata_repeats_the_join_response() -> None:
    ctx = GroupsTestContext()
    _, r = ctx.join_new_member("g")
    ctx.sleep(0)
    again = ctx.join("g", r["member_id"])
    assert again.error == Errors.NONE and again["generation_id"] == 1
    assert again["members"] == r["members"]  # the leader gets the member list again
    assert ctx.state("g") == "CompletingRebalance"


def test_rejoin_in_completing_rebalance_with_new_metadata_rebalances_and_fails_parked_syncs() -> None:
    ctx = GroupsTestContext()
    _a, _ra = ctx.join_new_member("g", client_id="a")
    b, _rb = ctx.join_new_member("g", client_id="b")
    ctx.sleep(0)
    parked = ctx.sync("g", b, 1)
    assert not parked.done
    again = ctx.join("g", b, topics=("other",))
    assert parked.error == Errors.REBALANCE_IN_PROGRESS and parked["assignment"] == b""
    assert ctx.state("g") == "PreparingRebalance" and not again.done


def test_a_second_parked_join_supersedes_the_first() -> None:
    ctx = GroupsTestContext()
    leader, follower = ctx.stable_group("g", n=2)
    first = ctx.join("g", leader)
    second = ctx.join("g", leader)
    assert first.error == Errors.REBALANCE_IN_PROGRESS and not second.done
    ctx.join("g", follower)
    assert second.error == Errors.NONE


def test_new_member_parked_too_long_is_expired_with_unknown_member_id() -> None:
    ctx = GroupsTestContext(new_member_join_timeout_ms=300_000)
    [old] = ctx.stable_group("g", rebalance=600_000, session=30_000)
    _, new = ctx.join_new_member("g", client_id="new", rebalance=600_000, session=30_000)
    for _ in range(10):  # the old member keeps heartbeating but never rejoins
        ctx.sleep(29_999)
        ctx.heartbeat("g", old, 1)
    ctx.sleep(10)
    assert new.error == Errors.UNKNOWN_MEMBER_ID and new["member_id"] == ""
    assert ctx.state("g") == "PreparingRebalance"


def test_group_uid_is_kept_across_leave_and_rejoin() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g")
    uid = ctx.group("g").uid
    ctx.leave("g", (m, None))
    ctx.stable_group("g")
    assert ctx.group("g").uid == uid and ctx.group("g").generation_id == 3
