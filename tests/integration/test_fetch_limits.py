"""A fetch over partitions on several shards is answered as Kafka answers one request:
one max_bytes budget, min_bytes weighed against the whole answer, and an error anywhere
ends the long poll (ReplicaManager.fetchMessages / readFromLog)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from rafka import ids
from tests.integration.clients import create_topic, fetch_partition, fetch_request, wait_for
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def _two_shards_topic(rafka: Rafka, batches: int) -> tuple[str, int, int]:
    """A topic with a partition on each of two shards, each holding ``batches`` batches of ~570 bytes."""
    while True:  # a name whose 8 partitions are not all on one shard (1 in 128 are)
        topic = _name("fl")
        owner = {p: ids.shard_for_partition(ids.log_partition(ids.DEFAULT_ORG, topic, p), rafka.shards) for p in range(8)}
        if {0, 1} <= set(owner.values()):
            break
    create_topic(rafka.bootstrap, topic, 8)
    a = next(p for p in range(8) if owner[p] == 0)
    b = next(p for p in range(8) if owner[p] == 1)
    producer = Producer({"bootstrap.servers": rafka.bootstrap, "linger.ms": 0})
    for _ in range(batches):
        for p in (a, b):
            producer.produce(topic, b"v" * 500, partition=p)
            producer.flush(10)  # one record per batch
    return topic, a, b


def _fetch(rafka: Rafka, topic: str, offsets: dict[int, int], **limits: Any) -> tuple[dict[int, Any], float]:
    req = fetch_request([{"topic": topic, "partitions": [fetch_partition(p, o) for p, o in offsets.items()]}], **limits)
    with RawClient("127.0.0.1", rafka.port) as raw:
        start = time.monotonic()
        resp = raw.request(1, 11, req)
        took = time.monotonic() - start
    return {q["partition_index"]: q for q in resp["responses"][0]["partitions"]}, took


def test_max_bytes_is_one_budget_across_shards(rafka: Rafka) -> None:
    topic, a, b = _two_shards_topic(rafka, 3)
    got, _ = _fetch(rafka, topic, {a: 0, b: 0}, max_bytes=1500)
    first, second = len(got[a]["records"]), len(got[b]["records"])
    assert first > 0, "the first partition with data is answered"
    assert first + second <= 1500, f"{first} + {second} bytes answered for max_bytes 1500"
    whole, _ = _fetch(rafka, topic, {a: 0, b: 0})
    assert len(whole[a]["records"]) > first and len(whole[b]["records"]) > second, "all of it fits a larger budget"


def test_min_bytes_is_weighed_against_the_whole_answer(rafka: Rafka) -> None:
    topic, a, b = _two_shards_topic(rafka, 1)
    got, took = _fetch(rafka, topic, {a: 0, b: 0}, min_bytes=1000, max_wait=4000)
    assert got[a]["records"] and got[b]["records"]
    assert took < 2.0, f"~1,140 bytes were ready for min_bytes 1000, yet the fetch waited {took:.1f}s"


def test_a_fetch_is_not_answered_below_min_bytes_before_max_wait(rafka: Rafka) -> None:
    # Kafka's DelayedFetch sums the bytes of every partition: ~570 ready on one shard and none on
    # the other is below min_bytes 1000, so the fetch waits out max_wait (it used to answer at once)
    topic, a, b = _two_shards_topic(rafka, 1)
    got, took = _fetch(rafka, topic, {a: 0, b: 1}, min_bytes=1000, max_wait=2500)
    assert got[a]["records"] and not got[b]["records"]
    assert took >= 2.0, f"~570 bytes answered for min_bytes 1000 after {took:.1f}s, before max_wait 2.5s"
    # ... and it is answered as soon as the other shard makes up the difference
    producer = Producer({"bootstrap.servers": rafka.bootstrap, "linger.ms": 0})
    # ~450 bytes: below b's own share (500) but enough with a's ~570, once b is told what is left
    timer = threading.Timer(1.0, lambda: (producer.produce(topic, b"v" * 380, partition=b), producer.flush(10)))
    timer.start()
    try:
        got, took = _fetch(rafka, topic, {a: 0, b: 1}, min_bytes=1000, max_wait=8000)
    finally:
        timer.join()
    sizes = len(got[a]["records"]), len(got[b]["records"])
    assert sizes[1] < 500 and sum(sizes) >= 1000, sizes  # the premise: only the two together reach min_bytes
    assert took < 6.0, f"min_bytes was reached ~1s in, yet the fetch waited {took:.1f}s (max_wait 8s)"


def test_an_error_on_one_shard_ends_the_long_poll(rafka: Rafka) -> None:
    topic, a, b = _two_shards_topic(rafka, 1)
    got, took = _fetch(rafka, topic, {a: 999, b: 1}, max_wait=4000)
    assert got[a]["error_code"] == 1 and got[b]["error_code"] == 0  # OFFSET_OUT_OF_RANGE
    assert took < 2.0, f"the out-of-range offset was answered after {took:.1f}s, not at once"


def test_a_fetch_of_nothing_is_answered_at_once(rafka: Rafka) -> None:
    req = fetch_request([], max_wait=4000)
    with RawClient("127.0.0.1", rafka.port) as raw:
        start = time.monotonic()
        resp = raw.request(1, 11, req)
        took = time.monotonic() - start
    assert resp["error_code"] == 0 and resp["responses"] == []
    assert took < 0.4, f"an empty fetch waited {took:.2f}s (Kafka answers it at once)"


def test_min_bytes_zero_is_answered_at_once(rafka: Rafka) -> None:
    topic, a, _ = _two_shards_topic(rafka, 1)
    got, took = _fetch(rafka, topic, {a: 1}, min_bytes=0, max_wait=3000)
    assert got[a]["error_code"] == 0 and not got[a]["records"]
    assert took < 1.0, f"a fetch with min_bytes 0 waited {took:.1f}s (Kafka answers it at once)"


def test_a_stalled_or_down_shard_neither_holds_a_fetch_nor_ends_its_long_poll(tmp_path: Path) -> None:
    """A fetch only reads: the partitions of a shard that does not answer get a retriable error
    soon after max_wait, and the other shard's long poll runs its course meanwhile."""
    broker = Rafka(tmp_path / "data", shards=2).start()
    try:
        topic, on0, on1 = _two_shards_topic(broker, 1)
        catalogue = ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, "\0topics"), 2)
        victim = 1 - catalogue  # the catalogue's shard must answer the topic lookups
        a, b = (on0, on1) if victim == 1 else (on1, on0)
        pid = broker.children()[f"rafka-shard-{victim}"]
        os.kill(pid, signal.SIGSTOP)  # stalled: not yet marked down
        try:
            got, took = _fetch(broker, topic, {a: 1, b: 0}, max_wait=500)
            assert got[b]["error_code"] != 0 and got[a]["error_code"] == 0
            assert took < 5, f"a fetch waited {took:.1f}s for a stalled shard"
            wait_for(lambda: _fetch(broker, topic, {b: 0})[1] < 0.5, 15, "the gateway marks the shard down")
            got, took = _fetch(broker, topic, {a: 1, b: 0}, max_wait=1000)
            assert got[b]["error_code"] != 0
            assert took > 0.8, f"the down shard's error ended the long poll at once ({took:.2f}s): clients spin"
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        broker.stop()


