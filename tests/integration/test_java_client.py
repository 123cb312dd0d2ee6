"""Apache Kafka's own Java client (kafka-clients 4.3.0) against real rafka processes.

The scenarios live in ``tests/clients/java/Scenarios.java``; each run prints what the
client saw as one JSON line. ``scripts/java-client.sh`` fetches the client's jars (the
fixture runs it when they are missing) and the program is compiled once per session with
the machine's ``javac``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.clients import create_topic, run_scenario
from tests.integration.clients import unique_name as name
from tests.integration.conftest import ROOT, Rafka
from tests.integration.test_security import USERS, SecureRafka

pytestmark = pytest.mark.integration

PROGRAM = ROOT / "tests" / "clients" / "java"
LIBS = PROGRAM / "libs"


@dataclass(frozen=True)
class Java:
    classpath: str

    @property
    def command(self) -> list[str]:
        """The JVM (its quick-start flags: a scenario runs for seconds) on ``Scenarios``."""
        return ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", self.classpath, "Scenarios"]

    def run(self, scenario: str, broker: Rafka, timeout: float = 90, **args: Any) -> dict[str, Any]:
        """Run one scenario against ``broker`` and return the JSON it printed."""
        argv = [*self.command, broker.bootstrap, scenario, *(f"{k}={v}" for k, v in args.items())]
        return run_scenario(argv, f"Java {scenario}", broker, timeout)


@pytest.fixture(scope="session")
def java(tmp_path_factory: pytest.TempPathFactory) -> Java:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.fail("`javac` is not installed: the Java client tests need a JDK "
                    "(scripts/test.sh installs Debian's default-jdk-headless)", pytrace=False)
    if not (LIBS / "kafka-clients-4.3.0.jar").is_file():
        fetched = subprocess.run(["bash", str(ROOT / "scripts" / "java-client.sh")], check=False,
                                 capture_output=True, text=True, timeout=600)
        if fetched.returncode != 0:
            pytest.fail(f"fetching the Java client failed:\n{fetched.stderr[-4000:]}", pytrace=False)
    classes = tmp_path_factory.mktemp("java")
    jars = f"{LIBS}/*"
    out = subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", jars, str(PROGRAM / "Scenarios.java")],
                         check=False, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        pytest.fail(f"compiling Scenarios.java failed:\n{out.stderr}", pytrace=False)
    return Java(f"{jars}:{classes}")


def _every_record_once(records: list[dict[str, Any]], offsets: dict[str, list[int]]) -> None:
    """``records`` are what was produced at ``offsets``, each once, with its key, value and header."""
    assert sorted((r["partition"], r["offset"]) for r in records) == \
        sorted((int(p), o) for p, offs in offsets.items() for o in offs), "every record exactly once"
    for r in records:
        assert (r["key"], r["value"]) == (f"k-{r['idx']}", f"v-{r['idx']}"), r


def test_admin_creates_describes_alters_and_deletes_a_topic(rafka: Rafka, java: Java) -> None:
    topic = name("java")
    r = java.run("admin", rafka, topic=topic, partitions=3)
    assert r["cluster_id"] and r["nodes"] == 1 and r["controller"] >= 0
    assert r["again"] == "TopicExistsException" and r["listed"]
    assert r["partitions"] == 3 and len(set(r["leaders"])) == 1 and r["leaders"][0] >= 0
    assert r["topic_id"] != "AAAAAAAAAAAAAAAAAAAAAA" and r["name_by_id"] == topic
    assert (r["retention_ms"], r["retention_source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert r["retention_ms_altered"] == "7200000" and r["partitions_after"] == 5
    assert r["deleted"] and r["describe_deleted"] == "UnknownTopicOrPartitionException"


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_idempotent_producers_of_every_codec_then_a_group_consumer_reads_every_record_and_commits(
        rafka: Rafka, java: Java, protocol: str) -> None:
    topic, group = name("java"), name("java-group")
    sent = java.run("produce", rafka, topic=topic, create=3, n=300, compression="none,gzip,snappy,lz4,zstd")["offsets"]
    assert sum(map(len, sent.values())) == 300
    for offsets in sent.values():
        assert offsets == list(range(len(offsets))), "each partition's offsets are dense from 0"
    got = java.run("consume", rafka, topic=topic, group=group, protocol=protocol, n=300)
    _every_record_once(got["records"], sent)
    assert got["assignment"] == [0, 1, 2] and got["generation"] >= 1 and got["member_id"]
    assert got["committed"] == {p: len(offs) for p, offs in sent.items()}, "commitSync stored the positions"


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_two_members_share_the_partitions_and_read_every_record_once(rafka: Rafka, java: Java,
                                                                     protocol: str) -> None:
    topic, group = name("java"), name("java-group")
    create_topic(rafka.bootstrap, topic, 3)
    r = java.run("members", rafka, topic=topic, group=group, protocol=protocol, n=400, partitions=3)
    a, b = r["members"]
    assert "error" not in a and "error" not in b, (a, b)
    assert r["settled"], "both members were assigned every partition between them"
    assert a["assignment"] and b["assignment"] and sorted(a["assignment"] + b["assignment"]) == [0, 1, 2]
    assert a["generation"] == b["generation"] or protocol == "consumer", "classic members share a generation"
    _every_record_once(r["records"], r["produced"])
    for i, member in enumerate(r["members"]):
        read = {rec["partition"] for rec in r["records"] if rec["member"] == i}
        assert read == set(member["assignment"]), "each member read exactly its own partitions"


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_pattern_subscription_takes_in_a_topic_created_later(rafka: Rafka, java: Java, protocol: str) -> None:
    """A KIP-848 member sends a SubscriptionPattern to the broker (ConsumerGroupHeartbeat's
    SubscribedTopicRegex), which resolves it against the topics; a classic member matches its
    Pattern against its metadata, refreshed here each second (metadata.max.age.ms)."""
    prefix = name("re")
    r = java.run("pattern", rafka, prefix=prefix, group=name("java-group"), protocol=protocol,
                 **({"metadata_max_age_ms": 1000} if protocol == "classic" else {}))
    assert r["records"] == {f"{prefix}-{t}": [f"first-{prefix}-{t}"] for t in "abc"}, "not other-…"
    assert r["assignment"] == [f"{prefix}-a:0", f"{prefix}-b:0", f"{prefix}-b:1", f"{prefix}-c:0"]


def test_transactions_commit_abort_and_send_offsets(rafka: Rafka, java: Java) -> None:
    topic, group = name("java"), name("java-txn")
    create_topic(rafka.bootstrap, topic, 1)
    r = java.run("transactions", rafka, topic=topic, group=group, txn_id=name("txn"))
    committed = [f"commit-{t}-{i}" for t in (0, 2) for i in range(10)]
    assert r["read_committed"] == committed, "read_committed skips the aborted transaction"
    assert r["read_uncommitted"] == committed[:10] + [f"abort-1-{i}" for i in range(10)] + committed[10:]
    assert r["group_offset"] == 42, "sendOffsetsToTransaction committed with the transaction"


@pytest.mark.parametrize(("protocol", "kind"), [("classic", "Classic"), ("consumer", "Consumer")])
def test_admin_lists_describes_and_changes_a_groups_offsets(rafka: Rafka, java: Java, protocol: str,
                                                            kind: str) -> None:
    topic, group = name("java"), name("java-group")
    sent = java.run("produce", rafka, topic=topic, create=2, n=100)["offsets"]
    java.run("consume", rafka, topic=topic, group=group, protocol=protocol, n=100)
    r = java.run("group-admin", rafka, topic=topic, group=group)
    assert r["listed"] == [{"type": kind, "state": "Empty", "protocol": "consumer"}]
    assert (r["state"], r["type"], r["members"], r["coordinator"]) == ("Empty", kind, 0, 0)
    assert r["offsets"] == {f"{topic}:{p}": len(offs) for p, offs in sent.items()}
    assert r["altered"] == 1 and r["after_delete_offset"] is False
    assert r["list_offsets"] == {"earliest": 0, "latest": len(sent["0"])}
    assert r["earliest_after_delete_records"] == 2 and r["group_deleted"]


def test_sasl_plain_and_scram_users_see_only_their_organisations_topics(tmp_path: Path, java: Java) -> None:
    # alice: SASL/PLAIN in organisation acme; bob: SCRAM (salted credentials only) in globex
    broker = SecureRafka(tmp_path / "data", USERS).start()
    alice = {"sasl_mechanism": "PLAIN", "user": "alice", "password": "alice-pw"}
    bob = {"sasl_mechanism": "SCRAM-SHA-512", "user": "bob", "password": "bob-pw"}
    try:
        topic = name("shared")  # the same name in two organisations: two topics
        sent_a = java.run("produce", broker, topic=topic, create=1, n=50, **alice)["offsets"]
        sent_b = java.run("produce", broker, topic=topic, create=2, n=70, **bob)["offsets"]
        assert sent_a == {"0": list(range(50))}, "alice's topic holds only her records"
        got_a = java.run("consume", broker, topic=topic, group="g", n=50, **alice)
        got_b = java.run("consume", broker, topic=topic, group="g", n=70, **bob)
        _every_record_once(got_a["records"], sent_a)
        _every_record_once(got_b["records"], sent_b)
        assert got_a["assignment"] == [0] and got_b["assignment"] == [0, 1], "each its own topic and group"
        wrong = {**bob, "password": "nope"}
        argv = [*java.command, broker.bootstrap, "produce", f"topic={topic}", "n=1",
                *(f"{k}={v}" for k, v in wrong.items())]
        failed = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=90)
        assert failed.returncode != 0 and "SaslAuthenticationException" in failed.stderr, failed.stderr[-2000:]
    finally:
        broker.stop()
