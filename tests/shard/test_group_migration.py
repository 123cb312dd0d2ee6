"""Online migration classic <-> consumer groups, and classic members inside a consumer group."""

from __future__ import annotations

from typing import Any

from rafka.protocol.consumer_protocol import encode_assignment, encode_subscription, parse_assignment
from rafka.shard.groups import GroupConfig, GroupCoordinator
from rafka.shard.groups.consumer import ConsumerGroupCoordinator
from rafka.shard.groups.errors import Errors
from rafka.shard.records import RecordType
from tests.shard.test_consumer_groups import CONSUMER_TYPES, T1, Ctx, parts
from tests.shard.test_groups_context import Response, commit_op, fetch_op, join_op, sync_op


def protocols(owned: dict[str, list[int]] | None = None, topics: tuple[str, ...] = ("t",)) -> list[tuple[str, bytes]]:
    sub = encode_subscription(list(topics), version=3, owned=owned or {})
    return [("cooperative-sticky", sub)]


def classic_join(ctx: Ctx, member_id: str, owned: dict[str, list[int]] | None = None, **kw: Any) -> Response:
    return ctx.call("join_group", join_op("g", member_id, protocols=protocols(owned), **kw))


def classic_stable(ctx: Ctx) -> tuple[str, str, int]:
    """A Stable classic group of two cooperative members; a gets t-0..2, b gets t-3..5."""
    a = classic_join(ctx, "", client_id="a")["member_id"]
    b = classic_join(ctx, "", client_id="b")["member_id"]
    ja, jb = classic_join(ctx, a), classic_join(ctx, b)
    ctx.sleep(0)
    gen = ja["generation_id"]
    assert ja["leader"] == a and jb.error == 0
    ctx.call("sync_group", sync_op("g", b, gen))
    ctx.call("sync_group", sync_op("g", a, gen, assignments=[
        {"member_id": a, "assignment": encode_assignment({"t": {0, 1, 2}})},
        {"member_id": b, "assignment": encode_assignment({"t": {3, 4, 5}})}]))
    assert ctx.state() == "Stable"
    assert ctx.call("offset_commit", commit_op("g", {"t": {0: 42}}, generation=gen, member_id=a, version=8)).done
    return a, b, gen


def rejoin_until_stable(ctx: Ctx, member_id: str) -> set[int]:
    """Drive a cooperative classic member in a consumer group: rejoin, sync, revoke, rejoin."""
    owned = sorted(p for ps in ctx.cgroup().members[member_id].assigned.values() for p in ps)
    for _ in range(3):
        j = classic_join(ctx, member_id, {"t": owned})
        assert j.error == 0 and j["leader"] == "" and j["members"] == [], j.value
        s = ctx.call("sync_group", sync_op("g", member_id, j["generation_id"]))
        assert s.error == 0, s.value
        owned = sorted((parse_assignment(s["assignment"]) or {}).get("t", set()))
        if ctx.call("heartbeat", {"group_id": "g", "member_id": member_id,
                                  "generation_id": j["generation_id"]}).error == Errors.NONE:
            return set(owned)
    raise AssertionError("member did not settle")


