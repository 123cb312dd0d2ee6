"""Leaders and replicas: ElectLeaders, OffsetForLeaderEpoch and partition reassignments.

Every rafka partition has one replica, the broker the gateway names, always the leader;
these APIs answer as a Kafka 4 cluster of such partitions does.
"""

from __future__ import annotations

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.clients import create_topic
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST = 3, 39, 42
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, ELECTION_NOT_NEEDED, NO_REASSIGNMENT_IN_PROGRESS = 74, 75, 84, 85


@pytest.mark.parametrize("election", [ElectionType.PREFERRED, ElectionType.UNCLEAN])
def test_elect_leaders_is_never_needed(rafka: Rafka, election: ElectionType) -> None:
    topic, absent = _name("t"), _name("absent")
    create_topic(rafka.bootstrap, topic, 2)
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    asked = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 5), TopicPartition(absent, 0)]
    got = {(tp.topic, tp.partition): (err.code(), err.str())
           for tp, err in admin.elect_leaders(election, asked).result(timeout=10).items()}
    assert got == {
        (topic, 0): (ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        (topic, 1): (ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        (topic, 5): (UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-5"),
        (absent, 0): (UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {absent}"),
    }
    # all partitions: Kafka leaves out those that already have their leader, i.e. every one
    assert admin.elect_leaders(election, None).result(timeout=10) == {}


def test_elect_leaders_all_partitions_and_refusals_on_the_wire(rafka: Rafka) -> None:
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    with RawClient("127.0.0.1", rafka.port) as c:
        every = c.request(43, 2, {"election_type": 0, "topic_partitions": None, "timeout": 1000})
        assert every["error_code"] == 0
        assert {"topic": topic, "partition_result": []} in every["replica_election_results"]
        v0 = c.request(43, 0, {"topic_partitions": [{"topic": topic, "partitions": [0]}], "timeout": 1000})
        assert v0["replica_election_results"][0]["partition_result"][0]["error_code"] == ELECTION_NOT_NEEDED
        bad = c.request(43, 2, {"election_type": 7, "topic_partitions": [{"topic": topic, "partitions": [0]}],
                                "timeout": 1000})
    assert bad["error_code"] == INVALID_REQUEST
    assert bad["replica_election_results"][0]["partition_result"] == [
        {"partition_id": 0, "error_code": INVALID_REQUEST, "error_message": "Unknown election type 7"}]


def test_offset_for_leader_epoch_ends_epoch_zero_at_the_log_end(rafka: Rafka) -> None:
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": rafka.bootstrap})
    for _ in range(5):
        p.produce(topic, b"v", partition=1)
    assert p.flush(10) == 0

    def entry(partition: int, epoch: int, current: int = -1) -> dict[str, int]:
        return {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}

    with RawClient("127.0.0.1", rafka.port) as c:
        resp = c.request(23, 4, {"replica_id": -1, "topics": [
            {"topic": topic, "partitions": [entry(0, 0, 0), entry(1, 0), entry(1, 4), entry(1, 0, 3), entry(1, 0, -2),
                                            entry(9, 0)]},
            {"topic": _name("absent"), "partitions": [entry(0, 0)]}]})
    answers = [[(p["error_code"], p["leader_epoch"], p["end_offset"]) for p in t["partitions"]] for t in resp["topics"]]
    assert answers == [
        [(0, 0, 0), (0, 0, 5), (0, -1, -1), (UNKNOWN_LEADER_EPOCH, -1, -1), (FENCED_LEADER_EPOCH, -1, -1),
         (UNKNOWN_TOPIC_OR_PARTITION, -1, -1)],
        [(UNKNOWN_TOPIC_OR_PARTITION, -1, -1)],
    ]


def test_no_reassignment_is_ever_in_progress(rafka: Rafka) -> None:
    topic, absent = _name("t"), _name("absent")
    create_topic(rafka.bootstrap, topic, 2)
    with RawClient("127.0.0.1", rafka.port) as c:
        node = c.request(3, 12, {"topics": [], "allow_auto_topic_creation": False})["brokers"][0]["node_id"]
        listed = c.request(46, 0, {"timeout": 1000, "topics": None})
        named = c.request(46, 0, {"timeout": 1000, "topics": [{"name": topic, "partition_indexes": [0, 7]}]})
        altered = c.request(45, 1, {"timeout": 1000, "allow_replication_factor_change": True, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "replicas": [node]},
                                           {"partition_index": 1, "replicas": None},
                                           {"partition_index": 1, "replicas": []},
                                           {"partition_index": 1, "replicas": [node, node]},
                                           {"partition_index": 1, "replicas": [node, node + 7]},
                                           {"partition_index": 9, "replicas": [node]}]},
            {"name": absent, "partitions": [{"partition_index": 0, "replicas": [node]}]}]})
    for r in (listed, named):
        assert (r["error_code"], r["error_message"], r["topics"]) == (0, None, [])
    assert altered["error_code"] == 0
    got = [[(p["partition_index"], p["error_code"], p["error_message"]) for p in t["partitions"]]
           for t in altered["responses"]]
    assert got == [[
        (0, 0, None),  # its current replica: nothing to do
        (1, NO_REASSIGNMENT_IN_PROGRESS, None),
        (1, INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        (1, INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes the broker {node} more than once."),
        (1, INVALID_REPLICA_ASSIGNMENT,
         f"The manual partition assignment includes broker {node + 7}, but no such broker is registered."),
        (9, UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:9."),
    ], [(0, UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {absent}.")]]
