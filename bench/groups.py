"""Group coordination at scale: time to Stable, and sustained heartbeats — rafka vs the mock.

* Time for a group of 1, 10 and 100 members to reach Stable after the last member's
  JoinGroup is sent (rafka with group.initial.rebalance.delay.ms = 0): every member
  loops join → sync (rejoining on REBALANCE_IN_PROGRESS) until all hold the same
  generation with every member in it.
* Heartbeats/s sustained by M members in G groups (default 10,000 in 1,000), each
  heartbeating as fast as its previous heartbeat returns, and the p99 latency. The
  mock's classic coordinator cannot hold groups formed this fast (it re-times every
  rebalance with fixed timers), so its baseline is the same client sending the same
  number of back-to-back ApiVersions requests: the C broker's ceiling for this client.
  Also the broker's CPU per request meanwhile (rafka's gateway and shards; the mock's
  threads, the client being this process's main thread): on a machine the client shares,
  a steadier figure than the rate.

The client is the same for rafka and librdkafka's mock cluster: a pipelined asyncio
Kafka client over a few connections, heartbeats pre-encoded (only the correlation id
changes), so it costs little next to the broker.
Usage: python bench/groups.py [--members 10000] [--groups 1000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import resource
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

from common import cpu_seconds, mock_cluster, rafka, table
from kio.serial import entity_writer

from rafka.protocol import codec

JOIN, SYNC, HEARTBEAT = 11, 14, 12
JOIN_V, SYNC_V, HB_V = 5, 3, 3  # non-flexible versions the mock also serves
META = b"\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x00"  # consumer protocol v1: topic "t", no user data
EMPTY_ASSIGNMENT = b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"  # consumer assignment v0: no partitions, no user data


def encode(api_key: int, version: int, body: dict[str, Any], corr: int = 0) -> bytearray:
    cls = codec.request_class(api_key, version)
    out = io.BytesIO()
    out.write(struct.pack(">hhih", api_key, version, corr, 5) + b"bench")
    if cls.__header_schema__.__flexible__:
        out.write(b"\0")
    entity_writer(cls)(out, codec.from_op(cls, body))
    data = out.getvalue()
    return bytearray(struct.pack(">i", len(data)) + data)


class Conn:
    """One pipelined connection: ``call`` sends a pre-encoded request and awaits its frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.pending: dict[int, asyncio.Future[bytes]] = {}
        self.corr = 0
        self.task = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        r, w = await asyncio.open_connection(host, port)
        return cls(r, w)

    async def _read(self) -> None:
        try:
            while True:
                size = struct.unpack(">i", await self.reader.readexactly(4))[0]
                frame = await self.reader.readexactly(size)
                fut = self.pending.pop(struct.unpack_from(">i", frame)[0], None)
                if fut is not None and not fut.done():
                    fut.set_result(frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("closed"))

    def call(self, request: bytearray) -> asyncio.Future[bytes]:
        self.corr += 1
        struct.pack_into(">i", request, 8, self.corr)
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.pending[self.corr] = fut
        self.writer.write(bytes(request))
        return fut

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        frame = await self.call(encode(api_key, version, body))
        cls = codec.response_class(api_key, version)
        entity, _ = codec._reader(cls)(memoryview(frame), 4)
        return codec.to_op(entity)

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


class Member:
    """One classic-protocol group member driven through join and sync."""

    def __init__(self, conn: Conn, group: str) -> None:
        self.conn, self.group = conn, group
        self.member_id = ""
        self.generation = -1
        self.joined: dict[str, Any] | None = None  # a join response not yet followed by a sync

    def join_body(self) -> dict[str, Any]:
        return {"group_id": self.group, "session_timeout": 45_000, "rebalance_timeout": 45_000,
                "member_id": self.member_id, "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": META}]}

    async def get_member_id(self) -> None:
        """Kafka hands out the member id with MEMBER_ID_REQUIRED (79, v4+); the mock joins at once."""
        resp = await self.conn.request(JOIN, JOIN_V, self.join_body())
        self.member_id = resp["member_id"]
        self.joined = resp if resp["error_code"] == 0 else None

    async def join_until_stable(self) -> int:
        """Join and sync until a sync succeeds; the generation it succeeded in."""
        while True:
            resp, self.joined = self.joined, None
            if resp is None:
                resp = await self.conn.request(JOIN, JOIN_V, self.join_body())
            if resp["error_code"] not in (0, 79):
                raise RuntimeError(f"join failed: {resp['error_code']}")
            self.member_id, self.generation = resp["member_id"], resp["generation_id"]
            if resp["error_code"] == 79:
                continue
            leader = resp["leader"] == self.member_id
            assignments = ([{"member_id": m["member_id"], "assignment": EMPTY_ASSIGNMENT} for m in resp["members"]]
                           if leader else [])
            frame = await self.conn.call(encode(SYNC, SYNC_V, {
                "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": None, "assignments": assignments}))
            error = struct.unpack_from(">h", frame, 8)[0]  # corr(4) throttle(4) error(2); the mock may send a null assignment
            # ILLEGAL_GENERATION / REBALANCE_IN_PROGRESS: a later member joined; the mock answers
            # INVALID_REQUEST when the leader's assignment no longer matches its members
            if error in (22, 27, 42):
                continue
            if error:
                raise RuntimeError(f"sync failed: {error}")
            return self.generation

    def heartbeat_request(self) -> bytearray:
        return encode(HEARTBEAT, HB_V, {"group_id": self.group, "generation_id": self.generation,
                                        "member_id": self.member_id, "group_instance_id": None})


async def _connections(bootstrap: str, n: int) -> list[Conn]:
    host, port = bootstrap.split(":")
    return [await Conn.open(host, int(port)) for _ in range(n)]


