"""The state gauges a shard writes and the endpoint's lag join over them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from rafka.metrics_http import StateFilesCollector
from rafka.shard import metrics
from rafka.shard.metrics import StateCollector
from tests.shard.test_groups_context import GroupsTestContext


def samples(collector: object, name: str) -> list[dict[str, str]]:
    return [s.labels for f in collector.collect() for s in f.samples if s.name == name]  # type: ignore[attr-defined]


def test_committed_offset_series_stop_at_the_cap_across_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_SERIES", 4)
    ctx = GroupsTestContext()
    for group in ("a", "b", "c"):
        ctx.commit(group, {"t": {0: 1, 1: 1, 2: 1}})
    got = samples(StateCollector(SimpleNamespace(groups=ctx.coord), 0), "kafka_consumergroup_current_offset")
    assert [(s["consumergroup"], s["partition"]) for s in got] == [("a", "0"), ("a", "1"), ("a", "2"), ("b", "0")]


def test_members_series_stop_at_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """One series per group, capped like the per-partition ones (a probe's 61,470 groups made a
    5.7 MB scrape that took 3 s)."""
    monkeypatch.setattr(metrics, "MAX_SERIES", 4)
    ctx = GroupsTestContext()
    for group in "abcdef":
        ctx.commit(group, {"t": {0: 1}})
    got = samples(StateCollector(SimpleNamespace(groups=ctx.coord), 0), "kafka_consumergroup_members")
    assert [s["consumergroup"] for s in got] == ["a", "b", "c", "d"]


def test_lag_is_left_out_where_no_log_end_offset_is_known(tmp_path: Path) -> None:
    """A partition whose log end offset no shard exported (past its cap, or its file not written
    yet) has unknown lag, not 0."""
    groups = GroupsTestContext()
    groups.commit("g", {"t": {0: 3, 1: 5}})
    shard0 = CollectorRegistry()
    shard0.register(StateCollector(SimpleNamespace(groups=groups.coord), 0))
    (tmp_path / "state-shard-0.prom").write_bytes(generate_latest(shard0))
    org = groups.org
    (tmp_path / "state-shard-1.prom").write_text(
        "# HELP rafka_partition_log_end_offset Log end offset\n# TYPE rafka_partition_log_end_offset gauge\n"
        f'rafka_partition_log_end_offset{{org="{org}",topic="t",partition="0"}} 10.0\n')
    lag = {(s.labels["partition"], s.value) for f in StateFilesCollector(str(tmp_path)).collect()
           for s in f.samples if s.name == "kafka_consumergroup_lag"}
    assert lag == {("0", 7.0)}
