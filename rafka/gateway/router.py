"""Routing ops from a gateway to the shards that own them.

How this works: ``ShardRouter`` keeps one ZeroMQ DEALER (``rafka.zmtp``) per shard. ``call``
queues an envelope for the owning shard and returns a future; the envelopes queued
for a shard go out as one ZeroMQ message (see ``rafka.rail``) when ``flush`` runs: at
the end of the client read that queued them (the gateway calls it), else on the next
loop pass. Replies resolve the futures by request id as they arrive, and the request
awaiting each takes its next step at once (``ReplyFuture``); when a reply message has
been handled, the ops those steps queued are sent and ``on_replies`` runs, so the
gateway writes what it completed. There is no per-request time cap — a JoinGroup
is rightly parked until its rebalance completes — so liveness is separate: the
router pings every shard; a shard that misses pings for ``dead_after`` seconds, or
whose connection drops (a killed process closes it at once), is marked down: its
pending calls fail with ``ShardUnavailable`` and new calls fail at once until it
answers again — so nothing
sent meanwhile waits in a queue for the next process to run after the client
gave up on it (a KIP-848 heartbeat run so would hand out a revocation nobody hears,
and librdkafka follows a timed-out heartbeat with a partial one). Produce
and transaction-marker calls already sent wait on (``WAIT_OUT_STALL``): a stalled
shard (a slow disk, a paused process) still runs them, and failing them would tell
a producer "not written" of a batch that then is, so its retry would duplicate it.
They fail when a pong with a new incarnation id says the shard restarted (calls
sent before that ping, whose send time the pong echoes, were lost with the old
process), when the shard has been down for ``give_up_after`` seconds (clients
have long timed out by then), or ``give_up_after`` seconds after the connection
they went out on dropped, even if the same process is back: their replies went
with it (a shard routes a reply to the connection its request came on). A pong also carries the shard's layout (its index,
the shard count, the coordinator partition count); a shard whose layout differs
from the gateway's owns other state than the gateway would route to it, so it
stays down (with an error line) until they agree. Pings carry the gateway's view
of that layout, so the refused shard logs the disagreement too. Callers map
``ShardUnavailable`` to a retriable Kafka error.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from rafka import ids
from rafka.gateway.inline import ReplyFuture
from rafka.loops import Soon
from rafka.rail import Op, Status, pack, unpack
from rafka.zmtp import Dealer

log = logging.getLogger("rafka.gateway.router")


# ops a stalled shard still runs, whose failure would be acted on as if they had not: a producer
# retries a batch into a duplicate; a marker courier lets another finish the transaction, and the
# late marker could then end the producer's next one
WAIT_OUT_STALL = frozenset({int(Op.PRODUCE), int(Op.TXN_WRITE_MARKERS)})


class ShardUnavailable(Exception):
    """The owning shard is down, restarting or unreachable."""


class ShardLoading(ShardUnavailable):
    """The owning shard is replaying its log."""


class ShardFailed(Exception):
    """The shard ran the op and it raised: a bug, not an outage (Kafka's UNKNOWN_SERVER_ERROR)."""


class _Shard:
    __slots__ = (
        "alive",
        "dealer",
        "dropped_at",
        "endpoint",
        "incarnation",
        "index",
        "last_seen",
        "outbox",
        "pending",
        "ping_sent",
        "refused",
        "up_since",
        "ups",
    )

    def __init__(self, index: int, endpoint: str) -> None:
        self.index = index
        self.endpoint = endpoint
        self.dealer: Dealer  # set by the router, whose callbacks it calls
        self.pending: dict[int, tuple[asyncio.Future[Any], float, int]] = {}  # rid → (future, sent at, op)
        self.outbox: list[list[Any]] = []
        self.alive = False
        self.incarnation: str | None = None
        self.ups = 0  # times seen coming up: first contact, back from down, or restarted
        self.up_since = 0.0  # time.monotonic() of the last time it came up
        self.last_seen = 0.0
        self.ping_sent: dict[int, float] = {}
        self.dropped_at: float | None = None  # when its connection last dropped, while calls sent before may wait
        self.refused: list[int] | None = None  # the layout it reported, while it differs from ours


class ShardRouter:
    """Sends ops to shards and matches replies to requests."""

    def __init__(self, endpoints: list[str], *, partitions: int = ids.DEFAULT_COORDINATOR_PARTITIONS,
                 ping_interval: float = 0.5, dead_after: float = 2.0, give_up_after: float = 30.0) -> None:
        self.partitions = partitions
        self.ping_interval = ping_interval
        self.dead_after = dead_after
        self.give_up_after = give_up_after
        self._ids = itertools.count(1)
        self.flush = Soon(self._send_queued)  # send every shard the envelopes queued for it
        self._shards = [_Shard(i, ep) for i, ep in enumerate(endpoints)]
        for s in self._shards:
            # a dealer queues nothing while it has no connection: what was sent to a dead process is
            # dropped with it, never delivered to the next one after the caller was told it failed
            s.dealer = Dealer(s.endpoint, lambda frames, s=s: self._on_reply(s, frames[-1]),
                              lambda s=s: self._ping(s, time.monotonic()), lambda s=s: self._on_disconnected(s))
        self._pinger: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set by start()
        self._ping_ids = itertools.count(1)
        self._owners: dict[tuple[Any, ...], int] = {}
        self.on_replies: Callable[[], None] | None = None  # after each reply message: the gateway writes

    @property
    def shard_count(self) -> int:
        return len(self._shards)

    def shard_for_group(self, org_id: str, group_id: str) -> int:
        """The shard owning group (or transactional id) ``group_id`` of ``org_id``."""
        key = (org_id, group_id)
        shard = self._owners.get(key)
        if shard is None:
            shard = self._remember(key, ids.coordinator_partition(org_id, group_id, self.partitions))
        return shard

    def up_since(self, index: int) -> float:
        """``time.monotonic()`` when shard ``index`` last came up (first contact, back, restarted)."""
        return self._shards[index].up_since

    def shard_for_partition(self, org_id: str, topic: str, partition: int) -> int:
        """The shard owning the log of ``topic``/``partition``."""
        key = (org_id, topic, partition)
        shard = self._owners.get(key)
        if shard is None:
            shard = self._remember(key, ids.log_partition(org_id, topic, partition, self.partitions))
        return shard

    def _remember(self, key: tuple[Any, ...], partition: int) -> int:
        """The shard of coordinator ``partition``, cached for ``key`` (the hash is a BLAKE2b
        otherwise). The map never changes; the cache is bounded in entries and skips long
        names, so a client cannot pin memory."""
        shard = ids.shard_for_partition(partition, len(self._shards))
        if len(key[0]) <= 255 and len(key[1]) <= 255:
            if len(self._owners) >= 50_000:
                self._owners.clear()
            self._owners[key] = shard
        return shard

    def shard_for_catalog(self, org_id: str) -> int:
        """The shard owning ``org_id``'s topic catalogue."""
        return self.shard_for_group(org_id, "\0topics")

    def is_alive(self, shard: int) -> bool:
        return self._shards[shard].alive

    def ups(self, shard: int) -> int:
        """How many times ``shard`` came up (first contact, back from down, or a new process):
        a change means it may have missed fan-out ops meanwhile."""
        return self._shards[shard].ups

    async def start(self) -> None:
        """Start readers and pings."""
        self._loop = asyncio.get_running_loop()  # held: each lookup is a getpid() syscall on 3.11
        for s in self._shards:
            self._set_up_gauge(s)
            s.dealer.start()
        self._pinger = asyncio.create_task(self._ping_loop())

    async def close(self) -> None:
        if self._pinger:
            self._pinger.cancel()
            await asyncio.gather(self._pinger, return_exceptions=True)
        for s in self._shards:
            s.dealer.close()
            self._fail_pending(s, ShardUnavailable("gateway closing"))

    def call(self, shard: int, op: Op, org_id: str, payload: Any, trace: str | None = None) -> asyncio.Future[Any]:
        """Send ``op`` to ``shard``; the future gets the reply payload or ShardUnavailable."""
        loop = self._loop or asyncio.get_running_loop()
        fut = ReplyFuture(loop)
        s = self._shards[shard]
        if not s.alive:
            fut.set_exception(ShardUnavailable(f"shard {shard} is down"))
            return fut
        rid = next(self._ids)
        s.pending[rid] = (fut, time.monotonic(), op)
        s.outbox.append([rid, int(op), org_id, trace, payload])
        self.flush.soon()
        return fut

    def _send_queued(self) -> None:
        for s in self._shards:
            if s.outbox:
                batch, s.outbox = s.outbox, []
                if not s.dealer.send(pack(batch)):
                    log.warning("send to shard %d failed: not connected", s.index)
                    for env in batch:
                        entry = s.pending.pop(env[0], None)
                        if entry and not entry[0].done():
                            entry[0].set_exception(ShardUnavailable(f"shard {s.index} is not connected"))

    def _on_reply(self, s: _Shard, data: bytes) -> None:
        try:
            batch = unpack(data)
        except ValueError as exc:
            log.error("shard %d sent garbage: %s", s.index, exc)
            return
        s.last_seen = time.monotonic()
        for rid, status, payload in batch:
            if rid < 0:
                self._on_pong(s, -rid, payload)
                continue
            entry = s.pending.pop(rid, None)
            if entry is None or entry[0].done():
                continue
            fut = entry[0]
            if status == Status.OK:
                try:
                    fut.resolve(payload)  # the awaiting request steps now
                except Exception:  # its own failure is its future's: this is a bug, not the batch's to pay for
                    log.exception("a request failed to take a shard's reply")
            elif status == Status.LOADING:
                fut.set_exception(ShardLoading(f"shard {s.index} is loading"))
            else:
                fut.set_exception(ShardFailed(f"shard {s.index} failed the op: {payload}"))
        self.flush()  # what the resumed requests asked next (a second step) goes now
        if self.on_replies is not None:
            self.on_replies()

    def _on_disconnected(self, s: _Shard) -> None:
        """A shard process that dies drops its end of the connection at once: what it had fails now
        (as a Kafka client sees its coordinator's connection close), not after ``dead_after``. A new
        connection is pinged at once (the dealer's other callback), so a restarted shard is back
        without waiting."""
        s.dropped_at = time.monotonic()
        if s.alive:
            log.error("shard %d at %s disconnected: marking it down", s.index, s.endpoint)
            self._mark_down(s, f"shard {s.index} disconnected", keep=WAIT_OUT_STALL)

    def _on_pong(self, s: _Shard, ping_id: int, payload: Any) -> None:
        sent_at = s.ping_sent.pop(ping_id, None)
        if isinstance(payload, dict) and isinstance(payload.get("sent"), float):
            sent_at = payload["sent"]  # echoed, so known even for a ping queued through a long outage
        incarnation = payload.get("incarnation") if isinstance(payload, dict) else None
        layout = payload.get("layout") if isinstance(payload, dict) else None
        if layout is not None and list(layout) != self._layout(s):
            self._refuse(s, list(layout))
            return
        s.refused = None
        if s.incarnation is not None and incarnation != s.incarnation and sent_at is not None:
            lost = self._fail_pending(s, ShardUnavailable(f"shard {s.index} restarted"), sent_before=sent_at)
            if lost:
                log.warning("shard %d restarted; failing %d requests sent to the old process", s.index, lost)
        if not s.alive:
            log.info("shard %d at %s is up (incarnation %s)", s.index, s.endpoint, incarnation)
        if not s.alive or incarnation != s.incarnation:
            s.ups += 1
            s.up_since = time.monotonic()
        s.incarnation = incarnation
        was_alive, s.alive = s.alive, True
        if not was_alive:
            self._set_up_gauge(s)

    def _layout(self, s: _Shard) -> list[int]:
        """What this gateway expects shard ``s`` to run as: its index, the shard count, the
        coordinator partition count (as the shard reports them)."""
        return [s.index, len(self._shards), self.partitions]

    def _refuse(self, s: _Shard, layout: list[int]) -> None:
        """The shard at ``s.endpoint`` was started as another shard, or with another shard count or
        coordinator partition count: it owns other groups and partitions than this gateway would
        send it, so it is treated as down until the two agree."""
        if s.refused != layout:
            log.error("shard %d at %s runs as shard %d of %d with %d coordinator partitions, but this gateway "
                      "has it as shard %d of %d with %d: not routing to it until they agree (--shards, "
                      "--shard-endpoints, --coordinator-partitions)", s.index, s.endpoint, *layout, *self._layout(s))
            s.refused = layout
        if s.alive:
            self._mark_down(s, f"shard {s.index} has another layout")

    def _mark_down(self, s: _Shard, why: str, keep: frozenset[int] = frozenset()) -> None:
        """``s`` is down: new calls fail at once, pending ones (but those of ``keep``) now."""
        s.alive = False
        self._set_up_gauge(s)
        self._fail_pending(s, ShardUnavailable(why), keep=keep)

    def _set_up_gauge(self, s: _Shard) -> None:
        from rafka.telemetry import gateway_metrics

        gateway_metrics().shard_up.labels(str(s.index)).set(1 if s.alive else 0)

    def _fail_pending(self, s: _Shard, exc: Exception, keep: frozenset[int] = frozenset(),
                      sent_before: float = float("inf")) -> int:
        """Fail the calls pending on ``s`` sent before ``sent_before``, except those of the ops in
        ``keep``; how many."""
        failed = [rid for rid, (_f, t, op) in s.pending.items() if op not in keep and t < sent_before]
        for rid in failed:
            fut = s.pending.pop(rid)[0]
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # a caller gone meanwhile is no "never retrieved" error: the cause is logged
        return len(failed)

    def _ping(self, s: _Shard, now: float) -> None:
        """Send ``s`` a ping (dropped while it has no connection)."""
        pid = next(self._ping_ids)
        # keep only recent pings so the map stays small while a shard is down
        if len(s.ping_sent) > 16:
            s.ping_sent.pop(next(iter(s.ping_sent)))
        s.ping_sent[pid] = now
        ping = {"layout": self._layout(s), "sent": now}  # so a refused shard can say so too
        s.dealer.send(pack([[-pid, int(Op.PING), "", None, ping]]))

    async def _ping_loop(self) -> None:
        last = time.monotonic()
        while True:
            now = time.monotonic()
            # a gateway that did not run for dead_after (stopped, its VM paused) sent no pings:
            # shards that could not answer them are not judged until they have had a round
            stalled, last = now - last > self.dead_after, now
            for s in self._shards:
                if stalled:
                    self._ping(s, now)
                    continue
                if s.alive and now - s.last_seen > self.dead_after and s.ping_sent:
                    log.error("shard %d at %s missed pings for %.1fs: marking it down", s.index, s.endpoint, self.dead_after)
                    self._mark_down(s, f"shard {s.index} is down", keep=WAIT_OUT_STALL)
                if not s.alive and s.pending and now - s.last_seen > self.give_up_after:
                    log.error("shard %d at %s silent for %.0fs: failing its %d pending requests", s.index,
                              s.endpoint, self.give_up_after, len(s.pending))
                    self._fail_pending(s, ShardUnavailable(f"shard {s.index} is down"))
                if s.dropped_at is not None and now - s.dropped_at > self.give_up_after:
                    # sent on a connection that dropped: no reply to them can come
                    lost = self._fail_pending(s, ShardUnavailable(f"the connection to shard {s.index} dropped"),
                                              sent_before=s.dropped_at)
                    if lost:
                        log.error("shard %d at %s: failing %d requests whose connection dropped %.0fs ago", s.index,
                                  s.endpoint, lost, self.give_up_after)
                    s.dropped_at = None
                self._ping(s, now)
            await asyncio.sleep(self.ping_interval)
