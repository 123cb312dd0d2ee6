"""Scale-out: shards on tcp:// endpoints, several gateways in front of them.

Every process is a real one (`python -m rafka shard …`, `python -m rafka gateway …`),
as on separate hosts: each has its own data directory and the gateways know the
shards only by their tcp:// endpoints. Each gateway names itself as the only broker,
every partition's leader and every group's coordinator; because all gateways route
a group to the same shard, one group can have members behind different gateways.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from rafka import ids
from tests.integration.clients import (
    Member,
    consumer,
    covers_exactly,
    create_topic,
    fetch_of_one_partition,
    spread_name,
    wait_for,
)
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import ROOT, free_port
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


class Proc:
    """One rafka process with its own log file."""

    def __init__(self, name: str, argv: list[str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (the process writes to it until stop())
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR" and not k.startswith("RAFKA_")}
        self.proc = subprocess.Popen([sys.executable, "-m", "rafka", *argv], cwd=ROOT, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


class Cluster:
    """Shards on tcp:// ports and gateways with their own node ids, ports and metrics ports."""

    def __init__(self, tmp: Path, shards: int = 2) -> None:
        self.tmp = tmp
        self.endpoints = ",".join(f"tcp://127.0.0.1:{free_port()}" for _ in range(shards))
        self.procs: list[Proc] = []
        for k in range(shards):
            self.procs.append(Proc(f"shard-{k}", ["shard", "--id", str(k), "--shard-endpoints", self.endpoints,
                                                  "--data-dir", str(tmp / f"shard-{k}"), "--metrics-port", "0"], tmp))
        self.gateways: list[tuple[int, int, int]] = []  # (node id, port, metrics port)

    def add_gateway(self, node_id: int, port: int | None = None, reuse_port: bool = False,
                    extra: tuple[str, ...] = (), endpoints: str | None = None) -> tuple[int, int, int]:
        port = port or free_port()
        metrics = free_port()
        argv = ["gateway", "--node-id", str(node_id), "--port", str(port), "--metrics-port", str(metrics),
                "--advertised-host", "127.0.0.1", "--advertised-port", str(port),
                "--shard-endpoints", endpoints or self.endpoints, "--data-dir", str(self.tmp / f"gateway-{node_id}")]
        if reuse_port:
            argv.append("--reuse-port")
        argv += extra
        self.procs.append(Proc(f"gateway-{node_id}", argv, self.tmp))
        gw = (node_id, port, metrics)
        self.gateways.append(gw)
        return gw

    def wait_ready(self, port: int, timeout: float = 20.0) -> None:
        """Until the gateway on ``port`` answers and reaches every shard."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.proc.poll() is not None:
                    raise RuntimeError(f"{p.name} exited with {p.proc.returncode}:\n{p.logs()}")
            try:
                with RawClient("127.0.0.1", port, timeout=2) as c:
                    if c.request(16, 4, {"states_filter": []})["error_code"] == 0:
                        return
            except (OSError, ConnectionError):
                pass
            time.sleep(0.1)
        raise TimeoutError("gateway not ready:\n" + "\n".join(f"== {p.name}\n{p.logs()}" for p in self.procs))

    def stop(self) -> dict[str, int]:
        """SIGTERM the gateways, then the shards; their exit codes."""
        codes = {}
        for p in sorted(self.procs, key=lambda p: not p.name.startswith("gateway")):
            codes[p.name] = p.stop()
        return codes


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        codes = c.stop()
    assert all(code == 0 for code in codes.values()), codes  # every process stops cleanly on SIGTERM


def test_each_gateway_names_itself_in_find_coordinator_and_metadata(cluster: Cluster) -> None:
    a = cluster.add_gateway(0)
    b = cluster.add_gateway(1)
    for _node, port, _m in (a, b):
        cluster.wait_ready(port)
    topic = _name("t")
    create_topic(f"127.0.0.1:{a[1]}", topic, 3)
    cluster_ids = set()
    for node, port, _m in (a, b):
        with RawClient("127.0.0.1", port) as c:
            fc = c.request(10, 4, {"key_type": 0, "coordinator_keys": ["g1", "g2"]})
            assert [(x["node_id"], x["host"], x["port"], x["error_code"]) for x in fc["coordinators"]] == [
                (node, "127.0.0.1", port, 0)] * 2
            old = c.request(10, 3, {"key": "g1", "key_type": 0})
            assert (old["node_id"], old["host"], old["port"]) == (node, "127.0.0.1", port)
            md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
        assert [(br["node_id"], br["host"], br["port"]) for br in md["brokers"]] == [(node, "127.0.0.1", port)]
        assert md["controller_id"] == node
        cluster_ids.add(md["cluster_id"])
        [t] = md["topics"]
        assert t["error_code"] == 0  # the topic created through A is in B's catalogue view too
        assert sorted((p["partition_index"], p["leader_id"]) for p in t["partitions"]) == [(0, node), (1, node),
                                                                                          (2, node)]
    # gateways without --cluster-id name the cluster of the shards they serve alike (one cluster to clients)
    assert len(cluster_ids) == 1 and ids.is_cluster_id(cluster_ids.pop())


def test_one_group_with_members_behind_two_gateways(cluster: Cluster) -> None:
    a = cluster.add_gateway(0)
    b = cluster.add_gateway(1)
    for _node, port, _m in (a, b):
        cluster.wait_ready(port)
    boot_a, boot_b = f"127.0.0.1:{a[1]}", f"127.0.0.1:{b[1]}"
    topic, group = _name("t"), _name("g")
    create_topic(boot_a, topic, 4)
    _produce_40(boot_b, topic)

    member_a = Member(boot_a, group, topic, **{"client.id": "member-a"})
    member_b = Member(boot_b, group, topic, **{"client.id": "member-b"})
    try:
        wait_for(lambda: covers_exactly([member_a, member_b], 4) and member_a.assigned and member_b.assigned, 30,
                 "one group split between members behind different gateways")
        assert not member_a.assigned & member_b.assigned
        wait_for(lambda: {r.partition() for r in member_b.records} >= member_b.assigned, 20,
                 "member B reads its partitions through gateway B")
        a_parts = set(member_a.assigned)
        member_a.stop_polling()
        # a member's commit through gateway A (checked against the group's generation on its shard)
        member_a.c.commit(offsets=[TopicPartition(topic, p, 10) for p in sorted(a_parts)], asynchronous=False)
        # read through gateway B: the group's coordinator shard is the same behind both
        admin_b = AdminClient({"bootstrap.servers": boot_b})
        res = admin_b.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
        committed = {tp.partition: tp.offset for tp in res.topic_partitions if tp.offset >= 0}
        assert committed == {p: 10 for p in a_parts}
        desc = admin_b.describe_consumer_groups([group])[group].result(15)
        assert sorted(m.client_id for m in desc.members) == ["member-a", "member-b"]
        assert desc.coordinator.id == 1 and desc.coordinator.port == b[1]
        # the REST admin API of the standalone gateway B sees the same group, with its cgp_ id
        with urllib.request.urlopen(f"http://127.0.0.1:{b[2]}/v1/orgs/default/consumer-groups/{group}",
                                    timeout=5) as resp:
            view = json.load(resp)
        assert view["state"] == "Stable" and view["group_uid"].startswith("cgp_")
        assert sorted(m["client_id"] for m in view["members"]) == ["member-a", "member-b"]
        assert {(o["partition"], o["committed_offset"], o["lag"]) for o in view["offsets"]} == {
            (p, 10, 0) for p in a_parts}
    finally:
        member_a.close()
        member_b.close()


def _produce_40(bootstrap: str, topic: str) -> None:
    """Records b"0".."39" round-robin over a 4-partition topic."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        producer.produce(topic, value=b"%d" % i, partition=i % 4)
    assert producer.flush(15) == 0


