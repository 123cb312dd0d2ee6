"""The shard's ``LoopTimer`` on real loops (asyncio's and uvloop's): a key rescheduled to a later
deadline (a heartbeat renewing a session) fires once, at its last deadline, with its last
callback; a sooner deadline fires sooner; a cancelled key never fires; a callback may schedule
its own key again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from rafka.shard.runtime import LoopTimer


class _Runtime:
    """Runs a timer's callback as the shard does, and records when each key fired."""

    def __init__(self) -> None:
        self.fired: list[tuple[str, Any, float]] = []

    def run_timer(self, key: str, callback: Callable[[int], Any]) -> None:
        self.fired.append((key, callback(int(time.time() * 1000)), time.monotonic()))


def _run(loop_kind: str, test: Callable[[LoopTimer, _Runtime], Coroutine[Any, Any, None]]) -> None:
    runtime = _Runtime()
    runner = uvloop.run if loop_kind == "uvloop" else asyncio.run

    async def main() -> None:
        await test(LoopTimer(runtime), runtime)  # type: ignore[arg-type]

    runner(main())


LOOPS = pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])


def _returns(value: str) -> Callable[[int], str]:
    return lambda _now_ms: value


@LOOPS
def test_a_key_rescheduled_later_fires_once_at_its_last_deadline_with_its_last_callback(loop_kind: str) -> None:
    async def test(timer: LoopTimer, rt: _Runtime) -> None:
        timer.schedule("session", 30, _returns("first"))
        for i in range(5):  # renewed every 10 ms: never due meanwhile
            await asyncio.sleep(0.01)
            timer.schedule("session", 60, _returns(f"renewal {i}"))
            assert rt.fired == []
        renewed = time.monotonic()
        await asyncio.sleep(0.3)
        assert [(key, value) for key, value, _at in rt.fired] == [("session", "renewal 4")]
        assert rt.fired[0][2] >= renewed + 0.059

    _run(loop_kind, test)


@LOOPS
def test_a_key_rescheduled_sooner_fires_at_the_sooner_deadline_only(loop_kind: str) -> None:
    async def test(timer: LoopTimer, rt: _Runtime) -> None:
        start = time.monotonic()
        timer.schedule("join", 2_000, _returns("late"))
        timer.schedule("join", 20, _returns("soon"))
        await asyncio.sleep(0.5)
        assert [(key, value) for key, value, _at in rt.fired] == [("join", "soon")]
        assert start + 0.019 <= rt.fired[0][2] < start + 0.5
        await asyncio.sleep(0)

    _run(loop_kind, test)


@LOOPS
def test_a_cancelled_key_never_fires_whatever_was_scheduled_before(loop_kind: str) -> None:
    async def test(timer: LoopTimer, rt: _Runtime) -> None:
        timer.schedule("a", 20, _returns("a"))
        timer.schedule("a", 40, _returns("a again"))  # later: the first loop timer stays armed
        timer.cancel("a")
        timer.schedule("b", 20, _returns("b"))
        timer.schedule("c", 30, _returns("c"))
        timer.cancel_all()
        timer.schedule("d", 10, _returns("d"))  # scheduled after cancel_all: fires
        await asyncio.sleep(0.2)
        assert [(key, value) for key, value, _at in rt.fired] == [("d", "d")]

    _run(loop_kind, test)


@LOOPS
def test_a_callback_may_schedule_its_own_key_again(loop_kind: str) -> None:
    async def test(timer: LoopTimer, rt: _Runtime) -> None:
        def again(_now_ms: int) -> int:
            if len(rt.fired) < 2:
                timer.schedule("retention", 10, again)
            return len(rt.fired)

        timer.schedule("retention", 10, again)
        await asyncio.sleep(0.3)
        assert [(key, value) for key, value, _at in rt.fired] == [("retention", 0), ("retention", 1), ("retention", 2)]

    _run(loop_kind, test)
