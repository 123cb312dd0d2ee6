"""The gateway's marker courier and sweeper, over a fake router."""

from __future__ import annotations

import asyncio
from typing import Any

from rafka.gateway.router import ShardUnavailable
from rafka.gateway.txn import TxnSweeper, complete_transaction
from rafka.rail import Op

COMPLETION = {"org_id": "o", "transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "committed": True,
              "partitions": [["t", 0], ["t", 1], ["t", 2]], "groups": ["g"]}


class Router:
    """Partition p lives on shard p % 3, groups and transactional ids on shard 2."""

    shard_count = 3

    def __init__(self, down: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.down = down
        self.calls: list[tuple[int, Op, Any]] = []
        self.sweep_answers: dict[int, list[dict[str, Any]]] = {}
        self.stalled: set[int] = set()
        self.held: list[asyncio.Future[Any]] = []

    def shard_for_partition(self, org: str, topic: str, partition: int) -> int:
        return partition % 3

    def shard_for_group(self, org: str, key: str) -> int:
        return 2

    def is_alive(self, shard: int) -> bool:
        return shard not in self.down

    def call(self, shard: int, op: Op, org: str, payload: Any, trace: str | None = None) -> asyncio.Future[Any]:
        self.calls.append((shard, op, payload))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if shard in self.stalled and op == Op.TXN_SWEEP:
            self.held.append(fut)  # a stalled shard: answered when the test says so
        elif shard in self.down:
            fut.set_exception(ShardUnavailable("down"))
        elif op == Op.TXN_SWEEP:
            fut.set_result({"complete": self.sweep_answers.pop(shard, [])})
        else:
            fut.set_result({"error_code": 0})
        return fut


def test_markers_go_to_each_owning_shard_then_the_coordinator_completes() -> None:
    router = Router()
    assert asyncio.run(complete_transaction(router, COMPLETION)) is True
    markers = {s: p["markers"][0] for s, op, p in router.calls if op == Op.TXN_WRITE_MARKERS}
    assert markers[0]["partitions"] == [["t", 0]] and markers[1]["partitions"] == [["t", 1]]
    assert markers[2] == {"producer_id": 7, "producer_epoch": 2, "committed": True, "partitions": [["t", 2]],
                          "groups": ["g"]}
    assert router.calls[-1] == (2, Op.TXN_COMPLETE, {"transactional_id": "tx", "producer_id": 7,
                                                      "producer_epoch": 2, "committed": True})


def test_a_down_participant_leaves_the_transaction_prepared_for_the_sweeper() -> None:
    router = Router(down={1})
    assert asyncio.run(complete_transaction(router, COMPLETION)) is False
    assert Op.TXN_COMPLETE not in [op for _s, op, _p in router.calls]
    router.down = set()
    router.sweep_answers = {2: [COMPLETION]}
    sweeper = TxnSweeper(router)
    assert asyncio.run(sweeper.sweep_once()) == 1
    assert router.calls[-1][1] == Op.TXN_COMPLETE


def test_concurrent_completions_of_one_transaction_share_one_courier() -> None:
    router = Router()

    async def both() -> list[bool]:
        return list(await asyncio.gather(complete_transaction(router, COMPLETION),
                                         complete_transaction(router, dict(COMPLETION))))

    assert asyncio.run(both()) == [True, True]
    assert [op for _s, op, _p in router.calls].count(Op.TXN_COMPLETE) == 1
    assert [op for _s, op, _p in router.calls].count(Op.TXN_WRITE_MARKERS) == 3


def test_a_stalled_shard_holds_up_no_other_shards_completions() -> None:
    """The sweeper completes each shard's transactions as that shard answers: a completion held
    while another shard stalls could land after the producer moved on to its next transaction."""
    router = Router()
    router.stalled = {0}
    router.sweep_answers = {2: [COMPLETION]}

    async def sweep() -> None:
        task = asyncio.ensure_future(TxnSweeper(router).sweep_once())
        for _ in range(50):
            await asyncio.sleep(0)
        assert Op.TXN_COMPLETE in [op for _s, op, _p in router.calls], "completed while shard 0 stalls"
        router.held[0].set_result({"complete": []})
        assert await task == 1

    asyncio.run(sweep())
