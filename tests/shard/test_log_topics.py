"""TopicCatalog: create/delete/grow/describe topics, every error code, replay."""

from __future__ import annotations

import uuid
from typing import Any

import msgpack
import pytest

from rafka.shard.log.config import DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG
from rafka.shard.log.errors import Errors
from rafka.shard.log.topics import ZERO_UUID, TopicCatalog
from rafka.shard.records import Record, RecordType

ORG = "acme"


class Ctx:
    """Calls a handler, replays its records, keeps them for a rebuild."""

    def __init__(self, **kw: Any) -> None:
        ids = iter(uuid.UUID(int=i) for i in range(1, 10_000))
        self.catalog = TopicCatalog(new_topic_id=lambda: next(ids), **kw)
        self.log: list[Record] = []

    def run(self, handler: str, *args: Any) -> Any:
        records, response = getattr(self.catalog, handler)(*args)
        for r in records:
            self.catalog.replay(r)
        self.log += records
        return response

    def create(self, name: str, partitions: int = 3, org: str = ORG, **op: Any) -> dict[str, Any]:
        return self.run(
            "create_topic",
            org,
            {"name": name, "num_partitions": partitions, "replication_factor": op.pop("rf", 1), **op},
            1000,
        )


@pytest.fixture
def ctx() -> Ctx:
    return Ctx()


def test_create_topic_returns_id_partitions_and_config_sources(ctx: Ctx) -> None:
    resp = ctx.create("orders", 3, configs={"retention.ms": "1000"})
    assert resp["error_code"] == Errors.NONE and resp["topic_id"] == uuid.UUID(int=1)
    assert (resp["num_partitions"], resp["replication_factor"]) == (3, 1)
    sources = {c["name"]: (c["value"], c["config_source"]) for c in resp["configs"]}
    assert sources["retention.ms"] == ("1000", DYNAMIC_TOPIC_CONFIG)
    assert sources["segment.bytes"] == ("1073741824", DEFAULT_CONFIG)
    types = {c["name"]: c["config_type"] for c in resp["configs"]}
    assert (types["retention.ms"], types["segment.bytes"], types["cleanup.policy"]) == (5, 3, 7)  # LONG, INT, LIST
    info = ctx.catalog.topic(ORG, "orders")
    assert info is not None and info.partitions == 3 and info.configs == {"retention.ms": "1000"}
    assert ctx.catalog.topic_by_id(ORG, uuid.UUID(int=1)) == info
    assert ctx.catalog.topic_by_id(ORG, str(uuid.UUID(int=1))) == info
    assert ctx.log == [
        Record(
            RecordType.TOPIC,
            (ORG, "orders"),
            {"id": str(uuid.UUID(int=1)), "partitions": 3, "configs": {"retention.ms": "1000"}, "created_ms": 1000,
             "config_version": 1, "incarnation": 1},
        )
    ]


def test_versions_grow_across_delete_and_create_and_survive_compaction(ctx: Ctx) -> None:
    """Partition logs order incarnations of one name by these versions (see LogManager)."""
    ctx.create("t")
    alter(ctx, ("retention.ms", SET, "5"))
    old = ctx.catalog.topic(ORG, "t")
    assert (old.incarnation, old.config_version) == (1, 2)
    ctx.run("delete_topics", ORG, {"topics": [{"name": "t"}]})
    # compaction keeps only the last record of each key: here the deletion marker
    rebuilt = Ctx()
    rebuilt.catalog.replay(ctx.log[-1])
    for catalog in (ctx.catalog, rebuilt.catalog):
        records, resp = catalog.create_topic(ORG, {"name": "t", "num_partitions": 1, "replication_factor": 1}, 2000)
        assert resp["error_code"] == Errors.NONE and records[0].value["incarnation"] == 3
    assert rebuilt.catalog.topic(ORG, "t") is None, "the marker is not a topic"
    ctx.create("other", org="another-org")
    assert ctx.catalog.topic("another-org", "other").incarnation == 1, "each org counts its own versions"


