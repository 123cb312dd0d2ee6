"""Requests Kafka answers with an error or a closed connection, sent raw to a real broker:
a failed acks=0 produce, a batch not at offset 0, an incremental fetch without a session,
a leader epoch the partition does not have, KIP-511 client names, unknown coordinator and
endpoint types."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from rafka.protocol.records import SimpleRecord, build_batch
from tests.integration.clients import create_topic, read_confluent
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def _produce(topic: str, partition: int, acks: int, base_offset: int = 0) -> dict[str, object]:
    batch = build_batch([SimpleRecord(b"k", b"v", int(time.time() * 1000), [])], base_offset=base_offset)
    return {"transactional_id": None, "acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}


def test_a_failed_acks_0_produce_closes_the_connection(rafka: Rafka) -> None:
    """Kafka closes the connection when an acks=0 produce fails, so the producer refreshes its
    metadata; a successful one is not answered and the connection stays open."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    with RawClient("127.0.0.1", rafka.port) as raw:
        raw.send_raw(raw.encode(0, 9, _produce(topic, 0, acks=0)))
        assert raw.request(18, 3, {"client_software_name": "raw", "client_software_version": "1"})["error_code"] == 0
        raw.send_raw(raw.encode(0, 9, _produce(topic, 5, acks=0)))  # no partition 5
        with pytest.raises(ConnectionError):
            raw.recv_frame()


def test_a_batch_must_start_at_offset_zero(rafka: Rafka) -> None:
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    with RawClient("127.0.0.1", rafka.port) as raw:
        resp = raw.request(0, 9, _produce(topic, 0, acks=-1, base_offset=100))
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 87  # INVALID_RECORD
    p = Producer({"bootstrap.servers": rafka.bootstrap})
    p.produce(topic, b"x", partition=0)
    assert p.flush(10) == 0
    with RawClient("127.0.0.1", rafka.port) as raw:
        listed = raw.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    assert listed["topics"][0]["partitions"][0]["offset"] == 1, "the refused batch stored nothing"


def _log_end(raw: RawClient, topic: str) -> int:
    resp = raw.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return int(resp["topics"][0]["partitions"][0]["offset"])


def test_transactional_records_need_a_transactional_id(rafka: Rafka) -> None:
    """Kafka fails a Produce of transactional records without a transactional id
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, every partition) and with an empty one
    (INVALID_REQUEST): written unverified, they left a transaction no coordinator knew of,
    holding back every read_committed reader of the partition for good."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    batch = build_batch([SimpleRecord(b"k", b"v", int(time.time() * 1000), [])], producer_id=4242, producer_epoch=0,
                        base_sequence=0, transactional=True)
    with RawClient("127.0.0.1", rafka.port) as raw:
        for tid, code in ((None, 53), ("", 42)):
            resp = raw.request(0, 9, {"transactional_id": tid, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == code
        assert _log_end(raw, topic) == 0


def test_a_partition_named_twice_in_a_produce_is_written_once(rafka: Rafka) -> None:
    """Kafka reads a Produce into a map: the partition's last entry is written and answered,
    once (rafka wrote the first, then answered both entries INVALID_REQUEST)."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    now = int(time.time() * 1000)
    first, last = (build_batch([SimpleRecord(b"k", v, now, [])]) for v in (b"first", b"last"))
    with RawClient("127.0.0.1", rafka.port) as raw:
        resp = raw.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": first}, {"index": 0, "records": last}]}]})
        [answer] = resp["responses"][0]["partition_responses"]
        assert (answer["error_code"], answer["base_offset"]) == (0, 0)
        assert _log_end(raw, topic) == 1
    assert [v for _, _, v in read_confluent(rafka.bootstrap, topic)] == [b"last"]


