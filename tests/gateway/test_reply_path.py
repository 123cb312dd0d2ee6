"""The synchronous-commit path through a real ``KafkaConnection``, with no loop pass in it: the
ops of the requests in one client read go to the shards when the read has been handled, and the
responses a reply message completes are written when it has been handled (the router then
calls ``Gateway.write_due``), in request order, in one write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rafka.gateway import server
from rafka.gateway.inline import ReplyFuture
from rafka.rail import Op
from tests.gateway.harness import Driver, FakeRouter, decode_response, encode_request, make_gateway, split_frames

TOPIC = "orders"


class QueueingRouter(FakeRouter):
    """Queues calls until ``flush`` (at the end of a read, else on the next loop pass), as the
    shard router does; the test answers them."""

    def __init__(self) -> None:
        super().__init__()
        self.queued: list[tuple[Any, dict[str, Any], ReplyFuture]] = []
        self.sent: list[tuple[Any, dict[str, Any], ReplyFuture]] = []

    def is_alive(self, shard: int) -> bool:
        return True

    def flush(self) -> None:
        self.sent += self.queued
        self.queued = []

    def call(self, shard: int, op: Any, org_id: str, payload: Any, trace: str | None = None) -> asyncio.Future[Any]:
        fut = ReplyFuture(asyncio.get_running_loop())
        if op == Op.LIST_TOPICS:  # the topic cache's lookup: answered at once
            fut.set_result({"topics": [{"name": TOPIC, "partitions": 1, "topic_id": None, "error_code": 0}]})
        else:
            if not self.queued:
                asyncio.get_running_loop().call_soon(self.flush)
            self.queued.append((op, payload, fut))
        return fut


def commit(correlation_id: int, offset: int, group: str = "g", metadata: str = "", version: int = 9) -> bytes:
    """An OffsetCommit of ``TOPIC``'s partition 0 by a simple consumer."""
    return encode_request(8, version, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                       "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                                           {"partition_index": 0, "committed_offset": offset,
                                            "committed_leader_epoch": -1, "committed_metadata": metadata}]}]},
                          correlation_id=correlation_id)


def test_a_reads_ops_leave_with_it_and_a_replys_answers_are_written_with_it() -> None:
    async def main() -> None:
        gw = make_gateway()
        router = gw.router = QueueingRouter()
        router.on_replies = gw.write_due  # what Gateway() sets on the router it is given
        d = Driver(gw)
        d.conn.data_received(commit(1, 10))  # warms the topic cache (its lookup is a loop pass away)
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(router.sent) == 1
        router.sent[0][2].resolve({"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "error_code": 0}]}]})
        await d.settle()
        router.sent.clear()
        d.transport.out.clear()

        d.conn.data_received(commit(2, 11) + commit(3, 12, group="g2"))  # two groups: two ops
        assert [p["topics"][0]["partitions"][0]["committed_offset"] for _op, p, _f in router.sent] == [11, 12], \
            "both ops were sent when the read had been handled"
        assert router.queued == []
        for _op, _payload, fut in router.sent:
            fut.resolve({"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "error_code": 0}]}]})
        assert d.transport.out == b"", "nothing is written before the reply message has been handled"
        gw.write_due()  # the router's on_replies, after the message's last reply
        frames = split_frames(bytes(d.transport.out))
        assert [decode_response(f, 8, 9)["_correlation_id"] for f in frames] == [2, 3]
        assert all(decode_response(f, 8, 9)["topics"][0]["partitions"][0]["error_code"] == 0 for f in frames)

    asyncio.run(main())


def test_the_gateway_asks_its_router_to_tell_it_when_replies_were_handled() -> None:
    gw = make_gateway()
    assert gw.router.on_replies == gw.write_due


def test_a_request_whose_response_cannot_be_made_closes_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The responses before it are written and the connection closes: no client waits for ever
    for an answer that will not come (here its encoding fails, as a bug would make it)."""
    encode = server.fastwrite.encode_response

    def failing(cls: Any, correlation_id: int, resp: dict[str, Any]) -> bytes:
        if correlation_id == 2:
            raise ValueError("cannot encode")
        return encode(cls, correlation_id, resp)

    monkeypatch.setattr(server.fastwrite, "encode_response", failing)

    async def main() -> None:
        d = Driver(make_gateway())
        d.conn.data_received(b"".join(encode_request(16, 4, {"states_filter": []}, cid) for cid in (1, 2, 3)))
        await d.settle()
        assert [decode_response(f, 16, 4)["_correlation_id"] for f in d.frames()] == [1]
        assert d.transport.closed

    asyncio.run(main())
