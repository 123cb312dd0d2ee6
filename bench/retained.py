"""Retained data: the shard's heap per retained MB, and reading old data back, warm and cold.

One confluent-kafka producer writes MB megabytes (1 KB records, acks=all) to a 1-partition
topic with Kafka's default segment and retention configs; the shard's anonymous resident
memory (RssAnon: its heap, not the page cache of mapped WAL files) is read before and after.
Then a consumer reads it all back from offset 0: for the durable broker first with the WAL
files evicted from the page cache (cold: read from disk; ``posix_fadvise(DONTNEED)``, which
leaves the pages a process has faulted in, hence first), then again (warm: the page cache
holds it). Also the heap growth with the same bytes spread over 256 partitions (each under the
mebibyte that pages a busy partition: the shard's 32 MiB budget pages them), 6 s after the
produce (the heap's free pages go back within 5 s; right after, the allocator still holds
what the page-outs freed). The baseline
is the same broker with ``--in-memory``, which keeps every batch in its heap, in the same run.
Usage: python bench/retained.py [--mb 200]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
import uuid
from pathlib import Path

from common import produce_all, rafka, table

from rafka.shard.metrics import anon_bytes


def shard_pid(supervisor: int) -> int:
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(supervisor)], capture_output=True, text=True,
                         check=True).stdout
    return next(int(line.split()[0]) for line in out.splitlines() if line.split()[1] == "rafka-shard-0")


def anon_mb(pid: int) -> float:
    anon = anon_bytes(pid)
    if anon is None:
        raise RuntimeError("no RssAnon")
    return anon / 2**20


def evict(directory: Path) -> int:
    """Drop the WAL data files' pages from the page cache; the bytes they hold."""
    total = 0
    for path in (directory / "logs").rglob("*.wal"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def consume(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800})
    c.assign([TopicPartition(topic, 0, 0)])
    got, start, deadline = 0, time.perf_counter(), time.perf_counter() + 300
    while got < count and time.perf_counter() < deadline:
        got += sum(1 for m in c.consume(10000, 0.5) if not m.error())
    secs = time.perf_counter() - start
    c.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count}")
    return count * 1000 / 1e6 / secs


def run(flags: list[str], mb: int, partitions: int = 1) -> tuple[float, float | None, float | None]:
    """(heap growth MB, warm consume MB/s, cold consume MB/s or None); with several ``partitions``
    the heap growth only."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    count = mb * 1000
    with rafka(*flags, shards=1) as bootstrap:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
        pid = shard_pid(bootstrap.pid)
        before = anon_mb(pid)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        payload = b"x" * 1000
        produce_all(p, topic, payload, count, partitions if partitions > 1 else 0)
        if p.flush(120):
            raise RuntimeError("produce did not finish")
        time.sleep(0.5)
        grew = anon_mb(pid) - before
        if partitions > 1:  # once the pager is done and the heap's free pages went back (within 5 s)
            time.sleep(6)
            return anon_mb(pid) - before, None, None
        cold = None
        if "--in-memory" not in flags:  # first: pages a fetch faulted in stay mapped, and eviction leaves them
            evict(bootstrap.data_dir)
            cold = consume(bootstrap, topic, count)
        warm = consume(bootstrap, topic, count)
        return grew, warm, cold


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    args = ap.parse_args()
    d_grew, d_warm, d_cold = run([], args.mb)
    m_grew, m_warm, _ = run(["--in-memory"], args.mb)
    d_spread = run([], args.mb, 256)[0]
    m_spread = run(["--in-memory"], args.mb, 256)[0]
    assert d_warm is not None and m_warm is not None and d_cold is not None
    rows = [
        [f"shard heap growth for {args.mb} MB retained", f"{d_grew:.1f} MB", f"{m_grew:.1f} MB",
         f"{d_grew / max(m_grew, 1e-9):.2f}x"],
        [f"shard heap growth for {args.mb} MB in 256 partitions, 6 s after", f"{d_spread:.1f} MB", f"{m_spread:.1f} MB",
         f"{d_spread / max(m_spread, 1e-9):.2f}x"],
        ["consume from offset 0, warm", f"{d_warm:.1f} MB/s", f"{m_warm:.1f} MB/s", f"{d_warm / m_warm:.2f}x"],
        ["consume from offset 0, cold (page cache evicted)", f"{d_cold:.1f} MB/s", "", f"{d_cold / m_warm:.2f}x"],
    ]
    print(table(rows, ["", "rafka (batch fsync, paged)", "rafka --in-memory (same run)", "ratio"]))


if __name__ == "__main__":
    main()
