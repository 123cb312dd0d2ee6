"""The shard runtime's replies: a pong leaves behind the replies queued before it, and only once
they are durable. A gateway fails what it sent before a ping answered by a new incarnation, so a
pong that overtook the reply to a write the new process ran would get that write failed (and a
producer without idempotence would retry it into a duplicate); and a pong that skipped a stuck
fsync would keep a shard that answers nothing marked up."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from rafka.rail import Op, unpack
from rafka.shard.runtime import ShardRuntime


class _State:
    """Answers every op at once; its commits are durable when the test says so."""

    def __init__(self) -> None:
        self.durable: concurrent.futures.Future[None] = concurrent.futures.Future()

    def dispatch(self, op: int, org_id: str, payload: Any, now_ms: int, respond: Any, trace: Any) -> None:
        respond({"written": payload})

    def commit(self) -> concurrent.futures.Future[None]:
        return self.durable


class _Socket:
    def __init__(self) -> None:
        self.sent: list[list[Any]] = []

    def send_multipart(self, frames: list[bytes], flags: int = 0) -> None:
        self.sent.extend(unpack(frames[1]))


def test_a_pong_leaves_after_the_replies_before_it_once_they_are_durable() -> None:
    async def main() -> None:
        state = _State()
        runtime = ShardRuntime(0, "inproc://unused", lambda _rt: state)  # type: ignore[arg-type,return-value]
        sock = _Socket()
        runtime._sock = sock  # type: ignore[assignment]
        runtime.handle(b"gw", [7, int(Op.PRODUCE), "org", None, "batch"])
        runtime.handle(b"gw", [-1, int(Op.PING), "", None, {"layout": None, "sent": 1.5}])
        await asyncio.sleep(0.05)
        assert sock.sent == [], "nothing leaves while the write is not durable, the pong neither"
        state.durable.set_result(None)
        await asyncio.sleep(0.05)
        assert [env[0] for env in sock.sent] == [7, -1], "the reply, then the pong"
        assert sock.sent[1][2]["incarnation"] == runtime.incarnation and sock.sent[1][2]["sent"] == 1.5

    asyncio.run(main())
