"""PartitionLog: offsets, reads, timestamp lookups, segments and retention."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from rafka.protocol.cleaning import empty_batch
from rafka.protocol.records import (
    CompressionType,
    SimpleRecord,
    build_batch,
    compute_crc,
    iter_records,
    parse_header,
)
from rafka.shard.log.config import LogConfig
from rafka.shard.log.errors import Errors
from rafka.shard.log.partition import PartitionLog


def batch(n: int = 1, ts: int = 1000, **kw: Any) -> bytes:
    return build_batch([SimpleRecord(b"k", b"v" * 10, ts + i) for i in range(n)], **kw)


def append(log: PartitionLog, data: bytes | list[bytes], now_ms: int = 0, config: LogConfig | None = None) -> Any:
    plan = log.prepare_append(data if isinstance(data, list) else [data], now_ms, config)
    for value in plan.values:
        log.apply_batch(value)
    return plan


def test_offsets_are_assigned_sequentially_from_log_end() -> None:
    log = PartitionLog()
    plans = [append(log, batch(n)) for n in (3, 1, 5)]
    assert [p.base_offset for p in plans] == [0, 3, 4] and log.log_end_offset == log.high_watermark == 9
    stored = [parse_header(b).base_offset for b in log.segments[0].batches]
    assert stored == [0, 3, 4]


def test_a_client_batch_must_start_at_offset_zero() -> None:
    """As Kafka's analyzeAndValidateRecords: a producer's batch with another base offset is refused."""
    log = PartitionLog()
    plan = log.prepare_append([batch(2, base_offset=999)], 0, None, "t-0")
    assert plan.error == Errors.INVALID_RECORD and log.log_end_offset == 0
    assert plan.message == "The baseOffset of the record batch in the append to t-0 should be 0, but it is 999"


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_a_batch_declaring_more_records_than_its_bytes_hold_is_refused(codec: CompressionType) -> None:
    """One record under a header claiming 2^31 - 1 (last offset delta to match) moved the log end
    offset by two billion; Kafka's record iterator refuses it."""
    log = PartitionLog()
    raw = bytearray(build_batch([SimpleRecord(None, b"v", 1000)], compression=codec))
    struct.pack_into(">i", raw, 23, 2**31 - 2)  # lastOffsetDelta
    struct.pack_into(">i", raw, 57, 2**31 - 1)  # recordsCount
    struct.pack_into(">I", raw, 17, __import__("crc32c").crc32c(bytes(raw[21:])))
    plan = log.prepare_append([bytes(raw)], 0, None, "t-0")
    assert (plan.error, plan.message) == (Errors.INVALID_RECORD, "Incorrect declared batch size, premature EOF reached")
    assert log.log_end_offset == 0
    assert append(log, batch(3)).error == Errors.NONE and log.log_end_offset == 3  # honest batches as before


def test_several_batches_in_one_append() -> None:
    log = PartitionLog()
    plan = append(log, [batch(2), batch(3)])
    assert plan.base_offset == 0 and log.log_end_offset == 5
    assert [parse_header(v["batch"]).base_offset for v in plan.values] == [0, 2]


def test_prepare_does_not_mutate() -> None:
    log = PartitionLog()
    log.prepare_append([batch(2)], 0)
    assert log.log_end_offset == 0 and log.segments[0].batches == []


def test_read_starts_at_batch_containing_offset_and_respects_max_bytes() -> None:
    log = PartitionLog()
    batches = [append(log, batch(3)).values[0]["batch"] for _ in range(4)]  # offsets 0-2,3-5,6-8,9-11
    assert log.read(4, 10**6) == (Errors.NONE, batches[1:])
    assert log.read(3, len(batches[0]) * 2) == (Errors.NONE, batches[1:3])
    assert log.read(0, 1) == (Errors.NONE, batches[:1])  # first batch even if larger than max_bytes
    assert log.read(0, 1, min_one=False) == (Errors.NONE, [])
    assert log.read(12, 100) == (Errors.NONE, [])  # at LEO: nothing yet
    assert log.read(13, 100)[0] == Errors.OFFSET_OUT_OF_RANGE
    assert log.read(-1, 100)[0] == Errors.OFFSET_OUT_OF_RANGE


def test_read_spans_segments() -> None:
    log = PartitionLog()
    config = LogConfig(segment_bytes=len(batch(2)) * 2)
    values = [append(log, batch(2), config=config).values[0] for _ in range(5)]
    assert [len(s.batches) for s in log.segments] == [2, 2, 1]
    assert [v["roll"] for v in values] == [False, False, True, False, True]
    assert log.read(3, 10**6)[1] == [v["batch"] for v in values[1:]]
    assert log.read(9, 10**6)[1] == [values[4]["batch"]]