def _read(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    reader = consumer(bootstrap, _name("g"))
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        reader.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is not None and msg.error() is None:
                got[msg.partition()].append(msg.value())
        time.sleep(0.5)  # and nothing more arrives
        while (msg := reader.poll(0.1)) is not None:
            if msg.error() is None:
                got[msg.partition()].append(msg.value())
    finally:
        reader.close()
    return got


@pytest.mark.parametrize(("version", "error"), [(12, 3), (13, 100)])
def test_a_fetch_through_a_stale_gateway_of_a_deleted_topic_is_answered_as_kafka_answers(
        cluster: Cluster, version: int, error: int) -> None:
    """Gateway B still caches a topic deleted through gateway A: a fetch of it through B is
    answered UNKNOWN_TOPIC_OR_PARTITION by name, UNKNOWN_TOPIC_ID by id (v13+), as Kafka answers
    for a topic it no longer has, not the NOT_LEADER_OR_FOLLOWER of a topic that still exists."""
    a = cluster.add_gateway(0)
    b = cluster.add_gateway(1, extra=("--topic-metadata-ttl-ms", "120000"))
    for _node, port, _m in (a, b):
        cluster.wait_ready(port)
    topic = _name("stale-fetch")
    create_topic(f"127.0.0.1:{a[1]}", topic, 1)
    with RawClient("127.0.0.1", b[1]) as c:
        req = fetch_of_one_partition(c, topic, version)
        assert c.read_response(1, version)["responses"][0]["partitions"][0]["error_code"] == 0  # B caches it
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{a[1]}"})
        admin.delete_topics([topic])[topic].result(15)
        c.send_raw(c.encode(1, version, req))  # the same fetch again
        assert c.read_response(1, version)["responses"][0]["partitions"][0]["error_code"] == error


def test_a_gateway_with_stale_metadata_cannot_write_into_a_deleted_topic(cluster: Cluster) -> None:
    """Gateway B still maps three names to topics deleted and created again through gateway A. Its
    produces are refused as stale (retriable) whether the new topic already has records or not; the
    client retries on fresh metadata and every acknowledged record is in the new topic. A consumer
    behind B is sent to fresh metadata the same way and reads the new topic."""
    a = cluster.add_gateway(0)
    b = cluster.add_gateway(1, extra=("--topic-metadata-ttl-ms", "120000"))
    for _node, port, _m in (a, b):
        cluster.wait_ready(port)
    boot_a, boot_b = f"127.0.0.1:{a[1]}", f"127.0.0.1:{b[1]}"
    parts = 4
    new_first, stale_first = spread_name("new-first", parts), spread_name("stale-first", parts)
    read_first = spread_name("read-first", parts)
    via_b = Producer({"bootstrap.servers": boot_b, "linger.ms": 0})
    for topic in (new_first, stale_first, read_first):
        create_topic(boot_a, topic, parts)
        for p in range(parts):
            via_b.produce(topic, value=b"first incarnation", partition=p)
    assert via_b.flush(15) == 0  # gateway B now caches the first incarnations for two minutes

    admin = AdminClient({"bootstrap.servers": boot_a})
    for topic in (new_first, stale_first, read_first):
        admin.delete_topics([topic])[topic].result(15)
        create_topic(boot_a, topic, parts)
    via_a = Producer({"bootstrap.servers": boot_a, "linger.ms": 0})
    failed: list[object] = []

    def produce(producer: Producer, topic: str, value: bytes) -> None:
        for p in range(parts):
            producer.produce(topic, value=value, partition=p, on_delivery=lambda err, _m: err and failed.append(err))
        assert producer.flush(30) == 0

    produce(via_b, stale_first, b"via B")  # the stale produce comes before any record of the new topic
    produce(via_a, stale_first, b"via A")
    produce(via_a, new_first, b"via A")  # the new topic has records before the stale produce
    produce(via_b, new_first, b"via B")
    produce(via_a, read_first, b"via A")
    assert failed == []
    assert _read(boot_a, new_first, parts, 2 * parts) == {p: [b"via A", b"via B"] for p in range(parts)}
    assert _read(boot_a, stale_first, parts, 2 * parts) == {p: [b"via B", b"via A"] for p in range(parts)}
    # a consumer behind the stale gateway that names topics (Fetch below v13: kafka-python) reads
    # the new topic, not the deleted one's empty remains
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    kc = KafkaConsumer(bootstrap_servers=boot_b, enable_auto_commit=False, auto_offset_reset="earliest",
                       retry_backoff_ms=100)
    try:
        kc.assign([KTopicPartition(read_first, p) for p in range(parts)])
        kc.seek_to_beginning()
        got: dict[int, list[bytes]] = {p: [] for p in range(parts)}
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < parts and time.monotonic() < deadline:
            for tp, msgs in kc.poll(timeout_ms=500).items():
                got[tp.partition] += [m.value for m in msgs]
        assert got == {p: [b"via A"] for p in range(parts)}
    finally:
        kc.close()


def test_gateways_share_one_port_with_reuse_port(cluster: Cluster) -> None:
    port = free_port()
    cluster.add_gateway(0, port=port, reuse_port=True)
    cluster.add_gateway(1, port=port, reuse_port=True)
    cluster.wait_ready(port)
    deadline = time.monotonic() + 15
    seen: set[int] = set()
    while seen != {0, 1} and time.monotonic() < deadline:
        # the kernel spreads new connections over both listeners; each answers as itself
        with RawClient("127.0.0.1", port) as c:
            if c.request(16, 4, {"states_filter": []})["error_code"] == 0:
                seen.add(c.request(10, 3, {"key": "g", "key_type": 0})["node_id"])
    assert seen == {0, 1}
    assert all(p.proc.poll() is None for p in cluster.procs)


def test_a_gateway_configured_for_another_layout_is_refused_by_the_shards_and_changes_nothing(
        cluster: Cluster) -> None:
    """A gateway whose shard map differs from the shards' (here the endpoints listed in the
    wrong order) would route every group and topic to a shard that does not own it, and find
    "deleted" topics there; it must treat those shards as down instead."""
    good = cluster.add_gateway(0)
    cluster.wait_ready(good[1])
    boot = f"127.0.0.1:{good[1]}"
    topic, group = _name("t"), _name("g")
    create_topic(boot, topic, 4)
    _produce_40(boot, topic)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 7)])])[
        group].result(15)
    wrong = cluster.add_gateway(1, endpoints=",".join(reversed(cluster.endpoints.split(","))))
    log = next(p for p in cluster.procs if p.name == "gateway-1")
    wait_for(lambda: "gateway listening" in log.logs(), 20, "the misconfigured gateway starts anyway")
    assert log.logs().count("not routing to it until they agree") == 2, "both shards are refused"
    shards = [p for p in cluster.procs if p.name.startswith("shard-")]
    wait_for(lambda: all("that gateway will not route to it" in p.logs() for p in shards), 10,
             "each shard logs the disagreement too")
    deadline = time.monotonic() + 2.5  # more than two reconciliation ticks
    while time.monotonic() < deadline:
        with RawClient("127.0.0.1", wrong[1], timeout=2) as c:
            assert c.request(16, 4, {"states_filter": []})["error_code"] != 0, "no shard is reachable"
        time.sleep(0.2)
    assert "dropped the logs" not in log.logs()
    assert sum(map(len, _read(boot, topic, 4, 40).values())) == 40, "every record is still there"
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert [(tp.partition, tp.offset) for tp in res.topic_partitions] == [(0, 7)], "and the group's offset"


