"""Compacted topics through real clients: the log cleaner keeps each key's last value at its
offset, drops tombstones after delete.retention.ms, and a crash restart brings back the
compacted log. confluent-kafka produces; confluent-kafka, kafka-python, aiokafka and kcat read."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.clients import Row, read_aiokafka, read_confluent, read_kafka_python, read_kcat
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka

pytestmark = pytest.mark.integration

# every append after 100 ms rolls a segment; the cleaner looks every 200 ms and cleans any dirty
# segment (with Kafka's ratio of 0.5, how much is cleaned when would depend on the timing)
CONFIGS = {"cleanup.policy": "compact", "segment.ms": "100", "delete.retention.ms": "1500",
           "min.cleanable.dirty.ratio": "0.01"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rafka]:
    b = Rafka(tmp_path_factory.mktemp("compaction") / "data", extra=["--log-cleaner-backoff-ms", "200"]).start()
    yield b
    b.stop()


def _round(producer: Producer, topic: str, rows: list[tuple[bytes, bytes | None]]) -> None:
    """One batch of ``rows``, then a pause so that the next append rolls a segment."""
    for key, value in rows:
        producer.produce(topic, value, key=key, partition=0)
    producer.flush(15)
    time.sleep(0.15)


def _wait_for(read: Any, expected: list[Row], what: str) -> None:
    deadline = time.monotonic() + 20
    rows: list[Row] = []
    while time.monotonic() < deadline:
        rows = read()
        if rows == expected:
            return
        time.sleep(0.3)
    raise AssertionError(f"{what}: read {rows}, expected {expected}")


def test_every_client_reads_the_compacted_log_and_a_restart_keeps_it(broker: Rafka) -> None:
    topic = _name("compacted")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=CONFIGS)])[topic].result(15)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    keys = [b"k%d" % i for i in range(8)]
    # round 0 comes from an idempotent producer that never writes again: the clean keeps its
    # batch as an empty header (its sequence), which every reader must step over
    idempotent = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "enable.idempotence": True})
    for r in range(4):  # offsets 0..31: 8 keys, 4 times
        _round(idempotent if r == 0 else p, topic, [(k, b"v%d-%s" % (r, k)) for k in keys])
    _round(p, topic, [(b"k7", None)])  # 32: a tombstone
    _round(p, topic, [(b"end", b"x")])  # 33: the active segment, never cleaned
    expected = [(24 + i, k, b"v3-" + k) for i, k in enumerate(keys[:7])] + [(32, b"k7", None), (33, b"end", b"x")]
    _wait_for(lambda: read_confluent(broker.bootstrap, topic), expected, "confluent-kafka after a clean")
    assert read_kafka_python(broker.bootstrap, topic) == expected
    assert read_aiokafka(broker.bootstrap, topic, 34) == expected
    assert read_kcat(broker.bootstrap, topic) == expected
    # a consumer positioned on a removed offset gets the next record
    assert read_confluent(broker.bootstrap, topic, start=3) == expected

    time.sleep(1.6)  # past the tombstone's delete horizon; new data makes the log dirty again
    _round(p, topic, [(k, b"v4-" + k) for k in keys[:4]])  # 34..37
    _round(p, topic, [(b"end", b"y")])  # 38
    # the tombstone is gone; end=x stays while end=y is in the active segment
    expected = ([(28 + i, k, b"v3-" + k) for i, k in enumerate(keys[4:7])] + [(33, b"end", b"x")]
                + [(34 + i, k, b"v4-" + k) for i, k in enumerate(keys[:4])] + [(38, b"end", b"y")])
    _wait_for(lambda: read_confluent(broker.bootstrap, topic), expected, "confluent-kafka after the horizon")

    broker.kill_all()
    broker.start()
    assert read_confluent(broker.bootstrap, topic) == expected
    assert read_kcat(broker.bootstrap, topic) == expected


def test_a_compacted_partition_holds_its_live_keys_not_its_history(broker: Rafka) -> None:
    from kafka.admin import KafkaAdminClient

    topic = _name("bounded")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={**CONFIGS, "segment.ms": "20"})])[topic].result(15)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for r in range(60):  # 60 rounds of the same 4 keys, ~10 KB each
        for k in range(4):
            p.produce(topic, b"%d" % r + b"." * 2500, key=b"k%d" % k, partition=0)
        p.flush(15)
        time.sleep(0.03)
    p.produce(topic, b"last", key=b"end", partition=0)
    p.flush(15)
    time.sleep(1.0)  # a few cleaner passes
    rows = read_confluent(broker.bootstrap, topic)
    assert [(k, v[:2]) for _, k, v in rows] == [(b"k%d" % k, b"59") for k in range(4)] + [(b"end", b"la")]
    kafka_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [entry] = [t for t in kafka_admin.describe_log_dirs()[0]["log_dirs"][0]["topics"] if t["name"] == topic]
    finally:
        kafka_admin.close()
    [size] = [q["partition_size"] for q in entry["partitions"]]
    assert size < 25_000, f"the partition holds {size} bytes for 4 live keys of 10 KB (600 KB written)"
    wal = sum(f.stat().st_size for f in Path(broker.data_dir, "logs").rglob("*.wal") if topic in str(f))
    assert wal < 200_000, f"the write-ahead log holds {wal} bytes of 600 KB written"
