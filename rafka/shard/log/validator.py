"""What a partition checks in a producer's batches before it appends them (Kafka's LogValidator).

How this works: ``validate_append`` takes a partition's batches of one produce op through four
steps, in Kafka's order, and raises ``AppendError`` with the Kafka error to answer at the first
refusal. ``validate_client_batch`` reads the 61-byte header (magic, base offset, size, CRC,
record count, control and producer fields). ``client_records`` gives the records' bytes,
decompressing a compressed batch once, within ``DECOMPRESSED_LIMIT`` for the batch and the op's
``AppendBudget`` for all of its batches together, and refuses a count its bytes cannot hold.
``check_records`` applies the topic's per-record rules, walking the records (``scan_records``),
when ``rules_read_records`` says a rule needs them. ``stored_codec`` recompresses a batch into the topic's
``compression.type`` from the records already decompressed.
"""

from __future__ import annotations

from typing import Any

from rafka.protocol.cleaning import recompress_batch
from rafka.protocol.records import (
    DECOMPRESSED_LIMIT,
    MAGIC_V2,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptRecordError,
    DecompressedTooLarge,
    InvalidRecordError,
    records_section,
    scan_records,
    validate_batch,
)
from rafka.shard.log.config import INT64_MAX, LogConfig
from rafka.shard.log.errors import Errors

_MAGIC_OFFSET = 16
MIN_RECORD_SIZE = 7  # a length, attributes, timestamp and offset deltas, null key, null value, no headers
REQUEST_DECOMPRESSED_LIMIT = 4 * DECOMPRESSED_LIMIT  # what one op's compressed batches decompress to, together
REQUEST_WALKED_LIMIT = 1_000_000  # records of one op read one by one (~1-3 s of a shard's loop)


