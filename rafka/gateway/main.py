"""`rafka gateway`: one gateway process."""

from __future__ import annotations

import asyncio
import logging
import signal

from rafka import loops, telemetry
from rafka.config import Config
from rafka.gateway.router import ShardRouter
from rafka.gateway.server import Gateway

log = logging.getLogger("rafka.gateway")


async def serve(cfg: Config) -> None:
    """Run a gateway until SIGTERM/SIGINT, then drain and stop (also while still starting)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: None)  # a reload before the users are loaded: nothing to do
    router = ShardRouter(cfg.endpoints(), partitions=cfg.coordinator_partitions)
    await router.start()
    deadline = loop.time() + 5.0  # give the shards a moment, so the first clients find them up
    while not stop.is_set() and loop.time() < deadline and not all(map(router.is_alive, range(router.shard_count))):
        await asyncio.sleep(0.05)
    if not stop.is_set():
        gateway = Gateway(cfg, router)
        await gateway.start()
        loops.tune_gc()
        await stop.wait()
        log.info("gateway stopping: draining in-flight requests")
        await gateway.shutdown(timeout=5.0)
    await router.close()
    telemetry.shutdown_tracing()


def main(cfg: Config, standalone_metrics: bool) -> None:
    loops.set_process_name(f"rafka-gateway-{cfg.node_id}" if cfg.node_id else "rafka-gateway")
    if standalone_metrics and cfg.metrics_port:
        from rafka.metrics_http import serve_metrics

        serve_metrics(cfg.metrics_port, cfg.host)
    loops.idle_poll.configure(cfg.idle_poll_us, telemetry.idle_poll_seconds().labels("gateway").inc)
    loops.run(serve(cfg))
