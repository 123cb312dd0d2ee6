"""Online migration between classic and consumer groups, driven by confluent-kafka.

A classic consumer (group.protocol=classic) and a KIP-848 consumer
(group.protocol=consumer) share one group id: the group is upgraded to a
consumer group when the KIP-848 member joins and downgraded back when it leaves;
empty groups convert both ways; committed offsets are kept throughout.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.clients import create_topic, wait_for
from tests.integration.conftest import Rafka
from tests.integration.test_consumer_protocol import Member
from tests.rawclient import RawClient

PARTITIONS = 6
CLASSIC = {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky",
           "session.timeout.ms": 6000, "heartbeat.interval.ms": 200}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rafka]:
    b = Rafka(tmp_path_factory.mktemp("rafka-migration") / "data",
              extra=["--consumer-group-heartbeat-interval-ms", "300",
                     "--consumer-group-session-timeout-ms", "6000"]).start()
    yield b
    b.stop()


def produce(bootstrap: str, topic: str, values: range) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, value=str(v).encode(), partition=v % PARTITIONS)
    p.flush(10)


def group_type(bootstrap: str, group: str) -> str:
    """The group's type as ListGroups v5 reports it ("" if not listed)."""
    with RawClient("127.0.0.1", int(bootstrap.rsplit(":", 1)[1]), timeout=5) as c:
        groups = c.request(16, 5, {"states_filter": [], "types_filter": []})["groups"]
    return next((g["group_type"] for g in groups if g["group_id"] == group), "")


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions
    req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])]
    res = admin.list_consumer_group_offsets(req)[group].result(10)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def values(members: list[Member]) -> list[int]:
    return sorted(int(r.value()) for m in members for r in m.records)


def disjoint_cover(members: list[Member]) -> bool:
    return sorted(p for m in members for p in m.assigned) == list(range(PARTITIONS))


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"])
def test_classic_group_upgrades_and_downgrades(broker: Rafka, assignor: str) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(broker.bootstrap, topic, range(60))
    auto: dict[str, Any] = {"enable.auto.commit": True, "auto.commit.interval.ms": 200}
    c = Member(broker.bootstrap, group, topic, **{**CLASSIC, "partition.assignment.strategy": assignor}, **auto)
    members = [c]
    try:
        wait_for(lambda: len(c.assigned) == PARTITIONS and len(c.records) == 60, 30, "classic member consumes")
        wait_for(lambda: committed(broker.bootstrap, group, topic) == {p: 10 for p in range(PARTITIONS)}, 15,
                 "offsets committed")
        assert group_type(broker.bootstrap, group) == "classic"

        # a KIP-848 member joins: upgrade; both share the partitions
        m = Member(broker.bootstrap, group, topic, **auto)
        members.append(m)
        wait_for(lambda: disjoint_cover(members) and len(m.assigned) == 3, 30, "mixed-group assignment")
        assert group_type(broker.bootstrap, group) == "consumer"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10)
        assert group in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group])[group].result(10)
        assert described.type == ConsumerGroupType.CONSUMER and len(described.members) == 2
        produce(broker.bootstrap, topic, range(60, 120))
        wait_for(lambda: set(values(members)) >= set(range(120)), 30, "new records consumed")
        assert all(int(r.value()) >= 60 for r in m.records)  # resumed at the committed offsets

        # the KIP-848 member leaves: downgrade; the classic member gets everything back
        m.close()
        members.remove(m)
        wait_for(lambda: len(c.assigned) == PARTITIONS, 30, "classic member takes everything")
        wait_for(lambda: group_type(broker.bootstrap, group) == "classic", 10, "group is classic again")
        produce(broker.bootstrap, topic, range(120, 180))
        wait_for(lambda: set(values(members)) >= set(range(120, 180)), 30, "records after downgrade")
        assert not c.errors and not m.errors, (c.errors, m.errors)
    finally:
        for x in members:
            x.close()


def test_classic_member_joins_a_consumer_group(broker: Rafka) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    m = Member(broker.bootstrap, group, topic)
    members = [m]
    try:
        wait_for(lambda: len(m.assigned) == PARTITIONS, 30, "consumer member assigned")
        c = Member(broker.bootstrap, group, topic, **CLASSIC)  # joins the consumer group as a classic member
        members.append(c)
        wait_for(lambda: disjoint_cover(members) and len(c.assigned) == 3, 30, "classic member gets its share")
        assert group_type(broker.bootstrap, group) == "consumer"
        m.close()
        members.remove(m)
        wait_for(lambda: len(c.assigned) == PARTITIONS, 30, "downgraded: the classic member takes everything")
        assert group_type(broker.bootstrap, group) == "classic"
        assert not c.errors, c.errors
    finally:
        for x in members:
            x.close()


def test_empty_groups_convert_both_ways(broker: Rafka) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    seen: list[int] = []
    for n, conf in enumerate([CLASSIC, {}, CLASSIC]):
        produce(broker.bootstrap, topic, range(n * 12, n * 12 + 12))
        x = Member(broker.bootstrap, group, topic, **conf)
        try:
            wait_for(lambda x=x: len(x.records) >= 12, 30, f"round {n}")  # type: ignore[misc]
            x.stop_polling()
            x.c.commit(asynchronous=False)
            want = "consumer" if conf is not CLASSIC else "classic"
            assert group_type(broker.bootstrap, group) == want
        finally:
            x.close()
        got = sorted(int(r.value()) for r in x.records)
        assert got == list(range(n * 12, n * 12 + 12)), got  # resumed exactly at the committed offsets
        seen += got
    assert committed(broker.bootstrap, group, topic) == {p: 6 for p in range(PARTITIONS)}


def test_mixed_group_survives_broker_restart(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", extra=["--consumer-group-heartbeat-interval-ms", "300"]).start()
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    members: list[Member] = []
    try:
        create_topic(broker.bootstrap, topic, PARTITIONS)
        members.append(Member(broker.bootstrap, group, topic, **{**CLASSIC, "session.timeout.ms": 20000}))
        wait_for(lambda: len(members[0].assigned) == PARTITIONS, 30, "classic member assigned")
        members.append(Member(broker.bootstrap, group, topic))
        wait_for(lambda: disjoint_cover(members) and len(members[1].assigned) == 3, 30, "mixed-group assignment")
        time.sleep(1)
        before = [(set(m.assigned), len(m.events)) for m in members]
        port = broker.port
        broker.kill_all()
        broker.port = port
        broker.start()
        time.sleep(4)  # several heartbeats of both protocols against the recovered coordinator
        assert group_type(broker.bootstrap, group) == "consumer"
        assert [(set(m.assigned), len(m.events)) for m in members] == before, "no rebalance after recovery"
    finally:
        for m in members:
            m.close()
        broker.stop()
