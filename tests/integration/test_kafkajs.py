"""KafkaJS against a real `rafka serve`: a pure JavaScript client with its own protocol code.

The scenarios live in ``tests/clients/kafkajs/scenario.js`` and print what the client
saw as JSON; ``scripts/test.sh`` installs KafkaJS there with ``npm ci``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.clients import unique_name as name
from tests.integration.conftest import ROOT, Rafka
from tests.integration.test_security import USERS, SecureRafka

pytestmark = pytest.mark.integration

SCENARIOS = ROOT / "tests" / "clients" / "kafkajs"


def kafkajs(scenario: str, broker: Rafka, timeout: float = 60, **options: Any) -> dict[str, Any]:
    """Run one scenario against ``broker`` and return the JSON it printed."""
    node = shutil.which("node")
    assert node, "Node.js is needed for the KafkaJS tests (scripts/test.sh installs it)"
    assert (SCENARIOS / "node_modules" / "kafkajs").is_dir(), \
        f"KafkaJS is not installed: run `npm ci --prefix {SCENARIOS}` (scripts/test.sh does)"
    out = subprocess.run([node, "scenario.js", scenario, broker.bootstrap, json.dumps(options)], cwd=SCENARIOS,
                         check=False, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"KafkaJS {scenario} failed:\n{out.stderr}\nrafka log:\n{broker.logs()}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_group_shares_partitions_commits_and_resumes(rafka: Rafka) -> None:
    topic, group = name("js"), name("js-group")
    r = kafkajs("group", rafka, topic=topic, groupId=group, count=40)

    keys = sorted(m["key"] for m in r["seen"])
    assert keys == sorted(f"k{i}" for i in range(40)), "every record once, none twice"
    assert all(m["seq"] == m["key"][1:] and m["value"] == "v" + m["key"][1:] for m in r["seen"]), "values and headers intact"
    a, b = r["assignments"]
    assert a and b and sorted(a + b) == [0, 1, 2, 3], "the two members split the four partitions"
    assert r["described"] == {"state": "Stable", "protocolType": "consumer", "protocol": "RoundRobinAssigner",
                              "members": ["rafka-kafkajs", "rafka-kafkajs"]}
    assert r["listed"] == [{"groupId": group, "protocolType": "consumer"}]

    # the members committed what they consumed before leaving: offsets equal the high watermarks
    committed = {p["partition"]: p["offset"] for p in r["offsets"]}
    assert committed == {p["partition"]: p["high"] for p in r["highWatermarks"]}
    assert sum(int(o) for o in committed.values()) == 40

    # a new member resumed from the commits: only the five records produced afterwards
    assert sorted(m["key"] for m in r["resumed"]) == [f"k{i}" for i in range(40, 45)]
    assert r["emptyGroup"] == {"state": "Empty", "members": 0}
    assert r["deleted"] == [{"groupId": group, "errorCode": 0}]


def test_transactions_commit_offsets_and_hide_aborted_records(rafka: Rafka) -> None:
    topic, group = name("js-tx"), name("js-tx-group")
    r = kafkajs("transactions", rafka, topic=topic, groupId=group)
    # read_committed: the aborted batch (k5..k9) is never delivered
    assert r["seen"] == ["k0", "k1", "k2", "k3", "k4", "k10", "k11"]
    assert r["groupOffsets"] == [{"partition": 0, "offset": "3", "metadata": None}]


def test_admin_partitions_configs_records_and_offsets(rafka: Rafka) -> None:
    topic, group = name("js-admin"), name("js-admin-group")
    r = kafkajs("admin", rafka, topic=topic, groupId=group)
    assert (r["brokers"], r["controller"]) == (1, 0)
    assert r["duplicate"] is False, "creating an existing topic reports that nothing was created"
    assert ["retention.ms", "3600000"] in r["configs"], "the config given at creation is described back"
    assert r["altered"] == [["retention.ms", "604800000", True], ["segment.ms", "60000", False]], \
        "AlterConfigs replaced the overrides: retention.ms is back to its default"
    # six records on partition 0 (partition 1 was added by createPartitions), records before 2 deleted
    assert r["byTime"] == [{"partition": 0, "offset": "0"}, {"partition": 1, "offset": "0"}]
    assert r["afterDelete"] == [{"partition": 0, "offset": "6", "high": "6", "low": "2"},
                                {"partition": 1, "offset": "0", "high": "0", "low": "0"}]
    assert [p["offset"] for p in r["set"]] == ["4", "0"]
    # resetOffsets(earliest) commits KafkaJS's "earliest" marker; a member then starts at the log start
    assert [p["offset"] for p in r["reset"]] == ["-2", "-2"]
    assert r["seen"] == [[0, "2"], [0, "3"], [0, "4"], [0, "5"]]
    assert r["deletedTopicListed"] is False


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRafka]:
    broker = SecureRafka(tmp_path_factory.mktemp("js-secure") / "data", USERS).start()
    yield broker
    broker.stop()


@pytest.mark.parametrize("mechanism", ["scram-sha-256", "scram-sha-512"])
def test_sasl_scram_user_sees_only_its_organisation(secure: SecureRafka, mechanism: str) -> None:
    topic = name("js-sasl")
    r = kafkajs("sasl", secure, mechanism=mechanism, username="bob", password="bob-pw", topic=topic,
                otherUser={"username": "alice", "password": "alice-pw"})
    assert r["seen"] == ["k0", "k1", "k2"]
    assert topic in r["topics"]
    assert topic not in r["otherTopics"], "another organisation's user must not see the topic"
    assert r["wrongPassword"] == "KafkaJSSASLAuthenticationError"
