"""Exactly-once transactions with confluent-kafka against a 3-shard broker.

Names are chosen so that the transaction coordinator, the input group and the
output partitions live on different shards: every commit crosses shards.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from rafka import ids
from tests.integration.clients import create_topic, wait_for
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration
SHARDS = 3


def _shard_of_key(key: str) -> int:
    return ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, key), SHARDS)


def _shard_of_partition(topic: str, partition: int) -> int:
    return ids.shard_for_partition(ids.log_partition(ids.DEFAULT_ORG, topic, partition), SHARDS)


def _names() -> tuple[str, str, str, str]:
    """(input topic, output topic, group, transactional id) on three different shards."""
    while True:
        tag = uuid.uuid4().hex[:8]
        src, dst, group, tid = f"in-{tag}", f"out-{tag}", f"g-{tag}", f"tx-{tag}"
        if len({_shard_of_key(tid), _shard_of_key(group), _shard_of_partition(dst, 0)}) == 3:
            return src, dst, group, tid


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rafka]:
    b = Rafka(tmp_path_factory.mktemp("txn") / "data", shards=SHARDS).start()
    yield b
    b.stop()


def _producer(bootstrap: str, tid: str, **extra: Any) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
            "transaction.timeout.ms": 20000}
    conf.update(extra)
    return Producer(conf)


def _read(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int | None = None,
          wait: float = 3.0) -> list[bytes]:
    """Every value of ``topic`` visible under ``isolation`` (waits for ``expected`` if given)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + (20.0 if expected is not None else wait)
    idle_until = time.monotonic() + wait
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            out.append(m.value())
            idle_until = time.monotonic() + 1.0
        if expected is not None and len(out) >= expected and time.monotonic() > idle_until:
            break
        if expected is None and time.monotonic() > idle_until:
            break
    c.close()
    return out


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)]
    finally:
        c.close()


def test_consume_transform_produce_commits_output_and_offsets_together(broker: Rafka) -> None:
    src, dst, group, tid = _names()
    create_topic(broker.bootstrap, src, 3)
    create_topic(broker.bootstrap, dst, 3)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        plain.produce(src, value=f"m{i}".encode(), partition=i % 3)
    assert plain.flush(10) == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe([src])
    producer = _producer(broker.bootstrap, tid)
    producer.init_transactions(15)
    seen = 0
    deadline = time.monotonic() + 30
    try:
        while seen < 30 and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(10, 1.0) if not m.error()]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(dst, value=m.value().upper(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 15)
            producer.commit_transaction(15)
            seen += len(msgs)
    finally:
        consumer.close()
    assert seen == 30
    assert sorted(_read(broker.bootstrap, dst, 3, "read_committed", 30)) == sorted(f"M{i}".encode() for i in range(30))
    assert _committed(broker.bootstrap, group, src, 3) == [10, 10, 10]


def _offset_fetch(broker: Rafka, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    """(committed offset, error code) of partition 0 through OffsetFetch v7."""
    with RawClient("127.0.0.1", broker.port) as c:
        resp = c.request(9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                                "require_stable": require_stable})
    p = resp["topics"][0]["partitions"][0]
    return p["committed_offset"], p["error_code"]


def _offsets_producer(broker: Rafka) -> tuple[str, str, str, Any, Producer]:
    """(input topic, output topic, group, the group's metadata, a transactional producer ready
    to begin)."""
    src, dst, group, tid = _names()
    create_topic(broker.bootstrap, src, 1)
    create_topic(broker.bootstrap, dst, 1)
    meta = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group}).consumer_group_metadata()
    p = _producer(broker.bootstrap, tid)
    p.init_transactions(15)
    return src, dst, group, meta, p


