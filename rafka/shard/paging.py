"""A partition's batches are read from its write-ahead-log files, not held in the shard's heap.

How this works. A partition's batches reach its WAL data stream byte for byte: the record
holds the stamped batch the log keeps. ``page_out`` moves the log's batches that a segment
file holds to a read-only mapping of the file (``Batches.page``: a read is then a slice of
it). The kernel keeps those pages in its page cache, drops them under memory pressure and
reads them back when a fetch touches them, as Kafka serves reads from the page cache. It
runs for each segment once its records are replayed: at a roll (the segment is *sealed*:
cut to its entries, fsynced, never written again), for each segment recovery replays, and
for the active segment once its partition has ``PAGE_ACTIVE_BYTES`` more in memory, or
2,048 batches (rafka.shard.pager decides when; a page-out costs ~1.6 µs a batch on the shard's loop), and
at each retention pass for those with ``PAGE_IDLE_BYTES`` more; and, once a shard's partitions
hold ``PAGE_BUDGET_BYTES`` in all, for those holding the most, until half of it is left. So a
shard's heap holds under ``PAGE_BUDGET_BYTES`` of batches however many partitions it has, and
~30 bytes per older batch (where it is in the file, its offset and timestamp), not every byte
retention keeps. A sealed segment whose page-out failed is tried again at each retention pass.
After page-outs the heap's free pages go back to the kernel (``release_freed``, at most every
few seconds): paged batches leave holes between those still held.

A batch is found in the file by its 61-byte header (base offset, length, epoch, magic and
the CRC of the rest), searched from where the previous one ended, then compared whole (a
record value may hold another batch's header): the log's batches of the segment's offsets
are in it, in order. One not found before a batch that is found is elsewhere (a clean's
output) and stays in memory; after ``MAX_MISSES`` the rest of the segment is left, so a
page-out costs at most a few scans. In an active segment the batches missed after the last
one found may not be written yet: its next page-out starts with them.

Each segment file is mapped once: an active segment as long as it may grow (the stream's
segment size; only bytes written are ever viewed, and nothing cuts a segment below its
entries), kept for its later page-outs and for the one at its roll. Files are mapped with
mmap(2) through ctypes and the descriptor closed at once (Python 3.11's ``mmap`` keeps a
descriptor per mapping); a mapping goes with the last segment and slice reading it, so a
file that retention unlinks keeps its disk space until the log lets go of its batches.
Mappings are counted:
past ``MAX_MAPPINGS`` (half the kernel's ``vm.max_map_count``, which the allocator needs
too) batches stay in memory. A read of a page the kernel dropped happens on the shard's
loop: a fetch of old data waits for the disk and holds the shard's other work meanwhile,
and an I/O error there ends the process (SIGBUS) where a read(2) would have failed.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import mmap
import os
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

from rafka.shard.log.partition import PartitionLog, Segment

PAGE_ACTIVE_BYTES = 1 << 20  # a partition's batches in memory that page its active segment
PAGE_IDLE_BYTES = 64 << 10  # what a partition's retention pass pages, however long it took to gather
PAGE_BUDGET_BYTES = 32 << 20  # a shard's batches in memory in all that page its partitions holding the most
PAGE_BATCH_COST = 512  # what a batch counts for at least, toward PAGE_ACTIVE_BYTES: at most 2,048 a page-out
MAX_MISSES = 4  # batches not found in a segment before a page-out leaves the rest of it
_HEADER = 61  # a record batch's header: base offset .. records count


def _max_mappings() -> int:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text()) // 2
    except (OSError, ValueError):
        return 32_765


MAX_MAPPINGS = _max_mappings()
mappings = 0  # alive now
_count = threading.Lock()  # a mapping may go in another thread (the log cleaner's, holding the last view)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
_malloc_trim = getattr(_libc, "malloc_trim", None)  # glibc's


def map_segment(path: Path, length: int) -> memoryview:
    """A read-only view of the first ``length`` bytes of the file at ``path``, mapped without a
    descriptor and unmapped once no view of it is left. ``length`` may reach past the file's
    end (an active segment grows into it): only bytes written are ever viewed."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return _map(fd, length, path)
    finally:
        os.close(fd)


