"""One stream of the write-ahead log: a directory of segment files of checksummed entries.

How this works. A stream is a directory of segment files ``<seq>.wal`` (other names there
are ignored with a log line); each entry is ``u32 length | u32 crc32c | msgpack [[type, key,
value], ...]`` — the records one append gives that stream, written and checksummed as one
unit, so a torn write loses a whole op's records or none, and recovery decodes thousands of
records per call into C. Appended entries wait in memory until ``write`` (the log calls it when
an append goes to another stream, and at every commit, before anything waits on them), which
writes them with one system call: a burst of ops on one group or partition costs one write,
and the file still receives entries in the order they were appended. Entries go into space
allocated ahead in chunks (``posix_fallocate``, an eighth of the segment so far, 64 KiB to
4 MiB): an fsync that must also record a new file size costs a journal commit more (measured
here: 215 µs against 140 µs per fdatasync). The unused zeros after the last entry are the end
of the segment's data; a segment is cut to its data when it rolls or closes. A directory that
gained an entry (a new segment file, a new stream directory) is fsynced by the same ``sync``
as the entries in it, so a power loss cannot take the file away.

Recovery reads the segments in order. A torn or corrupt tail (short entry, bad length, bad
checksum) is truncated at the last good entry with a log line, as Kafka's recovery truncates
at a segment's first invalid batch (skipping one entry could replay a later one whose meaning
depends on it: a batch onto a log it replaced, a commit marker over an abort). When good
entries follow the bad one, the cut bytes are damage on disk and are kept aside in
``<segment>.damaged-at-<byte>`` with an error line. Damage inside a sealed segment (fsynced
whole when it rolled) loses the rest of that segment only: the later segments hold
acknowledged records and are replayed (a partition log then has a gap of offsets, as a
compacted Kafka log does). A data stream (a topic partition's log) notes the last offset in
each segment, so the segments a truncation, a compaction or a drop of the log supersedes
can be deleted.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
from collections.abc import Callable, Generator, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import crc32c
import msgpack

from rafka.datadir import fsync_dir as _fsync_dir
from rafka.protocol.records import batch_last_offset
from rafka.shard.records import Record, RecordType

log = logging.getLogger("rafka.wal")

_HEAD = struct.Struct(">II")
_new_record = tuple.__new__
MAX_ENTRY = 256 * 1024 * 1024  # recovery takes a longer length for a torn write
CHUNK = 1000  # records recovery decodes at a time (``read_chunks``)
_SMALL_ENTRY = 4096  # bytes of an entry ``read_chunks`` decodes in one call

_PACK = msgpack.Packer(use_bin_type=True).pack  # the loop's (a packer made per call costs a third of an entry)


def encode_entry(records: list[Record], pack: Callable[[Any], bytes] = _PACK) -> bytes:
    """One checksummed entry holding ``records`` (another thread passes a ``pack`` of its own)."""
    return frame_entry(pack([(int(r.type), r.key, r.value) for r in records]))


def frame_entry(payload: bytes) -> bytes:
    """``payload`` framed as an entry: its length and checksum first."""
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
            return (out, *_stopped_at(data, pos, end, why))
        out.extend([_new_record(Record, r) for r in entry])  # tuple.__new__: no per-record arity check
        pos = end
    return out, pos, None, False


def read_chunks(path: Path) -> Generator[list[Any], None, tuple[int, str | None, bool]]:
    """The records of one segment as the plain ``(type, key, value)`` tuples decoding gives
    (a ``Record`` made of each costs ~400 ns), about ``CHUNK`` at a time; returns what
    ``read_entries`` does after the records. A chunk is decoded just before it is used, so the
    objects it makes are still in the CPU's cache (measured: recovery of 1 M commits ran ~2x
    faster than after decoding whole segments); an entry of more than ``CHUNK`` records is
    decoded a chunk at a time. An entry whose checksum holds but which cannot be decoded (rafka
    never writes one) ends the good data where it starts, as in ``read_entries``, and none of
    its records is yielded after the fault; but a large one's chunks yielded before it are."""
    data = path.read_bytes()
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, use_list=False, max_buffer_size=MAX_ENTRY)
    chunk: list[Any] = []
    pos = fed = 0
    while pos < len(data):
        payload, end, why = _payload_at(data, pos)
        if why is None and len(payload) < _SMALL_ENTRY:
            entry = _decoded(payload)
            if entry is None:
                why = "undecodable entry"
            else:
                chunk.extend(entry)
        elif why is None:
            unpacker.feed(payload)
            fed += len(payload)
            mark = len(chunk)  # where the entry's records start in the chunk
            try:
                left = unpacker.read_array_header()
                while left:
                    take = min(left, CHUNK - len(chunk))
                    had = len(chunk)
                    chunk.extend(islice(unpacker, take))
                    if len(chunk) - had < take:
                        break  # the array is shorter than its header says
                    left -= take
                    if len(chunk) >= CHUNK:
                        yield chunk
                        chunk, mark = [], 0
            except Exception:
                left = -1
            if left or unpacker.tell() != fed:  # a short array, or bytes after it
                why = "undecodable entry"
                del chunk[mark:]  # none of it after the fault
        if why is not None:
            if chunk:
                yield chunk
            return _stopped_at(data, pos, end, why)
        pos = end
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
    return pos, None, False


def _stopped_at(data: bytes, pos: int, end: int, why: str) -> tuple[int, str | None, bool]:
    """Where the good data ends at a bad entry, why, and whether an intact one follows."""
    if data.count(0, pos) == len(data) - pos:
        return pos, None, False  # zeros allocated ahead, never written: the end of the data
    return pos, why, _intact_after(data, pos, end)


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