def test_txn_offsets_are_pending_until_commit_and_dropped_on_abort(broker: Rafka) -> None:
    src, dst, group, meta, p = _offsets_producer(broker)
    p.begin_transaction()
    p.produce(dst, value=b"aborted")
    p.send_offsets_to_transaction([TopicPartition(src, 0, 5)], meta, 15)
    assert _offset_fetch(broker, group, src, require_stable=True) == (-1, 88)  # UNSTABLE_OFFSET_COMMIT
    assert _offset_fetch(broker, group, src, require_stable=False) == (-1, 0)
    p.abort_transaction(15)
    assert _offset_fetch(broker, group, src, require_stable=True) == (-1, 0)  # dropped with the output
    p.begin_transaction()
    p.produce(dst, value=b"committed")
    p.send_offsets_to_transaction([TopicPartition(src, 0, 7)], meta, 15)
    p.commit_transaction(15)
    assert _offset_fetch(broker, group, src, require_stable=True) == (7, 0)
    assert _read(broker.bootstrap, dst, 1, "read_committed", 1) == [b"committed"]


def test_deleting_a_group_or_its_offsets_deletes_what_an_open_transaction_holds(broker: Rafka) -> None:
    """A producer-only group exists (Empty) from its first transactional offset, as Kafka's
    simple group; OffsetDelete and DeleteGroups while the transaction is open delete its pending
    offsets too, so the commit marker does not bring them, or the group, back."""
    from confluent_kafka.admin import AdminClient
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    src, dst, group, meta, p = _offsets_producer(broker)
    for delete in ("offsets", "group"):
        p.begin_transaction()
        p.produce(dst, value=b"x")
        p.send_offsets_to_transaction([TopicPartition(src, 0, 5)], meta, 15)
        listed = admin.list_consumer_groups().result(15).valid
        assert [(g.group_id, g.state.name) for g in listed if g.group_id == group] == [(group, "EMPTY")]
        if delete == "offsets":  # kafka-python: confluent-kafka has no OffsetDelete call
            kafka_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
            try:
                errors = kafka_admin.delete_group_offsets(group, [KTP(src, 0)])
            finally:
                kafka_admin.close()
            assert [e.errno for e in errors.values()] == [0], errors
        else:
            admin.delete_consumer_groups([group])[group].result(15)
        assert _offset_fetch(broker, group, src, require_stable=True) == (-1, 0)  # nothing pending any more
        p.commit_transaction(15)
        assert _offset_fetch(broker, group, src, require_stable=True) == (-1, 0)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(15).valid}


def test_offsets_sent_without_a_member_commit_while_the_group_has_members(broker: Rafka) -> None:
    """KafkaJS sendOffsets({consumerGroupId}), Java's sendOffsetsToTransaction(offsets, groupId)
    and TxnOffsetCommit v0-2 name no member or generation: Kafka takes such a commit while the
    group has members (ClassicGroup.validateOffsetCommit exempts transactional commits)."""
    src, dst, group, tid = _names()
    create_topic(broker.bootstrap, src, 1)
    create_topic(broker.bootstrap, dst, 1)
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    member.subscribe([src])
    wait_for(lambda: member.poll(0.2) is None and bool(member.assignment()), 20, "the member holds the partition")
    outsider = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})  # never joins
    p = _producer(broker.bootstrap, tid)
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(dst, value=b"out")
    p.send_offsets_to_transaction([TopicPartition(src, 0, 3)], outsider.consumer_group_metadata(), 15)
    p.commit_transaction(15)
    assert _offset_fetch(broker, group, src, require_stable=True) == (3, 0)
    member.close()
    outsider.close()


