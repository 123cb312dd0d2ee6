"""A small blocking client of the shards' rail, for the REST admin API.

How this works: the admin API runs in a thread of the HTTP server, outside any
event loop, and its requests are rare. So each ``ShardClient.call`` opens one
ZeroMQ DEALER socket per shard it needs, sends all that shard's envelopes
(``[request_id, op, org_id, trace, payload]``, see ``rafka.rail``) as one batch,
waits for every reply (a shard may answer one batch in several messages) up to a
deadline, and closes the sockets. Routing is the gateway's: ``rafka.ids``.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any

import zmq

from rafka import ids
from rafka.rail import Op, Status, pack, unpack

CATALOG_KEY = "\0topics"


class ShardError(Exception):
    """A shard could not answer (down, loading, timed out, or the op failed)."""


@dataclass
class Call:
    """One op for one shard; ``result`` or ``error`` is set by ``ShardClient.call``."""

    shard: int
    op: Op
    payload: Any
    result: Any = None
    error: ShardError | None = None

    def value(self) -> Any:
        """The reply payload, or raise the call's ``ShardError``."""
        if self.error is not None:
            raise self.error
        return self.result


class ShardClient:
    """Blocking request/reply with the shards at ``endpoints``."""

    def __init__(self, endpoints: list[str], partitions: int = ids.DEFAULT_COORDINATOR_PARTITIONS,
                 timeout: float = 5.0) -> None:
        self.endpoints = endpoints
        self.partitions = partitions
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def shard_count(self) -> int:
        return len(self.endpoints)

    def shard_for_group(self, org_id: str, group_id: str) -> int:
        """The shard owning ``group_id`` of ``org_id`` (as the gateway routes it)."""
        return ids.shard_for_partition(self.coordinator_partition(org_id, group_id), self.shard_count)

    def coordinator_partition(self, org_id: str, group_id: str) -> int:
        return ids.coordinator_partition(org_id, group_id, self.partitions)

    def shard_for_partition(self, org_id: str, topic: str, partition: int) -> int:
        """The shard owning the log of ``topic``/``partition``."""
        return ids.shard_for_partition(ids.log_partition(org_id, topic, partition, self.partitions), self.shard_count)

    def shard_for_catalog(self, org_id: str) -> int:
        return self.shard_for_group(org_id, CATALOG_KEY)

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def call(self, org_id: str, calls: list[Call], timeout: float | None = None) -> list[Call]:
        """Run ``calls`` (any shards, any ops) concurrently; fills each call's result or error."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        ctx = zmq.Context.instance()
        by_rid: dict[int, Call] = {}
        batches: dict[int, list[list[Any]]] = {}
        for c in calls:
            rid = self._next_id()
            by_rid[rid] = c
            batches.setdefault(c.shard, []).append([rid, int(c.op), org_id, None, c.payload])
        socks: dict[zmq.Socket[bytes], int] = {}
        poller = zmq.Poller()
        try:
            for shard, batch in batches.items():
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(self.endpoints[shard])
                socks[sock] = shard
                poller.register(sock, zmq.POLLIN)
                try:
                    sock.send(pack(batch), zmq.NOBLOCK)
                except zmq.ZMQError as exc:
                    self._fail(by_rid, shard, f"shard {shard} unreachable: {exc}")
            while any(c.result is None and c.error is None for c in by_rid.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for sock, _ev in poller.poll(int(left * 1000) + 1):
                    self._receive(sock, socks[sock], by_rid)
        finally:
            for sock in socks:
                sock.close(0)
        for c in by_rid.values():
            if c.result is None and c.error is None:
                c.error = ShardError(f"shard {c.shard} did not answer in time")
        return calls

    def _receive(self, sock: zmq.Socket[bytes], shard: int, by_rid: dict[int, Call]) -> None:
        while True:
            try:
                data = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                batch = unpack(data)
            except ValueError as exc:
                self._fail(by_rid, shard, str(exc))
                return
            for rid, status, payload in batch:
                c = by_rid.get(rid)
                if c is None:
                    continue
                if status == Status.OK:
                    c.result = payload if payload is not None else {}
                elif status == Status.LOADING:
                    c.error = ShardError(f"shard {shard} is loading")
                else:
                    c.error = ShardError(f"shard {shard} failed the op: {payload}")

    @staticmethod
    def _fail(by_rid: dict[int, Call], shard: int, message: str) -> None:
        for c in by_rid.values():
            if c.shard == shard and c.result is None and c.error is None:
                c.error = ShardError(message)

    def one(self, org_id: str, shard: int, op: Op, payload: Any, timeout: float | None = None) -> Any:
        """A single call; its reply payload (raises ``ShardError``)."""
        return self.call(org_id, [Call(shard, op, payload)], timeout)[0].value()
