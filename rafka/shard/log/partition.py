"""The log of one topic partition: segments of record batches held as bytes.

How this works (Kafka's UnifiedLog/LocalLog/LogSegment, single replica):

* The log is a list of segments; the last is the *active* one. A segment keeps
  its batches as producers sent them (baseOffset stamped; in another codec when the
  topic's ``compression.type`` names one, see ``rafka.shard.log.validator``), their base
  offsets (for bisecting), their max timestamps, its byte size and creation time.
* ``prepare_append`` validates batches and plans where they go without
  changing anything: each batch gets base offset = log end offset (LEO), which
  then grows by ``lastOffsetDelta + 1``; a batch that would push the active
  segment past ``segment.bytes`` (or arrives ``segment.ms`` after it was
  created) is marked ``roll``. It returns ``PARTITION_BATCH`` record values
  ``{batch, append_ms, roll}``. ``apply_batch`` (replay) performs that plan, so
  replaying the records rebuilds the same segments byte for byte.
* ``high_watermark`` equals LEO (one replica). Transactions (Kafka's
  ProducerStateManager ongoing txns + TransactionIndex): replaying a
  transactional batch opens ``ongoing_txns[producer_id] = first offset`` unless
  already open; replaying a control batch (commit/abort marker) closes it, and an
  abort adds ``(producer_id, first_offset, last_offset)`` to ``aborted_txns``.
  The last stable offset is the smallest open first offset, else the high
  watermark; read_committed fetches stop there and carry the aborted
  transactions overlapping the fetched range. ``prepare_marker`` plans a marker
  only for a producer with an open transaction, so a repeated marker is a no-op.
* ``read`` returns whole batches from the one *containing* ``fetch_offset``
  (clients skip records below the offset they asked for), up to ``max_bytes``
  but always at least one batch when ``min_one`` (KIP-74).
* ``log_start_offset`` moves forward by DeleteRecords or retention
  (``apply_log_start``): whole segments that end at or below it are dropped;
  batches of a partly covered segment stay but reads below the start are refused.
* Retention (``retention_log_start``) drops whole segments, oldest first: those
  whose newest timestamp is older than ``retention.ms``, then as many as keep
  the log above ``retention.bytes``. Kafka rolls a breaching active segment and
  deletes it on its next pass; here it is deleted in the same pass. Only topics
  whose ``cleanup.policy`` includes delete expire.
* Compaction (``rafka.shard.log.cleaner``) replaces the segments below an offset with
  cleaned ones (``apply_compaction``); offsets never change, so a read that starts in a
  batch whose remaining records all lie below ``fetch_offset`` moves on to the next.
* ``validate_append`` (``rafka.shard.log.validator``) checks a producer's batches and applies
  the topic config's per-record rules; a LogAppendTime topic stamps each batch it appends.
* Timestamp lookups find the first record with timestamp >= target, decoding
  the batch that holds it whatever its codec.
"""

from __future__ import annotations

import bisect
import logging
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rafka.protocol.records import (
    CONTROL_ABORT,
    BatchHeader,
    batch_last_offset,
    build_control_batch,
    control_marker,
    iter_records,
    parse_header,
    set_log_append_time,
    stamp_batch,
)
from rafka.shard.log.batches import Batches
from rafka.shard.log.config import LogConfig
from rafka.shard.log.errors import Errors
from rafka.shard.log.producers import BatchMetadata, ProducerStateManager
from rafka.shard.log.validator import AppendBudget, AppendError, validate_append

log = logging.getLogger("rafka.log")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
_NO_RECORDS = bytes(4)  # recordsCount 0, bytes [57, 61) of a batch


