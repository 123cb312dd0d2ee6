"""Consumer groups through real clients against real rafka processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.structs import OffsetAndMetadata

from rafka import ids
from tests.integration.clients import Member, consumer, covers_exactly, create_topic, name_on_shard, wait_for
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka
from tests.ops.opsutil import sample_value, scrape
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_three_members_cover_every_partition_then_two(rafka: Rafka, strategy: str) -> None:
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 6)
    members = [Member(rafka.bootstrap, group, topic, **{"partition.assignment.strategy": strategy}) for _ in range(3)]
    try:
        wait_for(lambda: covers_exactly(members, 6) and all(m.assigned for m in members), 45, "3-way split")
        leaving = members.pop()
        leaving.close()
        wait_for(lambda: covers_exactly(members, 6) and all(len(m.assigned) == 3 for m in members), 45,
                 "2-way split after a leave")
    finally:
        for m in members:
            m.close()


def test_sigkilled_consumer_is_evicted_after_session_timeout(rafka: Rafka) -> None:
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 4)
    script = textwrap.dedent(f"""
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": "{rafka.bootstrap}", "group.id": "{group}", "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 500}})
        c.subscribe(["{topic}"])
        while True:
            c.poll(0.1)
    """)
    child = subprocess.Popen([sys.executable, "-c", script])
    survivor = Member(rafka.bootstrap, group, topic)
    try:
        wait_for(lambda: 0 < len(survivor.assigned) < 4, 45, "split between the child and the survivor")
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        killed_at = time.monotonic()
        wait_for(lambda: survivor.assigned == {0, 1, 2, 3}, 30, "survivor takes every partition")
        assert time.monotonic() - killed_at >= 4.0  # not before the 6 s session timeout (minus slack)
    finally:
        survivor.close()
        if child.poll() is None:
            child.kill()


def test_static_member_restart_keeps_partitions_without_rebalance(rafka: Rafka) -> None:
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 4)
    static = {"group.instance.id": "static-a", "session.timeout.ms": 10000}
    a = Member(rafka.bootstrap, group, topic, **static)
    b = Member(rafka.bootstrap, group, topic, **{"group.instance.id": "static-b", "session.timeout.ms": 10000})
    try:
        wait_for(lambda: covers_exactly([a, b], 4) and a.assigned and b.assigned, 45, "static split")
        a_parts = set(a.assigned)
        b_events = len(b.events)
        a.close()  # static members send no LeaveGroup
        a2 = Member(rafka.bootstrap, group, topic, **static)
        try:
            wait_for(lambda: a2.assigned == a_parts, 30, "restarted static member gets its partitions back")
            time.sleep(2)
            assert b.events[b_events:] == [], "the other member must see no revocation"
        finally:
            a2.close()
    finally:
        b.close()


def test_commit_leave_rejoin_resumes_from_committed_offsets(rafka: Rafka) -> None:
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 2)
    c = consumer(rafka.bootstrap, group)
    c.subscribe([topic])
    wait_for(lambda: (c.poll(0.1), len(c.assignment()) == 2)[1], 30, "assignment")
    c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)], asynchronous=False)
    c.close()
    c2 = consumer(rafka.bootstrap, group)
    try:
        got = c2.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert [(p.partition, p.offset) for p in got] == [(0, 5), (1, 7)]
    finally:
        c2.close()


def test_commits_to_partitions_that_do_not_exist_are_refused(rafka: Rafka) -> None:
    """Kafka checks committed partitions against its metadata: UNKNOWN_TOPIC_OR_PARTITION for a
    topic or partition that does not exist, while the partitions that do exist are stored."""
    from confluent_kafka import KafkaError, KafkaException

    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 2)
    c = consumer(rafka.bootstrap, group)
    try:
        with pytest.raises(KafkaException) as refused:
            c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 2, 1),
                              TopicPartition(_name("missing"), 0, 3)], asynchronous=False)
        assert refused.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 2)], timeout=10)
        assert [(p.partition, p.offset) for p in got] == [(0, 5), (2, -1001)]
    finally:
        c.close()


def test_mixed_client_group(rafka: Rafka) -> None:
    from kafka import KafkaConsumer

    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 6)
    ck = Member(rafka.bootstrap, group, topic)
    # the first member stays leader across rebalances, so the assignment is computed by librdkafka
    wait_for(lambda: ck.assigned == set(range(6)), 30, "first member assigned")
    kp = KafkaConsumer(topic, bootstrap_servers=rafka.bootstrap, group_id=group, session_timeout_ms=6000,
                       heartbeat_interval_ms=500, enable_auto_commit=False)

    async def run_aiokafka(stop: asyncio.Event, seen: dict[str, set[int]]) -> None:
        import aiokafka

        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=rafka.bootstrap, group_id=group,
                                      session_timeout_ms=6000, heartbeat_interval_ms=500, enable_auto_commit=False)
        await c.start()
        try:
            while not stop.is_set():
                await c.getmany(timeout_ms=100)
                seen["ak"] = {tp.partition for tp in c.assignment()}
        finally:
            await c.stop()

    import threading

    seen: dict[str, set[int]] = {"ak": set()}
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    t = threading.Thread(target=lambda: loop.run_until_complete(run_aiokafka(stop, seen)), daemon=True)
    t.start()
    try:
        def balanced() -> bool:
            kp.poll(timeout_ms=100)
            kp_parts = {tp.partition for tp in kp.assignment()}
            parts = [*ck.assigned, *kp_parts, *seen["ak"]]
            return sorted(parts) == list(range(6)) and bool(ck.assigned) and bool(kp_parts) and bool(seen["ak"])

        wait_for(balanced, 60, "a group of confluent-kafka, kafka-python and aiokafka members")
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(15)
        kp.close()
        ck.close()


def test_admin_list_describe_delete_groups_and_offsets(rafka: Rafka) -> None:
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 3)
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    m = Member(rafka.bootstrap, group, topic)
    try:
        wait_for(lambda: m.assigned == {0, 1, 2}, 30, "assignment")
        listed = admin.list_consumer_groups().result(timeout=10)
        assert group in {g.group_id for g in listed.valid}
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert str(desc.state).endswith("STABLE")
        assert len(desc.members) == 1
        assert sorted(tp.partition for tp in desc.members[0].assignment.topic_partitions) == [0, 1, 2]
        # a non-empty group cannot be deleted
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            admin.delete_consumer_groups([group])[group].result(timeout=10)
    finally:
        m.close()
    wait_for(lambda: str(admin.describe_consumer_groups([group])[group].result(timeout=10).state).endswith("EMPTY"),
             20, "group empty after the member left")
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 11), TopicPartition(topic, 1, 22)])
    admin.alter_consumer_group_offsets([req])[group].result(timeout=10)
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions) == [(0, 11), (1, 22)]
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KpTopicPartition

    kp_admin = KafkaAdminClient(bootstrap_servers=rafka.bootstrap)
    try:  # OffsetDelete (confluent-kafka's Python AdminClient has no call for it)
        result = kp_admin.delete_group_offsets(group, [KpTopicPartition(topic, 0)])
        assert all(err is None or getattr(err, "errno", 0) == 0 for err in result.values()), result
    finally:
        kp_admin.close()
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions) == [(1, 22)]
    admin.delete_consumer_groups([group])[group].result(timeout=10)
    listed = admin.list_consumer_groups().result(timeout=10)
    assert group not in {g.group_id for g in listed.valid}


def test_delete_groups_answers_a_name_given_twice_once(rafka: Rafka) -> None:
    """Kafka deletes each distinct group name once (KafkaApis: ``groupsNames.distinct``): the copy
    gets no second answer, where deleting it again read GROUP_ID_NOT_FOUND."""
    from tests.rawclient import RawClient

    topic, group, missing = _name("t"), _name("g"), _name("none")
    create_topic(rafka.bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": rafka.bootstrap})
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 5)])])[
        group].result(timeout=10)
    with RawClient("127.0.0.1", rafka.port) as c:
        resp = c.request(42, 2, {"groups_names": [group, missing, group]})
    assert [(r["group_id"], r["error_code"]) for r in resp["results"]] == [(group, 0), (missing, 69)]


def test_list_groups_while_a_shard_is_down_is_a_retriable_load_in_progress(fresh_rafka: Rafka) -> None:
    """A shard that is down holds some groups: ListGroups and ListTransactions cannot list them
    all, so they answer COORDINATOR_LOAD_IN_PROGRESS (14), as Kafka does while a coordinator
    partition loads, which admin clients retry; NOT_COORDINATOR (16) made kafka-python give up."""
    from tests.rawclient import RawClient

    def listed() -> tuple[int, int]:
        with RawClient("127.0.0.1", fresh_rafka.port, timeout=10) as c:
            return (c.request(16, 4, {"states_filter": []})["error_code"],
                    c.request(66, 0, {"state_filters": [], "producer_id_filters": []})["error_code"])

    assert listed() == (0, 0)
    pid = fresh_rafka.children()["rafka-shard-1"]
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: listed() == (14, 14), 15, "ListGroups and ListTransactions answer 14 once the shard is down")
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: listed() == (0, 0), 15, "both answer again once the shard is back")


def test_find_coordinator_answers_coordinator_not_available_while_the_groups_shard_is_down(tmp_path: Path) -> None:
    """While a group's shard is down, FindCoordinator answers COORDINATOR_NOT_AVAILABLE with no node
    (v4 per key, v0–3 at the top), as Kafka answers for a coordinator partition without a live
    leader, and the other shard's groups are found as before. librdkafka and kafka-python
    consumers that start meanwhile look again after their backoff, surface no error, and join
    and read once the shard is back."""
    broker = Rafka(tmp_path / "data", shards=2).start()
    try:
        catalogue = ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, "\0topics"), 2)
        stopped = 1 - catalogue  # topics stay known while it is down
        up, down, down2 = (name_on_shard("fc", shard) for shard in (catalogue, stopped, stopped))
        topic = name_on_shard("fct", catalogue, topic=True)
        create_topic(broker.bootstrap, topic, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, b"m")
        assert producer.flush(10) == 0

        def find(keys: list[str]) -> list[tuple[int, int]]:
            with RawClient("127.0.0.1", broker.port) as c:
                resp = c.request(10, 4, {"key_type": 0, "coordinator_keys": keys})
            return [(x["error_code"], x["node_id"]) for x in resp["coordinators"]]

        assert find([up, down]) == [(0, 0), (0, 0)]
        pid = broker.children()[f"rafka-shard-{stopped}"]
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: find([up, down]) == [(0, 0), (15, -1)], 15)  # 15: COORDINATOR_NOT_AVAILABLE
            with RawClient("127.0.0.1", broker.port) as c:
                old = c.request(10, 3, {"key": down, "key_type": 0})
                txn = c.request(10, 3, {"key": down, "key_type": 1})  # a transactional id on that shard
            assert (old["error_code"], old["node_id"], old["host"], old["port"]) == (15, -1, "", -1)
            assert old["error_message"] == "The coordinator is not available."
            assert txn["error_code"] == 15

            rk = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": down, "auto.offset.reset": "earliest"})
            rk.subscribe([topic])
            assert [m.error() for m in rk.consume(10, 3.0)] == []  # it waits for its coordinator, quietly
            kp = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=down2, auto_offset_reset="earliest")
            assert kp.poll(timeout_ms=3000) == {}
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: find([down]) == [(0, 0)], 15)
        got: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = [m.value() for m in rk.consume(10, 1.0) if not m.error()]
        assert got == [b"m"]
        while not (batch := kp.poll(timeout_ms=1000)) and time.monotonic() < deadline:
            pass
        assert [r.value for records in batch.values() for r in records] == [b"m"]
        rk.close()
        kp.close()
    finally:
        broker.stop()


def _commit_requests(rafka: Rafka) -> float:
    """The gateway's count of OffsetCommit requests (it reaches /metrics within a second)."""
    return sample_value(scrape(rafka.metrics_port), "rafka_gateway_requests_total", 'api="group.offset-commit"') or 0.0


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_back_to_back_asynchronous_commits_are_each_acknowledged_and_the_last_ones_stand(rafka: Rafka, protocol: str) -> None:
    """Commits sent back to back reach the gateway many to a read (it answers a run of them with
    one handler call): every one is acknowledged and counted, and the last of each partition
    stands, for a classic member (generation) and a KIP-848 one (member epoch)."""
    topic, group = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 2)
    before = _commit_requests(rafka)
    acked: list[tuple[object, list[TopicPartition]]] = []

    def on_commit(err: object, parts: list[TopicPartition]) -> None:
        acked.append((err, parts))

    c = consumer(rafka.bootstrap, group, on_commit=on_commit) if protocol == "classic" else Consumer(
        {"bootstrap.servers": rafka.bootstrap, "group.id": group, "group.protocol": "consumer",
         "enable.auto.commit": False, "on_commit": on_commit})
    try:
        c.subscribe([topic])
        wait_for(lambda: (c.poll(0.1), len(c.assignment()) == 2)[1], 45, "both partitions assigned")
        last: dict[int, int] = {}
        commits = 3000
        for i in range(1, commits + 1):
            # mostly the same two partitions; now and then another shape of commit, which ends a run
            offsets = [TopicPartition(topic, 0, i)] if i % 97 == 0 else [TopicPartition(topic, 0, i), TopicPartition(topic, 1, 2 * i)]
            c.commit(offsets=offsets, asynchronous=True)
            last.update((tp.partition, tp.offset) for tp in offsets)
            if i % 500 == 0:
                c.poll(0)
        wait_for(lambda: (c.poll(0.05), len(acked) >= commits)[1], 60, "every commit acknowledged")
        assert len(acked) == commits
        assert [(err, [tp.error for tp in parts if tp.error]) for err, parts in acked if err or any(tp.error for tp in parts)] == []
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert [tp.offset for tp in committed] == [last[0], last[1]] == [commits, 2 * commits]
    finally:
        c.close()
    wait_for(lambda: _commit_requests(rafka) - before >= commits, 10, "every commit request counted")


