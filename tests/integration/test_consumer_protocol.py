"""KIP-848 consumer groups driven by confluent-kafka with ``group.protocol=consumer``."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from tests.integration import clients
from tests.integration.clients import create_topic, wait_for
from tests.integration.conftest import Rafka

PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rafka]:
    b = Rafka(tmp_path_factory.mktemp("rafka-kip848") / "data",
              extra=["--consumer-group-heartbeat-interval-ms", "300",
                     "--consumer-group-session-timeout-ms", "6000"]).start()
    yield b
    b.stop()


Member = clients.ConsumerProtocolMember


def disjoint_cover(members: list[Member]) -> bool:
    seen = [p for m in members for p in m.assigned]
    return sorted(seen) == list(range(PARTITIONS))


def test_members_share_partitions_incrementally(broker: Rafka) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    m1 = Member(broker.bootstrap, group, topic)
    m2 = Member(broker.bootstrap, group, topic)
    members = [m1, m2]
    try:
        # (a) two members: full, disjoint coverage, 3 each
        wait_for(lambda: disjoint_cover(members) and len(m1.assigned) == 3, 30, "two-member assignment")
        before = {id(m): set(m.assigned) for m in members}
        events_before = [len(m.events) for m in members]
        # (b) a third member: only the partitions it takes move
        m3 = Member(broker.bootstrap, group, topic)
        members.append(m3)
        wait_for(lambda: disjoint_cover(members) and all(len(m.assigned) == 2 for m in members), 30,
                 "three-member assignment")
        for m, n in zip(members[:2], events_before):
            assert m.assigned <= before[id(m)]  # kept its remaining partitions
            new_events = [e for e in m.events[n:] if e[1]]  # librdkafka may call on_assign([])
            assert all(kind == "revoke" for kind, _ in new_events), new_events  # incremental: no re-assign
            assert len(set().union(*[set(ps) for _, ps in new_events])) == 1
        assert m3.events and m3.events[0][0] == "assign"
        # (c) a member closing hands its partitions over
        m2.close()
        members.remove(m2)
        wait_for(lambda: disjoint_cover(members) and all(len(m.assigned) == 3 for m in members), 30,
                 "hand-over after close")
        assert not any(e for m in members for e in m.errors), [m.errors for m in members]
    finally:
        for m in members:
            m.close()


DYING_MEMBER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer"})
c.subscribe([sys.argv[3]], on_assign=lambda c, ps: print("assigned", len(ps), flush=True))
while True:
    c.poll(0.05)
"""


