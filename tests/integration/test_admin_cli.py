"""`rafka group …` / `rafka topic …` as subprocesses against a real `rafka serve`, and the
REST admin API on its metrics port, checked against what Kafka clients see."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.clients import Member, create_topic, wait_for
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import ROOT, Rafka, free_port
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


def cli(rafka: Rafka, *args: str, admin_url: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m rafka ARGS`` with the broker and its REST API named through the environment."""
    env = {**os.environ, "RAFKA_BOOTSTRAP": rafka.bootstrap,
           "RAFKA_ADMIN_URL": admin_url or f"http://127.0.0.1:{rafka.metrics_port}"}
    env.pop("RAFKA_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "rafka", *args, "--timeout", "10"], cwd=ROOT, env=env,
                          check=False, capture_output=True, text=True, timeout=60)


def ok_json(rafka: Rafka, *args: str) -> Any:
    out = cli(rafka, *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def rest(rafka: Rafka, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{rafka.metrics_port}{path}", timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def produce(rafka: Rafka, topic: str, per_partition: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": rafka.bootstrap})
    for i in range(per_partition * partitions):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(15) == 0


def lag(rafka: Rafka, group: str) -> dict[int, tuple[Any, Any, Any]]:
    data = ok_json(rafka, "group", "lag", group)
    return {r["partition"]: (r["committed_offset"], r["log_end_offset"], r["lag"]) for r in data["partitions"]}


