"""OffsetCommit, OffsetFetch, OffsetDelete and offset expiration."""

from __future__ import annotations

from rafka.shard.groups import Errors
from rafka.shard.groups.offsets_store import pack_entry
from rafka.shard.records import Record, RecordType
from tests.shard.test_groups_context import GroupsTestContext, commit_op, committed, fetch_op, partition_errors

DAY = 24 * 3600 * 1000


# ------------------------------------------------------------------- commit
def test_simple_consumer_commit_creates_an_empty_group_and_is_fetched_back() -> None:
    ctx = GroupsTestContext()
    resp = ctx.commit("g", {"t": {0: 10, 1: 20}}, metadata="ckpt", leader_epoch=3)
    assert partition_errors(resp) == {("t", 0): 0, ("t", 1): 0}
    group = ctx.group("g")
    assert group.state.value == "Empty" and group.protocol_type is None and group.uid.startswith("cgp_")
    types = [r.type for r in ctx.last_records]
    assert types == [RecordType.GROUP_METADATA, RecordType.OFFSET_COMMIT, RecordType.OFFSET_COMMIT]
    assert ctx.last_records[1] == Record(RecordType.OFFSET_COMMIT, ("org-a", "g", "t", 0),
                                         pack_entry(10, 3, "ckpt", ctx.now))
    fetched = ctx.fetch("g", {"t": [0, 1]})
    assert fetched.error == 0 and fetched["group_id"] == "g"
    assert fetched["topics"][0]["partitions"][0] == {
        "partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 3, "metadata": "ckpt", "error_code": 0}


def test_a_partition_listed_many_times_is_answered_each_time_and_stored_once_with_its_last_value() -> None:
    """Replay would leave the last value anyway; one record per listing let a small request
    under a long group id write megabytes of log (one record, with the group id, per entry)."""
    ctx = GroupsTestContext()
    op = commit_op("g", {"t": {0: 1}})
    op["topics"] = [{"name": "t", "partitions": [
        {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": m}
        for p, o, m in [(0, 1, ""), (1, 5, ""), (0, 2, ""), (0, 3, "x" * 5000)]]},
        {"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 6, "committed_leader_epoch": -1,
                                      "committed_metadata": ""}]}]
    resp = ctx.call("offset_commit", op)
    assert [[p["error_code"] for p in t["partitions"]] for t in resp["topics"]] == [[0, 0, 0, Errors.OFFSET_METADATA_TOO_LARGE], [0]]
    stored = [r.key[2:] for r in ctx.last_records if r.type == RecordType.OFFSET_COMMIT]
    assert stored == [("t", 0), ("t", 1)]
    assert {p["partition_index"]: p["committed_offset"] for p in ctx.fetch("g")["topics"][0]["partitions"]} == {0: 2, 1: 6}


def test_metadata_is_stored_verbatim_and_null_reads_back_empty() -> None:
    ctx = GroupsTestContext()
    ctx.commit("g", {"t": {0: 1}}, metadata=' {"json": "é"} ')
    ctx.commit("g", {"u": {0: 1}}, metadata=None)
    topics = {t["name"]: t["partitions"][0]["metadata"] for t in ctx.fetch("g")["topics"]}
    assert topics == {"t": ' {"json": "é"} ', "u": ""}


def test_commit_with_a_generation_to_an_unknown_group() -> None:
    ctx = GroupsTestContext()
    v9 = ctx.commit("g", {"t": {0: 1}}, generation=3, member_id="m", version=9)
    v8 = ctx.commit("g", {"t": {0: 1}}, generation=3, member_id="m", version=8)
    assert set(partition_errors(v9).values()) == {Errors.GROUP_ID_NOT_FOUND}
    assert set(partition_errors(v8).values()) == {Errors.ILLEGAL_GENERATION}
    assert ctx.coord.groups == {} and ctx.log == []


def test_member_commits_are_fenced_by_member_instance_and_generation() -> None:
    ctx = GroupsTestContext()
    leader, _ = ctx.stable_group("g", n=2)
    ok = ctx.commit("g", {"t": {0: 5}}, generation=1, member_id=leader)
    assert partition_errors(ok) == {("t", 0): 0}
    cases = [
        (Errors.ILLEGAL_GENERATION, {"generation": 2, "member_id": leader}),
        (Errors.UNKNOWN_MEMBER_ID, {"generation": 1, "member_id": "stranger"}),
        (Errors.UNKNOWN_MEMBER_ID, {"generation": 1, "member_id": leader, "instance_id": "pod-x"}),  # unknown instance
    ]  # FENCED_INSTANCE_ID on commit: test_groups_static
    for expected, kw in cases:
        resp = ctx.commit("g", {"t": {0: 6}}, **kw)
        assert partition_errors(resp) == {("t", 0): expected}, kw
    # generation -1 without identity is only for Empty groups
    assert partition_errors(ctx.commit("g", {"t": {0: 7}})) == {("t", 0): Errors.UNKNOWN_MEMBER_ID}
    assert partition_errors(ctx.commit("g", {"t": {0: 7}}, member_id=leader)) == {("t", 0): Errors.ILLEGAL_GENERATION}
    assert committed(ctx.fetch("g", {"t": [0]})) == {("t", 0): 5}


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    ctx = GroupsTestContext()
    m, _ = ctx.join_new_member("g")
    ctx.sleep(0)
    resp = ctx.commit("g", {"t": {0: 1}}, generation=1, member_id=m)
    assert partition_errors(resp) == {("t", 0): Errors.REBALANCE_IN_PROGRESS}


