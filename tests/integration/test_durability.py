"""Crash recovery: every acknowledged write survives kill -9 of a shard or of the whole broker."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.integration.clients import Member, committed_offsets, create_topic, member_carries_on
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka

pytestmark = pytest.mark.integration


def _read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("r"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            out.append(m.value())
    c.close()
    return out


def test_kill_9_whole_broker_loses_nothing_acknowledged(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=2).start()
    topic, group = _name("t"), _name("g")
    try:
        create_topic(broker.bootstrap, topic, 3)
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 1})
        for i in range(600):
            p.produce(topic, value=f"v{i}".encode(), partition=i % 3)
        assert p.flush(15) == 0
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, p, 100 + p) for p in range(3)], asynchronous=False)
        c.close()
        broker.kill_all()
        broker.start()
        assert committed_offsets(broker.bootstrap, group, topic, 3) == [100, 101, 102]
        got = _read_all(broker.bootstrap, topic, 600)
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(600))
        # and the logs continue at the right offsets
        p = Producer({"bootstrap.servers": broker.bootstrap})
        offsets = []
        p.produce(topic, value=b"after", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
        p.flush(10)
        assert offsets == [200]
    finally:
        broker.stop()


def test_group_survives_broker_restart_without_rebalance(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=2).start()
    topic, group = _name("t"), _name("g")
    try:
        create_topic(broker.bootstrap, topic, 4)

        def restart() -> None:
            port = broker.port
            broker.kill_all()
            broker.port = port
            broker.start()

        member_carries_on(Member(broker.bootstrap, group, topic, **{"session.timeout.ms": 20000}), restart)
    finally:
        broker.stop()


def test_kill_9_one_shard_during_synchronous_commits(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=2).start()
    topic, group = _name("t"), _name("g")
    try:
        create_topic(broker.bootstrap, topic, 1)
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        acked = 0
        at_kill: list[int] = []  # what was acknowledged when the shard was killed

        def killer() -> None:
            time.sleep(1.0)
            owner = _owner_shard(broker, group)
            at_kill.append(acked)
            os.kill(broker.children()[f"rafka-shard-{owner}"], signal.SIGKILL)

        threading.Thread(target=killer, daemon=True).start()
        deadline = time.monotonic() + 25
        n = 0
        while time.monotonic() < deadline and (not at_kill or acked < at_kill[0] + 200):
            n += 1
            try:
                c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
                acked = n
            except KafkaException:
                time.sleep(0.05)
        c.close()
        assert at_kill and at_kill[0] > 0
        assert acked >= at_kill[0] + 200, "commits resumed after the shard restarted"
        assert committed_offsets(broker.bootstrap, group, topic, 1)[0] >= acked
    finally:
        broker.stop()


def test_a_stalled_then_killed_shard_during_idempotent_produce_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """The producer retries what a stalled or dead shard did not answer; the shard knows (after a
    restart, from its write-ahead log) which of those batches it already has."""
    from rafka import ids

    broker = Rafka(tmp_path / "data", shards=2).start()
    topic, partitions, n = _name("t"), 4, 8000
    try:
        create_topic(broker.bootstrap, topic, partitions)
        victim = f"rafka-shard-{ids.shard_for_partition(ids.log_partition(ids.DEFAULT_ORG, topic, 0), 2)}"
        pid = broker.children()[victim]

        def chaos() -> None:
            time.sleep(0.7)
            os.kill(pid, signal.SIGSTOP)  # requests time out in the client and are sent again,
            time.sleep(2.5)  # while the originals wait for the shard, which then appends them
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.7)
            os.kill(pid, signal.SIGKILL)

        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                      "batch.num.messages": 50, "message.timeout.ms": 60000, "socket.timeout.ms": 1000})
        failed: list[str] = []
        note = failed.append
        chaos_thread = threading.Thread(target=chaos, daemon=True)
        chaos_thread.start()
        for i in range(n):
            p.produce(topic, value=f"{i % partitions}-{i}".encode(), partition=i % partitions,
                      on_delivery=lambda err, _m: err is None or note(str(err)))
            if i % 100 == 0:
                p.poll(0)
                time.sleep(0.05)  # about four seconds of produce, through the stall and the kill
        chaos_thread.join()
        assert p.flush(60) == 0 and failed == []
        assert broker.children()[victim] != pid, "the supervisor restarted the shard"
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("r"), "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic, part, 0) for part in range(partitions)])
        got: dict[int, list[str]] = {part: [] for part in range(partitions)}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got[m.partition()].append(m.value().decode())
        c.close()
        for part in range(partitions):
            # every record once, in the order it was produced
            assert got[part] == [f"{part}-{i}" for i in range(part, n, partitions)], part
    finally:
        broker.stop()


def test_a_shard_stalled_past_the_gateways_ping_deadline_duplicates_nothing(tmp_path: Path) -> None:
    """A shard paused for longer than the gateway waits for its pongs (2 s) is marked down, yet
    the batches it already holds are answered when it resumes: a producer without idempotence,
    told "not written" of a batch the shard then writes, would retry it into a duplicate."""
    from rafka import ids

    broker = Rafka(tmp_path / "data", shards=2).start()
    topic, n = _name("t"), 3000
    try:
        create_topic(broker.bootstrap, topic, 1)
        pid = broker.children()[f"rafka-shard-{ids.shard_for_partition(ids.log_partition(ids.DEFAULT_ORG, topic, 0), 2)}"]
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False, "acks": "all",
                      "linger.ms": 2, "batch.num.messages": 20})
        failed: list[str] = []
        note = failed.append
        for i in range(n):
            p.produce(topic, value=str(i).encode(), on_delivery=lambda err, _m: err is None or note(str(err)))
            if i == n // 3:
                p.poll(0.1)
                os.kill(pid, signal.SIGSTOP)
            if i == n // 2:
                p.poll(3.0)  # the gateway marks the shard down after 2 s without pongs
                os.kill(pid, signal.SIGCONT)
            if i % 50 == 0:
                p.poll(0.01)
        assert p.flush(60) == 0 and failed == []
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("w")})
        _low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.close()
        assert high == n, f"{high - n} records more than were produced: duplicates"
        assert set(_read_all(broker.bootstrap, topic, n)) == {str(i).encode() for i in range(n)}
    finally:
        broker.stop()


def test_a_shard_whose_wal_cannot_append_acknowledges_nothing_and_restarts(tmp_path: Path) -> None:
    """Out of file descriptors (each new partition log opens a WAL file): the shard sends no reply
    for what it could not log and exits non-zero; restarted, it takes the retries."""
    import resource

    broker = Rafka(tmp_path / "data", shards=1).start()
    topic, partitions = _name("t"), 40
    try:
        create_topic(broker.bootstrap, topic, partitions)
        pid = broker.children()["rafka-shard-0"]
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 5, in_use + 5))
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                      "message.timeout.ms": 60000})
        acked: list[int] = []
        for part in range(partitions):
            p.produce(topic, value=b"%d" % part, partition=part,
                      on_delivery=lambda err, m: err is None and acked.append(m.partition()))
        assert p.flush(60) == 0
        assert broker.children()["rafka-shard-0"] != pid, "the shard exited and was restarted"
        assert "the write-ahead log failed" in broker.logs()
        assert sorted(acked) == list(range(partitions))
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("r"), "enable.auto.commit": False})
        c.assign([TopicPartition(topic, part, 0) for part in range(partitions)])
        got: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < partitions and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.setdefault(m.partition(), []).append(m.value())
        c.close()
        assert got == {part: [b"%d" % part] for part in range(partitions)}, "every acknowledged record, once"
    finally:
        broker.stop()


def _owner_shard(broker: Rafka, group: str) -> int:
    from rafka import ids

    return ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, group), broker.shards)


def test_restart_with_a_different_shard_count(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=2).start()
    topic = _name("t")
    groups = [_name("g") for _ in range(12)]
    try:
        create_topic(broker.bootstrap, topic, 4)
        p = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(200):
            p.produce(topic, value=f"v{i}".encode(), partition=i % 4)
        p.flush(10)
        for k, g in enumerate(groups):
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": g, "enable.auto.commit": False})
            c.commit(offsets=[TopicPartition(topic, 0, k + 1)], asynchronous=False)
            c.close()
        broker.stop()
        broker.shards = 3
        broker.start()
        for k, g in enumerate(groups):
            assert committed_offsets(broker.bootstrap, g, topic, 1) == [k + 1]
        assert len(_read_all(broker.bootstrap, topic, 200)) == 200
    finally:
        broker.stop()


def _entries_end(seg: Path) -> int:
    """Where a segment's entries end (``u32 length | u32 crc | payload`` each; zeros follow)."""
    import struct

    data = seg.read_bytes()
    pos = 0
    while pos + 8 <= len(data) and struct.unpack_from(">I", data, pos)[0]:
        pos += 8 + struct.unpack_from(">I", data, pos)[0]
    return pos