def test_an_admin_aborts_a_hanging_transaction_with_write_txn_markers(broker: Rafka) -> None:
    """Admin.abortTransaction and kafka-transactions.sh abort: DescribeProducers finds the open
    transaction, WriteTxnMarkers ends it, and read_committed readers move past it."""
    dst, _tid, _p = _open_transaction(broker, partitions=1, records=1, prefix="hanging")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(dst, value=b"after")
    assert plain.flush(10) == 0
    assert _read(broker.bootstrap, dst, 1, "read_committed") == [], "held back by the open transaction"
    with RawClient("127.0.0.1", broker.port) as raw:
        described = raw.request(61, 0, {"topics": [{"name": dst, "partition_indexes": [0]}]})
        [open_txn] = [a for a in described["topics"][0]["partitions"][0]["active_producers"]
                      if a["current_txn_start_offset"] >= 0]
        marker = {"producer_id": open_txn["producer_id"], "producer_epoch": open_txn["producer_epoch"],
                  "transaction_result": False, "coordinator_epoch": -1,
                  "topics": [{"name": dst, "partition_indexes": [0]}, {"name": dst + "-none", "partition_indexes": [0]}]}
        resp = raw.request(27, 1, {"markers": [marker]})
    assert [[(t["name"], q["error_code"]) for q in t["partitions"]] for t in resp["markers"][0]["topics"]] == \
        [[(dst, 0)], [(dst + "-none", 3)]]
    assert _read(broker.bootstrap, dst, 1, "read_committed", 1) == [b"after"], "the aborted record stays hidden"


def test_aborted_transaction_invisible_to_read_committed_only(broker: Rafka) -> None:
    _src, dst, _group, tid = _names()
    create_topic(broker.bootstrap, dst, 2)
    p = _producer(broker.bootstrap, tid)
    p.init_transactions(15)
    for label, commit in (("c1", True), ("a1", False), ("c2", True)):
        p.begin_transaction()
        for i in range(6):
            p.produce(dst, value=f"{label}-{i}".encode(), partition=i % 2)
        if commit:
            p.commit_transaction(15)
        else:
            p.flush(10)
            p.abort_transaction(15)
    committed = sorted(_read(broker.bootstrap, dst, 2, "read_committed", 12))
    assert committed == sorted(f"{label}-{i}".encode() for label in ("c1", "c2") for i in range(6))
    everything = _read(broker.bootstrap, dst, 2, "read_uncommitted", 18)
    assert sorted(everything) == sorted(f"{label}-{i}".encode() for label in ("c1", "a1", "c2") for i in range(6))


def test_second_producer_with_same_transactional_id_fences_the_first(broker: Rafka) -> None:
    _src, dst, _group, tid = _names()
    create_topic(broker.bootstrap, dst, 1)
    first = _producer(broker.bootstrap, tid)
    first.init_transactions(15)
    first.begin_transaction()
    first.produce(dst, value=b"zombie")
    first.flush(10)
    second = _producer(broker.bootstrap, tid)
    second.init_transactions(15)  # fences the first and aborts its transaction
    second.begin_transaction()
    second.produce(dst, value=b"winner")
    second.commit_transaction(15)
    with pytest.raises(KafkaException) as info:
        first.produce(dst, value=b"late")
        first.commit_transaction(10)
    err = info.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH), err
    assert _read(broker.bootstrap, dst, 1, "read_committed", 1) == [b"winner"]
    assert sorted(_read(broker.bootstrap, dst, 1, "read_uncommitted", 2)) == [b"winner", b"zombie"]


def test_abandoned_transaction_times_out_and_stops_holding_back_readers(broker: Rafka) -> None:
    _src, dst, _group, tid = _names()
    create_topic(broker.bootstrap, dst, 1)
    abandoned = _producer(broker.bootstrap, tid, **{"transaction.timeout.ms": 2000})
    abandoned.init_transactions(15)
    abandoned.begin_transaction()
    abandoned.produce(dst, value=b"abandoned")
    assert abandoned.flush(10) == 0
    other = _producer(broker.bootstrap, f"{tid}-other")
    other.init_transactions(15)
    other.begin_transaction()
    other.produce(dst, value=b"ok")
    other.commit_transaction(15)  # behind the abandoned transaction: invisible until it ends
    wait_for(lambda: _describe_state(broker, tid) == "CompleteAbort", 15, "the timed-out transaction aborted")
    assert _read(broker.bootstrap, dst, 1, "read_committed", 1) == [b"ok"]
    with pytest.raises(KafkaException):
        abandoned.commit_transaction(10)


