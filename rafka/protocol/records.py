"""Kafka record batches (magic v2) at the byte level.

How this works: the broker stores and serves batches exactly as producers sent
them, so it rarely needs to look inside one. ``split_batches`` frames a Produce
``records`` blob into batches by reading each batch's length (zero-copy
``memoryview`` slices), ``parse_header`` unpacks the fixed 61-byte header with
one ``struct`` call, ``verify_crc`` checks the CRC-32C that covers everything
from ``attributes`` to the end of the batch, and ``stamp_batch`` stamps the
offset the log assigns and the partition's leader epoch, as Kafka's ``LogValidator``
does (``baseOffset`` and ``partitionLeaderEpoch`` are outside the CRC, so the checksum
stays valid). A produce decompresses every compressed batch, with a cap on the size it
decompresses to, and reads its records only when the topic's configs need them
(see ``rafka.shard.log.validator``).

``build_batch`` and ``iter_records`` encode and decode the records inside a batch,
with any of Kafka's codecs (cramjam for snappy, lz4 and zstd): tests use them to make
real batches, and the log uses ``iter_records`` to answer timestamp lookups at record
granularity and to check records against the topic's configs.

Layout (DefaultRecordBatch.java)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 |
    crc u32 | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 |
    maxTimestamp i64 | producerId i64 | producerEpoch i16 | baseSequence i32 |
    recordsCount i32 | records...
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

import cramjam
from crc32c import crc32c

LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
BATCH_HEADER_SIZE = 61
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # a v2 batch with no records
MAGIC_V2 = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21  # offset of attributes: the CRC covers [21, end)
_MAGIC_OFFSET = 16  # same position in every message format version
_MAX_TIMESTAMP_OFFSET = 35
_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


class CompressionType(IntEnum):
    """Codec id in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CorruptRecordError(ValueError):
    """Bytes that do not frame into batches, or a CRC mismatch (CORRUPT_MESSAGE)."""


class InvalidRecordError(ValueError):
    """A well-framed batch the broker must refuse, e.g. magic != 2 (INVALID_RECORD)."""


class BatchHeader(NamedTuple):
    """The 61-byte v2 batch header, field names as in DefaultRecordBatch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_in_bytes(self) -> int:
        """Total size of the batch on the wire (header + records)."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record."""
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        """Compression codec (a ``CompressionType`` value; unknown codecs pass through)."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        """Timestamp type bit: the batch carries LogAppendTime."""
        return bool(self.attributes & _TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        """Attribute bit 4: part of a transaction."""
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        """Attribute bit 5: a control batch (transaction marker)."""
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        """Whether the batch was written by an idempotent/transactional producer."""
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 max like Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past int32 max back to 0 (DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def parse_header(batch: bytes | bytearray | memoryview, offset: int = 0) -> BatchHeader:
    """Unpack the v2 header at ``offset``; raises ``CorruptRecordError`` if too short."""
    if len(batch) - offset < BATCH_HEADER_SIZE:
        raise CorruptRecordError("record batch shorter than its 61-byte header")
    return BatchHeader._make(_HEADER.unpack_from(batch, offset))


def batch_last_offset(batch: bytes | bytearray | memoryview) -> int:
    """baseOffset + lastOffsetDelta, read straight from the header bytes (no full unpack)."""
    return int.from_bytes(batch[0:8], "big", signed=True) + int.from_bytes(batch[23:27], "big", signed=True)


def split_batches(data: bytes | bytearray | memoryview) -> list[memoryview]:
    """Frame ``data`` into zero-copy batch views; raise ``CorruptRecordError`` on bad framing.

    Only framing is checked (lengths, truncation); magic and CRC are checked by
    ``validate_batch``. Any message format's framing is the same, so legacy
    (magic 0/1) batches are framed too and rejected later.
    """
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
    batches: list[memoryview] = []
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise CorruptRecordError("truncated record batch length prefix")
        (batch_length,) = struct.unpack_from(">i", view, pos + 8)
        size = LOG_OVERHEAD + batch_length
        if batch_length < 0 or pos + size > end:
            raise CorruptRecordError(f"record batch length {batch_length} runs past the data")
        batches.append(view[pos : pos + size])
        pos += size
    return batches


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C over ``attributes`` .. end of batch."""
    return int(crc32c(memoryview(batch)[_CRC_START:]))


