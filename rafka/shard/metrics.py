"""Shard metrics: one wrapper for every op, plus a collector over the shard's state.

How this works. ``ShardMetrics`` holds the per-op counters and histograms that the
runtime's single wrapper updates (requests, errors by Kafka error code, latency
until the reply — a parked JoinGroup counts its whole wait), the in-flight gauge,
loop lag and WAL fsync latency. These live in prometheus-client's multiprocess
files under ``rafka serve``.

``StateCollector`` computes, at scrape time, the gauges Kafka operators know:
classic and KIP-848 groups by state, members of both, committed offsets, and per
partition the committed offset (``kafka_consumergroup_current_offset``), members
per group (``kafka_consumergroup_members``) and log end offsets. A shard under the
supervisor writes this collector's output to ``<multiproc dir>/state-shard-K.prom``
every few seconds; the metrics endpoint merges those files and joins committed
offsets with log end offsets into ``kafka_consumergroup_lag`` (a group and the
logs it reads usually live on different shards). Per-partition and per-group series
are capped (``MAX_SERIES`` each) so a shard with a million offsets or groups does not
emit a million series.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rafka.shard import paging
from rafka.telemetry import LATENCY_BUCKETS, RequestMeter, RequestTally

MAX_SERIES = 5000
LAG_WINDOW = 30  # 1 s measurements the loop lag gauge holds its largest of: two 15 s scrapes


class ShardMetrics:
    def __init__(self, shard_id: int) -> None:
        self.shard = str(shard_id)
        self.requests = Counter("rafka_shard_requests_total", "Ops handled by a shard", ["op", "shard"])
        self.errors = Counter("rafka_shard_errors_total", "Op replies with a Kafka error code", ["op", "shard", "error_code"])
        self.latency = Histogram("rafka_shard_request_latency_seconds", "Time from op arrival to reply", ["op", "shard"],
                                 buckets=LATENCY_BUCKETS)
        self.inflight = Gauge("rafka_shard_inflight_ops", "Ops received and not yet answered (queue depth, parked included)",
                              ["shard"], multiprocess_mode="livesum")
        self.loop_lag = Gauge("rafka_shard_loop_lag_seconds", "Largest event-loop lag of the last "
                              f"{LAG_WINDOW} measurements by a 1 s timer (a stall that ended between two scrapes shows)", ["shard"],
                              multiprocess_mode="livemax")
        self.fsync = Histogram("rafka_wal_fsync_latency_seconds", "Duration of one WAL fsync pass", ["shard"],
                               buckets=LATENCY_BUCKETS)
        self.rebalance_duration = Histogram("rafka_group_rebalance_duration_seconds",
                                            "From PreparingRebalance to Stable", ["shard"],
                                            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
        self.up = Gauge("rafka_shard_loading", "1 while the shard replays its write-ahead log", ["shard"],
                        multiprocess_mode="livemax")
        self.meter = RequestMeter(self.requests, self.latency)

    def for_op(self, op: str) -> RequestTally:
        """The request count and latency tally of ``op`` (written every ``telemetry.FLUSH_EVERY``)."""
        return self.meter.tally(op, self.shard)


class StateCollector(Collector):
    """Gauges computed from a shard's groups, offsets and logs when scraped."""

    def __init__(self, state: Any, shard_id: int) -> None:
        self.state = state
        self.shard = str(shard_id)

    def collect(self) -> Iterator[Any]:
        groups = self.state.groups
        stats = groups.group_stats()
        by_state = GaugeMetricFamily("rafka_group_count", "Classic groups by state (Kafka classic-group-count)",
                                     labels=["shard", "state"])
        for state, n in stats["groups_by_state"].items():
            by_state.add_metric([self.shard, state], n)
        yield by_state
        consumer = GaugeMetricFamily("rafka_consumer_group_count",
                                     "KIP-848 consumer groups by state (Kafka consumer-group-count)",
                                     labels=["shard", "state"])
        for state, n in stats["consumer_groups_by_state"].items():
            consumer.add_metric([self.shard, state], n)
        yield consumer
        yield _gauge("rafka_group_members", "Members of all groups on the shard", self.shard, stats["members"])
        yield _gauge("rafka_offsets_count", "Committed offsets held (Kafka NumOffsets)", self.shard, stats["offsets"])
        rebal = CounterMetricFamily("rafka_group_rebalances", "Completed rebalances", labels=["shard"])
        rebal.add_metric([self.shard], stats["completed_rebalances"])
        yield rebal
        txn = getattr(self.state, "txn", None)
        if txn is not None:
            txns = GaugeMetricFamily("rafka_transaction_count", "Transactional ids by transaction state",
                                     labels=["shard", "state"])
            for state, n in txn.stats().items():
                txns.add_metric([self.shard, state], n)
            yield txns
        expired = CounterMetricFamily("rafka_offsets_expired", "Offsets expired by retention", labels=["shard"])
        expired.add_metric([self.shard], stats.get("expired_offsets", 0))
        yield expired

        members = GaugeMetricFamily("kafka_consumergroup_members", "Members per consumer group",
                                    labels=["org", "consumergroup"])
        kip848 = groups.consumer.groups if groups.consumer is not None else {}
        for (org, gid), group in itertools.islice(itertools.chain(groups.groups.items(), kip848.items()), MAX_SERIES):
            members.add_metric([org, gid], len(group.members))
        yield members

        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "Committed offset per group partition",
                                    labels=["org", "consumergroup", "topic", "partition"])
        store = groups.offsets
        committed = ((org, gid, topic, partition, entry[0]) for org, gid in store.group_keys()
                     for topic in store.topics(org, gid) for partition, entry in store.partitions(org, gid, topic))
        for org, gid, topic, partition, offset in itertools.islice(committed, MAX_SERIES):
            current.add_metric([org, gid, topic, str(partition)], offset)
        yield current

        leo = GaugeMetricFamily("rafka_partition_log_end_offset", "Log end offset (high watermark) per partition",
                                labels=["org", "topic", "partition"])
        start = GaugeMetricFamily("rafka_partition_log_start_offset", "Log start offset per partition",
                                  labels=["org", "topic", "partition"])
        logs = getattr(self.state, "data", None)
        if logs is not None:
            for i, ((org, topic, partition), plog) in enumerate(list(logs.logs.logs.items())):
                if i >= MAX_SERIES:
                    break
                leo.add_metric([org, topic, str(partition)], plog.log_end_offset)
                start.add_metric([org, topic, str(partition)], plog.log_start_offset)
        yield leo
        yield start
        yield _gauge("rafka_log_mapped_files", "WAL segment files the shard maps to serve partitions' older batches "
                     "(at most half of vm.max_map_count)", self.shard, paging.mappings)
        yield _gauge("rafka_log_unpaged_bytes", "Bytes of partitions' batches the shard holds in its heap, not yet read "
                     "from its WAL files (paged once they reach the shard's budget)", self.shard,
                     logs.pager.unpaged_total if logs is not None else 0)
        yield _gauge("rafka_shard_heap_bytes", "The shard's anonymous resident memory (RssAnon): its heap, without the "
                     "page cache of the WAL files it maps", self.shard, anon_bytes() or 0)


def anon_bytes(pid: int | str = "self") -> int | None:
    """A process's anonymous resident memory (RssAnon: its heap, not the page cache of files it
    maps), or None where /proc does not tell."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _gauge(name: str, doc: str, shard: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["shard"])
    g.add_metric([shard], value)
    return g


class StateFileWriter:
    """Writes a shard's state metrics where the supervisor's endpoint merges them; a new one
    removes the file a previous process of the shard left, until its first write."""

    def __init__(self, collector: StateCollector, directory: str, shard_id: int) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(collector)
        self.path = Path(directory) / f"state-shard-{shard_id}.prom"
        self.path.unlink(missing_ok=True)

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(generate_latest(self.registry))
        os.replace(tmp, self.path)