def _start_time_ms(broker: Rafka, tid: str) -> int:
    """DescribeTransactions v0's transaction_start_time_ms of ``tid``, read from the frame."""
    with RawClient("127.0.0.1", broker.port) as c:
        c.send_raw(c.encode(65, 0, {"transactional_ids": [tid]}))
        frame = c.recv_frame()
    at = 4 + 1 + 4 + 1 + 2  # correlation id, header tags, throttle time, compact array length, error code
    for _ in range(2):  # transactional id, state: compact strings (names here are short: a 1-byte length)
        at += frame[at]
    return int.from_bytes(frame[at + 4:at + 12], "big", signed=True)


def test_describe_and_list_transactions(broker: Rafka) -> None:
    """What kafka-transactions.sh describe/list show; a start time only while a transaction
    exists (-1 when Empty, the finished one's after it completes, as Kafka keeps it)."""
    _src, dst, _group, tid = _names()
    create_topic(broker.bootstrap, dst, 1)
    p = _producer(broker.bootstrap, tid)
    p.init_transactions(15)
    assert _start_time_ms(broker, tid) == -1  # Empty (kio cannot read -1: the frame is read by hand)
    began = time.time()
    p.begin_transaction()
    p.produce(dst, value=b"x")
    p.flush(10)
    with RawClient("127.0.0.1", broker.port) as c:
        desc = c.request(65, 0, {"transactional_ids": [tid, "no-such-txn"]})["transaction_states"]
        assert desc[0]["transaction_state"] == "Ongoing"
        assert [(t["topic"], list(t["partitions"])) for t in desc[0]["topics"]] == [(dst, [0])]
        assert desc[1]["error_code"] == 105  # TRANSACTIONAL_ID_NOT_FOUND
        listed = c.request(66, 1, {"state_filters": ["Ongoing"], "producer_id_filters": [],
                                   "duration_filter": -1})["transaction_states"]
        assert tid in [t["transactional_id"] for t in listed]
        producers = c.request(61, 0, {"topics": [{"name": dst, "partition_indexes": [0]}]})["topics"][0]
        [active] = producers["partitions"][0]["active_producers"]
        assert (active["producer_id"], active["current_txn_start_offset"]) == (desc[0]["producer_id"], 0)
    p.commit_transaction(15)
    with RawClient("127.0.0.1", broker.port) as c:
        [done] = c.request(65, 0, {"transactional_ids": [tid]})["transaction_states"]
        assert done["transaction_state"] == "CompleteCommit"
        assert done["transaction_start_time"] == desc[0]["transaction_start_time"]
        assert began - 1 < done["transaction_start_time"].timestamp() < time.time()
        listed = c.request(66, 1, {"state_filters": [], "producer_id_filters": [],
                                   "duration_filter": 60_000})["transaction_states"]
        assert tid not in [t["transactional_id"] for t in listed]  # it began less than a minute ago


def test_kill_9_between_records_and_commit_leaves_nothing_visible(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=SHARDS).start()
    try:
        dst, tid, p = _open_transaction(broker, partitions=3, records=9, prefix="lost-")
        # the records are acknowledged (durable), the commit never comes
        broker.kill_all()
        del p
        broker.start()
        assert _read(broker.bootstrap, dst, 3, "read_committed", wait=3.0) == []
        again = _producer(broker.bootstrap, tid)
        again.init_transactions(20)  # fences the lost producer: its transaction is aborted everywhere
        again.begin_transaction()
        for i in range(3):
            again.produce(dst, value=f"kept-{i}".encode(), partition=i)
        again.commit_transaction(15)
        assert sorted(_read(broker.bootstrap, dst, 3, "read_committed", 3)) == [b"kept-0", b"kept-1", b"kept-2"]
        assert len(_read(broker.bootstrap, dst, 3, "read_uncommitted", 12)) == 12
    finally:
        broker.stop()


