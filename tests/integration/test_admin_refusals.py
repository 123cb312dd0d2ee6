"""Admin requests Kafka refuses, part by part, driven by real clients and raw requests:
manual assignments of new partitions, offsets of partitions that do not exist, and ACLs
(a broker without an authorizer)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)

from tests.integration.clients import create_topic, fetch_partition, fetch_request
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def test_create_partitions_checks_manual_assignments(rafka: Rafka) -> None:
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})

    def grow(count: int, assignment: list[list[int]]) -> str | None:
        fut = admin.create_partitions([NewPartitions(topic, count, replica_assignment=assignment)])[topic]
        try:
            fut.result(10)
        except Exception as exc:
            return str(exc)
        return None

    assert "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified" in (grow(3, [[0]]) or "")
    assert "includes broker 5, but no such broker is registered" in (grow(2, [[5]]) or "")
    assert "includes the broker 0 more than once" in (grow(2, [[0, 0]]) or "")
    [md] = admin.list_topics(topic, timeout=10).topics.values()
    assert len(md.partitions) == 1, "refused assignments add nothing"
    assert grow(3, [[0], [0]]) is None
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3


def test_offsets_of_partitions_that_do_not_exist(rafka: Rafka) -> None:
    """OffsetCommit folds refused partitions into the topic's entry; OffsetDelete refuses
    unknown topics and partitions with UNKNOWN_TOPIC_OR_PARTITION, as Kafka does."""
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 1)
    c = Consumer({"bootstrap.servers": rafka.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    c.close()
    partition = {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": ""}
    with RawClient("127.0.0.1", rafka.port) as raw:
        resp = raw.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                  "group_instance_id": None, "topics": [
                                      {"name": topic, "partitions": [partition, {**partition, "partition_index": 7}]}]})
        assert [(t["name"], sorted((p["partition_index"], p["error_code"]) for p in t["partitions"]))
                for t in resp["topics"]] == [(topic, [(0, 0), (7, 3)])]
        deleted = raw.request(47, 0, {"group_id": group, "topics": [
            {"name": topic, "partitions": [{"partition_index": 9}]},
            {"name": topic + "-missing", "partitions": [{"partition_index": 0}]}]})
        assert deleted["error_code"] == 0
        assert sorted((t["name"], p["partition_index"], p["error_code"]) for t in deleted["topics"]
                      for p in t["partitions"]) == [(topic, 9, 3), (topic + "-missing", 0, 3)]
        fetched = raw.request(9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                                     "require_stable": False})
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 5


def test_describe_broker_configs(rafka: Rafka) -> None:
    """This node's id lists the broker configs rafka runs with; another id is INVALID_REQUEST
    and the cluster-default resource "" lists no dynamic defaults, as Kafka answers."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    mine = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([mine])[mine].result(10)
    assert configs["message.max.bytes"].value == "1048588" and configs["default.replication.factor"].value == "1"
    assert configs["log.message.timestamp.after.max.ms"].value == "3600000"
    assert all(c.is_read_only for c in configs.values())
    # a value rafka runs with that is not Kafka's default reads as set in the broker's config, with
    # Kafka's default below it; node.id has no default
    static, default = ConfigSource.STATIC_BROKER_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value
    keys = ["group.initial.rebalance.delay.ms", "message.max.bytes", "node.id"]
    assert {k: configs[k].source for k in keys} == dict(zip(keys, (static, default, static), strict=True))
    with RawClient("127.0.0.1", rafka.port) as raw:  # librdkafka keeps one synonym per name
        resp = raw.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": keys}],
                                   "include_synonyms": True, "include_documentation": False})
    assert {c["name"]: [(s["value"], s["source"]) for s in c["synonyms"]] for c in resp["results"][0]["configs"]} == {
        "group.initial.rebalance.delay.ms": [("0", static), ("3000", default)],
        "message.max.bytes": [("1048588", default)], "node.id": [("0", static)]}
    typed = ["auto.create.topics.enable", "compression.type", "node.id", "offsets.topic.replication.factor",
             "log.retention.bytes", "log.cleanup.policy"]
    with RawClient("127.0.0.1", rafka.port) as raw:  # each config's type in Kafka's ConfigDef
        resp = raw.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": typed}],
                                   "include_synonyms": False, "include_documentation": False})
    assert {c["name"]: c["config_type"] for c in resp["results"][0]["configs"]} == dict(zip(typed, (1, 2, 3, 4, 5, 7)))
    with RawClient("127.0.0.1", rafka.port) as raw:  # librdkafka sends a broker's resource to that broker
        resp = raw.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": name, "configuration_keys": None}
                                                 for name in ("", "7")],
                                   "include_synonyms": False, "include_documentation": False})
    default, other = resp["results"]
    assert (default["error_code"], default["configs"]) == (0, [])
    assert (other["error_code"], other["error_message"]) == (
        42, "Unexpected broker id, expected 0 or empty string, but received 7")