def test_torn_and_corrupt_wal_tail_recovers_to_last_good_record(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=1).start()
    topic, group = _name("t"), _name("g")
    try:
        create_topic(broker.bootstrap, topic, 1)
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        for n in (10, 20, 30):
            c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
        c.close()
        broker.kill_all()
        from rafka import ids

        seg = max((tmp_path / "data" / "meta" / f"{ids.coordinator_partition(ids.DEFAULT_ORG, group):02d}").glob("*.wal"))
        data = seg.read_bytes()[:_entries_end(seg)]  # without the zeros allocated ahead of the entries
        seg.write_bytes(data[:-3])  # a torn last entry: the commit of 30 was never completed on disk
        broker.start()
        assert committed_offsets(broker.bootstrap, group, topic, 1) == [20]
        assert "truncating" in broker.logs()
        broker.kill_all()
        data = seg.read_bytes()[:_entries_end(seg)]
        seg.write_bytes(data[:-2] + bytes([data[-2] ^ 0xFF]) + data[-1:])  # corrupt the last good entry's payload
        broker.start()
        assert committed_offsets(broker.bootstrap, group, topic, 1) == [10]
        assert "checksum mismatch" in broker.logs()
    finally:
        broker.stop()


def test_a_second_broker_on_the_same_data_directory_refuses_to_start(tmp_path: Path) -> None:
    """As Kafka's log-dir .lock: two brokers on one directory both acknowledged writes at the same
    offsets and one's were lost at the next restart; a directory written with one coordinator
    partition count is refused under another, which would hide every topic."""
    import subprocess
    import sys

    from tests.integration.conftest import ROOT, free_port

    first = Rafka(tmp_path / "data", shards=1).start()
    topic = _name("t")

    def serve(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rafka", "serve", "--port", str(free_port()), "--metrics-port",
                               "0", "--shards", "1", "--data-dir", str(tmp_path / "data"), *flags],
                              cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)

    try:
        create_topic(first.bootstrap, topic, 1)
        second = serve()
        assert second.returncode == 2 and "another rafka process is using this data directory" in second.stderr
        p = Producer({"bootstrap.servers": first.bootstrap})
        for i in range(10):
            p.produce(topic, value=f"v{i}".encode(), partition=0)
        assert p.flush(10) == 0
        first.stop()
        other_count = serve("--coordinator-partitions", "16")
        assert other_count.returncode == 2 and "written with --coordinator-partitions 64, not 16" in other_count.stderr
        first.start()
        assert len(_read_all(first.bootstrap, topic, 10)) == 10
    finally:
        first.stop()
