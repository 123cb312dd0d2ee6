"""The shard's pager: which partitions' batches are read from the WAL files, and when.

How this works. ``rafka.shard.paging`` swaps a partition's batches for slices of a mapped
WAL file; the ``Pager`` decides when. It counts the bytes each partition appended since
its last page-out (``count``: the live replay of each batch, and of a compaction's cleaned
batches) and pages a partition's active segment at the next tick once it holds
``PAGE_ACTIVE_BYTES`` more, and the partitions holding the most once the shard's count
reaches ``PAGE_BUDGET_BYTES`` (until half of it is left, looked at again when the pager is
done); ``PAGES_PER_TICK`` at a time, other work coming between. The WAL calls ``page_out``
for each sealed segment (a roll; each segment recovery replays). The retention pass calls
``retention_pass``: partitions holding ``PAGE_IDLE_BYTES`` more are paged (one that went
quiet would keep up to a mebibyte for good), sealed segments whose page-out failed are tried
again (at most ``MAX_RETRIES`` times), and after page-outs the heap's free pages go back to
the kernel, at most every ``TRIM_INTERVAL_S``.
"""

from __future__ import annotations

import logging
import os
import time
from operator import itemgetter
from pathlib import Path
from typing import Any

from rafka.shard import paging
from rafka.shard.log.manager import PartitionKey
from rafka.shard.log.partition import PartitionLog
from rafka.shard.records import Record

log = logging.getLogger("rafka.shard")
PAGES_PER_TICK = 4  # active segments paged per loop pass
MAX_RETRIES = 5  # retention passes that try again to page a sealed segment whose page-out failed
TRIM_INTERVAL_S = 5.0  # the least time between two hand-backs of the heap's free pages