def test_upgrade_keeps_members_assignments_uid_and_offsets() -> None:
    ctx = Ctx()
    a, b, gen = classic_stable(ctx)
    uid = ctx.group().uid
    r = ctx.hb("m1", 0, ["t"])
    assert r.error == Errors.NONE and ctx.group() is None
    g = ctx.cgroup()
    assert g.uid == uid and g.group_epoch == gen + 1 and set(g.members) == {a, b, "m1"}
    assert g.members[a].assigned == {T1: {0, 1, 2}} and g.members[a].uses_classic_protocol
    assert parts(r) == {}  # everything is still owned by the classic members
    # the classic members are told to rejoin; they revoke, then m1 gets its share
    assert ctx.call("heartbeat", {"group_id": "g", "member_id": a, "generation_id": gen}).error == \
        Errors.REBALANCE_IN_PROGRESS
    got_a, got_b = rejoin_until_stable(ctx, a), rejoin_until_stable(ctx, b)
    r = ctx.hb("m1", g.members["m1"].member_epoch, None, owned={})
    got_m1 = parts(r)[T1]
    assert sorted([*got_a, *got_b, *got_m1]) == list(range(6)) and len(got_m1) == 2
    assert g.state() == "Stable"
    # offsets survive; the classic member commits with its member epoch as generation
    fetched = ctx.call("offset_fetch", fetch_op("g", {"t": [0]}, version=8))
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 42
    epoch = g.members[a].member_epoch
    assert ctx.call("offset_commit", commit_op("g", {"t": {0: 43}}, generation=epoch, member_id=a, version=8)) \
        ["topics"][0]["partitions"][0]["error_code"] == 0
    assert ctx.call("offset_commit", commit_op("g", {"t": {0: 43}}, generation=epoch - 1, member_id=a, version=8)) \
        ["topics"][0]["partitions"][0]["error_code"] == Errors.ILLEGAL_GENERATION
    stale_fetch = {**fetch_op("g", {"t": [0]}), "member_id": a, "member_epoch": epoch - 1}
    assert ctx.call("offset_fetch", stale_fetch).error == Errors.ILLEGAL_GENERATION  # a classic member's
    # describe: consumer group, member types
    described = Response()
    ctx.cg.describe(ctx.org, {"group_id": "g"}, ctx.now, described)
    assert {m["member_id"]: m["member_type"] for m in described["members"]} == {a: 0, b: 0, "m1": 1}
    assert ctx.call("list_groups", {"types_filter": ["consumer"]})["groups"][0]["group_id"] == "g"
    d = ctx.call("describe_group", {"group_id": "g"})
    assert parse_assignment(next(m for m in d["members"] if m["member_id"] == a)["member_assignment"]) == \
        {"t": got_a}


def test_downgrade_when_last_consumer_member_leaves() -> None:
    ctx = Ctx()
    a, b, _ = classic_stable(ctx)
    uid = ctx.group().uid
    ctx.hb("m1", 0, ["t"])
    rejoin_until_stable(ctx, a)
    rejoin_until_stable(ctx, b)
    epoch = ctx.cgroup().group_epoch
    r = ctx.hb("m1", -1, None)
    assert r.error == 0 and ctx.cgroup() is None
    classic = ctx.group()
    assert classic.uid == uid and classic.generation_id == epoch and set(classic.members) == {a, b}
    assert ctx.state() == "PreparingRebalance"
    assert ctx.call("list_groups", {"types_filter": ["classic"]})["groups"][0]["group_type"] == "classic"
    # the classic members rejoin and the leader hands everything out
    assert ctx.call("heartbeat", {"group_id": "g", "member_id": a, "generation_id": epoch}).error == \
        Errors.REBALANCE_IN_PROGRESS
    ja, jb = classic_join(ctx, a), classic_join(ctx, b)
    assert ja.error == 0 and jb.error == 0 and ja["generation_id"] == epoch + 1
    assert ctx.call("offset_fetch", fetch_op("g", {"t": [0]}, version=8))["topics"][0]["partitions"][0][
        "committed_offset"] == 42
    # replaying the log rebuilds the classic group (one code path)
    fresh = GroupCoordinator(GroupConfig(), ctx.timer)
    cg = ConsumerGroupCoordinator(GroupConfig(), ctx.timer, fresh)
    for record in ctx.log:
        (cg.replay if record.type in CONSUMER_TYPES else fresh.replay)(record)
    assert not cg.groups and set(fresh.groups[(ctx.org, "g")].members) == {a, b}
    assert fresh.groups[(ctx.org, "g")].uid == uid


def test_upgrade_replays_to_the_same_consumer_group() -> None:
    ctx = Ctx()
    classic_stable(ctx)
    ctx.hb("m1", 0, ["t"])
    g = ctx.cgroup()
    assert any(r.type == RecordType.GROUP_METADATA and r.value is None for r in ctx.log)
    fresh = GroupCoordinator(GroupConfig(), ctx.timer)
    cg = ConsumerGroupCoordinator(GroupConfig(), ctx.timer, fresh)
    for record in ctx.log:
        (cg.replay if record.type in CONSUMER_TYPES else fresh.replay)(record)
    h = cg.groups[(ctx.org, "g")]
    assert (ctx.org, "g") not in fresh.groups
    assert {m: v.value() for m, v in h.members.items()} == {m: v.value() for m, v in g.members.items()}
    assert h.target == g.target and h.uid == g.uid and h.group_epoch == g.group_epoch


