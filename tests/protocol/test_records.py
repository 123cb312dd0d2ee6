"""Record batch v2 helpers: framing, header, CRC, base offset stamping, round trips."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch

from rafka.protocol.records import (
    BATCH_HEADER_SIZE,
    DECOMPRESSED_LIMIT,
    INT32_MAX,
    LEADER_EPOCH,
    CompressionType,
    CorruptRecordError,
    InvalidRecordError,
    SimpleRecord,
    _read_varint,
    build_batch,
    compress,
    compute_crc,
    decompress,
    increment_sequence,
    iter_records,
    parse_header,
    scan_records,
    split_batches,
    stamp_batch,
    validate_batch,
    verify_crc,
)

blobs = st.one_of(st.none(), st.binary(max_size=64))
records_st = st.lists(
    st.builds(
        SimpleRecord,
        key=blobs,
        value=blobs,
        timestamp=st.integers(0, 2**41),
        headers=st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3).map(tuple),
    ),
    min_size=1,
    max_size=20,
)


def _batch(n: int = 1, **kw: object) -> bytes:
    return build_batch([SimpleRecord(b"k%d" % i, b"v%d" % i, 1000 + i) for i in range(n)], **kw)  # type: ignore[arg-type]


def test_header_fields_are_parsed_in_kafka_order() -> None:
    batch = _batch(3, base_offset=7, producer_id=42, producer_epoch=3, base_sequence=9, partition_leader_epoch=5)
    h = parse_header(batch)
    assert (h.base_offset, h.batch_length, h.partition_leader_epoch, h.magic) == (7, len(batch) - 12, 5, 2)
    assert (h.last_offset_delta, h.base_timestamp, h.max_timestamp) == (2, 1000, 1002)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (42, 3, 9, 3)
    assert h.size_in_bytes == len(batch) and h.last_offset == 9 and h.last_sequence == 11
    assert len(batch) > BATCH_HEADER_SIZE


def test_attribute_bits_compression_transactional_control() -> None:
    plain = parse_header(_batch())
    assert plain.compression == CompressionType.NONE and not plain.is_transactional and not plain.is_control
    gz = parse_header(_batch(compression=CompressionType.GZIP, transactional=True, control=True))
    assert gz.compression == CompressionType.GZIP and gz.is_transactional and gz.is_control
    for codec in CompressionType:  # the codec is read from bits 0-2 whatever it is
        raw = bytearray(_batch())
        struct.pack_into(">h", raw, 21, int(codec) | 0x08)
        assert parse_header(raw).compression == codec and parse_header(raw).is_log_append_time


def test_split_several_batches_without_copying() -> None:
    a, b = _batch(1), _batch(4, base_offset=1)
    views = split_batches(a + b)
    assert [bytes(v) for v in views] == [a, b]
    assert all(isinstance(v, memoryview) for v in views)
    assert split_batches(b"") == []


@pytest.mark.parametrize("cut", [1, 11, 12, 40])
def test_split_rejects_truncated_data(cut: int) -> None:
    data = _batch(2) + _batch(1)
    with pytest.raises(CorruptRecordError):
        split_batches(data[:-cut])


def test_split_rejects_negative_length() -> None:
    raw = bytearray(_batch())
    struct.pack_into(">i", raw, 8, -5)
    with pytest.raises(CorruptRecordError):
        split_batches(bytes(raw))


def test_crc_covers_attributes_to_end_but_not_base_offset() -> None:
    batch = _batch(2)
    assert verify_crc(batch)
    flipped = bytearray(batch)
    flipped[-1] ^= 0xFF
    assert not verify_crc(flipped)
    with pytest.raises(CorruptRecordError):
        validate_batch(flipped)
    stamped = stamp_batch(build_batch([SimpleRecord(b"k", b"v", 1)], partition_leader_epoch=-1), 123456789)
    header = parse_header(stamped)
    assert (header.base_offset, header.partition_leader_epoch) == (123456789, LEADER_EPOCH) and verify_crc(stamped)


def test_validate_rejects_other_magic_before_crc() -> None:
    raw = bytearray(_batch())
    raw[16] = 1
    with pytest.raises(InvalidRecordError):
        validate_batch(raw)


def test_validate_rejects_short_batch() -> None:
    with pytest.raises(CorruptRecordError):
        validate_batch(_batch()[:40])


def test_sequence_wraps_at_int32_max() -> None:
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert parse_header(_batch(3, producer_id=1, producer_epoch=0, base_sequence=INT32_MAX)).last_sequence == 1


def test_gzip_batch_is_decodable_and_smaller() -> None:
    recs = [SimpleRecord(b"key", b"x" * 500, 5)] * 10
    gz = build_batch(recs, compression=CompressionType.GZIP)
    assert len(gz) < len(build_batch(recs)) and verify_crc(gz)
    assert [r.value for r in iter_records(gz)] == [b"x" * 500] * 10


@pytest.mark.parametrize("codec", list(CompressionType))
def test_every_codec_round_trips(codec: CompressionType) -> None:
    recs = [SimpleRecord(b"key%d" % i, b"x" * 300, 5 + i, (("h", b"v"),)) for i in range(10)]
    batch = build_batch(recs, compression=codec)
    assert parse_header(batch).compression == codec and verify_crc(batch)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in iter_records(batch)] == [
        (r.key, r.value, r.timestamp, r.headers) for r in recs]


def test_snappy_in_snappy_java_framing_decodes() -> None:
    """Java producers frame snappy blocks (magic, version, compat, then length-prefixed blocks)."""
    raw = build_batch([SimpleRecord(b"k", b"v" * 100, 7), SimpleRecord(None, b"w", 8)])
    body = raw[BATCH_HEADER_SIZE:]
    half = len(body) // 2
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(
        struct.pack(">i", len(block)) + block
        for block in (bytes(cramjam.snappy.compress_raw(part)) for part in (body[:half], body[half:])))
    assert bytes(decompress(CompressionType.SNAPPY, framed)) == body


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
                                   CompressionType.ZSTD, 5])
def test_records_that_do_not_decompress_are_corrupt(codec: int) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x82SNAPPY\x00 certainly not compressed")


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
                                   CompressionType.ZSTD])
def test_decompression_stops_at_its_limit(codec: CompressionType) -> None:
    """A compression bomb: a few bytes that expand past the limit are refused, not allocated."""
    packed = compress(codec, b"\0" * 100_000)
    assert len(decompress(codec, packed, limit=100_000)) == 100_000
    with pytest.raises(CorruptRecordError, match="more than 99999 bytes"):
        decompress(codec, packed, limit=99_999)


def test_a_bomb_past_the_default_limit_is_refused() -> None:
    packed = compress(CompressionType.ZSTD, b"\0" * (DECOMPRESSED_LIMIT + 1))
    assert len(packed) < 10_000
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(CompressionType.ZSTD, packed)


@settings(max_examples=150)
@given(records_st, st.integers(0, 2**62), st.integers(-1, 2**31 - 1))
def test_build_then_decode_round_trip(records: list[SimpleRecord], base_offset: int, seq: int) -> None:
    batch = build_batch(records, base_offset=base_offset, base_sequence=seq)
    [view] = split_batches(batch)
    header = validate_batch(view)
    assert header.records_count == len(records) and header.base_offset == base_offset
    assert header.max_timestamp == max(r.timestamp for r in records)
    decoded = list(iter_records(view))
    assert [(r.key, r.value, r.timestamp, r.headers) for r in decoded] == [
        (r.key, r.value, r.timestamp, r.headers) for r in records
    ]
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))


@settings(max_examples=100)
@given(records_st, st.integers(0, 2**62))
def test_kio_reads_our_batches(records: list[SimpleRecord], new_base: int) -> None:
    """An independent decoder (kio) accepts our encoding and our offset stamping."""
    batch = stamp_batch(build_batch(records), new_base)
    parsed, size = read_batch(batch, 0)
    assert size == len(batch) and parsed.base_offset == new_base and parsed.crc == compute_crc(batch)
    assert parsed.partition_leader_epoch == LEADER_EPOCH
    assert [(r.offset, r.key, r.value) for r in parsed.records] == [
        (new_base + i, r.key, r.value) for i, r in enumerate(records)
    ]
    assert [[(h.key, h.value) for h in r.headers] for r in parsed.records] == [
        [(k.encode(), v) for k, v in r.headers] for r in records
    ]


@settings(max_examples=50)
@given(st.lists(records_st, min_size=1, max_size=5))
def test_split_round_trip_of_concatenated_batches(batches: list[list[SimpleRecord]]) -> None:
    encoded = [build_batch(r) for r in batches]
    assert [bytes(v) for v in split_batches(b"".join(encoded))] == encoded


def _one_record(ts_delta: bytes, offset_delta: bytes) -> bytes:
    """A one-record batch whose record's timestamp and offset deltas are the varints given."""
    body = b"\x00" + ts_delta + offset_delta + b"\x01" + b"\x06" + b"abc" + b"\x00"  # null key, value "abc"
    raw = bytearray(_batch()[:BATCH_HEADER_SIZE] + bytes([len(body) * 2]) + body)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">I", raw, 17, compute_crc(raw))
    return bytes(raw)


