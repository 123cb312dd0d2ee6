"""Committed offsets at scale: RSS per offset, WAL replay rate, restart time.

* RSS per committed offset with 1 M offsets in one shard's GroupCoordinator,
  against a baseline measured in the same run: the same offsets in a plain
  ``dict[(org, group, topic, partition)] -> (offset, epoch, metadata, ts)``.
* WAL replay: 1 M OFFSET_COMMIT records written by the real ``Wal``, read back and
  replayed through ``ShardState.recover`` (records/s, with the cyclic GC paused as
  the shard runtime does), against the raw cost of reading and msgpack-decoding the
  same files.
* Restart: a real `rafka serve` on a data directory holding 1 M offsets, from
  process start until an OffsetFetch answers the last committed offset.
Usage: python bench/offsets.py [--offsets 1000000]
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import free_port, table

GROUPS, TOPICS = 1000, 10


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def records(n: int):  # type: ignore[no-untyped-def]
    from rafka.shard.groups.record_helpers import new_offset_commit_record

    per_group = n // GROUPS
    parts = max(per_group // TOPICS, 1)
    for g in range(GROUPS):
        for t in range(TOPICS):
            for p in range(parts):
                yield new_offset_commit_record("default", f"group-{g}", f"topic-{t}", p, 1_000_000 + p, -1, "",
                                               1_764_000_000_000)


def measure_memory(n: int, mode: str) -> float:
    """Bytes per offset for ``mode`` (runs in a fresh interpreter)."""
    code = f"""
import gc, sys
sys.path.insert(0, {str(Path(__file__).parent)!r}); sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from offsets import records, rss
gc.collect(); before = rss()
if {mode!r} == "rafka":
    from rafka.shard.groups import GroupCoordinator, GroupConfig
    class T:
        def schedule(self, *a): pass
        def cancel(self, *a): pass
    store = GroupCoordinator(GroupConfig(), T())
    for r in records({n}): store.replay(r)
    count = store.group_stats()["offsets"]
else:
    store = {{}}
    from rafka.shard.groups.offsets_store import unpack_entry
    for r in records({n}): store[r.key] = unpack_entry(r.value)
    count = len(store)
gc.collect()
print((rss() - before) / count)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def measure_replay(n: int, data_dir: str) -> tuple[float, float]:
    from rafka import ids
    from rafka.shard.handlers import ShardState
    from rafka.shard.wal import Wal
    from rafka.shard.wal_stream import read_chunks

    wal = Wal(data_dir, set(range(64)), 64, fsync="never")
    batch = []
    for r in records(n):
        batch.append(r)
        if len(batch) == 10_000:
            wal.append(batch)
            batch = []
    wal.append(batch)
    wal.close()
    del ids
    files = sorted(Path(data_dir).rglob("*.wal"))
    gc.disable()
    start = time.perf_counter()
    raw = sum(len(chunk) for f in files for chunk in read_chunks(f))  # as recovery reads them
    raw_rate = raw / (time.perf_counter() - start)
    gc.enable()

    from rafka.shard.groups import GroupConfig, GroupCoordinator

    class T:
        def schedule(self, *a: object) -> None: ...
        def cancel(self, *a: object) -> None: ...

    state = ShardState(0, GroupCoordinator(GroupConfig(), T()), wal=Wal(data_dir, set(range(64)), 64, fsync="never"))
    gc.collect()
    gc.disable()  # as the shard runtime does while it recovers
    start = time.perf_counter()
    count = 0
    for count in state.recover():
        pass
    elapsed = time.perf_counter() - start
    gc.enable()
    return count / elapsed, raw_rate


def measure_restart(data_dir: str) -> float:
    """Seconds from `rafka serve` start to a correct OffsetFetch on the recovered data."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    port = free_port()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rafka", "serve", "--port", str(port), "--metrics-port", "0",
                             "--shards", "1", "--data-dir", data_dir, "--log-level", "WARNING"], start_new_session=True)
    try:
        while True:
            try:
                c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": f"group-{GROUPS - 1}",
                              "enable.auto.commit": False})
                got = c.committed([TopicPartition(f"topic-{TOPICS - 1}", 0)], timeout=5)
                c.close()
                if got[0].offset == 1_000_000:
                    return time.perf_counter() - start
            except KafkaException:  # not serving yet
                pass
            if time.perf_counter() - start > 120:
                raise TimeoutError("restart took over 120 s")
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--offsets", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.offsets
    mem = measure_memory(n, "rafka")
    base = measure_memory(n, "dict")
    with tempfile.TemporaryDirectory() as d:
        replay, raw = measure_replay(n, d)
        restart = measure_restart(d)
    print(table([
        ["RSS per committed offset", f"{mem:.0f} B", f"{base:.0f} B (dict of tuples)", f"{mem / base:.2f}x", "<= 150 B",
         "met" if mem <= 150 else "not met"],
        ["WAL replay", f"{replay:,.0f} rec/s", f"{raw:,.0f} rec/s (read+decode only)", f"{replay / raw:.2f}x",
         ">= 500,000 rec/s", "met" if replay >= 500_000 else "not met"],
        [f"restart with {n:,} offsets", f"{restart:.2f} s", "", "", "< 5 s", "met" if restart < 5 else "not met"],
    ], ["figure", "rafka", "baseline (same run)", "ratio", "target", ""]))


if __name__ == "__main__":
    main()