def test_a_shard_that_missed_a_deletion_gets_no_ops_from_metadata_served_while_the_catalogue_is_down(
        tmp_path: Path) -> None:
    """Topic D's shard is down when D is deleted through gateway A, A dies with the drop it held
    for that shard, and then the catalogue's shard stalls: gateway B answers from its last known
    metadata, which still has D, and the restarted shard still has D's log. Ops from metadata the
    catalogue confirmed before that shard came back are refused (B used to acknowledge writes
    into the deleted topic, lost once the catalogue was back, and serve its old records)."""
    c = Cluster(tmp_path)
    try:
        catalogue = ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, "\0topics"), 2)
        owner = 1 - catalogue
        while True:
            topic = _name("gone")
            if {ids.shard_for_partition(ids.log_partition(ids.DEFAULT_ORG, topic, p), 2) for p in (0, 1)} == {owner}:
                break
        a = c.add_gateway(0, extra=("--no-auto-create-topics",))
        b = c.add_gateway(1, extra=("--no-auto-create-topics",))
        for gw in (a, b):
            c.wait_ready(gw[1])
        create_topic(f"127.0.0.1:{a[1]}", topic, 2)
        acked: list[Any] = []
        p = Producer({"bootstrap.servers": f"127.0.0.1:{b[1]}", "message.timeout.ms": 6000,
                      "allow.auto.create.topics": False})
        for i in range(4):
            p.produce(topic, b"before", partition=i % 2, on_delivery=lambda e, m: acked.append(e))
        assert p.flush(10) == 0 and acked == [None] * 4  # B has D in its cache
        shard = next(x for x in c.procs if x.name == f"shard-{owner}")
        shard.proc.kill()
        shard.proc.wait()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{a[1]}"})
        admin.delete_topics([topic])[topic].result(15)
        gateway_a = next(x for x in c.procs if x.name == "gateway-0")
        gateway_a.proc.kill()  # with the drop it held for the down shard
        gateway_a.proc.wait()
        stalled = next(x for x in c.procs if x.name == f"shard-{catalogue}")
        os.kill(stalled.proc.pid, signal.SIGSTOP)
        try:
            c.procs.append(Proc(f"shard-{owner}", ["shard", "--id", str(owner), "--shard-endpoints", c.endpoints,
                                                   "--data-dir", str(tmp_path / f"shard-{owner}"),
                                                   "--metrics-port", "0"], tmp_path))
            time.sleep(4)  # B sees the shard back, and marks the stalled catalogue's shard down
            acked.clear()
            for i in range(4):
                p.produce(topic, b"after", partition=i % 2, on_delivery=lambda e, m: acked.append(e))
            p.flush(10)
            assert len(acked) == 4 and all(e is not None for e in acked), f"writes into a deleted topic: {acked}"
            consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{b[1]}", "group.id": _name("g"),
                                 "enable.auto.commit": False})
            consumer.assign([TopicPartition(topic, q, 0) for q in (0, 1)])
            deadline = time.monotonic() + 3
            read = []
            while time.monotonic() < deadline:
                m = consumer.poll(0.2)
                if m is not None and not m.error():
                    read.append(m.value())
            consumer.close()
            assert read == [], "the deleted topic's records were served"
        finally:
            os.kill(stalled.proc.pid, signal.SIGCONT)
    finally:
        c.stop()