class Pager:
    """When a shard's partitions' batches are paged (``rafka.shard.paging`` does it)."""

    def __init__(self, logs: dict[PartitionKey, PartitionLog], timer: Any, wal: Any) -> None:
        self.logs = logs  # the shard's partition logs
        self.timer = timer
        self.wal = wal
        self.enabled = False  # live (after recovery, with a WAL): partitions' batches in memory are counted
        self.unpaged: dict[PartitionKey, int] = {}  # bytes of batches appended since their last page-out
        self.unpaged_total = 0  # their sum: past ``PAGE_BUDGET_BYTES`` the largest are paged
        self._freed = 0  # bytes paged since the heap's free pages last went back to the kernel
        self._trimmed_at = -TRIM_INTERVAL_S
        self._failed: dict[tuple[PartitionKey, Path, int, int], int] = {}  # sealed segments not paged: failures
        self._due: set[PartitionKey] = set()  # partitions whose active segment is paged at the next tick
        # active segments: (path, mapping, byte, offset) where the last page-out stopped
        self._active: dict[PartitionKey, tuple[Path, memoryview, int, int]] = {}
        self._warned = -60.0

    def dropped(self, key: PartitionKey) -> None:
        """``key``'s log is gone (its topic deleted): forget it, and its segments not paged (a new
        topic's files take their names)."""
        self._forget(key)
        self._active.pop(key, None)
        for item in [f for f in self._failed if f[0] == key]:
            del self._failed[item]

    def retention_pass(self) -> None:
        """Page the partitions holding ``PAGE_IDLE_BYTES`` or more, try the failed segments again,
        and hand back what paging freed (unless the pager does, once it is done)."""
        self._page_soon({key for key, n in self.unpaged.items() if n >= paging.PAGE_IDLE_BYTES})
        self._retry_failed()
        if not self._due:
            self._release_freed()

    def page_out(self, key: PartitionKey, path: Path, first: int, last: int, sealed: bool,
                 written: int | None = None, retry: bool = False) -> bool:
        """Read ``key``'s batches in a WAL segment from the file, through one mapping of it: an
        active segment's is made as long as a segment may grow and kept for its next page-out,
        which starts where this one stopped; a sealed one's ends there. False if it failed (a
        sealed segment's is tried again by the retention pass: a ``retry``, which leaves the
        count of the partition's batches in memory, those of its active segment, as it is)."""
        prev = self._active.get(key)
        same = prev is not None and prev[0] == path  # the active segment's mapping, kept from its last page-out
        if same:
            del self._active[key]
        plog = self.logs.get(key)
        if plog is None:
            return True
        view, pos, resume = (prev[1], prev[2], max(first, prev[3])) if same else (None, 0, first)
        try:
            size = os.stat(path).st_size if written is None else written
            if view is None or len(view) < size:  # (a segment of one entry may exceed the segment size)
                view, pos, resume = paging.map_segment(path, size if sealed else max(size, self.wal.segment_bytes)), 0, first
            paged, pos, resume = paging.page_out(plog, path, view, resume, last, sealed, size, pos)
        except OSError as exc:  # its batches stay in memory
            self._paging_failed(path, exc)
            if sealed:
                item = (key, path, first, last)
                self._failed[item] = self._failed.get(item, 0) + 1
            return False
        except Exception:  # never into the append that rolled the segment: its records are logged, not applied yet
            log.exception("%s: paging failed; its batches stay in memory", path)
            return False
        finally:
            if not retry:
                self._forget(key)
        self._freed += paged
        if not sealed:
            self._active[key] = (path, view, pos, resume)
        return True

    def _paging_failed(self, path: Path, exc: OSError) -> None:
        now = time.monotonic()
        if now - self._warned >= 60:
            self._warned = now
            log.warning("%s: batches stay in memory, the segment could not be mapped (%s); said once a minute",
                        path, exc)

    def page_active(self, now_ms: int) -> list[Record]:
        """Page the active segments of partitions that hold ``PAGE_ACTIVE_BYTES`` more in memory,
        ``PAGES_PER_TICK`` at a time, so that other work comes between (each may take a few ms);
        once none is due, the largest again while the shard holds its budget (appends meanwhile
        did not look), and the heap's free pages go back to the kernel."""
        for _ in range(min(PAGES_PER_TICK, len(self._due))):
            key = self._due.pop()
            active = self.wal.active_segment(*key) if self.wal is not None else None
            if active is None:
                self._forget(key)  # nothing of it in a file to page (its stream gone)
            else:
                self.page_out(key, active[0], active[1], active[2], False, active[3])
        self._keep_budget()
        if self._due:
            self.timer.schedule("log-pager", 0, self.page_active)
        else:
            self._release_freed()
        return []

    def _release_freed(self, now_ms: int = 0) -> list[Record]:
        """Hand the heap's free pages back (``paging.release_freed``) once batches have been paged
        since the last time, at most every ``TRIM_INTERVAL_S`` (a timer does it then if it is too
        soon): it walks the heap's free memory, a few ms, tens on a fragmented heap of hundreds
        of MB. So a shard gives back within seconds what its last page-outs freed."""
        if self._freed >= paging.PAGE_IDLE_BYTES:
            wait = self._trimmed_at + TRIM_INTERVAL_S - time.monotonic()
            if wait > 0:
                self.timer.schedule("heap-trim", int(wait * 1000) + 1, self._release_freed)
            else:
                self._freed, self._trimmed_at = 0, time.monotonic()
                paging.release_freed()
        return []

    def count(self, key: PartitionKey, size: int, batches: int) -> None:
        """Page ``key``'s active segment at the next tick once it has ``PAGE_ACTIVE_BYTES`` more in
        memory, counting each batch as at least ``PAGE_BATCH_COST`` (a page-out's work is per batch:
        ~1.6 us each, so one of many small batches holds the loop no longer than a few ms); and
        the largest partitions' once the shard holds ``PAGE_BUDGET_BYTES`` in all."""
        add = max(size, paging.PAGE_BATCH_COST * batches)
        n = self.unpaged[key] = self.unpaged.get(key, 0) + add
        self.unpaged_total += add
        if n >= paging.PAGE_ACTIVE_BYTES:
            self._page_soon({key})
        else:
            self._keep_budget()

    def _keep_budget(self) -> None:
        """Once the shard holds ``PAGE_BUDGET_BYTES`` and nothing is due, page the partitions
        holding the most until half the budget would be left (many partitions each under
        ``PAGE_ACTIVE_BYTES`` would hold it all)."""
        if self._due or self.unpaged_total < paging.PAGE_BUDGET_BYTES:
            return
        excess, keys = self.unpaged_total - paging.PAGE_BUDGET_BYTES // 2, set()
        for key, n in sorted(self.unpaged.items(), key=itemgetter(1), reverse=True):
            if excess <= 0:
                break
            keys.add(key)
            excess -= n
        self._page_soon(keys)

    def _forget(self, key: PartitionKey) -> None:
        """``key``'s batches in memory are paged (or given up on): count from zero."""
        self.unpaged_total -= self.unpaged.pop(key, 0)

    def _page_soon(self, keys: set[PartitionKey]) -> None:
        """Page the active segments of ``keys`` at the next tick."""
        if not keys <= self._due:
            self._due |= keys
            self.timer.schedule("log-pager", 0, self.page_active)

    def _retry_failed(self) -> None:
        """Page again the sealed segments whose page-out failed (past the mapping budget, an I/O
        error) while their files and batches are still there: the pass stops while the mapping
        budget is spent, and a segment is given up after ``MAX_RETRIES`` failures."""
        for item in list(self._failed):
            if paging.mappings >= paging.MAX_MAPPINGS:
                return
            key, path, first, last = item
            plog = self.logs.get(key)
            gone = plog is None or plog.log_start_offset > last or not path.exists()
            if gone or self.page_out(key, path, first, last, True, retry=True):
                del self._failed[item]
            elif self._failed[item] > MAX_RETRIES:  # (each failure counted by page_out)
                del self._failed[item]
                log.warning("%s: batches stay in memory; the segment could not be mapped %d times", path,
                            MAX_RETRIES + 1)
