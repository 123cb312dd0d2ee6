"""Helpers to drive real Kafka clients against a test broker."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

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


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name]
    fut.result(timeout=15)


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


def covers_exactly(members: list[Member], partitions: int) -> bool:
    seen: list[int] = []
    for m in members:
        seen.extend(m.assigned)
    return sorted(seen) == list(range(partitions))