def verify_crc(batch: bytes | bytearray | memoryview) -> bool:
    """Whether the stored CRC matches the batch contents."""
    (stored,) = struct.unpack_from(">I", batch, 17)
    return bool(stored == compute_crc(batch))


def validate_batch(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Check one framed batch as a broker does before storing it; return its header.

    Raises ``InvalidRecordError`` for magic != 2, ``CorruptRecordError`` for a
    too-short batch or a CRC mismatch.
    """
    if len(batch) > _MAGIC_OFFSET and batch[_MAGIC_OFFSET] != MAGIC_V2:
        raise InvalidRecordError(f"record batch magic {batch[_MAGIC_OFFSET]} is not 2")
    header = parse_header(batch)
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch length {header.batch_length} below minimum")
    if not verify_crc(batch):
        raise CorruptRecordError(f"record batch crc {header.crc} does not match its contents")
    return header


LEADER_EPOCH = 0  # every partition's, as Metadata says: rafka's partitions never change leader
_LEADER_EPOCH_BYTES = struct.pack(">i", LEADER_EPOCH)  # partitionLeaderEpoch, bytes [12, 16)


def stamp_batch(batch: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """A copy of ``batch`` with ``baseOffset`` and ``partitionLeaderEpoch`` (``LEADER_EPOCH``)
    replaced; both are outside the CRC, so no recompute.

    One copy: the join reads the rest of the batch straight from the view.
    """
    view = memoryview(batch)
    return b"".join((struct.pack(">q", base_offset), view[8:12], _LEADER_EPOCH_BYTES, view[16:]))


def set_log_append_time(batch: bytes | bytearray | memoryview, now_ms: int) -> bytes:
    """A copy of ``batch`` stamped with LogAppendTime: the timestamp-type bit set and
    ``maxTimestamp`` = ``now_ms``, CRC recomputed (DefaultRecordBatch.setMaxTimestamp).
    Consumers then read every record's timestamp as ``now_ms``."""
    out = bytearray(batch)
    attributes = struct.unpack_from(">h", out, _CRC_START)[0] | _TIMESTAMP_TYPE_BIT
    struct.pack_into(">h", out, _CRC_START, attributes)
    struct.pack_into(">q", out, _MAX_TIMESTAMP_OFFSET, now_ms)
    struct.pack_into(">I", out, 17, compute_crc(out))
    return bytes(out)


# ---------------------------------------------------------------- records inside a batch


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """One record to encode or one decoded: key/value ``None`` mean null."""

    key: bytes | None
    value: bytes | None
    timestamp: int = 0
    headers: tuple[tuple[str, bytes | None], ...] = field(default_factory=tuple)
    offset: int = -1  # filled in by iter_records


def _zigzag_varint(value: int, out: bytearray) -> None:
    zz = (value << 1) ^ (value >> 63)
    zz &= 0xFFFFFFFFFFFFFFFF
    while zz >= 0x80:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)