def test_eager_member_and_session_timeout_in_consumer_group() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"])
    first = ctx.call("join_group", join_op("g", "", protocols=[("range", encode_subscription(["t"]))]))
    assert first.error == Errors.MEMBER_ID_REQUIRED
    e = first["member_id"]
    j = ctx.call("join_group", join_op("g", e, protocols=[("range", encode_subscription(["t"]))], session=7000))
    assert j.error == 0 and j["generation_id"] == 2 and j["protocol_name"] == "range"
    s = ctx.call("sync_group", sync_op("g", e, 2, protocol_type="consumer", protocol_name="range"))
    assert s.error == 0 and parse_assignment(s["assignment"]) == {}  # m1 has not released yet
    assert ctx.call("sync_group", sync_op("g", e, 1)).error == Errors.ILLEGAL_GENERATION
    assert ctx.call("sync_group", sync_op("g", e, 2, protocol_name="roundrobin")).error == \
        Errors.INCONSISTENT_GROUP_PROTOCOL
    ctx.hb("m1", 1, None, owned={T1: set(range(6))})
    ctx.hb("m1", 1, None, owned=ctx.cgroup().members["m1"].assigned)
    # m1 released: the eager member is told to rejoin and gets its share
    assert ctx.call("heartbeat", {"group_id": "g", "member_id": e, "generation_id": 2}).error == \
        Errors.REBALANCE_IN_PROGRESS
    j = ctx.call("join_group", join_op("g", e, protocols=[("range", encode_subscription(["t"]))], session=7000))
    s = ctx.call("sync_group", sync_op("g", e, j["generation_id"]))
    assert len(parse_assignment(s["assignment"])["t"]) == 3
    assert ctx.call("heartbeat", {"group_id": "g", "member_id": e, "generation_id": 2}).error == Errors.NONE
    ctx.sleep(7001)  # m1 heartbeats, the classic member does not
    ctx.hb("m1", 2, None)
    ctx.sleep(1)
    assert e not in ctx.cgroup().members


def test_refusals_and_topic_requests() -> None:
    ctx = Ctx()
    ctx.call("join_group", join_op("g", "", protocol_type="connect", version=3))  # not "consumer"
    ctx.sleep(0)
    assert ctx.hb("m1", 0, ["t"]).error == Errors.GROUP_ID_NOT_FOUND
    ctx.hb("m1", 0, ["t"], group_id="h")
    op = join_op("h", "y", protocols=protocols(topics=("u",)), version=9)
    r = ctx.call("join_group", op)
    assert r.value.get("need_topics") == ["u"] and ctx.last_records == []
    r = ctx.call("join_group", dict(op, topics={"u": {"topic_id": "00000000-0000-0000-0000-0000000000aa",
                                                        "partitions": 2}}))
    assert r.error == 0 and "u" in ctx.cgroup("h").topics
    assert ctx.call("join_group", join_op("h", "z", protocol_type="connect")).error == \
        Errors.INCONSISTENT_GROUP_PROTOCOL
    assert ctx.call("leave_group", {"group_id": "h", "members": [{"member_id": "y"}, {"member_id": "q"}]}) \
        ["members"][1]["error_code"] == Errors.UNKNOWN_MEMBER_ID
    assert "y" not in ctx.cgroup("h").members


def test_fenced_consumer_member_downgrades_the_group() -> None:
    ctx = Ctx()
    a, b, _ = classic_stable(ctx)
    ctx.hb("m1", 0, ["t"])
    rejoin_until_stable(ctx, a)
    rejoin_until_stable(ctx, b)
    epoch = ctx.cgroup().members[a].member_epoch
    for _ in range(6):  # the classic members keep heartbeating, m1 goes silent
        ctx.sleep(9_000)
        for member_id in (a, b):
            error = ctx.call("heartbeat", {"group_id": "g", "member_id": member_id, "generation_id": epoch}).error
            assert error in (Errors.NONE, Errors.REBALANCE_IN_PROGRESS)  # rejoin once downgraded
    assert ctx.cgroup() is None and set(ctx.group().members) == {a, b}
    assert ctx.state() == "PreparingRebalance"