def test_list_offsets_special_timestamps_need_the_version_that_brought_them(rafka: Rafka) -> None:
    """Kafka's isListOffsetsTimestampUnsupported: max timestamp (-3) from v7, earliest local
    (-4) from v8, latest tiered (-5) from v9; asked of an older version, UNSUPPORTED_VERSION."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)

    def code(version: int, timestamp: int) -> int:
        resp = raw.request(2, version, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
        return int(resp["topics"][0]["partitions"][0]["error_code"])

    with RawClient("127.0.0.1", rafka.port) as raw:
        assert [code(v, -3) for v in (6, 7)] == [35, 0]
        assert [code(v, -4) for v in (7, 8)] == [35, 0]
        assert [code(v, -5) for v in (8, 9)] == [35, 0]
        assert code(1, -1) == code(1, -2) == 0


def test_an_incremental_fetch_without_a_session_is_refused(rafka: Rafka) -> None:
    """rafka never opens fetch sessions (it answers session id 0), so an incremental fetch names
    a session that does not exist: FETCH_SESSION_ID_NOT_FOUND, as Kafka's FetchManager."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
            "log_start_offset": -1}

    def fetch(session_id: int, epoch: int) -> dict[str, object]:
        return raw.request(1, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                   "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                                   "topics": [{"topic": topic, "partitions": [part]}],
                                   "forgotten_topics_data": [], "rack_id": ""})

    with RawClient("127.0.0.1", rafka.port) as raw:
        full = fetch(0, 0)
        assert (full["error_code"], full["session_id"]) == (0, 0)
        assert fetch(0, -1)["error_code"] == 0
        assert fetch(12345, 3)["error_code"] == 70  # FETCH_SESSION_ID_NOT_FOUND


def test_fetch_and_list_offsets_check_the_current_leader_epoch(rafka: Rafka) -> None:
    """Every partition's leader epoch is 0, as Metadata says; Kafka's checkCurrentLeaderEpoch
    answers a newer one UNKNOWN_LEADER_EPOCH and an older one FENCED_LEADER_EPOCH (-1: none)."""
    topic = _name("t")
    create_topic(rafka.bootstrap, topic, 1)
    with RawClient("127.0.0.1", rafka.port) as raw:
        def fetch(epoch: int) -> int:
            part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": epoch,
                    "log_start_offset": -1}
            resp = raw.request(1, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                       "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                       "topics": [{"topic": topic, "partitions": [part]}],
                                       "forgotten_topics_data": [], "rack_id": ""})
            return int(resp["responses"][0]["partitions"][0]["error_code"])

        def list_offsets(epoch: int) -> tuple[int, int]:
            resp = raw.request(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": epoch, "timestamp": -1}]}]})
            p = resp["topics"][0]["partitions"][0]
            return int(p["error_code"]), int(p["leader_epoch"])

        assert [fetch(e) for e in (-1, 0, 5, -2)] == [0, 0, 75, 74]
        assert [list_offsets(e) for e in (-1, 0, 5, -2)] == [(0, 0), (0, 0), (75, -1), (74, -1)]


def test_cluster_apis_refuse_what_kafka_refuses(rafka: Rafka) -> None:
    """ApiVersions v3 checks the client's software name and version (KIP-511); FindCoordinator
    refuses unknown key types; DescribeCluster answers a broker endpoint only (KIP-919)."""
    with RawClient("127.0.0.1", rafka.port) as raw:
        for name, version in (("bad name!", "1.0"), ("", "1.0"), ("client", "x_y")):
            bad = raw.request(18, 3, {"client_software_name": name, "client_software_version": version})
            assert (bad["error_code"], list(bad["api_keys"])) == (42, []), (name, version)
        good = raw.request(18, 3, {"client_software_name": "confluent-kafka-python",
                                   "client_software_version": "2.6.0-rdkafka-2.6.0"})
        assert good["error_code"] == 0 and good["api_keys"]
        found = raw.request(10, 4, {"key_type": 7, "coordinator_keys": ["g"]})
        assert [c["error_code"] for c in found["coordinators"]] == [42]
        assert [c["error_code"] for c in raw.request(10, 4, {"key_type": 1, "coordinator_keys": ["tx"]})[
            "coordinators"]] == [0]
        assert raw.request(60, 1, {"endpoint_type": 1})["error_code"] == 0
        controller = raw.request(60, 1, {"endpoint_type": 2})
        assert controller["error_code"] == 114 and "CONTROLLER" in controller["error_message"]
        assert raw.request(60, 1, {"endpoint_type": 7})["error_code"] == 115
