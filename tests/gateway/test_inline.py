"""InlineRequest: a handler coroutine driven without an asyncio Task."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from rafka.gateway.inline import InlineRequest, ReplyFuture

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outer")


def run(main) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(main())


def test_a_handler_that_awaits_nothing_is_answered_during_construction() -> None:
    async def handler() -> str:
        return "done"

    async def main() -> None:
        req = InlineRequest(handler(), asyncio.get_running_loop())
        assert req.done() and req.result() == "done"

    run(main)


def test_a_handler_resumes_when_the_future_it_awaits_completes() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[int] = loop.create_future()
        steps: list[str] = []

        async def handler() -> int:
            steps.append("sent")
            value = await reply
            steps.append("got")
            await asyncio.sleep(0)  # a bare yield is resumed on the next loop pass
            return value + 1

        req = InlineRequest(handler(), asyncio.get_running_loop())
        assert steps == ["sent"] and not req.done()
        reply.set_result(41)
        assert await req == 42 and steps == ["sent", "got"]

    run(main)


def test_an_exception_reaches_the_handler_and_an_uncaught_one_ends_the_request() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        first: asyncio.Future[int] = loop.create_future()
        second: asyncio.Future[int] = loop.create_future()

        async def handler() -> None:
            try:
                await first
            except KeyError:
                pass
            await second

        req = InlineRequest(handler(), asyncio.get_running_loop())
        first.set_exception(KeyError("caught by the handler"))
        await asyncio.sleep(0)
        assert not req.done()
        second.set_exception(ValueError("not caught"))
        with pytest.raises(ValueError):
            await req

    run(main)


def test_cancel_cancels_what_the_handler_awaits_and_its_cleanup_runs() -> None:
    async def main() -> None:
        reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        cleaned: list[str] = []

        async def handler() -> None:
            try:
                await reply
            except asyncio.CancelledError:
                cleaned.append("cancelled")
                raise
            finally:
                cleaned.append("finally")

        req = InlineRequest(handler(), asyncio.get_running_loop())
        assert req.cancel() and reply.cancelled()  # a late shard reply finds its future done
        await asyncio.sleep(0)
        assert req.cancelled() and cleaned == ["cancelled", "finally"]

    run(main)


def test_cancel_between_steps_throws_cancelled_error_in() -> None:
    async def main() -> None:
        cleaned: list[bool] = []

        async def handler() -> None:
            try:
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            finally:
                cleaned.append(True)

        req = InlineRequest(handler(), asyncio.get_running_loop())
        assert req.cancel()
        for _ in range(3):
            await asyncio.sleep(0)
        assert req.cancelled() and cleaned == [True]

    run(main)


def test_each_request_sees_its_own_context() -> None:
    async def main() -> None:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def handler() -> str:
            var.set("inner")
            await gate
            return var.get()

        ctx = contextvars.copy_context()
        req = InlineRequest(handler(), asyncio.get_running_loop(), ctx)
        assert var.get() == "outer"  # the caller's context is untouched
        gate.set_result(None)
        assert await req == "inner" and ctx[var] == "inner"

    run(main)


def test_a_reply_future_steps_its_request_inside_resolve() -> None:
    """A shard's reply resumes the handler awaiting it at once, within the read that brought it:
    no loop pass between them (on the synchronous-commit path that pass cost ~10 µs)."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reply = ReplyFuture(loop)
        steps: list[str] = []

        async def handler() -> int:
            value = await reply
            steps.append("got")
            return value + 1

        req = InlineRequest(handler(), loop)
        done: list[InlineRequest] = []
        req.on_done = done.append
        reply.resolve(41)
        assert steps == ["got"] and req.done() and req.result() == 42 and done == [req]
        for _ in range(3):  # nothing steps it again on a later loop pass
            await asyncio.sleep(0)
        assert steps == ["got"]

    run(main)


def test_a_reply_future_others_await_completes_as_a_future_does() -> None:
    """Awaited through gather, failed, or cancelled with its request, a ReplyFuture is a Future."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        first, second = ReplyFuture(loop), ReplyFuture(loop)

        async def handler() -> list[int]:
            return list(await asyncio.gather(first, second))

        req = InlineRequest(handler(), loop)
        first.resolve(1)
        second.resolve(2)
        assert await req == [1, 2]

        failing = ReplyFuture(loop)

        async def fails() -> None:
            await failing

        req = InlineRequest(fails(), loop)
        failing.set_exception(KeyError("shard down"))
        with pytest.raises(KeyError):
            await req

        held = ReplyFuture(loop)
        req = InlineRequest(_awaiting(held), loop)
        assert req.cancel() and held.cancelled()
        await asyncio.sleep(0)
        assert req.cancelled()

    run(main)


async def _awaiting(fut: asyncio.Future[None]) -> None:
    await fut
