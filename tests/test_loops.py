"""Idle polling: the loop stays awake for its budget after bytes arrive, then sleeps again."""

from __future__ import annotations

import asyncio
import os

import pytest

from rafka.loops import IdlePoll


def test_budget_is_off_with_one_usable_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    poll = IdlePoll()
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    poll.configure(500)
    assert poll.budget == pytest.approx(0.0005)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {3})
    poll.configure(500)
    assert poll.budget == 0.0


def _rounds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count polling rounds (each yields the CPU once)."""
    count = [0]

    def counted() -> None:
        count[0] += 1

    monkeypatch.setattr(os, "sched_yield", counted)
    return count


def test_polls_for_its_budget_after_a_kick_then_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    rounds = _rounds(monkeypatch)
    poll = IdlePoll()
    poll.budget = 0.05

    async def go() -> None:
        poll.kick()
        await asyncio.sleep(0.03)  # within the budget: the loop keeps polling instead of sleeping
        assert poll._polling
        during = rounds[0]
        assert during > 50  # a sleeping loop would have run the callback once
        await asyncio.sleep(0.1)  # the budget passed with no kick
        assert not poll._polling
        after = rounds[0]
        await asyncio.sleep(0.05)
        assert rounds[0] == after  # asleep: no more rounds

    asyncio.run(go())


def test_each_kick_extends_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    _rounds(monkeypatch)
    poll = IdlePoll()
    poll.budget = 0.04

    async def go() -> None:
        poll.kick()
        for _ in range(4):  # 4 × 25 ms > the budget, but each kick restarts it
            await asyncio.sleep(0.025)
            assert poll._polling
            poll.kick()
        await asyncio.sleep(0.1)
        assert not poll._polling

    asyncio.run(go())


def test_budget_zero_never_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    rounds = _rounds(monkeypatch)
    poll = IdlePoll()

    async def go() -> None:
        poll.kick()
        await asyncio.sleep(0.02)

    asyncio.run(go())
    assert rounds[0] == 0 and not poll._polling
