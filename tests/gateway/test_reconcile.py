"""What a gateway sends a returning shard (``rafka.gateway.reconcile``), applied to real LogManagers."""

from __future__ import annotations

import asyncio
from typing import Any

from rafka.gateway.reconcile import LogReconciler, plan
from rafka.gateway.router import ShardUnavailable
from rafka.protocol.records import SimpleRecord, build_batch
from rafka.rail import Op
from rafka.shard.log.manager import LogManager

ORG = "acme"


def _manager_with(*logs: tuple[str, str | None, int, int], org: str = ORG,
                  manager: LogManager | None = None) -> LogManager:
    """A shard holding partitions 0 and 1 of each ``(topic, topic_id, incarnation, config_version)``."""
    manager = manager or LogManager()
    for topic, topic_id, incarnation, version in logs:
        for partition in (0, 1):
            part = {"topic": topic, "partition": partition, "records": build_batch([SimpleRecord(b"k", b"v", 0)]),
                    "configs": {"retention.ms": "604800000"}, "config_version": version}
            if topic_id is not None:
                part.update(topic_id=topic_id, incarnation=incarnation)
            records, _ = manager.produce(org, {"acks": -1, "timeout_ms": 100, "partitions": [part]}, 0)
            for r in records:
                manager.replay(r)
    return manager


def _topic(name: str, topic_id: str, incarnation: int, version: int = 0,
           configs: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "topic_id": topic_id, "partitions": 2, "error_code": 0, "configs": configs or {},
            "config_version": version, "incarnation": incarnation}


def _unknown(name: str, code: int = 3) -> dict[str, Any]:
    return {"name": name, "topic_id": None, "partitions": 0, "error_code": code, "configs": {}}


def _apply(manager: LogManager, ops: list[tuple[Op, dict[str, Any]]]) -> list[dict[str, Any]]:
    answers = []
    for op, payload in ops:
        handler = manager.delete_partitions if op == Op.DELETE_PARTITIONS else manager.update_configs
        records, answer = handler(ORG, payload)
        for r in records:
            manager.replay(r)
        answers.append(answer)
    return answers


def test_deleted_and_recreated_topics_lose_their_logs_and_current_ones_keep_them() -> None:
    manager = _manager_with(("gone", "id-gone", 4, 0), ("again", "id-old", 5, 0), ("kept", "id-kept", 6, 0))
    catalogue = {"version": 9, "topics": [_unknown("gone"), _topic("again", "id-new", 8), _topic("kept", "id-kept", 6)]}
    ops = plan(manager.summary(), catalogue)
    assert sorted((op, p["topic"], p["topic_id"], p["incarnation"]) for op, p in ops) == [
        (Op.DELETE_PARTITIONS, "again", "id-old", 5), (Op.DELETE_PARTITIONS, "gone", "id-gone", 4)]
    _apply(manager, ops)
    assert sorted(k[1] for k in manager.logs) == ["kept", "kept"]
    assert plan(manager.summary(), catalogue) == [], "a second pass finds nothing to do"


def test_a_catalogue_that_never_numbered_the_logs_topic_drops_nothing() -> None:
    """The wrong shard asked (a gateway with another --shards), or a catalogue that lost
    records or restarted in memory: its ignorance is no proof the topic was deleted."""
    manager = _manager_with(("t", "id-t", 7, 0), ("u", "id-u", 3, 0))
    for catalogue in ({"version": 0, "topics": [_unknown("t"), _unknown("u")]},  # knows nothing of the org
                      {"version": 6, "topics": [_unknown("t"), _topic("u", "id-x", 2)]}):  # u: an older topic id
        assert [p["topic"] for _op, p in plan(manager.summary(), catalogue)] == [], catalogue
    assert len(manager.logs) == 4


def test_logs_with_older_configs_take_the_catalogues() -> None:
    manager = _manager_with(("t", "id-t", 1, 1))
    catalogue = {"version": 3, "topics": [_topic("t", "id-t", 1, 3, {"retention.ms": "1000"})]}
    ops = plan(manager.summary(), catalogue)
    assert ops == [(Op.UPDATE_CONFIGS, {"topic": "t", "partitions": [0, 1], "topic_id": "id-t",
                                        "configs": {"retention.ms": "1000"}, "config_version": 3})]
    _apply(manager, ops)
    assert {k[2]: (log.overrides, log.config_version) for k, log in manager.logs.items()} == {
        0: ({"retention.ms": "1000"}, 3), 1: ({"retention.ms": "1000"}, 3)}
    assert plan(manager.summary(), catalogue) == []


def test_logs_the_catalogue_cannot_judge_are_left_alone() -> None:
    manager = _manager_with(("old", None, 0, 0), ("unanswered", "id-u", 2, 0), ("bad", "id-b", 3, 0))
    catalogue = {"version": 9, "topics": [_unknown("old"), _unknown("bad", code=17)]}
    assert plan(manager.summary(), catalogue) == []


