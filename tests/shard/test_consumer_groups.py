"""KIP-848 consumer groups (ConsumerGroupHeartbeat) with a hand-driven clock."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

from rafka.shard.groups import GroupConfig, GroupCoordinator
from rafka.shard.groups.consumer import ConsumerGroupCoordinator
from rafka.shard.groups.errors import Errors
from rafka.shard.log.manager import LogManager
from rafka.shard.metrics import StateCollector
from rafka.shard.records import Record, RecordType
from rafka.shard.txn.participant import TxnOffsets, TxnParticipant
from tests.shard.test_groups_context import GroupsTestContext, Response, roundtrip

T1 = "00000000-0000-0000-0000-000000000001"
T2 = "00000000-0000-0000-0000-000000000002"
CONSUMER_TYPES = {RecordType.CONSUMER_GROUP_METADATA, RecordType.CONSUMER_GROUP_MEMBER,
                  RecordType.CONSUMER_GROUP_TARGET}


class Ctx(GroupsTestContext):
    def __init__(self, **config: Any) -> None:
        config.setdefault("consumer_session_timeout_ms", 45_000)
        super().__init__(**config)
        uids = itertools.count(1)
        self.cg = ConsumerGroupCoordinator(self.coord.config, self.timer, self.coord,
                                           new_group_uid=lambda now_ms: f"cgp_c{next(uids)}")

    def write(self, records: list[Record]) -> None:
        for record in records:
            record = roundtrip(record)
            (self.cg.replay if record.type in CONSUMER_TYPES else self.coord.replay)(record)
            self.log.append(record)

    def hb(self, member: str, epoch: int, topics: list[str] | None = None, owned: Any = None,
           meta: dict[str, Any] | None = None, **kw: Any) -> Response:
        op = {"group_id": kw.pop("group_id", "g"), "member_id": member, "member_epoch": epoch,
              "instance_id": kw.pop("instance_id", None), "rack_id": None,
              "rebalance_timeout": kw.pop("rebalance_timeout", 30_000 if epoch == 0 else -1),
              "subscribed_topic_names": topics, "subscribed_topic_regex": kw.pop("regex", None),
              "server_assignor": kw.pop("assignor", None),
              "topic_partitions": ([] if epoch == 0 else None) if owned is None else [
                  {"topic_id": t, "partitions": sorted(ps)} for t, ps in owned.items()],
              "api_version": 1, "topics": meta if meta is not None else {"t": {"topic_id": T1, "partitions": 6}}}
        op.update(kw)
        response = Response()
        records = self.cg.heartbeat(self.org, op, self.now, response)
        self.last_records = list(records)
        self.write(records)
        return response

    def cgroup(self, group_id: str = "g") -> Any:
        return self.cg.groups.get((self.org, group_id))


def parts(resp: Response) -> dict[str, set[int]] | None:
    a = resp["assignment"]
    if a is None:
        return None
    return {tp["topic_id"]: set(tp["partitions"]) for tp in a["topic_partitions"]}


def test_first_member_gets_every_partition() -> None:
    ctx = Ctx()
    r = ctx.hb("m1", 0, ["t"])
    assert r.error == Errors.NONE and r["member_epoch"] == 1 and r["heartbeat_interval"] == 5000
    assert parts(r) == {T1: set(range(6))}
    g = ctx.cgroup()
    assert g.group_epoch == 1 and g.assignment_epoch == 1 and g.state() == "Stable"
    assert g.uid == "cgp_c1"


def test_v0_member_id_is_minted_and_v1_requires_one() -> None:
    ctx = Ctx()
    r = ctx.hb("", 0, ["t"], api_version=0)
    assert r.error == Errors.NONE and r["member_id"] == "uuid1"
    assert ctx.hb("", 0, ["t"]).error == Errors.INVALID_REQUEST


def test_invalid_requests() -> None:
    ctx = Ctx()
    assert ctx.hb("m1", 0, ["t"], group_id="").error == Errors.INVALID_REQUEST
    assert ctx.hb("m1", 0, None).error == Errors.INVALID_REQUEST  # no subscription on join
    assert ctx.hb("m1", 0, ["t"], rebalance_timeout=-1).error == Errors.INVALID_REQUEST
    assert ctx.hb("m1", 0, ["t"], owned={T1: {0}}).error == Errors.INVALID_REQUEST
    assert ctx.hb("m1", 0, ["t"], topic_partitions=None).error == Errors.INVALID_REQUEST  # null, not empty
    assert ctx.hb("m1", -3, None).error == Errors.INVALID_REQUEST
    assert ctx.hb("", -2, None, instance_id="i", api_version=0).error == Errors.GROUP_ID_NOT_FOUND  # v0: id optional
    assert ctx.hb("m1", -2, None).error == Errors.INVALID_REQUEST  # -2 needs an instance id
    assert ctx.hb("m1", 0, ["t"], assignor="sticky").error == Errors.UNSUPPORTED_ASSIGNOR
    assert ctx.hb("m1", 3, None).error == Errors.GROUP_ID_NOT_FOUND
    ctx.hb("m1", 0, ["t"])
    assert ctx.hb("nobody", 1, None).error == Errors.UNKNOWN_MEMBER_ID


def test_joining_with_an_empty_regex_subscribes_to_nothing() -> None:
    """Kafka 4 accepts an empty list of names or an empty regex on join: a member of the group
    subscribed to no topic."""
    ctx = Ctx()
    r = ctx.hb("m1", 0, None, regex="")
    assert r.error == Errors.NONE and r["member_epoch"] == 1 and parts(r) == {}


def test_second_member_waits_for_revocation_before_getting_partitions() -> None:
    ctx = Ctx()
    r1 = ctx.hb("m1", 0, ["t"])
    assert parts(r1) == {T1: set(range(6))}
    r2 = ctx.hb("m2", 0, ["t"])
    g = ctx.cgroup()
    assert g.group_epoch == 2 and g.assignment_epoch == 2
    # m2's target partitions are still owned by m1: it gets nothing yet, but the new epoch
    assert r2["member_epoch"] == 2 and parts(r2) == {}
    assert g.target["m2"] and g.target["m1"] and not (g.target["m1"][T1] & g.target["m2"][T1])
    # m1 heartbeats: asked to revoke, keeps its epoch
    r1 = ctx.hb("m1", 1, None, owned={T1: set(range(6))})
    assert r1["member_epoch"] == 1 and parts(r1) == {T1: g.target["m1"][T1]}
    assert g.members["m1"].state == "unrevoked_partitions"
    # m2 still cannot get them: m1 has not confirmed
    r2 = ctx.hb("m2", 2, None, owned={})
    assert parts(r2) is None and g.members["m2"].assigned == {}
    # m1 confirms: epoch bump, partitions released
    r1 = ctx.hb("m1", 1, None, owned={T1: g.target["m1"][T1]})
    assert r1["member_epoch"] == 2 and g.members["m1"].state == "stable"
    r2 = ctx.hb("m2", 2, None, owned={})
    assert parts(r2) == {T1: g.target["m2"][T1]} and g.state() == "Stable"
    a1, a2 = g.members["m1"].assigned[T1], g.members["m2"].assigned[T1]
    assert a1 | a2 == set(range(6)) and not a1 & a2 and len(a1) == len(a2) == 3


def stable_group(ctx: Ctx, n: int) -> None:
    """Join n members and heartbeat until every member is Stable at the assignment epoch."""
    for i in range(1, n + 1):
        ctx.hb(f"m{i}", 0, ["t"])
    for _ in range(4):
        g = ctx.cgroup()
        for m in list(g.members.values()):
            ctx.hb(m.member_id, m.member_epoch, None, owned=g.members[m.member_id].assigned)
    assert ctx.cgroup().state() == "Stable"


def test_the_assignment_goes_back_on_a_full_heartbeat_or_when_it_changed() -> None:
    """Kafka's rule (KAFKA-16367): a join, a *full* heartbeat (rebalance timeout, subscription
    and owned partitions all set: what clients send after an error) or a changed assignment;
    a partial heartbeat still owning partitions it was told to give up gets nothing new."""
    ctx = Ctx()
    stable_group(ctx, 1)
    m1 = ctx.cgroup().members["m1"]
    assert parts(ctx.hb("m1", m1.member_epoch, None, owned=m1.assigned)) is None
    full = ctx.hb("m1", m1.member_epoch, ["t"], owned=m1.assigned, rebalance_timeout=30_000)
    assert parts(full) == {T1: set(range(6))}
    ctx.hb("m2", 0, ["t"])
    told = parts(ctx.hb("m1", 1, None, owned={T1: set(range(6))}))
    assert told is not None and len(told[T1]) == 3
    assert parts(ctx.hb("m1", 1, None, owned={T1: set(range(6))})) is None  # the revocation was already sent
    assert parts(ctx.hb("m1", 1, ["t"], owned={T1: set(range(6))}, rebalance_timeout=30_000)) == told


def test_third_member_moves_only_what_it_takes() -> None:
    ctx = Ctx()
    stable_group(ctx, 2)
    g = ctx.cgroup()
    before = {m: set(g.members[m].assigned[T1]) for m in ("m1", "m2")}
    ctx.hb("m3", 0, ["t"])
    stable_group_again = [ctx.hb(m.member_id, m.member_epoch, None, owned=m.assigned)
                          for m in list(g.members.values())]
    assert all(r.error == 0 for r in stable_group_again)
    for _ in range(3):
        for m in list(g.members.values()):
            ctx.hb(m.member_id, m.member_epoch, None, owned=g.members[m.member_id].assigned)
    after = {m: set(g.members[m].assigned.get(T1, ())) for m in ("m1", "m2", "m3")}
    assert all(len(v) == 2 for v in after.values())
    assert after["m1"] <= before["m1"] and after["m2"] <= before["m2"]  # sticky: nothing moved between them
    assert after["m1"] | after["m2"] | after["m3"] == set(range(6))


def test_a_full_group_refuses_before_looking_up_the_member() -> None:
    """Kafka's throwIfConsumerGroupIsFull comes first: an id that is not a member gets
    GROUP_MAX_SIZE_REACHED whatever its epoch, a static member rejoining under a new id too."""
    ctx = Ctx(max_size=2)
    ctx.hb("m1", 0, ["t"])
    ctx.hb("m2", 0, ["t"], instance_id="i2")
    assert ctx.hb("m3", 0, ["t"]).error == Errors.GROUP_MAX_SIZE_REACHED
    assert ctx.hb("m3", 4, None).error == Errors.GROUP_MAX_SIZE_REACHED
    assert ctx.hb("m2", -2, None, instance_id="i2").error == Errors.NONE  # a static member's temporary leave
    assert ctx.hb("m2b", 0, ["t"], instance_id="i2").error == Errors.GROUP_MAX_SIZE_REACHED
    assert ctx.hb("m1", 1, None).error == Errors.NONE


def test_epoch_fencing() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"])
    fenced = ctx.hb("m1", 5, None)
    assert fenced.error == Errors.FENCED_MEMBER_EPOCH
    assert (fenced["member_id"], fenced["member_epoch"], fenced["assignment"]) == (None, 0, None)  # Kafka's
    ctx.hb("m2", 0, ["t"])
    g = ctx.cgroup()
    ctx.hb("m1", 1, None, owned={T1: set(range(6))})
    ctx.hb("m1", 1, None, owned=g.members["m1"].assigned)
    assert g.members["m1"].member_epoch == 2
    # the previous epoch is accepted with a subset of the assignment (lost response)...
    assert ctx.hb("m1", 1, None, owned=g.members["m1"].assigned).error == Errors.NONE
    # ...but not with partitions it no longer has, nor an older epoch
    assert ctx.hb("m1", 1, None, owned={T1: set(range(6))}).error == Errors.FENCED_MEMBER_EPOCH
    assert ctx.hb("m1", 0 + 0, ["t"]).error == Errors.NONE  # rejoin with epoch 0 is always allowed


def test_leave_frees_partitions_and_bumps_epoch() -> None:
    ctx = Ctx()
    stable_group(ctx, 2)
    g = ctx.cgroup()
    epoch = g.group_epoch
    r = ctx.hb("m2", -1, None)
    assert r.error == Errors.NONE and r["member_epoch"] == -1
    assert "m2" not in g.members and g.group_epoch == epoch + 1
    r1 = ctx.hb("m1", g.members["m1"].member_epoch, None, owned=g.members["m1"].assigned)
    assert parts(r1) == {T1: set(range(6))} and g.state() == "Stable"


def test_session_timeout_fences_member() -> None:
    ctx = Ctx(consumer_session_timeout_ms=10_000)
    stable_group(ctx, 2)
    g = ctx.cgroup()
    ctx.sleep(5_000)
    ctx.hb("m1", g.members["m1"].member_epoch, None, owned=g.members["m1"].assigned)
    ctx.sleep(6_000)  # m2 silent for 11 s
    assert set(g.members) == {"m1"}
    assert ctx.hb("m2", 3, None).error == Errors.UNKNOWN_MEMBER_ID
    r1 = ctx.hb("m1", g.members["m1"].member_epoch, None, owned=g.members["m1"].assigned)
    assert parts(r1) == {T1: set(range(6))}


def test_revocation_timeout_fences_member() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"], rebalance_timeout=5_000)
    ctx.hb("m2", 0, ["t"])
    ctx.hb("m1", 1, None, owned={T1: set(range(6))})  # asked to revoke
    ctx.sleep(5_001)
    assert "m1" not in ctx.cgroup().members


def test_static_member_temporary_leave_and_rejoin() -> None:
    ctx = Ctx()
    r = ctx.hb("a1", 0, ["t"], instance_id="i")
    assert ctx.hb("a2", 0, ["t"], instance_id="i").error == Errors.UNRELEASED_INSTANCE_ID
    r = ctx.hb("a1", -2, None, instance_id="i")
    assert r.error == Errors.NONE and r["member_epoch"] == -2
    g = ctx.cgroup()
    epoch = g.group_epoch
    r = ctx.hb("a2", 0, ["t"], instance_id="i")
    assert r.error == Errors.NONE and r["member_epoch"] == 1 and parts(r) == {T1: set(range(6))}
    assert set(g.members) == {"a2"} and g.group_epoch == epoch  # no rebalance
    zombie = ctx.hb("a1", 1, None, instance_id="i")  # found by instance id, as in Kafka: fenced, not unknown
    assert (zombie.error, zombie["error_message"]) == (
        Errors.FENCED_INSTANCE_ID, "Static member a1 with instance id i was fenced by member a2.")
    assert ctx.hb("a1", 1, None, instance_id="other").error == Errors.UNKNOWN_MEMBER_ID


def test_a_member_is_described_with_its_latest_client_id_and_host() -> None:
    """Kafka takes both from every heartbeat: a static member back from another host under another
    client id, and a dynamic member heartbeating over a new connection, describe as they are now."""
    ctx = Ctx()
    ctx.hb("a1", 0, ["t"], instance_id="i", client_id="app-1", client_host="/10.0.0.1")
    ctx.hb("a1", -2, None, instance_id="i")
    ctx.hb("a2", 0, ["t"], instance_id="i", client_id="app-2", client_host="/10.0.0.2")
    ctx.hb("d1", 0, ["t"], client_id="dyn", client_host="/10.0.0.3")
    ctx.hb("d1", ctx.cgroup().members["d1"].member_epoch, None, client_id="dyn-2", client_host="/10.0.0.4")

    def described(cg: ConsumerGroupCoordinator) -> dict[str, tuple[str, str]]:
        resp = Response()
        cg.describe(ctx.org, {"group_id": "g"}, ctx.now, resp)
        return {m["member_id"]: (m["client_id"], m["client_host"]) for m in resp["members"]}

    assert described(ctx.cg) == {"a2": ("app-2", "/10.0.0.2"), "d1": ("dyn-2", "/10.0.0.4")}
    fresh = GroupCoordinator(GroupConfig(), ctx.timer)  # and so after a restart: the change was written
    cg = ConsumerGroupCoordinator(GroupConfig(), ctx.timer, fresh)
    for record in ctx.log:
        (cg.replay if record.type in CONSUMER_TYPES else fresh.replay)(record)
    assert described(cg) == {"a2": ("app-2", "/10.0.0.2"), "d1": ("dyn-2", "/10.0.0.4")}


def test_metrics_count_consumer_groups_and_their_members() -> None:
    """The state gauges show KIP-848 groups beside classic ones: by state, in the members total and
    per group, as Kafka's consumer-group-count and the exporters' consumergroup members."""
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"])
    ctx.hb("m2", 0, ["t"], group_id="h")
    ctx.hb("m3", 0, ["t"], group_id="h")  # h waits for m2 to give partitions up
    ctx.join_new_member("classic")
    stats = ctx.coord.group_stats()
    assert stats["groups"] == 3 and stats["members"] == 4
    assert stats["consumer_groups_by_state"] == {"Empty": 0, "Assigning": 0, "Reconciling": 1, "Stable": 1}
    samples = {(f.name, tuple(sorted(s.labels.items()))): s.value
               for f in StateCollector(SimpleNamespace(groups=ctx.coord), 0).collect() for s in f.samples}
    assert samples[("rafka_consumer_group_count", (("shard", "0"), ("state", "Reconciling")))] == 1
    assert samples[("rafka_group_members", (("shard", "0"),))] == 4
    per_group = {dict(k[1])["consumergroup"]: v for k, v in samples.items() if k[0] == "kafka_consumergroup_members"}
    assert per_group == {"g": 1, "h": 2, "classic": 1}


def test_topic_metadata_change_bumps_epoch() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"])
    g = ctx.cgroup()
    r = ctx.hb("m1", 1, None, owned={T1: set(range(6))}, meta={"t": {"topic_id": T1, "partitions": 8}})
    assert g.group_epoch == 2 and r["member_epoch"] == 2 and parts(r) == {T1: set(range(8))}


def test_regex_and_range_assignor() -> None:
    ctx = Ctx()
    meta = {"a": {"topic_id": T1, "partitions": 2}, "b": {"topic_id": T2, "partitions": 2}}
    ctx.hb("m1", 0, [], regex="[ab]", assignor="range", meta=meta, regex_topics={"[ab]": ["a", "b"]})
    ctx.hb("m2", 0, [], regex="[ab]", assignor="range", meta=meta, regex_topics={"[ab]": ["a", "b"]})
    g = ctx.cgroup()
    assert g.target["m1"] == {T1: {0}, T2: {0}} and g.target["m2"] == {T1: {1}, T2: {1}}


def test_offsets_fenced_by_member_epoch() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"])
    commit = {"group_id": "g", "member_id": "m1", "generation_id_or_member_epoch": 1, "api_version": 9,
              "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}]}
    assert ctx.call("offset_commit", commit)["topics"][0]["partitions"][0]["error_code"] == 0
    assert ctx.coord.groups.get((ctx.org, "g")) is None  # no classic group appears
    stale = dict(commit, generation_id_or_member_epoch=0)
    assert ctx.call("offset_commit", stale)["topics"][0]["partitions"][0]["error_code"] == Errors.STALE_MEMBER_EPOCH
    newer = dict(commit, generation_id_or_member_epoch=2)  # Kafka 4: any other epoch is stale
    assert ctx.call("offset_commit", newer)["topics"][0]["partitions"][0]["error_code"] == Errors.STALE_MEMBER_EPOCH
    unknown = dict(commit, member_id="x")
    assert ctx.call("offset_commit", unknown)["topics"][0]["partitions"][0]["error_code"] == Errors.UNKNOWN_MEMBER_ID
    fetch = {"group_id": "g", "member_id": "m1", "member_epoch": 1, "topics": [{"name": "t", "partition_indexes": [0]}]}
    r = ctx.call("offset_fetch", fetch)
    assert r.error == 0 and r["topics"][0]["partitions"][0]["committed_offset"] == 5
    assert ctx.call("offset_fetch", dict(fetch, member_epoch=0)).error == Errors.STALE_MEMBER_EPOCH
    assert ctx.call("offset_fetch", dict(fetch, member_epoch=-1, member_id=None)).error == 0
    # only a null member id skips the checks (Kafka's validateOffsetFetch)
    assert ctx.call("offset_fetch", dict(fetch, member_epoch=-1)).error == Errors.STALE_MEMBER_EPOCH
    assert ctx.call("offset_fetch", dict(fetch, member_epoch=-1, member_id="")).error == Errors.UNKNOWN_MEMBER_ID


def test_transactional_offset_commits_to_a_consumer_group() -> None:
    """Kafka's ConsumerGroup.validateOffsetCommit accepts a transactional commit naming no member,
    and validateTransactionalOffsetCommit answers a stale epoch ILLEGAL_GENERATION."""
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"])
    ctx.hb("m1", 1, ["t"], owned={T1: set(range(6))})
    participant = TxnParticipant(ctx.coord, LogManager(), TxnOffsets())

    def txn(**op: Any) -> int:
        _, resp = participant.txn_offset_commit(ctx.org, {
            "group_id": "g", "producer_id": 7, "producer_epoch": 0, "generation_id": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}], **op}, ctx.now)
        return int(resp["topics"][0]["partitions"][0]["error_code"])

    assert txn() == 0
    assert txn(generation_id=1, member_id="m1") == 0
    assert txn(generation_id=0, member_id="m1") == Errors.ILLEGAL_GENERATION
    assert txn(generation_id=2, member_id="m1") == Errors.ILLEGAL_GENERATION
    assert txn(generation_id=1, member_id="nobody") == Errors.UNKNOWN_MEMBER_ID


def test_offsets_of_a_consumer_group_expire_and_the_empty_group_goes() -> None:
    """Kafka's ConsumerGroup.offsetExpirationCondition: offsets of topics no member subscribes to
    expire a retention after their commit; an Empty group without offsets is deleted."""
    ctx = Ctx(offsets_retention_ms=10_000)
    ctx.hb("m1", 0, ["t"])
    commit = {"group_id": "g", "member_id": "m1", "generation_id_or_member_epoch": 1, "api_version": 9,
              "topics": [{"name": n, "partitions": [{"partition_index": 0, "committed_offset": 5}]}
                         for n in ("t", "other")]}
    assert [p["error_code"] for t in ctx.call("offset_commit", commit)["topics"] for p in t["partitions"]] == [0, 0]
    ctx.sleep(11_000)
    expired = ctx.coord.expire_offsets(ctx.now)
    assert [r.key for r in expired] == [(ctx.org, "g", "other", 0)], "the subscribed topic's offset stays"
    ctx.write(expired)
    ctx.hb("m1", -1, ["t"])  # leaves: the group is Empty, and its last offset 11 s old
    assert ctx.cgroup() is not None
    ctx.write(ctx.coord.expire_offsets(ctx.now))
    assert ctx.cgroup() is None, "the Empty group without offsets is deleted"
    fetch = ctx.call("offset_fetch", {"group_id": "g", "member_id": None, "member_epoch": -1,
                                      "topics": [{"name": "t", "partition_indexes": [0]}]})
    assert fetch["topics"][0]["partitions"][0]["committed_offset"] == -1


def test_an_open_transactions_offsets_keep_a_consumer_group_and_its_offset() -> None:
    """Kafka's cleanupExpiredOffsets: an offset an open transaction also holds is not expired,
    and a group with an open transaction's offsets is not deleted."""
    ctx = Ctx(offsets_retention_ms=10_000)
    participant = TxnParticipant(ctx.coord, LogManager(), TxnOffsets())
    ctx.coord.txn_pending = participant.offsets.has_pending
    ctx.coord.txn_open = participant.offsets.has_open
    ctx.hb("m1", 0, ["t"])
    commit = {"group_id": "g", "member_id": "m1", "generation_id_or_member_epoch": 1, "api_version": 9,
              "topics": [{"name": "other", "partitions": [{"partition_index": 0, "committed_offset": 5}]}]}
    ctx.call("offset_commit", commit)
    ctx.hb("m1", -1, ["t"])
    records, _ = participant.txn_offset_commit(ctx.org, {
        "group_id": "g", "producer_id": 7, "producer_epoch": 0, "generation_id": -1, "member_id": "",
        "topics": [{"name": "other", "partitions": [{"partition_index": 0, "committed_offset": 9}]}]}, ctx.now)
    for r in records:
        participant.offsets.replay(r)
    ctx.sleep(11_000)
    assert ctx.coord.expire_offsets(ctx.now) == [], "the offset and the group wait for the transaction"
    participant.offsets.pending.clear()  # the transaction ended
    ctx.write(ctx.coord.expire_offsets(ctx.now))
    assert ctx.cgroup() is None


