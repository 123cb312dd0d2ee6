"""OffsetCommit throughput: rafka vs librdkafka's mock cluster, same client, same run.

Synchronous commits (latency bound) and asynchronous commits with at most 256 in
flight, from 1 (and optionally more) confluent-kafka client processes; rafka with
the default durable fsync policy (batch), with fsync always, and in memory. Also the
CPU each side spent per commit: the clients', rafka's (gateway and shards) and the
mock's (its threads in this process); on a machine the clients share with the
broker, client + broker CPU per commit bounds the rate.
Usage: python bench/commits.py [--seconds 5] [--clients 1,4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time
import uuid
from statistics import median

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


CONFIGS = [("batch fsync", []), ("always fsync", ["--fsync", "always"]), ("in-memory", ["--in-memory"])]


def _round(mode: str, clients: int, seconds: float, shards: int) -> dict[str, tuple[int, float, float]]:
    """One measurement of the mock and of each rafka configuration: rate, client and broker CPU µs
    per commit."""
    out = {}
    with mock_cluster() as mock:
        before = _cpu()  # the mock's threads live in this process, which otherwise waits
        rate, done, client_us = measure(mock, mode, seconds, clients)
        out["mock"] = (rate, client_us, (_cpu() - before) * 1e6 / done)
    for label, flags in CONFIGS:
        with rafka(*flags, shards=shards) as bootstrap:
            before = cpu_seconds(bootstrap.pid)
            rate, done, client_us = measure(bootstrap, mode, seconds, clients)
            out[label] = (rate, client_us, (cpu_seconds(bootstrap.pid) - before) * 1e6 / done)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--clients", default="1")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure the mock and rafka this many times, one after the other, and report medians: "
                         "on a shared machine one run of either can be off by a third")
    args = ap.parse_args()
    targets = {"sync": 0.75, "async": 1.0}
    rows, cpu_rows = [], []
    for clients in (int(x) for x in args.clients.split(",")):
        for mode in ("sync", "async"):
            rounds = [_round(mode, clients, args.seconds, args.shards) for _ in range(args.rounds)]
            mock = [r["mock"] for r in rounds]
            mock_rate = median(m[0] for m in mock)
            cpu_rows.append([mode, clients, "mock", f"{median(m[1] for m in mock):.0f}",
                             f"{median(m[2] for m in mock):.0f}"])
            for label, _flags in CONFIGS:
                got = [r[label] for r in rounds]
                # each round's ratio sets rafka against the mock measured minutes apart, not hours
                ratios = sorted(g[0] / m[0] if m[0] else float("nan") for g, m in zip(got, mock))
                ratio = median(ratios)
                spread = f"{ratios[0]:.2f}–{ratios[-1]:.2f}x" if len(ratios) > 1 else ""
                rows.append([mode, clients, label, f"{median(g[0] for g in got):,.0f}", f"{mock_rate:,.0f}",
                             f"{ratio:.2f}x", spread, f"{targets[mode]:.2f}x",
                             "met" if ratio >= targets[mode] else "not met"])
                cpu_rows.append([mode, clients, f"rafka, {label}", f"{median(g[1] for g in got):.0f}",
                                 f"{median(g[2] for g in got):.0f}"])
    if args.rounds > 1:
        print(f"medians of {args.rounds} rounds; ratio: the median of the rounds' ratios, with their range")
    print(table(rows, ["commits", "clients", "rafka", "rafka/s", "mock/s", "ratio", "range", "target", ""]))
    print()
    print(table(cpu_rows, ["commits", "clients", "broker", "client CPU µs/commit", "broker CPU µs/commit"]))


if __name__ == "__main__":
    main()
