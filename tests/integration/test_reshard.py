"""Restarting on the same data with another --shards: every producer id handed out before stays
taken, so a new producer is never mistaken for an old one (whose last batches the partition
remembers: a new producer's first batches would be dropped as their duplicates)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.clients import create_topic
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration
PRODUCERS, RECORDS = 12, 3


def _transactional_producers(bootstrap: str, topic: str, prefix: str) -> None:
    """``PRODUCERS`` transactional producers, each committing ``RECORDS`` records to partition 0."""
    for i in range(PRODUCERS):
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-{i}", "linger.ms": 50})
        p.init_transactions(15)
        p.begin_transaction()
        for k in range(RECORDS):
            p.produce(topic, f"{prefix}-{i}-{k}".encode(), partition=0)
        p.commit_transaction(15)


def _new_producer_ids(port: int, prefix: str) -> set[int]:
    """Ids from InitProducerId: idempotent ones and transactional ones."""
    got = set()
    with RawClient("127.0.0.1", port) as raw:
        for i in range(PRODUCERS):
            for tid in (None, f"{prefix}-{i}"):
                resp = raw.request(22, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                           "producer_id": -1, "producer_epoch": -1})
                assert resp["error_code"] == 0
                got.add(resp["producer_id"])
    return got


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("r"), "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    while (m := c.poll(3.0)) is not None:
        if not m.error():
            out.append(m.value())
    c.close()
    return out


def test_producer_ids_stay_unique_when_the_shard_count_changes(tmp_path: Path) -> None:
    topic, before, after = _name("t"), _name("a"), _name("b")
    broker = Rafka(tmp_path / "data", shards=2).start()
    try:
        create_topic(broker.bootstrap, topic, 1)
        _transactional_producers(broker.bootstrap, topic, before)
        old_ids = _new_producer_ids(broker.port, before + "-raw")
    finally:
        broker.stop()
    broker = Rafka(tmp_path / "data", shards=3).start()
    try:
        new_ids = _new_producer_ids(broker.port, after + "-raw")
        assert not old_ids & new_ids, f"ids handed out again after the reshard: {sorted(old_ids & new_ids)}"
        _transactional_producers(broker.bootstrap, topic, after)
        got = _read_committed(broker.bootstrap, topic)
        want = [f"{prefix}-{i}-{k}".encode() for prefix in (before, after) for i in range(PRODUCERS) for k in range(RECORDS)]
        assert sorted(got) == sorted(want), f"{len(want) - len(got)} records lost"
    finally:
        broker.stop()