def page_out(plog: PartitionLog, path: Path, view: memoryview, first: int, last: int, sealed: bool = True,
             size: int | None = None, pos: int = 0) -> tuple[int, int, int]:
    """Swap ``plog``'s batches with base offsets from ``first`` to ``last`` that the segment at
    ``path`` holds (in its first ``size`` bytes; all of it if None) for slices of ``view``, a
    mapping of that file, searching from byte ``pos``. ``(bytes swapped, the byte after the
    last batch found, the offset the next page-out of an active segment starts from)``."""
    with open(path, "rb") as f:
        size = min(os.fstat(f.fileno()).st_size if size is None else size, len(view))
        if size <= pos:
            return 0, pos, first
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as haystack:  # for find(); closed at once
            return _swap(plog, haystack, view, first, last, sealed, pos)


def _swap(plog: PartitionLog, haystack: mmap.mmap, view: memoryview, first: int, last: int, sealed: bool,
          pos: int) -> tuple[int, int, int]:
    paged, misses, unfound = 0, 0, None  # unfound: the first batch missed since the last one found
    for seg, indexes in _spans(plog, first, last):
        batches, held, m = seg.batches, seg.batches.held, -1
        for i in indexes:
            batch = held.get(i)
            if type(batch) is not bytes:
                continue  # paged already (or a view a replay kept)
            n = len(batch)
            at = _find(haystack, batch, pos)
            if at < 0:
                unfound = seg.base_offsets[i] if unfound is None else unfound
                misses += 1
                if misses >= MAX_MISSES:
                    break
                continue
            unfound = None
            if m < 0:
                m = batches.map_index(view)
            batches.which[i], batches.starts[i], batches.sizes[i] = m, at, n  # Batches.page, inlined: the
            del held[i]  # arrays before held, the mapping's index found once per segment
            pos = at + n
            paged += n
        if m >= 0:
            batches.repack()
        if misses >= MAX_MISSES:
            break
    # batches missed after the last one found may not be written yet: an active segment's next page-out
    # looks for them again; missed ones before a batch found are elsewhere (a clean's output) and stay
    return paged, pos, last + 1 if sealed or unfound is None else unfound


def _spans(plog: PartitionLog, first: int, last: int) -> Iterator[tuple[Segment, range]]:
    """Each segment of ``plog`` with the indexes of its batches whose base offsets lie from
    ``first`` to ``last``."""
    segments = plog.segments
    for seg in segments[max(bisect.bisect_right(segments, first, key=lambda s: s.base_offset) - 1, 0):]:
        if seg.base_offset > last:
            return
        bases = seg.base_offsets
        yield seg, range(bisect.bisect_left(bases, first), bisect.bisect_right(bases, last))


def _find(haystack: mmap.mmap, batch: bytes, pos: int) -> int:
    """Where ``batch`` is in the file at or after ``pos``, or -1: found by its header, then compared
    whole (a record value may hold another batch's header)."""
    header, n, end = batch[:_HEADER], len(batch), len(haystack)
    while (at := haystack.find(header, pos)) >= 0 and at + n <= end:
        if haystack[at : at + n] == batch:  # a copy, then memcmp: a memoryview compares byte by byte
            return at
        pos = at + 1
    return -1


def release_freed() -> None:
    """Hand the heap's free pages back to the kernel (glibc's ``malloc_trim``: a few ms, tens on
    a fragmented heap of hundreds of MB). Paged batches free their bytes between batches still
    held, which the allocator would otherwise keep as the process's resident memory."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _map(fd: int, size: int, path: Path) -> memoryview:
    """A read-only view of the first ``size`` bytes of ``fd``'s file that keeps no descriptor;
    unmapped once no view of it is left."""
    global mappings
    if mappings >= MAX_MAPPINGS:
        raise OSError(errno.ENOMEM, f"{mappings} files mapped already, the most the kernel's vm.max_map_count leaves")
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap {path}: {os.strerror(err)}")
    with _count:
        mappings += 1
    buf = (ctypes.c_char * size).from_address(addr)
    # every view holds ``buf``: the last one unmaps; not at exit, where a daemon thread (the log
    # cleaner's) may still read a view
    weakref.finalize(buf, _unmap, addr, size).atexit = False
    return memoryview(buf).cast("B").toreadonly()


def _unmap(addr: int, size: int) -> None:
    global mappings
    _libc.munmap(addr, size)
    with _count:
        mappings -= 1
