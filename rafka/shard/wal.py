"""The write-ahead log: a stream per coordinator partition and per topic partition, and the fsync policy.

How this works. Every record a shard applies is appended to one *stream*
(``wal_stream``: segment files of checksummed entries): group, offset,
topic-catalogue and producer-id records go to the stream of their coordinator
partition (``meta/<p>/``); record batches and log truncations go to the stream of
their topic partition (``logs/<p>/<org>/<topic>/<partition>/``, under the
coordinator partition that owns that log). Because streams follow coordinator
partitions, a shard started with another ``--shards`` count simply opens the
partitions it now owns: nothing moves, nothing is lost (directories that fit no
stream are ignored with a log line).

Only one stream holds entries not yet written to its file: an append to another
stream writes them first, so the files receive entries in the order they were
appended, and a process killed at any point leaves a prefix of the appends, as
writing each entry at once did (a topic's drop record, say, is never in the file
without the record before it that remembers the deletion). ``commit()`` makes
everything appended so far durable under the fsync policy and returns a future to
wait on (or None when nothing waits). A pass of several streams fsyncs them at
once, from up to ``SYNC_THREADS`` threads: the file system shares its journal
commits among concurrent fsyncs, so commits to many groups (each group's
coordinator partition is a stream) wait for about one fsync, not one per stream
(measured here: 16 files 2.2 → 0.9 ms, 4 files 0.5 → 0.35 ms).

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
``replay`` the live path uses (meta streams first, decoded a chunk of records at a
time just before they are replayed, then data streams; commits of the next
partitions of one group's topic, as compaction writes them, are stored as a run:
``GroupCoordinator.replay_offset_commits``). Meta
streams roll at ``segment_bytes``; sealed segments are compacted in the
background by key (the last value of each (type, key) survives, order kept, and
deleted keys go altogether), so recovery time and disk are bounded by live state,
not history. Data streams roll with their size, and where the partition log starts a
segment (its ``segment.bytes`` or ``segment.ms``, the ``roll`` of a batch) once the
stream's segment holds ``data_roll_bytes`` (512 KiB, half the smallest ``segment.bytes``
Kafka allows, so a log rolling at 1 MiB rolls its stream each time): so retention frees
disk as it frees the log's segments, give or take one, and a topic with a short
``segment.ms`` and little traffic does not make a file per batch. They drop whole
segments once the log start offset passes them, or once a compaction record (which
holds the whole cleaned log below its offset, and starts a segment of its own)
supersedes them. A
data stream whose last record drops its log (the topic deleted) is closed and its
files and directory removed once the commit that wrote the drop is durable (with
it, the meta record that remembers the deleted incarnation); sealed segments go
first, so a crash midway leaves the drop record to replay, and recovery finishes
the removal. ``on_segment`` is told of each data segment whose records were replayed (at
a roll, and for each segment recovery replays), and ``active_segment`` where a partition
appends now: the shard then reads those batches from the file (``rafka.shard.paging``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack

from rafka import ids
from rafka.datadir import fsync_dir as _fsync_dir
from rafka.shard.records import Record, RecordType
from rafka.shard.wal_stream import MAX_ENTRY, Stream, compact_segments, encode_entry

log = logging.getLogger("rafka.wal")

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
                 segment_bytes: int = 64 * 1024 * 1024, data_roll_bytes: int = 512 * 1024,
                 linger_ms: float = 0.0, inline_fsync_under_ms: float = 1.0) -> None:
        if fsync not in ("always", "batch", "never"):
            raise ValueError(f"unknown fsync policy {fsync!r}")
        self.root = Path(data_dir)
        self.owned = owned_partitions
        self.partitions = partitions
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.data_roll_bytes = data_roll_bytes  # a data stream rolls with its log's segments past this size
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
        # told of each data segment whose records were replayed (see Stream.on_segment), with its partition
        self.on_segment: Callable[[tuple[str, str, int], Path, int, int, bool], None] | None = None
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
            return self._data_key(k[0], k[1], int(k[2]))
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
                org, topic = ids.dir_name(key[2]), ids.dir_name(key[3])
                path = self.root / "logs" / f"{key[1]:02d}" / org / topic / str(key[4])
                seg = self.segment_bytes
            s = self.streams[key] = Stream(path, seg, data=key[0] == "logs", fsync=self.fsync != "never")
            if s.data:
                s.on_segment = lambda *segment, part=key[2:]: self._on_segment(part, *segment)
        return s

    def _on_segment(self, partition: tuple[str, str, int], path: Path, first: int, last: int, sealed: bool) -> None:
        if self.on_segment is not None:
            self.on_segment(partition, path, first, last, sealed)

    def active_segment(self, org_id: str, topic: str, partition: int) -> tuple[Path, int, int, int] | None:
        """Where a partition's log appends (``Stream.active_segment``); None if it has no stream."""
        s = self.streams.get(self._data_key(org_id, topic, partition))
        return s.active_segment() if s is not None else None

    def _data_key(self, org_id: str, topic: str, partition: int) -> tuple[Any, ...]:
        """The key of a topic partition's stream."""
        return ("logs", ids.log_partition(org_id, topic, partition, self.partitions), org_id, topic, partition)

    # -- recovery ------------------------------------------------------------
    def recover(self, raw: bool = False) -> Iterator[list[Any]]:
        """Every record of every owned stream, a segment's records at a time: meta streams first
        (``raw``: as plain ``(type, key, value)`` tuples), then data streams."""
        for p in sorted(self.owned):
            yield from self._stream(("meta", p)).recover(raw)
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
            roll = any(r.type == RecordType.PARTITION_COMPACTED for r in recs) or (
                s.size >= self.data_roll_bytes
                and any(r.type == RecordType.PARTITION_BATCH and r.value.get("roll") for r in recs))
            s.append(recs, entry, roll=roll)
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