def test_int32_varints_are_read_to_five_bytes_and_the_timestamp_delta_to_ten_as_kafka_reads_them() -> None:
    """Kafka's ByteUtils.readVarint refuses a sixth byte; rafka read up to ten into an int32 field."""
    for ts, off in [(b"\x02", b"\x80\x80\x80\x80\x00"), (b"\x82" + b"\x80" * 8 + b"\x00", b"\x00")]:
        batch = _one_record(ts, off)
        [record] = iter_records(batch)
        assert (record.offset, record.timestamp, record.value) == (0, 1001, b"abc")
        assert list(scan_records(parse_header(batch), batch[BATCH_HEADER_SIZE:])) == [(0, record.timestamp, False)]
    batch = _one_record(b"\x02", b"\x80\x80\x80\x80\x80\x00")  # offset delta 0 in six bytes
    with pytest.raises(InvalidRecordError, match="invalid record structure"):
        list(scan_records(parse_header(batch), batch[BATCH_HEADER_SIZE:]))
    with pytest.raises(CorruptRecordError):
        list(iter_records(batch))
    with pytest.raises(CorruptRecordError):  # an eleventh byte of a timestamp delta
        list(iter_records(_one_record(b"\x80" * 10 + b"\x00", b"\x00")))
    # a fifth byte's high bits fall off an int, as in Java's arithmetic (checked against ByteUtils)
    assert _read_varint(b"\xff\xff\xff\xff\x7f", 0) == (-2147483648, 5)
    assert _read_varint(b"\xfe\xff\xff\xff\x1f", 0) == (2147483647, 5)
    assert _read_varint(b"\x80\x80\x80\x80\x10", 0) == (0, 5)