def test_kill_9_of_a_participant_shard_mid_commit_still_commits_everywhere(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=SHARDS).start()
    try:
        dst, tid, p = _open_transaction(broker, partitions=6, records=12, prefix="v")
        victim = _shard_of_partition(dst, 0)
        assert victim != _shard_of_key(tid)
        os.kill(broker.children()[f"rafka-shard-{victim}"], signal.SIGKILL)
        p.commit_transaction(30)  # the decision is durable; the missing markers follow the restart
        got = _read(broker.bootstrap, dst, 6, "read_committed", 12)
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(12))
        wait_for(lambda: _describe_state(broker, tid) == "CompleteCommit", 20, "transaction completed")
    finally:
        broker.stop()


def test_kill_9_of_the_broker_mid_commit_finishes_the_commit_after_restart(tmp_path: Path) -> None:
    """The commit is decided (PrepareCommit durable) and some markers are written when the whole
    broker dies; after the restart the sweeper writes the rest, and every record becomes visible."""
    broker = Rafka(tmp_path / "data", shards=SHARDS).start()
    try:
        dst, tid, p = _open_transaction(broker, partitions=6, records=12, prefix="v")
        victim = _shard_of_partition(dst, 0)
        os.kill(broker.children()[f"rafka-shard-{victim}"], signal.SIGSTOP)  # its markers cannot be written
        committer = threading.Thread(target=lambda: _try(p.commit_transaction, 10), daemon=True)
        committer.start()
        wait_for(lambda: _describe_state(broker, tid) == "PrepareCommit", 10, "the commit decided")
        broker.kill_all()  # mid-commit: decided, markers written on some shards only
        broker.start()
        got = _read(broker.bootstrap, dst, 6, "read_committed", 12)
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(12))
        wait_for(lambda: _describe_state(broker, tid) == "CompleteCommit", 20, "transaction completed")
        committer.join(15)
    finally:
        broker.stop()


def _open_transaction(broker: Rafka, partitions: int, records: int, prefix: str) -> tuple[str, str, Producer]:
    """A new topic and transactional producer with ``records`` acknowledged, uncommitted records
    (``<prefix><i>`` on partition ``i % partitions``): ``(topic, transactional id, producer)``."""
    _src, dst, _group, tid = _names()
    create_topic(broker.bootstrap, dst, partitions)
    p = _producer(broker.bootstrap, tid)
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(records):
        p.produce(dst, value=f"{prefix}{i}".encode(), partition=i % partitions)
    assert p.flush(10) == 0
    return dst, tid, p


def _try(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except KafkaException:
        pass


def _describe_state(broker: Rafka, tid: str) -> str:
    with RawClient("127.0.0.1", broker.port) as c:
        return str(c.request(65, 0, {"transactional_ids": [tid]})["transaction_states"][0]["transaction_state"])


def test_a_transactional_write_outside_the_producers_transaction_is_refused(broker: Rafka) -> None:
    """KIP-890 verification (on by default in Kafka 4): a partition never added to the
    transaction, or written after the transaction was aborted, answers INVALID_TXN_STATE and
    stores nothing. Accepted, such a batch would hold back read_committed readers for good."""
    from rafka.protocol.records import SimpleRecord, build_batch

    topic, tid = _name("verified"), _name("tx")
    create_topic(broker.bootstrap, topic, 2)
    with RawClient("127.0.0.1", broker.port) as c:
        init = c.request(22, 4, {"transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1,
                                 "producer_epoch": -1})
        pid, epoch = init["producer_id"], init["producer_epoch"]
        sequences = {0: 0, 1: 0}

        def produce(partition: int) -> int:
            batch = build_batch([SimpleRecord(b"k", b"v", int(time.time() * 1000), [])], producer_id=pid,
                                producer_epoch=epoch, base_sequence=sequences[partition], transactional=True)
            resp = c.request(0, 9, {"transactional_id": tid, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
            code = resp["responses"][0]["partition_responses"][0]["error_code"]
            sequences[partition] += code == 0
            return code

        def end() -> list[int]:
            lo = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in (0, 1)]}]})
            return [p["offset"] for p in lo["topics"][0]["partitions"]]

        added = c.request(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                  "v3_and_below_producer_epoch": epoch,
                                  "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
        assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
        assert produce(0) == 0
        assert produce(1) == 48, "partition 1 was never added to the transaction"
        ended = c.request(26, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                  "committed": False})
        assert ended["error_code"] == 0
        assert produce(0) == 48, "a write after the abort"
        assert end() == [2, 0], "the data and the abort marker on partition 0; nothing on partition 1"


