"""Helpers to drive real Kafka clients against a test broker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def unique_name(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def spread_name(prefix: str, partitions: int, shards: int = 2) -> str:
    """A unique topic name whose partitions' logs live on every one of ``shards`` shards (a
    random name may put them all on one: 1 in 2**(partitions-1) with two shards)."""
    from rafka import ids

    while True:
        name = unique_name(prefix)
        owners = {ids.shard_for_partition(ids.log_partition(ids.DEFAULT_ORG, name, p), shards) for p in range(partitions)}
        if len(owners) == shards:
            return name


def name_on_shard(prefix: str, shard: int, shards: int = 2, *, topic: bool = False) -> str:
    """A unique group or transactional id whose coordinator partition lives on ``shard`` of
    ``shards`` (with ``topic``: a topic name whose partition 0's log lives there)."""
    from rafka import ids

    while True:
        name = unique_name(prefix)
        partition = (ids.log_partition(ids.DEFAULT_ORG, name, 0) if topic
                     else ids.coordinator_partition(ids.DEFAULT_ORG, name))
        if ids.shard_for_partition(partition, shards) == shard:
            return name


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})])[name]
    fut.result(timeout=15)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    """``group``'s committed offsets of ``topic``'s first ``partitions`` partitions (OffsetFetch)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
        return [tp.offset for tp in got]
    finally:
        c.close()


def consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 2000}
    conf.update(extra)
    return Consumer(conf)


class Member:
    """A confluent-kafka consumer polled on its own thread, recording its assignment."""

    incremental = False  # on_assign adds to the assignment (always, not only for cooperative-sticky)
    poll_timeout = 0.1

    def __init__(self, bootstrap: str, group: str, topic: str, **extra: Any) -> None:
        self.c = self.make_consumer(bootstrap, group, extra)
        self.assigned: set[int] = set()
        self.events: list[tuple[str, tuple[int, ...]]] = []
        self.errors: list[str] = []
        self.records: list[Any] = []
        self._stop = threading.Event()
        incremental = self.incremental or extra.get("partition.assignment.strategy") == "cooperative-sticky"

        def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
            ps = tuple(sorted(p.partition for p in parts))
            self.events.append(("assign", ps))
            if incremental:
                self.assigned |= set(ps)
            else:
                self.assigned = set(ps)

        def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
            ps = tuple(sorted(p.partition for p in parts))
            self.events.append(("revoke", ps))
            self.assigned -= set(ps)

        self.c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def make_consumer(self, bootstrap: str, group: str, extra: dict[str, Any]) -> Consumer:
        return consumer(bootstrap, group, **extra)

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.c.poll(self.poll_timeout)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
            else:
                self.records.append(msg)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(10)
        self.c.close()

    def stop_polling(self) -> None:
        self._stop.set()
        self.thread.join(10)


def wait_for(pred: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class ConsumerProtocolMember(Member):
    """A ``group.protocol=consumer`` (KIP-848) consumer polled on its own thread."""

    incremental = True
    poll_timeout = 0.05

    def make_consumer(self, bootstrap: str, group: str, extra: dict[str, Any]) -> Consumer:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000}
        conf.update(extra)
        return Consumer(conf)


def member_carries_on(m: Member, restart: Callable[[], object], settle: float = 4.0) -> None:
    """``m``, the only member of a 4-partition topic's group, keeps its assignment across
    ``restart()`` (a broker restart on the same port) with no rebalance: its membership and
    generation (or member epoch) survived. ``settle``: seconds of heartbeats after it. Closes ``m``."""
    try:
        wait_for(lambda: m.assigned == {0, 1, 2, 3}, 30, "assignment")
        events = len(m.events)
        restart()
        time.sleep(settle)  # heartbeats against the recovered coordinator
        assert m.assigned == {0, 1, 2, 3}
        assert m.events[events:] == [], "membership and generation survived: no rebalance"
    finally:
        m.close()


def covers_exactly(members: list[Member], partitions: int) -> bool:
    seen: list[int] = []
    for m in members:
        seen.extend(m.assigned)
    return sorted(seen) == list(range(partitions))


# ------------------------------------------------ reading one partition from the start

Row = tuple[int, bytes | None, bytes | None]  # offset, key, value


def read_confluent(bootstrap: str, topic: str, start: int = 0) -> list[Row]:
    """Partition 0 of ``topic`` from ``start`` to its end, read with confluent-kafka."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, start)])
    rows: list[Row] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            break  # partition EOF: everything read
        rows.append((m.offset(), m.key(), m.value()))
    c.close()
    return rows


