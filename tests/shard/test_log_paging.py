"""Sealed WAL segments serve their batches from the file (rafka.shard.paging), a shard's
memory holding only the active segments: what is read back is what was written, live, after
a restart, across retention and compaction."""

from __future__ import annotations

import gc
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rafka.config import Config
from rafka.protocol.records import SimpleRecord, build_batch, iter_records, stamp_batch
from rafka.rail import Op
from rafka.shard import paging
from rafka.shard.log import cleaner
from rafka.shard.log.batches import Batches
from rafka.shard.log.partition import PartitionLog
from rafka.shard.records import Record
from rafka.shard.state import build_state

ORG, KEY = "acme", ("acme", "t", 0)


class Timer:
    """The shard's timer, driven by hand."""

    def __init__(self) -> None:
        self.due: dict[Any, Callable[[int], list[Record]]] = {}

    def schedule(self, key: Any, delay_ms: int, callback: Callable[[int], list[Record]]) -> None:
        self.due[key] = callback

    def cancel(self, key: Any) -> None:
        self.due.pop(key, None)


class Shard:
    """A shard's state as the runtime builds it (its WAL in ``path``), driven by hand."""

    def __init__(self, path: Path, data_roll_bytes: int = 512 * 1024, segment_bytes: int = 64 << 20) -> None:
        self.path, self.data_roll_bytes, self.segment_bytes = path, data_roll_bytes, segment_bytes
        self.timer = Timer()
        runtime = SimpleNamespace(timer=self.timer, on_group_event=lambda *a: None, metrics=SimpleNamespace(
            fsync=SimpleNamespace(labels=lambda *a: SimpleNamespace(observe=lambda s: None))))
        self.state = build_state(Config(data_dir=str(path), shards=1, fsync="never"), 0, runtime)
        self.state.wal.data_roll_bytes, self.state.wal.segment_bytes = data_roll_bytes, segment_bytes
        for _ in self.state.recover():
            pass
        self.state.start(0)

    def apply(self, records: list[Record]) -> None:
        self.state.append(records)
        self.state.commit()

    def tick(self, now: int = 0) -> None:
        """What the loop does next: the paging the last appends made due (a few partitions a pass,
        until none is due)."""
        while (pager := self.timer.due.pop("log-pager", None)) is not None:
            self.apply(pager(now))

    def produce(self, value: bytes, now: int, configs: dict[str, str], key: bytes = b"k", topic: str = "t",
                tick: bool = True) -> bytes:
        batch = build_batch([SimpleRecord(key, value, now)])
        got: list[Any] = []
        self.state.dispatch(Op.PRODUCE, ORG, {"acks": -1, "partitions": [
            {"topic": topic, "partition": 0, "records": batch, "configs": configs}]}, now, got.append, None)
        self.state.commit()
        assert got[0]["partitions"][0]["error_code"] == 0, got
        if tick:  # (else the appends of one loop pass)
            self.tick(now)
        return stamp_batch(batch, got[0]["partitions"][0]["base_offset"])  # what the log holds

    def restart(self) -> Shard:
        self.state.close()
        return Shard(self.path, self.data_roll_bytes, self.segment_bytes)

    @property
    def logs(self) -> Any:
        return self.state.data.logs

    @property
    def log(self) -> PartitionLog:
        return self.logs.logs[KEY]  # type: ignore[no-any-return]

    def read_all(self) -> bytes:
        error, batches = self.log.read(self.log.log_start_offset, 1 << 30)
        assert error == 0
        return b"".join(batches)


def _kinds(plog: PartitionLog) -> list[str]:
    return ["view" if isinstance(b, memoryview) else "bytes" for s in plog.segments for b in s.batches]