def test_list_describe_delete_and_classic_join() -> None:
    ctx = Ctx()
    ctx.hb("m1", 0, ["t"])
    listed = ctx.call("list_groups", {"types_filter": ["consumer"]})["groups"]
    assert listed == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "consumer"}]
    assert ctx.call("list_groups", {"types_filter": ["classic"]})["groups"] == []
    d = ctx.call("describe_group", {"group_id": "g"})
    assert d["protocol_type"] == "consumer" and d["group_state"] == "Stable" and d["members"][0]["member_id"] == "m1"
    cd = Response()
    ctx.cg.describe(ctx.org, {"group_id": "g"}, ctx.now, cd)
    assert cd["group_epoch"] == 1 and cd["members"][0]["assignment"]["topic_partitions"][0]["topic_name"] == "t"
    assert ctx.join("g", "", protocol_type="connect").error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert ctx.call("delete_group", {"group_id": "g"}).error == Errors.NON_EMPTY_GROUP
    ctx.hb("m1", -1, None)
    assert ctx.call("delete_group", {"group_id": "g"}).error == Errors.NONE
    assert ctx.cgroup() is None


def test_empty_classic_group_is_converted_and_non_consumer_one_refused() -> None:
    ctx = Ctx()
    ctx.call("offset_commit", {"group_id": "g", "generation_id_or_member_epoch": -1, "api_version": 9,
                               "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 3}]}]})
    assert ctx.coord.groups.get((ctx.org, "g")) is not None  # a simple classic group
    assert ctx.hb("m1", 0, ["t"]).error == Errors.NONE
    assert ctx.coord.groups.get((ctx.org, "g")) is None and ctx.cgroup() is not None
    assert ctx.coord.offsets.get(ctx.org, "g", "t", 0)[0] == 3  # offsets survive the conversion
    ctx.join("h", "", version=3, protocol_type="connect")  # a non-empty classic group, not "consumer"
    ctx.sleep(0)
    assert ctx.hb("m1", 0, ["t"], group_id="h").error == Errors.GROUP_ID_NOT_FOUND


def test_replay_rebuilds_the_group() -> None:
    ctx = Ctx()
    stable_group(ctx, 2)
    ctx.hb("m3", 0, ["t"])
    ctx.call("offset_commit", {"group_id": "g", "member_id": "m1",
                               "generation_id_or_member_epoch": ctx.cgroup().members["m1"].member_epoch,
                               "api_version": 9,
                               "topics": [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 9}]}]})
    g = ctx.cgroup()
    fresh = GroupCoordinator(GroupConfig(), ctx.timer)
    cg = ConsumerGroupCoordinator(GroupConfig(), ctx.timer, fresh)
    # offsets first, then the group (as a compacted WAL may order them): no phantom classic group survives
    for record in sorted(ctx.log, key=lambda r: r.type != RecordType.OFFSET_COMMIT):
        (cg.replay if record.type in CONSUMER_TYPES else fresh.replay)(record)
    fresh.on_loaded(ctx.now)
    cg.on_loaded(ctx.now)
    h = cg.groups[(ctx.org, "g")]
    assert fresh.groups.get((ctx.org, "g")) is None
    assert (h.group_epoch, h.assignment_epoch, h.uid) == (g.group_epoch, g.assignment_epoch, g.uid)
    assert {m: v.value() for m, v in h.members.items()} == {m: v.value() for m, v in g.members.items()}
    assert h.target == g.target and h.owners == g.owners and h.topics == g.topics
    assert fresh.offsets.get(ctx.org, "g", "t", 1)[0] == 9
