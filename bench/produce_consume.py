"""Produce and consume throughput: rafka vs librdkafka's mock cluster, same client, same run.

One confluent-kafka producer writes N records of S bytes (lz4-free, acks=all) to a
4-partition topic, then one consumer assigned every partition (no group) reads them
all back; MB/s and records/s.
Usage: python bench/produce_consume.py [--records 200000] [--size 100]
"""

from __future__ import annotations

import argparse
import time
import uuid

from common import mock_cluster, produce_all, rafka, table


def run(bootstrap: str, records: int, size: int, create: bool) -> tuple[float, float]:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-{uuid.uuid4().hex[:8]}"
    if create:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10000, "acks": "all",
                  "queue.buffering.max.messages": 1_000_000})
    payload = b"x" * size
    p.produce(topic, payload)  # warm up: metadata, connections
    p.flush(15)
    start = time.perf_counter()
    produce_all(p, topic, payload, records)
    p.flush(120)
    produce_s = time.perf_counter() - start
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 52428800, "enable.auto.commit": False})
    from confluent_kafka import TopicPartition

    # assign (no group): this measures fetching, not the group protocol
    parts = c.list_topics(topic, timeout=15).topics[topic].partitions
    # the mock keeps only its newest segments, so read what each partition still holds
    marks = {q: c.get_watermark_offsets(TopicPartition(topic, q), timeout=15) for q in parts}
    expected = sum(hi - lo for lo, hi in marks.values())
    c.assign([TopicPartition(topic, q, lo) for q, (lo, _hi) in marks.items()])
    got = 0
    first = None
    deadline = time.perf_counter() + 120
    while got < expected and time.perf_counter() < deadline:
        msgs = c.consume(10000, 0.5)
        if msgs and first is None:
            first = time.perf_counter()
        got += sum(1 for m in msgs if not m.error())
    consume_s = time.perf_counter() - (first or time.perf_counter())
    c.close()
    if got < expected:
        raise RuntimeError(f"consumed {got} of {expected}")
    return records / produce_s, expected / max(consume_s, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--shards", type=int, default=2)
    args = ap.parse_args()
    with mock_cluster() as mock:
        mp, mc = run(mock, args.records, args.size, create=False)
    rows = []
    for label, flags in [("batch fsync", []), ("in-memory", ["--in-memory"])]:
        with rafka(*flags, shards=args.shards) as bootstrap:
            rp, rc = run(bootstrap, args.records, args.size, create=True)
        mb = args.size / 1e6
        rows.append(["produce", label, f"{rp:,.0f} rec/s ({rp * mb:.1f} MB/s)", f"{mp:,.0f} rec/s ({mp * mb:.1f} MB/s)",
                     f"{rp / mp:.2f}x"])
        rows.append(["consume", label, f"{rc:,.0f} rec/s ({rc * mb:.1f} MB/s)", f"{mc:,.0f} rec/s ({mc * mb:.1f} MB/s)",
                     f"{rc / mc:.2f}x"])
    print(table(rows, ["", "rafka", "rafka", "mock (same run)", "ratio"]))


if __name__ == "__main__":
    main()
