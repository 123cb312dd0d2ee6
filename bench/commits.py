"""OffsetCommit throughput: rafka vs librdkafka's mock cluster, same client, same run.

Synchronous commits (latency bound) and asynchronous commits with at most 256 in
flight, from 1 (and optionally more) confluent-kafka client processes; rafka with
the default durable fsync policy (batch), with fsync always, and in memory. Also the
CPU each side spent per commit: the clients', rafka's (gateway and shards) and the
mock's (its threads in this process); on a machine the clients share with the
broker, client + broker CPU per commit bounds the rate.
Usage: python bench/commits.py [--seconds 5] [--clients 1,4]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time
import uuid

from common import cpu_seconds, mock_cluster, rafka, table


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread: librdkafka's and the mock's too
    return usage.ru_utime + usage.ru_stime


def _client(bootstrap: str, mode: str, seconds: float, out: mp.Queue[tuple[int, int, float]]) -> None:
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
    cpu = _cpu()
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
    cpu = _cpu() - cpu
    c.close()
    out.put((int(done / elapsed), done, cpu))


def measure(bootstrap: str, mode: str, seconds: float, clients: int) -> tuple[int, float, float]:
    """Commits per second of all clients, and the clients' CPU µs per commit; the broker's CPU
    seconds meanwhile are ``broker_cpu()`` before and after."""
    ctx = mp.get_context("spawn")
    q: mp.Queue[tuple[int, int, float]] = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(bootstrap, mode, seconds, q)) for _ in range(clients)]
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    done = sum(r[1] for r in results) or 1
    return sum(r[0] for r in results), done, sum(r[2] for r in results) * 1e6 / done


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--clients", default="1")
    ap.add_argument("--shards", type=int, default=1)
    args = ap.parse_args()
    client_counts = [int(x) for x in args.clients.split(",")]
    targets = {"sync": 0.75, "async": 1.0}
    rows, cpu_rows = [], []
    for clients in client_counts:
        for mode in ("sync", "async"):
            with mock_cluster() as mock:
                before = _cpu()  # the mock's threads live in this process, which otherwise waits
                base, done, base_client_us = measure(mock, mode, args.seconds, clients)
                mock_us = (_cpu() - before) * 1e6 / done
            cpu_rows.append([mode, clients, "mock", f"{base_client_us:.0f}", f"{mock_us:.0f}"])
            for label, flags in [("batch fsync", []), ("always fsync", ["--fsync", "always"]),
                                 ("in-memory", ["--in-memory"])]:
                with rafka(*flags, shards=args.shards) as bootstrap:
                    before = cpu_seconds(bootstrap.pid)
                    got, done, client_us = measure(bootstrap, mode, args.seconds, clients)
                    broker_us = (cpu_seconds(bootstrap.pid) - before) * 1e6 / done
                cpu_rows.append([mode, clients, f"rafka, {label}", f"{client_us:.0f}", f"{broker_us:.0f}"])
                ratio = got / base if base else float("nan")
                rows.append([mode, clients, label, f"{got:,}", f"{base:,}", f"{ratio:.2f}x",
                             f"{targets[mode]:.2f}x", "met" if ratio >= targets[mode] else "not met"])
    print(table(rows, ["commits", "clients", "rafka", "rafka/s", "mock/s", "ratio", "target", ""]))
    print()
    print(table(cpu_rows, ["commits", "clients", "broker", "client CPU µs/commit", "broker CPU µs/commit"]))


if __name__ == "__main__":
    main()
