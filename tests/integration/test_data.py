"""Producing and consuming real data through rafka with every common client."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from crc32c import crc32c

from rafka import ids
from tests.integration.clients import create_topic, fetch_of_one_partition, spread_name
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def _consume_all(bootstrap: str, topic: str, expected: int, group: str | None = None, timeout: float = 30) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group or _name("reader"),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        assert not m.error(), m.error()
        got.append(m)
    # nothing more must arrive: exactly once
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        m = c.poll(0.1)
        if m is not None and not m.error():
            got.append(m)
    c.close()
    return got


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("idempotent", [True, False])
def test_confluent_producer_round_trip(rafka: Rafka, compression: str, idempotent: bool) -> None:
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": rafka.bootstrap, "compression.type": compression,
                  "enable.idempotence": idempotent, "linger.ms": 2})
    sent = defaultdict(list)
    for i in range(300):
        key = f"k{i % 7}".encode()
        p.produce(topic, key=key, value=f"{compression}-{i}".encode())
        sent[key].append(f"{compression}-{i}".encode())
    assert p.flush(15) == 0
    got = _consume_all(rafka.bootstrap, topic, 300)
    assert len(got) == 300
    by_key = defaultdict(list)
    for m in got:
        by_key[m.key()].append(m.value())
    assert by_key == sent  # every record once, in order per key (one key → one partition)
    for part in range(3):
        offsets = [m.offset() for m in got if m.partition() == part]
        assert offsets == list(range(len(offsets)))


def test_kafka_python_aiokafka_and_kcat_producers(rafka: Rafka) -> None:
    from kafka import KafkaProducer

    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 2)
    kp = KafkaProducer(bootstrap_servers=rafka.bootstrap)
    for i in range(40):
        kp.send(topic, f"kp-{i}".encode(), partition=i % 2)
    kp.flush()
    kp.close()

    async def ak() -> None:
        import aiokafka

        p = aiokafka.AIOKafkaProducer(bootstrap_servers=rafka.bootstrap)
        await p.start()
        for i in range(40):
            await p.send_and_wait(topic, f"ak-{i}".encode(), partition=i % 2)
        await p.stop()

    asyncio.run(ak())
    subprocess.run(["kcat", "-b", rafka.bootstrap, "-P", "-t", topic, "-p", "0"],
                   input=b"\n".join(f"kc-{i}".encode() for i in range(40)), check=True, timeout=30)
    got = _consume_all(rafka.bootstrap, topic, 120)
    values = sorted(m.value().decode() for m in got)
    assert values == sorted([f"kp-{i}" for i in range(40)] + [f"ak-{i}" for i in range(40)] + [f"kc-{i}" for i in range(40)])
    kc = [m.value() for m in got if m.value().startswith(b"kc-")]
    assert kc == [f"kc-{i}".encode() for i in range(40)]  # one partition: order kept
    # the broker stamps every batch with the partition's leader epoch, whatever the producer wrote
    assert {m.leader_epoch() for m in got} == {0}
    out = subprocess.run(["kcat", "-b", rafka.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-q"],
                         check=False, capture_output=True, timeout=30)
    assert len(out.stdout.splitlines()) == 120


def test_kafka_python_and_aiokafka_consumers_read_everything(rafka: Rafka) -> None:
    from kafka import KafkaConsumer

    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": rafka.bootstrap})
    for i in range(90):
        p.produce(topic, value=str(i).encode())
    p.flush(10)
    kc = KafkaConsumer(topic, bootstrap_servers=rafka.bootstrap, group_id=_name("kp"), auto_offset_reset="earliest",
                       consumer_timeout_ms=4000)
    assert sorted(int(m.value) for m in kc) == list(range(90))
    kc.close()

    async def ak() -> list[int]:
        import aiokafka

        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=rafka.bootstrap, group_id=_name("ak"),
                                      auto_offset_reset="earliest")
        await c.start()
        seen: list[int] = []
        deadline = time.monotonic() + 20
        while len(seen) < 90 and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=300)).values():
                seen += [int(m.value) for m in msgs]
        await c.stop()
        return seen

    assert sorted(asyncio.run(ak())) == list(range(90))


def test_waiting_fetch_returns_promptly_when_a_record_arrives(rafka: Rafka) -> None:
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 4)  # partitions spread over both shards
    p = Producer({"bootstrap.servers": rafka.bootstrap, "linger.ms": 0})
    for part in range(4):  # one record each, so the consumer knows every position before we measure
        p.produce(topic, value=b"warm-up", partition=part)
    p.flush(10)
    c = Consumer({"bootstrap.servers": rafka.bootstrap, "group.id": _name("w"), "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 5000, "fetch.min.bytes": 1})
    c.subscribe([topic])
    warm = 0
    deadline = time.monotonic() + 20
    while warm < 4 and time.monotonic() < deadline:
        m = c.poll(0.1)
        warm += m is not None and not m.error()
    assert warm == 4
    time.sleep(0.5)  # the consumer's next fetch is now parked on every shard
    latencies = []
    for part in range(4):
        sent = time.monotonic()
        p.produce(topic, value=b"ping", partition=part)
        p.flush(5)
        m = None
        while m is None and time.monotonic() - sent < 10:
            m = c.poll(0.05)
        assert m is not None and not m.error() and m.value() == b"ping"
        latencies.append(time.monotonic() - sent)
    c.close()
    # delivered well before the 5 s max wait, whichever shard owns the partition
    assert max(latencies) < 1.0, latencies


def test_corrupt_batch_is_refused_and_nothing_is_stored(rafka: Rafka) -> None:
    from rafka.protocol.records import SimpleRecord, build_batch

    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    good = build_batch([SimpleRecord(b"k", b"v", 1_700_000_000_000, [])])
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # flip a byte covered by the CRC
    with RawClient("127.0.0.1", rafka.port) as c:
        body = {"transactional_id": None, "acks": -1, "timeout": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(bad)}]}]}
        resp = c.request(0, 9, body)
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 2  # CORRUPT_MESSAGE
        garbage = bytearray(good)
        garbage[22] |= 4  # says zstd, but the records are not: the CRC is right, the payload is not
        struct.pack_into(">I", garbage, 17, crc32c(bytes(garbage[21:])))
        body["topic_data"][0]["partition_data"][0]["records"] = bytes(garbage)
        resp = c.request(0, 9, body)
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 2
        lo = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        assert lo["topics"][0]["partitions"][0]["offset"] == 0
        body["topic_data"][0]["partition_data"][0]["records"] = good
        ok = c.request(0, 9, body)
        assert ok["responses"][0]["partition_responses"][0]["error_code"] == 0


def test_produce_never_creates_a_topic(rafka: Rafka) -> None:
    """Kafka creates topics on Metadata (allow_auto_topic_creation), never on Produce."""
    from rafka.protocol.records import SimpleRecord, build_batch

    topic = _name("t")
    batch = build_batch([SimpleRecord(b"k", b"v", int(time.time() * 1000), [])])
    with RawClient("127.0.0.1", rafka.port) as c:
        resp = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000,
                                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        assert md["topics"][0]["error_code"] == 3, "the produce left no topic behind"


def test_unknown_topic_or_partition(rafka: Rafka) -> None:
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": rafka.bootstrap, "message.timeout.ms": 3000})
    errors = []
    p.produce(topic, value=b"x", partition=5, on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None


def test_list_offsets_and_delete_records(rafka: Rafka) -> None:
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": rafka.bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce(topic, value=str(i).encode(), timestamp=1_700_000_000_000 + i * 1000)
        p.flush(5)
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    tp = TopicPartition(topic, 0)

    def offset(spec: OffsetSpec) -> int:
        return admin.list_offsets({tp: spec})[tp].result(10).offset

    assert offset(OffsetSpec.earliest()) == 0
    assert offset(OffsetSpec.latest()) == 10
    assert offset(OffsetSpec.for_timestamp(1_700_000_004_500)) == 5
    assert offset(OffsetSpec.max_timestamp()) == 9
    admin.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0, 4)].result(10)
    assert offset(OffsetSpec.earliest()) == 4


def test_delete_records_naming_a_partition_twice_acts_and_answers_once(rafka: Rafka) -> None:
    """Kafka reads a DeleteRecords into a map by partition: the last offset given wins and each
    partition is answered once, under one entry for its topic."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": rafka.bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce(topic, value=b"v", partition=i % 2)
    assert p.flush(10) == 0
    with RawClient("127.0.0.1", rafka.port) as c:
        resp = c.request(21, 2, {"topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": 2}, {"partition_index": 1, "offset": 1}]},
            {"name": topic, "partitions": [{"partition_index": 0, "offset": 3}]}], "timeout_ms": 5000})
    assert [(t["name"], [(q["partition_index"], q["low_watermark"], q["error_code"]) for q in t["partitions"]])
            for t in resp["topics"]] == [(topic, [(0, 3, 0), (1, 1, 0)])]