def test_segment_rolls_after_segment_ms() -> None:
    log = PartitionLog()
    config = LogConfig(segment_ms=100)
    append(log, batch(), 0, config)
    append(log, batch(), 99, config)
    append(log, batch(), 100, config)
    assert [len(s.batches) for s in log.segments] == [2, 1]
    assert log.segments[1].created_ms == 100 and log.segments[1].base_offset == 2


def test_log_start_refuses_reads_below_but_keeps_the_batch() -> None:
    log = PartitionLog()
    first = append(log, batch(5)).values[0]["batch"]
    append(log, batch(1))
    log.apply_log_start(2)
    assert log.log_start_offset == 2
    assert log.read(1, 100)[0] == Errors.OFFSET_OUT_OF_RANGE
    assert log.read(2, 10**6)[1][0] == first  # whole batch still served
    log.apply_log_start(1)  # never moves back
    assert log.log_start_offset == 2


def test_log_start_drops_whole_segments_below_it() -> None:
    log = PartitionLog()
    config = LogConfig(segment_bytes=len(batch()))
    for _ in range(3):
        append(log, batch(), config=config)
    log.apply_log_start(2)
    assert [s.base_offset for s in log.segments] == [2]
    log.apply_log_start(3)
    assert len(log.segments) == 1 and log.segments[0].batches == [] and log.log_end_offset == 3
    assert append(log, batch(), config=config).base_offset == 3


def test_list_offsets_special_timestamps() -> None:
    log = PartitionLog()
    assert log.list_offset(-1) == (0, -1) and log.list_offset(-2) == (0, -1) and log.list_offset(-3) == (-1, -1)
    append(log, build_batch([SimpleRecord(None, b"a", 10), SimpleRecord(None, b"b", 50), SimpleRecord(None, b"c", 20)]))
    append(log, build_batch([SimpleRecord(None, b"d", 30), SimpleRecord(None, b"e", 50)]))
    assert log.list_offset(-1) == (5, -1) and log.list_offset(-2) == (0, -1) and log.list_offset(-4) == (0, -1)
    assert log.list_offset(-3) == (1, 50)  # first record carrying the max timestamp
    log.apply_log_start(2)  # below the record with the max timestamp: Kafka still answers that record
    assert log.list_offset(-3) == (1, 50) and log.list_offset(40) == (4, 50)


def test_list_offsets_by_timestamp_record_granularity() -> None:
    log = PartitionLog()
    append(log, build_batch([SimpleRecord(None, b"a", 10), SimpleRecord(None, b"b", 50), SimpleRecord(None, b"c", 20)]))
    append(log, build_batch([SimpleRecord(None, b"d", 30), SimpleRecord(None, b"e", 60)]))
    assert log.list_offset(0) == (0, 10)
    assert log.list_offset(15) == (1, 50)
    assert log.list_offset(55) == (4, 60)
    assert log.list_offset(61) == (-1, -1)
    log.apply_log_start(2)
    assert log.list_offset(15) == (2, 20)  # records below the log start are skipped
    assert log.list_offset(0) == (2, 20)


@pytest.mark.parametrize("codec", [CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD])
def test_list_offsets_finds_the_record_inside_compressed_batches(codec: CompressionType) -> None:
    log = PartitionLog()
    append(log, batch(3, ts=100))
    append(log, build_batch([SimpleRecord(None, b"x", 200 + 10 * i) for i in range(4)], compression=codec))
    assert log.list_offset(215) == (5, 220) and log.list_offset(-3) == (6, 230)


def test_list_offsets_judges_a_stored_batch_that_does_not_decode_by_its_header() -> None:
    """Batches appended before records were checked may not decode: the lookup answers the
    batch's first offset and max timestamp rather than failing."""
    log = PartitionLog()
    append(log, batch(3, ts=100))
    raw = bytearray(batch(4, ts=200))
    struct.pack_into(">h", raw, 21, int(CompressionType.ZSTD))  # the records are not zstd
    struct.pack_into(">q", raw, 0, 3)  # follows the first batch
    raw[17:21] = struct.pack(">I", __import__("crc32c").crc32c(bytes(raw[21:])))
    log.apply_batch({"batch": bytes(raw), "append_ms": 0})
    assert log.list_offset(150) == (3, 203) and log.list_offset(-3) == (3, 203)