def test_topic_commands(rafka: Rafka) -> None:
    topic = _name("t")
    out = cli(rafka, "topic", "create", topic, "--partitions", "3", "--config", "retention.ms=3600000")
    assert (out.returncode, out.stdout) == (0, f"created topic {topic} with 3 partition(s)\n"), out.stderr
    again = cli(rafka, "topic", "create", topic, "--partitions", "3")
    assert again.returncode == 1 and "already exists" in again.stderr
    assert cli(rafka, "topic", "create", _name("t"), "--partitions", "1", "--config", "oops").returncode == 2

    listed = cli(rafka, "topic", "list")
    assert listed.returncode == 0 and listed.stdout.splitlines()[0].split() == ["TOPIC", "PARTITIONS"]
    assert [topic, "3"] in [line.split() for line in listed.stdout.splitlines()]
    assert {"topic": topic, "partitions": 3} in ok_json(rafka, "topic", "list")
    # as kafka-topics --list: names starting "__" are listed; --exclude-internal leaves out Kafka's internal ones
    heartbeats = "__" + _name("heartbeat")
    assert cli(rafka, "topic", "create", heartbeats, "--partitions", "1").returncode == 0
    AdminClient({"bootstrap.servers": rafka.bootstrap}).list_topics("__consumer_offsets", timeout=10)  # auto-created
    listed_all = {t["topic"] for t in ok_json(rafka, "topic", "list")}
    listed_user = {t["topic"] for t in ok_json(rafka, "topic", "list", "--exclude-internal")}
    assert {heartbeats, "__consumer_offsets"} <= listed_all
    assert heartbeats in listed_user and "__consumer_offsets" not in listed_user

    produce(rafka, topic, 2, 3)
    d = ok_json(rafka, "topic", "describe", topic)
    assert [(p["partition"], p["earliest_offset"], p["latest_offset"]) for p in d["partitions"]] == [
        (0, 0, 2), (1, 0, 2), (2, 0, 2)]
    assert {"name": "retention.ms", "value": "3600000", "is_default": False, "read_only": False} in d["configs"]
    # as kafka-topics --describe prints a TopicId: Kafka's Uuid.toString, URL-safe base64 without padding
    with RawClient("127.0.0.1", rafka.port) as c:
        meta = c.request(3, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    wire_id = meta["topics"][0]["topic_id"]
    assert d["topic_id"] == base64.urlsafe_b64encode(wire_id.bytes).rstrip(b"=").decode() and len(d["topic_id"]) == 22
    table = cli(rafka, "topic", "describe", topic).stdout.splitlines()
    assert table[0].split() == ["TOPIC", topic] and table[2].split() == ["PARTITIONS", "3"]
    assert ["retention.ms", "3600000", "topic"] in [line.split() for line in table]

    assert cli(rafka, "topic", "delete", topic).stdout == f"deleted topic {topic}\n"
    assert cli(rafka, "topic", "describe", topic).returncode == 3
    assert cli(rafka, "topic", "delete", topic).returncode == 3


def _member_view(m: dict[str, Any]) -> tuple[Any, ...]:
    return (m["member_id"], m["group_instance_id"], m["client_id"], m["host"], m["assignment"])


def test_describe_list_and_lag_agree_with_kafka_and_rest(rafka: Rafka) -> None:
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 4)
    produce(rafka, topic, 5, 4)
    m = Member(rafka.bootstrap, group, topic, **{"client.id": "cli-test"})
    try:
        wait_for(lambda: m.assigned == {0, 1, 2, 3}, 30, "the member owns every partition")
        wait_for(lambda: len(m.records) >= 20, 20, "every record consumed")
        m.stop_polling()
        m.c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5)], asynchronous=False)

        listed = ok_json(rafka, "group", "list")
        assert {"group_id": group, "state": "Stable", "type": "classic", "is_simple": False} in listed
        assert group not in [g["group_id"] for g in ok_json(rafka, "group", "list", "--state", "Empty")]
        table = cli(rafka, "group", "list", "--state", "stable").stdout.splitlines()
        assert [group, "Stable", "classic", "no"] in [line.split() for line in table]

        described = ok_json(rafka, "group", "describe", group)
        status, view = rest(rafka, f"/v1/orgs/default/consumer-groups/{group}")
        assert status == 200
        admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
        kafka = admin.describe_consumer_groups([group])[group].result(15)
        # the CLI, the REST API and DescribeGroups over Kafka tell the same story
        assert described["state"] == view["state"] == "Stable" == kafka.state.name.title()
        assert described["protocol"] == view["protocol"] == kafka.partition_assignor == "range"
        assert described["protocol_type"] == view["protocol_type"] == "consumer"
        assert [_member_view(x) for x in described["members"]] == [_member_view(x) for x in view["members"]] == [
            (k.member_id, k.group_instance_id, k.client_id, k.host,
             {topic: sorted(tp.partition for tp in k.assignment.topic_partitions)}) for k in kafka.members]
        assert view["members"][0]["client_id"] == "cli-test" and view["members"][0]["assignment"] == {
            topic: [0, 1, 2, 3]}
        assert described["group_uid"] == view["group_uid"] and view["group_uid"].startswith("cgp_")
        assert described["rrl"] == view["rrl"] == f"default/consumer-groups/{group}"
        assert rest(rafka, f"/v1/orgs/default/consumer-groups/{view['group_uid']}")[1]["group_id"] == group
        assert {(o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"]) for o in view["offsets"]} == {
            (0, 3, 5, 2), (1, 5, 5, 0)}
        status, listing = rest(rafka, "/v1/orgs/default/consumer-groups")
        entry = next(g for g in listing["consumer_groups"] if g["group_id"] == group)
        assert (entry["group_uid"], entry["state"], entry["member_count"]) == (view["group_uid"], "Stable", 1)
        assert rest(rafka, "/v1/orgs/default/consumer-groups/no-such-group")[0] == 404
        assert rest(rafka, f"/v1/orgs/another-org/consumer-groups/{group}")[0] == 404  # orgs see only their own

        text = cli(rafka, "group", "describe", group).stdout.splitlines()
        assert text[0].split() == ["GROUP", group] and text[1].split() == ["STATE", "Stable"]
        assert ["GROUP", "UID", view["group_uid"]] in [line.split() for line in text]
        assert ["RRL", view["rrl"]] in [line.split() for line in text]
        assert text[-1].split()[-3:] == ["cli-test", "/127.0.0.1", f"{topic}:0,1,2,3"]
        unreachable = cli(rafka, "group", "describe", group, admin_url=f"http://127.0.0.1:{free_port()}")
        assert unreachable.returncode == 0 and "GROUP UID" not in unreachable.stdout  # left out, not an error

        assert lag(rafka, group) == {0: (3, 5, 2), 1: (5, 5, 0), 2: (None, 5, None), 3: (None, 5, None)}
        lag_table = cli(rafka, "group", "lag", group).stdout.splitlines()
        assert lag_table[2].split() == ["TOTAL", "LAG", "2"]
        assert lag_table[5].split()[:5] == [topic, "0", "3", "5", "2"]

        busy = cli(rafka, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
        assert busy.returncode == 1 and "stop its consumers first" in busy.stderr
        assert cli(rafka, "group", "delete", group).returncode == 1  # NON_EMPTY_GROUP
    finally:
        m.close()
    assert cli(rafka, "group", "describe", "no-such-group").returncode == 3
    assert cli(rafka, "group", "lag", "no-such-group").returncode == 3


def test_reset_offsets_then_delete(rafka: Rafka) -> None:
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 2)
    produce(rafka, topic, 6, 2)
    # a group that only has committed offsets (Empty, no members): what reset-offsets works on
    out = cli(rafka, "group", "reset-offsets", group, "--topic", topic, "--to-offset", "4", "--execute")
    assert out.returncode == 0, out.stderr
    assert [line.split() for line in out.stdout.splitlines()] == [
        ["TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"], [topic, "0", "-", "4"], [topic, "1", "-", "4"]]
    assert ok_json(rafka, "group", "describe", group)["state"] == "Empty"
    assert lag(rafka, group) == {0: (4, 6, 2), 1: (4, 6, 2)}

    dry = ok_json(rafka, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--dry-run")
    assert dry["dry_run"] and [r["new_offset"] for r in dry["partitions"]] == [0, 0]
    assert lag(rafka, group) == {0: (4, 6, 2), 1: (4, 6, 2)}  # unchanged

    ok_json(rafka, "group", "reset-offsets", group, "--topic", f"{topic}:1", "--shift-by", "-3", "--execute")
    assert lag(rafka, group) == {0: (4, 6, 2), 1: (1, 6, 5)}
    ok_json(rafka, "group", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "99",
            "--execute")  # kept in the log
    assert lag(rafka, group)[0] == (6, 6, 0)
    ok_json(rafka, "group", "reset-offsets", group, "--topic", topic, "--to-datetime", "2000-01-01T00:00:00Z", "--execute")
    assert lag(rafka, group) == {0: (0, 6, 6), 1: (0, 6, 6)}
    ok_json(rafka, "group", "reset-offsets", group, "--all-topics", "--to-datetime", "2999-01-01T00:00:00+00:00",
            "--execute")
    assert lag(rafka, group) == {0: (6, 6, 0), 1: (6, 6, 0)}  # nothing that late: the log end
    plan = ok_json(rafka, "group", "reset-offsets", group, "--all-topics", "--to-earliest")  # no --execute: a plan
    assert plan["dry_run"] and lag(rafka, group) == {0: (6, 6, 0), 1: (6, 6, 0)}
    ok_json(rafka, "group", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute")
    assert lag(rafka, group) == {0: (0, 6, 6), 1: (0, 6, 6)}

    watch = cli(rafka, "group", "lag", group, "--watch", "--interval", "0.2", "--count", "2", "--json")
    assert watch.returncode == 0
    assert [json.loads(line)["total_lag"] for line in watch.stdout.splitlines()] == [12, 12]

    assert cli(rafka, "group", "reset-offsets", group, "--topic", _name("missing"), "--to-earliest").returncode == 3
    assert cli(rafka, "group", "reset-offsets", group, "--topic", f"{topic}:5", "--to-earliest").returncode == 2

    gone = cli(rafka, "group", "delete", group)
    assert (gone.returncode, gone.stdout) == (0, f"deleted consumer group {group}\n")
    assert cli(rafka, "group", "describe", group).returncode == 3
    assert cli(rafka, "group", "delete", group).returncode == 3
    assert rest(rafka, f"/v1/orgs/default/consumer-groups/{group}")[0] == 404


def test_unreachable_broker_is_a_kafka_error(rafka: Rafka) -> None:
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "rafka", "group", "list", "--bootstrap-server",
                          f"127.0.0.1:{free_port()}", "--timeout", "2"], cwd=ROOT, check=False,
                         capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1 and "timed out" in out.stderr and out.stdout == ""
    assert time.monotonic() - start < 15
