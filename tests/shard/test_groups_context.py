"""Test context for the pure group coordinator (like Kafka's GroupMetadataManagerTestContext).

``GroupsTestContext`` drives a ``GroupCoordinator`` with a hand-driven clock and a
``FakeTimer`` (a heap advanced by ``sleep``). ``call`` runs a handler, replays the
records it returned (as the shard runtime does) and hands back a ``Response`` that
captures what the client would receive — possibly later, for a parked
JoinGroup/SyncGroup. Every record also goes through msgpack, so a test fails if a
record is not plain data, and is kept in ``ctx.log`` (the WAL) for recovery tests.

This module has no tests of its own; it holds the helpers the other
``test_groups_*.py`` modules share.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

import msgpack

from rafka.protocol.consumer_protocol import encode_subscription
from rafka.shard.groups import GroupConfig, GroupCoordinator
from rafka.shard.groups.core import TimerKey
from rafka.shard.records import Record

ORG = "org-a"
T0 = 1_700_000_000_000


class FakeTimer:
    """A heap of timers keyed like the runtime's: scheduling a key replaces its timer."""

    def __init__(self, ctx: GroupsTestContext) -> None:
        self.ctx = ctx
        self._heap: list[tuple[int, int, TimerKey]] = []
        self._live: dict[TimerKey, tuple[int, int, Callable[[int], list[Record]]]] = {}
        self._seq = itertools.count()

    def schedule(self, key: TimerKey, delay_ms: int, callback: Callable[[int], list[Record]]) -> None:
        assert delay_ms >= 0, (key, delay_ms)
        entry = (self.ctx.now + delay_ms, next(self._seq), callback)
        self._live[key] = entry
        heapq.heappush(self._heap, (entry[0], entry[1], key))

    def cancel(self, key: TimerKey) -> None:
        self._live.pop(key, None)

    def pop_due(self, until: int) -> tuple[int, Callable[[int], list[Record]]] | None:
        while self._heap and self._heap[0][0] <= until:
            due, seq, key = heapq.heappop(self._heap)
            live = self._live.get(key)
            if live is not None and live[1] == seq:
                del self._live[key]
                return due, live[2]
        return None

    def keys(self) -> set[TimerKey]:
        return set(self._live)

    def deadline(self, key: TimerKey) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]


class Response:
    """What a client receives for one request; fails if answered twice."""

    def __init__(self) -> None:
        self.value: dict[str, Any] | None = None

    def __call__(self, response: dict[str, Any]) -> None:
        assert self.value is None, f"answered twice: {self.value} then {response}"
        self.value = response

    @property
    def done(self) -> bool:
        return self.value is not None

    def __getitem__(self, key: str) -> Any:
        assert self.value is not None, "request is still parked"
        return self.value[key]

    @property
    def error(self) -> int:
        return self["error_code"]


def roundtrip(record: Record) -> Record:
    """The record as the WAL would give it back (msgpack round trip)."""
    key = msgpack.unpackb(msgpack.packb(list(record.key)), use_list=False)
    value = msgpack.unpackb(msgpack.packb(record.value))
    return Record(record.type, tuple(key), value)


class GroupsTestContext:
    """A coordinator, a hand-driven clock, a fake timer and the WAL written so far."""

    def __init__(self, org: str = ORG, **config: Any) -> None:
        self.org = org
        self.now = T0
        self.timer = FakeTimer(self)
        uuids = itertools.count(1)
        uids = itertools.count(1)
        self.coord = GroupCoordinator(
            GroupConfig(**config), self.timer,
            new_member_uuid=lambda: f"uuid{next(uuids)}",
            new_group_uid=lambda now_ms: f"cgp_{now_ms}_{next(uids)}",
        )
        self.log: list[Record] = []
        self.last_records: list[Record] = []

    # ---------------------------------------------------------------- driving
    def call(self, handler: str, op: dict[str, Any], org: str | None = None) -> Response:
        response = Response()
        records = getattr(self.coord, handler)(org or self.org, op, self.now, response)
        self.last_records = list(records)
        self.write(records)
        return response

    def write(self, records: list[Record]) -> None:
        for record in records:
            roundtrip(record)  # must be plain msgpack-able data
            self.coord.replay(record)
            self.log.append(record)

    def sleep(self, ms: int) -> list[Record]:
        """Advance the clock by ``ms``, firing due timers in order; returns their records."""
        target = self.now + ms
        fired: list[Record] = []
        while (due := self.timer.pop_due(target)) is not None:
            self.now = max(self.now, due[0])
            records = due[1](self.now)
            fired.extend(records)
            self.write(records)
        self.now = target
        return fired

    def group(self, group_id: str = "g", org: str | None = None):  # type: ignore[no-untyped-def]
        return self.coord.groups.get((org or self.org, group_id))

    def state(self, group_id: str = "g", org: str | None = None) -> str:
        group = self.group(group_id, org)
        return "Dead" if group is None else group.state.value

    # ------------------------------------------------------------ shortcuts
    def join(self, group_id: str = "g", member_id: str = "", **kw: Any) -> Response:
        return self.call("join_group", join_op(group_id, member_id, **kw))

    def join_new_member(self, group_id: str = "g", client_id: str = "client", **kw: Any) -> tuple[str, Response]:
        """KIP-394 flow: MEMBER_ID_REQUIRED, then rejoin with the handed-out id (parked)."""
        first = self.join(group_id, "", client_id=client_id, **kw)
        assert first.error == 79, first.value
        member_id = first["member_id"]
        return member_id, self.join(group_id, member_id, client_id=client_id, **kw)

    def sync(self, group_id: str, member_id: str, generation: int, **kw: Any) -> Response:
        return self.call("sync_group", sync_op(group_id, member_id, generation, **kw))

    def heartbeat(self, group_id: str, member_id: str, generation: int, **kw: Any) -> Response:
        return self.call("heartbeat", heartbeat_op(group_id, member_id, generation, **kw))

    def leave(self, group_id: str, *members: tuple[str, str | None], version: int = 5) -> Response:
        return self.call("leave_group", leave_op(group_id, list(members), version=version))

    def commit(self, group_id: str, offsets: dict[str, dict[int, int]], **kw: Any) -> Response:
        return self.call("offset_commit", commit_op(group_id, offsets, **kw))

    def fetch(self, group_id: str, topics: dict[str, list[int]] | None = None, **kw: Any) -> Response:
        return self.call("offset_fetch", fetch_op(group_id, topics, **kw))

    def stable_group(self, group_id: str = "g", n: int = 1, topics: tuple[str, ...] = ("t",), **kw: Any) -> list[str]:
        """Bring ``n`` dynamic members into a Stable group; returns member ids, leader first."""
        ids: list[str] = []
        pending: list[Response] = []
        for i in range(n):
            member_id, resp = self.join_new_member(group_id, client_id=f"c{i}", topics=topics, **kw)
            ids.append(member_id)
            pending.append(resp)
        self.sleep(0)  # initial rebalance delay 0: the join timer fires on the next tick
        generation = pending[0]["generation_id"]
        leader = pending[0]["leader"]
        assert all(p.error == 0 for p in pending), [p.value for p in pending]
        ids.sort(key=lambda m: m != leader)
        syncs = [self.sync(group_id, m, generation, assignments=[{"member_id": x, "assignment": x.encode()}
                                                                   for x in ids] if m == leader else [])
                 for m in reversed(ids)]
        assert all(s.error == 0 for s in syncs), [s.value for s in syncs]
        assert self.state(group_id) == "Stable"
        return ids


