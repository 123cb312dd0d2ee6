"""`rafka serve` as a real subprocess, reached by every client library."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rafka import ids
from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def test_confluent_admin_lists_topics_and_describes_cluster(rafka: Rafka) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    md = admin.list_topics(timeout=10)
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [(0, "127.0.0.1", rafka.port)]
    cluster = admin.describe_cluster().result(timeout=10)
    assert cluster.controller.port == rafka.port
    assert [n.port for n in cluster.nodes] == [rafka.port]


def test_kafka_python_without_version_pin(rafka: Rafka) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=rafka.bootstrap, request_timeout_ms=10000)
    try:
        cluster = admin.describe_cluster()
        assert cluster["brokers"][0]["port"] == rafka.port
        # FindCoordinator then OffsetFetch, routed to the owning shard: a new group has no offsets
        assert admin.list_group_offsets("g-kp") == {"g-kp": {}}
    finally:
        admin.close()


def test_aiokafka_bootstraps_and_finds_coordinator(rafka: Rafka) -> None:
    import aiokafka
    from aiokafka.admin import AIOKafkaAdminClient

    async def go() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=rafka.bootstrap)
        await admin.start()
        try:
            groups = await admin.list_consumer_groups()
            assert isinstance(groups, list)
        finally:
            await admin.close()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=rafka.bootstrap)
        await consumer.start()
        try:
            assert isinstance(await consumer.topics(), set)
        finally:
            await consumer.stop()

    asyncio.run(go())


def test_kcat_lists_metadata(rafka: Rafka) -> None:
    out = subprocess.run(["kcat", "-b", rafka.bootstrap, "-L", "-m", "10"], check=False, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"broker 0 at 127.0.0.1:{rafka.port} (controller)" in out.stdout


def test_api_versions_lists_only_registered_apis(rafka: Rafka) -> None:
    with RawClient("127.0.0.1", rafka.port) as c:
        resp = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
    assert resp["error_code"] == 0
    assert keys[11] == (0, 9) and keys[14] == (0, 5) and keys[12] == (0, 4)
    assert keys[10] == (0, 6) and keys[18] == (0, 4)
    assert 0 not in keys or keys[0][0] >= 3  # never advertises what Kafka 4 removed


def test_unsupported_api_versions_version_answers_in_v0_format(rafka: Rafka) -> None:
    with RawClient("127.0.0.1", rafka.port) as c:
        # ApiVersions v9 does not exist; the header is v2 but the reply must be v0
        frame = struct.pack(">hhi", 18, 9, 77) + struct.pack(">h", 1) + b"x" + b"\x00" + b"\x00\x00\x00"
        c.send_raw(struct.pack(">i", len(frame)) + frame)
        resp = c.read_response(18, 0)
    assert resp["_correlation_id"] == 77
    assert resp["error_code"] == 35
    assert any(k["api_key"] == 18 and k["max_version"] == 4 for k in resp["api_keys"])


def test_find_coordinator_batched_keys(rafka: Rafka) -> None:
    with RawClient("127.0.0.1", rafka.port) as c:
        resp = c.request(10, 4, {"key_type": 0, "coordinator_keys": ["a", "b", "c"]})
    assert [(x["key"], x["node_id"], x["port"], x["error_code"]) for x in resp["coordinators"]] == [
        (k, 0, rafka.port, 0) for k in ("a", "b", "c")]


def test_pipelined_requests_answer_in_order(rafka: Rafka) -> None:
    with RawClient("127.0.0.1", rafka.port) as c:
        # interleave gateway-local and shard-routed requests, all sent before reading any reply
        plan = [(10, 3, {"key": "g", "key_type": 0}), (16, 4, {"states_filter": []}),
                (18, 3, {"client_software_name": "t", "client_software_version": "1"})] * 30
        c.send_raw(b"".join(c.encode(k, v, b, correlation_id=i) for i, (k, v, b) in enumerate(plan)))
        got = [c.read_response(k, v)["_correlation_id"] for k, v, _b in plan]
    assert got == list(range(len(plan)))


def _expect_closed(sock: socket.socket) -> None:
    sock.settimeout(10)
    try:
        assert sock.recv(1) == b""
    except ConnectionResetError:
        pass


@pytest.mark.parametrize("payload", [
    b"\x00" * 3,  # truncated size prefix, then close from our side below
    struct.pack(">i", 2**31 - 1) + b"junk",  # 2 GiB size prefix
    struct.pack(">i", -1),
    struct.pack(">i", 8) + struct.pack(">hhi", 999, 0, 1),  # unknown API key
    struct.pack(">i", 14) + struct.pack(">hhi", 11, 5, 1) + b"\x00\x01c" + b"\x00\x09g",  # JoinGroup, corrupt body
    struct.pack(">i", 6) + b"\x00\x0b\x00",  # truncated header
])
def test_bad_input_closes_only_that_connection(rafka: Rafka, payload: bytes) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    assert admin.list_topics(timeout=10).brokers
    bad = socket.create_connection(("127.0.0.1", rafka.port))
    bad.sendall(payload)
    if len(payload) >= 8:
        _expect_closed(bad)
    bad.close()
    for _ in range(3):  # the broker keeps serving other clients
        assert admin.list_topics(timeout=10).brokers
    with RawClient("127.0.0.1", rafka.port) as c:
        assert c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == 0


def test_the_cluster_id_is_the_data_directory_s_as_kafka_s_is_its_log_dirs(tmp_path: Path) -> None:
    """Kafka's cluster id is made once per cluster (``kafka-storage format``) and kept in
    ``meta.properties``: a rafka cluster's is made at random on its first start, kept under its data
    directory and the same after a restart; two clusters do not share one (every rafka reported
    ``rafka-cluster``); ``--cluster-id`` names it, and one that is not a Kafka Uuid is refused."""
    from confluent_kafka.admin import AdminClient

    def cluster_id(broker: Rafka) -> str:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        return admin.describe_cluster(request_timeout=10).result(10).cluster_id

    first = Rafka(tmp_path / "one", shards=1).start()
    try:
        seen = cluster_id(first)
        assert seen == (tmp_path / "one" / "cluster.id").read_text().strip() and ids.is_cluster_id(seen)
        with RawClient("127.0.0.1", first.port) as c:
            assert c.request(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})["cluster_id"] == seen
    finally:
        first.stop()
    again = Rafka(tmp_path / "one", shards=1).start()
    other = Rafka(tmp_path / "two", shards=1).start()
    named = Rafka(tmp_path / "three", shards=1, extra=["--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg"]).start()
    try:
        assert cluster_id(again) == seen and cluster_id(other) not in (seen, "rafka-cluster")
        assert cluster_id(named) == "MkU3OEVBNTcwNTJENDM2Qg"
    finally:
        for broker in (again, other, named):
            broker.stop()
    for given, where, message in (("rafka-cluster", "four", "--cluster-id must be a Kafka Uuid"),
                                  ("MkU3OEVBNTcwNTJENDM2Qg", "one", f"belongs to cluster {seen}, not --cluster-id")):
        bad = subprocess.run([sys.executable, "-m", "rafka", "serve", "--cluster-id", given, "--data-dir",
                              str(tmp_path / where)], check=False, capture_output=True, text=True, timeout=30)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr


def test_processes_are_named_and_a_dead_shard_is_restarted(fresh_rafka: Rafka) -> None:
    import os
    import signal

    names = fresh_rafka.children()
    assert {"rafka-gateway", "rafka-shard-0", "rafka-shard-1"} <= set(names)
    os.kill(names["rafka-shard-1"], signal.SIGKILL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        now = fresh_rafka.children()
        if now.get("rafka-shard-1") not in (None, names["rafka-shard-1"]):
            break
        time.sleep(0.1)
    else:
        pytest.fail("shard 1 was not restarted")
    fresh_rafka.wait_ready(15)
    assert "rafka-shard-1" in fresh_rafka.logs() and "restarting" in fresh_rafka.logs()


def test_a_stalled_shard_shows_its_loop_lag_to_the_scrapes_after_it(fresh_rafka: Rafka) -> None:
    """A shard whose loop stood still for 3 s still shows that lag seconds later, when the next
    Prometheus scrape comes, not only during the second after the stall."""
    import os
    import signal

    from tests.ops.opsutil import sample_value, scrape

    shard = fresh_rafka.children()["rafka-shard-1"]
    os.kill(shard, signal.SIGSTOP)
    time.sleep(3)
    os.kill(shard, signal.SIGCONT)
    time.sleep(5)
    lag = sample_value(scrape(fresh_rafka.metrics_port), "rafka_shard_loop_lag_seconds", 'shard="1"')
    assert lag is not None and lag >= 1.5, lag  # the stall, less what of its 1 s timer had run before it


def test_sigterm_stops_everything_within_ten_seconds(fresh_rafka: Rafka) -> None:
    start = time.monotonic()
    code = fresh_rafka.stop()
    assert code == 0
    assert time.monotonic() - start < 10


def test_authorized_operations_when_asked_for(rafka: Rafka) -> None:
    """Without ACLs a client may do everything in its organisation: asked for its authorized
    operations, it gets every operation Kafka's ACLs support on the resource, as from a Kafka
    without an authorizer; not asked, none (null)."""
    from confluent_kafka import Consumer, TopicCollection, TopicPartition
    from confluent_kafka.admin import AclOperation as Op
    from confluent_kafka.admin import AdminClient

    from tests.integration.clients import create_topic
    from tests.integration.clients import unique_name as _name

    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 1)
    c = Consumer({"bootstrap.servers": rafka.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    c.close()
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                                  Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(10)
    assert set(described.authorized_operations) == {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                                    Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    g = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(10)
    assert set(g.authorized_operations) == {Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert admin.describe_consumer_groups([group])[group].result(10).authorized_operations is None
    assert admin.describe_cluster().result(10).authorized_operations is None


def test_metadata_names_and_internal_topics_as_kafka(rafka: Rafka) -> None:
    """Metadata answers an empty name INVALID_TOPIC_EXCEPTION and a name asked twice once;
    ``__consumer_offsets`` is internal, and a producer cannot write to it (INVALID_TOPIC_EXCEPTION)."""
    import uuid

    from confluent_kafka import KafkaError, Producer

    none = uuid.UUID(int=0)
    with RawClient("127.0.0.1", rafka.port) as c:
        resp = c.request(3, 12, {"topics": [{"name": n, "topic_id": none} for n in ("", "__consumer_offsets",
                                                                                    "__consumer_offsets")],
                                 "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
    assert [(t["name"], t["error_code"], t["is_internal"]) for t in resp["topics"]] == [
        ("", 17, False), ("__consumer_offsets", 0, True)]
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": rafka.bootstrap})
    p.produce("__consumer_offsets", b"x", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(10)
    assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_EXCEPTION]
