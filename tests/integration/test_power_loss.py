"""A simulated power loss: every acknowledged write survives losing all that was not fsynced.

kill -9 keeps the page cache, so the other crash tests cannot tell a missing fsync. Here the
broker runs with ``tests/powerloss`` on its ``PYTHONPATH``, which notes what each fsync made
durable; after kill -9 the data directory a power loss would leave is built from those notes
(the worst a POSIX file system allows) and a new broker starts on it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.clients import (
    ConsumerProtocolMember,
    Member,
    committed_offsets,
    create_topic,
    member_carries_on,
    read_confluent,
)
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.powerloss.sitecustomize import build_image, path_identity, recording_env
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
WAL_SEGMENT = 64 * MIB  # where a write-ahead-log stream rolls


def _recording_broker(tmp_path: Path, *flags: str) -> tuple[Rafka, Path]:
    data, shadow = tmp_path / "data", tmp_path / "shadow"
    data.mkdir()
    shadow.mkdir()
    return Rafka(data, shards=2, extra=["--log-retention-check-interval-ms", "300", *flags],
                 env=recording_env(data, shadow)).start(), shadow


def _after_power_loss(tmp_path: Path, broker: Rafka, shadow: Path, *, same_port: bool = False) -> Rafka:
    """kill -9 every process, then start a broker (without the shim) on what a power loss would
    leave (on the same port: for clients that carry on)."""
    broker.kill_all()
    assert any(shadow.iterdir()), "the broker ran without tests/powerloss: no fsync was noted"
    image = tmp_path / "image"
    build_image(path_identity(broker.data_dir), shadow, image)
    after = Rafka(image, shards=2)
    if same_port:
        after.port = broker.port
    return after.start()


class _Load:
    """An idempotent producer (confluent-kafka) and synchronous commits of several groups, recording
    what the broker acknowledged."""

    def __init__(self, bootstrap: str, topics: list[str], groups: list[str]) -> None:
        self.bootstrap, self.topics, self.groups = bootstrap, topics, groups
        self.records: dict[tuple[str, int], bytes] = {}  # (topic, offset) -> value, all on partition 0
        self.commits: dict[str, int] = {}  # group -> last offset committed on partition 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._produce), threading.Thread(target=self._commit)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _produce(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                      "message.timeout.ms": 4000})

        def acked(err: object, msg: object) -> None:
            if err is None:
                self.records[(msg.topic(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

        i = 0
        while not self.stop.is_set():
            for topic in self.topics:
                value = f"{i:08d}".encode() + bytes(8 * 1024 - 8)
                try:
                    p.produce(topic, value=value, partition=0, on_delivery=acked)
                except BufferError:
                    p.poll(0.05)
            i += 1
            p.poll(0)
        p.purge()  # what the killed broker never answered
        p.flush(1)

    def _commit(self) -> None:
        """Each group commits the next offset and waits for the answer, over the wire (a client
        library's commit to a killed broker would wait, and its close after it, for a minute)."""
        host, port = self.bootstrap.split(":")
        offset = 0
        with RawClient(host, int(port), timeout=5) as raw:
            while not self.stop.is_set():
                offset += 1
                for group in self.groups:
                    try:
                        resp = raw.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                                  "topics": [{"name": self.topics[0], "partitions": [
                                                      {"partition_index": 0, "committed_offset": offset}]}]})
                    except (OSError, ConnectionError):
                        return  # the broker is gone: not acknowledged
                    if resp["topics"][0]["partitions"][0]["error_code"] == 0:
                        self.commits[group] = offset


def _read(bootstrap: str, topic: str) -> dict[int, bytes]:
    """Partition 0 of ``topic`` from its log start: offset -> value."""
    return {offset: value for offset, _key, value in read_confluent(bootstrap, topic, -2)}


def test_a_power_loss_loses_no_acknowledged_commit_or_record(tmp_path: Path) -> None:
    broker, shadow = _recording_broker(tmp_path)
    kept, trimmed = _name("kept"), _name("trimmed")
    groups = [_name(f"g{i}") for i in range(6)]  # several groups: several streams, several files
    try:
        small = {"segment.bytes": str(MIB)}  # retention deletes whole segments of the partition log
        create_topic(broker.bootstrap, kept, 1, small)
        create_topic(broker.bootstrap, trimmed, 1, {**small, "retention.bytes": str(MIB)})
        load = _Load(broker.bootstrap, [kept, trimmed], groups)
        load.start()
        # until the kept topic's write-ahead log has rolled to a new segment file (64 MiB), while
        # retention deletes the other's oldest segments
        enough = WAL_SEGMENT // (8 * 1024) + 500
        deadline = time.monotonic() + 60
        while sum(t == kept for t, _o in list(load.records)) < enough and time.monotonic() < deadline:
            time.sleep(0.2)
        broker = _after_power_loss(tmp_path, broker, shadow)
        load.join()
        assert len(load.commits) == len(groups) and len(load.records) > enough, (load.commits, len(load.records))

        for group in groups:
            assert committed_offsets(broker.bootstrap, group, kept)[0] >= load.commits[group], group
        for topic in (kept, trimmed):
            acked = {o: v for (t, o), v in load.records.items() if t == topic}
            stored = _read(broker.bootstrap, topic)
            start, end, last = min(stored, default=-1), max(stored, default=-1), max(acked)
            assert start == 0 if topic == kept else start > 0, (topic, start)  # retention ran on the other
            assert end >= last, f"{topic}: the log ends at offset {end}, before the acknowledged {last}"
            lost = [o for o, v in acked.items() if o >= start and stored.get(o) != v]
            assert not lost, f"{topic}: {len(lost)} acknowledged records lost or changed, the first at {min(lost)}"
        # the run covered a new segment file: the write-ahead log rolled (64 MiB)
        assert len(list((tmp_path / "image" / "logs").glob(f"*/*/{kept}/0/*.wal"))) >= 2
    finally:
        broker.stop()


