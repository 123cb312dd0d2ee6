"""A shard does not hold what retention keeps in its own memory: a partition's batches are read
from its WAL files (rafka.shard.paging), live and after a restart: here one sealed 64 MiB
segment and the active one, paged each mebibyte."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from rafka.shard.metrics import anon_bytes
from tests.integration.clients import create_topic, read_aiokafka, read_confluent, read_kafka_python, read_kcat
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka

pytestmark = pytest.mark.integration

COUNT, SIZE = 96_000, 1_000  # 96 MB retained


def _anon_mb(pid: int) -> float:
    """The process's anonymous resident memory (its heap: not the page cache of files it maps)."""
    anon = anon_bytes(pid)
    assert anon is not None, "no RssAnon"
    return anon / 2**20


def _shard_gauge(broker: Rafka, name: str, above: float = -1) -> float:
    """Shard 0's gauge ``name``, once its state metrics (written every 5 s) show it above ``above``."""
    deadline = time.monotonic() + 15
    while True:
        body = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
        found = re.search(rf'^{name}\{{shard="0"\}} (\S+)$', body, re.MULTILINE)
        if (found and float(found.group(1)) > above) or time.monotonic() > deadline:
            assert found, f"no {name}"
            return float(found.group(1))
        time.sleep(0.5)


def _value(i: int) -> bytes:
    return i.to_bytes(4, "big") * (SIZE // 4)


def _produce_all(broker: Rafka, topic: str, count: int, partitions: int = 1) -> None:
    """Produce records 0..count-1 (record i to partition i % partitions), acks=all, every one acknowledged."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(count):
        while True:
            try:
                p.produce(topic, _value(i), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def _read_all(bootstrap: str, topic: str, count: int = COUNT, partitions: int = 1) -> int:
    """Consume the topic from the start, checking each record's content (record i went to
    partition i % partitions) and order; how many were read."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("r"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    n, deadline, next_offset = 0, time.monotonic() + 90, [0] * partitions
    try:
        while n < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            p, offset = m.partition(), m.offset()
            assert offset == next_offset[p] and m.value() == _value(offset * partitions + p), \
                f"partition {p} offset {offset} read as #{next_offset[p]}"
            next_offset[p] += 1
            n += 1
    finally:
        c.close()
    return n


def test_retained_data_is_served_from_the_files_not_held_in_the_shards_memory(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=1).start()
    topic = _name("t")
    try:
        create_topic(broker.bootstrap, topic, 1)  # Kafka's defaults: 7 days' retention, 1 GiB segments
        pid = broker.children()["rafka-shard-0"]
        before = _anon_mb(pid)
        _produce_all(broker, topic, COUNT)
        grew = _anon_mb(pid) - before
        # held in memory, the 96 MB would show here (54 MB of 48 MB did); paged, the shard keeps under a MiB
        # of batches, ~50 bytes per older batch, and the allocator's high-water mark of the produce path
        # (7-19 MB seen)
        assert grew < 40, f"the shard's heap grew {grew:.1f} MB holding {COUNT * SIZE / 1e6:.0f} MB of records"
        assert _read_all(broker.bootstrap, topic) == COUNT

        broker.stop()
        broker.start()  # recovery pages each sealed segment as soon as it is replayed
        pid = broker.children()["rafka-shard-0"]
        assert _read_all(broker.bootstrap, topic) == COUNT
        after = _anon_mb(pid)
        assert after - before < 40, f"after a restart the shard's heap is {after:.1f} MB (was {before:.1f} MB)"
    finally:
        broker.stop()


def test_many_partitions_each_under_a_mebibyte_stay_within_the_shards_budget(tmp_path: Path) -> None:
    """256 busy partitions of ~350 KB each: none reaches the mebibyte that pages a partition, and
    the shard held all 90 MB; past the shard's budget (32 MiB) it pages those holding the most."""
    broker = Rafka(tmp_path / "data", shards=1).start()
    topic, partitions, count = _name("t"), 256, 90_000
    try:
        create_topic(broker.bootstrap, topic, partitions)
        pid = broker.children()["rafka-shard-0"]
        before = _anon_mb(pid)
        _produce_all(broker, topic, count, partitions)
        held = _shard_gauge(broker, "rafka_log_unpaged_bytes", above=0)  # a sample written after the produce
        assert 0 < held <= 32 << 20, f"{held / 2**20:.1f} MiB of batches in the heap"
        # held, the 90 MB stay (92 MB seen); paged, at most the budget, once the allocator has handed
        # back what the page-outs freed (within TRIM_INTERVAL_S; 24 MB seen, 44-70 MB right after the produce)
        deadline = time.monotonic() + 15
        while (grew := _anon_mb(pid) - before) >= 45 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert grew < 45, f"the shard's heap grew {grew:.1f} MB holding {count * SIZE / 1e6:.0f} MB of records"

        assert _read_all(broker.bootstrap, topic, count, partitions) == count
    finally:
        broker.stop()


def test_a_shard_killed_while_it_pages_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """kill -9 of the shard midway through 80 MB (one 64 MiB segment sealed, the active one paged each
    mebibyte): every acknowledged record is read back at its offset, after the shard's restart and
    after the whole broker's."""
    broker = Rafka(tmp_path / "data", shards=1).start()
    topic, count = _name("t"), 80_000
    try:
        create_topic(broker.bootstrap, topic, 1)
        pid = broker.children()["rafka-shard-0"]
        acked: dict[int, bytes] = {}

        def delivered(err: object, msg: Any) -> None:
            if err is None:
                acked[msg.offset()] = msg.value()

        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "enable.idempotence": True,
                      "message.timeout.ms": 60_000})
        for i in range(count):
            if i == count // 2:
                os.kill(pid, signal.SIGKILL)
            while True:
                try:
                    p.produce(topic, _value(i), on_delivery=delivered)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(90) == 0 and len(acked) == count
        assert sorted(acked) == list(range(count)), "one offset per record, none lost or written twice"
        assert broker.children()["rafka-shard-0"] != pid

        for _ in range(2):
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("r"),
                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
            c.subscribe([topic])
            read: dict[int, bytes] = {}
            deadline = time.monotonic() + 60
            while len(read) < count and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and not m.error():
                    read[m.offset()] = m.value()
            c.close()
            assert read == acked
            broker.stop()
            broker.start()
    finally:
        broker.stop()


def test_every_client_reads_paged_batches(tmp_path: Path) -> None:
    """5 MB in 1 MiB segments (sealed ones, and the active one paged by size), read back with
    confluent-kafka, kafka-python, aiokafka and kcat after a restart (recovery paged them all)."""
    broker = Rafka(tmp_path / "data", shards=1).start()
    topic, count = _name("t"), 5_000
    try:
        create_topic(broker.bootstrap, topic, 1, {"segment.bytes": "1048576"})
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for i in range(count):
            p.produce(topic, (b"%06d" % i) * 160, key=b"k%d" % i)
            if i % 1000 == 999:
                p.flush(30)
        assert p.flush(30) == 0
        broker.stop()
        broker.start()
        expected = [(i, b"k%d" % i, (b"%06d" % i) * 160) for i in range(count)]
        assert read_confluent(broker.bootstrap, topic) == expected
        assert read_kafka_python(broker.bootstrap, topic) == expected
        assert read_aiokafka(broker.bootstrap, topic, count) == expected
        assert read_kcat(broker.bootstrap, topic) == expected
        assert _shard_gauge(broker, "rafka_log_mapped_files") >= 4, "the segments were read from their files"
    finally:
        broker.stop()
