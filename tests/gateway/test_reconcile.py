"""The ops a gateway sends a returning shard (``reconcile.plan``), applied to a real LogManager."""

from __future__ import annotations

from typing import Any

from rafka.gateway.reconcile import plan
from rafka.protocol.records import SimpleRecord, build_batch
from rafka.rail import Op
from rafka.shard.log.manager import LogManager

ORG = "acme"


def _manager_with(*logs: tuple[str, str | None, int, int]) -> LogManager:
    """A shard holding partition 0 and 1 of each ``(topic, topic_id, incarnation, config_version)``."""
    manager = LogManager()
    for topic, topic_id, incarnation, version in logs:
        for partition in (0, 1):
            part = {"topic": topic, "partition": partition, "records": build_batch([SimpleRecord(b"k", b"v", 0)]),
                    "configs": {"retention.ms": "604800000"}, "config_version": version}
            if topic_id is not None:
                part.update(topic_id=topic_id, incarnation=incarnation)
            records, _ = manager.produce(ORG, {"acks": -1, "timeout_ms": 100, "partitions": [part]}, 0)
            for r in records:
                manager.replay(r)
    return manager


def _topic(name: str, topic_id: str, version: int, configs: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "topic_id": topic_id, "partitions": 2, "error_code": 0, "configs": configs or {},
            "config_version": version, "incarnation": 1}


def _apply(manager: LogManager, ops: list[tuple[Op, dict[str, Any]]]) -> None:
    for op, payload in ops:
        handler = manager.delete_partitions if op == Op.DELETE_PARTITIONS else manager.update_configs
        records, _ = handler(ORG, payload)
        for r in records:
            manager.replay(r)


def test_deleted_and_recreated_topics_lose_their_logs_and_current_ones_keep_them() -> None:
    manager = _manager_with(("gone", "id-gone", 4, 0), ("again", "id-old", 5, 0), ("kept", "id-kept", 6, 0))
    catalogue = {"gone": {"name": "gone", "topic_id": None, "partitions": 0, "error_code": 3, "configs": {}},
                 "again": _topic("again", "id-new", 0), "kept": _topic("kept", "id-kept", 0)}
    ops = plan(manager.summary(), catalogue)
    assert sorted((op, p["topic"], p["topic_id"], p["incarnation"]) for op, p in ops) == [
        (Op.DELETE_PARTITIONS, "again", "id-old", 5), (Op.DELETE_PARTITIONS, "gone", "id-gone", 4)]
    _apply(manager, ops)
    assert sorted(k[1] for k in manager.logs) == ["kept", "kept"]
    assert plan(manager.summary(), catalogue) == [], "a second pass finds nothing to do"


def test_logs_with_older_configs_take_the_catalogues() -> None:
    manager = _manager_with(("t", "id-t", 1, 1))
    catalogue = {"t": _topic("t", "id-t", 3, {"retention.ms": "1000"})}
    ops = plan(manager.summary(), catalogue)
    assert ops == [(Op.UPDATE_CONFIGS, {"topic": "t", "partitions": [0, 1], "topic_id": "id-t",
                                        "configs": {"retention.ms": "1000"}, "config_version": 3})]
    _apply(manager, ops)
    assert {k[2]: (log.overrides, log.config_version) for k, log in manager.logs.items()} == {
        0: ({"retention.ms": "1000"}, 3), 1: ({"retention.ms": "1000"}, 3)}
    assert plan(manager.summary(), catalogue) == []


def test_logs_the_catalogue_cannot_judge_are_left_alone() -> None:
    manager = _manager_with(("old", None, 0, 0), ("unanswered", "id-u", 2, 0), ("bad", "id-b", 3, 0))
    catalogue = {"old": {"name": "old", "topic_id": None, "partitions": 0, "error_code": 3, "configs": {}},
                 "bad": {"name": "bad", "topic_id": None, "partitions": 0, "error_code": 17, "configs": {}}}
    assert plan(manager.summary(), catalogue) == []