def test_commit_of_the_previous_generation_is_accepted_while_preparing_rebalance() -> None:
    ctx = GroupsTestContext()
    a, b = ctx.stable_group("g", n=2)
    ctx.join("g", a)
    assert ctx.state("g") == "PreparingRebalance"
    assert partition_errors(ctx.commit("g", {"t": {0: 9}}, generation=1, member_id=b)) == {("t", 0): 0}


def test_commit_to_an_empty_group_needs_generation_minus_one() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g")
    ctx.leave("g", (m, None))
    assert partition_errors(ctx.commit("g", {"t": {0: 1}})) == {("t", 0): 0}
    assert partition_errors(ctx.commit("g", {"t": {0: 1}}, generation=2, member_id=m)) == {
        ("t", 0): Errors.UNKNOWN_MEMBER_ID}


def test_oversized_metadata_fails_only_that_partition() -> None:
    ctx = GroupsTestContext(offset_metadata_max_bytes=8)
    op_ok = ctx.commit("g", {"t": {0: 1}}, metadata="12345678")
    op_big = ctx.commit("g", {"t": {1: 1}}, metadata="123456789")
    assert partition_errors(op_ok) == {("t", 0): 0}
    assert partition_errors(op_big) == {("t", 1): Errors.OFFSET_METADATA_TOO_LARGE}
    assert committed(ctx.fetch("g", {"t": [0, 1]})) == {("t", 0): 1, ("t", 1): -1}
    # measured in Java chars, as Kafka does: a character outside the BMP is two
    assert partition_errors(ctx.commit("g", {"t": {2: 1}}, metadata="\U0001F600" * 4)) == {("t", 2): 0}
    assert partition_errors(ctx.commit("g", {"t": {3: 1}}, metadata="é" * 8)) == {("t", 3): 0}
    assert partition_errors(ctx.commit("g", {"t": {4: 1}}, metadata="1234567\U0001F600")) == {
        ("t", 4): Errors.OFFSET_METADATA_TOO_LARGE}


def test_commits_keep_a_classic_members_session_alive() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g", session=10_000)
    for i in range(6):  # no heartbeats, only commits (Kafka renews the session on commit)
        ctx.sleep(8000)
        assert partition_errors(ctx.commit("g", {"t": {0: i}}, generation=1, member_id=m)) == {("t", 0): 0}
    assert ctx.state("g") == "Stable"


# -------------------------------------------------------------------- fetch
def test_fetch_of_never_committed_partitions_and_unknown_groups() -> None:
    ctx = GroupsTestContext()
    resp = ctx.fetch("nope", {"t": [0, 3]})
    assert resp.error == 0
    assert resp["topics"] == [{"name": "t", "partitions": [
        {"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": 0}
        for i in (0, 3)]}]
    assert ctx.fetch("nope")["topics"] == []
    assert ctx.coord.groups == {}  # fetching creates nothing


def test_fetch_all_returns_every_committed_offset() -> None:
    ctx = GroupsTestContext()
    ctx.commit("g", {"a": {0: 1, 2: 3}, "b": {1: 7}})
    assert committed(ctx.fetch("g")) == {("a", 0): 1, ("a", 2): 3, ("b", 1): 7}


# ------------------------------------------------------------------- delete
def test_offset_delete_errors() -> None:
    ctx = GroupsTestContext()
    assert ctx.call("offset_delete", {"group_id": "", "topics": []}).error == Errors.INVALID_GROUP_ID
    assert ctx.call("offset_delete", {"group_id": "nope", "topics": []}).error == Errors.GROUP_ID_NOT_FOUND
    ctx.stable_group("g", protocol_type="connect")
    resp = ctx.call("offset_delete", {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]})
    assert resp.error == Errors.NON_EMPTY_GROUP