class ShardsRouter:
    """Two shards backed by real LogManagers; shard 1 also holds the catalogue answer."""

    shard_count = 2

    def __init__(self, catalogue: dict[str, Any]) -> None:
        self.managers = {0: _manager_with(("gone", "id-gone", 2, 0)), 1: LogManager()}
        self.catalogue = catalogue
        self.alive = {0: True, 1: True}
        self.up_counts = {0: 1, 1: 1}
        self.calls: list[tuple[int, Op]] = []
        self.on_call: Any = None
        self.failing: set[Op] = set()

    def is_alive(self, shard: int) -> bool:
        return self.alive[shard]

    def ups(self, shard: int) -> int:
        return self.up_counts[shard]

    def shard_for_catalog(self, org_id: str) -> int:
        return 1

    async def call(self, shard: int, op: Op, org_id: str, payload: Any, trace: str | None = None) -> Any:
        self.calls.append((shard, op))
        if self.on_call is not None:
            self.on_call(shard, op)
        if op in self.failing:
            raise ShardUnavailable("no handler")
        if op == Op.LIST_LOGS:
            return {"logs": self.managers[shard].summary()}
        if op == Op.LIST_TOPICS:
            return self.catalogue
        return _apply(self.managers[shard], [(op, payload)])[0]


def test_a_shard_is_checked_once_per_coming_up_and_again_after_a_missed_fan_out() -> None:
    router = ShardsRouter({"version": 5, "topics": [_unknown("gone")]})
    reconciler = LogReconciler(router, interval=0)

    async def run() -> None:
        assert await reconciler.reconcile_due() == 1
        assert router.managers[0].logs == {}, "the deleted topic's logs are gone"
        router.calls.clear()
        assert await reconciler.reconcile_due() == 0 and router.calls == [], "nothing new: nothing sent"
        router.up_counts[0] += 1  # shard 0 came back
        await reconciler.reconcile_due()
        assert router.calls == [(0, Op.LIST_LOGS)]
        router.calls.clear()
        # a fan-out fails while shard 1's pass is running: it must be checked again afterwards
        router.on_call = lambda shard, op: shard == 1 and op == Op.LIST_LOGS and reconciler.mark(1)
        reconciler.mark(1)
        await reconciler.reconcile_due()
        router.on_call = None
        router.calls.clear()
        await reconciler.reconcile_due()
        assert router.calls == [(1, Op.LIST_LOGS)], "the mark made during the pass is not lost"

    asyncio.run(run())


def test_a_shard_that_cannot_answer_is_retried_with_a_growing_delay() -> None:
    router = ShardsRouter({"version": 5, "topics": [_unknown("gone")]})
    router.failing = {Op.LIST_LOGS}  # e.g. a shard older than this gateway
    reconciler = LogReconciler(router, interval=10)

    async def run() -> None:
        await reconciler.reconcile_due()
        await reconciler.reconcile_due()
        assert router.calls == [(0, Op.LIST_LOGS), (1, Op.LIST_LOGS)], "the second tick waits"
        router.failing = set()
        reconciler.mark(0)  # a missed fan-out makes it due at once
        await reconciler.reconcile_due()
        assert router.managers[0].logs == {}

    asyncio.run(run())


def test_backing_off_stays_bounded_and_ends_when_the_shard_comes_up_again() -> None:
    router = ShardsRouter({"version": 5, "topics": [_unknown("gone")]})
    router.failing = {Op.LIST_LOGS}
    reconciler = LogReconciler(router, interval=10)
    reconciler._failures[0] = 5000  # a shard that has failed for days: the delay stays at its cap

    async def run() -> None:
        await reconciler.reconcile_due()
        not_before, _ups = reconciler._retry_at[0]
        assert not_before - __import__("time").monotonic() <= 60
        router.failing = set()
        router.up_counts[0] += 1  # it restarted: checked at once, not after the delay
        await reconciler.reconcile_due()
        assert router.managers[0].logs == {}

    asyncio.run(run())


def test_a_loading_shard_is_retried_on_the_next_tick_without_backing_off() -> None:
    from rafka.gateway.router import ShardLoading

    router = ShardsRouter({"version": 5, "topics": [_unknown("gone")]})
    reconciler = LogReconciler(router, interval=10)
    loading = [True]

    async def call(shard: int, op: Op, org_id: str, payload: Any, trace: str | None = None) -> Any:
        if loading[0] and op == Op.LIST_LOGS:
            raise ShardLoading("loading")
        return await ShardsRouter.call(router, shard, op, org_id, payload)

    router.call = call  # type: ignore[method-assign]

    async def run() -> None:
        await reconciler.reconcile_due()
        assert reconciler._failures == {} and reconciler._retry_at == {}
        loading[0] = False
        await reconciler.reconcile_due()
        assert router.managers[0].logs == {}

    asyncio.run(run())


def test_one_organisations_unreachable_catalogue_does_not_hold_up_the_others() -> None:
    router = ShardsRouter({"version": 5, "topics": [_unknown("gone")]})
    _manager_with(("other", "id-o", 2, 0), org="aaa-org", manager=router.managers[0])
    orgs_asked: list[str] = []

    async def call(shard: int, op: Op, org_id: str, payload: Any, trace: str | None = None) -> Any:
        if op == Op.LIST_TOPICS:
            orgs_asked.append(org_id)
            if org_id == "aaa-org":
                raise ShardUnavailable("its catalogue shard is down")
        return await ShardsRouter.call(router, shard, op, org_id, payload)

    router.call = call  # type: ignore[method-assign]
    reconciler = LogReconciler(router, interval=10)
    asyncio.run(reconciler.reconcile_due())
    assert orgs_asked == ["aaa-org", ORG], "the failing org comes first"
    assert [k for k in router.managers[0].logs if k[0] == ORG] == [], "the reachable org's deleted topic went"
    assert reconciler._failures == {0: 1}, "and the pass is retried for the other"