async def time_to_stable(bootstrap: str, size: int) -> float:
    conns = await _connections(bootstrap, size)  # one per member, as real clients do
    group = f"stable-{size}-{uuid.uuid4().hex[:6]}"
    members = [Member(conns[i], group) for i in range(size)]
    await asyncio.gather(*(m.get_member_id() for m in members))
    start = time.perf_counter()
    generations = await asyncio.gather(*(m.join_until_stable() for m in members))
    # everyone ends in one generation holding every member (a stale one would have been told to rejoin)
    while len(set(generations)) != 1:
        generations = await asyncio.gather(*(m.join_until_stable() for m in members))
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return elapsed


async def heartbeats(bootstrap: str, n_members: int, n_groups: int, seconds: float,
                     broker_cpu: Callable[[], float], api_versions_only: bool = False) -> tuple[float, float, int, float]:
    """(requests/s, p99 ms, errors, broker CPU µs per request) with every member heartbeating
    back to back; ``broker_cpu()`` is the broker's CPU seconds so far.

    With ``api_versions_only`` no groups are formed and every "member" sends ApiVersions v0
    instead: the same client, connections and concurrency against a request every broker
    answers at once — the baseline run against the mock cluster.
    """
    conns = await _connections(bootstrap, 8)
    per_group = n_members // n_groups
    run = uuid.uuid4().hex[:6]
    members: list[Member] = []

    async def form(g: int) -> None:
        # each member joins over its own connection (as real clients do), then heartbeats
        # over the shared ones
        own = await _connections(bootstrap, per_group)
        ms = [Member(c, f"hb-{run}-{g}") for c in own]
        await asyncio.gather(*(m.get_member_id() for m in ms))
        generations = await asyncio.gather(*(m.join_until_stable() for m in ms))
        while len(set(generations)) != 1:
            generations = await asyncio.gather(*(m.join_until_stable() for m in ms))
        for i, m in enumerate(ms):
            m.conn = conns[(g + i) % len(conns)]
        for c in own:
            c.close()
        members.extend(ms)

    if api_versions_only:
        members = [Member(conns[i % len(conns)], "") for i in range(n_members)]
    else:
        for first in range(0, n_groups, 250):
            await asyncio.gather(*(form(g) for g in range(first, min(first + 250, n_groups))))
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def beat(m: Member) -> None:
        nonlocal errors
        req = encode(18, 0, {}) if api_versions_only else m.heartbeat_request()
        while time.perf_counter() < stop:
            t = time.perf_counter()
            frame = await m.conn.call(req)
            latencies.append(time.perf_counter() - t)
            # Heartbeat v3: corr(4) throttle(4) error(2); ApiVersions v0: corr(4) error(2)
            if struct.unpack_from(">h", frame, 4 if api_versions_only else 8)[0]:
                errors += 1

    cpu = broker_cpu()
    start = time.perf_counter()
    await asyncio.gather(*(beat(m) for m in members))
    elapsed = time.perf_counter() - start
    cpu = broker_cpu() - cpu
    for c in conns:
        c.close()
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    return len(latencies) / elapsed, p99, errors, cpu * 1e6 / max(len(latencies), 1)


def _other_threads_cpu() -> float:
    """CPU seconds of this process's threads but the calling one: the mock cluster's (the
    client runs on this thread)."""
    return (sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
            - sum(resource.getrusage(resource.RUSAGE_THREAD)[:2]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=1_000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--shards", type=int, default=2)
    args = ap.parse_args()
    flags = ["--in-memory", "--group-initial-rebalance-delay-ms", "0"]
    rows = []
    # The mock is no peer for time to Stable: it waits a fixed group.initial.rebalance.delay.ms
    # and then session.timeout.ms - 1 s for late joiners, so only rafka's figure is printed.
    for size in (1, 10, 100):
        with rafka(*flags, shards=args.shards) as bootstrap:
            got = asyncio.run(time_to_stable(bootstrap, size))
        rows.append([f"time to Stable, {size} members", f"{got * 1000:.0f} ms", "n/a (fixed timers)", "",
                     "<= 1 s for 100" if size == 100 else "",
                     ("met" if got <= 1 else "not met") if size == 100 else ""])
    # The mock's classic coordinator re-times every rebalance with fixed timers and drops members
    # of groups formed this fast, so its baseline is the same load of ApiVersions requests.
    with mock_cluster() as mock:
        mrate, mp99, _, mcpu = asyncio.run(heartbeats(mock, args.members, args.groups, args.seconds,
                                                      _other_threads_cpu, True))
    with rafka(*flags, shards=args.shards) as bootstrap:
        rate, p99, err, cpu = asyncio.run(heartbeats(bootstrap, args.members, args.groups, args.seconds,
                                                     lambda: cpu_seconds(bootstrap.pid)))
    rows.append([f"heartbeats/s, {args.members:,} members in {args.groups:,} groups", f"{rate:,.0f}",
                 f"{mrate:,.0f} (ApiVersions)", f"{rate / mrate:.2f}x", "", f"{err} heartbeat errors"])
    rows.append(["heartbeat p99 latency", f"{p99:.1f} ms", f"{mp99:.1f} ms (ApiVersions)", f"{mp99 / p99:.2f}x", "",
                 ""])
    rows.append(["broker CPU per heartbeat", f"{cpu:.1f} µs", f"{mcpu:.1f} µs (ApiVersions)", f"{mcpu / cpu:.2f}x", "",
                 "gateway and shards; the mock's threads"])
    print(table(rows, ["figure", f"rafka ({args.shards} shards)", "mock", "speed ratio", "target", ""]))


if __name__ == "__main__":
    main()
