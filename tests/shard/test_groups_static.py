"""Static membership (KIP-345): group.instance.id, replacement and fencing."""

from __future__ import annotations

from rafka.shard.groups import Errors
from rafka.shard.records import RecordType
from tests.shard.test_groups_context import GroupsTestContext


def _static_stable(ctx: GroupsTestContext, *instances: str, version: int = 5) -> dict[str, str]:
    """A Stable group of static members; returns instance id -> member id (first is leader)."""
    resps = {iid: ctx.join("g", "", instance_id=iid, version=version) for iid in instances}
    ctx.sleep(0)
    ids = {iid: r["member_id"] for iid, r in resps.items()}
    leader = resps[instances[0]]["leader"]
    assert leader == ids[instances[0]]
    for iid in reversed(instances):
        m = ids[iid]
        ctx.sync("g", m, 1, instance_id=iid,
                 assignments=[{"member_id": x, "assignment": k.encode()} for k, x in ids.items()] if m == leader else [])
    assert ctx.state("g") == "Stable"
    return ids


def test_static_member_joins_without_member_id_required_and_id_prefixed_by_instance() -> None:
    ctx = GroupsTestContext()
    resp = ctx.join("g", "", instance_id="pod-1", version=5)
    ctx.sleep(0)
    assert resp.error == Errors.NONE and resp["member_id"] == "pod-1-uuid1"
    assert resp["members"] == [{"member_id": "pod-1-uuid1", "group_instance_id": "pod-1",
                                "metadata": resp["members"][0]["metadata"]}]


def test_restarted_static_member_gets_its_assignment_back_without_rebalance() -> None:
    ctx = GroupsTestContext()
    ids = _static_stable(ctx, "pod-1", "pod-2")
    old = ids["pod-2"]
    rejoin = ctx.join("g", "", instance_id="pod-2", version=5)
    new = rejoin["member_id"]
    assert rejoin.error == Errors.NONE and new != old
    assert rejoin["generation_id"] == 1 and rejoin["leader"] == ids["pod-1"] and rejoin["members"] == []
    assert ctx.state("g") == "Stable"
    # the replacement is durable
    [record] = ctx.last_records
    assert record.type == RecordType.GROUP_METADATA
    assert {m["member_id"] for m in record.value["members"]} == {ids["pod-1"], new}
    sync = ctx.sync("g", new, 1, instance_id="pod-2")
    assert sync.error == Errors.NONE and sync["assignment"] == b"pod-2"
    # the old incarnation is fenced wherever it shows up with the instance id
    assert ctx.heartbeat("g", old, 1, instance_id="pod-2").error == Errors.FENCED_INSTANCE_ID
    assert ctx.sync("g", old, 1, instance_id="pod-2").error == Errors.FENCED_INSTANCE_ID
    assert ctx.commit("g", {"t": {0: 1}}, generation=1, member_id=old, instance_id="pod-2")["topics"][0][
        "partitions"][0]["error_code"] == Errors.FENCED_INSTANCE_ID
    assert ctx.heartbeat("g", old, 1).error == Errors.UNKNOWN_MEMBER_ID


def test_restarted_static_leader_keeps_the_old_leader_id_before_v9() -> None:
    ctx = GroupsTestContext()
    ids = _static_stable(ctx, "pod-1", "pod-2")
    rejoin = ctx.join("g", "", instance_id="pod-1", version=8)
    assert rejoin["leader"] == ids["pod-1"] != rejoin["member_id"]  # so it does not reassign
    assert rejoin["skip_assignment"] is False and rejoin["members"] == []
    assert ctx.group("g").leader_id == rejoin["member_id"]


def test_restarted_static_leader_gets_members_and_skip_assignment_on_v9() -> None:
    ctx = GroupsTestContext()
    _static_stable(ctx, "pod-1", "pod-2", version=9)
    rejoin = ctx.join("g", "", instance_id="pod-1", version=9)
    assert rejoin["leader"] == rejoin["member_id"] and rejoin["skip_assignment"] is True
    assert len(rejoin["members"]) == 2