def test_batches_of_sealed_segments_are_read_from_the_file_and_read_back_as_written(tmp_path: Path) -> None:
    shard = Shard(tmp_path, data_roll_bytes=20_000)
    configs = {"segment.bytes": "30000"}
    written = [shard.produce(bytes([i % 251]) * 2_000, i, configs) for i in range(100)]  # ~200 KB, ~7 files
    kinds = _kinds(shard.log)
    assert kinds.count("view") >= 80 and kinds[-1] == "bytes", kinds  # the active segment's stay in memory
    assert shard.read_all() == b"".join(written)
    assert [r.value for r in iter_records(shard.log.segments[0].batches[3])] == [bytes([3]) * 2_000]

    again = shard.restart()  # recovery pages each sealed segment once it is replayed
    assert _kinds(again.log).count("view") >= 80 and again.read_all() == b"".join(written)
    more = [again.produce(b"x" * 2_000, 1_000 + i, configs) for i in range(30)]
    assert again.read_all() == b"".join(written + more)


def test_small_batches_are_paged_too(tmp_path: Path) -> None:
    """A paged batch costs a few array items, not a view object: one of a single small record too."""
    shard = Shard(tmp_path, data_roll_bytes=2_000)
    written = [shard.produce(b"v" * 100, i, {"segment.bytes": "3000"}) for i in range(200)]
    assert _kinds(shard.log).count("view") >= 180 and shard.read_all() == b"".join(written)
    assert not any(type(b) is memoryview for seg in shard.log.segments for b in seg.batches.held.values())


def test_retention_drops_paged_batches_and_a_restart_reads_what_is_left(tmp_path: Path) -> None:
    shard = Shard(tmp_path, data_roll_bytes=10_000)
    configs = {"segment.bytes": "20000", "retention.bytes": "40000"}
    written = []
    for i in range(150):
        written.append(shard.produce(bytes([i % 251]) * 1_000, i, configs))
        if i % 10 == 9:
            shard.apply(shard.logs.retention(i))
    start = shard.log.log_start_offset
    assert start > 50 and shard.read_all() == b"".join(written[start:])
    files = list((tmp_path / "logs").rglob("*.wal"))
    assert len(files) <= 3  # retention unlinked the mapped files (the log keeps two segments and the active one)
    assert shard.restart().read_all() == b"".join(written[start:])


def test_a_compacted_log_reads_its_cleaned_batches_before_and_after_they_are_paged(tmp_path: Path) -> None:
    shard = Shard(tmp_path, data_roll_bytes=5_000)
    configs = {"cleanup.policy": "compact", "segment.bytes": "10000", "min.cleanable.dirty.ratio": "0.01"}
    for i in range(60):
        shard.produce(bytes([i]) * 1_000, i, configs, key=b"k%d" % (i % 5))
    assert "view" in _kinds(shard.log)
    job = shard.logs.due_cleans(100)[0][1]
    record = shard.logs.compacted(KEY, job, cleaner.run(job))
    assert record is not None
    shard.apply([record])
    latest = {}
    for seg in shard.log.segments:
        for b in seg.batches:
            for r in iter_records(b):
                latest[r.key] = r.value
    assert latest == {b"k%d" % k: bytes([55 + k]) * 1_000 for k in range(5)}
    before = shard.read_all()
    for i in range(60, 80):  # seals the segment holding the compaction: its cleaned batches are paged
        shard.produce(bytes([i]) * 1_000, i, configs, key=b"k%d" % (i % 5))
    assert shard.read_all().startswith(before)
    assert _kinds(shard.log)[0] == "view"
    again = shard.restart()
    assert again.read_all() == shard.read_all()


def test_a_mapping_keeps_no_file_descriptor_and_goes_with_its_last_view(tmp_path: Path) -> None:
    shard = Shard(tmp_path, data_roll_bytes=1_000)
    fds = len(os.listdir("/proc/self/fd"))
    written = [shard.produce(b"v" * 1_500, i, {"segment.bytes": "1000"}) for i in range(300)]  # ~300 files
    assert _kinds(shard.log).count("view") >= 290
    assert len(os.listdir("/proc/self/fd")) <= fds + 2
    maps = Path("/proc/self/maps").read_text().count(str(tmp_path))
    assert maps >= 290
    assert shard.read_all() == b"".join(written)
    shard.apply(shard.logs.delete_records(ORG, {"partitions": [{"topic": "t", "partition": 0, "offset": 300}]})[0])
    assert Path("/proc/self/maps").read_text().count(str(tmp_path)) <= 2  # unmapped with the log's batches


