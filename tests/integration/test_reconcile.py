"""A shard that misses DeleteTopics or AlterConfigs catches up when it is back.

Each test stops one shard (SIGSTOP) until the gateway marks it down, so the gateway
never sends it the fan-out op, changes the topic, and resumes the shard.
"""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from rafka import ids
from tests.integration.clients import create_topic, spread_name, wait_for
from tests.integration.clients import unique_name as _name
from tests.integration.conftest import Rafka

pytestmark = pytest.mark.integration
SHARDS, PARTITIONS = 2, 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rafka]:
    b = Rafka(tmp_path_factory.mktemp("reconcile") / "data", shards=SHARDS,
              extra=["--log-retention-check-interval-ms", "200"]).start()
    yield b
    b.stop()


def _owner(topic: str, partition: int) -> int:
    return ids.shard_for_partition(ids.log_partition(ids.DEFAULT_ORG, topic, partition), SHARDS)


def _victim() -> int:
    """A shard that does not hold the topic catalogue (the catalogue must answer)."""
    catalogue = ids.shard_for_partition(ids.coordinator_partition(ids.DEFAULT_ORG, "\0topics"), SHARDS)
    return 1 - catalogue


def _shard_up(broker: Rafka, shard: int) -> bool:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    found = re.search(rf'^rafka_gateway_shard_up\{{[^}}]*shard="{shard}"[^}}]*\}} (\S+)$', text, re.MULTILINE)
    assert found, "the gateway exports rafka_gateway_shard_up"
    return float(found.group(1)) == 1.0


@contextmanager
def _stopped(broker: Rafka, shard: int) -> Iterator[None]:
    """Shard ``shard`` stopped and marked down by the gateway, then resumed."""
    pid = broker.children()[f"rafka-shard-{shard}"]
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: not _shard_up(broker, shard), 15, "the gateway marks the stopped shard down")
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: _shard_up(broker, shard), 15, "the shard is up again")


def _produce(broker: Rafka, topic: str, timestamp_ms: int = 0) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10 * PARTITIONS):
        p.produce(topic, f"r{i}".encode(), partition=i % PARTITIONS, timestamp=timestamp_ms)
    assert p.flush(15) == 0


def _log_dirs(broker: Rafka, topic: str) -> dict[int, Path]:
    """The partition directories the shards keep on disk for ``topic``."""
    return {int(d.name): d for d in broker.data_dir.glob(f"logs/*/{ids.DEFAULT_ORG}/{topic}/*")}


def test_a_shard_down_during_delete_topics_drops_the_topics_logs_when_it_is_back(broker: Rafka) -> None:
    topic, victim = spread_name("deleted", PARTITIONS, SHARDS), _victim()
    create_topic(broker.bootstrap, topic, PARTITIONS)
    _produce(broker, topic)
    on_victim = {p for p in range(PARTITIONS) if _owner(topic, p) == victim}
    assert set(_log_dirs(broker, topic)) == set(range(PARTITIONS))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with _stopped(broker, victim):
        admin.delete_topics([topic])[topic].result(15)  # deleted in the catalogue, as in Kafka
        wait_for(lambda: set(_log_dirs(broker, topic)) == on_victim, 15, "the running shard drops its logs")
    wait_for(lambda: not _log_dirs(broker, topic), 15, "the returning shard drops the deleted topic's logs")
    line = f"dropped the logs of {ids.DEFAULT_ORG}/{topic} partitions {sorted(on_victim)}"
    wait_for(lambda: line in broker.logs(), 10, "the gateway's log line")  # the files may go before the reply


def test_a_shard_down_during_alter_configs_applies_the_new_retention_when_it_is_back(broker: Rafka) -> None:
    topic, victim = spread_name("retained", PARTITIONS, SHARDS), _victim()
    create_topic(broker.bootstrap, topic, PARTITIONS)
    _produce(broker, topic, timestamp_ms=int(time.time() * 1000) - 3_600_000)  # an hour old: kept for 7 days
    on_victim = [p for p in range(PARTITIONS) if _owner(topic, p) == victim]
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("g")})

    def earliest(partitions: list[int]) -> list[tuple[int, int]]:
        return [reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions]

    try:
        assert [low for low, _ in earliest(list(range(PARTITIONS)))] == [0] * PARTITIONS
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "600000", incremental_operation=AlterConfigOpType.SET)])
        with _stopped(broker, victim):
            admin.incremental_alter_configs([resource])[resource].result(15)  # stored: success, as in Kafka
            others = [p for p in range(PARTITIONS) if p not in on_victim]
            wait_for(lambda: all(low == high > 0 for low, high in earliest(others)), 15,
                     "the running shard's partitions drop the old records")
        wait_for(lambda: all(low == high > 0 for low, high in earliest(on_victim)), 15,
                 "the returning shard's partitions drop the old records too")
        configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        assert next(iter(configs.values())).result(10)["retention.ms"].value == "600000"
    finally:
        reader.close()