def test_records_from_before_versions_replay_and_later_versions_exceed_them(ctx: Ctx) -> None:
    legacy = {"id": str(uuid.UUID(int=7)), "partitions": 2, "configs": {}, "created_ms": 5, "config_version": 4}
    ctx.catalog.replay(Record(RecordType.TOPIC, (ORG, "old"), legacy))  # no incarnation; per-topic versions
    ctx.catalog.replay(Record(RecordType.TOPIC, (ORG, "gone"), dict(legacy, id=str(uuid.UUID(int=8)))))
    ctx.catalog.replay(Record(RecordType.TOPIC, (ORG, "gone"), None))  # the old tombstone
    info = ctx.catalog.topic(ORG, "old")
    assert info is not None and (info.incarnation, info.config_version) == (0, 4)
    assert ctx.catalog.topic(ORG, "gone") is None
    assert ctx.create("gone")["error_code"] == Errors.NONE
    assert ctx.catalog.topic(ORG, "gone").incarnation == 5, "above every version replayed"


def test_default_partitions_and_replication_factor(ctx: Ctx) -> None:
    resp = ctx.create("t", -1, rf=-1)
    assert resp["error_code"] == Errors.NONE and resp["num_partitions"] == 1
    assert Ctx(default_partitions=6).create("t", -1)["num_partitions"] == 6


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/", "ünï", "a:b"])
def test_invalid_topic_names(ctx: Ctx, name: str) -> None:
    resp = ctx.create(name)
    assert resp["error_code"] == Errors.INVALID_TOPIC_EXCEPTION and resp["topic_id"] == ZERO_UUID
    assert ctx.log == []


@pytest.mark.parametrize("name", ["a" * 249, "A-b_c.9", "...", "__x"])
def test_valid_topic_names(ctx: Ctx, name: str) -> None:
    assert ctx.create(name)["error_code"] == Errors.NONE


def test_topic_already_exists_and_collision(ctx: Ctx) -> None:
    ctx.create("a.b")
    assert ctx.create("a.b")["error_code"] == Errors.TOPIC_ALREADY_EXISTS
    clash = ctx.create("a_b")
    assert clash["error_code"] == Errors.INVALID_TOPIC_EXCEPTION and "collides" in clash["error_message"]


def test_orgs_are_isolated(ctx: Ctx) -> None:
    ctx.create("t", org="one")
    assert ctx.create("t", org="two")["error_code"] == Errors.NONE
    assert [t.name for t in ctx.catalog.list_topics("one")] == ["t"]
    assert ctx.catalog.topic("three", "t") is None


@pytest.mark.parametrize("rf", [0, 2, 3, -2])
def test_invalid_replication_factor(ctx: Ctx, rf: int) -> None:
    assert ctx.create("t", rf=rf)["error_code"] == Errors.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize("partitions", [0, -2])