def test_offset_delete_on_a_consumer_group_refuses_subscribed_topics() -> None:
    ctx = GroupsTestContext()
    [m] = ctx.stable_group("g", topics=("sub",))
    ctx.commit("g", {"sub": {0: 1}, "old": {0: 2, 1: 3}}, generation=1, member_id=m)
    resp = ctx.call("offset_delete", {"group_id": "g", "topics": [
        {"name": "sub", "partitions": [{"partition_index": 0}]},
        {"name": "old", "partitions": [{"partition_index": 0}, {"partition_index": 5}]}]})
    assert resp.error == 0
    assert partition_errors(resp) == {("sub", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC, ("old", 0): 0, ("old", 5): 0}
    assert ctx.last_records == [Record(RecordType.OFFSET_COMMIT, ("org-a", "g", "old", 0), None)]
    assert committed(ctx.fetch("g")) == {("sub", 0): 1, ("old", 1): 3}


def test_offset_delete_on_an_empty_group_writes_tombstones() -> None:
    ctx = GroupsTestContext()
    ctx.commit("g", {"t": {0: 1, 1: 2}})
    resp = ctx.call("offset_delete", {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 1}]}]})
    assert partition_errors(resp) == {("t", 0): 0, ("t", 1): 0}
    assert all(r.value is None for r in ctx.last_records) and len(ctx.last_records) == 2
    assert committed(ctx.fetch("g", {"t": [0, 1]})) == {("t", 0): -1, ("t", 1): -1}
    assert ctx.coord.offsets.count == 0


# --------------------------------------------------------------- expiration
def test_offsets_of_an_empty_group_expire_after_retention_then_the_group_goes() -> None:
    ctx = GroupsTestContext(offsets_retention_ms=7 * DAY)
    [m] = ctx.stable_group("g")
    ctx.commit("g", {"t": {0: 5}}, generation=1, member_id=m)
    ctx.sleep(3 * DAY)
    ctx.heartbeat("g", m, 1)  # long gone: the member expired after 10 s and the group is Empty
    assert ctx.state("g") == "Empty"
    assert committed(ctx.fetch("g", {"t": [0]})) == {("t", 0): 5}
    ctx.sleep(7 * DAY)
    assert committed(ctx.fetch("g", {"t": [0]})) == {("t", 0): -1}
    assert ctx.state("g") == "Dead"
    assert ctx.coord.group_stats()["expired_offsets"] == 1