def _read_varint(buf: memoryview | bytes, pos: int, last_shift: int = 28, mask: int = 0xFFFF_FFFF) -> tuple[int, int]:
    """A zigzag varint of an int32 field (lengths, offset delta, counts): at most 5 bytes, as
    Kafka's ``ByteUtils.readVarint`` (``CorruptRecordError`` past them); ``_read_varlong``'s
    limits for an int64."""
    if pos < len(buf):  # one or two bytes (most lengths and deltas) without the loop
        if (byte := buf[pos]) < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
        if pos + 1 < len(buf) and (second := buf[pos + 1]) < 0x80:
            result = (byte & 0x7F) | (second << 7)
            return (result >> 1) ^ -(result & 1), pos + 2
    shift = result = 0
    while True:
        if pos >= len(buf) or shift > last_shift:
            raise CorruptRecordError("malformed varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            result &= mask  # Kafka's int (or long) arithmetic
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _read_varlong(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of an int64 field (the timestamp delta): at most 10 bytes, as
    ``ByteUtils.readVarlong``."""
    if pos < len(buf) and (byte := buf[pos]) < 0x80:  # one record a batch, or records within 64 ms
        return (byte >> 1) ^ -(byte & 1), pos + 1
    return _read_varint(buf, pos, 63, 0xFFFF_FFFF_FFFF_FFFF)


def _write_nullable(value: bytes | None, out: bytearray) -> None:
    if value is None:
        _zigzag_varint(-1, out)
    else:
        _zigzag_varint(len(value), out)
        out += value


def _read_nullable(buf: memoryview | bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise CorruptRecordError("record field runs past the batch")
    return bytes(buf[pos : pos + length]), pos + length


def _encode_record(record: SimpleRecord, delta: int, base_timestamp: int) -> bytes:
    body = bytearray(b"\x00")  # record attributes, unused
    _zigzag_varint(record.timestamp - base_timestamp, body)
    _zigzag_varint(delta, body)
    _write_nullable(record.key, body)
    _write_nullable(record.value, body)
    _zigzag_varint(len(record.headers), body)
    for name, hvalue in record.headers:
        _write_nullable(name.encode("utf-8"), body)
        _write_nullable(hvalue, body)
    out = bytearray()
    _zigzag_varint(len(body), out)
    return bytes(out + body)


def build_batch(
    records: Sequence[SimpleRecord],
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = -1,
    compression: CompressionType = CompressionType.NONE,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """Encode a v2 batch with a correct CRC (for tests and tools)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_ts = records[0].timestamp
    body = compress(compression, b"".join(_encode_record(r, i, base_ts) for i, r in enumerate(records)))
    attributes = int(compression) | (_TRANSACTIONAL_BIT if transactional else 0)
    attributes |= _CONTROL_BIT if control else 0
    max_ts = max(r.timestamp for r in records)
    header = _HEADER.pack(
        base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body),
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        len(records) - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch = bytearray(header + body)
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return bytes(batch)


_XERIAL = b"\x82SNAPPY\x00"  # snappy-java's stream header (magic, then version and compat ints)


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """``data`` compressed as a Kafka producer does with ``codec`` (snappy: one raw block, as
    librdkafka writes; lz4: the frame format; zstd: one frame), at ``level`` (None: the
    codec's default)."""
    if codec == CompressionType.NONE:
        return data
    if codec == CompressionType.GZIP:
        return gzip.compress(data, 9 if level is None else level)
    if codec == CompressionType.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CompressionType.LZ4:
        return bytes(cramjam.lz4.compress(data, level))
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data, level))
    raise ValueError(f"unknown compression codec {codec}")


DECOMPRESSED_LIMIT = 64 * 1024 * 1024  # the records of one batch, decompressed; more is refused


def decompress(codec: int, data: bytes | memoryview, limit: int = DECOMPRESSED_LIMIT) -> memoryview:
    """The records section of a batch compressed with ``codec``; ``CorruptRecordError`` if it
    does not decompress, or decompresses to more than ``limit`` bytes (a compression bomb:
    a small batch must not make the broker allocate gigabytes). Snappy comes raw
    (librdkafka) or in snappy-java's framing (Java)."""
    try:
        if codec == CompressionType.GZIP:
            return memoryview(_gunzip(data, limit))
        if codec == CompressionType.SNAPPY:
            if bytes(data[:8]) != _XERIAL:
                return memoryview(_unsnappy(data, limit))
            blocks, pos, total = [], 16, 0
            while pos < len(data):
                size = struct.unpack_from(">i", data, pos)[0]
                if size < 0:
                    raise CorruptRecordError("negative snappy block length")
                blocks.append(_unsnappy(data[pos + 4 : pos + 4 + size], limit - total))
                total += len(blocks[-1])
                pos += 4 + size
            return memoryview(b"".join(blocks))
        if codec in (CompressionType.LZ4, CompressionType.ZSTD):
            return _decompress_into(cramjam.lz4 if codec == CompressionType.LZ4 else cramjam.zstd, data, limit)
    except (cramjam.DecompressionError, OSError, EOFError, zlib.error, struct.error, MemoryError) as exc:
        raise CorruptRecordError(f"records do not decompress with codec {codec}: {exc}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")


