"""FindCoordinator answers from the gateway alone: itself for a key whose shard is up,
COORDINATOR_NOT_AVAILABLE with no node for one whose shard is down (Kafka's answer for a
coordinator partition without a live leader)."""

from __future__ import annotations

import asyncio

from tests.gateway.harness import Driver, FakeRouter, make_gateway


class _Router(FakeRouter):
    """Groups whose names start with "down" live on the shard that is down."""

    def shard_for_group(self, org_id: str, group_id: str) -> int:
        return 1 if group_id.startswith("down") else 0

    def is_alive(self, shard: int) -> bool:
        return shard == 0


def _find(version: int, body: dict[str, object]) -> dict[str, object]:
    async def main() -> dict[str, object]:
        gw = make_gateway()
        gw.router = _Router()  # type: ignore[assignment]
        resp = await Driver(gw).request(10, version, body)
        assert resp is not None
        return resp

    return asyncio.run(main())


def test_each_key_is_answered_by_its_shards_liveness() -> None:
    resp = _find(4, {"key_type": 0, "coordinator_keys": ["up", "down", "up2"]})
    assert [(c["key"], c["error_code"], c["node_id"], c["host"], c["port"]) for c in resp["coordinators"]] == [
        ("up", 0, 0, "127.0.0.1", 9092), ("down", 15, -1, "", -1), ("up2", 0, 0, "127.0.0.1", 9092)]
    assert resp["coordinators"][1]["error_message"] == "The coordinator is not available."


def test_one_key_before_v4_and_no_keys_from_v4() -> None:
    down = _find(3, {"key": "down-tx", "key_type": 1})
    assert (down["error_code"], down["node_id"], down["host"], down["port"]) == (15, -1, "", -1)
    up = _find(1, {"key": "g", "key_type": 0})
    assert (up["error_code"], up["node_id"], up["port"]) == (0, 0, 9092)
    assert _find(4, {"key_type": 0, "coordinator_keys": []})["coordinators"] == []
