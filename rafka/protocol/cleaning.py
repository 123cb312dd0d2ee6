"""Rewriting a stored batch without some of its records, as Kafka's log cleaner does.

How this works (Kafka's ``MemoryRecords.filterTo``): ``raw_records`` decodes a v2
batch's records (decompressing them) into ``RawRecord``s that keep each record's
bytes after its timestamp delta untouched. ``rebuild_batch`` writes the retained
ones back as one batch with the same base offset, ``lastOffsetDelta``, producer id,
epoch, base sequence, flags and codec, so offsets and sequence ranges never change;
the base timestamp becomes the first retained record's timestamp, or the batch's
*delete horizon* (KIP-534: attribute bit 0x40, the time after which the cleaner may
drop its tombstones and an empty transaction's marker), and each record's timestamp
delta is written against it, so every record keeps its timestamp. ``empty_batch`` is
the 61-byte header Kafka keeps when no record survives but the batch still carries
a producer's last sequence or the end of the cleaned range. ``recompress_batch``
rewrites all of a batch's records in another codec, as Kafka's LogValidator does for a
topic whose ``compression.type`` is not the producer's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from rafka.protocol.records import (
    _HEADER,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    BatchHeader,
    _read_nullable,
    _read_varint,
    _read_varlong,
    _zigzag_varint,
    compress,
    compute_crc,
    record_bodies,
    records_section,
    scan_records,
)

DELETE_HORIZON_BIT = 0x40  # DefaultRecordBatch.DELETE_HORIZON_FLAG_MASK
_COMPRESSION_MASK = 0x07


@dataclass(slots=True)
class RawRecord:
    """One record of a stored batch: what the cleaner decides on, and its bytes."""

    offset: int
    timestamp: int
    key: bytes | None
    tombstone: bool  # a null value: a delete of ``key``
    attributes: int
    rest: memoryview  # offsetDelta .. the end of the headers, copied as they are


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (ms), or None when the cleaner has not set one."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


def raw_records(header: BatchHeader, batch: bytes | memoryview, *, strict: bool = False,
                section: memoryview | None = None) -> list[RawRecord]:
    """The records of ``batch`` (decompressed unless its ``records_section`` is given);
    ``CorruptRecordError`` if they do not decode. With ``strict`` (a batch from a client, not from
    the log) every record is first walked to its end by ``scan_records``, which raises
    ``InvalidRecordError`` for one that does not parse."""
    out = []
    section = records_section(header, batch) if section is None else section
    if strict:
        for _ in scan_records(header, section):
            pass
    for body in record_bodies(header, batch, section):
        ts_delta, rest = _read_varlong(body, 1)  # after the attributes byte (raises on a body too short)
        offset_delta, at = _read_varint(body, rest)
        key, at = _read_nullable(body, at)
        value_length, _ = _read_varint(body, at)
        out.append(RawRecord(header.base_offset + offset_delta, header.base_timestamp + ts_delta, key,
                             value_length < 0, body[0], body[rest:]))
    return out


def rebuild_batch(header: BatchHeader, records: Sequence[RawRecord], horizon_ms: int | None,
                  codec: int | None = None, level: int | None = None) -> bytes:
    """``records`` (a subset of the batch's, in order) as one batch like the original, with
    ``horizon_ms`` as its delete horizon (None: none), in ``codec`` at ``level`` (None: the
    batch's own codec)."""
    if not records:
        return empty_batch(header)
    base_ts = records[0].timestamp if horizon_ms is None else horizon_ms
    body = bytearray()
    for r in records:
        inner = bytearray((r.attributes,))
        _zigzag_varint(r.timestamp - base_ts, inner)
        inner += r.rest
        _zigzag_varint(len(inner), body)
        body += inner
    codec = header.compression if codec is None else codec
    data = compress(codec, bytes(body), level)
    attributes = (header.attributes & ~DELETE_HORIZON_BIT & ~_COMPRESSION_MASK | codec
                  | (DELETE_HORIZON_BIT if horizon_ms is not None else 0))
    max_ts = header.max_timestamp if header.is_log_append_time else max(r.timestamp for r in records)
    return _pack(header, attributes, base_ts, max_ts, len(records), data)


def recompress_batch(header: BatchHeader, batch: bytes | memoryview, codec: int, level: int | None,
                     section: memoryview | None = None) -> bytes:
    """``batch`` with its records (``section``, if already decompressed) in ``codec`` at ``level``:
    the same offsets, producer, sequence, flags and timestamps; ``CorruptRecordError`` if its
    records do not decode, ``InvalidRecordError`` if one does not parse."""
    return rebuild_batch(header, raw_records(header, batch, strict=True, section=section), None, codec, level)


def empty_batch(header: BatchHeader) -> bytes:
    """The header alone (Kafka's ``writeEmptyHeader``): no records, no codec, the same offsets,
    producer and sequence, the original max timestamp."""
    return _pack(header, header.attributes & ~_COMPRESSION_MASK & ~DELETE_HORIZON_BIT, NO_TIMESTAMP,
                 header.max_timestamp, 0, b"")


def _pack(header: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, data: bytes) -> bytes:
    batch = bytearray(_HEADER.pack(
        header.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(data), header.partition_leader_epoch, MAGIC_V2, 0,
        attributes, header.last_offset_delta, base_ts, max_ts, header.producer_id, header.producer_epoch,
        header.base_sequence, count))
    batch += data
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return bytes(batch)