def test_invalid_partitions(ctx: Ctx, partitions: int) -> None:
    r = ctx.create("t", partitions, rf=3)  # checked before the replication factor's placement, as in Kafka
    assert (r["error_code"], r["error_message"]) == (
        Errors.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")


def test_the_partition_cap_is_per_request_and_fails_the_whole_request(ctx: Ctx) -> None:
    """Kafka caps the partitions one CreateTopics asks for in all (10,000), not each topic's."""
    def create(*counts: int) -> list[tuple[int, str | None]]:
        topics = [{"name": f"t{i}", "num_partitions": n, "replication_factor": 1} for i, n in enumerate(counts)]
        resp = ctx.run("create_topics", ORG, {"topics": topics, "validate_only": True}, 1000)
        return [(t["error_code"], t["error_message"]) for t in resp["topics"]]

    too_many = (Errors.POLICY_VIOLATION, "Excessively large number of partitions per request.")
    assert create(6000, 6000) == [too_many, too_many]
    assert create(10_001, 0) == [too_many, too_many]
    assert create(5000, 5000) == [(Errors.NONE, None), (Errors.NONE, None)]
    assert ctx.create("alone", 10_001)["error_code"] == Errors.POLICY_VIOLATION


@pytest.mark.parametrize(
    "configs",
    [
        {"compression.type": "brotli"},
        {"cleanup.policy": "compacted"},
        {"message.timestamp.type": "createtime"},
        {"message.timestamp.difference.max.ms": "1000"},  # removed in Kafka 4
        {"min.insync.replicas": "0"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"preallocate": "yes"},
        {"compression.gzip.level": "0"},
        {"leader.replication.throttled.replicas": "0-1"},
        {"remote.storage.enable": "true"},
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
        {"retention.ms": "soon"},
        {"retention.ms": "-2"},
        {"segment.bytes": "100"},
        {"max.message.bytes": "-1"},
        {"max.message.bytes": str(2**31)},
        {"retention.bytes": None},
    ],
)
def test_invalid_configs(ctx: Ctx, configs: dict[str, Any]) -> None:
    resp = ctx.create("t", configs=configs)
    assert resp["error_code"] == Errors.INVALID_CONFIG and ctx.catalog.topic(ORG, "t") is None


def test_supported_configs_accepted_in_list_form(ctx: Ctx) -> None:
    configs = [
        {"name": "retention.bytes", "value": "-1"},
        {"name": "cleanup.policy", "value": "delete"},
        {"name": "segment.bytes", "value": "1048576"},
        {"name": "max.message.bytes", "value": "10"},
    ]
    assert ctx.create("t", configs=configs)["error_code"] == Errors.NONE


def test_every_kafka_topic_config_is_accepted_and_described(ctx: Ctx) -> None:
    """Tools create topics with whatever configs they need (Kafka Streams, Connect, kafka-topics
    --config): every key Kafka 4 defines is accepted with a valid value and described back."""
    configs = {
        "cleanup.policy": "compact,delete", "compression.type": "lz4", "compression.lz4.level": "17",
        "compression.gzip.level": "-1", "compression.zstd.level": "-5", "delete.retention.ms": "0",
        "file.delete.delay.ms": "1", "flush.messages": "1", "flush.ms": "0",
        "follower.replication.throttled.replicas": "0:1,1:2", "leader.replication.throttled.replicas": "*",
        "index.interval.bytes": "0", "local.retention.bytes": "-2", "local.retention.ms": "-2",
        "max.compaction.lag.ms": "5", "min.compaction.lag.ms": "5", "message.timestamp.type": "LogAppendTime",
        "message.timestamp.after.max.ms": "0", "message.timestamp.before.max.ms": "0",
        "min.cleanable.dirty.ratio": "0.01", "min.insync.replicas": "2", "preallocate": "TRUE",
        "remote.log.copy.disable": "false", "remote.log.delete.on.disable": "false",
        "remote.storage.enable": "false", "segment.index.bytes": "4", "segment.jitter.ms": "9",
        "unclean.leader.election.enable": "true",
    }
    resp = ctx.create("t", configs=configs)
    assert resp["error_code"] == Errors.NONE, resp["error_message"]
    described = {c["name"]: (c["value"], c["config_source"], c["config_type"])
                 for c in ctx.catalog.describe_configs(ORG, "t")["configs"]}
    assert {name: described[name][0] for name in configs} == configs
    assert described["min.insync.replicas"][1:] == (DYNAMIC_TOPIC_CONFIG, 3)  # INT
    assert described["preallocate"][2] == 1 and described["min.cleanable.dirty.ratio"][2] == 6  # BOOLEAN, DOUBLE
    assert described["message.timestamp.type"][2] == 2  # STRING
    assert described["retention.ms"][:2] == ("604800000", DEFAULT_CONFIG)
    assert described["message.timestamp.after.max.ms"] == ("0", DYNAMIC_TOPIC_CONFIG, 5)


def test_validate_only_writes_nothing(ctx: Ctx) -> None:
    resp = ctx.create("t", validate_only=True)
    assert resp["error_code"] == Errors.NONE and resp["topic_id"] == ZERO_UUID and ctx.log == []
    assert ctx.create("t..", rf=5, validate_only=True)["error_code"] == Errors.INVALID_REPLICATION_FACTOR


def test_create_topic_with_null_configs_names_them_all_first(ctx: Ctx) -> None:
    # Kafka's ReplicationControlManager checks null values before any config is validated
    resp = ctx.create("t", configs={"no.such.config": "1", "retention.ms": None, "segment.ms": None})
    assert (resp["error_code"], resp["error_message"]) == (
        Errors.INVALID_CONFIG, "Null value not supported for topic configs: retention.ms,segment.ms")
    assert ctx.catalog.topic(ORG, "t") is None and ctx.log == []


def test_create_topics_duplicates_in_one_request(ctx: Ctx) -> None:
    resp = ctx.run(
        "create_topics",
        ORG,
        {
            "topics": [
                {"name": "x", "num_partitions": 1},
                {"name": "y"},
                {"name": "x", "num_partitions": 2},
                {"name": "y.z"},
                {"name": "y_z"},
            ]
        },
        5,
    )
    codes = [t["error_code"] for t in resp["topics"]]
    assert codes == [
        Errors.INVALID_REQUEST,
        Errors.NONE,
        Errors.INVALID_REQUEST,
        Errors.NONE,
        Errors.INVALID_TOPIC_EXCEPTION,
    ]
    assert [t.name for t in ctx.catalog.list_topics(ORG)] == ["y", "y.z"]


def test_delete_by_name_and_by_id(ctx: Ctx) -> None:
    a, b = ctx.create("a", 2), ctx.create("b", 4)
    resp = ctx.run("delete_topics", ORG, {"topics": [{"name": "a"}, {"topic_id": b["topic_id"]}]})
    assert [(t["name"], t["error_code"], t["num_partitions"]) for t in resp["topics"]] == [
        ("a", Errors.NONE, 2),
        ("b", Errors.NONE, 4),
    ]
    assert resp["topics"][0]["topic_id"] == a["topic_id"]
    assert ctx.catalog.list_topics(ORG) == [] and ctx.log[-1] == Record(RecordType.TOPIC, (ORG, "b"), {"deleted": 2})
    # the name is free again, with a new id, and no longer collides
    again = ctx.create("a")
    assert again["error_code"] == Errors.NONE and again["topic_id"] != a["topic_id"]


def test_delete_unknown_topic_and_unknown_id(ctx: Ctx) -> None:
    resp = ctx.run("delete_topics", ORG, {"topics": [{"name": "nope"}, {"topic_id": uuid.uuid4()}]})
    assert [t["error_code"] for t in resp["topics"]] == [Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_ID]
    ctx.create("t")


def test_delete_refuses_what_kafka_refuses(ctx: Ctx) -> None:
    """As Kafka's ControllerApis.deleteTopics: duplicates are answered once and not deleted,
    an entry must name a topic one way, and a topic named by id and by name stays."""
    t, u = ctx.create("t"), ctx.create("u")
    ctx.create("v")
    other = uuid.uuid4()
    op = {"topics": [{"name": "t"}, {"name": "t"}, {"topic_id": other}, {"topic_id": other}, {},
                     {"name": "v", "topic_id": u["topic_id"]}, {"topic_id": u["topic_id"]}, {"name": "u"},
                     {"name": "v"}]}
    resp = ctx.run("delete_topics", ORG, op)
    assert [(r["name"], r["error_code"], r["error_message"]) for r in resp["topics"]] == [
        ("t", Errors.INVALID_REQUEST, "Duplicate topic name."),
        (None, Errors.INVALID_REQUEST, "Duplicate topic id."),
        (None, Errors.INVALID_REQUEST, "Neither topic name nor id were specified."),
        ("v", Errors.INVALID_REQUEST, "You may not specify both topic name and topic id."),
        ("u", Errors.INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied."),
        ("v", Errors.NONE, None),
    ]
    assert resp["topics"][1]["topic_id"] == other and resp["topics"][4]["topic_id"] == u["topic_id"]
    assert [i.name for i in ctx.catalog.list_topics(ORG)] == ["t", "u"]
    assert t["error_code"] == Errors.NONE


def test_create_partitions_answers_a_duplicate_once(ctx: Ctx) -> None:
    ctx.create("t", 1)
    ctx.create("u", 1)
    op = {"topics": [{"name": "t", "count": 2}, {"name": "u", "count": 2}, {"name": "t", "count": 3}]}
    resp = ctx.run("create_partitions", ORG, op, 0)
    assert [(r["name"], r["error_code"], r["error_message"]) for r in resp["topics"]] == [
        ("t", Errors.INVALID_REQUEST, "Duplicate topic name."), ("u", Errors.NONE, None)]
    assert ctx.catalog.topic(ORG, "t").partitions == 1  # type: ignore[union-attr]
    assert ctx.catalog.topic(ORG, "u").partitions == 2  # type: ignore[union-attr]


def test_create_partitions_increase_only(ctx: Ctx) -> None:
    ctx.create("t", 3)
    op: dict[str, Any] = {"topics": [{"name": "t", "count": 2}]}
    assert ctx.run("create_partitions", ORG, op, 0)["topics"][0] == {
        "name": "t", "error_code": Errors.INVALID_PARTITIONS,
        "error_message": "The topic t currently has 3 partition(s); 2 would not be an increase."}
    op = {"topics": [{"name": "t", "count": 3}]}
    assert ctx.run("create_partitions", ORG, op, 0)["topics"][0]["error_message"] == "Topic already has 3 partition(s)."
    op = {"topics": [{"name": "t", "count": 5}], "validate_only": True}
    assert ctx.run("create_partitions", ORG, op, 0)["topics"][0]["error_code"] == Errors.NONE
    assert ctx.catalog.topic(ORG, "t").partitions == 3  # type: ignore[union-attr]
    op = {"topics": [{"name": "t", "count": 5}, {"name": "missing", "count": 2}]}
    codes = [t["error_code"] for t in ctx.run("create_partitions", ORG, op, 0)["topics"]]
    assert codes == [Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION]
    info = ctx.catalog.topic(ORG, "t")
    assert info is not None and info.partitions == 5 and info.topic_id == uuid.UUID(int=1)
    dup = {"topics": [{"name": "t", "count": 9}, {"name": "t", "count": 9}]}
    assert {t["error_code"] for t in ctx.run("create_partitions", ORG, dup, 0)["topics"]} == {Errors.INVALID_REQUEST}


def test_create_partitions_checks_the_number_of_manual_assignments_first(ctx: Ctx) -> None:
    ctx.create("t", 1)
    refusal = [Errors.INVALID_REPLICA_ASSIGNMENT, "includes broker 5"]
    op: dict[str, Any] = {"topics": [{"name": "t", "count": 3, "assignments": 1, "assignment_refusal": refusal}]}
    assert ctx.run("create_partitions", ORG, op, 0)["topics"][0]["error_message"] == (
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    op["topics"][0]["assignments"] = 2
    assert ctx.run("create_partitions", ORG, op, 0)["topics"][0]["error_message"] == "includes broker 5"
    assert ctx.catalog.topic(ORG, "t").partitions == 1  # type: ignore[union-attr]
    op["topics"][0]["assignment_refusal"] = None
    assert ctx.run("create_partitions", ORG, op, 0)["topics"][0]["error_code"] == Errors.NONE
    assert ctx.catalog.topic(ORG, "t").partitions == 3  # type: ignore[union-attr]


def test_describe_configs_defaults_sources_and_unknown_topic(ctx: Ctx) -> None:
    ctx.create("t", configs={"retention.bytes": "100"})
    resp = ctx.catalog.describe_configs(ORG, "t", ["retention.bytes", "retention.ms", "no.such"])
    assert resp["error_code"] == Errors.NONE
    assert [(c["name"], c["value"], c["config_source"], c["is_default"]) for c in resp["configs"]] == [
        ("retention.bytes", "100", DYNAMIC_TOPIC_CONFIG, False),
        ("retention.ms", "604800000", DEFAULT_CONFIG, True),
    ]
    assert len(ctx.catalog.describe_configs(ORG, "t")["configs"]) >= 5
    assert ctx.catalog.describe_configs(ORG, "x") == {"error_code": Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                                      "error_message": None, "configs": []}
    for illegal in ("", "bad name!"):
        assert ctx.catalog.describe_configs(ORG, illegal)["error_code"] == Errors.INVALID_TOPIC_EXCEPTION


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def alter(ctx: Ctx, *configs: tuple[str, int, str | None], incremental: bool = True, **op: Any) -> dict[str, Any]:
    return ctx.run("alter_configs", ORG, {"name": "t", "configs": [list(c) for c in configs],
                                          "incremental": incremental, **op})


def test_incremental_alter_configs_sets_and_deletes_overrides(ctx: Ctx) -> None:
    ctx.create("t", 4, configs={"retention.ms": "1000", "segment.ms": "5000"})
    resp = alter(ctx, ("max.message.bytes", SET, "2000"), ("retention.ms", DELETE, None))
    assert resp == {"error_code": Errors.NONE, "error_message": None, "partitions": 4, "config_version": 2,
                    "configs": {"segment.ms": "5000", "max.message.bytes": "2000"}, "topic_id": str(uuid.UUID(int=1))}
    info = ctx.catalog.topic(ORG, "t")
    assert (info.configs, info.config_version) == ({"segment.ms": "5000", "max.message.bytes": "2000"}, 2)
    assert info.topic_id == uuid.UUID(int=1) and info.partitions == 4, "the topic keeps its id and partitions"
    written = len(ctx.log)
    # deleting an absent override, or a config no topic has (Kafka ignores it), changes nothing
    resp = alter(ctx, ("retention.ms", DELETE, None), ("min.insync.replicas", DELETE, None))
    assert (resp["error_code"], resp["config_version"]) == (Errors.NONE, 2) and len(ctx.log) == written
    assert alter(ctx, ("retention.ms", SET, "5"))["config_version"] == 3


def test_alter_configs_replaces_every_override(ctx: Ctx) -> None:
    ctx.create("t", configs={"retention.ms": "1000"})
    assert alter(ctx, ("segment.ms", SET, "60000"), incremental=False)["configs"] == {"segment.ms": "60000"}
    assert alter(ctx, incremental=False)["configs"] == {}


@pytest.mark.parametrize(("key", "value", "shown", "why"), [
    ("retention.ms", "1e3", "1e3", "Not a number of type LONG"),
    ("retention.ms", "1_000", "1_000", "Not a number of type LONG"),
    ("retention.ms", "-5", "-5", "Value must be at least -1"),
    ("max.message.bytes", "2147483648", "2147483648", "Not a number of type INT"),
    ("compression.lz4.level", "18", "18", "Value must be no more than 17"),
    ("min.cleanable.dirty.ratio", "2", "2.0", "Value must be no more than 1"),
    ("compression.gzip.level", "0", "0", "Value must be between 1 and 9 or equal to -1"),
    ("compression.gzip.level", "x", "x", "Not a number of type INT"),
])
def test_number_refusals_read_as_kafkas_config_def(ctx: Ctx, key: str, value: str, shown: str, why: str) -> None:
    ctx.create("t")
    resp = alter(ctx, (key, SET, value))
    assert (resp["error_code"], resp["error_message"]) == (
        Errors.INVALID_CONFIG, f"Invalid value {shown} for configuration {key}: {why}")


def test_append_and_subtract_only_for_list_configs(ctx: Ctx) -> None:
    ctx.create("t")
    assert alter(ctx, ("cleanup.policy", APPEND, "delete"))["configs"] == {"cleanup.policy": "delete"}
    assert alter(ctx, ("cleanup.policy", APPEND, "compact"))["configs"] == {"cleanup.policy": "delete,compact"}
    assert alter(ctx, ("cleanup.policy", SUBTRACT, "delete"))["configs"] == {"cleanup.policy": "compact"}
    assert alter(ctx, ("cleanup.policy", SUBTRACT, "compact"))["configs"] == {"cleanup.policy": ""}  # Kafka allows it
    resp = alter(ctx, ("cleanup.policy", APPEND, "archive"))
    assert (resp["error_code"], resp["error_message"]) == (
        Errors.INVALID_CONFIG,
        "Invalid value archive for configuration cleanup.policy: String must be one of: compact, delete")
    resp = alter(ctx, ("leader.replication.throttled.replicas", APPEND, "0:1"))
    assert resp["configs"]["leader.replication.throttled.replicas"] == "0:1"
    resp = alter(ctx, ("retention.ms", APPEND, "5"))
    assert (resp["error_code"], resp["error_message"]) == (
        Errors.INVALID_CONFIG, "Can't APPEND to key retention.ms because its type is not LIST.")


@pytest.mark.parametrize(("configs", "code"), [
    ([("no.such", SET, "1")], Errors.INVALID_CONFIG),
    ([("retention.ms", SET, "soon")], Errors.INVALID_CONFIG),
    ([("segment.bytes", SET, "10")], Errors.INVALID_CONFIG),  # below Kafka 4's minimum
    ([("retention.ms", SET, None)], Errors.INVALID_CONFIG),
    ([("retention.ms", SET, "1"), ("retention.ms", SET, "2")], Errors.INVALID_REQUEST),
    ([("retention.ms", 7, "1")], Errors.INVALID_REQUEST),
])
def test_invalid_alterations_change_nothing(ctx: Ctx, configs: list[tuple[str, int, str | None]], code: int) -> None:
    ctx.create("t", configs={"retention.ms": "1000"})
    written = len(ctx.log)
    resp = alter(ctx, *configs)
    assert resp["error_code"] == code and resp["error_message"]
    assert len(ctx.log) == written and ctx.catalog.topic(ORG, "t").configs == {"retention.ms": "1000"}


def test_validate_only_and_unknown_topic_write_nothing(ctx: Ctx) -> None:
    ctx.create("t")
    written = len(ctx.log)
    assert alter(ctx, ("retention.ms", SET, "5"), validate_only=True)["error_code"] == Errors.NONE
    assert len(ctx.log) == written and ctx.catalog.topic(ORG, "t").configs == {}
    resp = ctx.run("alter_configs", ORG, {"name": "x", "configs": [], "incremental": True})
    assert resp["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    # Kafka checks the name before the topic: an illegal one is INVALID_TOPIC_EXCEPTION
    resp = ctx.run("alter_configs", ORG, {"name": "bad name!", "configs": [], "incremental": True})
    assert resp["error_code"] == Errors.INVALID_TOPIC_EXCEPTION and "illegal" in resp["error_message"]
    assert len(ctx.log) == written


def test_describe_topics_for_metadata(ctx: Ctx) -> None:
    ctx.create("b", 2)
    ctx.create("a", 1)
    assert [(t["name"], t["num_partitions"]) for t in ctx.catalog.describe_topics(ORG)] == [("a", 1), ("b", 2)]
    codes = [t["error_code"] for t in ctx.catalog.describe_topics(ORG, ["a", "zz", "bad name"])]
    assert codes == [Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.INVALID_TOPIC_EXCEPTION]


def test_replay_from_records_rebuilds_the_same_catalog(ctx: Ctx) -> None:
    ctx.create("a", 2, configs={"retention.ms": "5"})
    ctx.create("b.c", 1)
    ctx.run("create_partitions", ORG, {"topics": [{"name": "a", "count": 4}]}, 0)
    ctx.run("delete_topics", ORG, {"topics": [{"name": "b.c"}]})
    ctx.create("b_c", 7, org="other")
    fresh = TopicCatalog()
    for r in ctx.log:  # through msgpack, as the WAL will store them (tuples become lists)
        raw = msgpack.unpackb(msgpack.packb([r.type, r.key, r.value]))
        fresh.replay(Record(raw[0], tuple(raw[1]), raw[2]))
    for org in (ORG, "other"):
        assert fresh.list_topics(org) == ctx.catalog.list_topics(org)
    assert fresh.create_topic(ORG, {"name": "b_c"}, 0)[1]["error_code"] == Errors.NONE  # collision index rebuilt
    assert fresh.create_topic(ORG, {"name": "a"}, 0)[1]["error_code"] == Errors.TOPIC_ALREADY_EXISTS


def test_handlers_do_not_mutate_state() -> None:
    catalog = TopicCatalog()
    records, _ = catalog.create_topic(ORG, {"name": "t"}, 0)
    assert records and catalog.list_topics(ORG) == []
    with pytest.raises(ValueError):
        catalog.replay(Record(RecordType.PARTITION_BATCH, (ORG, "t", 0), {}))
