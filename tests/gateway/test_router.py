"""The router against a stand-in shard on a real ZeroMQ socket: a shard that stalls past
``dead_after`` is marked down, yet the produce calls it was already sent are answered when it
resumes, not failed (a producer told "not written" of a batch the shard then writes retries it
into a duplicate); its other calls fail; a restart fails what the old process lost; a shard
silent for ``give_up_after`` has its requests failed; a dropped connection (a killed process)
marks the shard down at once, and nothing sent meanwhile reaches the next process; a produce sent
on a connection that dropped fails ``give_up_after`` later even when the same process is back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from rafka.gateway.inline import InlineRequest
from rafka.gateway.router import ShardRouter, ShardUnavailable
from rafka.rail import Op, Status, pack, unpack


class StandInShard:
    """A ROUTER socket that answers pings while ``responsive`` and holds every other request."""

    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.responsive = True
        self.incarnation = "one"
        self.held: list[tuple[bytes, int]] = []

    async def run(self) -> None:
        while not self.sock.closed:
            while self.responsive and self.sock.poll(0):
                ident, data = self.sock.recv_multipart()
                for rid, op, _org, _trace, payload in unpack(data):
                    if op == Op.PING:
                        pong = {"incarnation": self.incarnation, "layout": payload["layout"], "sent": payload["sent"]}
                        self.sock.send_multipart([ident, pack([[rid, int(Status.OK), pong]])])
                    else:
                        self.held.append((ident, rid))
            await asyncio.sleep(0.01)

    def answer_held(self, together: bool = False) -> None:
        """Answer what it holds: a message per reply, or one message for them all."""
        replies = [(ident, [rid, int(Status.OK), {"answered": rid}]) for ident, rid in self.held]
        if together and replies:
            self.sock.send_multipart([replies[0][0], pack([reply for _ident, reply in replies])])
        for ident, reply in [] if together else replies:
            self.sock.send_multipart([ident, pack([reply])])
        self.held.clear()


async def _with_router(tmp_path: Path, scenario: Any, give_up_after: float = 30.0) -> None:
    shard = StandInShard(f"ipc://{tmp_path}/shard")
    router = ShardRouter([f"ipc://{tmp_path}/shard"], partitions=1, ping_interval=0.05, dead_after=0.3,
                         give_up_after=give_up_after)
    server = asyncio.create_task(shard.run())
    await router.start()
    try:
        for _ in range(100):
            if router.is_alive(0):
                break
            await asyncio.sleep(0.02)
        assert router.is_alive(0)
        await scenario(router, shard)
    finally:
        server.cancel()
        await router.close()
        shard.sock.close(0)


async def _until(predicate: Any, seconds: float) -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def _stalled_holding(router: ShardRouter, shard: StandInShard, op: Op) -> asyncio.Future[Any]:
    """Send ``op``; once the shard holds it, stall the shard. The call's future."""
    call = router.call(0, op, "org", {"records": b"x"})
    await _until(lambda: shard.held, 2)
    shard.responsive = False
    return call


@pytest.mark.parametrize("op", [Op.PRODUCE, Op.TXN_WRITE_MARKERS])
def test_a_stalled_shard_is_marked_down_but_answers_what_it_was_sent(tmp_path: Path, op: Op) -> None:
    async def scenario(router: ShardRouter, shard: StandInShard) -> None:
        call = await _stalled_holding(router, shard, op)
        await _until(lambda: not router.is_alive(0), 3)
        assert not call.done(), "a request the stalled shard holds is not failed"
        with pytest.raises(ShardUnavailable):
            await router.call(0, op, "org", {"records": b"y"})  # new requests fail at once
        shard.responsive = True
        held = shard.held[0][1]
        shard.answer_held()
        assert await asyncio.wait_for(call, 3) == {"answered": held}, "the shard's own answer reaches the caller"
        await _until(lambda: router.is_alive(0), 3)

    asyncio.run(_with_router(tmp_path, scenario))


