"""LogManager handlers: produce, fetch, list offsets, delete records, retention, replay."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest
from crc32c import crc32c

from rafka.ids import log_partition
from rafka.protocol.records import (
    CompressionType,
    SimpleRecord,
    build_batch,
    iter_records,
    parse_header,
    split_batches,
    verify_crc,
)
from rafka.shard.log.errors import Errors
from rafka.shard.log.manager import LogManager, appended_partitions
from rafka.shard.records import Record, RecordType

ORG = "acme"


def batch(n: int = 1, ts: int = 1000, size: int = 10, **kw: Any) -> bytes:
    return build_batch([SimpleRecord(b"k", b"v" * size, ts + i) for i in range(n)], **kw)


# two one-record batches per segment; the catalog would refuse so small a segment.bytes,
# but partition logs take the configs the gateway passes as given
SMALL_SEGMENTS = {"segment.bytes": str(2 * len(batch()))}


class Ctx:
    def __init__(self) -> None:
        self.manager = LogManager()
        self.records: list[Record] = []

    def apply(self, records: list[Record]) -> None:
        for r in records:
            self.manager.replay(r)
        self.records += records

    def produce(self, *parts: dict[str, Any], acks: int = -1, now_ms: int = 0) -> list[dict[str, Any]]:
        records, resp = self.manager.produce(ORG, {"acks": acks, "timeout_ms": 100, "partitions": list(parts)}, now_ms)
        self.apply(records)
        return resp["partitions"]

    def put(self, data: bytes, topic: str = "t", partition: int = 0, now_ms: int = 0, **kw: Any) -> dict[str, Any]:
        return self.produce({"topic": topic, "partition": partition, "records": data, **kw}, now_ms=now_ms)[0]

    def fetch(
        self, *parts: tuple[str, int, int], max_bytes: int = 2**31 - 1, pmax: int = 2**20, isolation_level: int = 0
    ) -> list[dict[str, Any]]:
        op = {
            "max_bytes": max_bytes,
            "isolation_level": isolation_level,
            "partitions": [
                {"topic": t, "partition": p, "fetch_offset": o, "partition_max_bytes": pmax} for t, p, o in parts
            ],
        }
        return self.manager.fetch(ORG, op)["partitions"]

    def offsets(self, timestamp: int, topic: str = "t") -> tuple[int, int]:
        [r] = self.manager.list_offsets(
            ORG, {"partitions": [{"topic": topic, "partition": 0, "timestamp": timestamp}]}
        )["partitions"]
        return r["offset"], r["timestamp"]

    def delete_records(self, offset: int, topic: str = "t") -> dict[str, Any]:
        records, resp = self.manager.delete_records(
            ORG, {"partitions": [{"topic": topic, "partition": 0, "offset": offset}]}
        )
        self.apply(records)
        return resp["partitions"][0]


@pytest.fixture
def ctx() -> Ctx:
    return Ctx()


def test_produce_then_fetch_returns_stored_batches_with_offsets(ctx: Ctx) -> None:
    assert ctx.put(batch(3))["base_offset"] == 0
    resp = ctx.put(batch(2))
    assert resp == {
        "topic": "t",
        "partition": 0,
        "error_code": Errors.NONE,
        "error_message": None,
        "base_offset": 3,
        "log_append_time_ms": -1,
        "log_start_offset": 0,
        "record_errors": [],
    }
    [f] = ctx.fetch(("t", 0, 0))
    assert (f["error_code"], f["high_watermark"], f["last_stable_offset"], f["log_start_offset"]) == (0, 5, 5, 0)
    assert f["aborted_transactions"] is None
    assert [parse_header(b).base_offset for b in split_batches(f["records"])] == [0, 3]


def test_compressed_batches_are_stored_and_served_byte_for_byte(ctx: Ctx) -> None:
    gz = build_batch([SimpleRecord(None, b"z" * 100, 7)] * 5, compression=CompressionType.GZIP)
    ctx.put(gz)
    served = ctx.fetch(("t", 0, 0))[0]["records"]
    # only the offset and the leader epoch (both outside the CRC) are stamped
    assert served[16:] == gz[16:] and parse_header(served).compression == CompressionType.GZIP
    assert parse_header(gz).partition_leader_epoch == -1 and parse_header(served).partition_leader_epoch == 0


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_invalid_acks(ctx: Ctx, acks: int) -> None:
    [r] = ctx.produce({"topic": "t", "partition": 0, "records": batch()}, acks=acks)
    assert r["error_code"] == Errors.INVALID_REQUIRED_ACKS and ctx.records == []


def test_acks_zero_and_one_are_accepted(ctx: Ctx) -> None:
    assert ctx.produce({"topic": "t", "partition": 0, "records": batch()}, acks=0)[0]["error_code"] == Errors.NONE
    assert ctx.produce({"topic": "t", "partition": 0, "records": batch()}, acks=1)[0]["base_offset"] == 1


def test_corrupt_crc_stores_nothing(ctx: Ctx) -> None:
    raw = bytearray(batch(2))
    raw[-1] ^= 1
    r = ctx.put(bytes(raw))
    assert (r["error_code"], r["base_offset"], r["log_start_offset"]) == (Errors.CORRUPT_MESSAGE, -1, -1)
    assert ctx.records == [] and ctx.manager.log_end_offset(ORG, "t", 0) == 0


@pytest.mark.parametrize("data", [batch()[:-3], batch()[:10], b"\x00" * 12 + b"\x01"])
def test_bad_framing_is_corrupt_message(ctx: Ctx, data: bytes) -> None:
    assert ctx.put(data)["error_code"] == Errors.CORRUPT_MESSAGE and ctx.records == []


def test_magic_other_than_two_is_invalid_record(ctx: Ctx) -> None:
    raw = bytearray(batch())
    raw[16] = 1
    assert ctx.put(bytes(raw))["error_code"] == Errors.INVALID_RECORD


def test_exactly_one_batch_per_partition(ctx: Ctx) -> None:
    assert ctx.put(batch() + batch())["error_code"] == Errors.INVALID_RECORD
    assert ctx.put(b"")["error_code"] == Errors.INVALID_RECORD
    assert ctx.records == []


def test_inconsistent_record_count_is_invalid_record(ctx: Ctx) -> None:
    raw = bytearray(batch(3))
    struct.pack_into(">i", raw, 57, 2)  # recordsCount, covered by the CRC: recompute
    struct.pack_into(">I", raw, 17, __import__("crc32c").crc32c(bytes(raw[21:])))
    assert ctx.put(bytes(raw))["error_code"] == Errors.INVALID_RECORD


def test_message_too_large_default_and_configured(ctx: Ctx) -> None:
    big = batch(size=1048588)
    assert ctx.put(big)["error_code"] == Errors.MESSAGE_TOO_LARGE
    small = batch(size=50)
    assert ctx.put(small, configs={"max.message.bytes": str(len(small) - 1)})["error_code"] == Errors.MESSAGE_TOO_LARGE
    assert ctx.put(small, configs={"max.message.bytes": str(len(small))})["error_code"] == Errors.NONE
    assert ctx.manager.log_end_offset(ORG, "t", 0) == 1


def test_one_op_carries_several_partitions_and_errors_stay_per_partition(ctx: Ctx) -> None:
    bad = bytearray(batch())
    bad[-1] ^= 1
    resp = ctx.produce(
        {"topic": "a", "partition": 0, "records": batch(2)},
        {"topic": "a", "partition": 1, "records": bytes(bad)},
        {"topic": "b", "partition": 0, "records": batch()},
        {"topic": "a", "partition": 0, "records": batch()},
    )
    assert [r["error_code"] for r in resp] == [Errors.NONE, Errors.CORRUPT_MESSAGE, Errors.NONE, Errors.INVALID_REQUEST]
    assert appended_partitions(ctx.records) == {(ORG, "a", 0), (ORG, "b", 0)}


def test_the_compressed_batches_of_one_op_decompress_within_a_budget(ctx: Ctx) -> None:
    """Each batch may decompress to 64 MiB and one op's batches to 256 MiB together: a 420 KB
    request of 200 zstd batches, each expanding to 63 MiB, kept a shard decompressing for ~7 s,
    past its liveness deadline. Beyond the budget a partition is refused (CORRUPT_MESSAGE); the
    next request has a budget of its own."""
    big = build_batch([SimpleRecord(None, bytes(60 << 20), 1000)], compression=CompressionType.ZSTD)
    assert len(big) < 10_000
    resp = ctx.produce(*({"topic": "t", "partition": i, "records": big} for i in range(6)))
    assert [r["error_code"] for r in resp] == [Errors.NONE] * 4 + [Errors.CORRUPT_MESSAGE] * 2
    assert [ctx.manager.log_end_offset(ORG, "t", i) for i in range(6)] == [1, 1, 1, 1, 0, 0]
    assert ctx.produce({"topic": "t", "partition": 4, "records": big})[0]["error_code"] == Errors.NONE
    assert ctx.produce(*({"topic": "u", "partition": i, "records": batch(compression=CompressionType.ZSTD)}
                         for i in range(300)))[-1]["error_code"] == Errors.NONE  # small batches: no limit met


def test_a_refused_batch_is_charged_what_it_could_have_cost() -> None:
    """A batch that decompresses past the limit, or not at all, was free: 200 batches each just
    over 64 MiB cost ~12 s and every one was refused without touching the budget."""
    from rafka.shard.log.partition import PartitionLog
    from rafka.shard.log.validator import AppendBudget

    over = build_batch([SimpleRecord(None, bytes(8192), 1000)], compression=CompressionType.ZSTD)
    budget = AppendBudget(20_000)
    plan = PartitionLog().prepare_append([over], 0, None, "t-0", AppendBudget(5000))
    assert plan.error == Errors.CORRUPT_MESSAGE
    for left in (20_000, 20_000 - 8192 - 20):  # two batches fit (each ~8.2 KB decompressed), then a refusal
        assert PartitionLog().prepare_append([over], 0, None, "t-0", budget).error == Errors.NONE, left
    assert PartitionLog().prepare_append([over], 0, None, "t-0", budget).error == Errors.CORRUPT_MESSAGE
    assert budget.left <= 0
    assert PartitionLog().prepare_append([over], 0, None, "t-0", budget).error == Errors.CORRUPT_MESSAGE


def test_records_read_one_by_one_are_bounded_per_op(ctx: Ctx) -> None:
    """A 5.6 KB batch of 9.5 million tiny records for a compacted topic kept a shard walking them
    for ~20 s; records that must be read one by one count against the op (1,000,000), those of
    batches no rule reads do not."""
    from rafka.shard.log import validator
    from rafka.shard.log.partition import PartitionLog
    from rafka.shard.log.validator import AppendBudget

    keyed = build_batch([SimpleRecord(b"k", b"v", 1000)] * 3, compression=CompressionType.ZSTD)
    compact = validator.LogConfig.from_overrides({"cleanup.policy": "compact"})
    budget = AppendBudget(records=5)
    assert PartitionLog().prepare_append([keyed], 1000, compact, "t-0", budget).error == Errors.NONE
    plan = PartitionLog().prepare_append([keyed], 1000, compact, "t-1", budget)
    assert plan.error == Errors.RECORD_LIST_TOO_LARGE
    assert plan.message == ("The batches of this request for t-1 and the partitions before it hold more than "
                            "1000000 records that must be read one by one")
    budget = AppendBudget(records=5)
    for _ in range(3):  # the default topic config reads no record
        assert PartitionLog().prepare_append([keyed], 1000, None, "t-0", budget).error == Errors.NONE
    assert budget.records == 5
    many = build_batch([SimpleRecord(b"k", None, 1000)] * 1_000_001, compression=CompressionType.ZSTD)
    assert len(many) < 1_000_000  # under max.message.bytes
    resp = ctx.produce({"topic": "c", "partition": 0, "records": many, "configs": {"cleanup.policy": "compact"}})
    assert resp[0]["error_code"] == Errors.RECORD_LIST_TOO_LARGE


def test_what_exceeds_the_budget_is_named() -> None:
    from rafka.shard.log.partition import PartitionLog
    from rafka.shard.log.validator import AppendBudget

    sent = build_batch([SimpleRecord(None, bytes(4096), 1000)], compression=CompressionType.LZ4)
    plan = PartitionLog().prepare_append([sent], 0, None, "t-0", AppendBudget(4000))
    assert plan.error == Errors.CORRUPT_MESSAGE
    assert plan.message == ("Record batch of t-0: the compressed batches of this request decompress to more than "
                            "268435456 bytes together")
    budget = AppendBudget(5000)
    assert PartitionLog().prepare_append([sent], 0, None, "t-0", budget).error == Errors.NONE
    assert 0 < budget.left < 1000


def test_fetch_out_of_range_reports_minus_one(ctx: Ctx) -> None:
    ctx.put(batch(2))
    [f] = ctx.fetch(("t", 0, 3))
    assert (f["error_code"], f["high_watermark"], f["log_start_offset"], f["records"]) == (1, -1, -1, b"")
    assert ctx.fetch(("t", 0, 2))[0]["error_code"] == Errors.NONE  # at the high watermark: empty, no error


def test_fetch_of_partition_without_data_is_empty(ctx: Ctx) -> None:
    [f] = ctx.fetch(("never", 0, 0), isolation_level=1)
    assert (f["error_code"], f["high_watermark"], f["records"], f["aborted_transactions"]) == (0, 0, b"", [])
    assert ctx.fetch(("never", 0, 1))[0]["error_code"] == Errors.OFFSET_OUT_OF_RANGE


def test_fetch_byte_limits_and_min_one_batch(ctx: Ctx) -> None:
    one = len(batch())
    for topic in ("a", "b"):
        for _ in range(3):
            ctx.put(batch(), topic=topic)
    parts = (("a", 0, 0), ("b", 0, 0))
    sizes = [len(f["records"]) for f in ctx.fetch(*parts, pmax=one * 2)]
    assert sizes == [one * 2, one * 2]
    sizes = [len(f["records"]) for f in ctx.fetch(*parts, max_bytes=one * 4)]
    assert sizes == [one * 3, one]
    sizes = [len(f["records"]) for f in ctx.fetch(*parts, max_bytes=1)]
    assert sizes == [one, 0]  # only the first partition with data may exceed the limit
    sizes = [len(f["records"]) for f in ctx.fetch(("x", 0, 0), ("a", 0, 0), pmax=1)]
    assert sizes == [0, one]  # an empty partition does not use up the "at least one batch"


def test_list_offsets(ctx: Ctx) -> None:
    assert ctx.offsets(-1) == (0, -1) and ctx.offsets(-3) == (-1, -1) and ctx.offsets(5) == (-1, -1)
    ctx.put(batch(3, ts=100))
    ctx.put(batch(2, ts=50))
    assert ctx.offsets(-2) == (0, -1) and ctx.offsets(-1) == (5, -1)
    assert ctx.offsets(-3) == (2, 102) and ctx.offsets(101) == (1, 101) and ctx.offsets(103) == (-1, -1)


def test_delete_records_moves_log_start(ctx: Ctx) -> None:
    ctx.put(batch(3))
    ctx.put(batch(3))
    assert ctx.delete_records(4) == {"topic": "t", "partition": 0, "low_watermark": 4, "error_code": Errors.NONE}
    truncate = ctx.records[-1]
    assert (truncate.type, truncate.key, truncate.value["log_start_offset"]) == (RecordType.PARTITION_TRUNCATE,
                                                                                 (ORG, "t", 0), 4)
    assert ctx.fetch(("t", 0, 3))[0]["error_code"] == Errors.OFFSET_OUT_OF_RANGE
    [f] = ctx.fetch(("t", 0, 4))
    assert f["log_start_offset"] == 4 and parse_header(f["records"]).base_offset == 3  # whole batch served
    assert ctx.offsets(-2) == (4, -1) and ctx.put(batch())["log_start_offset"] == 4
    n = len(ctx.records)
    assert ctx.delete_records(2)["low_watermark"] == 4 and len(ctx.records) == n  # never backwards
    assert ctx.delete_records(8)["error_code"] == Errors.OFFSET_OUT_OF_RANGE
    assert ctx.delete_records(-1)["low_watermark"] == 7  # -1: up to the high watermark
    assert ctx.fetch(("t", 0, 7))[0]["records"] == b""


def test_delete_records_on_empty_partition(ctx: Ctx) -> None:
    assert ctx.delete_records(-1)["low_watermark"] == 0 and ctx.delete_records(0)["error_code"] == Errors.NONE
    assert ctx.delete_records(1)["error_code"] == Errors.OFFSET_OUT_OF_RANGE and ctx.records == []


def test_retention_by_time_with_a_hand_driven_clock(ctx: Ctx) -> None:
    configs = {**SMALL_SEGMENTS, "retention.ms": "1000"}
    for t in range(0, 600, 100):  # 6 batches, 2 per segment, timestamps = append times
        ctx.put(batch(ts=t), now_ms=t, configs=configs)
    assert [len(s.batches) for s in ctx.manager.log(ORG, "t", 0).segments] == [2, 2, 2]  # type: ignore[union-attr]
    assert ctx.manager.retention(1000) == []
    records = ctx.manager.retention(1101)
    assert [(r.type, r.key, r.value["log_start_offset"], r.value["configs"]) for r in records] == [
        (RecordType.PARTITION_TRUNCATE, (ORG, "t", 0), 2, configs)]
    ctx.apply(records)
    assert ctx.offsets(-2) == (2, -1) and ctx.fetch(("t", 0, 1))[0]["error_code"] == Errors.OFFSET_OUT_OF_RANGE
    ctx.apply(ctx.manager.retention(5000))
    assert ctx.offsets(-2) == (6, -1) and ctx.offsets(-1) == (6, -1)
    assert ctx.put(batch(), now_ms=5000)["base_offset"] == 6


def test_retention_by_size(ctx: Ctx) -> None:
    one = len(batch())
    configs = {**SMALL_SEGMENTS, "retention.bytes": str(one * 3)}
    for _ in range(6):
        ctx.put(batch(), configs=configs)
    ctx.apply(ctx.manager.retention(0))
    assert ctx.offsets(-2) == (2, -1) and ctx.manager.log(ORG, "t", 0).size == one * 4  # type: ignore[union-attr]


def test_update_configs_lowers_retention_without_new_data(ctx: Ctx) -> None:
    ctx.put(batch(ts=0))
    assert ctx.manager.retention(10**8) == []  # default retention: one week
    records, resp = ctx.manager.update_configs(ORG, {"topic": "t", "configs": {"retention.ms": "1000"}})
    assert resp == {"partitions": [0]}
    ctx.apply(records)
    ctx.apply(ctx.manager.retention(10**8))
    assert ctx.offsets(-2) == (1, -1)


def test_older_configs_never_replace_newer_ones(ctx: Ctx) -> None:
    """A produce may carry a gateway's cached configs after an AlterConfigs reached the log."""
    old = {"retention.ms": "604800000"}
    ctx.put(batch(ts=0), configs=old, config_version=0)
    records, _ = ctx.manager.update_configs(ORG, {"topic": "t", "configs": {"retention.ms": "1000"}, "config_version": 1})
    ctx.apply(records)
    assert ctx.put(batch(ts=0), configs=old, config_version=0)["error_code"] == Errors.NONE
    assert all("configs" not in r.value for r in ctx.records[-1:]), "the stale copy is not written"
    assert ctx.manager.update_configs(ORG, {"topic": "t", "configs": old, "config_version": 0})[0] == []
    assert ctx.manager.update_configs(ORG, {"topic": "t", "configs": {"retention.ms": "1000"}, "config_version": 1})[0] == []
    ctx.apply(ctx.manager.retention(10**8))
    assert ctx.offsets(-2) == (2, -1), "retention.ms 1000 still applies: both batches are gone"
    rebuilt = LogManager()  # and a restart replays to the same configs
    for r in ctx.records:
        rebuilt.replay(r)
    log = rebuilt.logs[(ORG, "t", 0)]
    assert (log.overrides, log.config_version) == ({"retention.ms": "1000"}, 1)
    # a newer version arriving with a produce is taken and applies to it; an older one is not
    assert ctx.put(batch(size=500), configs={"max.message.bytes": "300"}, config_version=2)["error_code"] \
        == Errors.MESSAGE_TOO_LARGE
    assert ctx.put(batch(size=100), configs={"max.message.bytes": "300"}, config_version=2)["error_code"] == Errors.NONE
    assert ctx.put(batch(size=500), configs=old, config_version=0)["error_code"] == Errors.MESSAGE_TOO_LARGE


