"""The gateway's hints of what each KIP-848 group subscribes to: kept while they are of use, and bounded."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from rafka.gateway.handlers import consumer_groups
from rafka.gateway.handlers.consumer_groups import consumer_group_heartbeat


class Shard:
    """Answers heartbeats as the group coordinator does: ``subscribed`` while the group exists."""

    def __init__(self) -> None:
        self.groups: dict[str, set[str]] = {}

    def shard_for_group(self, org_id: str, group_id: str) -> int:
        return 0

    async def call(self, shard: int, op: Any, org_id: str, payload: dict[str, Any], trace: Any) -> dict[str, Any]:
        group = payload["group_id"]
        if payload["member_epoch"] == -1:
            self.groups.pop(group, None)  # the last member left: the group is deleted
        else:
            self.groups[group] = set(payload.get("subscribed_topic_names") or [])
        resp: dict[str, Any] = {"error_code": 0, "member_id": "m", "member_epoch": 1, "assignment": None}
        if group in self.groups:
            resp["subscribed"] = {"names": sorted(self.groups[group]), "regexes": []}
        return resp


class Topics:
    async def lookup(self, ctx: Any, names: list[str], auto_create: bool) -> dict[str, Any]:
        return {n: {"name": n, "topic_id": "id-" + n, "partitions": 1} for n in names}


def _heartbeat(ctx: Any, group: str, epoch: int, topics: list[str] | None) -> None:
    req = {"group_id": group, "member_id": "m", "member_epoch": epoch, "subscribed_topic_names": topics,
           "topic_partitions": None}
    asyncio.run(consumer_group_heartbeat(ctx, req))


def test_a_group_that_is_gone_or_subscribes_to_nothing_leaves_no_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resource probe's 130,000 groups that each joined and left grew the gateway by 5-7 MB
    per 10,000: every group's entry stayed for good."""
    gateway = SimpleNamespace(router=Shard(), topic_cache=Topics())
    ctx = SimpleNamespace(gateway=gateway, org_id="o", api_version=1, client_id="c", client_host="h", trace=None,
                          before_op=lambda aw: aw)
    _heartbeat(ctx, "g1", 0, ["t"])
    _heartbeat(ctx, "g2", 0, ["t"])
    assert set(gateway.consumer_group_subscriptions) == {("o", "g1"), ("o", "g2")}
    _heartbeat(ctx, "g1", -1, None)
    _heartbeat(ctx, "g2", 1, [])
    assert gateway.consumer_group_subscriptions == {}
    monkeypatch.setattr(consumer_groups, "_SUBSCRIPTIONS_CAP", 3)
    for i in range(10):
        _heartbeat(ctx, f"g{i}", 0, ["t"])
        assert len(gateway.consumer_group_subscriptions) <= 3
    assert ("o", "g9") in gateway.consumer_group_subscriptions, "the latest stays"
