"""Log compaction of one partition log: Kafka's LogCleaner as a pure planning step.

How this works (Kafka's LogCleanerManager.cleanableOffsets, Cleaner.doClean):

* A log whose ``cleanup.policy`` includes compact is cleaned in whole segments. The
  *cleanable* segments are the oldest ones up to (not including) the active segment,
  the first one reaching past the last stable offset, and the first one with a record
  newer than ``min.compaction.lag.ms``. Those at or past ``first_dirty_offset`` (where
  the previous clean ended) are *dirty*. A clean runs when dirty bytes over cleanable
  bytes exceed ``min.cleanable.dirty.ratio``, or a dirty segment's first batch is older
  than ``max.compaction.lag.ms``.
* The dirty segments give each key its last offset; aborted transactions and markers
  give none. Every cleanable segment is then rewritten: a record stays if it has a
  key and no later record of that key exists, and a tombstone (a null value) stays
  until its batch's delete horizon, stamped ``delete.retention.ms`` after the clean that
  first kept it. Aborted transactions' batches go; a marker goes a horizon after a
  clean finds no data of its transaction left. A batch that loses every record is kept
  as an empty header when it is a producer's last (its sequence is needed) or ends the
  cleaned range. Offsets never change: reads of a removed offset get the next batch.
* ``due`` (on the shard's loop) takes what a clean reads into a ``CleanJob``; ``run``
  cleans it, in a worker thread, so a large log does not stall the shard; ``still_valid``
  (on the loop again) checks that no clean, retention or deletion changed the log since.
  The manager then writes the cleaned segments as one ``PARTITION_COMPACTED`` record,
  which replay (``PartitionLog.apply_compaction``) puts in place of everything below its
  ``upto`` offset, live and on recovery alike, and after which the write-ahead log
  deletes the segments it supersedes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rafka.protocol.cleaning import delete_horizon, empty_batch, raw_records, rebuild_batch
from rafka.protocol.records import CONTROL_ABORT, BatchHeader, CorruptRecordError, control_type, parse_header
from rafka.shard.log.config import INT64_MAX, LogConfig
from rafka.shard.log.partition import PartitionLog, Segment

log = logging.getLogger("rafka.log")
MAX_CLEANED_BYTES = 192 * 1024 * 1024  # a clean is one WAL entry, and recovery reads entries of up to 256 MiB


@dataclass(slots=True)
class CleanJob:
    """What a clean of one log reads, taken on the shard's loop, so that ``run`` may go on in
    another thread while the loop appends: the cleanable segments are sealed and never change."""

    log: PartitionLog  # read on the loop only
    segments: list[Segment]
    first_dirty: int
    log_start: int
    config: LogConfig
    aborted: list[tuple[int, int, int]]
    last_batch: dict[int, int]  # producer id -> last offset of its last batch
    now_ms: int


def cleanable_segments(plog: PartitionLog, now_ms: int) -> list[Segment]:
    """The oldest segments a clean may rewrite (see the module docstring)."""
    config, lso = plog.config, plog.last_stable_offset
    out = []
    for seg in plog.segments[:-1]:
        if seg.next_offset > lso:
            break
        if config.min_compaction_lag_ms > 0 and seg.max_timestamp > now_ms - config.min_compaction_lag_ms:
            break
        if seg.batches:
            out.append(seg)
    return out


def needs_cleaning(plog: PartitionLog, segments: list[Segment], now_ms: int) -> bool:
    """Whether the dirty part is large (ratio) or old (max lag) enough to clean now."""
    config = plog.config
    dirty = [s for s in segments if s.base_offset >= plog.first_dirty_offset]
    if not dirty:
        return False
    if config.max_compaction_lag_ms < INT64_MAX:
        firsts = [s.max_timestamps[0] for s in dirty if s.max_timestamps[0] > 0]
        if firsts and min(firsts) < now_ms - config.max_compaction_lag_ms:
            return True
    dirty_bytes = sum(s.size for s in dirty)
    return dirty_bytes / sum(s.size for s in segments) > config.min_cleanable_dirty_ratio


def due(plog: PartitionLog, now_ms: int) -> CleanJob | None:
    """The clean this log is due, or None."""
    if not plog.config.compact or plog.uncleanable:
        return None
    segments = cleanable_segments(plog, now_ms)
    if not segments or not needs_cleaning(plog, segments, now_ms):
        return None
    last_batch = {pid: e.batches[-1].last_offset for pid, e in plog.producers.entries.items() if e.batches}
    return CleanJob(plog, segments, plog.first_dirty_offset, plog.log_start_offset, plog.config, list(plog.aborted_txns),
                    last_batch, now_ms)


def run(job: CleanJob) -> dict[str, Any] | None:
    """``{upto, segments: [[base, next, created_ms, retention_ts, [batch, ...]], ...]}``: the
    cleaned form of every segment below ``upto``; None if a batch does not decode or the
    result is too large to write."""
    upto = job.segments[-1].next_offset
    try:
        segments = _Clean(job, upto).run()
    except CorruptRecordError as exc:  # stored before records were checked: leave the log as it is
        log.error("not compacting a partition log: a batch does not decode (%s)", exc)
        return None
    size = sum(len(b) for seg in segments for b in seg[4])
    if size > MAX_CLEANED_BYTES:
        log.error("not compacting a partition log: its cleaned part (%d bytes) exceeds the %d bytes one "
                  "write-ahead-log entry may hold", size, MAX_CLEANED_BYTES)
        return None
    return {"upto": upto, "segments": segments}


def still_valid(plog: PartitionLog, job: CleanJob) -> bool:
    """Whether ``job``'s result still fits ``plog``: no clean, retention, deletion or config
    change since."""
    live = {id(s) for s in plog.segments}
    return (plog is job.log and plog.first_dirty_offset == job.first_dirty and plog.config is job.config
            and all(id(s) in live for s in job.segments))


class _Clean:
    """One pass over a job's segments."""

    def __init__(self, job: CleanJob, upto: int) -> None:
        self.job, self.upto = job, upto
        self.horizon = min(job.now_ms + job.config.delete_retention_ms, INT64_MAX)
        self.aborted: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last in job.aborted:
            self.aborted.setdefault(pid, []).append((first, last))
        self.traversed: dict[int, bool] = {}  # producer id -> data of its current transaction seen (aborted?)

    def is_aborted(self, h: BatchHeader) -> bool:
        return h.is_transactional and any(f <= h.base_offset <= last for f, last in self.aborted.get(h.producer_id, ()))

    def offset_map(self) -> dict[bytes, int]:
        """Each key's last offset in the dirty segments."""
        latest: dict[bytes, int] = {}
        for seg in self.job.segments:
            if seg.base_offset < self.job.first_dirty:
                continue
            for batch in seg.batches:
                h = parse_header(batch)
                if h.is_control or self.is_aborted(h):
                    continue
                for r in raw_records(h, batch):
                    if r.key is not None:
                        latest[r.key] = r.offset
        return latest

    def run(self) -> list[list[Any]]:
        latest = self.offset_map()
        out: list[list[Any]] = []
        for group in _groups(self.job.segments, self.job.config.segment_bytes):
            batches = []
            for seg in group:
                for batch in seg.batches:
                    h = parse_header(batch)
                    if h.last_offset < self.job.log_start:
                        continue  # unreadable already; the segment stayed for later batches
                    kept = self.clean_batch(h, batch, latest)
                    if kept is not None:
                        batches.append(kept)
            if batches:
                retention = max(s.retention_timestamp for s in group)
                out.append([group[0].base_offset, group[-1].next_offset, group[0].created_ms, retention, batches])
        return out

    def clean_batch(self, h: BatchHeader, batch: bytes, latest: dict[bytes, int]) -> bytes | None:
        """The batch as the clean leaves it: itself, rebuilt, an empty header, or None (gone)."""
        if h.is_control:
            return self.clean_marker(h, batch)
        if h.is_transactional:
            aborted = self.is_aborted(h)
            self.traversed[h.producer_id] = aborted
            if aborted:
                return self.empty_or_none(h)
        horizon = delete_horizon(h)
        records = raw_records(h, batch)
        if not records:  # emptied by an earlier clean: kept only while a rule still keeps it
            return self.empty_or_none(h)
        kept = [r for r in records if r.key is not None and r.offset >= latest.get(r.key, -1)
                and not (r.tombstone and horizon is not None and self.job.now_ms >= horizon)]
        stamp = horizon is None and any(r.tombstone for r in kept)
        if len(kept) == len(records) and not stamp:
            return batch
        if not kept:
            return self.empty_or_none(h)
        return rebuild_batch(h, kept, self.horizon if stamp else horizon)

    def clean_marker(self, h: BatchHeader, batch: bytes) -> bytes | None:
        """A marker stays while its transaction has data here; then a horizon, then it goes."""
        seen = self.traversed.pop(h.producer_id, None)
        if seen is not None and seen == (control_type(batch) == CONTROL_ABORT):
            return batch
        horizon = delete_horizon(h)
        if horizon is None:
            return rebuild_batch(h, raw_records(h, batch), self.horizon)
        return batch if self.job.now_ms < horizon else self.empty_or_none(h)

    def empty_or_none(self, h: BatchHeader) -> bytes | None:
        """An emptied batch: kept as a header if a producer's last batch or the range's end."""
        if h.last_offset + 1 == self.upto or (h.has_producer_id and self.job.last_batch.get(h.producer_id) == h.last_offset):
            return empty_batch(h)
        return None


def _groups(segments: list[Segment], segment_bytes: int) -> list[list[Segment]]:
    """Consecutive segments merged while their sizes sum to at most ``segment_bytes``
    (Kafka's groupSegmentsBySize)."""
    groups: list[list[Segment]] = []
    size = 0
    for seg in segments:
        if groups and size + seg.size <= segment_bytes:
            groups[-1].append(seg)
            size += seg.size
        else:
            groups.append([seg])
            size = seg.size
    return groups
