"""DescribeGroups, ListGroups, DeleteGroups, org isolation and metrics counts."""

from __future__ import annotations

from rafka.shard.groups import Errors
from rafka.shard.records import Record, RecordType
from tests.shard.test_groups_context import GroupsTestContext, committed, meta


def _describe(ctx: GroupsTestContext, group_id: str, version: int = 6, org: str | None = None) -> dict:
    return ctx.call("describe_group", {"group_id": group_id, "api_version": version}, org=org).value


def _list(ctx: GroupsTestContext, states=None, types=None, org: str | None = None) -> list[tuple[str, str]]:
    resp = ctx.call("list_groups", {"states_filter": states or [], "types_filter": types or [], "api_version": 5},
                    org=org)
    assert resp.error == 0
    assert all(g["group_type"] == "classic" for g in resp["groups"])
    return sorted((g["group_id"], g["group_state"]) for g in resp["groups"])


def test_describe_a_stable_group_shows_members_metadata_and_assignments() -> None:
    ctx = GroupsTestContext()
    leader, follower = ctx.stable_group("Orders.Main", n=2, topics=("t1",))
    d = _describe(ctx, "Orders.Main")
    assert d["error_code"] == 0 and d["error_message"] is None and d["group_id"] == "Orders.Main"
    assert d["group_state"] == "Stable" and d["protocol_type"] == "consumer" and d["protocol_data"] == "range"
    assert d["authorized_operations"] == -2147483648
    assert d["group_uid"] == ctx.group("Orders.Main").uid and d["group_uid"].startswith("cgp_")
    assert d["rrl"] == "org-a/consumer-groups/orders-main"
    assert d["members"] == [
        {"member_id": m, "group_instance_id": None, "client_id": f"c{i}", "client_host": "/10.0.0.1",
         "member_metadata": meta("t1"), "member_assignment": m.encode()}
        for i, m in enumerate([leader, follower])
    ]


def test_describe_a_rebalancing_group_hides_metadata() -> None:
    ctx = GroupsTestContext()
    leader, _ = ctx.stable_group("g", n=2)
    ctx.join("g", leader)
    d = _describe(ctx, "g")
    assert d["group_state"] == "PreparingRebalance" and d["protocol_data"] == ""
    assert all(m["member_metadata"] == b"" for m in d["members"]) and len(d["members"]) == 2


def test_describe_an_unknown_group_depends_on_the_version() -> None:
    ctx = GroupsTestContext()
    v6 = _describe(ctx, "nope", version=6)
    assert v6["error_code"] == Errors.GROUP_ID_NOT_FOUND and v6["group_state"] == "Dead"
    assert v6["error_message"]
    v5 = _describe(ctx, "nope", version=5)
    assert v5["error_code"] == 0 and v5["group_state"] == "Dead" and v5["members"] == []
    assert v5["protocol_type"] == "" and v5["protocol_data"] == ""


def test_list_groups_filters_by_state_case_insensitively_and_by_type() -> None:
    ctx = GroupsTestContext()
    ctx.stable_group("stable")
    ctx.commit("simple", {"t": {0: 1}})
    ctx.join_new_member("joining")
    assert _list(ctx) == [("joining", "PreparingRebalance"), ("simple", "Empty"), ("stable", "Stable")]
    assert _list(ctx, states=["STABLE", "empty"]) == [("simple", "Empty"), ("stable", "Stable")]
    assert _list(ctx, types=["Classic"]) == _list(ctx)
    assert _list(ctx, types=["consumer"]) == []
    groups = ctx.call("list_groups", {"states_filter": [], "types_filter": []})["groups"]
    assert {g["group_id"]: g["protocol_type"] for g in groups} == {"stable": "consumer", "simple": "", "joining": "consumer"}


def test_orgs_never_see_each_others_groups() -> None:
    ctx = GroupsTestContext()
    ctx.stable_group("shared")
    ctx.commit("shared", {"t": {0: 42}}, generation=1, member_id=next(iter(ctx.group("shared").members)))
    assert _list(ctx, org="org-b") == []
    assert _describe(ctx, "shared", org="org-b")["error_code"] == Errors.GROUP_ID_NOT_FOUND
    assert committed(ctx.call("offset_fetch", {"group_id": "shared", "topics": None}, org="org-b")) == {}
    assert ctx.call("heartbeat", {"group_id": "shared", "member_id": "c0-uuid1", "generation_id": 1},
                    org="org-b").error == Errors.UNKNOWN_MEMBER_ID
    # org-b can use the same group id independently, with its own identity
    ctx.call("offset_commit", {"group_id": "shared", "generation_id_or_member_epoch": -1, "member_id": "",
                               "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 7}]}]},
             org="org-b")
    assert ctx.group("shared", org="org-b").uid != ctx.group("shared").uid
    assert committed(ctx.fetch("shared", {"t": [0]})) == {("t", 0): 42}
    assert _describe(ctx, "shared", org="org-b")["rrl"] == "org-b/consumer-groups/shared"


def test_delete_an_empty_group_removes_its_offsets_and_identity() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g")
    ctx.commit("g", {"t": {0: 1, 1: 2}}, generation=1, member_id=m)
    ctx.leave("g", (m, None))
    uid = ctx.group("g").uid
    resp = ctx.call("delete_group", {"group_id": "g"})
    assert resp.value == {"group_id": "g", "error_code": 0}
    assert ctx.last_records == [
        Record(RecordType.OFFSET_COMMIT, ("org-a", "g", "t", 0), None),
        Record(RecordType.OFFSET_COMMIT, ("org-a", "g", "t", 1), None),
        Record(RecordType.GROUP_METADATA, ("org-a", "g"), None),
    ]
    assert ctx.state("g") == "Dead" and committed(ctx.fetch("g", {"t": [0, 1]})) == {("t", 0): -1, ("t", 1): -1}
    assert _list(ctx) == []
    ctx.stable_group("g")
    assert ctx.group("g").uid != uid and ctx.group("g").generation_id == 1


def test_delete_refuses_non_empty_and_unknown_groups() -> None:
    ctx = GroupsTestContext()
    ctx.stable_group("g")
    assert ctx.call("delete_group", {"group_id": "g"}).error == Errors.NON_EMPTY_GROUP
    assert ctx.call("delete_group", {"group_id": "nope"}).error == Errors.GROUP_ID_NOT_FOUND
    assert ctx.state("g") == "Stable"


def test_group_stats_count_groups_members_and_offsets() -> None:
    ctx = GroupsTestContext()
    ctx.stable_group("a", n=2)
    ctx.commit("b", {"t": {0: 1, 1: 1}, "u": {0: 1}})
    ctx.join_new_member("c")
    stats = ctx.coord.group_stats()
    assert stats["groups"] == 3 and stats["members"] == 3 and stats["offsets"] == 3
    assert stats["groups_by_state"] == {"Empty": 1, "PreparingRebalance": 1, "CompletingRebalance": 0, "Stable": 1}
    assert stats["completed_rebalances"] == 1 and stats["groups_with_offsets"] == 1
