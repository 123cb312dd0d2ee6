"""Idempotent producers: id allocation, duplicates, sequence and epoch checks, expiry."""

from __future__ import annotations

from typing import Any

import pytest

from rafka.protocol.records import INT32_MAX, SimpleRecord, build_batch
from rafka.shard.log.errors import Errors
from rafka.shard.log.manager import LogManager
from rafka.shard.log.partition import PartitionLog
from rafka.shard.log.producers import PRODUCER_ID_EXPIRATION_MS, SHARD_ID_BITS, ProducerIdManager
from rafka.shard.records import Record, RecordType

ORG = "acme"


class Ctx:
    def __init__(self, shard_id: int = 0) -> None:
        self.manager = LogManager(shard_id)
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


def test_init_producer_id_allocates_unique_ids_per_shard() -> None:
    a, b = Ctx(shard_id=3), Ctx(shard_id=4)
    ids_a = [a.init()["producer_id"] for _ in range(3)]
    ids_b = [b.init()["producer_id"] for _ in range(3)]
    assert ids_a == sorted(ids_a) and len(set(ids_a) | set(ids_b)) == 6
    assert all(pid & ((1 << SHARD_ID_BITS) - 1) == 3 for pid in ids_a)
    assert a.init(producer_id=ids_a[0], producer_epoch=0)["producer_epoch"] == 0  # always a new id (KIP-360)
    assert a.records[0] == Record(RecordType.PRODUCER_STATE, (ORG, ids_a[0]), {"producer_epoch": 0, "allocated_ms": 0})


def test_producer_ids_survive_restart_through_replay() -> None:
    ctx = Ctx(shard_id=1)
    before = [ctx.init()["producer_id"] for _ in range(5)]
    fresh = ProducerIdManager(1)
    for r in ctx.records:
        fresh.replay(r)
    other = ProducerIdManager(2)
    for r in ctx.records:
        other.replay(r)  # another shard's ids do not move this counter
    assert fresh.init_producer_id(ORG, {}, 0)[1]["producer_id"] > max(before)
    assert other.init_producer_id(ORG, {}, 0)[1]["producer_id"] == 2
    with pytest.raises(ValueError):
        ProducerIdManager(1 << SHARD_ID_BITS)


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


def test_idle_producers_expire_through_a_tombstone() -> None:
    ctx = Ctx()
    ctx.send(1, 0, 0, now_ms=1000)
    ctx.send(2, 0, 0, now_ms=5000)
    records = ctx.manager.retention(1000 + PRODUCER_ID_EXPIRATION_MS)
    assert records == [Record(RecordType.PRODUCER_STATE, (ORG, 1), None)]
    ctx.apply(records)
    assert ok(ctx.send(1, 0, 17), 2)  # forgotten: accepted as a new producer
    assert ctx.send(2, 0, 17)["error_code"] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
