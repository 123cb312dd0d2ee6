"""Batches of sealed write-ahead-log segments are read from the file, not held in memory.

How this works. A partition's batches reach its WAL data stream byte for byte: the record
holds the stamped batch the log keeps. Once a data segment is sealed (rolled: cut to its
entries and fsynced; or a sealed segment recovery has just replayed), ``page_out`` swaps
the log's batches that the segment holds for read-only views of the file mapped into
memory. The kernel keeps those pages in its page cache, drops them under memory pressure
and reads them back when a fetch touches them, as Kafka serves reads from the page cache.
So a shard's own memory holds the batches of each partition's active segment (up to the
stream's segment size) and a view per older batch (~200 bytes), not every byte retention
keeps. A batch under ``MIN_PAGED_BYTES`` stays in memory, as its view would cost more.

A batch is found in the file by its 61-byte header (base offset, length, epoch, magic and
the CRC of the rest), searched from where the previous one ended: the log's batches
between the last paged offset and the segment's last offset are in it, in order. One not
found (it is elsewhere: a clean's output, or a batch the log replaced) stays in memory;
after ``MAX_MISSES`` the rest of that segment is left alone, so a segment costs at most a
few scans. The file is mapped with mmap(2) through ctypes and its descriptor closed at
once (Python 3.11's ``mmap`` keeps a descriptor per mapping, and a shard may map
thousands of files); it is unmapped when its last view goes, so a mapped file that
retention unlinks keeps its disk space until the log lets go of its batches. Sealed
segments are never written again, so a view never sees its bytes change.
"""

from __future__ import annotations

import bisect
import ctypes
import logging
import mmap
import os
import weakref
from pathlib import Path

from rafka.shard.log.partition import PartitionLog

log = logging.getLogger("rafka.paging")

MIN_PAGED_BYTES = 512  # a smaller batch stays in memory: its view (~184 bytes) would save little or nothing
MAX_MISSES = 4  # batches not found in a segment before the rest of it is left alone
_HEADER = 61  # a record batch's header: base offset .. records count

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def page_out(plog: PartitionLog, path: Path, last_offset: int) -> int:
    """Swap ``plog``'s batches from its last paged offset to ``last_offset`` that the sealed
    segment at ``path`` holds for views of the file; the number of bytes swapped
    (``OSError`` if the file cannot be read or mapped)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as haystack:  # for find(), closed at once
            return _swap(plog, haystack, _map(f.fileno(), len(haystack), path), last_offset)


def _swap(plog: PartitionLog, haystack: mmap.mmap, view: memoryview, last_offset: int) -> int:
    start, paged, misses, pos = plog.paged_upto, 0, 0, 0
    plog.paged_upto = max(start, last_offset + 1)
    segments = plog.segments
    si = max(bisect.bisect_right(segments, start, key=lambda s: s.base_offset) - 1, 0)
    for seg in segments[si:]:
        if seg.base_offset > last_offset:
            break
        batches = seg.batches
        for i in range(bisect.bisect_left(seg.base_offsets, start), len(batches)):
            if seg.base_offsets[i] > last_offset:
                return paged
            batch = batches[i]
            n = len(batch)
            if type(batch) is not bytes or n < MIN_PAGED_BYTES:
                continue
            at = haystack.find(batch[:_HEADER], pos)
            if at < 0:
                misses += 1
                if misses >= MAX_MISSES:
                    return paged
                continue
            batches[i] = view[at : at + n]
            pos = at + n
            paged += n
    return paged


def _map(fd: int, size: int, path: Path) -> memoryview:
    """A read-only view of the first ``size`` bytes of ``fd``'s file that keeps no descriptor;
    unmapped once no view of it is left."""
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap {path}: {os.strerror(err)}")
    buf = (ctypes.c_char * size).from_address(addr)
    weakref.finalize(buf, _libc.munmap, addr, size)  # every view holds ``buf``: the last one unmaps
    return memoryview(buf).cast("B").toreadonly()
