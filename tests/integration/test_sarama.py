"""Sarama (Go, Shopify/sarama 1.22.1) against real rafka processes.

The scenarios live in ``tests/clients/sarama/main.go``; each run prints what the
client saw as one JSON line. The program is built once per session in GOPATH mode
against Debian's ``golang-go`` and ``golang-github-shopify-sarama-dev`` (no module
proxy needed); Sarama's zstd codec also needs cgo, i.e. a C compiler.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.clients import run_scenario
from tests.integration.clients import unique_name as name
from tests.integration.conftest import ROOT, Rafka

pytestmark = pytest.mark.integration

PROGRAM = ROOT / "tests" / "clients" / "sarama"
GOCODE = Path("/usr/share/gocode")  # where Debian's golang-*-dev packages put their sources
SARAMA_SRC = GOCODE / "src" / "github.com" / "Shopify" / "sarama"

NON_EMPTY_GROUP = 68
TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC_OR_PARTITION = 3
UNSUPPORTED_COMPRESSION_TYPE = 76


@dataclass(frozen=True)
class Sarama:
    binary: Path
    cgo: bool  # built with cgo: Sarama's zstd codec works
    version: str  # the Debian package's, e.g. "1.22.1-1"

    def require(self, version: str, why: str) -> None:
        """Fail (not skip) a test that relies on the requests one Sarama release sends."""
        if not self.version.startswith(version):
            pytest.fail(f"this test expects Sarama {version} ({why}); found {self.version or 'an unknown version'}",
                        pytrace=False)

    def run(self, scenario: str, broker: Rafka, timeout: float = 60, **flags: Any) -> dict[str, Any]:
        """Run one scenario against ``broker`` and return the JSON it printed."""
        argv = [str(self.binary), "-brokers", broker.bootstrap, "-scenario", scenario]
        for flag, value in flags.items():
            option = "-" + flag.replace("_", "-")
            if value is True:
                argv.append(option)
            elif value is not False:
                argv.append(f"{option}={value}")
        return run_scenario(argv, f"Sarama {scenario}", broker, timeout)


@pytest.fixture(scope="session")
def sarama(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Sarama:
    go = shutil.which("go")
    if go is None:
        pytest.fail("`go` is not installed: the Sarama tests need Debian's golang-go "
                    "(scripts/test.sh installs golang-go and golang-github-shopify-sarama-dev)", pytrace=False)
    if not SARAMA_SRC.is_dir():
        pytest.fail(f"Sarama's sources are not in {SARAMA_SRC}: install Debian's "
                    "golang-github-shopify-sarama-dev", pytrace=False)
    work = tmp_path_factory.mktemp("sarama")
    # Go's build cache survives sessions in .pytest_cache when there is one: a warm build takes ~1 s
    cache = pytestconfig.cache.mkdir("sarama-gocache") if hasattr(pytestconfig, "cache") else work / "gocache"
    cgo = shutil.which(os.environ.get("CC", "gcc")) is not None
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{GOCODE}:{work / 'gopath'}", "GOFLAGS": "",
           "GOCACHE": str(cache), "CGO_ENABLED": "1" if cgo else "0"}
    binary = work / "sarama"
    out = subprocess.run([go, "build", "-o", str(binary), "main.go"], check=False, cwd=PROGRAM, env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        pytest.fail(f"building {PROGRAM / 'main.go'} failed:\n{out.stderr}", pytrace=False)
    query = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "golang-github-shopify-sarama-dev"],
                           check=False, capture_output=True, text=True)
    return Sarama(binary, cgo, query.stdout.strip() if query.returncode == 0 else "")


def new_topic(sarama: Sarama, broker: Rafka, partitions: int = 3) -> str:
    topic = name("go")
    r = sarama.run("create-topic", broker, topic=topic, partitions=partitions)
    assert r["create_code"] == 0, r["create_error"]
    return topic


def produce(sarama: Sarama, broker: Rafka, topic: str, n: int, **flags: Any) -> dict[str, list[int]]:
    """Produce n keyed messages; return the offsets Sarama got per partition."""
    r = sarama.run("produce", broker, topic=topic, n=n, **flags)
    assert r["error"] == "", r
    return r["offsets"]


def positions(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in records)


def all_positions(offsets: dict[str, list[int]]) -> list[tuple[int, int]]:
    return sorted((int(p), o) for p, offs in offsets.items() for o in offs)


def test_cluster_admin_creates_a_topic_once(rafka: Rafka, sarama: Sarama) -> None:
    topic = name("go")
    r = sarama.run("create-topic", rafka, topic=topic, partitions=3)
    assert (r["create_code"], r["describe_code"], r["partitions"]) == (0, 0, 3)
    assert r["again_code"] == TOPIC_ALREADY_EXISTS, r["again_error"]
    assert len(set(r["leaders"])) == 1 and r["leaders"][0] >= 0, "every partition led by the one broker"


@pytest.mark.parametrize(("compression", "idempotent"),
                         [("none", False), ("gzip", False), ("snappy", False), ("lz4", False), ("snappy", True)])
def test_sync_producer_round_trip_to_partition_consumers(rafka: Rafka, sarama: Sarama, compression: str,
                                                         idempotent: bool) -> None:
    topic = new_topic(sarama, rafka)
    sent = sarama.run("produce", rafka, topic=topic, n=120, compression=compression, idempotent=idempotent)
    assert sent["error"] == "", sent
    for offsets in sent["offsets"].values():
        assert offsets == list(range(len(offsets))), "each partition's offsets are dense from 0"

    r = sarama.run("consume-partitions", rafka, topic=topic, n=120)
    assert not r["timed_out"] and not r["errors"], r["errors"]
    assert positions(r["records"]) == all_positions(sent["offsets"]), "every message once"
    now_ms = time.time() * 1000
    for rec in r["records"]:
        idx = rec["headers"]["idx"]
        assert (rec["key"], rec["value"]) == (f"m-key-{idx}", f"m-value-{idx}")
        assert rec["headers"] == {"idx": idx, "client": "sarama"}
        assert rec["partition"] == sent["key_partition"][rec["key"]]
        assert abs(rec["timestamp_ms"] - now_ms) < 60_000, "the producer's timestamp is kept"
    for p in range(3):  # keyed messages keep their send order within a partition
        idxs = [int(rec["headers"]["idx"]) for rec in r["records"] if rec["partition"] == p]
        assert idxs == sorted(idxs)
    counts = {p: len(o) for p, o in sent["offsets"].items()}
    assert r["high_water_marks"] == {p: counts.get(p, 0) for p in ("0", "1", "2")}
    assert r["bounds"] == {p: {"oldest": 0, "newest": counts.get(p, 0)} for p in ("0", "1", "2")}


def test_zstd_over_produce_v3_is_refused_as_kafka_does(rafka: Rafka, sarama: Sarama) -> None:
    # Sarama 1.22.1 sends zstd batches in Produce v3; Kafka accepts zstd only from
    # Produce v7 (KIP-110) and answers UNSUPPORTED_COMPRESSION_TYPE per partition.
    sarama.require("1.22.", "it sends zstd in Produce v3")
    if not sarama.cgo:
        pytest.fail("Sarama's zstd codec needs a cgo build: install gcc (and libzstd-dev)", pytrace=False)
    topic = new_topic(sarama, rafka)
    r = sarama.run("produce", rafka, topic=topic, n=10, compression="zstd")
    assert r["error_codes"] == [UNSUPPORTED_COMPRESSION_TYPE] * 10, r
    r = sarama.run("consume-partitions", rafka, topic=topic, n=0)
    assert r["bounds"] == {p: {"oldest": 0, "newest": 0} for p in ("0", "1", "2")}, "nothing was stored"


def test_two_group_members_split_partitions_and_consume_every_message_once(rafka: Rafka, sarama: Sarama) -> None:
    topic, group = new_topic(sarama, rafka), name("go-group")
    r = sarama.run("consume-group", rafka, topic=topic, group=group, members=2, produce=300, n=300)
    assert r["settled"] and not r["timed_out"], r["members"]
    assert r["produced"]["error"] == ""
    a, b = r["members"]
    assert not a["errors"] and not b["errors"], (a["errors"], b["errors"])
    assert a["generation"] == b["generation"]
    assert a["claims"] and b["claims"] and sorted(a["claims"] + b["claims"]) == [0, 1, 2]
    assert positions(r["records"]) == all_positions(r["produced"]["offsets"]), "every message exactly once"
    for i, m in enumerate(r["members"]):
        got = {rec["partition"] for rec in r["records"] if rec["member"] == i}
        assert got == set(m["claims"]), "each member consumed exactly its own partitions"


def test_member_leaving_midway_hands_over_without_loss_or_duplicates(rafka: Rafka, sarama: Sarama) -> None:
    topic, group = new_topic(sarama, rafka), name("go-group")
    r = sarama.run("consume-group", rafka, topic=topic, group=group, members=2, produce=300, n=300,
                   leave_after=100, delay="5ms")
    stayer, leaver = r["members"]
    assert r["left"] and not r["timed_out"], r["members"]
    assert r["settled"] and stayer["claims"] == [0, 1, 2], "the remaining member took every partition"
    assert stayer["generation"] > leaver["generation"]
    assert not stayer["errors"] and not leaver["errors"], (stayer["errors"], leaver["errors"])
    by_member = Counter(rec["member"] for rec in r["records"])
    assert by_member[0] and by_member[1]
    assert positions(r["records"]) == all_positions(r["produced"]["offsets"]), \
        "the leaver committed what it marked; the stayer resumed there"


def test_marked_offsets_are_committed_and_a_new_member_resumes(rafka: Rafka, sarama: Sarama) -> None:
    topic, group = new_topic(sarama, rafka), name("go-group")
    offsets = produce(sarama, rafka, topic, 200)
    first = sarama.run("consume-group", rafka, topic=topic, group=group, n=80)
    second = sarama.run("consume-group", rafka, topic=topic, group=group, n=120)
    for r in (first, second):
        assert not r["timed_out"] and not r["members"][0]["errors"], r["members"]
        assert r["members"][0]["claims"] == [0, 1, 2]
    assert first["members"][0]["member_id"] != second["members"][0]["member_id"]
    assert len(first["records"]) == 80 and len(second["records"]) == 120
    assert sorted(positions(first["records"]) + positions(second["records"])) == all_positions(offsets), \
        "no message lost, none consumed twice"
    for p in range(3):  # the new member started each partition at the committed offset
        done = [o for q, o in positions(first["records"]) if q == p]
        rest = [o for q, o in positions(second["records"]) if q == p]
        if rest:
            assert rest[0] == (done[-1] + 1 if done else 0)


def test_offset_manager_commits_and_a_group_member_resumes_there(rafka: Rafka, sarama: Sarama) -> None:
    topic, group = new_topic(sarama, rafka), name("go-group")
    offsets = produce(sarama, rafka, topic, 90)
    assert all(len(offsets[p]) >= 4 for p in ("0", "1", "2"))
    r = sarama.run("offset-manager", rafka, topic=topic, group=group, offsets="0=2,1=3,2=4")
    assert not r["errors"], r["errors"]
    assert r["before"] == {p: {"offset": -2, "metadata": ""} for p in ("0", "1", "2")}, "nothing committed yet"
    assert r["after"] == {"0": {"offset": 2, "metadata": "meta-0"}, "1": {"offset": 3, "metadata": "meta-1"},
                          "2": {"offset": 4, "metadata": "meta-2"}}

    resumed = sarama.run("consume-group", rafka, topic=topic, group=group, n=90 - 9)
    assert not resumed["timed_out"] and not resumed["members"][0]["errors"]
    start = {"0": 2, "1": 3, "2": 4}
    assert positions(resumed["records"]) == [(p, o) for p, o in all_positions(offsets) if o >= start[str(p)]]


def test_consumer_offsets_retention_expires_the_offsets_it_committed(tmp_path: Path, sarama: Sarama) -> None:
    """Sarama sends Consumer.Offsets.Retention as OffsetCommit v2's retention_time: those offsets
    expire that long after their commit, not after the broker's offsets.retention.minutes."""
    sarama.require("1.22.", "a non-zero Consumer.Offsets.Retention commits with OffsetCommit v2")
    broker = Rafka(tmp_path / "data", shards=1, extra=["--offsets-retention-check-interval-ms", "200"]).start()
    try:
        topic = new_topic(sarama, broker)
        short, long = name("go-short"), name("go-long")
        for group, retention in ((short, "2s"), (long, "1h")):
            r = sarama.run("offset-manager", broker, topic=topic, group=group, offsets="0=1", retention=retention)
            assert not r["errors"] and r["after"] == {"0": {"offset": 1, "metadata": "meta-0"}}, r
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        def committed(group: str) -> int:
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
            [tp] = admin.list_consumer_group_offsets([request])[group].result(timeout=10).topic_partitions
            return tp.offset

        deadline = time.monotonic() + 15
        while committed(short) != OFFSET_INVALID and time.monotonic() < deadline:
            time.sleep(0.2)
        assert committed(short) == OFFSET_INVALID, "the offset committed with a 2 s retention is gone"
        assert committed(long) == 1, "the one committed with 1 h is kept"
    finally:
        assert broker.stop() == 0