@dataclass(slots=True)
class Segment:
    """A run of consecutive batches."""

    base_offset: int
    created_ms: int = -1  # append time of its first batch
    batches: Batches = field(default_factory=Batches)  # in memory, or read from a file once paged
    # 8 bytes a batch each, where a list of ints costs 40 (a paged batch costs 10 bytes in ``batches``)
    base_offsets: array[int] = field(default_factory=lambda: array("q"))
    max_timestamps: array[int] = field(default_factory=lambda: array("q"))
    next_offset: int = 0  # offset after its last record
    size: int = 0
    retention_timestamp: int = -1  # newest record timestamp (append time if none)
    max_timestamp: int = -1  # newest batch maxTimestamp

    def __post_init__(self) -> None:
        self.next_offset = max(self.next_offset, self.base_offset)


@dataclass(slots=True)
class AppendPlan:
    """Outcome of ``prepare_append``: an error, a duplicate, or records to write."""

    error: Errors = Errors.NONE
    message: str | None = None
    base_offset: int = -1
    values: list[dict[str, Any]] = field(default_factory=list)
    duplicate: BatchMetadata | None = None
    record_errors: list[dict[str, Any]] = field(default_factory=list)
    log_append_time_ms: int = -1


class PartitionLog:
    """One partition's batches, offsets and producer state."""

    def __init__(self, topic_id: str | None = None, overrides: dict[str, str] | None = None) -> None:
        self.topic_id = topic_id
        self.overrides: dict[str, str] = dict(overrides or {})
        self.config_version = 0  # the catalogue's version of ``overrides``: older ones never replace newer
        self.incarnation = 0  # the catalogue version that created the topic (see TopicCatalog)
        self.config = LogConfig.from_overrides(self.overrides, validate=False)
        self.log_start_offset = 0
        self.segments: list[Segment] = [Segment(0)]
        self.producers = ProducerStateManager()
        self.ongoing_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted_txns: list[tuple[int, int, int]] = []  # (producer id, first, last offset), by last
        self.first_dirty_offset = 0  # where the last compaction ended (Kafka's cleaner checkpoint)
        self.uncleanable = False  # a clean failed: not tried again until a restart (not replayed state)

    # ------------------------------------------------------------------ state

    @property
    def log_end_offset(self) -> int:
        """Offset the next appended record will get (LEO)."""
        return self.segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """Offset up to which consumers may read; LEO with a single replica."""
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest open transaction, else the high watermark (LSO); never below
        the log start (as Kafka's first unstable offset), so DeleteRecords past an open transaction
        does not leave read_committed readers and ListOffsets below the log."""
        if not self.ongoing_txns:
            return self.high_watermark
        return max(min(self.ongoing_txns.values()), self.log_start_offset)

    def aborted_in(self, start: int, end: int) -> list[dict[str, int]]:
        """Aborted transactions overlapping offsets ``[start, end)``: what read_committed needs."""
        i = bisect.bisect_left(self.aborted_txns, start, key=lambda t: t[2])
        return [{"producer_id": pid, "first_offset": first}
                for pid, first, _last in self.aborted_txns[i:] if first < end]

    def prepare_marker(self, producer_id: int, producer_epoch: int, committed: bool, now_ms: int) -> dict[str, Any] | None:
        """The ``PARTITION_BATCH`` value of a commit/abort marker, or None when ``producer_id``
        has no open transaction here (a repeated marker is a no-op)."""
        if producer_id not in self.ongoing_txns:
            return None
        active = self.segments[-1]
        batch = build_control_batch(producer_id, producer_epoch, committed, now_ms, base_offset=self.log_end_offset)
        roll = bool(active.batches) and (active.size + len(batch) > self.config.segment_bytes
                                         or now_ms - active.created_ms >= self.config.roll_ms)
        return {"batch": batch, "append_ms": now_ms, "roll": roll}

    @property
    def size(self) -> int:
        """Bytes held in all segments."""
        return sum(s.size for s in self.segments)

    def set_overrides(self, overrides: dict[str, str], version: int) -> None:
        """Adopt the topic's config overrides (replay only)."""
        self.overrides = dict(overrides)
        self.config_version = version
        self.config = LogConfig.from_overrides(self.overrides, validate=False)

    def newer_configs(self, overrides: dict[str, str] | None, version: int) -> bool:
        """Whether the catalogue's ``overrides`` at ``version`` should replace this log's: a produce
        or an update may carry an older copy (a gateway's cache) after a newer one arrived."""
        if overrides is None:
            return False
        return version > self.config_version or (version == self.config_version and dict(overrides) != self.overrides)

    # ----------------------------------------------------------------- append

    def prepare_append(self, batches: list[Any], now_ms: int, config: LogConfig | None = None,
                       name: str = "", budget: AppendBudget | None = None) -> AppendPlan:
        """Validate ``batches`` and plan their append (pure); see ``AppendPlan``.

        Each batch passes ``validate_append`` (``name``, the topic partition, goes in its
        messages; ``budget``, what the op's compressed batches may still decompress to), then
        the producer epoch and sequence checks. Any failure rejects the whole request. A
        LogAppendTime topic stamps them.
        """
        config = config or self.config
        try:
            headers, batches = validate_append(batches, now_ms, config, name, budget)
        except AppendError as exc:
            return AppendPlan(exc.error, str(exc), record_errors=exc.record_errors)
        if config.log_append_time:
            batches = [set_log_append_time(batch, now_ms) for batch in batches]
        producers = self.producers.fork({h.producer_id for h in headers}) if len(headers) > 1 else self.producers
        leo, active = self.log_end_offset, self.segments[-1]
        seg_size, seg_created, seg_empty = active.size, active.created_ms, not active.batches
        plan = AppendPlan(base_offset=leo, log_append_time_ms=now_ms if config.log_append_time else -1)
        for batch, header in zip(batches, headers, strict=True):
            error, duplicate = producers.check_append(header)
            if error:
                return AppendPlan(error, f"Producer {header.producer_id} rejected with {error.name}")
            if duplicate is not None:
                # Kafka answers a duplicate with the original batch's timestamp as its log_append_time
                return AppendPlan(base_offset=duplicate.base_offset, duplicate=duplicate,
                                  log_append_time_ms=duplicate.max_timestamp)
            if header.has_producer_id and not header.is_transactional and header.producer_id in self.ongoing_txns:
                return AppendPlan(Errors.INVALID_TXN_STATE, f"Expected transactional write from producer "
                                                            f"{header.producer_id} at offset {leo} in partition {name}")
            size = len(batch)
            roll = not seg_empty and (
                seg_size + size > config.segment_bytes or now_ms - seg_created >= config.roll_ms
            )
            if roll or seg_empty:
                seg_size, seg_created, seg_empty = 0, now_ms, False
            seg_size += size
            stamped = stamp_batch(batch, leo)
            plan.values.append({"batch": stamped, "append_ms": now_ms, "roll": roll})
            if producers is not self.producers:
                producers.update(parse_header(stamped), now_ms)
            leo += header.last_offset_delta + 1
        return plan

    def apply_batch(self, value: dict[str, Any]) -> None:
        """Append one planned batch (replay of a ``PARTITION_BATCH`` value)."""
        batch = bytes(value["batch"])
        header = parse_header(batch)
        if header.base_offset > self.log_end_offset and not self.segments[-1].batches and len(self.segments) == 1:
            # the write-ahead log dropped the segments below the log start: the log resumes here
            self.segments = [Segment(header.base_offset)]
            self.log_start_offset = max(self.log_start_offset, header.base_offset)
        if header.base_offset < self.log_end_offset:
            raise ValueError(f"batch at offset {header.base_offset} does not follow log end {self.log_end_offset}")
        append_ms = value.get("append_ms", -1)
        seg = self.segments[-1]
        if header.base_offset > self.log_end_offset:
            # recovery past write-ahead-log segments that are gone: a compaction or truncation later in
            # the stream replaces their offsets (the usual case), or damage the recovery logged lost them
            log.info("partition log resumes at offset %d after %d: the offsets between are not in the "
                     "write-ahead log", header.base_offset, self.log_end_offset)
            if seg.batches:
                seg = Segment(header.base_offset)
                self.segments.append(seg)
            else:
                seg.base_offset = header.base_offset
        elif value.get("roll") and seg.batches:
            seg = Segment(header.base_offset)
            self.segments.append(seg)
        if not seg.batches:
            seg.created_ms = append_ms
        _add(seg, batch, header, append_ms)
        if header.is_control:
            marker, coordinator_epoch = control_marker(batch)
            self.producers.update(header, append_ms, coordinator_epoch)
            first = self.ongoing_txns.pop(header.producer_id, None)
            if first is not None and marker == CONTROL_ABORT:
                self.aborted_txns.append((header.producer_id, first, header.base_offset))
            return
        self.producers.update(header, append_ms)
        if header.is_transactional:
            self.ongoing_txns.setdefault(header.producer_id, header.base_offset)

    def apply_compaction(self, value: dict[str, Any]) -> None:
        """Put a clean's segments in place of every batch below its ``upto`` (replay of a
        ``PARTITION_COMPACTED`` value; see ``rafka.shard.log.cleaner``)."""
        upto = int(value["upto"])
        cleaned = []
        for base, next_offset, created_ms, retention_ts, batches in value["segments"]:
            seg = Segment(int(base), created_ms, next_offset=int(next_offset), retention_timestamp=retention_ts)
            for batch in batches:
                _add(seg, bytes(batch))
            cleaned.append(seg)
        rest = [seg if seg.base_offset >= upto else _trimmed(seg, upto)
                for seg in self.segments if seg.base_offset >= upto or seg.next_offset > upto]
        self.segments = cleaned + (rest or [Segment(max(upto, self.log_end_offset))])  # the active one
        self.first_dirty_offset = upto
        self.log_start_offset = int(value["log_start_offset"])  # replay may have begun past it
        keep = {parse_header(b).last_offset for seg in cleaned for b in seg.batches} if self.aborted_txns else set()
        self.aborted_txns = [t for t in self.aborted_txns if t[2] >= upto or t[2] in keep]

    # ------------------------------------------------------------ log start

    def apply_log_start(self, log_start_offset: int) -> None:
        """Move the log start forward and drop segments wholly below it (replay)."""
        if log_start_offset <= self.log_start_offset:
            return
        self.log_start_offset = log_start_offset
        leo = self.log_end_offset
        while self.segments and self.segments[0].next_offset <= log_start_offset and self.segments[0].batches:
            self.segments.pop(0)
        if not self.segments or leo < log_start_offset:  # replay, the batches below dropped with their WAL segments
            self.segments = [Segment(max(leo, log_start_offset))]
        self.aborted_txns = [t for t in self.aborted_txns if t[2] >= log_start_offset]

    def retention_log_start(self, now_ms: int, config: LogConfig | None = None) -> int | None:
        """The log start retention would move to (pure), or ``None`` if nothing expires
        (always for a compact-only topic: its cleanup policy does not delete)."""
        config = config or self.config
        if not config.delete:
            return None
        segments = [s for s in self.segments if s.batches]
        deleted = 0
        if config.retention_ms >= 0:
            while deleted < len(segments) and now_ms - segments[deleted].retention_timestamp > config.retention_ms:
                deleted += 1
        if config.retention_bytes >= 0:
            excess = sum(s.size for s in segments[deleted:]) - config.retention_bytes
            while deleted < len(segments) and excess - segments[deleted].size >= 0:
                excess -= segments[deleted].size
                deleted += 1
        if deleted == 0:
            return None
        new_start = segments[deleted - 1].next_offset
        return new_start if new_start > self.log_start_offset else None

    # ------------------------------------------------------------------ reads

    def read(self, fetch_offset: int, max_bytes: int, min_one: bool = True,
             max_offset: int | None = None) -> tuple[Errors, list[bytes]]:
        """Whole batches from the one containing ``fetch_offset`` up to ``max_bytes``.

        OFFSET_OUT_OF_RANGE if ``fetch_offset`` is below the log start or past LEO;
        at LEO the answer is empty. With ``min_one`` the first batch is returned
        even when it alone exceeds ``max_bytes``. Batches starting at or after
        ``max_offset`` (the LSO for read_committed) are not returned.
        """
        if fetch_offset < self.log_start_offset or fetch_offset > self.log_end_offset:
            return Errors.OFFSET_OUT_OF_RANGE, []
        out: list[bytes] = []
        limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if fetch_offset >= limit:
            return Errors.NONE, out
        si = bisect.bisect_right(self.segments, fetch_offset, key=lambda s: s.base_offset) - 1
        if si < 0:  # below the first segment: a clean emptied the oldest ones
            si, bi = 0, 0
        else:
            bi = max(bisect.bisect_right(self.segments[si].base_offsets, fetch_offset) - 1, 0)
            if fetch_offset >= self.segments[si].next_offset:  # in a gap (see apply_batch): the next segment
                si, bi = si + 1, 0
        total, first = 0, True
        for seg in self.segments[si:]:
            batches = seg.batches
            held, maps, which, starts, sizes = batches.held, batches.maps, batches.which, batches.starts, batches.sizes
            at_limit = seg.next_offset > limit  # only then may a batch here start at or past the limit
            for j in range(bi, len(sizes)):
                batch = held.get(j)
                if batch is None:  # paged: a slice of its file (Batches.__getitem__, inlined)
                    start = starts[j]
                    batch = maps[which[j]][start : start + sizes[j]]
                if first:
                    if batch_last_offset(batch) < fetch_offset:
                        continue  # compaction removed the rest of this batch: the next one, as Kafka
                    first = False
                if at_limit and seg.base_offsets[j] >= limit:
                    return Errors.NONE, out
                if total + len(batch) > max_bytes and (out or not min_one):
                    return Errors.NONE, out
                out.append(batch)
                total += len(batch)
            bi = 0
        return Errors.NONE, out

    def _live_batches(self, min_timestamp: int | None = None) -> Iterator[tuple[Segment, int, int]]:
        """``(segment, index, max_timestamp)`` of batches at/after the log start, skipping old
        segments and batches older than ``min_timestamp``; a batch a clean emptied is the caller's
        to skip (``_emptied``), so that only the batches it looks at are read (a sealed
        segment's are read from the file)."""
        for seg, first in self._live_segments():
            if min_timestamp is not None and seg.max_timestamp < min_timestamp:
                continue
            for i in range(first, len(seg.batches)):
                if min_timestamp is None or seg.max_timestamps[i] >= min_timestamp:
                    yield seg, i, seg.max_timestamps[i]

    def _live_segments(self) -> Iterator[tuple[Segment, int]]:
        """Segments with batches at/after the log start, with the index of the first such batch
        (the one holding the log start)."""
        for seg in self.segments:
            if seg.next_offset > self.log_start_offset and seg.batches:
                yield seg, max(bisect.bisect_right(seg.base_offsets, self.log_start_offset) - 1, 0)

    def _top_timestamp(self) -> int | None:
        """The largest timestamp of a batch at or after the log start: a segment's own figure,
        or for the one the log start falls inside, its batches' from there."""
        return max((seg.max_timestamp if first == 0 else max(seg.max_timestamps[first:])
                    for seg, first in self._live_segments()), default=None)

    def list_offset(self, timestamp: int) -> tuple[int, int]:
        """ListOffsets for one timestamp: ``(offset, timestamp)``, ``(-1, -1)`` if none.

        -2 earliest (log start), -1 latest (LEO), -3 the record with the largest
        timestamp, -4 earliest local (= earliest); otherwise the first record
        with timestamp >= ``timestamp`` at or after the log start.
        """
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return self.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        if timestamp == MAX_TIMESTAMP:
            # the first batch with the largest timestamp, found by the segments' and batches' timestamps
            # alone; only when a clean emptied every batch carrying it, each batch is read to see which
            # still holds records
            top = self._top_timestamp()
            best = None if top is None else next(((seg.batches[i], ts) for seg, i, ts in self._live_batches(top)
                                                  if not _emptied(seg.batches[i])), None)
            if best is None and top is not None:
                for seg, i, max_ts in self._live_batches():
                    if (best is None or max_ts > best[1]) and not _emptied(seg.batches[i]):
                        best = (seg.batches[i], max_ts)
            return (-1, -1) if best is None else self._find_in_batch(best[0], best[1], exact=True)
        if timestamp < 0:
            return -1, -1
        for seg, i, _max_ts in self._live_batches(timestamp):
            if not _emptied(seg.batches[i]):
                found = self._find_in_batch(seg.batches[i], timestamp, exact=False)
                if found[0] >= 0:
                    return found
        return -1, -1

    def _find_in_batch(self, batch: bytes, timestamp: int, *, exact: bool) -> tuple[int, int]:
        """First record (at/after log start) with ts == (exact) or >= ``timestamp``; every
        record of a LogAppendTime batch has the batch's max timestamp. Records a clean removed
        are not found: the first one left is. ``exact`` (the batch's max timestamp) falls back
        to the record carrying it below the log start, as Kafka's ``offsetOfMaxTimestamp``
        does, so the answer is always a record's own offset and timestamp."""
        header = parse_header(batch)
        try:
            records = list(iter_records(batch))
        except (ValueError, IndexError):  # stored before records were checked: judge by the header
            return max(header.base_offset, self.log_start_offset), header.max_timestamp
        below: tuple[int, int] | None = None
        for record in records:
            ts = header.max_timestamp if header.is_log_append_time else record.timestamp
            if ts == timestamp or (not exact and ts >= timestamp):
                if record.offset >= self.log_start_offset:
                    return record.offset, ts
                below = below or (record.offset, ts)
        if exact and below is not None:  # DeleteRecords removed the record with the max timestamp
            return below
        if exact and records:  # the batch header claims a max the records do not carry
            return max(records[0].offset, self.log_start_offset), header.max_timestamp
        return -1, -1


def _emptied(batch: bytes) -> bool:
    """Whether ``batch`` is a header a clean left without records."""
    return batch[57:61] == _NO_RECORDS


def _add(seg: Segment, batch: bytes, header: BatchHeader | None = None, append_ms: int = -1) -> None:
    """Append one batch to ``seg`` and account for it."""
    header = header or parse_header(batch)
    seg.batches.append(batch)
    seg.base_offsets.append(header.base_offset)
    seg.max_timestamps.append(header.max_timestamp)
    seg.next_offset = max(seg.next_offset, header.last_offset + 1)
    seg.size += len(batch)
    seg.max_timestamp = max(seg.max_timestamp, header.max_timestamp)
    seg.retention_timestamp = max(seg.retention_timestamp,
                                  header.max_timestamp if header.max_timestamp >= 0 else append_ms)


def _trimmed(seg: Segment, upto: int) -> Segment:
    """The part of ``seg`` at or past ``upto`` (a segment replay began inside)."""
    out = Segment(upto, seg.created_ms, retention_timestamp=seg.retention_timestamp)
    for i, base in enumerate(seg.base_offsets):
        if base >= upto:
            _add(out, seg.batches[i])
            out.batches.same_place(len(out.batches) - 1, seg.batches, i)  # a paged batch stays paged
    out.batches.repack()  # batches paged again left ``held``
    out.next_offset = max(out.next_offset, seg.next_offset)
    return out