def test_a_segment_without_the_logs_batches_is_left_alone_after_a_few_searches(tmp_path: Path,
                                                                               monkeypatch: Any) -> None:
    shard = Shard(tmp_path)
    for i in range(50):
        shard.produce(bytes([i]) * 1_000, i, {})
    other = tmp_path / "other.wal"
    other.write_bytes(os.urandom(200_000))
    searched: list[bytes] = []
    find = paging._find

    def counted(haystack: Any, batch: bytes, pos: int) -> int:
        searched.append(batch)
        return find(haystack, batch, pos)

    monkeypatch.setattr(paging, "_find", counted)
    view = paging.map_segment(other, 200_000)
    assert paging.page_out(shard.log, other, view, 0, 49) == (0, 0, 50)
    assert set(_kinds(shard.log)) == {"bytes"} and len(searched) == paging.MAX_MISSES


def _in_memory(plog: PartitionLog) -> int:
    return sum(len(b) for s in plog.segments for b in s.batches if type(b) is bytes)


def test_the_active_segment_is_paged_each_mebibyte_and_its_views_move_to_one_mapping_when_it_seals(
        tmp_path: Path) -> None:
    shard = Shard(tmp_path, segment_bytes=4_000_000)
    written = [shard.produce(bytes([i % 251]) * 20_000, i, {}) for i in range(300)]  # 6 MB: 4 sealed, 2 active
    assert _in_memory(shard.log) < paging.PAGE_ACTIVE_BYTES + 20_100, "at most a mebibyte and a batch in memory"
    files = sorted((tmp_path / "logs").rglob("*.wal"))
    assert len(files) == 2 and shard.read_all() == b"".join(written)
    owners = {id(b.obj) for s in shard.log.segments for b in s.batches if type(b) is not bytes}
    assert len(owners) == 2, "one mapping per segment file, made once for the active one"
    again = shard.restart()
    assert _in_memory(again.log) == 0 and again.read_all() == b"".join(written)
    more = [again.produce(b"x" * 20_000, 1_000 + i, {}) for i in range(100)]
    assert again.read_all() == b"".join(written + more)


def _segment_per_batch(tmp_path: Path, monkeypatch: Any, mappings_left: int, batches: int) -> tuple[Shard, list[bytes]]:
    """A shard whose every batch seals a WAL segment, with room for ``mappings_left`` more mappings."""
    gc.collect()  # mappings of earlier tests that only cycles hold
    monkeypatch.setattr(paging, "MAX_MAPPINGS", paging.mappings + mappings_left)
    shard = Shard(tmp_path, data_roll_bytes=1_000)
    return shard, [shard.produce(b"v" * 1_500, i, {"segment.bytes": "1000"}) for i in range(batches)]


def test_past_the_mapping_budget_batches_stay_in_memory_with_a_warning(tmp_path: Path, monkeypatch: Any,
                                                                        caplog: Any) -> None:
    shard, written = _segment_per_batch(tmp_path, monkeypatch, mappings_left=5, batches=20)
    kinds = _kinds(shard.log)
    assert kinds.count("view") == 5 and shard.read_all() == b"".join(written)
    assert len([r for r in caplog.records if "could not be mapped" in r.getMessage()]) == 1


