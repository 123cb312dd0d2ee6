"""KIP-848 consumer groups driven by confluent-kafka with ``group.protocol=consumer``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.clients import create_topic, wait_for
from tests.integration.conftest import Rafka

PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rafka]:
    b = Rafka(tmp_path_factory.mktemp("rafka-kip848") / "data",
              extra=["--consumer-group-heartbeat-interval-ms", "300",
                     "--consumer-group-session-timeout-ms", "6000"]).start()
    yield b
    b.stop()


class Member:
    """A ``group.protocol=consumer`` consumer polled on its own thread."""

    def __init__(self, bootstrap: str, group: str, topic: str, **extra: Any) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000}
        conf.update(extra)
        self.c = Consumer(conf)
        self.assigned: set[int] = set()
        self.events: list[tuple[str, tuple[int, ...]]] = []
        self.errors: list[str] = []
        self.records: list[Any] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()

        def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
            ps = tuple(sorted(p.partition for p in parts))
            self.events.append(("assign", ps))
            self.assigned |= set(ps)

        def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
            ps = tuple(sorted(p.partition for p in parts))
            self.events.append(("revoke", ps))
            self.assigned -= set(ps)

        self.c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.c.poll(0.05)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
            else:
                self.records.append(msg)

    def stop_polling(self) -> None:
        self._stop.set()
        self.thread.join(10)

    def close(self) -> None:
        self.stop_polling()
        self.c.close()


def disjoint_cover(members: list[Member]) -> bool:
    seen = [p for m in members for p in m.assigned]
    return sorted(seen) == list(range(PARTITIONS))


def test_members_share_partitions_incrementally(broker: Rafka) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    m1 = Member(broker.bootstrap, group, topic)
    m2 = Member(broker.bootstrap, group, topic)
    members = [m1, m2]
    try:
        # (a) two members: full, disjoint coverage, 3 each
        wait_for(lambda: disjoint_cover(members) and len(m1.assigned) == 3, 30, "two-member assignment")
        before = {id(m): set(m.assigned) for m in members}
        events_before = [len(m.events) for m in members]
        # (b) a third member: only the partitions it takes move
        m3 = Member(broker.bootstrap, group, topic)
        members.append(m3)
        wait_for(lambda: disjoint_cover(members) and all(len(m.assigned) == 2 for m in members), 30,
                 "three-member assignment")
        for m, n in zip(members[:2], events_before):
            assert m.assigned <= before[id(m)]  # kept its remaining partitions
            new_events = [e for e in m.events[n:] if e[1]]  # librdkafka may call on_assign([])
            assert all(kind == "revoke" for kind, _ in new_events), new_events  # incremental: no re-assign
            assert len(set().union(*[set(ps) for _, ps in new_events])) == 1
        assert m3.events and m3.events[0][0] == "assign"
        # (c) a member closing hands its partitions over
        m2.close()
        members.remove(m2)
        wait_for(lambda: disjoint_cover(members) and all(len(m.assigned) == 3 for m in members), 30,
                 "hand-over after close")
        assert not any(e for m in members for e in m.errors), [m.errors for m in members]
    finally:
        for m in members:
            m.close()


DYING_MEMBER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer"})
c.subscribe([sys.argv[3]], on_assign=lambda c, ps: print("assigned", len(ps), flush=True))
while True:
    c.poll(0.05)
"""


def test_a_dying_member_hands_its_partitions_over(broker: Rafka) -> None:
    """kill -9 of a member (no leave): after the session timeout its partitions move to the others."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    dying = subprocess.Popen([sys.executable, "-c", DYING_MEMBER, broker.bootstrap, group, topic],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    survivor = None
    try:
        assert dying.stdout is not None and dying.stdout.readline().startswith("assigned")
        survivor = Member(broker.bootstrap, group, topic)
        wait_for(lambda: len(survivor.assigned) == PARTITIONS // 2, 30, "the survivor's half")
        os.kill(dying.pid, signal.SIGKILL)
        start = time.monotonic()
        wait_for(lambda: survivor.assigned == set(range(PARTITIONS)), 30, "hand-over after kill -9")
        assert time.monotonic() - start >= 3  # not before the member's session could expire (6 s)
    finally:
        if dying.poll() is None:
            dying.kill()
        dying.wait(10)
        if survivor is not None:
            survivor.close()


def test_committed_offsets_resume_after_rejoin(broker: Rafka) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce(topic, value=str(i).encode(), partition=i % 2)
    p.flush(10)
    m = Member(broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(m.records) == 10, 30, "first 10 records")
        m.stop_polling()  # a synchronous commit waits on the queue the poll thread would drain
        m.c.commit(asynchronous=False)
    finally:
        m.close()
    for i in range(10, 14):
        p.produce(topic, value=str(i).encode(), partition=i % 2)
    p.flush(10)
    m = Member(broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(m.records) >= 4, 30, "records after rejoin")
        time.sleep(0.5)
        assert sorted(int(r.value()) for r in m.records) == [10, 11, 12, 13]
    finally:
        m.close()