def test_a_dying_member_hands_its_partitions_over(broker: Rafka) -> None:
    """kill -9 of a member (no leave): after the session timeout its partitions move to the others."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    dying = subprocess.Popen([sys.executable, "-c", DYING_MEMBER, broker.bootstrap, group, topic],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    survivor = None
    try:
        assert dying.stdout is not None and dying.stdout.readline().startswith("assigned")
        survivor = Member(broker.bootstrap, group, topic)
        wait_for(lambda: len(survivor.assigned) == PARTITIONS // 2, 30, "the survivor's half")
        os.kill(dying.pid, signal.SIGKILL)
        start = time.monotonic()
        wait_for(lambda: survivor.assigned == set(range(PARTITIONS)), 30, "hand-over after kill -9")
        assert time.monotonic() - start >= 3  # not before the member's session could expire (6 s)
    finally:
        if dying.poll() is None:
            dying.kill()
        dying.wait(10)
        if survivor is not None:
            survivor.close()


def test_committed_offsets_resume_after_rejoin(broker: Rafka) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce(topic, value=str(i).encode(), partition=i % 2)
    p.flush(10)
    m = Member(broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(m.records) == 10, 30, "first 10 records")
        m.stop_polling()  # a synchronous commit waits on the queue the poll thread would drain
        m.c.commit(asynchronous=False)
    finally:
        m.close()
    for i in range(10, 14):
        p.produce(topic, value=str(i).encode(), partition=i % 2)
    p.flush(10)
    m = Member(broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(m.records) >= 4, 30, "records after rejoin")
        time.sleep(0.5)
        assert sorted(int(r.value()) for r in m.records) == [10, 11, 12, 13]
    finally:
        m.close()


def test_describe_groups_describes_only_classic_groups(broker: Rafka) -> None:
    """Kafka's DescribeGroups answers a consumer group as not a classic group (v6: GROUP_ID_NOT_FOUND,
    older versions: Dead with no error); ConsumerGroupDescribe describes it."""
    from confluent_kafka.admin import AdminClient

    from tests.rawclient import RawClient

    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    m = Member(broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(m.assigned) == 2, 30, "assignment")
        with RawClient("127.0.0.1", broker.port) as raw:
            v6 = raw.request(15, 6, {"groups": [group], "include_authorized_operations": False})["groups"][0]
            v5 = raw.request(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
            absent = raw.request(15, 6, {"groups": ["no-" + group], "include_authorized_operations": False})
        assert (v6["error_code"], v6["error_message"], v6["group_state"]) == (
            69, f"Group {group} is not a classic group.", "Dead")
        assert (v5["error_code"], v5["group_state"], v5["members"]) == (0, "Dead", [])
        assert (absent["groups"][0]["error_code"], absent["groups"][0]["error_message"]) == (
            69, f"Group no-{group} not found.")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(10)
        assert len(described.members) == 1, "ConsumerGroupDescribe still describes it"
    finally:
        m.close()


def test_a_groups_own_configs_set_its_timings_and_survive_a_restart(tmp_path: Path) -> None:
    """IncrementalAlterConfigs on a GROUP resource (kafka-python's admin, as kafka-configs
    --entity-type groups): the group's members get its heartbeat interval and are fenced after
    its session timeout; DescribeConfigs shows both, also after kill -9 of the broker."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    from tests.rawclient import RawClient

    b = Rafka(tmp_path / "data", extra=["--consumer-group-min-session-timeout-ms", "100",
                                        "--consumer-group-min-heartbeat-interval-ms", "100"]).start()
    group, topic = f"g-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    wanted = {"consumer.session.timeout.ms": "2500", "consumer.heartbeat.interval.ms": "700"}

    def described() -> dict[str, tuple[str, str]]:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        try:
            found = admin.describe_configs([ConfigResource(ConfigResourceType.GROUP, group)], config_filter="all")
        finally:
            admin.close()
        return {k: (v["value"], v["config_source"]) for k, v in found["group"][group].items()}

    try:
        create_topic(b.bootstrap, topic, 2)
        assert described() == {"consumer.session.timeout.ms": ("45000", "DEFAULT_CONFIG"),
                               "consumer.heartbeat.interval.ms": ("5000", "DEFAULT_CONFIG")}
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        try:
            ok = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs=wanted)])
            bad = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group,
                                                      configs={"consumer.session.timeout.ms": "500"})])
        finally:
            admin.close()
        assert ok == {"group": {group: "OK"}}
        assert "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms" in bad["group"][group]
        with RawClient("127.0.0.1", b.port) as c:
            legacy = c.request(33, 2, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
                {"name": k, "value": v} for k, v in wanted.items()]}], "validate_only": True})  # AlterConfigs
            assert [r["error_code"] for r in legacy["responses"]] == [0]
            d = c.request(32, 4, {"resources": [{"resource_type": 32, "resource_name": group, "configuration_keys": []}],
                                  "include_synonyms": False, "include_documentation": False})
            assert {x["name"]: (x["value"], x["config_type"]) for x in d["results"][0]["configs"]} == {
                k: (v, 3) for k, v in wanted.items()}, "an empty key list asks for every config, typed INT"
            hb = c.request(68, 0, {"group_id": group, "member_id": uuid.uuid4().hex, "member_epoch": 0,
                                   "instance_id": None, "rack_id": None, "rebalance_timeout": 30000,
                                   "subscribed_topic_names": [topic], "server_assignor": None,
                                   "topic_partitions": []})
            assert (hb["error_code"], hb["heartbeat_interval"]) == (0, 700)

            def members() -> int:
                d = c.request(69, 0, {"group_ids": [group], "include_authorized_operations": False})
                return len(d["groups"][0]["members"])

            assert members() == 1
            start = time.monotonic()
            wait_for(lambda: members() == 0, 15, "the silent member fenced")
            assert time.monotonic() - start < 5, "the group's 2.5 s, not the broker's 6 s"
        port = b.port
        b.kill_all()
        b.port = port
        b.start()
        assert described() == {k: (v, "DYNAMIC_GROUP_CONFIG") for k, v in wanted.items()}
    finally:
        b.stop()


def test_a_replaced_static_member_is_fenced_by_its_instance_id(broker: Rafka) -> None:
    """A static member that left (epoch -2) and was replaced under its instance id is told
    FENCED_INSTANCE_ID when it comes back, as Kafka looks static members up by instance id."""
    from tests.rawclient import RawClient

    group, topic = f"g-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    old, new = uuid.uuid4().hex, uuid.uuid4().hex
    with RawClient("127.0.0.1", broker.port) as c:
        def hb(member_id: str, epoch: int) -> dict[str, Any]:
            joining = epoch == 0
            return c.request(68, 1, {"group_id": group, "member_id": member_id, "member_epoch": epoch,
                                     "instance_id": "instance-1", "rack_id": None,
                                     "rebalance_timeout": 30000 if joining else -1,
                                     "subscribed_topic_names": [topic] if joining else None,
                                     "subscribed_topic_regex": None, "server_assignor": None,
                                     "topic_partitions": [] if joining else None})

        assert hb(old, 0)["error_code"] == 0
        assert hb(new, 0)["error_code"] == 111  # UNRELEASED_INSTANCE_ID while the first one holds it
        assert hb(old, -2)["error_code"] == 0
        assert hb(new, 0)["error_code"] == 0
        zombie = hb(old, 1)
    assert (zombie["error_code"], zombie["error_message"]) == (
        82, f"Static member {old} with instance id instance-1 was fenced by member {new}.")