def test_offset_commit_v1_of_saramas_default_config_is_refused_like_kafka_4(rafka: Rafka, sarama: Sarama) -> None:
    sarama.require("1.22.", "its default retention commits with OffsetCommit v1")
    # With Consumer.Offsets.Retention = 0 (its default) Sarama 1.22 commits with OffsetCommit v1, which
    # Kafka 4 removed (KIP-896): the broker closes the connection and nothing is committed.
    topic, group = new_topic(sarama, rafka), name("go-group")
    r = sarama.run("offset-manager", rafka, topic=topic, group=group, offsets="0=1", retention="0s")
    assert r["errors"] and all("EOF" in e for e in r["errors"]), "the connection was closed, not answered"
    assert r["after"] == {"0": {"offset": -2, "metadata": ""}}


def test_cluster_admin_lists_describes_and_deletes_a_group(rafka: Rafka, sarama: Sarama) -> None:
    topic, group = new_topic(sarama, rafka), name("go-group")
    offsets = produce(sarama, rafka, topic, 30)
    r = sarama.run("group-admin", rafka, topic=topic, group=group, members=2, n=30)
    assert r["settled"] and r["consumed"], r["members"]

    live = r["live"]
    assert (live["listed"], live["listed_protocol_type"]) == (True, "consumer")
    assert (live["code"], live["state"], live["protocol_type"], live["protocol"]) == (0, "Stable", "consumer", "range")
    sessions = {m["member_id"]: sorted(m["claims"]) for m in r["members"]}
    assert {m["member_id"]: sorted(m["assignment"]) for m in live["members"]} == sessions, \
        "described members and assignments are the ones the members hold"
    for m in live["members"]:
        assert (m["client_id"], m["client_host"], m["topics"]) == ("rafka-sarama-test", "/127.0.0.1", [topic])
    assert r["delete_live_code"] == NON_EMPTY_GROUP

    empty = r["empty"]
    assert (empty["listed"], empty["code"], empty["state"], empty["members"]) == (True, 0, "Empty", [])
    assert empty["offsets"] == {p: {"offset": len(offsets.get(p, [])), "metadata": "sarama", "code": 0}
                                for p in ("0", "1", "2")}, "the members committed everything they consumed"
    assert r["delete_code"] == 0

    deleted = r["deleted"]
    assert (deleted["listed"], deleted["code"], deleted["state"], deleted["members"]) == (False, 0, "Dead", [])
    assert deleted["offsets"] == {p: {"offset": -1, "metadata": "", "code": 0} for p in ("0", "1", "2")}


def test_cluster_admin_grows_a_topic_deletes_records_and_the_topic(rafka: Rafka, sarama: Sarama) -> None:
    topic = new_topic(sarama, rafka)
    offsets = produce(sarama, rafka, topic, 60)
    assert len(offsets["0"]) >= 3 and len(offsets["1"]) >= 4
    r = sarama.run("topic-admin", rafka, topic=topic, grow=5, offsets="0=3,1=4")
    assert (r["grow_code"], r["partitions"], r["delete_records_error"]) == (0, 5, ""), r
    assert r["bounds"] == {"0": {"oldest": 3, "newest": len(offsets["0"])},
                           "1": {"oldest": 4, "newest": len(offsets["1"])},
                           "2": {"oldest": 0, "newest": len(offsets["2"])},
                           "3": {"oldest": 0, "newest": 0}, "4": {"oldest": 0, "newest": 0}}
    assert r["delete_topic_code"] == 0
    assert r["describe_after_delete_code"] == UNKNOWN_TOPIC_OR_PARTITION