# ---------------------------------------------------------------- op builders
def meta(*topics: str, version: int = 3) -> bytes:
    return encode_subscription(list(topics), version=version)


def join_op(
    group_id: str = "g", member_id: str = "", *, instance_id: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None, topics: tuple[str, ...] = ("t",),
    protocol_type: str = "consumer", session: int = 10_000, rebalance: int | None = 30_000,
    version: int = 9, client_id: str = "client", client_host: str = "/10.0.0.1",
) -> dict[str, Any]:
    if protocols is None:
        protocols = [("range", meta(*topics)), ("cooperative-sticky", meta(*topics))]
    return {
        "group_id": group_id, "session_timeout": session, "rebalance_timeout": rebalance,
        "member_id": member_id, "group_instance_id": instance_id, "protocol_type": protocol_type,
        "protocols": [{"name": n, "metadata": m} for n, m in protocols], "reason": None,
        "api_version": version, "client_id": client_id, "client_host": client_host,
    }


def sync_op(
    group_id: str, member_id: str, generation: int, *, instance_id: str | None = None,
    assignments: list[dict[str, Any]] | None = None, protocol_type: str | None = None,
    protocol_name: str | None = None, version: int = 5,
) -> dict[str, Any]:
    return {"group_id": group_id, "generation_id": generation, "member_id": member_id,
            "group_instance_id": instance_id, "protocol_type": protocol_type, "protocol_name": protocol_name,
            "assignments": assignments or [], "api_version": version}


def heartbeat_op(group_id: str, member_id: str, generation: int, *, instance_id: str | None = None,
                 version: int = 4) -> dict[str, Any]:
    return {"group_id": group_id, "generation_id": generation, "member_id": member_id,
            "group_instance_id": instance_id, "api_version": version}


def leave_op(group_id: str, members: list[tuple[str, str | None]], version: int = 5) -> dict[str, Any]:
    return {"group_id": group_id, "api_version": version,
            "members": [{"member_id": m, "group_instance_id": i, "reason": None} for m, i in members]}


def commit_op(
    group_id: str, offsets: dict[str, dict[int, int]], *, generation: int = -1, member_id: str = "",
    instance_id: str | None = None, metadata: str | None = None, leader_epoch: int = -1, version: int = 9,
    retention_time: int = -1,
) -> dict[str, Any]:
    return {
        "group_id": group_id, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": instance_id, "retention_time": retention_time, "api_version": version,
        "topics": [{"name": t, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": leader_epoch,
             "committed_metadata": metadata} for p, o in parts.items()]} for t, parts in offsets.items()],
    }


def fetch_op(group_id: str, topics: dict[str, list[int]] | None = None, version: int = 9) -> dict[str, Any]:
    return {"group_id": group_id, "require_stable": False, "api_version": version,
            "topics": None if topics is None else [{"name": t, "partition_indexes": p} for t, p in topics.items()]}


def committed(resp: Response) -> dict[tuple[str, int], int]:
    """``{(topic, partition): committed_offset}`` from an OffsetFetch response."""
    return {(t["name"], p["partition_index"]): p["committed_offset"] for t in resp["topics"] for p in t["partitions"]}


def partition_errors(resp: Response) -> dict[tuple[str, int], int]:
    """``{(topic, partition): error_code}`` from an OffsetCommit/OffsetDelete response."""
    return {(t["name"], p["partition_index"]): p["error_code"] for t in resp["topics"] for p in t["partitions"]}
