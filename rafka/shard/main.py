"""`rafka shard --id K`: one shard process."""

from __future__ import annotations

import asyncio
import logging
import signal

from rafka import loops, telemetry
from rafka.config import Config
from rafka.datadir import DataDirError, claim_shard
from rafka.shard.runtime import ShardRuntime
from rafka.shard.state import build_state, owned_partitions

log = logging.getLogger("rafka.shard")


async def serve(cfg: Config, shard_id: int) -> bool:
    """Run shard ``shard_id`` until SIGTERM/SIGINT; False if it stopped because its WAL failed."""
    endpoint = cfg.endpoints()[shard_id]
    runtime = ShardRuntime(shard_id, endpoint, lambda rt: build_state(cfg, shard_id, rt),
                           layout=[shard_id, len(cfg.endpoints()), cfg.coordinator_partitions])
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runtime.stop)
    await runtime.serve()
    telemetry.shutdown_tracing()
    log.info("shard %d stopped", shard_id)
    return not runtime.failed


def main(cfg: Config, shard_id: int, standalone_metrics: bool) -> None:
    loops.set_process_name(f"rafka-shard-{shard_id}")
    if not cfg.in_memory:
        try:  # held until the process ends
            claim_shard(cfg.data_dir, cfg.coordinator_partitions, owned_partitions(cfg, shard_id), shard_id)
        except DataDirError as exc:
            log.error("%s", exc)
            raise SystemExit(2) from None
    if cfg.shard_endpoints is None:
        cfg.run_dir().mkdir(parents=True, exist_ok=True)
    if standalone_metrics and cfg.metrics_port:
        from rafka.metrics_http import serve_metrics

        serve_metrics(cfg.metrics_port + 1 + shard_id, cfg.host)
    loops.idle_poll.configure(cfg.idle_poll_us, telemetry.idle_poll_seconds().labels(f"shard-{shard_id}").inc)
    if not loops.run(serve(cfg, shard_id)):
        raise SystemExit(1)  # restarted by the supervisor, or by systemd's Restart=on-failure
