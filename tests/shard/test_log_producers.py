"""Idempotent producers: id allocation, duplicates, sequence and epoch checks, expiry."""

from __future__ import annotations

from typing import Any

import pytest

from rafka import ids
from rafka.protocol.records import INT32_MAX, SimpleRecord, build_batch
from rafka.shard.log.errors import Errors
from rafka.shard.log.manager import LogManager
from rafka.shard.log.partition import PartitionLog
from rafka.shard.log.producers import LATEST_ALLOCATION, PARTITION_BITS, PRODUCER_ID_EXPIRATION_MS, ProducerIdManager
from rafka.shard.records import Record, RecordType

ORG = "acme"


class Ctx:
    def __init__(self) -> None:
        self.manager = LogManager()
        self.records: list[Record] = []

    def apply(self, records: list[Record]) -> None:
        for r in records:
            self.manager.replay(r)
        self.records += records

    def send(self, pid: int, epoch: int, seq: int, n: int = 1, now_ms: int = 0, **kw: Any) -> dict[str, Any]:
        data = build_batch(
            [SimpleRecord(None, b"v", 0)] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw
        )
        records, resp = self.manager.produce(
            ORG, {"acks": -1, "partitions": [{"topic": "t", "partition": 0, "records": data}]}, now_ms
        )
        self.apply(records)
        return resp["partitions"][0]

    def init(self, now_ms: int = 0, **op: Any) -> dict[str, Any]:
        records, resp = self.manager.init_producer_id(ORG, {"transactional_id": None, **op}, now_ms)
        self.apply(records)
        return resp

    @property
    def leo(self) -> int:
        return self.manager.log_end_offset(ORG, "t", 0)


def ok(resp: dict[str, Any], base_offset: int) -> bool:
    return resp["error_code"] == Errors.NONE and resp["base_offset"] == base_offset


def test_init_producer_id_allocates_new_ids_under_the_orgs_producer_id_partition() -> None:
    ctx = Ctx()
    got = [ctx.init(now_ms=5)["producer_id"] for _ in range(3)]
    assert got == sorted(set(got)), "each InitProducerId gets a new, larger id"
    partition = ids.coordinator_partition(ORG, ids.PRODUCER_IDS_KEY, ids.DEFAULT_COORDINATOR_PARTITIONS)
    assert all(pid & ((1 << PARTITION_BITS) - 1) == partition for pid in got)
    assert ctx.init(producer_id=got[0], producer_epoch=0)["producer_id"] not in got  # always a new id (KIP-360)
    assert ctx.records[0] == Record(RecordType.PRODUCER_STATE, (ORG, LATEST_ALLOCATION),
                                    {"producer_id": got[0], "allocated_ms": 5})