def test_delete_partitions_and_recreated_topic_starts_afresh(ctx: Ctx) -> None:
    ctx.put(batch(3), topic_id="id-1")
    ctx.put(batch(), partition=1, topic_id="id-1")
    records, resp = ctx.manager.delete_partitions(ORG, {"topic": "t", "partitions": None})
    assert resp == {"partitions": [0, 1]} and all(r.value is None for r in records)
    ctx.apply(records)
    assert ctx.manager.log(ORG, "t", 0) is None and ctx.fetch(("t", 0, 0))[0]["high_watermark"] == 0
    ctx.put(batch(3), topic_id="id-2")
    # a stale log of a deleted incarnation is replaced on the next produce of the new one
    assert ctx.put(batch(), topic_id="id-3")["base_offset"] == 0
    assert ctx.records[-2] == Record(RecordType.PARTITION_TRUNCATE, (ORG, "t", 0), None)
    f = ctx.manager.fetch(ORG, {"partitions": [{"topic": "t", "partition": 0, "fetch_offset": 0, "topic_id": "id-2"}]})
    assert f["partitions"][0]["high_watermark"] == 0  # asking for the old incarnation sees nothing


def test_an_op_naming_an_older_incarnation_never_touches_the_new_topic(ctx: Ctx) -> None:
    """The topic was deleted and created again; a gateway's stale cache still names the old one."""
    ctx.put(batch(2), topic_id="old", incarnation=3)
    ctx.put(batch(1), topic_id="new", incarnation=5)  # the new incarnation starts the log afresh
    assert ctx.records[-2] == Record(RecordType.PARTITION_TRUNCATE, (ORG, "t", 0), None)
    stale = ctx.put(batch(4), topic_id="old", incarnation=3)
    assert (stale["error_code"], stale["base_offset"]) == (Errors.NOT_LEADER_OR_FOLLOWER, -1)  # retriable
    records, _ = ctx.manager.update_configs(ORG, {"topic": "t", "configs": {"retention.ms": "1"},
                                                  "config_version": 9, "topic_id": "old"})
    assert records == []
    records, resp = ctx.manager.delete_partitions(ORG, {"topic": "t", "partitions": [0], "topic_id": "old",
                                                        "incarnation": 3})
    assert resp == {"partitions": []} and [r.type for r in records] == [RecordType.TOPIC_DROPPED], \
        "a late drop of the old topic leaves the new one's log"
    ctx.apply(records)
    log = ctx.manager.log(ORG, "t", 0, "new")
    assert log is not None and (log.log_end_offset, log.incarnation, log.overrides) == (1, 5, {})
    rebuilt = LogManager()  # a restart replays the incarnation, and still refuses the stale op
    for r in ctx.records:
        rebuilt.replay(r)
    assert rebuilt.logs[(ORG, "t", 0)].incarnation == 5
    assert rebuilt.produce(ORG, {"partitions": [{"topic": "t", "partition": 0, "records": batch(),
                                                 "topic_id": "old", "incarnation": 3}]}, 0)[1]["partitions"][0][
        "error_code"] == Errors.NOT_LEADER_OR_FOLLOWER


