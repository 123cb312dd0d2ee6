"""Topic configs a client can see the effect of, driven by real clients: the configs tools
create topics with, compacted topics, the timestamp window, LogAppendTime and min.insync.replicas."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType

from tests.integration.clients import Row, read_aiokafka, read_confluent, read_kafka_python, read_kcat
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

# what Kafka Streams gives a changelog topic, plus what kafka-topics users commonly set
STREAMS_CHANGELOG = {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime",
                     "min.compaction.lag.ms": "0", "segment.bytes": "52428800", "min.insync.replicas": "1",
                     "compression.type": "lz4", "unclean.leader.election.enable": "false"}


def _create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=configs)])[topic].result(15)


def _produce(bootstrap: str, topic: str, key: bytes | None, **kw: Any) -> tuple[Any, Any]:
    """Produce one record; the delivery error (or None) and the delivered message."""
    conf = {"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "retries": 0, **kw.pop("conf", {})}
    p = Producer(conf)
    out: list[tuple[Any, Any]] = []
    p.produce(topic, b"value", key=key, partition=0, on_delivery=lambda err, msg: out.append((err, msg)), **kw)
    p.flush(15)
    return out[0]


def _read(bootstrap: str, topic: str, count: int) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("g"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m)
    c.close()
    return got


def test_topics_created_with_the_configs_tools_use_describe_them_back(rafka: Rafka) -> None:
    topic = _name("changelog")
    _create(rafka.bootstrap, topic, STREAMS_CHANGELOG)
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    [fut] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    described = {name: entry.value for name, entry in fut.result(15).items()}
    assert {k: described[k] for k in STREAMS_CHANGELOG} == STREAMS_CHANGELOG
    assert described["message.timestamp.after.max.ms"] == "3600000"  # Kafka 4's default
    bad = NewTopic(_name("bad"), num_partitions=1, replication_factor=1, config={"cleanup.policy": "compacted"})
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        admin.create_topics([bad])[bad.topic].result(15)


def test_described_configs_name_their_synonyms_as_kafka(rafka: Rafka) -> None:
    """kafka-configs --describe --all shows where each value comes from: the topic's override, then
    the broker config whose default it inherits (none for retention.ms, whose first broker synonym
    log.retention.ms has no default)."""
    topic = _name("t")
    _create(rafka.bootstrap, topic, {"retention.ms": "100000", "segment.bytes": "52428800"})
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    [fut] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    described = fut.result(15)
    got = {k: [(s.name, s.value, s.source) for s in described[k].synonyms.values()]
           for k in ("retention.ms", "segment.bytes", "max.message.bytes", "segment.ms")}
    topic_config, default_config = ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value
    assert got == {
        "retention.ms": [("retention.ms", "100000", topic_config)],
        "segment.bytes": [("segment.bytes", "52428800", topic_config), ("log.segment.bytes", "1073741824", default_config)],
        "max.message.bytes": [("message.max.bytes", "1048588", default_config)],
        "segment.ms": [],
    }
    with RawClient("127.0.0.1", rafka.port) as c:
        node = c.request(3, 12, {"topics": [], "allow_auto_topic_creation": False})["brokers"][0]["node_id"]
        resp = c.request(32, 4, {"resources": [
            {"resource_type": 2, "resource_name": topic, "configuration_keys": ["segment.bytes"]},
            {"resource_type": 4, "resource_name": str(node), "configuration_keys": ["message.max.bytes"]}],
            "include_synonyms": False, "include_documentation": False})
        assert [r["configs"][0]["synonyms"] for r in resp["results"]] == [[], []], "only when asked for"
        resp = c.request(32, 4, {"resources": [
            {"resource_type": 4, "resource_name": str(node), "configuration_keys": ["message.max.bytes"]}],
            "include_synonyms": True, "include_documentation": False})
    assert resp["results"][0]["configs"][0]["synonyms"] == [
        {"name": "message.max.bytes", "value": "1048588", "source": default_config}]


def test_compacted_topic_needs_keys(rafka: Rafka) -> None:
    topic = _name("compact")
    _create(rafka.bootstrap, topic, {"cleanup.policy": "compact"})
    err, _ = _produce(rafka.bootstrap, topic, None)
    assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
    err, _ = _produce(rafka.bootstrap, topic, None, conf={"compression.type": "gzip"})
    assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
    assert _produce(rafka.bootstrap, topic, b"key")[0] is None
    assert [m.key() for m in _read(rafka.bootstrap, topic, 1)] == [b"key"]


def test_delete_records_on_a_compacted_topic_is_a_policy_violation(rafka: Rafka) -> None:
    topic = _name("compact")
    _create(rafka.bootstrap, topic, {"cleanup.policy": "compact"})
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    tp = TopicPartition(topic, 0, 0)
    with pytest.raises(Exception, match="POLICY_VIOLATION"):  # before any record: the topic's policy decides
        admin.delete_records([tp])[tp].result(10)
    assert _produce(rafka.bootstrap, topic, b"k")[0] is None
    tp = TopicPartition(topic, 0, 1)
    with pytest.raises(Exception, match="POLICY_VIOLATION"):
        admin.delete_records([tp])[tp].result(10)


def test_timestamps_far_in_the_future_are_refused(rafka: Rafka) -> None:
    topic = _name("future")
    _create(rafka.bootstrap, topic, {})
    now = int(time.time() * 1000)
    err, _ = _produce(rafka.bootstrap, topic, b"k", timestamp=now + 2 * 3600 * 1000)
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP, err
    err, _ = _produce(rafka.bootstrap, topic, b"k", timestamp=now + 2 * 3600 * 1000, conf={"compression.type": "zstd"})
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP, err
    assert _produce(rafka.bootstrap, topic, b"k", timestamp=now - 30 * 24 * 3600 * 1000)[0] is None  # old is fine


def test_log_append_time_topic_gives_every_client_the_broker_time(rafka: Rafka) -> None:
    topic = _name("lat")
    _create(rafka.bootstrap, topic, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    err, delivered = _produce(rafka.bootstrap, topic, b"k", timestamp=1000)
    after = int(time.time() * 1000)
    assert err is None
    kind, stamped = delivered.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before - 1000 <= stamped <= after + 1000, (kind, stamped)
    [m] = _read(rafka.bootstrap, topic, 1)
    assert m.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, stamped)

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTP

    async def aio() -> tuple[int, int]:
        c = AIOKafkaConsumer(bootstrap_servers=rafka.bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            c.assign([AioTP(topic, 0)])
            c.seek(AioTP(topic, 0), 0)
            msg = await asyncio.wait_for(c.getone(), 15)
            return msg.timestamp_type, msg.timestamp
        finally:
            await c.stop()

    assert asyncio.run(aio()) == (1, stamped)  # 1: LogAppendTime

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTP
    kc = KafkaConsumer(bootstrap_servers=rafka.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    kc.assign([KpTP(topic, 0)])
    kc.seek(KpTP(topic, 0), 0)
    msg = next(iter(kc))
    kc.close()
    assert (msg.timestamp_type, msg.timestamp) == (1, stamped)


def test_min_insync_replicas_is_capped_at_the_replication_factor(rafka: Rafka) -> None:
    """A deployment template's min.insync.replicas=2 on a one-replica topic: Kafka caps the
    effective minimum at the replication factor, so acks=all producers still deliver."""
    topic = _name("isr")
    _create(rafka.bootstrap, topic, {"min.insync.replicas": "2"})
    assert _produce(rafka.bootstrap, topic, b"k", conf={"acks": "all", "enable.idempotence": True, "retries": 5})[0] is None


@pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])
def test_records_inside_compressed_batches_are_looked_at(rafka: Rafka, codec: str) -> None:
    """librdkafka's snappy, lz4 and zstd batches decode: a compacted topic finds a missing key
    in the middle of one, and a timestamp lookup lands on the record, not the batch."""
    from confluent_kafka.admin import OffsetSpec

    compact, plain = _name("compact"), _name("plain")
    _create(rafka.bootstrap, compact, {"cleanup.policy": "compact"})
    _create(rafka.bootstrap, plain, {})
    base = int(time.time() * 1000) - 60_000
    errors: list[Any] = []
    # one batch per topic: a long linger gathers the 20 records even on a loaded machine (with 100 ms
    # the first record sometimes left alone, in a batch of its own that has its key)
    p = Producer({"bootstrap.servers": rafka.bootstrap, "compression.type": codec, "linger.ms": 2000, "retries": 0})
    for i in range(20):
        p.produce(compact, b"x" * 50, key=None if i == 13 else b"k%d" % i, partition=0,
                  on_delivery=lambda err, _m: errors.append(err))
        p.produce(plain, b"x" * 50, key=b"k", partition=0, timestamp=base + i * 1000)
    p.flush(15)
    assert errors and all(e is not None and e.code() == KafkaError.INVALID_RECORD for e in errors), errors
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    tp = TopicPartition(plain, 0)
    assert admin.list_offsets({tp: OffsetSpec.for_timestamp(base + 12_500)})[tp].result(10).offset == 13
    assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(10).offset == 20


def test_a_topic_compression_type_recompresses_what_producers_send(rafka: Rafka) -> None:
    """compression.type=zstd: uncompressed and gzip batches are stored in zstd (the partition
    takes a fraction of an uncompressed topic's bytes) and every client reads them back."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient

    zstd, plain = _name("zstd"), _name("plain")
    _create(rafka.bootstrap, zstd, {"compression.type": "zstd"})
    _create(rafka.bootstrap, plain, {})
    expected: list[Row] = []
    p = Producer({"bootstrap.servers": rafka.bootstrap, "compression.type": "none", "linger.ms": 20})
    for i in range(150):
        value = (b"reading %d; " % i) * 80
        p.produce(zstd, value, key=b"c%d" % i, partition=0)
        p.produce(plain, value, key=b"c%d" % i, partition=0)
        expected.append((i, b"c%d" % i, value))
    p.flush(15)
    kp = KafkaProducer(bootstrap_servers=rafka.bootstrap, compression_type="gzip", linger_ms=20)
    for i in range(20):
        kp.send(zstd, (b"gzip %d; " % i) * 50, key=b"g%d" % i, partition=0)
        expected.append((150 + i, b"g%d" % i, (b"gzip %d; " % i) * 50))
    kp.flush(15)
    kp.close()
    assert read_confluent(rafka.bootstrap, zstd) == expected
    assert read_kafka_python(rafka.bootstrap, zstd) == expected
    assert read_aiokafka(rafka.bootstrap, zstd, 170) == expected
    assert read_kcat(rafka.bootstrap, zstd) == expected
    admin = KafkaAdminClient(bootstrap_servers=rafka.bootstrap)
    try:
        sizes = {t["name"]: t["partitions"][0]["partition_size"]
                 for t in admin.describe_log_dirs()[0]["log_dirs"][0]["topics"] if t["name"] in (zstd, plain)}
    finally:
        admin.close()
    assert sizes[zstd] * 10 < sizes[plain], sizes

    def fetch(version: int) -> dict[str, Any]:
        part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                "log_start_offset": -1}
        with RawClient("127.0.0.1", rafka.port) as raw:
            resp = raw.request(1, version, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                            "topics": [{"topic": zstd, "partitions": [part]}],
                                            "forgotten_topics_data": []})
        return resp["responses"][0]["partitions"][0]

    # Kafka: a client fetching below v10 predates zstd (KIP-110); v10 gets the batches, in zstd
    assert fetch(9)["error_code"] == 76  # UNSUPPORTED_COMPRESSION_TYPE
    answer = fetch(10)
    assert answer["error_code"] == 0 and answer["records"][22] & 0x07 == 4