def test_a_batch_is_found_by_its_whole_bytes_not_a_header_inside_another_batchs_record(tmp_path: Path) -> None:
    """A small batch (left in memory, and so not skipped in the file) whose record value holds the next
    batch's header: the search matched there, and the log served the wrong bytes (found by review)."""
    shard = Shard(tmp_path, data_roll_bytes=20_000)
    configs = {"segment.bytes": "30000"}
    written = [shard.produce(b"a" * 2_000, i, configs) for i in range(3)]
    leo = shard.log.log_end_offset
    decoy = stamp_batch(build_batch([SimpleRecord(b"k", b"Y" * 2_000, 100)]), leo + 1)
    written.append(shard.produce(decoy[:61], 50, configs))
    written.append(shard.produce(b"Y" * 2_000, 100, configs))
    assert written[-1] == decoy
    written += [shard.produce(b"z" * 2_000, 200 + i, configs) for i in range(30)]  # seals the segment
    assert isinstance(shard.log.read(leo + 1, 1)[1][0], memoryview)
    assert shard.read_all() == b"".join(written) and shard.restart().read_all() == b"".join(written)


def test_batches_not_written_to_the_file_yet_are_paged_by_the_next_page_out(tmp_path: Path) -> None:
    shard = Shard(tmp_path)
    written = []
    for i in range(60):  # 1.2 MB appended, none of it written to the file: it waits for the commit
        batch = build_batch([SimpleRecord(b"k", bytes([i]) * 20_000, i)])
        got: list[Any] = []
        shard.state.dispatch(Op.PRODUCE, ORG, {"acks": -1, "partitions": [
            {"topic": "t", "partition": 0, "records": batch}]}, i, got.append, None)
        written.append(stamp_batch(batch, i))
    shard.tick()
    assert set(_kinds(shard.log)) == {"bytes"}
    shard.state.commit()
    for i in range(60, 120):
        written.append(shard.produce(bytes([i]) * 20_000, i, {}))
    assert _in_memory(shard.log) < paging.PAGE_ACTIVE_BYTES + 20_100, "the first 60 too, once written"
    assert shard.read_all() == b"".join(written)


def test_batches_read_alike_held_or_paged_and_a_paged_one_costs_no_object() -> None:
    mapping = memoryview(b"..abc..defg")
    batches = Batches([b"abc", b"defg", b"hi"])
    batches.page(0, mapping, 2)
    batches.page(1, mapping, 7)
    assert [bytes(b) for b in batches] == [b"abc", b"defg", b"hi"] and batches == [b"abc", b"defg", b"hi"]
    assert bytes(batches[-3]) == b"abc" and batches.held == {2: b"hi"} and batches.maps == [mapping]
    batches.page(2, memoryview(b"hi"), 0)
    assert len(batches.maps) == 2 and bytes(batches[2]) == b"hi" and len(batches) == 3 and batches


def test_a_replay_that_begins_inside_a_segment_keeps_its_paged_batches_paged() -> None:
    """A compaction record whose offset falls inside a segment trims it (replay only): the batches
    kept are read from where they were, not held as a view object each (found by review)."""
    log = PartitionLog()
    stored = []
    for i in range(6):
        plan = log.prepare_append([build_batch([SimpleRecord(b"k", bytes([i]) * 700, i)])], i)
        log.apply_batch(plan.values[0])
        stored.append(plan.values[0]["batch"])
    mapping, at = memoryview(b"".join(stored)), 0
    for i, batch in enumerate(stored):
        log.segments[0].batches.page(i, mapping, at)
        at += len(batch)
    log.apply_compaction({"upto": 3, "segments": [], "log_start_offset": 3})
    [seg] = log.segments
    assert seg.batches.held == {} and seg.batches[0:3] == stored[3:]
    assert b"".join(log.read(3, 1 << 20)[1]) == b"".join(stored[3:])


def test_a_quiet_partition_is_paged_by_the_retention_pass(tmp_path: Path) -> None:
    shard = Shard(tmp_path)
    written = [shard.produce(bytes([i]) * 2_000, i, {}) for i in range(50)]  # 100 KB: under a MiB
    assert _kinds(shard.log).count("view") == 0
    shard.apply(shard.timer.due["log-retention"](100))
    shard.tick(100)
    assert _in_memory(shard.log) == 0 and shard.read_all() == b"".join(written)