def test_a_restarted_shard_fails_what_the_old_process_held(tmp_path: Path) -> None:
    async def scenario(router: ShardRouter, shard: StandInShard) -> None:
        call = await _stalled_holding(router, shard, Op.PRODUCE)
        await _until(lambda: not router.is_alive(0), 3)
        await asyncio.sleep(1.0)  # more pings queue up than the router remembers; the new process answers them
        shard.held.clear()
        shard.incarnation = "two"
        shard.responsive = True
        with pytest.raises(ShardUnavailable, match="restarted"):
            await asyncio.wait_for(call, 3)
        await _until(lambda: router.is_alive(0), 3)

    asyncio.run(_with_router(tmp_path, scenario))


def test_a_stalled_shards_other_requests_fail_when_it_is_marked_down(tmp_path: Path) -> None:
    """Only produce waits out a stall: a read or a group op failed early is just retried."""
    async def scenario(router: ShardRouter, shard: StandInShard) -> None:
        join = await _stalled_holding(router, shard, Op.JOIN_GROUP)
        with pytest.raises(ShardUnavailable):
            await asyncio.wait_for(join, 3)
        assert not router.is_alive(0)

    asyncio.run(_with_router(tmp_path, scenario))


def test_a_shard_silent_past_give_up_after_has_its_requests_failed(tmp_path: Path) -> None:
    async def scenario(router: ShardRouter, shard: StandInShard) -> None:
        call = await _stalled_holding(router, shard, Op.PRODUCE)
        await _until(lambda: not router.is_alive(0), 3)
        assert not call.done()
        with pytest.raises(ShardUnavailable):
            await asyncio.wait_for(call, 5)

    asyncio.run(_with_router(tmp_path, scenario, give_up_after=1.0))


def test_a_dropped_connection_marks_the_shard_down_at_once_and_reaches_no_later_process(tmp_path: Path) -> None:
    """With pings 5 s apart and ``dead_after`` 30 s only the connection can tell: the shard's
    group call fails at once (its produce waits, as for a stall), a call made before the router
    has seen the drop is never run by the next process, and a new connection is pinged at once."""
    endpoint = f"ipc://{tmp_path}/shard"

    async def scenario() -> None:
        router = ShardRouter([endpoint], partitions=1, ping_interval=5.0, dead_after=30.0)
        first = StandInShard(endpoint)
        tasks = [asyncio.create_task(first.run())]
        await router.start()
        second = None
        try:
            await _until(lambda: router.is_alive(0), 3)
            join = router.call(0, Op.JOIN_GROUP, "org", {})
            produce = router.call(0, Op.PRODUCE, "org", {"records": b"x"})
            await _until(lambda: len(first.held) == 2, 2)
            first.sock.close(0)  # the process dies
            time.sleep(0.05)  # noqa: ASYNC251 - the loop is busy: ZeroMQ sees the drop, the router not yet
            late = router.call(0, Op.HEARTBEAT, "org", {})
            with pytest.raises(ShardUnavailable):
                await asyncio.wait_for(join, 1.0)
            assert not router.is_alive(0) and not produce.done()
            second = StandInShard(endpoint)
            second.incarnation = "two"
            tasks.append(asyncio.create_task(second.run()))
            await _until(lambda: router.is_alive(0), 2)  # long before the next 5 s ping
            with pytest.raises(ShardUnavailable):
                await asyncio.wait_for(late, 1.0)
            with pytest.raises(ShardUnavailable, match="restarted"):
                await asyncio.wait_for(produce, 1.0)
            await asyncio.sleep(0.1)
            assert second.held == [], "a call sent to the dead process reached the new one"
        finally:
            for task in tasks:
                task.cancel()
            await router.close()
            if second is not None:
                second.sock.close(0)

    asyncio.run(scenario())


