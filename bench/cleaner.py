"""Log compaction: how fast a shard cleans a compacted partition, and what it costs the loop.

A partition log of ``--records`` records (batches of 500, lz4, ``--keys`` distinct keys,
100-byte values) is cleaned once by ``rafka.shard.log.cleaner``, as a shard does:

* the clean itself (``cleaner.run``, in the shard's worker thread): records/s, against a
  baseline measured in the same run, decoding every record of the same batches once with
  ``iter_records`` (a clean decodes the dirty part twice: once for the key map, once to
  rewrite it);
* the loop's share: taking the job (``due``) and making and replaying the result's record
  (``compacted`` + replay), in ms (the write-ahead log's encoding and write of that record,
  also on the loop, are not included);
* the log's bytes before and after.
Usage: python bench/cleaner.py [--records 200000] [--keys 10000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import table

ORG, KEY = "bench", ("bench", "t", 0)


def build(records: int, keys: int) -> object:
    from rafka.protocol.records import CompressionType, SimpleRecord, build_batch
    from rafka.shard.log.manager import LogManager

    manager = LogManager()
    configs = {"cleanup.policy": "compact", "segment.bytes": "100000"}  # ~10 batches a segment
    rnd = random.Random(1)
    for _ in range(records // 500):
        data = build_batch([SimpleRecord(b"key-%d" % rnd.randrange(keys), b"x" * 100, 1000) for _ in range(500)],
                           compression=CompressionType.LZ4)
        recs, _resp = manager.produce(ORG, {"acks": -1, "partitions": [
            {"topic": "t", "partition": 0, "records": data, "configs": configs}]}, 1000)
        for r in recs:
            manager.replay(r)
    return manager


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=10_000)
    args = ap.parse_args()
    from rafka.protocol.records import iter_records
    from rafka.shard.log import cleaner

    manager = build(args.records, args.keys)
    log = manager.logs[KEY]  # type: ignore[attr-defined]
    before = log.size
    start = time.perf_counter()
    [(key, job)] = manager.due_cleans(2000)  # type: ignore[attr-defined]
    taken = time.perf_counter() - start
    batches = [b for seg in job.segments for b in seg.batches]
    start = time.perf_counter()
    cleaned_records = sum(1 for b in batches for _ in iter_records(b))
    baseline = cleaned_records / (time.perf_counter() - start)
    start = time.perf_counter()
    result = cleaner.run(job)
    ran = time.perf_counter() - start
    start = time.perf_counter()
    record = manager.compacted(key, job, result)  # type: ignore[attr-defined]
    manager.replay(record)  # type: ignore[attr-defined]
    written = time.perf_counter() - start
    rate = cleaned_records / ran
    print(f"log cleaner: {args.records:,} records, {args.keys:,} keys, {len(job.segments)} cleanable segments")
    print(table([
        ["clean (worker thread)", f"{rate:,.0f} rec/s ({ran:.2f} s)", f"{baseline:,.0f} rec/s (decode once)",
         f"{rate / baseline:.2f}x"],
        ["loop: take the job + make and replay its record", f"{(taken + written) * 1000:.1f} ms", "", ""],
        ["partition bytes before / after", f"{before:,} / {log.size:,}", "", ""],
    ], ["figure", "rafka", "baseline (same run)", "ratio"]))


if __name__ == "__main__":
    main()