def test_many_partitions_each_under_a_mebibyte_are_paged_once_the_shard_holds_its_budget(
        tmp_path: Path, monkeypatch: Any) -> None:
    """200 partitions of 150 KB each held all 30 MB in the heap (each under PAGE_ACTIVE_BYTES, and
    busy: no retention pass came); past the shard's budget the largest are paged."""
    monkeypatch.setattr(paging, "PAGE_BUDGET_BYTES", 4 << 20)
    shard = Shard(tmp_path)
    written: dict[str, list[bytes]] = {f"t{p}": [] for p in range(200)}
    for i in range(10):
        for topic, batches in written.items():
            batches.append(shard.produce(bytes([i]) * 15_000, i, {}, topic=topic))
    logs = shard.logs.logs
    held = sum(_in_memory(logs[(ORG, topic, 0)]) for topic in written)
    assert held <= 4 << 20, f"{held / 2**20:.1f} MiB of batches in the heap"
    assert shard.state.data.pager.unpaged_total <= 4 << 20
    for topic, batches in written.items():
        error, got = logs[(ORG, topic, 0)].read(0, 1 << 30)
        assert error == 0 and b"".join(got) == b"".join(batches), topic


def test_the_budget_is_looked_at_again_once_the_pager_is_done(tmp_path: Path, monkeypatch: Any) -> None:
    """Appends made while a busy partition was due crossed the budget unseen, and quiet partitions
    each under PAGE_IDLE_BYTES stayed over it for good (found by review)."""
    monkeypatch.setattr(paging, "PAGE_BUDGET_BYTES", 4 << 20)
    shard = Shard(tmp_path)
    for p in range(100):  # 3 MB in quiet partitions
        shard.produce(b"q" * 30_000, 0, {}, topic=f"quiet{p}")
    for _ in range(11):  # one loop pass: a busy partition due (1 MiB), then 3 MB more in the quiet ones
        shard.produce(b"b" * 100_000, 1, {}, topic="busy", tick=False)
    for p in range(100):
        shard.produce(b"q" * 30_000, 1, {}, topic=f"quiet{p}", tick=False)
    assert shard.state.data.pager.unpaged_total > 4 << 20
    shard.tick(1)
    assert shard.state.data.pager.unpaged_total <= 4 << 20


def test_a_sealed_segment_left_in_memory_is_paged_by_a_later_retention_pass(tmp_path: Path, monkeypatch: Any,
                                                                             caplog: Any) -> None:
    shard, written = _segment_per_batch(tmp_path, monkeypatch, mappings_left=2, batches=10)
    assert _kinds(shard.log).count("view") == 2
    counted = shard.state.data.pager.unpaged_total
    monkeypatch.setattr(paging, "MAX_MAPPINGS", paging.mappings + 100)
    shard.apply(shard.timer.due["log-retention"](100))
    shard.tick(100)
    assert _kinds(shard.log).count("view") == 9, "every sealed segment's batch"  # the last: active, unwritten
    assert shard.state.data.pager.unpaged_total == counted > 0, "the active segment's batches are still counted"
    assert shard.read_all() == b"".join(written) and shard.restart().read_all() == b"".join(written)


def test_an_older_batch_costs_the_heap_about_thirty_bytes(tmp_path: Path) -> None:
    """Where a paged batch is in its file, its base offset and timestamp: ~30 bytes (46 when each
    paged batch kept a list slot and 8-byte file positions); its bytes are in the file."""
    shard = Shard(tmp_path, data_roll_bytes=1 << 20)
    for i in range(1_000):  # the log, its stream and the producer's state exist before the count
        shard.produce(b"v" * 100, i, {"segment.bytes": "1048576"})
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        n = 5_000
        for i in range(1_000, 1_000 + n):
            shard.produce(b"v" * 100, i, {"segment.bytes": "1048576"})
        shard.apply(shard.timer.due["log-retention"](10**6))  # pages what the last page-out left
        shard.tick()
        gc.collect()
        grew = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert _in_memory(shard.log) == 0
    assert grew / n < 36, f"{grew / n:.1f} bytes of heap per paged batch"