def test_a_produce_whose_connection_dropped_fails_once_given_up_even_if_the_same_process_is_back(
        tmp_path: Path) -> None:
    """A connection can drop while the process lives (a reset on the network): the reply to what
    was sent on it can never come, so the kept produce must not wait for ever."""
    endpoint = f"ipc://{tmp_path}/shard"

    async def scenario() -> None:
        router = ShardRouter([endpoint], partitions=1, ping_interval=0.05, dead_after=0.3, give_up_after=0.6)
        first = StandInShard(endpoint)
        tasks = [asyncio.create_task(first.run())]
        await router.start()
        again = None
        try:
            await _until(lambda: router.is_alive(0), 3)
            produce = router.call(0, Op.PRODUCE, "org", {"records": b"x"})
            await _until(lambda: first.held, 2)
            first.sock.close(0)  # the connection drops ...
            again = StandInShard(endpoint)  # ... and the same process ("one") takes a new one
            tasks.append(asyncio.create_task(again.run()))
            await _until(lambda: router.is_alive(0), 2)
            assert not produce.done(), "kept while a stall could still answer it"
            with pytest.raises(ShardUnavailable, match="dropped"):
                await asyncio.wait_for(produce, 3)
        finally:
            for task in tasks:
                task.cancel()
            await router.close()
            if again is not None:
                again.sock.close(0)

    asyncio.run(scenario())


def test_a_reply_message_resumes_its_requests_before_the_gateway_is_told_to_write(tmp_path: Path) -> None:
    """The requests a reply message answers take their next step while it is handled, and
    ``on_replies`` (where the gateway writes their responses) runs after the last: the answers
    leave without waiting for another pass of the loop."""

    async def scenario(router: ShardRouter, shard: StandInShard) -> None:
        async def handler(n: int) -> Any:
            return await router.call(0, Op.OFFSET_COMMIT, "org", {"n": n})

        loop = asyncio.get_running_loop()
        requests = [InlineRequest(handler(n), loop) for n in range(3)]
        seen: list[list[bool]] = []
        router.on_replies = lambda: seen.append([r.done() for r in requests])
        await _until(lambda: len(shard.held) == 3, 5)
        shard.responsive = False  # no pongs from here on: once one in flight has landed, the next
        await asyncio.sleep(0.1)  # reply message is the answers (well within dead_after)
        seen.clear()
        shard.answer_held(together=True)
        await _until(lambda: seen, 0.25)
        assert seen == [[True, True, True]], "all answered while their message was handled"
        assert len({r.result()["answered"] for r in requests}) == 3, "each request got its own reply"

    asyncio.run(_with_router(tmp_path, scenario))


def test_a_requests_next_op_leaves_when_the_reply_that_resumed_it_has_been_handled(tmp_path: Path) -> None:
    """A handler that needs two shard calls (a topic lookup, then the commit) sends the second
    when the first's reply message has been handled, before the gateway writes: not a loop
    pass later."""

    async def scenario(router: ShardRouter, shard: StandInShard) -> None:
        async def handler() -> Any:
            await router.call(0, Op.LIST_TOPICS, "org", {})
            return await router.call(0, Op.OFFSET_COMMIT, "org", {})

        request = InlineRequest(handler(), asyncio.get_running_loop())
        queued_at_write: list[int] = []
        router.on_replies = lambda: queued_at_write.append(len(router._shards[0].outbox))
        await _until(lambda: len(shard.held) == 1, 5)
        shard.answer_held()
        await _until(lambda: len(shard.held) == 1, 5)
        assert queued_at_write and max(queued_at_write) == 0, "the second op was sent with the first reply's handling"
        shard.answer_held()
        await _until(request.done, 5)

    asyncio.run(_with_router(tmp_path, scenario))


def test_a_gateway_that_was_stopped_does_not_blame_the_shards_for_its_own_silence(tmp_path: Path) -> None:
    """Stopped (SIGSTOP, a paused VM) for longer than ``dead_after``, the gateway sent no pings;
    on resuming it pings and waits for the answers instead of marking live shards down and
    failing what they hold."""

    async def scenario(router: ShardRouter, shard: StandInShard) -> None:
        held = router.call(0, Op.OFFSET_COMMIT, "org", {})
        await _until(lambda: len(shard.held) == 1, 5)
        up_since = router.up_since(0)
        time.sleep(router.dead_after * 2)  # noqa: ASYNC251 (the point: the gateway's loop does not run)
        await asyncio.sleep(router.ping_interval * 4)
        assert router.is_alive(0) and router.up_since(0) == up_since, "never marked down"
        assert not held.done(), "what the shard holds was not failed"
        shard.answer_held()
        assert (await asyncio.wait_for(held, 5))["answered"] > 0

    asyncio.run(_with_router(tmp_path, scenario))
