"""Pipelined requests of one connection take effect in the order they were sent, as on Kafka,
which handles a connection's requests one at a time: the last asynchronous commit stands, and
a producer's batches land in send order. The gateway's topic cache lives a short time here
(``--topic-metadata-ttl-ms 50``), so bursts keep arriving while it refills: the moment a
request that waits for a lookup could be overtaken by one that finds the cache fresh."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.clients import create_topic, wait_for
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka


@pytest.fixture(scope="module")
def rafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rafka]:
    broker = Rafka(tmp_path_factory.mktemp("order") / "data", extra=["--topic-metadata-ttl-ms", "50"]).start()
    try:
        yield broker
    finally:
        broker.stop()


def test_the_last_of_a_burst_of_asynchronous_commits_stands(rafka: Rafka) -> None:
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 4)
    acked: dict[int, int] = {}
    failed: list[str] = []
    answered = 0

    def on_commit(err: object, parts: list[TopicPartition]) -> None:
        nonlocal answered
        answered += 1
        if err is not None or any(tp.error for tp in parts):
            failed.append(f"{err} {[tp.error for tp in parts]}")
            return
        for tp in parts:
            acked[tp.partition] = max(acked.get(tp.partition, -1), tp.offset)

    c = Consumer({"bootstrap.servers": rafka.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "on_commit": on_commit})
    try:
        offset = sent = 0
        wrong = []
        for burst in range(40):
            time.sleep(0.06)  # the gateway's topic cache expires
            for i in range(200):
                offset += 1
                c.commit(offsets=[TopicPartition(topic, offset % 4, offset)], asynchronous=True)
                sent += 1
                if i % 8 == 0:
                    c.poll(0)
            wait_for(lambda n=sent: (c.poll(0.05), answered >= n)[1], 30, "every commit answered")
            committed = {tp.partition: tp.offset for tp in
                         c.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)}
            if committed != acked:
                wrong.append((burst, committed, dict(acked)))
        assert failed == []
        assert wrong == [], "a commit sent earlier replaced one sent later (burst, committed, last acknowledged)"
    finally:
        c.close()


def test_a_producers_pipelined_batches_land_in_the_order_sent(rafka: Rafka) -> None:
    """One record per request, many requests in flight, retries off: the log holds them in send order."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    errors: list[str] = []
    p = Producer({"bootstrap.servers": rafka.bootstrap, "enable.idempotence": False, "acks": 1, "linger.ms": 0,
                  "batch.num.messages": 1, "retries": 0, "max.in.flight.requests.per.connection": 1000})
    sent = 0
    for _burst in range(15):
        time.sleep(0.06)
        for _ in range(200):
            p.produce(topic, str(sent).encode(), partition=0, on_delivery=lambda e, _m: errors.append(str(e)) if e else None)
            sent += 1
            p.poll(0)
        assert p.flush(30) == 0
    assert errors == []
    c = Consumer({"bootstrap.servers": rafka.bootstrap, "group.id": _name("g"), "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        values: list[int] = []
        deadline = time.monotonic() + 60
        while len(values) < sent and time.monotonic() < deadline:
            values += [int(m.value()) for m in c.consume(1000, 1.0) if not m.error()]
        assert values == list(range(sent)), "records in the order they were produced"
    finally:
        c.close()
