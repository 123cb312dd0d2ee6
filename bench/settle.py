"""Rebalance settle time: 10 consumers on one 900-partition topic, classic vs KIP-848 consumer protocol.

The case of Kafka's KIP-848 performance claim ("10 consumers adding 900
partitions complete rebalancing in 5 s instead of 103 s"). Ten confluent-kafka
consumer processes are started, wait on a barrier, then all subscribe at once.
The group has settled when every partition is assigned to exactly one consumer,
every consumer has received a non-empty assignment and the broker reports the
group Stable; the figure is the time from the barrier to the last assignment
change seen by any consumer (checked again after a quiet second). Client
defaults throughout (classic: heartbeat.interval.ms 3000, session 45 s;
consumer: the broker's heartbeat interval, 5000 ms by default); rafka runs with
its defaults (group.initial.rebalance.delay.ms 0, where Kafka's default is 3000).
Variants: "idle" consumers (poll loop only) with rafka's defaults; the same
with Kafka's default group.initial.rebalance.delay.ms of 3 s; the same with a
1 s KIP-848 heartbeat interval (each revocation waits for the owner's next
heartbeat, so the interval bounds the consumer protocol's settle time); "busy"
consumers that spend ``--process-ms`` on each record (20 records per
partition are produced first), so rebalance callbacks wait for their next poll.
Usage: python bench/settle.py [--partitions 900] [--consumers 10] [--runs 1] [--shards 1] [--process-ms 100]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import statistics
import time
import uuid
from typing import Any

from common import rafka, table

CASES = [("classic", "cooperative-sticky"), ("classic", "range"), ("consumer", "uniform")]


def _consumer(bootstrap: str, group: str, topic: str, protocol: str, assignor: str, idx: int,
              process_ms: int, start: Any, stop: Any, out: Any) -> None:
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if protocol == "classic":
        conf["partition.assignment.strategy"] = assignor
    else:
        conf["group.remote.assignor"] = assignor
    c = Consumer(conf)
    owned: set[int] = set()

    def report() -> None:
        out.put((idx, time.time(), sorted(owned)))

    def on_assign(_c: Any, parts: list[Any]) -> None:
        owned.update(p.partition for p in parts)
        report()

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        owned.difference_update(p.partition for p in parts)
        report()

    start.wait()
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while not stop.is_set():
        if c.poll(0.05) is not None and process_ms:
            time.sleep(process_ms / 1000)  # a busy consumer: rebalance callbacks wait for its next poll
    c.close()


def _group_state(bootstrap: str, group: str, protocol: str) -> str:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.rawclient import RawClient

    host, port = bootstrap.rsplit(":", 1)
    with RawClient(host, int(port), timeout=5) as c:
        if protocol == "consumer":  # DescribeGroups describes classic groups only, as in Kafka
            described = c.request(69, 0, {"group_ids": [group], "include_authorized_operations": False})
        else:
            described = c.request(15, 5, {"groups": [group], "include_authorized_operations": False})
    return str(described["groups"][0]["group_state"])


def settle(bootstrap: str, protocol: str, assignor: str, partitions: int, consumers: int, process_ms: int) -> float:
    """Seconds from the common start to a settled, Stable group."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = f"settle-{uuid.uuid4().hex[:8]}", f"settle-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    if process_ms:  # records to be busy with: 20 per partition
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        for i in range(partitions * 20):
            producer.produce(topic, b"x" * 100, partition=i % partitions)
            producer.poll(0)
        producer.flush(60)
    ctx = mp.get_context("spawn")
    start, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_consumer, args=(bootstrap, group, topic, protocol, assignor, i, process_ms, start, stop, out))
             for i in range(consumers)]
    for p in procs:
        p.start()
    time.sleep(3.0)  # every process imported confluent_kafka and is waiting on the barrier
    t0 = time.time()
    start.set()
    owned: dict[int, list[int]] = {}
    last = t0
    settled_at: float | None = None
    deadline = t0 + 300
    try:
        while time.time() < deadline:
            try:
                idx, ts, parts = out.get(timeout=0.2)
                owned[idx] = parts
                last = max(last, ts)
                settled_at = None
                continue
            except queue.Empty:
                pass
            flat = [p for ps in owned.values() for p in ps]
            covered = len(owned) == consumers and all(owned.values()) and sorted(flat) == list(range(partitions))
            if not covered:
                continue
            if settled_at is None:
                settled_at = last
            elif time.time() - settled_at > 1.0 and _group_state(bootstrap, group, protocol) == "Stable":
                return settled_at - t0
        raise TimeoutError(f"{protocol}/{assignor}: not settled after 300 s")
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=900)
    ap.add_argument("--consumers", type=int, default=10)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--process-ms", type=int, default=100, help="per-record work of the 'busy' variant (0: skip)")
    args = ap.parse_args()
    variants = [("idle", [], 0), ("idle, initial delay 3 s", ["--group-initial-rebalance-delay-ms", "3000"], 0),
                ("idle, KIP-848 heartbeat 1 s", ["--consumer-group-heartbeat-interval-ms", "1000"], 0)]
    if args.process_ms:
        variants.append((f"busy ({args.process_ms} ms/record)", [], args.process_ms))
    rows = []
    for label, flags, process_ms in variants:
        results: dict[tuple[str, str], list[float]] = {}
        with rafka(*flags, shards=args.shards) as bootstrap:
            for _ in range(args.runs):
                for protocol, assignor in CASES:
                    secs = settle(bootstrap, protocol, assignor, args.partitions, args.consumers, process_ms)
                    results.setdefault((protocol, assignor), []).append(secs)
        consumer_median = statistics.median(results[("consumer", "uniform")])
        for (protocol, assignor), times in results.items():
            median = statistics.median(times)
            rows.append([label, protocol, assignor, " ".join(f"{t:.2f}" for t in times), f"{median:.2f}",
                         f"{median / consumer_median:.2f}"])
    rows.append(["Kafka (published)", "classic", "", "", "103", "20.6"])
    rows.append(["Kafka (published)", "consumer", "", "", "5", "1.00"])
    print(f"{args.consumers} consumers, 1 topic x {args.partitions} partitions, rafka {args.shards} shard(s); "
          "seconds from the common subscribe to a settled Stable group")
    print(table(rows, ["variant", "protocol", "assignor", "runs (s)", "median (s)", "median / consumer"]))


if __name__ == "__main__":
    main()