def test_time_retention_deletes_whole_expired_segments() -> None:
    log = PartitionLog()
    config = LogConfig(segment_bytes=len(batch()) * 2, retention_ms=1000)
    for ts in (0, 100, 500, 600, 2000):  # segments: [0,100] [500,600] [2000]
        append(log, batch(ts=ts), config=config)
    assert log.retention_log_start(1100, config) is None  # newest record exactly retention.ms old: kept
    assert log.retention_log_start(1101, config) == 2  # strictly older: the first segment goes
    assert log.retention_log_start(1601, config) == 4
    assert log.retention_log_start(3001, config) == 5  # the active segment too: the log empties
    log.apply_log_start(5)
    assert log.segments[-1].batches == [] and log.log_start_offset == log.log_end_offset == 5
    assert log.retention_log_start(10**9, config) is None


def test_size_retention_keeps_log_under_retention_bytes() -> None:
    log = PartitionLog()
    one = len(batch())
    config = LogConfig(segment_bytes=one * 2, retention_bytes=one * 3)
    for _ in range(5):  # segments of 2, 2, 1 batches
        append(log, batch(), config=config)
    assert log.size == one * 5
    assert log.retention_log_start(0, config) == 2  # drop first segment: 3 batches left
    assert log.retention_log_start(0, LogConfig(retention_bytes=one * 5)) is None
    assert log.retention_log_start(0, LogConfig(retention_bytes=0)) == 5
    assert log.retention_log_start(0, LogConfig(retention_ms=-1)) is None  # unlimited


def test_retention_uses_append_time_when_batch_has_no_timestamp() -> None:
    log = PartitionLog()
    append(log, build_batch([SimpleRecord(None, b"x", -1)]), now_ms=5000)
    assert log.segments[0].retention_timestamp == 5000


# ---------------------------------------------------------------- compression.type

def _stored(log: PartitionLog) -> tuple[Any, list[SimpleRecord]]:
    data = log.segments[-1].batches[-1]
    return parse_header(data), list(iter_records(data))


@pytest.mark.parametrize("topic_codec", ["gzip", "snappy", "lz4", "zstd", "uncompressed"])
@pytest.mark.parametrize("producer_codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD])
def test_a_topic_compression_type_stores_every_batch_in_that_codec(topic_codec: str,
                                                                   producer_codec: CompressionType) -> None:
    records = [SimpleRecord(b"k%d" % i, b"value %d " % i * 20, 5000 + 7 * i, (("h", b"x"),)) for i in range(50)]
    sent = build_batch(records, producer_id=7, producer_epoch=2, base_sequence=0, compression=producer_codec,
                       transactional=True)
    log = PartitionLog()
    append(log, batch(3))  # the batch under test lands at offset 3
    plan = append(log, sent, config=LogConfig.from_overrides({"compression.type": topic_codec}))
    assert plan.error == Errors.NONE
    header, stored = _stored(log)
    want = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[topic_codec]
    assert header.compression == want
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (3, 49, 50)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.is_transactional) == (7, 2, 0, True)
    assert header.max_timestamp == 5000 + 7 * 49
    assert [(r.key, r.value, r.timestamp, r.headers, r.offset) for r in stored] == [
        (r.key, r.value, r.timestamp, r.headers, 3 + i) for i, r in enumerate(records)]
    assert len(log.segments[-1].batches[-1]) == log.segments[-1].size - len(batch(3))


def test_compression_type_producer_keeps_the_bytes_as_sent() -> None:
    sent = batch(5, compression=CompressionType.LZ4)
    log = PartitionLog()
    append(log, sent, config=LogConfig.from_overrides({"compression.type": "producer"}))
    assert log.segments[-1].batches[-1][16:] == sent[16:]  # all but the stamped base offset and leader epoch


def test_compression_levels_are_used() -> None:
    records = [SimpleRecord(None, bytes(range(256)) * 8 + b"%d" % i, 1000) for i in range(200)]
    sizes = {}
    for level in ("1", "9"):
        log = PartitionLog()
        append(log, build_batch(records), config=LogConfig.from_overrides(
            {"compression.type": "gzip", "compression.gzip.level": level}))
        sizes[level] = len(log.segments[-1].batches[-1])
    assert sizes["9"] < sizes["1"]


def test_a_batch_too_large_once_recompressed_is_refused() -> None:
    sent = batch(200, compression=CompressionType.ZSTD)  # 200 x "v" * 10: small compressed, ~4 KB not
    config = LogConfig.from_overrides({"compression.type": "uncompressed", "max.message.bytes": "2000"})
    assert len(sent) < 2000
    log = PartitionLog()
    plan = log.prepare_append([sent], 0, config, "t-0")
    assert plan.error == Errors.MESSAGE_TOO_LARGE and not plan.values
    assert "which exceeds the maximum configured size of 2000" in plan.message


