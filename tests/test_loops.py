"""Idle polling: the loop stays awake for its budget after bytes arrive, then sleeps again."""

from __future__ import annotations

import asyncio
import os

import pytest

from rafka import loops
from rafka.loops import IdlePoll


def test_budget_is_off_with_one_usable_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    poll = IdlePoll()
    monkeypatch.setattr(loops, "_read", lambda _path: None)  # no cgroup quota
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    poll.configure(500)
    assert poll.budget == pytest.approx(0.0005)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {3})
    poll.configure(500)
    assert poll.budget == 0.0


@pytest.mark.parametrize(("files", "cpus"), [
    ({"/sys/fs/cgroup/cpu.max": "max 100000\n"}, 4),
    ({"/sys/fs/cgroup/cpu.max": "50000 100000\n"}, 0.5),  # docker --cpus 0.5 (cgroup v2)
    ({"/sys/fs/cgroup/cpu.max": "300000 100000\n"}, 3),
    ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "100000\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, 1),
    ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n"}, 4),  # cgroup v1, no quota
    ({}, 4),
])
def test_usable_cpus_counts_a_cgroup_quota(monkeypatch: pytest.MonkeyPatch, files: dict[str, str], cpus: float) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    monkeypatch.setattr(loops, "_read", files.get)
    assert loops.usable_cpus() == cpus
    poll = IdlePoll()
    poll.configure(500)
    assert (poll.budget > 0) == (cpus > 1)


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
