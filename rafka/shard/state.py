"""Build a shard's state (managers, WAL) from the configuration."""

from __future__ import annotations

from typing import Any

from rafka import ids
from rafka.config import Config
from rafka.shard import txn
from rafka.shard.data import DataPlane
from rafka.shard.groups import GroupConfig, GroupCoordinator
from rafka.shard.groups.consumer import ConsumerGroupCoordinator
from rafka.shard.handlers import ShardState
from rafka.shard.wal import Wal


def owned_partitions(cfg: Config, shard_id: int) -> set[int]:
    """The coordinator partitions (and so the write-ahead-log streams) shard ``shard_id`` owns."""
    shards = len(cfg.endpoints())
    return {p for p in range(cfg.coordinator_partitions) if ids.shard_for_partition(p, shards) == shard_id}


def build_state(cfg: Config, shard_id: int, runtime: Any) -> ShardState:
    """The managers of shard ``shard_id``, wired to ``runtime``'s timer."""
    group_cfg = GroupConfig(
        min_session_timeout_ms=cfg.group_min_session_timeout_ms,
        max_session_timeout_ms=cfg.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
        max_size=cfg.group_max_size,
        offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
        offsets_retention_ms=cfg.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=cfg.offsets_retention_check_interval_ms,
        consumer_session_timeout_ms=cfg.consumer_group_session_timeout_ms,
        consumer_heartbeat_interval_ms=cfg.consumer_group_heartbeat_interval_ms,
        consumer_min_session_timeout_ms=cfg.consumer_group_min_session_timeout_ms,
        consumer_max_session_timeout_ms=cfg.consumer_group_max_session_timeout_ms,
        consumer_min_heartbeat_interval_ms=cfg.consumer_group_min_heartbeat_interval_ms,
        consumer_max_heartbeat_interval_ms=cfg.consumer_group_max_heartbeat_interval_ms,
    )
    groups = GroupCoordinator(group_cfg, runtime.timer)
    ConsumerGroupCoordinator(group_cfg, runtime.timer, groups)  # registers itself as groups.consumer
    groups.on_event = runtime.on_group_event
    wal = None
    if not cfg.in_memory:
        wal = Wal(cfg.data_dir, owned_partitions(cfg, shard_id), cfg.coordinator_partitions, fsync=cfg.fsync)
        fsync_hist = runtime.metrics.fsync.labels(str(shard_id))
        wal.on_fsync = fsync_hist.observe
    state = ShardState(shard_id, groups, wal=wal)
    data = DataPlane(shard_id, runtime.timer, cfg.default_partitions, cfg.coordinator_partitions,
                     cfg.log_retention_check_interval_ms, cfg.log_cleaner_backoff_ms)
    data.install(state)
    txn.install(state, data.logs, expiration_ms=cfg.transactional_id_expiration_ms)
    return state