def test_simple_group_offsets_expire_per_commit_time() -> None:
    ctx = GroupsTestContext(offsets_retention_ms=DAY)
    ctx.commit("g", {"t": {0: 1}})
    ctx.sleep(DAY // 2)
    ctx.commit("g", {"t": {1: 2}})
    ctx.sleep(DAY // 2 + 600_000)
    assert committed(ctx.fetch("g")) == {("t", 1): 2}
    assert ctx.state("g") == "Empty"


def test_an_offset_committed_with_its_own_retention_expires_then() -> None:
    """OffsetCommit v2–4 retention_time: that offset expires at commit time + it, whatever the
    broker's retention and however recently the group became Empty (Kafka's
    OffsetExpirationConditionImpl); a later commit without one brings back the default."""
    hour = 3_600_000
    ctx = GroupsTestContext(offsets_retention_ms=7 * DAY)
    [m] = ctx.stable_group("g", session=60_000)
    ctx.commit("g", {"t": {0: 5, 1: 6, 2: 7}}, generation=1, member_id=m, version=2, retention_time=hour)
    ctx.commit("g", {"t": {2: 8}}, generation=1, member_id=m, version=2)
    ctx.leave("g", (m, None))
    assert ctx.state("g") == "Empty"
    ctx.sleep(hour - 1)
    assert committed(ctx.fetch("g")) == {("t", 0): 5, ("t", 1): 6, ("t", 2): 8}
    ctx.sleep(600_000)
    assert committed(ctx.fetch("g")) == {("t", 2): 8}, "the default retention still keeps the recommitted one"
    assert ctx.state("g") == "Empty"
    ctx.sleep(7 * DAY)
    assert ctx.state("g") == "Dead"


def test_an_own_retention_of_a_simple_consumer_counts_from_its_commit() -> None:
    ctx = GroupsTestContext(offsets_retention_ms=DAY)
    ctx.commit("g", {"t": {0: 1}}, version=4, retention_time=2 * DAY)
    ctx.commit("g", {"u": {0: 2}}, version=4)
    ctx.sleep(DAY + 600_000)
    assert committed(ctx.fetch("g")) == {("t", 0): 1}, "its own retention outlives the broker's"
    ctx.sleep(DAY)
    assert committed(ctx.fetch("g")) == {}


def test_stable_consumer_group_keeps_offsets_of_subscribed_topics() -> None:
    ctx = GroupsTestContext(offsets_retention_ms=DAY)
    [m] = ctx.stable_group("g", topics=("live",), session=60_000)
    ctx.commit("g", {"live": {0: 1}, "gone": {0: 2}}, generation=1, member_id=m)
    for _ in range(int(DAY * 1.1) // 50_000):
        ctx.sleep(50_000)
        ctx.heartbeat("g", m, 1)
    assert committed(ctx.fetch("g")) == {("live", 0): 1}
    assert ctx.state("g") == "Stable"


def test_empty_group_without_offsets_is_removed_by_the_expiration_pass() -> None:
    ctx = GroupsTestContext(offsets_retention_check_interval_ms=600_000)
    first = ctx.join("g", "")
    assert first.error == Errors.MEMBER_ID_REQUIRED and ctx.state("g") == "Empty"
    records = ctx.sleep(600_000)
    assert ctx.state("g") == "Dead"
    assert records[-1] == Record(RecordType.GROUP_METADATA, ("org-a", "g"), None)


# -------------------------------------------------------------- storage form
def test_sparse_hostile_and_negative_partitions_round_trip() -> None:
    ctx = GroupsTestContext()
    parts = {0: 1, 2: 3, 5: 6, 2**31 - 1: 7, 100_000: 8, -1: 9}
    ctx.commit("g", {"t": parts}, metadata="x")
    assert committed(ctx.fetch("g", {"t": list(parts)})) == {("t", p): o for p, o in parts.items()}
    assert committed(ctx.fetch("g")) == {("t", p): o for p, o in parts.items()}
    assert ctx.coord.offsets.count == len(parts)
    ctx.call("offset_delete", {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": p} for p in (2**31 - 1, 0)]}]})
    assert committed(ctx.fetch("g")) == {("t", 2): 3, ("t", 5): 6, ("t", 100_000): 8, ("t", -1): 9}
    assert ctx.coord.offsets.count == 4


def test_dense_partitions_overwrite_and_delete_keep_the_count_exact() -> None:
    ctx = GroupsTestContext()
    ctx.commit("g", {"t": {p: p for p in range(300)}})
    ctx.commit("g", {"t": {p: p + 1000 for p in range(0, 300, 2)}}, metadata="é" * 3)
    fetched = ctx.fetch("g", {"t": [0, 1, 299]})["topics"][0]["partitions"]
    assert [(p["committed_offset"], p["metadata"]) for p in fetched] == [(1000, "ééé"), (1, ""), (299, "")]
    ctx.call("offset_delete", {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": p} for p in range(150, 300)]}]})
    assert ctx.coord.offsets.count == 150 and len(committed(ctx.fetch("g"))) == 150
    ctx.call("offset_delete", {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": p} for p in range(150)]}]})
    assert ctx.coord.offsets.count == 0 and ctx.coord.offsets.group_count() == 0
    assert ctx.fetch("g")["topics"] == []


def test_large_offsets_epochs_and_timestamps_are_exact() -> None:
    ctx = GroupsTestContext()
    ctx.commit("g", {"t": {0: 2**63 - 1}}, leader_epoch=2**31 - 1)
    [p] = ctx.fetch("g", {"t": [0]})["topics"][0]["partitions"]
    assert p["committed_offset"] == 2**63 - 1 and p["committed_leader_epoch"] == 2**31 - 1
    assert ctx.coord.offsets.get("org-a", "g", "t", 0)[3] == ctx.now


def test_offset_commit_records_in_the_older_dict_format_still_replay() -> None:
    """A write-ahead log from before packed entries recovers the same committed offsets."""
    ctx = GroupsTestContext()
    ctx.write([Record(RecordType.OFFSET_COMMIT, (ctx.org, "old", "t", 0),
                      {"offset": 42, "leader_epoch": 5, "metadata": "m", "commit_ts": ctx.now})])
    assert committed(ctx.fetch("old", {"t": [0]})) == {("t", 0): 42}
    assert ctx.coord.offsets.get(ctx.org, "old", "t", 0) == (42, 5, "m", ctx.now)


def test_deleting_a_topic_drops_every_groups_offsets_of_it_and_nothing_else() -> None:
    """Kafka's coordinator drops the offsets of deleted partitions: a topic created again under
    the same name must not resume from the old topic's offsets."""
    ctx = GroupsTestContext()
    ctx.commit("g1", {"gone": {0: 8, 3: 9}, "kept": {0: 1}})
    ctx.commit("g2", {"gone": {1: 4}})
    ctx.call("offset_commit", commit_op("g1", {"gone": {0: 5}}), org="org-b")
    resp = ctx.call("delete_topic_offsets", {"topics": ["gone"]})
    assert resp["deleted"] == 3 and all(r.value is None for r in ctx.last_records)
    assert committed(ctx.fetch("g1")) == {("kept", 0): 1}
    assert committed(ctx.fetch("g2")) == {}
    assert committed(ctx.call("offset_fetch", fetch_op("g1"), org="org-b")) == {("gone", 0): 5}, \
        "another organisation's topic"