def test_dropping_a_topic_also_drops_logs_an_older_incarnation_left(ctx: Ctx) -> None:
    ctx.put(batch(2), topic_id="older", incarnation=2)  # e.g. its shard was down when that topic was deleted
    records, resp = ctx.manager.delete_partitions(ORG, {"topic": "t", "partitions": [0], "topic_id": "newer",
                                                        "incarnation": 4})
    assert resp == {"partitions": [0]}
    ctx.apply(records)
    assert ctx.manager.logs == {}


def test_a_deleted_topic_takes_no_produce_from_a_stale_cache_even_without_a_log(ctx: Ctx) -> None:
    ctx.put(batch(2), topic_id="old", incarnation=3)
    records, resp = ctx.manager.delete_partitions(ORG, {"topic": "t", "partitions": [0, 2], "topic_id": "old",
                                                        "incarnation": 3})
    assert resp == {"partitions": [0]}  # partition 2 had no log, but the shard remembers the deletion
    assert [(r.type, r.key, r.value) for r in records] == [  # remembered first, then the log goes
        *sorted({(RecordType.TOPIC_DROPPED, (ORG, "t", log_partition(ORG, "t", p)), 3) for p in (0, 2)}),
        (RecordType.PARTITION_TRUNCATE, (ORG, "t", 0), None)]
    ctx.apply(records)
    for partition in (0, 2):
        stale = ctx.put(batch(), partition=partition, topic_id="old", incarnation=3)
        assert stale["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER, "nothing is acknowledged into the dead topic"
        named = {"topic": "t", "partition": partition, "topic_id": "old", "incarnation": 3}
        [f] = ctx.manager.fetch(ORG, {"partitions": [{**named, "fetch_offset": 0}]})["partitions"]
        [o] = ctx.manager.list_offsets(ORG, {"partitions": [{**named, "timestamp": -1}]})["partitions"]
        [d] = ctx.manager.delete_records(ORG, {"partitions": [{**named, "offset": -1}]})[1]["partitions"]
        assert f["error_code"] == o["error_code"] == d["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER, \
            "reads and DeleteRecords are sent to fresh metadata"
    assert ctx.manager.logs == {}
    again, _ = ctx.manager.delete_partitions(ORG, {"topic": "t", "partitions": [0, 2], "topic_id": "old",
                                                   "incarnation": 3})
    assert again == [], "a retried drop writes nothing"
    rebuilt = LogManager()
    for r in ctx.records:
        rebuilt.replay(r)
    assert rebuilt.dropped == {(ORG, "t"): 3}
    # the topic created again writes at once; the stale op is still refused
    assert ctx.put(batch(), topic_id="new", incarnation=5)["base_offset"] == 0
    assert ctx.put(batch(), topic_id="old", incarnation=3)["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER


def test_logs_from_before_incarnations_take_one_without_a_reset(ctx: Ctx) -> None:
    ctx.put(batch(2), topic_id="tid")  # written before ops carried an incarnation
    assert ctx.put(batch(1), topic_id="tid", incarnation=7)["base_offset"] == 2
    assert ctx.manager.logs[(ORG, "t", 0)].incarnation == 7
    truncate = ctx.delete_records(1)
    assert truncate["error_code"] == Errors.NONE and ctx.records[-1].value["incarnation"] == 7


def test_orgs_do_not_see_each_other(ctx: Ctx) -> None:
    ctx.put(batch(2))
    op = {"partitions": [{"topic": "t", "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}
    assert ctx.manager.fetch("other", op)["partitions"][0]["records"] == b""


def test_handlers_are_pure(ctx: Ctx) -> None:
    ctx.manager.produce(ORG, {"partitions": [{"topic": "t", "partition": 0, "records": batch()}]}, 0)
    ctx.manager.delete_records(ORG, {"partitions": [{"topic": "t", "partition": 0, "offset": 0}]})
    assert ctx.manager.logs == {}
    with pytest.raises(ValueError):
        ctx.manager.replay(Record(RecordType.TOPIC, (ORG, "t"), None))


def test_replay_through_msgpack_rebuilds_the_same_log(ctx: Ctx) -> None:
    configs = {**SMALL_SEGMENTS, "retention.ms": "1000"}
    for t in range(0, 1000, 100):
        ctx.put(batch(2, ts=t, producer_id=5, producer_epoch=0, base_sequence=t // 50), now_ms=t, configs=configs)
        ctx.put(batch(1, ts=t), partition=1, now_ms=t, topic_id="tid")
    assert ctx.manager.log_end_offset(ORG, "t", 0) == 20 and ctx.manager.log_end_offset(ORG, "t", 1) == 10
    ctx.delete_records(3)
    ctx.apply(ctx.manager.retention(1500))
    assert ctx.offsets(-2) == (10, -1)  # retention dropped the five one-batch segments older than 1000 ms
    fresh = LogManager()
    for r in ctx.records:
        raw = msgpack.unpackb(msgpack.packb([r.type, r.key, r.value]))
        fresh.replay(Record(raw[0], tuple(raw[1]), raw[2]))
    for key, log in ctx.manager.logs.items():
        other = fresh.logs[key]
        assert [(s.base_offset, s.batches, s.size, s.created_ms) for s in log.segments] == [
            (s.base_offset, s.batches, s.size, s.created_ms) for s in other.segments
        ]
        assert (log.log_start_offset, log.log_end_offset, log.overrides, log.topic_id) == (
            other.log_start_offset,
            other.log_end_offset,
            other.overrides,
            other.topic_id,
        )
        assert log.producers.entries == other.producers.entries
    assert fresh.fetch(ORG, {"partitions": [{"topic": "t", "partition": 0, "fetch_offset": 10}]}) == ctx.manager.fetch(
        ORG, {"partitions": [{"topic": "t", "partition": 0, "fetch_offset": 10}]}
    )


def test_replay_refuses_a_batch_behind_the_log_end_and_resumes_after_a_gap(ctx: Ctx) -> None:
    ctx.put(batch(2))
    behind = Record(RecordType.PARTITION_BATCH, (ORG, "t", 0), {"batch": batch(1, base_offset=1), "append_ms": 0})
    with pytest.raises(ValueError):
        ctx.manager.replay(behind)
    # what recovery past a damaged write-ahead log segment replays: the log resumes further on
    ctx.manager.replay(Record(RecordType.PARTITION_BATCH, (ORG, "t", 0), {"batch": batch(1, base_offset=7), "append_ms": 0}))
    assert ctx.manager.log_end_offset(ORG, "t", 0) == 8
    [gap] = ctx.fetch(("t", 0, 4))
    assert [parse_header(b).base_offset for b in split_batches(gap["records"])] == [7], "a read in the gap skips it"
    assert ctx.put(batch(1))["base_offset"] == 8


def test_summary_lists_every_log_by_topic_incarnation(ctx: Ctx) -> None:
    ctx.put(batch(), topic_id="a", incarnation=2, configs={"retention.ms": "5"}, config_version=3)
    ctx.put(batch(), partition=2, topic_id="a", incarnation=2, configs={"retention.ms": "5"}, config_version=3)
    ctx.put(batch(), topic="u", partition=1)
    assert ctx.manager.summary() == [[ORG, "t", "a", 2, 3, [0, 2]], [ORG, "u", None, 0, 0, [1]]]


# -- topic configs that change what a producer or consumer sees -----------------------------

def keyed(*keys: bytes | None, ts: int = 1000, **kw: Any) -> bytes:
    return build_batch([SimpleRecord(k, b"v", ts + i) for i, k in enumerate(keys)], **kw)


def test_compacted_topic_refuses_records_without_keys_naming_each(ctx: Ctx) -> None:
    compact = {"cleanup.policy": "compact"}
    resp = ctx.put(keyed(b"a", None, b"c", None), configs=compact)
    assert resp["error_code"] == Errors.INVALID_RECORD and resp["base_offset"] == -1
    assert [e["batch_index"] for e in resp["record_errors"]] == [1, 3]
    assert resp["record_errors"][0]["batch_index_error_message"] == (
        "Compacted topic cannot accept message without key in topic partition t-0.")
    assert resp["error_message"].startswith("One or more records have been rejected due to 2 record errors")
    gz = keyed(b"a", None, compression=CompressionType.GZIP)
    assert ctx.put(gz, configs=compact)["record_errors"][0]["batch_index"] == 1  # looked for inside gzip too
    assert ctx.records == [] and ctx.put(keyed(b"a", b"b"), configs=compact)["error_code"] == Errors.NONE
    assert ctx.put(keyed(None), configs={"cleanup.policy": "delete"})["error_code"] == Errors.NONE


def test_compact_only_topic_keeps_records_past_retention_and_refuses_delete_records(ctx: Ctx) -> None:
    configs = {**SMALL_SEGMENTS, "retention.ms": "1000", "cleanup.policy": "compact"}
    for t in range(0, 600, 100):
        ctx.put(keyed(b"k", ts=t), now_ms=t, configs=configs)
    assert ctx.manager.retention(10**9) == [] and ctx.offsets(-2) == (0, -1)
    assert ctx.delete_records(2)["error_code"] == Errors.POLICY_VIOLATION and ctx.offsets(-2) == (0, -1)
    ctx.put(keyed(b"k", ts=600), now_ms=600, configs={**configs, "cleanup.policy": "compact,delete"},
            config_version=1)
    assert ctx.manager.retention(10**9), "compact,delete: retention applies again"


def test_delete_records_on_a_compacted_partition_without_data_is_refused(ctx: Ctx) -> None:
    [resp] = ctx.manager.delete_records(ORG, {"partitions": [
        {"topic": "t", "partition": 0, "offset": 0, "configs": {"cleanup.policy": "compact"}, "config_version": 1}]}
    )[1]["partitions"]
    assert resp["error_code"] == Errors.POLICY_VIOLATION


def test_an_empty_cleanup_policy_neither_deletes_nor_needs_keys(ctx: Ctx) -> None:
    configs = {**SMALL_SEGMENTS, "retention.ms": "1000", "cleanup.policy": ""}
    for t in range(0, 600, 100):
        assert ctx.put(keyed(None, ts=t), now_ms=t, configs=configs)["error_code"] == Errors.NONE
    assert ctx.manager.retention(10**9) == [] and ctx.delete_records(2)["error_code"] == Errors.POLICY_VIOLATION


def test_a_record_without_key_gets_only_the_key_error(ctx: Ctx) -> None:
    now = 10_000
    resp = ctx.put(keyed(None, b"k", ts=now + 10**8), now_ms=now, configs={"cleanup.policy": "compact"})
    assert resp["error_code"] == Errors.INVALID_TIMESTAMP, "one record's timestamp is out of the window"
    assert [(e["batch_index"], e["batch_index_error_message"][:9]) for e in resp["record_errors"]] == [
        (0, "Compacted"), (1, "Timestamp")]


def test_timestamps_more_than_an_hour_ahead_are_refused_by_default(ctx: Ctx) -> None:
    now = 1_700_000_000_000
    assert ctx.put(keyed(b"a", ts=now + 3_600_000), now_ms=now)["error_code"] == Errors.NONE
    resp = ctx.put(build_batch([SimpleRecord(b"a", b"v", now), SimpleRecord(b"b", b"v", now + 3_600_001)]), now_ms=now)
    assert resp["error_code"] == Errors.INVALID_TIMESTAMP
    assert resp["error_message"] == "One or more records have been rejected due to invalid timestamp"
    assert resp["record_errors"] == [{"batch_index": 1, "batch_index_error_message": (
        f"Timestamp {now + 3_600_001} of message with offset 1 is out of range. The timestamp should be within "
        f"[{now - 2**63 + 1}, {now + 3_600_000}]")}]
    assert ctx.put(keyed(b"a", ts=-1), now_ms=now)["error_code"] == Errors.NONE  # no timestamp: nothing to judge
    assert ctx.manager.log_end_offset(ORG, "t", 0) == 2


def test_timestamp_window_from_topic_configs(ctx: Ctx) -> None:
    now = 10_000
    window = {"message.timestamp.before.max.ms": "100", "message.timestamp.after.max.ms": "0"}
    assert ctx.put(keyed(b"a", ts=now - 101), now_ms=now, configs=window)["error_code"] == Errors.INVALID_TIMESTAMP
    assert ctx.put(keyed(b"a", ts=now + 1), now_ms=now, configs=window)["error_code"] == Errors.INVALID_TIMESTAMP
    assert ctx.put(keyed(b"a", ts=now - 100), now_ms=now, configs=window)["error_code"] == Errors.NONE
    for codec in (CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD):  # records looked at inside
        resp = ctx.put(keyed(b"a", b"b", b"c", ts=now - 1, compression=codec), now_ms=now, configs=window)
        assert resp["error_code"] == Errors.INVALID_TIMESTAMP and resp["record_errors"][0]["batch_index"] == 2
        resp = ctx.put(keyed(None, compression=codec), configs={"cleanup.policy": "compact"})
        assert resp["error_code"] == Errors.INVALID_RECORD


def test_records_that_do_not_decompress_are_corrupt_when_they_must_be_read(ctx: Ctx) -> None:
    garbage = bytearray(keyed(None, ts=1000))
    garbage[22] |= CompressionType.ZSTD  # the records are not zstd: the CRC is right, the payload is not
    struct.pack_into(">I", garbage, 17, crc32c(bytes(garbage[21:])))
    assert ctx.put(bytes(garbage), configs={"cleanup.policy": "compact"})["error_code"] == Errors.CORRUPT_MESSAGE
    assert ctx.put(bytes(garbage))["error_code"] == Errors.CORRUPT_MESSAGE, "decompressed even when not read"
    assert ctx.records == []


def test_log_append_time_topic_stamps_batches(ctx: Ctx) -> None:
    configs = {"message.timestamp.type": "LogAppendTime"}
    resp = ctx.put(keyed(b"a", b"b", ts=5 * 10**15), now_ms=777, configs=configs)  # no window for LogAppendTime
    assert (resp["error_code"], resp["log_append_time_ms"]) == (Errors.NONE, 777)
    header = parse_header(ctx.fetch(("t", 0, 0))[0]["records"])
    assert header.is_log_append_time and header.max_timestamp == 777
    assert ctx.offsets(700) == (0, 777) and ctx.offsets(-3) == (0, 777)
    assert ctx.put(keyed(b"c"), now_ms=800)["log_append_time_ms"] == 800  # the log keeps the topic's config
    producer_stamped = bytes(split_batches(ctx.fetch(("t", 0, 0))[0]["records"])[0])
    assert ctx.put(producer_stamped, now_ms=900)["error_code"] == Errors.INVALID_TIMESTAMP
    assert ctx.put(keyed(b"d"), now_ms=900, configs={})["log_append_time_ms"] == -1, "CreateTime again"


def test_a_duplicate_on_a_log_append_time_topic_answers_the_original_append_time(ctx: Ctx) -> None:
    """Kafka answers a retried batch with the timestamp the original was stored with, also after
    a restart (the producer state is rebuilt from the log, or from a truncation's snapshot)."""
    configs = {"message.timestamp.type": "LogAppendTime"}
    batch = keyed(b"a", producer_id=9, producer_epoch=0, base_sequence=0)
    assert ctx.put(batch, now_ms=777, configs=configs)["log_append_time_ms"] == 777
    retry = ctx.put(batch, now_ms=900, configs=configs)
    assert (retry["error_code"], retry["base_offset"], retry["log_append_time_ms"]) == (Errors.NONE, 0, 777)
    ctx.put(keyed(b"b", producer_id=9, producer_epoch=0, base_sequence=1), now_ms=950, configs=configs)
    ctx.delete_records(1)  # a truncation snapshots the producer state
    fresh = Ctx()
    fresh.apply(ctx.records[-1:])
    assert fresh.put(batch, now_ms=990, configs=configs)["log_append_time_ms"] == 777


@pytest.mark.parametrize("codec", list(CompressionType))
def test_log_append_time_stamps_compressed_batches_and_replays_them_byte_for_byte(
        ctx: Ctx, codec: CompressionType) -> None:
    ctx.put(keyed(b"a", b"b", compression=codec), now_ms=555, configs={"message.timestamp.type": "LogAppendTime"})
    [stored] = split_batches(ctx.fetch(("t", 0, 0))[0]["records"])
    assert verify_crc(stored) and parse_header(stored).compression == codec
    assert [r.key for r in iter_records(stored)] == [b"a", b"b"], "the records are untouched"
    fresh = LogManager()
    for r in ctx.records:  # through msgpack, as the write-ahead log stores them
        raw = msgpack.unpackb(msgpack.packb([r.type, r.key, r.value]))
        fresh.replay(Record(raw[0], tuple(raw[1]), raw[2]))
    assert fresh.logs[(ORG, "t", 0)].segments[0].batches == ctx.manager.logs[(ORG, "t", 0)].segments[0].batches


def test_min_insync_replicas_is_capped_at_the_one_replica(ctx: Ctx) -> None:
    """Kafka's effective min ISR is min(min.insync.replicas, replication factor): with one
    replica, acks=all produces go through whatever the config says."""
    configs = {"min.insync.replicas": "3"}
    [resp] = ctx.produce({"topic": "t", "partition": 0, "records": batch(), "configs": configs}, acks=-1)
    assert resp["error_code"] == Errors.NONE


def test_a_refused_batch_tells_where_the_log_starts_as_kafka_does(ctx: Ctx) -> None:
    """Kafka answers a refusal by the log (sequence, epoch, batch rules) with the partition's log
    start offset and no message; size and corruption refusals with -1; a message only with record errors."""
    ctx.put(batch(3))
    ctx.delete_records(2)
    ctx.put(batch(1, producer_id=7, producer_epoch=0, base_sequence=0))
    gap = ctx.put(batch(1, producer_id=7, producer_epoch=0, base_sequence=5))
    assert (gap["error_code"], gap["log_start_offset"], gap["error_message"]) == (
        Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, 2, None)
    raw = bytearray(batch())
    raw[16] = 1
    magic = ctx.put(bytes(raw))
    assert (magic["error_code"], magic["log_start_offset"], magic["error_message"]) == (Errors.INVALID_RECORD, 2, None)
    big = ctx.put(batch(size=1048588))
    assert (big["error_code"], big["log_start_offset"], big["error_message"]) == (Errors.MESSAGE_TOO_LARGE, -1, None)
    raw = bytearray(batch(2))
    raw[-1] ^= 1
    assert ctx.put(bytes(raw))["log_start_offset"] == -1