def test_topic_admin(rafka: Rafka) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    topic = _name("t")
    admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "60000"})])[topic].result(10)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        rf3 = _name("rf")
        admin.create_topics([NewTopic(rf3, 1, 3)])[rf3].result(10)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(10)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 5
    res = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(res.values())).result(10)
    assert configs["retention.ms"].value == "60000"
    admin.delete_topics([topic])[topic].result(10)
    time.sleep(1.2)  # gateway topic cache TTL
    assert topic not in admin.list_topics(timeout=10).topics


def test_topic_configs_altered_apply_at_once_and_survive_a_crash(fresh_rafka: Rafka) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": fresh_rafka.bootstrap})
    topic = _name("t")
    create_topic(fresh_rafka.bootstrap, topic, 2)

    def alter(resource_type: ResourceType, name: str, *entries: ConfigEntry) -> None:
        res = ConfigResource(resource_type, name, incremental_configs=list(entries))
        admin.incremental_alter_configs([res])[res].result(10)

    def described() -> dict[str, tuple[str, bool]]:
        res = ConfigResource(ResourceType.TOPIC, topic)
        return {k: (v.value, v.is_default) for k, v in admin.describe_configs([res])[res].result(10).items()}

    def produce(size: int) -> KafkaError | None:
        p = Producer({"bootstrap.servers": fresh_rafka.bootstrap, "message.max.bytes": 100_000})
        errors: list[KafkaError | None] = []
        p.produce(topic, b"x" * size, partition=0, on_delivery=lambda err, _m: errors.append(err))
        p.flush(10)
        return errors[0]

    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    alter(ResourceType.TOPIC, topic, ConfigEntry("retention.ms", "60000", incremental_operation=SET))
    assert produce(5000) is None
    alter(ResourceType.TOPIC, topic, ConfigEntry("max.message.bytes", "2000", incremental_operation=SET),
          ConfigEntry("retention.ms", None, incremental_operation=DELETE))
    configs = described()
    assert configs["max.message.bytes"] == ("2000", False) and configs["retention.ms"] == ("604800000", True)
    assert produce(5000).code() == KafkaError.MSG_SIZE_TOO_LARGE, "the new limit applies at once"
    assert produce(100) is None

    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        alter(ResourceType.TOPIC, topic, ConfigEntry("retention.ms", "soon", incremental_operation=SET))
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        alter(ResourceType.TOPIC, _name("none"), ConfigEntry("retention.ms", "5", incremental_operation=SET))
    with pytest.raises(KafkaException, match="INVALID_REQUEST"):
        alter(ResourceType.BROKER, "0", ConfigEntry("num.partitions", "5", incremental_operation=SET))
    assert described() == configs, "refused alterations change nothing"

    fresh_rafka.kill_all()
    fresh_rafka.start()
    assert described() == configs, "acknowledged config changes are in the write-ahead log"
    assert produce(5000).code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_alter_configs_refusals_match_kafka(rafka: Rafka) -> None:
    topic, other = _name("t"), _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    create_topic(rafka.bootstrap, other, 1)

    def resource(rtype: int, name: str, *configs: tuple[str, int, str | None]) -> dict[str, object]:
        return {"resource_type": rtype, "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in configs]}

    resources = [
        resource(2, topic, ("retention.ms", 0, None)),  # SET with a null value
        resource(4, "7", ("num.partitions", 0, "3")),  # another broker's id
        resource(4, "", ("num.partitions", 0, "3")),  # a static broker config
        resource(2, "", ("retention.ms", 0, "5")),  # the default topic resource
        resource(16, "some-metrics", ("interval.ms", 0, "5000")),  # CLIENT_METRICS
        resource(32, "some-group", ("consumer.session.timeout.ms", 0, "50000")),  # GROUP: fine
        resource(2, "dup", ("retention.ms", 0, "5")), resource(2, "dup", ("retention.ms", 0, "6")),
        resource(2, other, ("retention.ms", 1, None), ("min.insync.replicas", 1, None)),  # deletes: fine
    ]
    with RawClient("127.0.0.1", rafka.port) as c:
        resp = c.request(44, 1, {"resources": resources, "validate_only": False})
        legacy = c.request(33, 2, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                  "configs": [{"name": "retention.ms", "value": None}]}],
                                   "validate_only": False})
    got = [(r["error_code"], r["error_message"]) for r in resp["responses"]]
    assert got == [
        (42, "Null value not supported for : retention.ms"),
        (42, "Unexpected broker id, expected 0, but received 7"),
        (42, "Cannot update these configs dynamically: Set(num.partitions)"),
        (42, "Default topic resources are not allowed."),
        (42, "AlterConfigs is only supported for topics and brokers, but resource type is 16"),
        (0, None),
        (42, "Each resource must appear at most once."), (42, "Each resource must appear at most once."),
        (0, None),
    ]
    assert [(r["error_code"], r["error_message"]) for r in legacy["responses"]] == [
        (42, "Null value not supported for : retention.ms")]


