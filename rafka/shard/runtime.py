"""The shard runtime: one event loop that owns a set of coordinator partitions.

How this works: a shard binds a ZeroMQ ROUTER (``rafka.zmtp``) and reads batches of
envelopes (``rafka.rail``). For each envelope it calls the pure handler for the op
with ``(org_id, payload, now_ms, respond)``. A handler returns the records that
express its state change and calls ``respond`` now or later (a parked JoinGroup is
answered when its rebalance completes, possibly from a timer). ``apply`` appends
the records to the write-ahead log and replays them into memory — recovery replays
the same records through the same ``replay`` — and responses are held in an outbox
that is released only after the log is flushed: once per rail read, so the ops that
arrived together share one flush (group commit), and once per loop pass for what
timers and late answers wrote. Outboxes leave in the order of their flushes: one
made durable at once still waits behind an earlier one whose fsync is running.
Timers are ``loop.call_later`` callbacks that run on the same loop and go through
``apply`` like any handler.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from rafka import loops, telemetry, zmtp
from rafka.rail import OP_NAMES, Op, Status, pack, unpack
from rafka.shard.groups.core import TimerKey
from rafka.shard.handlers import ShardState
from rafka.shard.metrics import LAG_WINDOW, ShardMetrics, StateCollector, StateFileWriter
from rafka.shard.records import Record
from rafka.shard.wal import EntryTooLarge, WalError

log = logging.getLogger("rafka.shard")

Respond = Callable[[Any], None]


class LoopTimer:
    """The ``Timer`` the group logic uses, backed by this loop's ``call_at``.

    How this works: every heartbeat re-arms its member's session timer, thousands of times
    a second under load, and cancelling a loop timer to start another was a third of a
    heartbeat's cost in the shard. So a key keeps one loop timer and a deadline:
    rescheduling it to a deadline no earlier than its loop timer's (a heartbeat pushing a
    session's expiry forward) only moves the deadline and swaps the callback; a loop timer
    that fires before its key's deadline is armed again for the rest, and one that fires
    at or after it runs the callback. An earlier deadline re-arms at once.
    """

    def __init__(self, runtime: ShardRuntime) -> None:
        self._rt = runtime
        self._timers: dict[TimerKey, _KeyTimer] = {}

    def schedule(self, key: TimerKey, delay_ms: int, callback: Callable[[int], list[Record]]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(delay_ms, 0) / 1000.0
        timer = self._timers.get(key)
        if timer is None:
            timer = self._timers[key] = _KeyTimer(key, deadline, callback)
            timer.arm(loop, self._fire)
            return
        timer.deadline, timer.callback = deadline, callback
        if timer.armed_at > deadline:  # sooner than its loop timer fires (else that re-arms for the rest)
            timer.handle.cancel()
            timer.arm(loop, self._fire)

    def _fire(self, timer: _KeyTimer) -> None:
        loop = asyncio.get_running_loop()
        if timer.deadline - loop.time() >= 0.0005:  # moved on since it was armed (uvloop's clock counts ms)
            timer.arm(loop, self._fire)
            return
        del self._timers[timer.key]
        self._rt.run_timer(timer.key, timer.callback)

    def cancel(self, key: TimerKey) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.handle.cancel()

    def cancel_all(self) -> None:
        for timer in self._timers.values():
            timer.handle.cancel()
        self._timers.clear()


class _KeyTimer:
    """One key's deadline and callback, and the loop timer armed for it (at ``armed_at``); a
    cancelled key's loop timer is cancelled with it, so every one that fires is its key's."""

    __slots__ = ("armed_at", "callback", "deadline", "handle", "key")
    handle: asyncio.TimerHandle
    armed_at: float

    def __init__(self, key: TimerKey, deadline: float, callback: Callable[[int], list[Record]]) -> None:
        self.key = key
        self.deadline = deadline
        self.callback = callback

    def arm(self, loop: asyncio.AbstractEventLoop, fire: Callable[[_KeyTimer], None]) -> None:
        self.armed_at = self.deadline
        self.handle = loop.call_at(self.deadline, fire, self)


class ShardRuntime:
    """Serves one shard's ops from a ZeroMQ ROUTER."""

    def __init__(self, shard_id: int, endpoint: str, state_factory: Callable[[ShardRuntime], ShardState],
                 layout: list[int] | None = None) -> None:
        self.shard_id = shard_id
        self.endpoint = endpoint
        self.layout = layout  # [shard id, shard count, coordinator partitions], told to gateways in every pong
        self._other_layouts: set[tuple[int, ...]] = set()  # those of gateways configured otherwise, logged once
        self.incarnation = uuid.uuid4().hex
        self.timer = LoopTimer(self)
        self.metrics = ShardMetrics(shard_id)
        self.inflight = 0
        self.current_span: Any = None  # the span of the op being handled (for event spans)
        self.state = state_factory(self)
        self.loading = False
        self._outbox: dict[bytes, list[list[Any]]] = defaultdict(list)
        self._unsent: deque[tuple[Any, dict[bytes, list[list[Any]]]]] = deque()  # (durable future, outbox)
        self._flush = loops.Soon(self._release)  # commit the log, then release the replies it holds
        self._router: zmtp.Router | None = None
        self._stopping = asyncio.Event()
        self.failed = False  # the write-ahead log failed: the process exits non-zero to be restarted

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    # -- state changes ---------------------------------------------------
    def apply(self, records: list[Record]) -> None:
        """Append ``records`` to the log and replay them into memory."""
        if records:
            self.state.append(records)

    def run_timer(self, key: TimerKey, callback: Callable[[int], list[Record]]) -> None:
        self.current_span = None
        if self.failed:
            return
        try:
            self.apply(callback(self.now_ms()))
        except WalError as exc:
            self.fail(str(exc))
        except Exception:  # EntryTooLarge too: nothing was written
            log.exception("timer %s failed", key)
        self._flush.soon()

    def fail(self, why: str) -> None:
        """The write-ahead log failed: send the replies already durable, none queued after them
        (they could acknowledge what is not stored), and stop, so the shard restarts and replays."""
        log.critical("the write-ahead log failed (%s): stopping the shard so it restarts and replays", why)
        self._send_durable(until_failed=True)  # replies already durable still go: a lost one is retried
        self.failed = True
        self._outbox.clear()
        self._unsent.clear()
        self.stop()

    # -- responses -------------------------------------------------------
    def responder(self, ident: bytes, rid: int, name: str, trace: str | None) -> Respond:
        """The callback that answers request ``rid`` from peer ``ident``: it queues the reply, and
        is the one instrumentation wrapper (counts, times and traces op ``name`` until answered)."""
        tally = self.metrics.for_op(name)
        meter = self.metrics.meter
        start = time.perf_counter()
        span = telemetry.start_shard_span(name, trace)
        self.current_span = span
        self.inflight += 1
        metrics = self.metrics
        done = False

        def respond(payload: Any) -> None:
            nonlocal done
            if done:
                log.error("op %d answered twice; second answer dropped", rid)
                return
            done = True
            self.inflight -= 1
            meter.record(tally, time.perf_counter() - start)
            code = payload.get("error_code") if isinstance(payload, dict) else None
            if code:
                metrics.errors.labels(name, metrics.shard, str(code)).inc()
            if span is not None:
                if code:
                    span.set_attribute("kafka.error_code", int(code))
                span.end()
            self._outbox[ident].append([rid, int(Status.OK), payload])
            self._flush.soon()

        return respond

    def on_group_event(self, name: str, attrs: dict[str, Any]) -> None:
        """Telemetry for coordinator events (the group logic itself has none)."""
        if name == "rebalance-complete":
            telemetry.event_span("coordinator.rebalance-complete", self.current_span,
                                 generation_id=attrs["generation_id"], leader_id=attrs["leader_id"],
                                 group_id=attrs["group_id"])
        elif name == "rebalance-stable":
            self.metrics.rebalance_duration.labels(self.metrics.shard).observe(attrs["duration_ms"] / 1000.0)

    def _release(self) -> None:
        try:
            durable = self.state.commit()  # replies wait until their records are durable
        except WalError as exc:
            self.fail(str(exc))
            return
        if durable is None and not self._outbox:
            return
        # held until durable, and watched even with no replies (a timer's records): a failed
        # fsync stops the shard whoever wrote what it could not make durable
        self._unsent.append((durable, self._outbox))
        self._outbox = defaultdict(list)
        if durable is None:
            self._send_durable()  # now, unless an earlier outbox still waits
        else:
            loop = asyncio.get_running_loop()
            durable.add_done_callback(lambda _f: loop.call_soon_threadsafe(self._send_durable))

    def _send_durable(self, until_failed: bool = False) -> None:
        """Send the held outboxes whose commits are durable, oldest first, up to one that is not
        (one that failed stops the shard, unless it is stopping for that already)."""
        while self._unsent and not self.failed:
            durable, outbox = self._unsent[0]
            if durable is not None:
                if not durable.done():
                    return
                if durable.exception() is not None:
                    if not until_failed:
                        self.fail(str(durable.exception()))
                    return
            self._unsent.popleft()
            self._send(outbox)

    def _send(self, outbox: dict[bytes, list[list[Any]]]) -> None:
        router = self._router
        if router is None or self.failed:
            return
        for ident, batch in outbox.items():  # empty for a commit that had no replies
            if not router.send([ident, pack(batch)]):
                log.warning("replies to a gateway dropped: its connection is gone")

    # -- serving ---------------------------------------------------------
    def _check_layout(self, ping: Any) -> None:
        """Log (once per layout) a gateway that pings with another layout: it refuses this shard."""
        theirs = ping.get("layout") if isinstance(ping, dict) else None
        if theirs is None or self.layout is None or list(theirs) == self.layout:
            return
        key = tuple(theirs)
        if key not in self._other_layouts and len(self._other_layouts) < 16:
            self._other_layouts.add(key)
            log.error("a gateway has this shard as shard %d of %d with %d coordinator partitions, but it runs as "
                      "shard %d of %d with %d: that gateway will not route to it until they agree "
                      "(--shards, --shard-endpoints, --coordinator-partitions)", *theirs, *self.layout)

    def handle(self, ident: bytes, env: list[Any]) -> None:
        """Run one request envelope."""
        rid, op, org_id, trace, payload = env
        if self.failed:
            return  # stopping: nothing more is logged or answered
        if op == Op.PING:
            # the pong queues behind the replies before it: a gateway must see those before a new
            # incarnation makes it fail what it sent earlier, and a disk stuck in fsync must show
            self._check_layout(payload)
            self._outbox[ident].append([rid, int(Status.OK), {
                "incarnation": self.incarnation, "shard": self.shard_id, "layout": self.layout,
                "sent": payload.get("sent") if isinstance(payload, dict) else None}])
            return
        if self.loading:
            self._outbox[ident].append([rid, int(Status.LOADING), None])
            return
        respond = self.responder(ident, rid, OP_NAMES.get(op, str(op)), trace)
        try:
            self.state.dispatch(op, org_id, payload, self.now_ms(), respond, trace)  # Op is an IntEnum: int keys match
        except WalError as exc:
            self.fail(str(exc))
        except EntryTooLarge as exc:  # nothing written or replayed: refuse this op, keep serving the rest
            log.error("op %s from org %r refused: %s", OP_NAMES.get(op, str(op)), org_id, exc)
            queue = self._outbox[ident]
            queue[:] = [reply for reply in queue if reply[0] != rid]  # an answer the handler already gave
            queue.append([rid, int(Status.FAILED), f"EntryTooLarge: {exc}"])
        except Exception as exc:
            log.exception("op %s failed", op)
            self._outbox[ident].append([rid, int(Status.FAILED), f"{type(exc).__name__}: {exc}"])

    async def serve(self) -> None:
        """Bind and serve until ``stop()``."""
        router = zmtp.Router(self._on_frames, self._flush)  # the ops read together share a flush
        await router.bind(self.endpoint)
        self._router = router
        log.info("shard %d serving on %s", self.shard_id, self.endpoint)
        self.metrics.up.labels(self.metrics.shard).set(1)
        collector = StateCollector(self.state, self.shard_id)
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        # made before replay: the last incarnation's file goes, else its state would read as current
        writer = StateFileWriter(collector, directory, self.shard_id) if directory else None
        await self._recover()
        self.metrics.up.labels(self.metrics.shard).set(0)
        self.state.start(self.now_ms())
        self._housekeeping_task = asyncio.create_task(self._housekeeping(collector, writer))
        await self._stopping.wait()
        self._housekeeping_task.cancel()
        self.timer.cancel_all()
        self._flush()
        self.state.close()  # waits for the fsyncs running
        self._send_durable()  # so every reply they held leaves before the connections close
        router.close()
        self.metrics.meter.flush()  # the last ops' counts, before the process exits

    async def _housekeeping(self, collector: StateCollector, writer: StateFileWriter | None) -> None:
        """Every second: loop lag (the largest of the last ``LAG_WINDOW`` measurements) and queue
        depth; every 5 s: the state metrics file (else the collector serves this process's
        registry, from now: it reads state that replay no longer changes)."""
        if writer is None:
            from prometheus_client import REGISTRY

            REGISTRY.register(collector)
        shard = self.metrics.shard
        tick = 0
        lags: deque[float] = deque(maxlen=LAG_WINDOW)
        while True:
            before = time.perf_counter()
            await asyncio.sleep(1.0)
            lags.append(max(0.0, time.perf_counter() - before - 1.0))
            self.metrics.loop_lag.labels(shard).set(max(lags))
            self.metrics.inflight.labels(shard).set(self.inflight)
            if writer is not None and tick % 5 == 0:
                try:
                    writer.write()
                except Exception:
                    log.exception("writing state metrics failed")
            tick += 1

    async def _recover(self) -> None:
        """Replay the write-ahead log, answering LOADING meanwhile."""
        self.loading = True
        start = time.perf_counter()
        count = 0
        # Replay allocates millions of long-lived objects: the cyclic GC would rescan them again
        # and again (half the replay time). Pause it, then freeze what was loaded so later
        # collections skip it (``loops.tune_gc``).
        gc.disable()
        try:
            for count in self.state.recover():
                await asyncio.sleep(0)  # let pings and LOADING answers through
        finally:
            gc.enable()
            loops.tune_gc()
        self.loading = False
        if count:
            secs = time.perf_counter() - start
            log.info("shard %d recovered %d records in %.2fs (%.0f records/s)", self.shard_id, count, secs,
                     count / max(secs, 1e-9))

    def _on_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            log.error("dropping a rail message with %d frames", len(frames))
            return
        self._handle_message(frames[0], frames[1])

    def _handle_message(self, ident: bytes, data: bytes) -> None:
        try:
            batch = unpack(data)
        except ValueError as exc:
            log.error("dropping a bad rail message: %s", exc)
            return
        for env in batch:
            if not isinstance(env, list) or len(env) != 5 or type(env[0]) is not int or type(env[1]) is not int:
                log.error("dropping a bad envelope")
                continue
            self.handle(ident, env)

    def stop(self) -> None:
        self._stopping.set()