def _payload_at(data: bytes, pos: int) -> tuple[bytes, int, str | None]:
    """The checksummed payload of the entry at ``pos``, where the next one starts (``pos`` when its
    length is not to be trusted), and what is wrong with it, if anything."""
    if len(data) - pos < _HEAD.size:
        return b"", pos, "torn entry header"
    length, crc = _HEAD.unpack_from(data, pos)
    end = pos + _HEAD.size + length
    if length > MAX_ENTRY or end > len(data):
        return b"", pos, "torn entry"
    payload = data[pos + _HEAD.size : end]
    if crc32c.crc32c(payload) != crc:
        return b"", end, "checksum mismatch"
    return payload, end, None


def _entry_at(data: bytes, pos: int) -> tuple[Any, int, str | None]:
    """``_payload_at``, the payload decoded."""
    payload, end, why = _payload_at(data, pos)
    if why is not None:
        return None, end, why
    entry = _decoded(payload)
    return (None, end, "undecodable entry") if entry is None else (entry, end, None)


def _decoded(payload: bytes) -> tuple[Any, ...] | None:
    """An entry's records, or None when its payload is not an array of them."""
    try:
        entry = msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=False)
    except Exception:
        return None
    return entry if type(entry) is tuple else None


class Stream:
    """One append-only sequence of segments in a directory."""

    def __init__(self, directory: Path, segment_bytes: int, data: bool = False, fsync: bool = True) -> None:
        self.dir = directory
        self.data = data  # a topic partition's log (else a coordinator partition's meta stream)
        self.fsync = fsync  # a rolled segment is fsynced before the next one starts (not with --fsync never)
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
        self.segment_first_offset: dict[int, int] = {}  # data streams: seq -> first offset stored in it
        self.ends_dropped = False  # data streams: the last record noted dropped the log
        self.appends = 0  # entries appended since start: tells one drop of the log from a later one
        # data streams: told of a segment (its path, the first and last offset in it, whether it is sealed)
        # once its records are replayed: at a roll, and for each segment recovery replays (the last one is
        # the active one), so that rafka.shard.paging reads their batches from the file
        self.on_segment: Callable[[Path, int, int, bool], None] | None = None
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

    def recover(self, raw: bool = False) -> Iterator[list[Any]]:
        """Yield the good records of each segment (``raw``: as plain tuples, a chunk at a time, see
        ``read_chunks``; not for a data stream, which notes a segment's last offset); truncate a torn
        tail; open the last segment for appends."""
        assert not (raw and self.data)
        self._make_dir()
        segs = self.segments()
        for stray in sorted(set(self.dir.glob("*.wal")) - set(segs)):
            log.warning("%s: not a write-ahead-log segment name; ignored", stray)
        dropped_at: int | None = None
        good = None
        for i, seg in enumerate(segs):
            seq = int(seg.stem)
            if raw:
                good, why, damaged = yield from read_chunks(seg)
            else:
                records, good, why, damaged = read_entries(seg)
                if self.data and self._note(seq, records):
                    dropped_at = seq  # a crash may have come between the drop and the unlink
                yield records
            if why is not None and i < len(segs) - 1:
                # a sealed segment was fsynced whole when it rolled: this is damage on disk, not a torn
                # write, and the segments after it hold acknowledged records, so they are kept
                log.error("%s: %s at byte %d of a sealed segment; its last %d bytes are lost, later "
                          "segments are kept", seg, why, good, seg.stat().st_size - good)
            elif why is not None:
                self._cut_tail(seg, good, why, damaged)
            self._replayed(seq, sealed=i < len(segs) - 1)
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
        path = self._path(seq)
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
        sealed = self.seq
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
        if rolled:
            self._replayed(sealed, sealed=True)
        return rolled

    def _replayed(self, seq: int, sealed: bool) -> None:
        last = self.segment_last_offset.get(seq, -1)
        if self.on_segment is not None and last >= 0:
            self.on_segment(self._path(seq), self.segment_first_offset.get(seq, 0), last, sealed)

    def active_segment(self) -> tuple[Path, int, int, int] | None:
        """The active segment of a data stream: its path, first and last offset, and the bytes of
        it written to the file (entries appended since the last write are not); None if it holds no batch."""
        with self.lock:
            last = self.segment_last_offset.get(self.seq, -1)
            if last < 0:
                return None
            written = self._pending_at if self._pending else self.size
            return self._path(self.seq), self.segment_first_offset.get(self.seq, 0), last, written

    def _path(self, seq: int) -> Path:
        return self.dir / f"{seq:020d}.wal"

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
                self.segment_first_offset.clear()
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
            if self.fsync:
                os.fsync(fd)  # type: ignore[arg-type]
        finally:
            os.close(fd)  # type: ignore[arg-type]
        self._open(self.seq + 1)

    def _note_offsets(self, seq: int, record: Record) -> None:
        if record.type == RecordType.PARTITION_COMPACTED:  # it stands for the whole log below ``upto``
            last = int(record.value["upto"]) - 1
            segments = record.value["segments"]
            first = int(segments[0][0]) if segments else last + 1
        else:
            batch = record.value["batch"]
            last = batch_last_offset(batch)
            first = int.from_bytes(batch[0:8], "big", signed=True)
        self.segment_last_offset[seq] = max(self.segment_last_offset.get(seq, -1), last)
        self.segment_first_offset[seq] = min(self.segment_first_offset.get(seq, first), first)

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
                self.segment_first_offset.pop(seq, None)

    def close(self) -> None:
        with self.lock:
            if self.fd is not None:
                try:
                    self._write_pending()
                    os.ftruncate(self.fd, self.size)  # the zeros allocated ahead go
                finally:
                    os.close(self.fd)
                    self.fd = None


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