def test_back_to_back_kafka_python_commits_are_each_acknowledged_and_the_last_stands(rafka: Rafka) -> None:
    """kafka-python's ``commit_async``, outside any group's generation (a simple consumer's commits)."""
    topic, solo = _name("t"), _name("g")
    create_topic(rafka.bootstrap, topic, 2)
    before = _commit_requests(rafka)
    # kafka-python 3.0.12 fails on the client the requests past its in-flight cap (default 5:
    # NodeNotReadyError), and before its coordinator is known commit_async returns the coordinator
    # lookup's future, not the commit's: the cap is raised and the coordinator found first, so
    # each future below is its commit's and is done when the broker has answered it
    kc = KafkaConsumer(bootstrap_servers=rafka.bootstrap, group_id=solo, enable_auto_commit=False,
                       max_in_flight_requests_per_connection=2000)
    try:
        assert kc.committed(KafkaTopicPartition(topic, 1)) is None  # finds the coordinator
        futures = [kc.commit_async({KafkaTopicPartition(topic, 1): OffsetAndMetadata(n, "m", -1)}) for n in range(1, 1001)]
        deadline = time.monotonic() + 30
        while not all(f.is_done for f in futures) and time.monotonic() < deadline:
            time.sleep(0.05)  # kafka-python 3 runs its own network thread
        assert [f.exception for f in futures if not f.succeeded()] == []
        assert {f.value for f in futures} == {None}, "each future is its commit's (a lookup's holds the coordinator)"
        assert kc.committed(KafkaTopicPartition(topic, 1)) == 1000
    finally:
        kc.close()
    wait_for(lambda: _commit_requests(rafka) - before >= 1000, 10, "every commit request counted")
