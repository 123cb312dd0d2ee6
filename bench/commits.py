"""OffsetCommit throughput: rafka vs librdkafka's mock cluster, same client, same run.

Synchronous commits (latency bound) and asynchronous commits with at most 256 in
flight, from 1 (and optionally more) confluent-kafka client processes; rafka with
the default durable fsync policy (batch), with fsync always, and in memory.
Usage: python bench/commits.py [--seconds 5] [--clients 1,4]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
import uuid

from common import mock_cluster, rafka, table


def _client(bootstrap: str, mode: str, seconds: float, out: mp.Queue[int]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "bench-commits"
    warm = Producer({"bootstrap.servers": bootstrap})  # the topic must exist (the mock creates it on produce)
    warm.produce(topic, b"x", partition=0)
    warm.flush(15)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "api.version.request": True})
    done = 0
    failed = 0

    def on_commit(err: object, parts: object) -> None:
        nonlocal done, failed
        if err is None:
            done += 1
        else:
            failed += 1

    if mode == "async":
        c.close()
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                      "enable.auto.commit": False, "on_commit": on_commit})
    n = 0
    # warm up: coordinator lookup, connection
    c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    start = time.perf_counter()
    end = start + seconds
    if mode == "sync":
        while time.perf_counter() < end:
            n += 1
            c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
        done = n
    else:
        issued = 0
        while time.perf_counter() < end:
            while issued - done - failed < 256 and time.perf_counter() < end:
                issued += 1
                c.commit(offsets=[TopicPartition(topic, 0, issued)], asynchronous=True)
            c.poll(0.001)  # confluent-kafka rounds to whole ms: 0.0005 would busy-spin a core
        while done + failed < issued and time.perf_counter() < end + 10:
            c.poll(0.01)
    elapsed = time.perf_counter() - start
    c.close()
    out.put(int(done / elapsed))


def measure(bootstrap: str, mode: str, seconds: float, clients: int) -> int:
    ctx = mp.get_context("spawn")
    q: mp.Queue[int] = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(bootstrap, mode, seconds, q)) for _ in range(clients)]
    for p in procs:
        p.start()
    total = sum(q.get(timeout=seconds + 60) for _ in procs)
    for p in procs:
        p.join()
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--clients", default="1")
    ap.add_argument("--shards", type=int, default=1)
    args = ap.parse_args()
    client_counts = [int(x) for x in args.clients.split(",")]
    targets = {"sync": 0.75, "async": 1.0}
    rows = []
    for clients in client_counts:
        for mode in ("sync", "async"):
            with mock_cluster() as mock:
                base = measure(mock, mode, args.seconds, clients)
            for label, flags in [("batch fsync", []), ("always fsync", ["--fsync", "always"]),
                                 ("in-memory", ["--in-memory"])]:
                with rafka(*flags, shards=args.shards) as bootstrap:
                    got = measure(bootstrap, mode, args.seconds, clients)
                ratio = got / base if base else float("nan")
                rows.append([mode, clients, label, f"{got:,}", f"{base:,}", f"{ratio:.2f}x",
                             f"{targets[mode]:.2f}x", "met" if ratio >= targets[mode] else "not met"])
    print(table(rows, ["commits", "clients", "rafka", "rafka/s", "mock/s", "ratio", "target", ""]))


if __name__ == "__main__":
    main()