def test_describe_log_dirs_reports_partition_sizes_and_the_disk(rafka: Rafka) -> None:
    from kafka.admin import KafkaAdminClient

    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": rafka.bootstrap, "linger.ms": 50})
    for i in range(10):
        p.produce(topic, b"x" * 100, partition=i % 2)
    assert p.flush(10) == 0
    admin = KafkaAdminClient(bootstrap_servers=rafka.bootstrap)
    try:
        [broker] = admin.describe_log_dirs()
        [log_dir] = broker["log_dirs"]  # both shards write under the one data directory
        filtered = admin.describe_log_dirs({topic: [1]})
    finally:
        admin.close()
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == str(rafka.data_dir.resolve())
    assert log_dir["total_bytes"] > log_dir["usable_bytes"] > 0
    [entry] = [t for t in log_dir["topics"] if t["name"] == topic]
    sizes = {q["partition_index"]: q["partition_size"] for q in entry["partitions"]}
    assert sizes[0] > 500 and sizes[1] > 500 and sizes[2] == 0, sizes  # five 100-byte records each; none on 2
    [only] = filtered[0]["log_dirs"][0]["topics"]
    assert (only["name"], [q["partition_index"] for q in only["partitions"]]) == (topic, [1])


def test_oversized_size_prefix_while_consumer_commits(rafka: Rafka) -> None:
    """Raw-socket abuse does not disturb a real client committing in a loop."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    c = Consumer({"bootstrap.servers": rafka.bootstrap, "group.id": _name("g"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    stop = threading.Event()

    def abuse() -> None:
        payloads = [b"\xff" * 64, struct.pack(">i", 2**31 - 1), struct.pack(">i", 8) + struct.pack(">hhi", 777, 0, 1),
                    struct.pack(">i", 30) + b"\x00\x0b\x00\x05" + b"\x01" * 10]
        while not stop.is_set():
            for data in payloads:
                try:
                    with socket.create_connection(("127.0.0.1", rafka.port), timeout=2) as s:
                        s.sendall(data)
                        s.settimeout(0.2)
                        try:
                            s.recv(10)
                        except OSError:
                            pass
                except OSError:
                    pass

    t = threading.Thread(target=abuse, daemon=True)
    t.start()
    try:
        for i in range(200):
            c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 200
    finally:
        stop.set()
        t.join(5)
        c.close()


def test_a_deleted_topics_committed_offsets_go_with_it(rafka: Rafka) -> None:
    """A topic created again under the same name starts from the group's reset policy, not
    from offsets committed on the old topic (which would skip its first records)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    topic, group, kept = _name("recreated"), _name("g"), _name("kept")
    create_topic(rafka.bootstrap, topic, 1)
    create_topic(rafka.bootstrap, kept, 1)
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0, 8), TopicPartition(kept, 0, 3)])])[group].result(15)
    admin.delete_topics([topic])[topic].result(15)
    create_topic(rafka.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": rafka.bootstrap})
    for i in range(5):
        p.produce(topic, f"new-{i}".encode(), partition=0)
    assert p.flush(15) == 0
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert [(tp.topic, tp.offset) for tp in res.topic_partitions if tp.offset >= 0] == [(kept, 3)]
    c = Consumer({"bootstrap.servers": rafka.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert got == [f"new-{i}".encode() for i in range(5)], "the new topic is read from its start"
    finally:
        c.close()


@pytest.mark.parametrize("version", [12, 13])
def test_a_fetch_waiting_when_its_topic_is_deleted_is_answered_at_once_as_kafka_answers(
        rafka: Rafka, version: int) -> None:
    """A Fetch parked at the end of a partition is woken by the topic's deletion and answered at
    once with UNKNOWN_TOPIC_OR_PARTITION, by name or by id (Kafka completes the delayed fetch and
    reads the partition by name), not with NOT_LEADER_OR_FOLLOWER when its max_wait ends."""
    from confluent_kafka.admin import AdminClient

    topic = _name("parked")
    create_topic(rafka.bootstrap, topic, 1)
    with RawClient("127.0.0.1", rafka.port) as c:
        fetch_of_one_partition(c, topic, version, max_wait=20_000)
        time.sleep(0.5)  # parked on the partition's shard
        start = time.monotonic()
        admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
        admin.delete_topics([topic])[topic].result(15)
        resp = c.read_response(1, version)
        took = time.monotonic() - start
    assert resp["responses"][0]["partitions"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert took < 10, "the deletion ended the wait"


def test_offset_commit_and_fetch_v10_name_topics_by_id(rafka: Rafka) -> None:
    """OffsetCommit and OffsetFetch v10 (Kafka 4.1+, KIP-848) name topics by id: a commit for a
    topic deleted and created again under the same name is refused with UNKNOWN_TOPIC_ID and
    never lands on the new topic (committing by name, it would, and the new topic's first
    records would be skipped); one for the new id is stored and read back by name and by id."""
    import uuid

    topic, group = _name("byid"), _name("g")
    create_topic(rafka.bootstrap, topic, 2)

    def topic_id(raw: RawClient) -> uuid.UUID:
        md = raw.request(3, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        return md["topics"][0]["topic_id"]

    def commit(raw: RawClient, tid: uuid.UUID, offset: int) -> list[tuple[uuid.UUID, int, int]]:
        parts = [{"partition_index": i, "committed_offset": offset, "committed_leader_epoch": -1,
                  "committed_metadata": ""} for i in (0, 1, 5)]
        resp = raw.request(8, 10, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                   "group_instance_id": None, "topics": [{"topic_id": tid, "partitions": parts}]})
        return sorted((t["topic_id"], p["partition_index"], p["error_code"]) for t in resp["topics"]
                      for p in t["partitions"])

    def fetch(raw: RawClient, topics: list[dict] | None) -> list[tuple[uuid.UUID, int, int, int]]:
        resp = raw.request(9, 10, {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                                               "topics": topics}], "require_stable": False})
        [g] = resp["groups"]
        assert g["error_code"] == 0
        return sorted((t["topic_id"], p["partition_index"], p["committed_offset"], p["error_code"])
                      for t in g["topics"] for p in t["partitions"])

    with RawClient("127.0.0.1", rafka.port) as raw:
        old = topic_id(raw)
        assert commit(raw, old, 7) == [(old, 0, 0), (old, 1, 0), (old, 5, 3)]  # partition 5: none
        assert fetch(raw, [{"topic_id": old, "partition_indexes": [0, 1]}]) == [(old, 0, 7, 0), (old, 1, 7, 0)]
        assert fetch(raw, None) == [(old, 0, 7, 0), (old, 1, 7, 0)]
        admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
        admin.delete_topics([topic])[topic].result(15)
        create_topic(rafka.bootstrap, topic, 2)
        new = topic_id(raw)
        assert new != old
        # a member that missed the deletion commits for the old id: refused, nothing stored
        assert commit(raw, old, 9) == [(old, 0, 100), (old, 1, 100), (old, 5, 100)]
        assert fetch(raw, None) == []
        assert fetch(raw, [{"topic_id": old, "partition_indexes": [0]}]) == [(old, 0, -1, 100)]
        assert commit(raw, new, 3) == [(new, 0, 0), (new, 1, 0), (new, 5, 3)]
        # pipelined, as an asynchronous committer sends them: each answered, the last one stands
        frames = [raw.encode(8, 10, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                     "group_instance_id": None, "topics": [{"topic_id": new, "partitions": [
                                         {"partition_index": 0, "committed_offset": 10 + i, "committed_leader_epoch": -1,
                                          "committed_metadata": ""}]}]}) for i in range(8)]
        raw.send_raw(b"".join(frames))
        answers = [raw.read_response(8, 10) for _ in frames]
        assert [(a["topics"][0]["topic_id"], a["topics"][0]["partitions"][0]["error_code"]) for a in answers
                ] == [(new, 0)] * 8
        assert fetch(raw, [{"topic_id": new, "partition_indexes": [0]}]) == [(new, 0, 17, 0)]
        assert fetch(raw, [{"topic_id": new, "partition_indexes": [1]}, {"topic_id": old, "partition_indexes": [0]}]
                     ) == sorted([(new, 1, 3, 0), (old, 0, -1, 100)])
    c = Consumer({"bootstrap.servers": rafka.bootstrap, "group.id": group})
    try:  # and by name, as librdkafka asks (v9)
        assert [tp.offset for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
                ] == [17, 3]
    finally:
        c.close()


def test_metadata_names_an_illegal_topic_name_as_such(rafka: Rafka) -> None:
    """INVALID_TOPIC_EXCEPTION fails a producer at once; UNKNOWN_TOPIC_OR_PARTITION is retried
    until its message timeout."""
    with RawClient("127.0.0.1", rafka.port) as c:
        md = c.request(3, 12, {"topics": [{"name": "bad/name", "topic_id": None}, {"name": "x" * 250, "topic_id": None},
                                          {"name": _name("absent"), "topic_id": None}],
                               "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        assert [t["error_code"] for t in md["topics"]] == [17, 17, 3]
        md = c.request(3, 12, {"topics": [{"name": "bad/name", "topic_id": None}], "allow_auto_topic_creation": True,
                               "include_topic_authorized_operations": False})
        assert [t["error_code"] for t in md["topics"]] == [17]


def test_metadata_by_topic_id_is_refused_before_v12_and_answers_ids_alone_from_v12(rafka: Rafka) -> None:
    """As Kafka: v10/v11 cannot name topics by id (the whole request is INVALID_REQUEST, no
    brokers); on v12 a request naming an id is answered for its ids only."""
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    name, other = _name("by-id"), _name("by-name")
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    for f in admin.create_topics([NewTopic(name, 2), NewTopic(other, 1)]).values():
        f.result(15)
    with RawClient("127.0.0.1", rafka.port) as c:
        [t] = c.request(3, 12, {"topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})["topics"]
        topic_id = t["topic_id"]
        assert t["error_code"] == 0 and topic_id.int != 0
        for version in (10, 11):
            md = c.request(3, version, {"topics": [{"name": None, "topic_id": topic_id}],
                                        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
            assert md["brokers"] == [] and [(t["error_code"], t["name"]) for t in md["topics"]] == [(42, "")]
        md = c.request(3, 12, {"topics": [{"name": None, "topic_id": topic_id}, {"name": other, "topic_id": None},
                                          {"name": None, "topic_id": uuid.uuid4()}],
                               "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        assert [(t["error_code"], t["name"], len(t["partitions"])) for t in md["topics"]] == [(0, name, 2), (100, None, 0)]


def test_create_topics_with_a_manual_replica_assignment(rafka: Rafka) -> None:
    """The assignment sets the partition count; a replica must name this broker (node 0)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    kp = KafkaAdminClient(bootstrap_servers=rafka.bootstrap)
    three = _name("assigned")
    try:
        kp.create_topics([NewTopic(three, -1, -1, replica_assignments={0: [0], 1: [0], 2: [0]})])
        assert len(kp.describe_topics([three])[0]["partitions"]) == 3
    finally:
        kp.close()

    def create(assignments: list[tuple[int, list[int]]], partitions: int = -1) -> dict[str, Any]:
        with RawClient("127.0.0.1", rafka.port) as c:
            resp = c.request(19, 7, {"topics": [{
                "name": _name("assigned"), "num_partitions": partitions, "replication_factor": -1, "configs": [],
                "assignments": [{"partition_index": p, "broker_ids": b} for p, b in assignments]}],
                "timeout": 5000, "validate_only": False})
        return resp["topics"][0]

    assert create([(0, [0]), (1, [0])])["num_partitions"] == 2
    elsewhere = create([(0, [5])])
    assert (elsewhere["error_code"], elsewhere["error_message"]) == (
        39, "The manual partition assignment includes broker 5, but no such broker is registered.")
    assert create([(0, [0]), (2, [0])])["error_code"] == 39  # not 0, 1, ...
    assert create([(0, [0, 0])])["error_code"] == 39
    assert create([(0, [0])], partitions=1)["error_code"] == 42  # a count as well as an assignment


def test_a_partition_whose_shard_is_down_is_offline_in_metadata(tmp_path: Path) -> None:
    """While a data shard is down, Metadata gives its partitions LEADER_NOT_AVAILABLE and leader
    -1, as Kafka does for a partition with no live leader, and the others leader 0; when it is
    back they are led again. With "leader 0" throughout, a librdkafka consumer fetched, failed
    and asked for metadata again ~2,000 times a second until the shard was back."""
    broker = Rafka(tmp_path / "data", shards=2).start()
    try:
        topic = spread_name("off", 4)
        create_topic(broker.bootstrap, topic, 4)
        catalogue = ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, "\0topics"), 2)
        owner = {p: ids.shard_for_partition(ids.log_partition(ids.DEFAULT_ORG, topic, p), 2) for p in range(4)}
        offline = sorted(p for p in range(4) if owner[p] != catalogue)

        def partitions() -> dict[int, tuple[int, int]]:
            with RawClient("127.0.0.1", broker.port) as c:
                md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                       "allow_auto_topic_creation": False})
            return {p["partition_index"]: (p["error_code"], p["leader_id"]) for p in md["topics"][0]["partitions"]}

        def until(expected: dict[int, tuple[int, int]]) -> None:
            deadline = time.monotonic() + 15
            while partitions() != expected and time.monotonic() < deadline:
                time.sleep(0.1)
            assert partitions() == expected

        until({p: (0, 0) for p in range(4)})
        pid = broker.children()[f"rafka-shard-{1 - catalogue}"]
        os.kill(pid, signal.SIGSTOP)
        try:
            until({p: (5, -1) if p in offline else (0, 0) for p in range(4)})  # 5: LEADER_NOT_AVAILABLE
        finally:
            os.kill(pid, signal.SIGCONT)
        until({p: (0, 0) for p in range(4)})
    finally:
        broker.stop()


def test_the_catalogues_shard_down_stops_neither_other_partitions_nor_pattern_subscribers(tmp_path: Path) -> None:
    """While the shard holding the topic catalogue is down, the gateway answers from its last
    known metadata, as a Kafka broker serves its metadata cache: produce to partitions on the
    other shard goes on, and a pattern subscriber does not see its topics vanish (it used to
    lose every partition, and every produce waited for the shard)."""
    broker = Rafka(tmp_path / "data", shards=2).start()
    try:
        topic = spread_name("pat", 4)  # some partitions on the shard that is not the catalogue's
        create_topic(broker.bootstrap, topic, 4)
        catalogue = ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, "\0topics"), 2)
        live = [p for p in range(4) if ids.shard_for_partition(ids.log_partition(ids.DEFAULT_ORG, topic, p), 2)
                != catalogue]
        events: list[tuple[str, int]] = []
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("g"),
                      "topic.metadata.refresh.interval.ms": 500})
        c.subscribe([f"^{topic}$|^{topic}-.*"], on_assign=lambda _c, ps: events.append(("assign", len(ps))),
                    on_revoke=lambda _c, ps: events.append(("revoke", len(ps))))
        deadline = time.monotonic() + 20
        while events != [("assign", 4)] and time.monotonic() < deadline:
            c.poll(0.1)
        assert events == [("assign", 4)]
        p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 30000})
        acked: list[float] = []
        pid = broker.children()[f"rafka-shard-{catalogue}"]
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            p.produce(topic, b"v", partition=live[0], on_delivery=lambda e, _m: e or acked.append(time.monotonic()))
            while not acked and time.monotonic() - stopped < 8:
                p.poll(0.1)
                c.poll(0.1)
            for _ in range(20):  # several metadata refreshes of the pattern subscriber
                c.poll(0.1)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert acked, "a record for a partition on the live shard was acknowledged while the catalogue was down"
        assert events == [("assign", 4)], "the pattern subscriber kept its partitions"
        c.close()
    finally:
        broker.stop()