def test_the_simulated_power_loss_does_lose_what_was_never_fsynced(tmp_path: Path) -> None:
    """With ``--fsync never`` the same power loss loses acknowledged commits: the test above can fail."""
    broker, shadow = _recording_broker(tmp_path, "--fsync", "never")
    topic, group = _name("t"), _name("g")
    try:
        create_topic(broker.bootstrap, topic, 1)
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False)
        c.close()
        broker = _after_power_loss(tmp_path, broker, shadow)
        assert committed_offsets(broker.bootstrap, group, topic)[0] < 42
    finally:
        broker.stop()


def test_a_topic_deleted_before_a_power_loss_stays_deleted_and_its_new_incarnation_keeps_its_own_records(
        tmp_path: Path) -> None:
    broker, shadow = _recording_broker(tmp_path)
    again, gone = _name("again"), _name("gone")
    try:
        def produce(topic: str, values: list[bytes]) -> None:
            p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
            for v in values:
                p.produce(topic, value=v, partition=0)
            assert p.flush(15) == 0

        create_topic(broker.bootstrap, again, 1)
        create_topic(broker.bootstrap, gone, 1)
        produce(again, [f"old-{i}".encode() for i in range(50)])
        produce(gone, [b"x"] * 10)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # held: its futures need the handle
        for fut in admin.delete_topics([again, gone]).values():
            fut.result(15)
        create_topic(broker.bootstrap, again, 1)
        produce(again, [f"new-{i}".encode() for i in range(10)])
        broker = _after_power_loss(tmp_path, broker, shadow)

        assert _read(broker.bootstrap, again) == {i: f"new-{i}".encode() for i in range(10)}
        topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=15).topics
        assert again in topics and gone not in topics
    finally:
        broker.stop()


def test_a_committed_transaction_survives_a_power_loss_and_an_unfinished_one_stays_invisible(tmp_path: Path) -> None:
    broker, shadow = _recording_broker(tmp_path)
    src, dst, group = _name("src"), _name("dst"), _name("g")
    try:
        create_topic(broker.bootstrap, src, 1)
        create_topic(broker.bootstrap, dst, 1)
        member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        meta = member.consumer_group_metadata()
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": _name("tid")})
        p.init_transactions(15)
        p.begin_transaction()
        for i in range(20):
            p.produce(dst, value=f"committed-{i}".encode(), partition=0)
        p.send_offsets_to_transaction([TopicPartition(src, 0, 20)], meta, 15)
        p.commit_transaction(15)
        p.begin_transaction()
        p.produce(dst, value=b"open", partition=0)
        p.flush(15)  # written, never committed
        broker = _after_power_loss(tmp_path, broker, shadow)

        assert committed_offsets(broker.bootstrap, group, src) == [20]
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("r"), "isolation.level": "read_committed",
                      "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(dst, 0, 0)])
        values, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error():
                break  # the last stable offset
            if m is not None:
                values.append(m.value())
        c.close()
        assert values == [f"committed-{i}".encode() for i in range(20)]
    finally:
        broker.stop()


@pytest.mark.parametrize(("protocol", "settle"), [("classic", 4.0), ("consumer", 8.0)])  # KIP-848: 5 s heartbeats
def test_a_group_member_carries_on_after_a_power_loss_without_a_rebalance(tmp_path: Path, protocol: str,
                                                                         settle: float) -> None:
    """Its membership and generation (classic) or member epoch (KIP-848) were durable."""
    broker, shadow = _recording_broker(tmp_path)
    after: list[Rafka] = []
    topic, group = _name("t"), _name("g")
    try:
        create_topic(broker.bootstrap, topic, 4)
        member = (Member(broker.bootstrap, group, topic, **{"session.timeout.ms": 20000}) if protocol == "classic"
                  else ConsumerProtocolMember(broker.bootstrap, group, topic))
        member_carries_on(member, lambda: after.append(_after_power_loss(tmp_path, broker, shadow, same_port=True)),
                          settle)
    finally:
        (after or [broker])[-1].stop()


def test_an_idempotent_producer_carries_on_across_a_power_loss_without_duplicates(tmp_path: Path) -> None:
    """Batches in flight at the power loss are retried against the restarted broker: each is stored
    once (its sequence is rebuilt from the batches that survived), and every acknowledged one is there."""
    broker, shadow = _recording_broker(tmp_path)
    after: list[Rafka] = []
    topic = _name("t")
    try:
        create_topic(broker.bootstrap, topic, 1)
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                      "message.timeout.ms": 60000})
        acked: list[bytes] = []
        failed: list[str] = []

        def delivered(err: object, msg: object) -> None:
            if err is not None:
                failed.append(str(err))
            else:
                acked.append(msg.value())  # type: ignore[attr-defined]

        for i in range(6000):
            p.produce(topic, value=f"v{i}".encode(), partition=0, on_delivery=delivered)
            p.poll(0)
            if i == 3000:
                p.flush(15)  # some acknowledged before the power loss, some in flight at it
            if i == 3100:
                after.append(_after_power_loss(tmp_path, broker, shadow, same_port=True))
        assert p.flush(60) == 0 and not failed, failed[:3]
        stored = [value for _o, _k, value in read_confluent(after[-1].bootstrap, topic, -2)]
        assert len(stored) == len(set(stored)), "a retried batch was stored twice"
        assert set(acked) <= set(stored) and len(acked) == 6000
    finally:
        (after or [broker])[-1].stop()
