"""The write-ahead log: checksummed segments per coordinator partition and per topic partition.

How this works. Every record a shard applies is appended to one *stream*:
group, offset, topic-catalogue and producer-id records go to the stream of their
coordinator partition (``meta/<p>/``); record batches and log truncations go to
the stream of their topic partition (``logs/<p>/<org>/<topic>/<partition>/``, under
the coordinator partition that owns that log). Because streams follow coordinator
partitions, a shard started with another ``--shards`` count simply opens the
partitions it now owns: nothing moves, nothing is lost.

A stream is a directory of segment files ``<seq>.wal`` (other names there, and directories
that fit no stream, are ignored with a log line); each entry is
``u32 length | u32 crc32c | msgpack [[type, key, value], ...]`` — the records one
``append`` call gives that stream, written and checksummed as one unit, so a torn
write loses a whole op's records or none, and recovery decodes thousands of
records per call into C. Consecutive entries of one stream are written to the file
(page cache) together, with one system call, when an append goes to another stream or
``commit()`` runs (before anything waits on them): a burst of ops on one group or
partition costs one write, and the files still receive entries in the order they were
appended, so a process killed at any point leaves a prefix of the appends, as writing
each entry at once did (a topic's drop record, say, is never in the file without the
record before it that remembers the deletion). Entries go into space allocated ahead
in chunks (``posix_fallocate``, an eighth of the segment so far, 64 KiB to 4 MiB): an fsync that must also record
a new file size costs a journal commit more (measured here: 215 µs against 140 µs
per fdatasync). The unused zeros after the last entry are the end of the segment's
data; a segment is cut to its data when it rolls or closes. ``commit()`` makes
everything appended so far durable under the fsync policy and returns a future to
wait on (or None when nothing waits):

A directory that gained an entry (a new segment file, a new stream directory) is fsynced
in the same pass as the entries in it, so a power loss cannot take the file away. A pass
of several streams fsyncs them at once, from up to ``SYNC_THREADS`` threads: the file
system shares its journal commits among concurrent fsyncs, so commits to many groups
(each group's coordinator partition is a stream) wait for about one fsync, not one per
stream (measured here: 16 files 2.2 → 0.9 ms, 4 files 0.5 → 0.35 ms).

* ``always`` — fsync the written streams now, on the loop, before replies leave;
* ``batch``  — group commit: a syncer thread fsyncs every stream written since
  its last pass and resolves every waiting future at once. It starts as soon as
  there is work (no fixed linger, which would only add latency to a lone
  commit): whatever is appended while one fsync runs shares the next, so under
  load many ops share one fsync while the loop keeps serving. But a pass
  expected to be short (its streams times the moving average of one stream's
  fsync, under ``inline_fsync_under``, 1 ms) runs on the loop, as ``always``
  does, while recent passes held few streams (on average at most
  ``INLINE_STREAMS``): handing a pass to a thread and back costs two thread
  wake-ups, and with one client, or one group's burst of commits, nothing else
  would use the loop meanwhile. Commits to many groups at once mean many
  clients waiting: their passes go to the thread, so the loop takes in the next
  commits while one fsync runs (measured here, synchronous commits with the
  batch policy: 1 client 2.4–2.7k/s in place against 2.1–2.3k on the thread;
  16 clients in 16 groups 4.3–4.5k in place against 5.3k). Wide passes (a
  produce to many partitions) and a slow disk go to the thread, so a stalling
  disk blocks the loop for about one pass. A pass in place while the thread's
  runs answers with the thread's future: replies may reflect what that pass holds.
* ``never``  — no fsync (the OS writes back); replies do not wait.

Recovery reads each stream in order and hands every record to the same
``replay`` the live path uses. A torn or corrupt tail (short entry, bad length,
bad checksum) is truncated at the last good entry with a log line, as Kafka's
recovery truncates at a segment's first invalid batch (skipping one entry could
replay a later one whose meaning depends on it: a batch onto a log it replaced, a
commit marker over an abort). When good entries follow the bad one, the cut bytes
are damage on disk and are kept aside in ``<segment>.damaged-at-<byte>`` with an
error line. Damage inside a sealed segment (fsynced whole when it rolled) loses the
rest of that segment only: the later segments hold acknowledged records and are
replayed (a partition log then has a gap of offsets, as a compacted Kafka log does). Meta streams
roll at ``segment_bytes``; sealed segments are compacted in the background by key
(the last value of each (type, key) survives, order kept, and deleted keys go
altogether), so recovery time and disk are bounded by live state, not history.
Data streams roll with their size and drop whole segments once the log start offset passes them,
or once a compaction record (which holds the whole cleaned log below its offset, and starts a
segment of its own) supersedes them. A data
stream whose last record drops its log (the topic deleted) is closed and its files
and directory removed once the commit that wrote the drop is durable (with it, the
meta record that remembers the deleted incarnation); sealed segments go first, so
a crash midway leaves the drop record to replay, and recovery finishes the removal.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import re
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import crc32c
import msgpack

from rafka import ids
from rafka.datadir import fsync_dir as _fsync_dir
from rafka.protocol.records import batch_last_offset
from rafka.shard.records import Record, RecordType

log = logging.getLogger("rafka.wal")

_HEAD = struct.Struct(">II")
_new_record = tuple.__new__
MAX_ENTRY = 256 * 1024 * 1024
INLINE_STREAMS = 2.0  # batch: passes in place only while recent ones held at most this many streams on average
SYNC_THREADS = 8  # a pass's concurrent fsyncs (measured: 16 files 1.8 ms with 2 threads, 0.9 ms with 8 or 15)
META_TYPES = {RecordType.OFFSET_COMMIT, RecordType.GROUP_METADATA, RecordType.TOPIC, RecordType.PRODUCER_STATE,
              RecordType.GROUP_CONFIG, RecordType.TOPIC_DROPPED,
              RecordType.CONSUMER_GROUP_METADATA, RecordType.CONSUMER_GROUP_MEMBER, RecordType.CONSUMER_GROUP_TARGET,
              RecordType.TXN_METADATA, RecordType.TXN_OFFSET_COMMIT}
DATA_TYPES = {RecordType.PARTITION_BATCH, RecordType.PARTITION_TRUNCATE, RecordType.PRODUCERS_EXPIRED,
              RecordType.PARTITION_COMPACTED}
# meta records whose key starts (org_id, group or transactional id): that id's coordinator partition
_KEYED_BY_GROUP = frozenset({
    RecordType.OFFSET_COMMIT, RecordType.GROUP_METADATA, RecordType.CONSUMER_GROUP_METADATA,
    RecordType.CONSUMER_GROUP_MEMBER, RecordType.CONSUMER_GROUP_TARGET, RecordType.TXN_METADATA,
    RecordType.TXN_OFFSET_COMMIT, RecordType.GROUP_CONFIG})


class WalError(Exception):
    """An append failed (disk full, out of file descriptors): nothing appended since the last
    durable point may be acknowledged."""


class EntryTooLarge(Exception):
    """The records of one op would make an entry recovery cannot read; nothing was written, so
    the op alone is refused (the log and the state are as before it)."""


_PACK = msgpack.Packer(use_bin_type=True).pack  # the loop's (a packer made per call costs a third of an entry)


def encode_entry(records: list[Record], pack: Callable[[Any], bytes] = _PACK) -> bytes:
    """One checksummed entry holding ``records`` (another thread passes a ``pack`` of its own)."""
    payload = pack([(int(r.type), r.key, r.value) for r in records])
    return _HEAD.pack(len(payload), crc32c.crc32c(payload)) + payload


def read_entries(path: Path) -> tuple[list[Record], int, str | None, bool]:
    """Records of one segment, the byte length of its good prefix, why it stopped early, and
    whether a good entry follows the bad one (damage on disk: a write is torn only at the end)."""
    data = path.read_bytes()
    out: list[Record] = []
    pos = 0
    while pos < len(data):
        entry, end, why = _entry_at(data, pos)
        if why is not None:
            if data.count(0, pos) == len(data) - pos:
                break  # zeros allocated ahead, never written: the end of the data
            return out, pos, why, _intact_after(data, pos, end)
        out.extend([_new_record(Record, r) for r in entry])  # tuple.__new__: no per-record arity check
        pos = end
    return out, pos, None, False


_NON_ZERO = re.compile(rb"[^\x00]")
_SCAN = 1 << 20  # bytes searched after a bad entry for an intact one


def _intact_after(data: bytes, pos: int, end: int) -> bool:
    """Whether an intact entry follows the bad one at ``pos`` (damage on disk: a write is torn
    only at the end). It is looked for where the bad entry says it ends, then at every byte of
    the next ``_SCAN`` (a zeroed page or a damaged length field hides where the next one starts;
    zero runs are skipped, and an entry's header starts at most 3 bytes before a non-zero byte)."""
    if pos < end < len(data) and _entry_at(data, end)[2] is None:
        return True
    at, stop = pos + 1, min(len(data), pos + _SCAN)
    while at < stop:
        if data[at] == 0:
            found = _NON_ZERO.search(data, at, stop)
            if found is None:
                return False
            at = max(at, found.start() - 3)
        if _entry_at(data, at)[2] is None:
            return True
        at += 1
    return False


def _entry_at(data: bytes, pos: int) -> tuple[Any, int, str | None]:
    """The decoded entry at ``pos``, where the next one starts (``pos`` when its length is not to
    be trusted), and what is wrong with it, if anything."""
    if len(data) - pos < _HEAD.size:
        return None, pos, "torn entry header"
    length, crc = _HEAD.unpack_from(data, pos)
    end = pos + _HEAD.size + length
    if length > MAX_ENTRY or end > len(data):
        return None, pos, "torn entry"
    payload = data[pos + _HEAD.size : end]
    if crc32c.crc32c(payload) != crc:
        return None, end, "checksum mismatch"
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=False), end, None
    except Exception:
        return None, end, "undecodable entry"