class AppendError(Exception):
    """A batch the broker refuses, with the Kafka error to answer (and, for rules about
    single records, ``record_errors``: ``[{batch_index, batch_index_error_message}]``)."""

    def __init__(self, error: Errors, message: str, record_errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.record_errors = record_errors or []


class AppendBudget:
    """What the batches of one produce op (the partitions of a request that one shard owns) may
    still cost the shard: ``left`` bytes to decompress and ``records`` to walk one by one. Each
    batch is held to ``DECOMPRESSED_LIMIT``; without limits for the op, one small request of 200
    batches each expanding to nearly that kept a shard decompressing for ~7 s, and one 5.6 KB
    batch of 9.5 million tiny records for a compacted topic kept it walking them for ~20 s, past
    its liveness deadline, with its other clients waiting. A batch refused as corrupt or too
    large is charged what it could have cost."""

    __slots__ = ("left", "records")

    def __init__(self, left: int = REQUEST_DECOMPRESSED_LIMIT, records: int = REQUEST_WALKED_LIMIT) -> None:
        self.left = left
        self.records = records

    def walk(self, header: BatchHeader, name: str) -> None:
        """Charge the records of a batch about to be read one by one (RECORD_LIST_TOO_LARGE past
        what is left)."""
        self.records -= header.records_count
        if self.records < 0:
            raise AppendError(Errors.RECORD_LIST_TOO_LARGE, f"The batches of this request for {name} and the "
                                                            f"partitions before it hold more than "
                                                            f"{REQUEST_WALKED_LIMIT} records that must be read "
                                                            f"one by one")


def validate_append(batches: list[Any], now_ms: int, config: LogConfig, name: str,
                    budget: AppendBudget | None = None) -> tuple[list[BatchHeader], list[Any]]:
    """The headers of ``batches`` and the batches as the log stores them; ``AppendError`` if the
    partition ``name`` refuses any of them."""
    headers = [validate_client_batch(batch, config.max_message_bytes, name) for batch in batches]
    sections = [client_records(header, batch, name, budget) for batch, header in zip(batches, headers, strict=True)]
    codecs = [config.codec_for(header.compression) for header in headers]  # (codec, level) each is stored in
    for header, section, (codec, _level) in zip(headers, sections, codecs, strict=True):
        read = rules_read_records(header, config, now_ms)
        if budget is not None and (read or codec != header.compression):
            budget.walk(header, name)
        if read:
            check_records(header, section, config, now_ms, name)
    return headers, [stored_codec(header, batch, section, codec, level, config, name)
                     for batch, header, section, (codec, level) in zip(batches, headers, sections, codecs, strict=True)]


def validate_client_batch(batch: Any, max_message_bytes: int, name: str = "") -> BatchHeader:
    """Check one producer batch's header in Kafka's order; raise ``AppendError`` or return it.

    Magic and a base offset other than 0 (INVALID_RECORD), size against ``max.message.bytes`` (MESSAGE_TOO_LARGE),
    CRC (CORRUPT_MESSAGE), record count / control batch / missing sequence
    (INVALID_RECORD), transactional without a producer id (INVALID_RECORD).
    """
    try:
        if len(batch) > _MAGIC_OFFSET and batch[_MAGIC_OFFSET] != MAGIC_V2:
            raise InvalidRecordError(f"record batch magic {batch[_MAGIC_OFFSET]} is not 2")
        if len(batch) >= 8 and (base_offset := int.from_bytes(batch[:8], "big", signed=True)) != 0:
            raise InvalidRecordError(f"The baseOffset of the record batch in the append to {name} should be 0, "
                                     f"but it is {base_offset}")
        if len(batch) > max_message_bytes:
            raise AppendError(
                Errors.MESSAGE_TOO_LARGE,
                f"The record batch size in the append is {len(batch)} bytes which exceeds the maximum "
                f"configured value of {max_message_bytes}.",
            )
        header = validate_batch(batch)
    except InvalidRecordError as exc:
        raise AppendError(Errors.INVALID_RECORD, str(exc)) from None
    except CorruptRecordError as exc:
        raise AppendError(Errors.CORRUPT_MESSAGE, str(exc)) from None
    if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
        raise AppendError(Errors.INVALID_RECORD, "Inconsistent batch offset range and count of records")
    if header.is_control:
        raise AppendError(Errors.INVALID_RECORD, "Clients are not allowed to write control records")
    if header.has_producer_id and header.base_sequence < 0:
        raise AppendError(Errors.INVALID_RECORD, f"Invalid sequence number {header.base_sequence}")
    if header.is_transactional and not header.has_producer_id:
        raise AppendError(Errors.INVALID_RECORD, "A transactional batch needs a producer id")
    return header


def client_records(header: BatchHeader, batch: Any, name: str, budget: AppendBudget | None = None) -> memoryview:
    """The bytes of a batch's records, decompressed, so garbage that a CRC covers never reaches a
    consumer (CORRUPT_MESSAGE if they do not decompress, or past the batch's or the op's limit).

    A batch whose records cannot hold the count its header declares is refused, as Kafka's record
    iterator refuses it. Checked from the size alone: the records are not walked unless a rule
    needs them, so a count that lies by a few records within the bytes goes unnoticed there; one
    that would move the log end offset far (2^31 - 1 records in a few bytes) does not."""
    if not header.compression:
        section = records_section(header, batch)
    else:
        limit = DECOMPRESSED_LIMIT if budget is None else min(DECOMPRESSED_LIMIT, budget.left)
        try:
            section = records_section(header, batch, limit)
        except CorruptRecordError as exc:
            if budget is not None:
                budget.left -= limit
            if isinstance(exc, DecompressedTooLarge) and limit < DECOMPRESSED_LIMIT:
                exc = DecompressedTooLarge(f"the compressed batches of this request decompress to more than "
                                           f"{REQUEST_DECOMPRESSED_LIMIT} bytes together")
            raise AppendError(Errors.CORRUPT_MESSAGE, f"Record batch of {name}: {exc}") from None
        if budget is not None:
            budget.left -= len(section)
    if header.records_count > len(section) // MIN_RECORD_SIZE:
        raise AppendError(Errors.INVALID_RECORD, "Incorrect declared batch size, premature EOF reached")
    return section


def stored_codec(header: BatchHeader, batch: Any, section: memoryview, codec: int, level: int | None,
                 config: LogConfig, name: str) -> Any:
    """``batch`` in the ``codec`` the topic stores it in (``LogConfig.codec_for``; Kafka's
    LogValidator recompresses a batch in another codec) from its records ``section``, checked
    again against ``max.message.bytes``."""
    if codec == header.compression:
        return batch
    try:
        batch = recompress_batch(header, batch, codec, level, section)
    except InvalidRecordError as exc:
        raise AppendError(Errors.INVALID_RECORD, str(exc)) from None
    except (ValueError, IndexError) as exc:  # CorruptRecordError is a ValueError
        raise AppendError(Errors.CORRUPT_MESSAGE, f"Record batch of {name} does not decode: {exc}") from None
    if len(batch) > config.max_message_bytes:
        raise AppendError(Errors.MESSAGE_TOO_LARGE, f"Message batch size is {len(batch)} bytes in append to partition "
                                                    f"{name} which exceeds the maximum configured size of "
                                                    f"{config.max_message_bytes}.")
    return batch


def rules_read_records(header: BatchHeader, config: LogConfig, now_ms: int) -> bool:
    """Whether a rule of ``check_records`` needs the batch's records (or, for a LogAppendTime
    topic, refuses the batch by its header): keys on a compacted topic; timestamps when the
    header's maximum is past the window, or the window has a lower bound."""
    if config.compact:
        return True
    if config.log_append_time:
        return header.is_log_append_time
    return (header.max_timestamp > now_ms + config.message_timestamp_after_max_ms
            or config.message_timestamp_before_max_ms != INT64_MAX)


def check_records(header: BatchHeader, section: memoryview, config: LogConfig, now_ms: int, name: str) -> None:
    """The topic config's rules for the records (``section``) of one batch, called when
    ``rules_read_records`` says a rule needs them (with the default configs, only when the
    header's max timestamp is out of the window); raise ``AppendError`` listing every record
    that breaks one.

    A compacted topic's records need keys (INVALID_RECORD). With CreateTime, each
    timestamp must lie in [now - ``message.timestamp.before.max.ms``, now +
    ``message.timestamp.after.max.ms``] (INVALID_TIMESTAMP); a LogAppendTime topic
    refuses batches that already claim LogAppendTime. Records that do not parse, or fewer or
    more of them than the header counts, are INVALID_RECORD, as Kafka's record iterator answers
    (a producer does not retry it, as it would CORRUPT_MESSAGE).
    """
    create_time = not config.log_append_time
    low = now_ms - config.message_timestamp_before_max_ms
    high = now_ms + config.message_timestamp_after_max_ms
    if not create_time and header.is_log_append_time:
        raise AppendError(Errors.INVALID_TIMESTAMP, "Invalid timestamp type in message. "
                                                    "Producer should not set timestamp type to LogAppendTime.")
    errors: list[tuple[int, str, bool]] = []  # (batch index, message, is a timestamp error)

    def check_timestamp(index: int, offset: int, timestamp: int) -> None:
        if create_time and timestamp != NO_TIMESTAMP and not low <= timestamp <= high:
            errors.append((index, (f"Timestamp {timestamp} of message with offset {offset} is out of range. "
                                  f"The timestamp should be within [{low}, {high}]"), True))

    try:
        for index, (offset_delta, timestamp, has_key) in enumerate(scan_records(header, section)):
            if config.compact and not has_key:  # Kafka reports one error per record, the key's first
                errors.append((index, (f"Compacted topic cannot accept message without key in topic partition "
                                       f"{name}."), False))
            else:
                check_timestamp(index, offset_delta, timestamp)
    except InvalidRecordError as exc:
        raise AppendError(Errors.INVALID_RECORD, str(exc)) from None
    if not errors:
        return
    record_errors = [{"batch_index": i, "batch_index_error_message": m} for i, m, _ in errors]
    if any(is_timestamp for _, _, is_timestamp in errors):
        raise AppendError(Errors.INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp",
                          record_errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m, _ in errors[:3])
    raise AppendError(Errors.INVALID_RECORD, f"One or more records have been rejected due to {len(errors)} record "
                                             f"errors in total, and only showing the first three errors at most: "
                                             f"[{shown}]", record_errors)