def test_static_classic_member_restarts_in_a_consumer_group() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"])
    j = classic_join(ctx, "", instance_id="i1")
    first = j["member_id"]
    assert j.error == 0 and ctx.cgroup().static_members == {"i1": first}
    j2 = classic_join(ctx, "", instance_id="i1")  # restarted: unknown member id, same instance id
    assert j2.error == 0 and j2["member_id"] != first and ctx.cgroup().static_members == {"i1": j2["member_id"]}
    assert ctx.call("heartbeat", {"group_id": "g", "member_id": first, "generation_id": j["generation_id"],
                                  "group_instance_id": "i1"}).error == Errors.FENCED_INSTANCE_ID
    assert classic_join(ctx, first, instance_id="i1").error == Errors.FENCED_INSTANCE_ID


def test_removing_a_static_member_by_instance_id_echoes_the_request() -> None:
    # an admin's removeMembersFromConsumerGroup sends the instance id alone; Kafka answers each
    # member with the identity it was asked about, which the admin client matches its results by
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"])
    member_id = classic_join(ctx, "", instance_id="i1")["member_id"]
    r = ctx.call("leave_group", {"group_id": "g", "members": [
        {"member_id": "", "group_instance_id": "i1"}, {"member_id": "", "group_instance_id": "i9"}]})
    assert r["members"] == [
        {"member_id": "", "group_instance_id": "i1", "error_code": Errors.NONE},
        {"member_id": "", "group_instance_id": "i9", "error_code": Errors.UNKNOWN_MEMBER_ID}]
    assert member_id not in ctx.cgroup().members and ctx.cgroup().static_members == {}


def test_classic_member_that_does_not_rejoin_or_sync_is_fenced() -> None:
    ctx = Ctx()
    a, b, gen = classic_stable(ctx)
    ctx.hb("m1", 0, ["t"])
    assert ctx.call("heartbeat", {"group_id": "g", "member_id": a, "generation_id": gen}).error == \
        Errors.REBALANCE_IN_PROGRESS
    j = classic_join(ctx, b, {"t": [3, 4, 5]})  # b rejoins but never syncs; a never rejoins
    for _ in range(4):
        ctx.sleep(8_000)
        ctx.call("heartbeat", {"group_id": "g", "member_id": a, "generation_id": gen})
        ctx.call("heartbeat", {"group_id": "g", "member_id": b, "generation_id": j["generation_id"]})
        ctx.hb("m1", ctx.cgroup().members["m1"].member_epoch, None)
    assert set(ctx.cgroup().members) == {"m1"}


def test_classic_static_member_replacing_the_last_consumer_member_downgrades() -> None:
    ctx = Ctx()
    a, b, _ = classic_stable(ctx)
    ctx.hb("s1", 0, ["t"], instance_id="i1")
    rejoin_until_stable(ctx, a)
    rejoin_until_stable(ctx, b)
    g = ctx.cgroup()
    ctx.hb("s1", g.members["s1"].member_epoch, None, owned={}, instance_id="i1")
    target = g.target["s1"]
    assert ctx.hb("s1", -2, None, instance_id="i1").error == 0  # restarting (static: keeps its partitions)
    j = classic_join(ctx, "", instance_id="i1")  # ... as a classic consumer
    assert j.error == 0 and ctx.cgroup() is None
    classic = ctx.group()
    assert ctx.state() == "Stable" and set(classic.members) == {a, b, j["member_id"]}
    assert j["generation_id"] == classic.generation_id
    s = ctx.call("sync_group", sync_op("g", j["member_id"], j["generation_id"], instance_id="i1"))
    assert s.error == 0 and parse_assignment(s["assignment"]) == {"t": target[T1]}