def test_regex_subscriptions_are_re2(broker: Rafka) -> None:
    """A confluent-kafka consumer subscribed by regex is assigned the matching topics only; a
    regex RE2 (Kafka's RE2/J) does not accept is INVALID_REGULAR_EXPRESSION with Kafka's words."""
    from tests.rawclient import RawClient

    prefix = f"rx{uuid.uuid4().hex[:6]}"
    for name in (f"{prefix}-a", f"{prefix}-b", f"x{prefix}-c"):
        create_topic(broker.bootstrap, name, 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{prefix}", "group.protocol": "consumer",
                  "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe([f"^{prefix}-.*"])
    try:
        def assigned() -> set[str]:
            c.poll(0.1)
            return {tp.topic for tp in c.assignment()}

        wait_for(lambda: assigned() == {f"{prefix}-a", f"{prefix}-b"}, 30, "the two matching topics")
    finally:
        c.close()
    with RawClient("127.0.0.1", broker.port) as raw:
        for regex in ("(?=x).*", r"(a)\1"):
            r = raw.request(68, 1, {"group_id": f"g2-{prefix}", "member_id": uuid.uuid4().hex, "member_epoch": 0,
                                    "instance_id": None, "rack_id": None, "rebalance_timeout": 30000,
                                    "subscribed_topic_names": None, "subscribed_topic_regex": regex,
                                    "server_assignor": None, "topic_partitions": []})
            assert r["error_code"] == 128, regex
            assert r["error_message"].startswith(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: ")


class TimedMember(Member):
    """A member that notes when librdkafka sends each ConsumerGroupHeartbeat (from its debug log)."""

    def make_consumer(self, bootstrap: str, group: str, extra: dict[str, Any]) -> Consumer:
        self.heartbeats: list[float] = []
        sent = self.heartbeats

        class Sent(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "Sent ConsumerGroupHeartbeatRequest" in record.getMessage():
                    sent.append(time.monotonic())

        logger = logging.getLogger(f"hb-{uuid.uuid4().hex[:6]}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(Sent())
        return super().make_consumer(bootstrap, group, {"debug": "protocol", "logger": logger, **extra})


def test_a_revocation_is_not_lost_when_the_groups_shard_is_killed(tmp_path: Path) -> None:
    """kill -9 of the group's shard just before the heartbeat that tells A to give up 2 of its
    4 partitions to B. librdkafka gives a heartbeat one interval (1 s here) and follows a timed-out
    one with a *partial* heartbeat, which never carries the assignment again; a heartbeat that
    waited in ZeroMQ's queue for the restarted shard (back ~1.2 s after a second kill in a row)
    was run there after A gave up on it, and A kept all 4 until its rebalance timeout. The
    gateway now fails such a heartbeat when the shard's connection drops (NOT_COORDINATOR), as a
    Kafka client sees its coordinator's connection close, and A's next heartbeat is full."""
    from rafka import ids
    from tests.rawclient import RawClient

    broker = Rafka(tmp_path / "data", extra=["--consumer-group-heartbeat-interval-ms", "1000"]).start()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    catalogue = ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, "\0topics"), broker.shards)
    while True:  # a group off the catalogue's shard, so its heartbeats go straight to its own
        group = f"g-{uuid.uuid4().hex[:8]}"
        owner = ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, group), broker.shards)
        if owner != catalogue:
            break
    name = f"rafka-shard-{owner}"
    a = None
    try:
        create_topic(broker.bootstrap, topic, 4)
        old = broker.children()[name]  # a first restart: the supervisor waits 0.8 s before the next one
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: broker.children().get(name, old) != old, 15, "the shard restarted")
        a = TimedMember(broker.bootstrap, group, topic, **{"max.poll.interval.ms": 60000})
        wait_for(lambda: len(a.assigned) == 4, 30, "A owns all 4 partitions")
        time.sleep(1.5)
        n = len(a.heartbeats)
        wait_for(lambda: len(a.heartbeats) > n, 5, "a heartbeat from A")
        last = a.heartbeats[-1]
        time.sleep(max(0.0, last + 0.3 - time.monotonic()))
        with RawClient("127.0.0.1", broker.port) as c:  # B joins: 2 of A's partitions become B's
            b = c.request(68, 1, {"group_id": group, "member_id": uuid.uuid4().hex, "member_epoch": 0,
                                  "instance_id": None, "rack_id": None, "rebalance_timeout": 60000,
                                  "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
                                  "server_assignor": None, "topic_partitions": []})
        assert b["error_code"] == 0, b
        time.sleep(max(0.0, last + 1.0 - 0.02 - time.monotonic()))  # just before A's next heartbeat
        os.kill(broker.children()[name], signal.SIGKILL)
        wait_for(lambda: len(a.assigned) == 2, 15, "A gives up 2 partitions once the shard is back")
    finally:
        if a is not None:
            a.close()
        broker.stop()