class DecompressedTooLarge(CorruptRecordError):
    """Records that decompress to more than the limit they were given."""


def _too_big(limit: int) -> CorruptRecordError:
    return DecompressedTooLarge(f"records decompress to more than {limit} bytes")


def _gunzip(data: bytes | memoryview, limit: int) -> bytes:
    out: list[bytes] = []
    left = limit
    rest: bytes | memoryview = data
    while rest:  # gzip members, one after the other
        member = zlib.decompressobj(wbits=31)
        out.append(member.decompress(rest, left + 1))
        left -= len(out[-1])
        if left < 0 or member.unconsumed_tail:
            raise _too_big(limit)
        if not member.eof:
            raise CorruptRecordError("truncated gzip stream")
        rest = member.unused_data
    return b"".join(out)


def _unsnappy(block: bytes | memoryview, limit: int) -> bytes:
    size = cramjam.snappy.decompress_raw_len(block)  # the raw format states its length up front
    if size > limit:
        raise _too_big(limit)
    out = bytearray(size)
    cramjam.snappy.decompress_raw_into(block, out)
    return bytes(out)


def _decompress_into(module: Any, data: bytes | memoryview, limit: int) -> memoryview:
    """lz4 and zstd frames into a buffer that grows fourfold up to ``limit``."""
    size = min(limit, max(1 << 16, 8 * len(data)))
    while True:
        out = bytearray(size)
        try:
            return memoryview(out)[: module.decompress_into(data, out)]
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):  # not a full buffer: the data itself is bad
                raise
            if size >= limit:
                raise _too_big(limit) from None
            size = min(limit, size * 4)


def records_section(header: BatchHeader, batch: bytes | bytearray | memoryview,
                    limit: int = DECOMPRESSED_LIMIT) -> memoryview:
    """The bytes of a batch's records, decompressed (``CorruptRecordError`` if they do not, or to
    more than ``limit`` bytes)."""
    view = memoryview(batch)[BATCH_HEADER_SIZE : header.size_in_bytes]
    return decompress(header.compression, view, limit) if header.compression != CompressionType.NONE else view


def record_bodies(header: BatchHeader, batch: bytes | bytearray | memoryview,
                  section: memoryview | None = None) -> Iterator[memoryview]:
    """Each record of a batch, without its length prefix, decompressed first unless its
    ``records_section`` is given (``CorruptRecordError`` if they do not decompress or a length
    runs past the batch)."""
    view = records_section(header, batch) if section is None else section
    pos = 0
    for _ in range(header.records_count):
        length, pos = _read_varint(view, pos)
        end = pos + length
        if length < 0 or end > len(view):
            raise CorruptRecordError("record length runs past the batch")
        yield view[pos:end]
        pos = end