def test_list_offsets_and_fetch_refuse_partitions_as_kafka(rafka: Rafka) -> None:
    """ListOffsets answers INVALID_REQUEST for each copy of a partition named twice; Fetch
    answers UNKNOWN_TOPIC_OR_PARTITION for a partition index the topic does not have."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": rafka.bootstrap})
    for i in range(3):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(10) == 0
    latest = {"current_leader_epoch": -1, "timestamp": -1}
    with RawClient("127.0.0.1", rafka.port) as raw:
        listed = raw.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, **latest}, {"partition_index": 0, **latest},
                                           {"partition_index": 4, **latest}]}]})
        assert [(q["partition_index"], q["error_code"]) for q in listed["topics"][0]["partitions"]] \
            == [(0, 42), (0, 42), (4, 3)]
        single = raw.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, **latest}]}]})
        assert single["topics"][0]["partitions"][0]["offset"] == 3
        fetched = raw.request(1, 11, fetch_request([{"topic": topic, "partitions": [fetch_partition(0), fetch_partition(5)]}],
                                                   min_bytes=0))
    parts = fetched["responses"][0]["partitions"]
    assert [(q["partition_index"], q["error_code"]) for q in parts] == [(0, 0), (5, 3)]
    assert parts[0]["records"], "the real partition's records come back beside the refusal"


def test_create_topics_refuses_duplicates_and_the_metadata_topic(rafka: Rafka) -> None:
    """As Kafka's controller: a name given twice is INVALID_REQUEST "Duplicate topic name."
    (answered once, nothing created), and ``__cluster_metadata`` cannot be created."""
    dup, ok = _name("dup"), _name("ok")

    def topic(name: str) -> dict[str, object]:
        return {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}

    with RawClient("127.0.0.1", rafka.port) as raw:
        resp = raw.request(19, 7, {"topics": [topic(dup), topic(ok), topic(dup), topic("__cluster_metadata")],
                                   "timeout_ms": 5000, "validate_only": False})
    assert [(t["name"], t["error_code"], t["error_message"]) for t in resp["topics"]] == [
        (dup, 42, "Duplicate topic name."), (ok, 0, None),
        ("__cluster_metadata", 42, "Creation of internal topic __cluster_metadata is prohibited.")]
    listed = AdminClient({"bootstrap.servers": rafka.bootstrap}).list_topics(timeout=10).topics
    assert ok in listed and dup not in listed and "__cluster_metadata" not in listed


def test_delete_topics_and_create_partitions_refuse_duplicates(rafka: Rafka) -> None:
    """As Kafka's controller: DeleteTopics and CreatePartitions answer a name given twice
    once, INVALID_REQUEST "Duplicate topic name.", and leave that topic as it was."""
    dup, ok = _name("dup"), _name("ok")
    create_topic(rafka.bootstrap, dup, 1)
    create_topic(rafka.bootstrap, ok, 1)
    with RawClient("127.0.0.1", rafka.port) as raw:
        grown = raw.request(37, 3, {"topics": [{"name": dup, "count": 2, "assignments": None},
                                               {"name": dup, "count": 3, "assignments": None}],
                                    "timeout_ms": 5000, "validate_only": False})
        deleted = raw.request(20, 6, {"topics": [{"name": dup, "topic_id": uuid.UUID(int=0)},
                                                 {"name": ok, "topic_id": uuid.UUID(int=0)},
                                                 {"name": dup, "topic_id": uuid.UUID(int=0)}],
                                      "timeout_ms": 5000})
    assert [(r["name"], r["error_code"], r["error_message"]) for r in grown["results"]] == [
        (dup, 42, "Duplicate topic name.")]
    assert sorted((r["name"], r["error_code"], r["error_message"]) for r in deleted["responses"]) == sorted([
        (dup, 42, "Duplicate topic name."), (ok, 0, None)])
    listed = AdminClient({"bootstrap.servers": rafka.bootstrap}).list_topics(timeout=10).topics
    assert ok not in listed and len(listed[dup].partitions) == 1


def test_acl_requests_answer_that_no_authorizer_is_configured(rafka: Rafka) -> None:
    """rafka has no ACLs: like a Kafka without an authorizer it serves CreateAcls, DescribeAcls and
    DeleteAcls with SECURITY_DISABLED, so kafka-acls and admin clients say why."""
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    match_all = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
    for call in (lambda: admin.create_acls([binding])[binding].result(10),
                 lambda: admin.delete_acls([match_all])[match_all].result(10)):
        with pytest.raises(KafkaException) as refused:
            call()
        assert refused.value.args[0].name() == "SECURITY_DISABLED", refused.value.args[0]
        assert "No Authorizer is configured" in refused.value.args[0].str()
    # librdkafka's describe_acls drops the response's top-level error: ask raw
    with RawClient("127.0.0.1", rafka.port) as raw:
        described = raw.request(29, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                        "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                        "operation": 1, "permission_type": 1})
    assert (described["error_code"], described["error_message"], described["resources"]) == \
        (54, "No Authorizer is configured.", [])