def test_a_batch_whose_records_do_not_parse_is_not_recompressed() -> None:
    """Recompressing rewrites the records with a fresh CRC, so each is parsed to its end first, as
    Kafka's LogValidator does: a record with bytes left over is INVALID_RECORD (Kafka's
    InvalidRecordException, which a producer does not retry), not stored."""
    good = batch(1)
    body = good[61 + 1:] + b"\x00"  # the one record, with a stray byte; its length is one varint byte
    bad = bytearray(good[:61] + bytes([2 * len(body)]) + body)
    struct.pack_into(">i", bad, 8, len(bad) - 12)
    struct.pack_into(">I", bad, 17, compute_crc(bad))
    config = LogConfig.from_overrides({"compression.type": "zstd"})
    plan = PartitionLog().prepare_append([bytes(bad)], 0, config, "t-0")
    assert plan.error == Errors.INVALID_RECORD and plan.message == ("Invalid record size: expected to read "
                                                                     "18 bytes in record payload, but instead read 17")
    assert PartitionLog().prepare_append([good], 0, config, "t-0").error == Errors.NONE


def _declaring(raw: bytes, count: int) -> bytes:
    """``raw`` with a header that declares ``count`` records (and the last offset delta to match)."""
    out = bytearray(raw)
    struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, compute_crc(out))
    return bytes(out)


@pytest.mark.parametrize("path", ["recompressed", "timestamps checked", "keys checked"])
@pytest.mark.parametrize(("declared", "message"), [
    (4, "Incorrect declared batch size, premature EOF reached"),
    (2, "Incorrect declared batch size, records still remaining in file"),
])
def test_a_record_count_that_lies_is_invalid_record_wherever_the_records_are_read(
        path: str, declared: int, message: str) -> None:
    """Three records under a header that counts four, or two: wherever the broker reads the records
    (to recompress them, to check their timestamps, to check their keys), the answer is Kafka's
    record iterator's, INVALID_RECORD; a compressed batch on these paths was CORRUPT_MESSAGE, which
    producers retry until their delivery timeout."""
    now = 10_000_000
    codec = CompressionType.NONE if path == "recompressed" else CompressionType.ZSTD
    ts = now + 7_200_000 if path == "timestamps checked" else now  # two hours ahead: out of the window
    config = LogConfig.from_overrides({"recompressed": {"compression.type": "zstd"}, "timestamps checked": {},
                                       "keys checked": {"cleanup.policy": "compact"}}[path])
    sent = batch(3, ts=ts, compression=codec)
    log = PartitionLog()
    plan = log.prepare_append([_declaring(sent, declared)], now, config, "t-0")
    assert (plan.error, plan.message, plan.values) == (Errors.INVALID_RECORD, message, [])
    expected = Errors.INVALID_TIMESTAMP if path == "timestamps checked" else Errors.NONE
    assert log.prepare_append([sent], now, config, "t-0").error == expected  # the honest batch as before


def test_log_append_time_applies_to_a_recompressed_batch() -> None:
    log = PartitionLog()
    config = LogConfig.from_overrides({"compression.type": "zstd", "message.timestamp.type": "LogAppendTime"})
    append(log, batch(4), now_ms=777_000, config=config)
    header, _ = _stored(log)
    assert header.compression == CompressionType.ZSTD and header.is_log_append_time
    assert header.max_timestamp == 777_000


class _CountingReads(list):  # type: ignore[type-arg]
    """A segment's batches, counting the reads of one (a paged batch's are reads of a file)."""

    reads = 0

    def __getitem__(self, i: Any) -> Any:
        _CountingReads.reads += 1
        return super().__getitem__(i)


def test_timestamp_lookups_read_only_the_batches_they_answer_from() -> None:
    log = PartitionLog()
    for i in range(300):
        append(log, build_batch([SimpleRecord(None, b"v", 1000 + i)]))
    for seg in log.segments:
        seg.batches = _CountingReads(seg.batches)
    _CountingReads.reads = 0
    assert log.list_offset(-3) == (299, 1299) and log.list_offset(1150) == (150, 1150)
    assert _CountingReads.reads <= 4, "the timestamps kept beside the batches pick the one to read"


def test_the_largest_timestamp_is_looked_for_past_batches_a_clean_emptied() -> None:
    log = PartitionLog()
    for ts in (10, 50, 30, 50):
        append(log, build_batch([SimpleRecord(None, b"v", ts)]))
    seg = log.segments[0]
    for i in (1, 3):  # both batches carrying 50 lost their records to a clean
        seg.batches.held[i] = empty_batch(parse_header(seg.batches[i]))
    assert log.list_offset(-3) == (2, 30)