def scan_records(header: BatchHeader, records: memoryview | bytes) -> Iterator[tuple[int, int, bool]]:
    """Walk a client batch's records (``records_section``) as Kafka's record iterator and
    ``DefaultRecord.readFrom`` check them, skipping keys, values and headers rather than copying
    them: yield each one's ``(offset delta, timestamp, has a key)``. A record that does not parse
    to its length, or a count that does not match the records, raises ``InvalidRecordError`` with
    Kafka's message (INVALID_RECORD, which a producer does not retry)."""
    data = bytes(records)
    size = len(data)
    read = _read_varint
    pos = 0
    try:
        for _ in range(header.records_count):
            if pos >= size:
                raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
            length, start = read(data, pos)
            end = start + length
            if length < 0 or end > size:
                raise InvalidRecordError(f"Invalid record size: expected {length} bytes in record payload, but "
                                         f"instead the buffer has only {size - start} remaining bytes.")
            ts_delta, pos = _read_varlong(data, start + 1)  # after the attributes
            offset_delta, pos = read(data, pos)
            key_size, pos = read(data, pos)
            pos += max(key_size, 0)
            value_size, pos = read(data, pos)
            pos += max(value_size, 0)
            count, pos = read(data, pos)
            if count:
                if count < 0:
                    raise InvalidRecordError(f"Found invalid number of record headers {count}")
                if count > end - pos:
                    raise InvalidRecordError(f"Found invalid number of record headers. {count} is larger than the "
                                             f"remaining size of the buffer")
                for _ in range(count):
                    field_size, pos = read(data, pos)
                    if field_size < 0:
                        raise InvalidRecordError(f"Invalid negative header key size {field_size}")
                    field_size, pos = read(data, pos + field_size)
                    pos += max(field_size, 0)
            if pos != end:
                raise InvalidRecordError(f"Invalid record size: expected to read {length} bytes in record payload, "
                                         f"but instead read {pos - start}")
            yield offset_delta, header.base_timestamp + ts_delta, key_size >= 0
    except (CorruptRecordError, IndexError):  # a field past the end of the data
        raise InvalidRecordError("Found invalid record structure") from None
    if pos != size:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")


def iter_records(batch: bytes | bytearray | memoryview) -> Iterator[SimpleRecord]:
    """Decode the records of a batch, decompressing them first (``CorruptRecordError`` if they
    do not decode)."""
    header = parse_header(batch)
    for body in record_bodies(header, batch):
        ts_delta, pos = _read_varlong(body, 1)  # after the record attributes
        offset_delta, pos = _read_varint(body, pos)
        key, pos = _read_nullable(body, pos)
        value, pos = _read_nullable(body, pos)
        count, pos = _read_varint(body, pos)
        headers = []
        for _ in range(count):
            hkey, pos = _read_nullable(body, pos)
            hvalue, pos = _read_nullable(body, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hvalue))  # Kafka does not check keys
        if pos != len(body):
            raise CorruptRecordError("record length does not match its fields")
        yield SimpleRecord(
            key, value, header.base_timestamp + ts_delta, tuple(headers), header.base_offset + offset_delta
        )


# -- transaction markers (control batches) ------------------------------------

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type (0 abort, 1 commit)
_CONTROL_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def build_control_batch(producer_id: int, producer_epoch: int, committed: bool, timestamp: int,
                        *, base_offset: int = 0, coordinator_epoch: int = 0) -> bytes:
    """A transaction marker: a control batch (transactional + control bits) holding one
    ``EndTransactionMarker`` record, as Kafka's ``MemoryRecords.withEndTransactionMarker``."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if committed else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch([SimpleRecord(key, value, timestamp)], base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=producer_epoch, partition_leader_epoch=LEADER_EPOCH,
                       transactional=True, control=True)


def control_type(batch: bytes | bytearray | memoryview) -> int:
    """``CONTROL_COMMIT`` or ``CONTROL_ABORT`` of a control batch (-1 if unreadable)."""
    return control_marker(batch)[0]


def control_marker(batch: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(type, coordinator epoch)`` of a control batch's marker, -1 for what is unreadable."""
    try:
        first = next(iter_records(batch))
    except (ValueError, StopIteration):
        return -1, -1
    if first.key is None or len(first.key) < _CONTROL_KEY.size:
        return -1, -1
    value = first.value
    epoch = _CONTROL_VALUE.unpack_from(value)[1] if value is not None and len(value) >= _CONTROL_VALUE.size else -1
    return _CONTROL_KEY.unpack_from(first.key)[1], epoch