def test_allocations_keep_one_record_per_org_however_many_producers_start() -> None:
    """Kafka keeps no state per allocated id (it hands out blocks); one record per InitProducerId,
    kept for producer.id.expiration.ms, made a resource probe's shard grow ~240 B per producer."""
    ctx = Ctx()
    got = [ctx.init(now_ms=1_000 + i // 7)["producer_id"] for i in range(1_000)]
    assert {r.key for r in ctx.records} == {(ORG, LATEST_ALLOCATION)} and ctx.manager.producer_ids.allocated == {}
    compacted = ProducerIdManager()  # compaction keeps the last record of a key
    compacted.replay(ctx.records[-1])
    assert compacted.init_producer_id(ORG, {}, 0)[1]["producer_id"] > max(got), "even with the clock stepped back"


def test_whichever_shard_replays_a_partitions_allocations_continues_past_them() -> None:
    """After a restart or a change of --shards, another process owns the partition: it replays
    the partition's allocations (whoever made them) and never hands their ids out again."""
    ctx = Ctx()
    before = [ctx.init(now_ms=1_000)["producer_id"] for _ in range(5)]
    other_shard = ProducerIdManager()
    for r in ctx.records:
        other_shard.replay(r)
    after = other_shard.init_producer_id(ORG, {}, 1_000)[1]["producer_id"]
    assert after > max(before)
    # the transaction coordinator allocates under the transactional id's partition: another id space
    tx = other_shard.peek(ORG, "tx-1", 1_000)
    assert tx & ((1 << PARTITION_BITS) - 1) == ids.coordinator_partition(ORG, "tx-1", ids.DEFAULT_COORDINATOR_PARTITIONS)


def test_an_id_whose_allocation_record_is_gone_is_not_handed_out_again() -> None:
    """Expiry drops a producer's allocation record; the counter follows the clock, so a later
    allocation is still past every id handed out before."""
    ctx = Ctx()
    before = [ctx.init(now_ms=1_000)["producer_id"] for _ in range(50)]  # faster than one per millisecond
    forgetful = ProducerIdManager()  # none of those records replayed
    assert forgetful.init_producer_id(ORG, {}, 1_100)[1]["producer_id"] > max(before)


def test_more_coordinator_partitions_than_id_bits_are_refused() -> None:
    with pytest.raises(ValueError):
        ProducerIdManager((1 << PARTITION_BITS) + 1)


def test_transactional_id_is_not_supported() -> None:
    resp = Ctx().init(transactional_id="tx")
    assert resp["error_code"] == Errors.UNSUPPORTED_VERSION and resp["producer_id"] == -1


def test_in_order_batches_are_appended() -> None:
    ctx = Ctx()
    assert ok(ctx.send(1, 0, 0, n=3), 0)
    assert ok(ctx.send(1, 0, 3, n=2), 3)
    assert ctx.leo == 5


def test_duplicate_of_any_of_last_five_returns_original_offset() -> None:
    ctx = Ctx()
    for i in range(6):
        ctx.send(1, 0, i * 2, n=2)  # batches seq [0,1] [2,3] ... [10,11] at offsets 0,2,...,10
    assert ok(ctx.send(1, 0, 10, n=2), 10)  # retry of the last batch
    assert ok(ctx.send(1, 0, 2, n=2), 2)  # oldest still cached
    assert ctx.leo == 12  # nothing appended again
    gone = ctx.send(1, 0, 0, n=2)  # the sixth-newest batch is forgotten: an ordinary gap
    assert gone["error_code"] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER and gone["base_offset"] == -1


def test_gap_in_sequence_is_out_of_order_and_stores_nothing() -> None:
    ctx = Ctx()
    ctx.send(1, 0, 0, n=2)
    assert ctx.send(1, 0, 3)["error_code"] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert ctx.send(1, 0, 1)["error_code"] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps, not a duplicate
    assert ctx.leo == 2


def test_lower_epoch_is_fenced() -> None:
    ctx = Ctx()
    ctx.send(1, 5, 0)
    assert ctx.send(1, 4, 1)["error_code"] == Errors.INVALID_PRODUCER_EPOCH
    assert ctx.leo == 1


def test_new_epoch_must_restart_at_zero() -> None:
    ctx = Ctx()
    ctx.send(1, 0, 0, n=3)
    assert ctx.send(1, 1, 3)["error_code"] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert ok(ctx.send(1, 1, 0), 3)
    assert ctx.send(1, 0, 3)["error_code"] == Errors.INVALID_PRODUCER_EPOCH  # old epoch now fenced


def test_unknown_producer_may_start_at_any_sequence() -> None:
    ctx = Ctx()
    assert ok(ctx.send(9, 2, 41), 0)
    assert ok(ctx.send(9, 2, 42), 1)


def test_sequence_wraps_at_int32_max() -> None:
    ctx = Ctx()
    ctx.send(1, 0, INT32_MAX - 1, n=2)  # last sequence = INT32_MAX
    assert ok(ctx.send(1, 0, 0), 2)
    wrapped = Ctx()
    wrapped.send(1, 0, INT32_MAX - 1, n=3)  # sequences INT32_MAX-1, INT32_MAX, 0
    assert ok(wrapped.send(1, 0, 1), 3)
    assert ok(wrapped.send(1, 0, INT32_MAX - 1, n=3), 0)  # duplicate across the wrap


def test_invalid_batches_from_producers() -> None:
    ctx = Ctx()
    assert ctx.send(1, 0, -1)["error_code"] == Errors.INVALID_RECORD  # producer id without sequence
    assert ctx.send(-1, -1, -1, transactional=True)["error_code"] == Errors.INVALID_RECORD  # txn without producer
    assert ctx.send(1, 0, 0, control=True)["error_code"] == Errors.INVALID_RECORD
    assert ctx.leo == 0
    assert ctx.send(1, 0, 0, transactional=True)["error_code"] == Errors.NONE  # transactions are supported


def test_several_batches_of_one_producer_validated_in_order() -> None:
    log = PartitionLog()

    def mk(seq: int, n: int = 1) -> bytes:
        return build_batch([SimpleRecord(None, b"v", 0)] * n, producer_id=1, producer_epoch=0, base_sequence=seq)

    plan = log.prepare_append([mk(0, 2), mk(2)], 0)
    assert plan.error == Errors.NONE and len(plan.values) == 2
    assert log.producers.entries == {}  # the scratch copy did not leak into the log
    assert log.prepare_append([mk(0, 2), mk(3)], 0).error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producer_state_is_rebuilt_by_replay() -> None:
    ctx = Ctx()
    for i in range(3):
        ctx.send(7, 0, i)
    fresh = Ctx()
    fresh.apply(ctx.records)
    assert ok(fresh.send(7, 0, 2), 2)  # recognised as a duplicate after "restart"
    assert fresh.send(7, 0, 4)["error_code"] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert fresh.leo == 3


def test_idle_producers_expire_on_each_partition() -> None:
    ctx = Ctx()
    ctx.send(1, 0, 0, now_ms=1000)
    ctx.send(2, 0, 0, now_ms=5000)
    records = ctx.manager.retention(1000 + PRODUCER_ID_EXPIRATION_MS)
    assert records == [Record(RecordType.PRODUCERS_EXPIRED, (ORG, "t", 0), [1])]
    ctx.apply(records)
    assert ok(ctx.send(1, 0, 17), 2)  # forgotten: accepted as a new producer
    assert ctx.send(2, 0, 17)["error_code"] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_old_allocations_are_dropped_and_their_ids_stay_taken() -> None:
    """Per-allocation records, as older versions wrote them, still replay and still go."""
    ctx = Ctx()
    old = ctx.manager.producer_ids.peek(ORG, ids.PRODUCER_IDS_KEY, 1_000)
    ctx.apply([Record(RecordType.PRODUCER_STATE, (ORG, old), {"producer_epoch": 0, "allocated_ms": 1_000})])
    assert ctx.manager.retention(1_000 + PRODUCER_ID_EXPIRATION_MS - 1) == []
    tombstones = ctx.manager.retention(1_000 + PRODUCER_ID_EXPIRATION_MS)
    assert tombstones == [Record(RecordType.PRODUCER_STATE, (ORG, old), None)]
    ctx.apply(tombstones)
    assert ctx.manager.producer_ids.allocated == {}
    fresh = ProducerIdManager()
    for r in ctx.records:
        fresh.replay(r)
    assert fresh.allocated == {} and fresh.init_producer_id(ORG, {}, 1_000)[1]["producer_id"] > old
    compacted = ProducerIdManager()  # a log compacted by an older rafka kept only the tombstone; the clock stepped back
    compacted.replay(tombstones[0])
    assert compacted.init_producer_id(ORG, {}, 0)[1]["producer_id"] > old


def test_describe_producers_shows_the_last_batch_timestamp_and_the_markers_coordinator_epoch() -> None:
    """As Kafka's ProducerStateEntry: the last batch's max timestamp (the producer's CreateTime),
    not the broker's append time; the coordinator epoch of the last marker, -1 before one;
    both kept across a rebuild from a snapshot."""
    ctx = Ctx()
    hour_ago = 1_700_000_000_000

    def put(data: bytes) -> None:
        op = {"acks": -1, "partitions": [{"topic": "t", "partition": 0, "records": data}]}
        ctx.apply(ctx.manager.produce(ORG, op, hour_ago + 3_600_000)[0])

    def described() -> dict[int, tuple[int, int]]:
        [p] = ctx.manager.describe_producers(ORG, {"partitions": [{"topic": "t", "partition": 0}]})["partitions"]
        return {e["producer_id"]: (e["last_timestamp"], e["coordinator_epoch"]) for e in p["active_producers"]}

    put(build_batch([SimpleRecord(None, b"v", hour_ago), SimpleRecord(None, b"v", hour_ago - 9)],
                    producer_id=7, producer_epoch=0, base_sequence=0))
    assert described() == {7: (hour_ago, -1)}
    put(build_batch([SimpleRecord(None, b"v", hour_ago + 5)], producer_id=9, producer_epoch=0, base_sequence=0,
                    transactional=True))
    records, refused = ctx.manager.write_markers(
        ORG, {"producer_id": 9, "producer_epoch": 0, "committed": True, "partitions": [["t", 0]]}, hour_ago + 3_600_009)
    ctx.apply(records)
    got = described()
    assert refused == [] and got == {7: (hour_ago, -1), 9: (hour_ago + 3_600_009, 0)}
    log = ctx.manager.logs[(ORG, "t", 0)]
    rebuilt = PartitionLog()
    rebuilt.producers.restore(log.producers.snapshot())
    assert {pid: (e.last_timestamp, e.coordinator_epoch) for pid, e in rebuilt.producers.entries.items()} == got
    old_format = [entry[:4] for entry in log.producers.snapshot()]  # written before these two fields
    rebuilt.producers.restore(old_format)
    assert rebuilt.producers.entries[7].last_timestamp == hour_ago