def test_a_partition_error_of_the_request_itself_ends_the_long_poll(rafka: Rafka) -> None:
    """Kafka answers a fetch at once when any partition has an error: here an unknown partition
    index and a leader epoch the partition does not have."""
    topic, a, _ = _two_shards_topic(rafka, 1)
    got, took = _fetch(rafka, topic, {a: 1, 99: 0}, max_wait=3000)
    assert got[99]["error_code"] == 3 and took < 1.0, f"an unknown partition waited {took:.1f}s"
    req = fetch_request([{"topic": topic, "partitions": [fetch_partition(a, 1, current_leader_epoch=7)]}],
                        max_wait=3000)
    with RawClient("127.0.0.1", rafka.port) as raw:
        start = time.monotonic()
        resp = raw.request(1, 11, req)
        took = time.monotonic() - start
    assert resp["responses"][0]["partitions"][0]["error_code"] == 75 and took < 1.0


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return total / 1024


def test_pipelined_fetches_are_served_one_at_a_time(fresh_rafka: Rafka) -> None:
    """A client that pipelines Fetches, reading the answers late, cannot make the gateway and the
    shard build them all at once (Kafka serves a connection's requests one by one): 200 Fetches
    of a 1 MB partition left unread grow the processes by far less than 200 MB, and once read
    every answer is whole. Built at once they held the shard past its ping deadline, and every
    one of them failed NOT_LEADER_OR_FOLLOWER."""
    topic = _name("pipe")
    create_topic(fresh_rafka.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": fresh_rafka.bootstrap, "linger.ms": 50, "compression.type": "none"})
    for _ in range(1000):
        producer.produce(topic, os.urandom(1000), partition=0)
    assert producer.flush(15) == 0
    req = fetch_request([{"topic": topic, "partitions": [fetch_partition(0)]}])
    children = fresh_rafka.children()
    pids = [children["rafka-gateway"], children["rafka-shard-0"], children["rafka-shard-1"]]
    with RawClient("127.0.0.1", fresh_rafka.port, timeout=30) as raw:
        assert len(raw.request(1, 11, req)["responses"][0]["partitions"][0]["records"]) > 900_000
        before = _rss_mb(pids)
        raw.send_raw(b"".join(raw.encode(1, 11, req) for _ in range(200)))
        time.sleep(3)
        grown = _rss_mb(pids) - before
        answers = [raw.read_response(1, 11)["responses"][0]["partitions"][0] for _ in range(200)]
    assert grown < 60, f"{grown:.0f} MB more for 200 unread answers of ~1 MB"
    assert {(a["error_code"], len(a["records"])) for a in answers} == {(0, len(answers[0]["records"]))}
    assert len(answers[0]["records"]) > 900_000