def test_static_rejoin_that_changes_the_selected_protocol_rebalances() -> None:
    ctx = GroupsTestContext()
    _static_stable(ctx, "pod-1")
    rejoin = ctx.join("g", "", instance_id="pod-1", protocols=[("cooperative-sticky", b"")])
    # the only member is back with its join: the rebalance completes at once
    assert rejoin.error == Errors.NONE and rejoin["protocol_name"] == "cooperative-sticky"
    assert rejoin["generation_id"] == 2 and ctx.state("g") == "CompletingRebalance"


def test_static_rejoin_during_completing_rebalance_rebalances() -> None:
    ctx = GroupsTestContext()
    r1 = ctx.join("g", "", instance_id="pod-1")
    r2 = ctx.join("g", "", instance_id="pod-2")
    ctx.sleep(0)
    parked = ctx.sync("g", r2["member_id"], 1, instance_id="pod-2")
    again = ctx.join("g", "", instance_id="pod-2")
    assert parked.error == Errors.FENCED_INSTANCE_ID  # the old incarnation's parked sync
    assert ctx.state("g") == "PreparingRebalance" and not again.done
    ctx.join("g", r1["member_id"], instance_id="pod-1")
    assert again["generation_id"] == 2 and again["member_id"] != r2["member_id"]


def test_old_incarnation_parked_in_join_is_fenced_on_replacement() -> None:
    ctx = GroupsTestContext()
    ids = _static_stable(ctx, "pod-1", "pod-2")
    parked = ctx.join("g", ids["pod-1"], instance_id="pod-1")  # leader forces a rebalance
    ctx.join("g", "", instance_id="pod-1")
    assert parked.error == Errors.FENCED_INSTANCE_ID


def test_member_id_and_instance_id_must_match() -> None:
    ctx = GroupsTestContext()
    ids = _static_stable(ctx, "pod-1", "pod-2")
    assert ctx.join("g", ids["pod-1"], instance_id="pod-2").error == Errors.FENCED_INSTANCE_ID
    assert ctx.join("g", ids["pod-1"], instance_id="pod-9").error == Errors.UNKNOWN_MEMBER_ID
    assert ctx.heartbeat("g", ids["pod-1"], 1, instance_id="pod-2").error == Errors.FENCED_INSTANCE_ID


def test_static_member_that_does_not_rejoin_is_kept_through_a_rebalance() -> None:
    ctx = GroupsTestContext()
    ids = _static_stable(ctx, "pod-1", "pod-2")
    r1 = ctx.join("g", ids["pod-1"], instance_id="pod-1")
    for _ in range(6):  # pod-2 stays alive but does not rejoin before the 30 s rebalance timeout
        assert ctx.heartbeat("g", ids["pod-2"], 1, instance_id="pod-2").error == Errors.REBALANCE_IN_PROGRESS
        ctx.sleep(5000)
    assert r1["generation_id"] == 2
    assert {m["group_instance_id"] for m in r1["members"]} == {"pod-1", "pod-2"}


def test_leave_by_instance_id_removes_the_static_member() -> None:
    ctx = GroupsTestContext()
    ids = _static_stable(ctx, "pod-1", "pod-2")
    resp = ctx.leave("g", ("", "pod-2"), ("", "pod-9"), (ids["pod-1"], "pod-2"))
    assert [m["error_code"] for m in resp["members"]] == [0, Errors.UNKNOWN_MEMBER_ID, Errors.UNKNOWN_MEMBER_ID]
    assert set(ctx.group("g").static_members) == {"pod-1"}
    assert ctx.state("g") == "PreparingRebalance"


def test_leave_with_a_stale_member_id_for_the_instance_is_fenced() -> None:
    ctx = GroupsTestContext()
    ids = _static_stable(ctx, "pod-1", "pod-2")
    resp = ctx.leave("g", (ids["pod-1"], "pod-2"))
    assert resp["members"][0]["error_code"] == Errors.FENCED_INSTANCE_ID
    assert ctx.state("g") == "Stable"