class Stream:
    """One append-only sequence of segments in a directory."""

    def __init__(self, directory: Path, segment_bytes: int, data: bool = False) -> None:
        self.dir = directory
        self.data = data  # a topic partition's log (else a coordinator partition's meta stream)
        self.segment_bytes = segment_bytes
        self.fd: int | None = None
        self.seq = 0
        self.size = 0  # bytes of entries in the active segment (those still pending too)
        self._pending: list[bytes] = []  # entries appended since the last write, which ``write`` makes one
        self._pending_at = 0  # where the first of them goes
        self.allocated = 0  # its length on disk: entries, then zeros allocated ahead
        self.dirty = False
        self.lock = threading.Lock()  # guards the fd against the syncer and the compactor
        self.segment_last_offset: dict[int, int] = {}  # data streams: seq -> last offset stored in it
        self.ends_dropped = False  # data streams: the last record noted dropped the log
        self.appends = 0  # entries appended since start: tells one drop of the log from a later one
        # directories that gained an entry (a new segment file, a new stream directory) since the last
        # sync: fsynced with the data, or a power loss could lose a file whose data was fsynced
        self.new_entries: set[Path] = set()

    def segments(self) -> list[Path]:
        """The segment files ``<seq>.wal``, in order (not a copy an operator left beside them)."""
        return sorted(path for path in self.dir.glob("*.wal") if len(path.stem) == 20 and path.stem.isdigit())

    def _make_dir(self) -> None:
        """Create the stream's directory and its missing parents, noting where entries appeared."""
        missing = []
        d = self.dir
        while not d.is_dir():
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            d.mkdir(exist_ok=True)
            self.new_entries.add(d.parent)

    def recover(self) -> Iterator[list[Record]]:
        """Yield the good records of each segment; truncate a torn tail; open the last segment for appends."""
        self._make_dir()
        segs = self.segments()
        for stray in sorted(set(self.dir.glob("*.wal")) - set(segs)):
            log.warning("%s: not a write-ahead-log segment name; ignored", stray)
        dropped_at: int | None = None
        good = None
        for i, seg in enumerate(segs):
            records, good, why, damaged = read_entries(seg)
            if why is not None and i < len(segs) - 1:
                # a sealed segment was fsynced whole when it rolled: this is damage on disk, not a torn
                # write, and the segments after it hold acknowledged records, so they are kept
                log.error("%s: %s at byte %d of a sealed segment; its last %d bytes are lost, later "
                          "segments are kept", seg, why, good, seg.stat().st_size - good)
            elif why is not None:
                self._cut_tail(seg, good, why, damaged)
            seq = int(seg.stem)
            if self.data and self._note(seq, records):
                dropped_at = seq  # a crash may have come between the drop and the unlink
            yield records
        if segs:
            self.seq = int(segs[-1].stem)
        if dropped_at is not None:
            self._unlink_sealed(dropped_at)
        self._open(self.seq, good)

    def _cut_tail(self, seg: Path, good: int, why: str, damaged: bool) -> None:
        """Truncate the active segment at its last good entry, as Kafka's recovery truncates a
        segment at its first invalid batch: a torn write is cut with a warning. When good entries
        follow the bad one, the bytes are damage on disk, not a torn write: they are kept aside
        (``<segment>.damaged-at-<byte>``, which recovery never reads) with an error line, for an operator."""
        with open(seg, "rb") as f:
            f.seek(good)
            tail = f.read()
        cut = len(tail.rstrip(b"\0"))  # the zeros after it were allocated ahead, not written
        if damaged:
            aside = seg.with_name(f"{seg.name}.damaged-at-{good}")
            aside.write_bytes(tail)
            log.error("%s: %s at byte %d, followed by intact entries: damage on disk, not a torn write; "
                      "the %d bytes from there are dropped (kept in %s)", seg, why, good, cut, aside.name)
        else:
            log.warning("%s: %s at byte %d; truncating %d bytes of torn tail", seg, why, good, cut)
        with open(seg, "r+b") as f:
            f.truncate(good)
            os.fsync(f.fileno())

    def _open(self, seq: int, size: int | None = None) -> None:
        """Open segment ``seq`` for appends after its first ``size`` bytes (all of it if None)."""
        path = self.dir / f"{seq:020d}.wal"
        try:
            self.fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            self.new_entries.add(self.dir)
        self.seq = seq
        self.allocated = os.fstat(self.fd).st_size
        self.size = self.allocated if size is None else min(size, self.allocated)

    def _allocate(self, need: int) -> None:
        """Allocate the active segment ahead to hold ``need`` bytes and a chunk more (not past
        ``segment_bytes``, where it rolls). Where the file system cannot, appends extend the file."""
        chunk = min(max(self.size // 8, 64 << 10), 4 << 20)
        target = max(need, min(need + chunk, self.segment_bytes))
        try:
            os.posix_fallocate(self.fd, self.allocated, target - self.allocated)  # type: ignore[arg-type]
            self.allocated = target
        except OSError:  # no space for the chunk (the write may still fit), or not supported
            self.allocated = max(os.fstat(self.fd).st_size, need)  # type: ignore[arg-type]

    def append(self, records: list[Record], data: bytes, roll: bool = False) -> bool:
        """Append one entry holding ``records`` (in a new segment if ``roll``, or if the current
        one is full); True when this rolled to a new segment."""
        rolled = False
        with self.lock:
            if self.fd is None:
                self._make_dir()
                self._open(self.seq)
            if self.size and (roll or self.size + len(data) > self.segment_bytes):
                self._write_pending()
                self._roll()
                rolled = True
            if self.size + len(data) > self.allocated:
                self._allocate(self.size + len(data))
            if not self._pending:
                self._pending_at = self.size
            self._pending.append(data)
            self.size += len(data)
            self.dirty = True
            self.appends += 1
            if self.data and self._note(self.seq, records):
                self._write_pending()  # the drop is in the file before the segments it ends go
                self._unlink_sealed(self.seq)
        return rolled

    def write(self) -> None:
        """Write the entries appended since the last write, with one system call (``commit``
        does, before anything waits on them)."""
        with self.lock:
            self._write_pending()

    def _write_pending(self) -> None:
        """Write the pending entries whole or not at all: a short write (a full disk) is cut off
        again and raised, so no torn entry sits before later, acknowledged ones; the entries are
        then lost, and the shard that could not write them stops and replays what is on disk."""
        if not self._pending:
            return
        at = start = self._pending_at
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending = []
        try:
            view: bytes | memoryview = data
            n = os.pwrite(self.fd, view, at)  # type: ignore[arg-type]
            while n < len(view):  # a short write: the rest, or the error that caused it
                view, at = memoryview(view)[n:], at + n
                n = os.pwrite(self.fd, view, at)  # type: ignore[arg-type]
        except OSError:
            os.ftruncate(self.fd, start)  # type: ignore[arg-type]
            self.allocated = self.size = start
            raise

    def _note(self, seq: int, records: list[Record]) -> bool:
        """Note the offsets of batches in segment ``seq``; True if a record drops the log (its topic
        deleted or re-created): what came before belongs to a dead incarnation, so its noted offsets
        are forgotten (a new incarnation counts from 0 again) and its sealed segments can go."""
        dropped = False
        for record in records:
            self.ends_dropped = record.type == RecordType.PARTITION_TRUNCATE and record.value is None
            if record.type in (RecordType.PARTITION_BATCH, RecordType.PARTITION_COMPACTED):
                self._note_offsets(seq, record)
            elif self.ends_dropped:
                self.segment_last_offset.clear()
                dropped = True
        return dropped

    def remove(self) -> None:
        """Delete the stream: its log is gone. Sealed segments go first, the one holding the drop last."""
        with self.lock:
            self._pending = []
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            self.dirty = False
            for path in self.segments():  # in order: the active one, holding the drop, goes last
                path.unlink(missing_ok=True)
            for d in (self.dir, *list(self.dir.parents)[:3]):  # partition, topic, org, coordinator partition
                try:
                    d.rmdir()
                except OSError:
                    break  # not empty: another partition or topic still lives there

    def _unlink_sealed(self, before: int) -> None:
        for path in self.segments():
            if int(path.stem) < before:
                path.unlink(missing_ok=True)

    def _roll(self) -> None:
        fd, self.fd = self.fd, None
        try:
            os.ftruncate(fd, self.size)  # type: ignore[arg-type]  # sealed: its entries only
            os.fsync(fd)  # type: ignore[arg-type]
        finally:
            os.close(fd)  # type: ignore[arg-type]
        self._open(self.seq + 1)

    def _note_offsets(self, seq: int, record: Record) -> None:
        if record.type == RecordType.PARTITION_COMPACTED:  # it stands for the whole log below ``upto``
            last = int(record.value["upto"]) - 1
        else:
            last = batch_last_offset(record.value["batch"])
        self.segment_last_offset[seq] = max(self.segment_last_offset.get(seq, -1), last)

    def sync(self) -> None:
        with self.lock:
            self._write_pending()
            if self.fd is not None and self.dirty:
                os.fdatasync(self.fd)
                self.dirty = False
            # children first: a new directory's own entry is in its parent
            for d in sorted(self.new_entries, key=lambda x: len(x.parts), reverse=True):
                _fsync_dir(d)
                self.new_entries.discard(d)

    def drop_below(self, log_start_offset: int, before: int) -> None:
        """Delete the sealed data segments before segment ``before`` (which holds the record that
        supersedes them) and before the first one holding an offset at or past ``log_start_offset``
        (one without batches holds only truncations the new record supersedes)."""
        with self.lock:
            for path in self.segments():
                seq = int(path.stem)
                if seq >= before or self.segment_last_offset.get(seq, -1) >= log_start_offset:
                    break
                path.unlink(missing_ok=True)
                self.segment_last_offset.pop(seq, None)

    def close(self) -> None:
        with self.lock:
            if self.fd is not None:
                try:
                    self._write_pending()
                    os.ftruncate(self.fd, self.size)  # the zeros allocated ahead go
                finally:
                    os.close(self.fd)
                    self.fd = None


def _subdirs(path: Path, digits: bool = False) -> list[Path]:
    """The directories under ``path`` (with all-digit names if ``digits``, as partition directories
    are), sorted; anything else there is named in a log line and left alone."""
    found = []
    for child in sorted(path.iterdir()):
        if child.is_dir() and (not digits or child.name.isdigit()):
            found.append(child)
        else:
            log.warning("%s: not part of the write-ahead log's layout; ignored", child)
    return found


def compact_segments(paths: list[Path]) -> list[Record]:
    """The last record of each (type, key) across ``paths``, in order of last occurrence."""
    last: dict[tuple[int, tuple[Any, ...]], Record] = {}
    for p in paths:
        records = read_entries(p)[0]
        for r in records:
            k = (r.type, r.key)
            last.pop(k, None)  # re-insert so dict order follows the last occurrence
            last[k] = r
    return list(last.values())


_Dropped = dict[tuple[Any, ...], tuple[Stream, int]]  # stream key → (stream, its append count at the drop)
# (stream key, stream, the offset below which its sealed segments are superseded, the segment holding
# the record that supersedes them)
_Drop = tuple[tuple[Any, ...], Stream, int, int]


class _Fsyncers:
    """Up to ``SYNC_THREADS`` threads that fsync streams for a pass, started as passes need them.
    Daemon threads, as the syncer is: an fsync stuck on a failing disk does not hold the
    process's exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Stream, concurrent.futures.Future[None]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, stream: Stream) -> concurrent.futures.Future[None]:
        """A future of ``stream.sync()`` on one of the threads (RuntimeError: none could start)."""
        with self._lock:
            if len(self._threads) < SYNC_THREADS:
                try:
                    t = threading.Thread(target=self._run, name="wal-fsync", daemon=True)
                    t.start()
                    self._threads.append(t)
                except RuntimeError:  # the process's thread limit: the threads already running will do
                    if not self._threads:
                        raise
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._jobs.put((stream, fut))
        return fut

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            stream, fut = job
            try:
                stream.sync()
            except BaseException as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(None)

    def stop(self) -> None:
        with self._lock:
            for _ in self._threads:
                self._jobs.put(None)
            self._threads = []


class Wal:
    """All streams of one shard, with the fsync policy."""

    def __init__(self, data_dir: str | Path, owned_partitions: set[int], partitions: int, *, fsync: str = "batch",
                 segment_bytes: int = 64 * 1024 * 1024, linger_ms: float = 0.0,
                 inline_fsync_under_ms: float = 1.0) -> None:
        if fsync not in ("always", "batch", "never"):
            raise ValueError(f"unknown fsync policy {fsync!r}")
        self.root = Path(data_dir)
        self.owned = owned_partitions
        self.partitions = partitions
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.linger = linger_ms / 1000.0
        self.inline_fsync_under = inline_fsync_under_ms / 1000.0  # batch: passes expected shorter run in place
        self.fsync_seconds = 0.0  # moving average of one stream's fsync (batch: where the next pass runs)
        self.streams_per_pass = 1.0  # moving average of the streams a pass syncs (batch: likewise)
        self.streams: dict[tuple[Any, ...], Stream] = {}
        self._written: set[Stream] = set()
        self._buffered: Stream | None = None  # the one stream holding entries not yet written
        # data streams whose log was dropped since the last commit (with the append that dropped it),
        # then the same per commit, removed once that commit is durable
        self._dropped: _Dropped = {}
        # sealed data segments a truncation or compaction superseded: (stream key, stream, offset below
        # which they go), deleted once the record that supersedes them is durable, as the drops are
        self._drops: list[_Drop] = []
        self._removals: list[tuple[concurrent.futures.Future[None], _Dropped, list[_Drop]]] = []
        self._pending: concurrent.futures.Future[None] | None = None
        self._queue: list[tuple[set[Stream], concurrent.futures.Future[None]]] = []
        self._cv = threading.Condition()
        self._closed = False
        self.on_fsync: Callable[[float], None] | None = None  # metrics hook: seconds per fsync pass
        self._syncer: threading.Thread | None = None
        self._fsyncers = _Fsyncers()  # a pass's other fsyncs
        if fsync == "batch":
            self._syncer = threading.Thread(target=self._sync_loop, name="wal-syncer", daemon=True)
            self._syncer.start()

    # -- routing -----------------------------------------------------------
    def stream_key(self, record: Record) -> tuple[Any, ...]:
        k = record.key
        t = record.type
        if t in _KEYED_BY_GROUP:
            return ("meta", ids.coordinator_partition(k[0], k[1], self.partitions))
        if t in DATA_TYPES:
            return ("logs", ids.log_partition(k[0], k[1], int(k[2]), self.partitions), k[0], k[1], int(k[2]))
        if t == RecordType.TOPIC:
            return ("meta", ids.coordinator_partition(k[0], "\0topics", self.partitions))
        if t == RecordType.PRODUCER_STATE:
            return ("meta", ids.coordinator_partition(k[0], ids.PRODUCER_IDS_KEY, self.partitions))
        if t == RecordType.TOPIC_DROPPED:
            return ("meta", int(k[2]))
        raise ValueError(f"no WAL stream for record type {t}")

    def _stream(self, key: tuple[Any, ...]) -> Stream:
        s = self.streams.get(key)
        if s is None:
            if key[0] == "meta":
                path = self.root / "meta" / f"{key[1]:02d}"
                seg = self.segment_bytes
            else:
                org, topic = (urllib.parse.quote(x, safe="") for x in (key[2], key[3]))
                path = self.root / "logs" / f"{key[1]:02d}" / org / topic / str(key[4])
                seg = self.segment_bytes
            s = self.streams[key] = Stream(path, seg, data=key[0] == "logs")
        return s

    # -- recovery ------------------------------------------------------------
    def recover(self) -> Iterator[list[Record]]:
        """Every record of every owned stream, a segment's records at a time: meta streams first,
        then data streams."""
        for p in sorted(self.owned):
            yield from self._stream(("meta", p)).recover()
        logs_root = self.root / "logs"
        for p in sorted(self.owned):
            base = logs_root / f"{p:02d}"
            if not base.is_dir():
                continue
            for org_dir in _subdirs(base):
                for topic_dir in _subdirs(org_dir):
                    for part_dir in sorted(_subdirs(topic_dir, digits=True), key=lambda d: int(d.name)):
                        key = ("logs", p, urllib.parse.unquote(org_dir.name), urllib.parse.unquote(topic_dir.name),
                               int(part_dir.name))
                        yield from self._recover_data(key, part_dir)
        if self.fsync != "never":  # directories recovery made, which no stream syncs unless it is written
            for d in (self.root / "meta", self.root / "logs", self.root):
                if d.is_dir():
                    _fsync_dir(d)

    def _recover_data(self, key: tuple[Any, ...], part_dir: Path) -> Iterator[list[Record]]:
        """One data stream's records; a directory holding records of another stream (an operator's
        copy of a partition's log) is ignored with an error line, not replayed twice."""
        stream = self._stream(key)
        count = 0
        for records in stream.recover():
            if records and self.stream_key(records[0]) != key:
                log.error("%s holds the log of %s, not its own (a copy?): ignored", part_dir,
                          "/".join(map(str, records[0].key)))
                del self.streams[key]
                return
            count += len(records)
            yield records
        if stream.ends_dropped or not count:  # a crash came before or during the removal
            self._remove(key, stream)

    # -- live path ------------------------------------------------------------
    def append(self, records: list[Record]) -> None:
        """Append ``records``: one entry per stream they touch, in order, each written once the next
        append goes to another stream, or at ``commit()`` (``WalError`` if a write fails)."""
        try:
            self._append(records)
        except OSError as exc:
            raise WalError(str(exc)) from exc

    def _append(self, records: list[Record]) -> None:
        by_stream: dict[tuple[Any, ...], list[Record]]
        if len(records) == 1:  # most ops: a commit, a produce to one partition
            by_stream = {self.stream_key(records[0]): records}
        else:
            by_stream = {}
            for r in records:
                by_stream.setdefault(self.stream_key(r), []).append(r)
        entries = [(key, recs, encode_entry(recs)) for key, recs in by_stream.items()]
        for _key, _recs, entry in entries:  # checked before anything is written
            if len(entry) > MAX_ENTRY:  # recovery would take it for a torn write
                raise EntryTooLarge(f"an entry of {len(entry)} bytes exceeds the {MAX_ENTRY} a segment may hold")
        for key, recs, entry in entries:
            s = self._stream(key)
            buffered = self._buffered
            if buffered is not s:  # the file order of entries stays the order of appends
                self._buffered = None
                if buffered is not None:
                    buffered.write()
            self._buffered = s
            if not s.data:  # a meta stream: offsets, groups, topics, producers
                if s.append(recs, entry):
                    self._compact_async(s)
                self._written.add(s)
                continue
            # a compaction starts a segment: what came before it is sealed, so once it is durable the
            # segments it supersedes can go and the stream's files follow the live keys
            s.append(recs, entry, roll=any(r.type == RecordType.PARTITION_COMPACTED for r in recs))
            self._written.add(s)
            for r in recs:
                if r.type == RecordType.PARTITION_TRUNCATE and r.value is not None:
                    self._drops.append((key, s, int(r.value.get("log_start_offset", 0)), s.seq))
                elif r.type == RecordType.PARTITION_COMPACTED:  # it holds everything below ``upto``
                    self._drops.append((key, s, int(r.value["upto"]), s.seq))
            if s.ends_dropped:
                self._dropped[key] = (s, s.appends)

    def _remove(self, key: tuple[Any, ...], stream: Stream) -> None:
        """Close and delete a data stream whose log was dropped; the next append starts a new one."""
        stream.remove()
        self.streams.pop(key, None)
        self._written.discard(stream)
        if self._buffered is stream:
            self._buffered = None

    def _remove_durable_drops(self) -> None:
        """Remove the dropped data streams whose batch fsync has completed."""
        waiting = []
        for fut, dropped, drops in self._removals:
            if not fut.done():
                waiting.append((fut, dropped, drops))
            elif fut.exception() is None:
                self._remove_dropped(dropped, drops)
        self._removals = waiting

    def _remove_dropped(self, dropped: _Dropped, drops: list[_Drop]) -> None:
        """Remove data streams whose drop is durable, unless written since (a new incarnation), and
        the sealed segments that durable truncations and compactions superseded."""
        for key, s, offset, seq in drops:
            if self.streams.get(key) is s:  # not a stream removed since, whose directory a new one may use
                s.drop_below(offset, seq)
        for key, (s, appends) in dropped.items():
            if self.streams.get(key) is s and s.appends == appends:
                self._remove(key, s)

    def commit(self) -> concurrent.futures.Future[None] | None:
        """Make every append so far durable; a future to wait on, or None if nothing waits.
        ``WalError`` when an fsync in place fails (a future fails when the thread's does)."""
        self._remove_durable_drops()
        written, self._written = self._written, set()
        dropped, self._dropped = self._dropped, {}
        drops, self._drops = self._drops, []
        buffered, self._buffered = self._buffered, None
        if buffered is not None:
            try:
                buffered.write()
            except OSError as exc:
                raise WalError(str(exc)) from exc
        if self.fsync == "never":
            self._remove_dropped(dropped, drops)
            return None
        pending = self._pending if self._pending is not None and not self._pending.done() else None
        if written:
            self.streams_per_pass = 0.8 * self.streams_per_pass + 0.2 * len(written)
        if self.fsync == "always" or (
                not self.linger and self.streams_per_pass <= INLINE_STREAMS
                and len(written) * self.fsync_seconds < self.inline_fsync_under):
            start = time.perf_counter()
            try:
                self._sync(written)
            except Exception as exc:  # not durable, whatever failed: the shard stops and replays
                raise WalError(str(exc)) from exc
            if written:
                self._fsynced(time.perf_counter() - start, len(written))
            if pending is None:
                self._remove_dropped(dropped, drops)
            elif dropped or drops:  # what remembers a drop may be in the thread's pass
                self._removals.append((pending, dropped, drops))
            return pending  # what was appended before is durable once the thread's pass is
        if not written:
            return pending
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cv:
            self._queue.append((written, fut))
            self._cv.notify()
        self._pending = fut
        if dropped or drops:
            self._removals.append((fut, dropped, drops))
        return fut

    def _sync_loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if self._closed and not self._queue:
                    return
            if self.linger:
                time.sleep(self.linger)  # let more appends join this fsync
            with self._cv:
                batch, self._queue = self._queue, []
            streams = set().union(*(w for w, _f in batch))
            start = time.perf_counter()
            try:
                self._sync(streams)
                error: BaseException | None = None
            except BaseException as exc:  # a failed fsync must not ack anything
                log.critical("fsync failed: %s", exc)
                error = exc
            self._fsynced(time.perf_counter() - start, len(streams))
            for _w, fut in batch:
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)

    def _sync(self, streams: set[Stream]) -> None:
        """fsync ``streams``: one in this thread, the others at the same time on the fsync threads;
        the first error is raised once every fsync has ended."""
        ordered = list(streams)
        here, futures = ordered[:1], []
        for s in ordered[1:]:
            try:
                futures.append(self._fsyncers.submit(s))
            except RuntimeError:  # no thread could start: synced here, one after another
                here.append(s)
        errors: list[BaseException] = []
        for s in here:
            try:
                s.sync()
            except BaseException as exc:
                errors.append(exc)
        errors += [exc for f in futures if (exc := f.exception()) is not None]
        if errors:
            raise errors[0]

    def _fsynced(self, seconds: float, streams: int) -> None:
        """A pass of ``streams`` fsyncs took ``seconds``: the metric, and the per-stream average."""
        self.fsync_seconds = 0.8 * self.fsync_seconds + 0.2 * seconds / max(streams, 1)
        if self.on_fsync:
            self.on_fsync(seconds)

    # -- compaction -------------------------------------------------------------
    def _compact_async(self, s: Stream) -> None:
        if getattr(s, "_compacting", False):
            return
        s._compacting = True  # type: ignore[attr-defined]
        threading.Thread(target=self._compact, args=(s,), name="wal-compact", daemon=True).start()

    def _compact(self, s: Stream) -> None:
        try:
            sealed = [p for p in s.segments() if int(p.stem) < s.seq]
            if len(sealed) < 2:
                return
            records = [r for r in compact_segments(sealed) if r.value is not None]
            target = sealed[0]
            tmp = target.with_suffix(".compact")
            with open(tmp, "wb") as f:
                pack = msgpack.Packer(use_bin_type=True).pack
                f.writelines(encode_entry(records[i : i + 10_000], pack) for i in range(0, len(records), 10_000))
                f.flush()
                os.fsync(f.fileno())
            # The last value of every key the sealed segments hold takes the place of the oldest one,
            # and the others go oldest first. A crash midway leaves it followed by the newest of
            # them, whose records it already holds, so replay ends in the same state: each key's last
            # record is still last. So tombstones need not be kept: nothing older is left for one to
            # cancel, and churn (members, producers, groups that come and go) does not pile up.
            os.replace(tmp, target)
            _fsync_dir(s.dir)  # the rename is on disk before any segment it replaces is gone
            for p in sealed[1:]:
                p.unlink(missing_ok=True)
            log.info("compacted %d segments of %s into %d records", len(sealed), s.dir, len(records))
        except Exception:
            log.exception("compaction of %s failed", s.dir)
        finally:
            s._compacting = False  # type: ignore[attr-defined]

    def close(self) -> None:
        fut = self.commit()
        if fut is not None:
            fut.result(timeout=10)
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._syncer is not None:
            self._syncer.join(10)
        self._fsyncers.stop()
        for s in self.streams.values():
            try:
                s.sync()
            except OSError as exc:  # the shard is stopping because of it: log, close the rest
                log.error("%s: fsync at close failed: %s", s.dir, exc)
            s.close()