def read_kafka_python(bootstrap: str, topic: str) -> list[Row]:
    """Partition 0 of ``topic`` from its start, read with kafka-python."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=3000, enable_auto_commit=False)
    c.assign([KTP(topic, 0)])
    c.seek_to_beginning()
    rows = [(m.offset, m.key, m.value) for m in c]
    c.close()
    return rows


def read_aiokafka(bootstrap: str, topic: str, end: int) -> list[Row]:
    """Partition 0 of ``topic`` from its start up to offset ``end``, read with aiokafka."""
    async def run() -> list[Row]:
        import aiokafka

        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        tp = aiokafka.TopicPartition(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        rows: list[Row] = []
        deadline = time.monotonic() + 15
        while await c.position(tp) < end and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=300)).values():
                rows += [(m.offset, m.key, m.value) for m in msgs]
        await c.stop()
        return rows

    return asyncio.run(run())


def read_kcat(bootstrap: str, topic: str) -> list[Row]:
    """Partition 0 of ``topic`` from its start to its end, read with kcat (text values)."""
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                          "-Z", "-f", "%o|%k|%S|%s\n"], check=True, capture_output=True, timeout=30)
    rows = []
    for line in out.stdout.decode().splitlines():
        offset, key, size, value = line.split("|", 3)
        rows.append((int(offset), key.encode(), None if size == "-1" else value.encode()))
    return rows


def fetch_partition(partition: int, fetch_offset: int = 0, **fields: Any) -> dict[str, Any]:
    """One partition of a Fetch request (``fetch_request``): 1 MiB at most, no leader epoch."""
    return {"partition": partition, "fetch_offset": fetch_offset, "partition_max_bytes": 1 << 20,
            "current_leader_epoch": -1, "log_start_offset": -1, **fields}


def fetch_request(topics: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A Fetch request body for RawClient: no wait, 1 byte at least and 1 MiB at most, read
    uncommitted, no fetch session; ``fields`` override."""
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": topics, "forgotten_topics_data": [], "rack_id": "",
            **fields}


def fetch_of_one_partition(c: Any, topic: str, version: int, max_wait: int = 0) -> dict[str, Any]:
    """A Fetch of partition 0 of ``topic`` from offset 0 over RawClient ``c``: by name below
    version 13, by the topic's id (from Metadata) from 13. Sent, not awaited:
    ``c.read_response(1, version)`` reads the answer."""
    if version >= 13:
        md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        named: dict[str, Any] = {"topic_id": md["topics"][0]["topic_id"]}
    else:
        named = {"topic": topic}
    req = fetch_request([{**named, "partitions": [fetch_partition(0)]}], max_wait=max_wait)
    c.send_raw(c.encode(1, version, req))
    return req


def run_scenario(argv: list[str], what: str, broker: Any, timeout: float) -> dict[str, Any]:
    """Run a client program's scenario (``argv``) against ``broker``; the JSON of its last line
    (a hang or a failure fails the test with the program's stderr and the broker's log)."""
    try:
        out = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"{what} hung for {timeout}s:\n{stderr[-4000:]}\nrafka log:\n{broker.logs()}")
    assert out.returncode == 0 and out.stdout.strip(), \
        f"{what} failed ({out.returncode}):\n{out.stderr[-4000:]}\nrafka log:\n{broker.logs()}"
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