def test_a_txn_offset_commit_outside_the_producers_transaction_is_refused(broker: Rafka) -> None:
    """KIP-890 verification of TxnOffsetCommit: a group never added to the transaction, or a
    commit arriving after the transaction was aborted (a timeout bumps the epoch), is refused.
    Stored, it stayed pending for good (the group's offsets unstable, Consumer.committed()
    timing out) and a later commit of the same producer id would have committed it."""
    src, _dst, group, tid = _names()
    create_topic(broker.bootstrap, src, 2)
    with RawClient("127.0.0.1", broker.port) as c:
        init = c.request(22, 4, {"transactional_id": tid, "transaction_timeout": 1000, "producer_id": -1,
                                 "producer_epoch": -1})
        pid, epoch = init["producer_id"], init["producer_epoch"]

        def commit(partition: int, offset: int, group_id: str = group) -> int:
            resp = c.request(28, 3, {"transactional_id": tid, "group_id": group_id, "producer_id": pid,
                                     "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                                     "group_instance_id": None, "topics": [{"name": src, "partitions": [
                                         {"partition_index": partition, "committed_offset": offset,
                                          "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
            return int(resp["topics"][0]["partitions"][0]["error_code"])

        assert commit(0, 5) == 48, "the group was never added to the transaction (INVALID_TXN_STATE)"
        assert commit(0, 5, "") == 24, "an empty group id, before the transaction check (INVALID_GROUP_ID)"
        empty = {"transactional_id": "", "producer_id": pid, "producer_epoch": epoch}  # Kafka: INVALID_REQUEST
        assert c.request(25, 3, {**empty, "group_id": group})["error_code"] == 42
        assert c.request(26, 3, {**empty, "committed": False})["error_code"] == 42
        assert c.request(65, 0, {"transactional_ids": [""]})["transaction_states"][0]["error_code"] == 42
        added = c.request(25, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                  "group_id": group})
        assert added["error_code"] == 0
        assert commit(0, 5) == 0
        wait_for(lambda: _describe_state(broker, tid) == "CompleteAbort", 20, "the coordinator aborts on timeout")
        assert commit(1, 100) == 47, "late, after the abort (INVALID_PRODUCER_EPOCH)"
    assert _offset_fetch(broker, group, src, require_stable=True) == (-1, 0), "nothing left pending"


def test_txn_offset_commit_to_partitions_that_do_not_exist(broker: Rafka) -> None:
    """TxnOffsetCommit, like OffsetCommit, answers UNKNOWN_TOPIC_OR_PARTITION for partitions
    that do not exist (Kafka checks them against its metadata before the coordinator)."""
    src, _dst, group, tid = _names()
    create_topic(broker.bootstrap, src, 1)
    request = {"transactional_id": tid, "group_id": group, "producer_id": 1, "producer_epoch": 0,
               "generation_id": -1, "member_id": "", "group_instance_id": None,
               "topics": [{"name": src, "partitions": [{"partition_index": 3, "committed_offset": 1,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]},
                          {"name": src + "-missing", "partitions": [
                              {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                               "committed_metadata": ""}]}]}
    with RawClient("127.0.0.1", broker.port) as c:
        resp = c.request(28, 3, request)
    assert sorted((t["name"], p["partition_index"], p["error_code"]) for t in resp["topics"] for p in t["partitions"]) \
        == [(src, 3, 3), (src + "-missing", 0, 3)]


def test_init_producer_id_and_a_fenced_producers_write_answer_as_kafka(broker: Rafka) -> None:
    """InitProducerId refuses an empty transactional id (INVALID_REQUEST) and a timeout of 0
    (INVALID_TRANSACTION_TIMEOUT); a batch from a producer fenced by a newer epoch answers
    INVALID_PRODUCER_EPOCH, as Kafka's verification maps PRODUCER_FENCED, and is not stored."""
    from rafka.protocol.records import SimpleRecord, build_batch

    topic, tid = _name("fenced"), _name("tx")
    create_topic(broker.bootstrap, topic, 1)
    with RawClient("127.0.0.1", broker.port) as c:
        def init(transactional_id: str, timeout: int) -> dict[str, Any]:
            return c.request(22, 4, {"transactional_id": transactional_id, "transaction_timeout": timeout,
                                     "producer_id": -1, "producer_epoch": -1})

        assert init("", 60000)["error_code"] == 42
        assert init(tid, 0)["error_code"] == 50
        first = init(tid, 60000)
        assert first["error_code"] == 0
        pid, epoch = first["producer_id"], first["producer_epoch"]
        added = c.request(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                  "v3_and_below_producer_epoch": epoch,
                                  "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
        assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
        second = init(tid, 60000)  # fences the first producer, aborting its transaction
        assert (second["error_code"], second["producer_id"]) == (0, pid) and second["producer_epoch"] > epoch
        batch = build_batch([SimpleRecord(b"k", b"late", int(time.time() * 1000), [])], producer_id=pid,
                            producer_epoch=epoch, base_sequence=0, transactional=True)
        resp = c.request(0, 9, {"transactional_id": tid, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 47  # INVALID_PRODUCER_EPOCH
    assert _read(broker.bootstrap, topic, 1, "read_uncommitted", wait=2.0) == []


def test_transactional_ids_unused_past_their_expiration_are_removed(tmp_path: Path) -> None:
    """Kafka's transactional.id.expiration.ms: a finished producer's id is removed once unused
    for that long (it was kept forever: memory, WAL and sweep time grew with every id ever
    used), it stays removed after a restart, and the same id starts afresh."""
    b = Rafka(tmp_path / "data", shards=SHARDS, extra=["--transactional-id-expiration-ms", "1500"]).start()

    def commit_one(value: bytes) -> None:
        p = _producer(b.bootstrap, tid)
        p.init_transactions(15)
        p.begin_transaction()
        p.produce(dst, value=value)
        p.commit_transaction(15)

    def described() -> dict[str, Any]:
        with RawClient("127.0.0.1", b.port) as c:
            return c.request(65, 0, {"transactional_ids": [tid]})["transaction_states"][0]  # type: ignore[no-any-return]

    try:
        _src, dst, _group, tid = _names()
        create_topic(b.bootstrap, dst, 1)
        commit_one(b"x")
        first = described()
        assert first["transaction_state"] == "CompleteCommit"
        deadline = time.monotonic() + 15  # expiration 1.5 s, checked every 1.5 s, swept every second
        while described()["error_code"] == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert described()["error_code"] == 105, "TRANSACTIONAL_ID_NOT_FOUND once expired"
        b.stop()
        b.start()
        assert described()["error_code"] == 105, "still gone after a restart"
        commit_one(b"y")
        again = described()
        assert again["transaction_state"] == "CompleteCommit" and again["producer_id"] != first["producer_id"]
        assert _read(b.bootstrap, dst, 1, "read_committed", expected=2) == [b"x", b"y"]
    finally:
        b.stop()
