"""`rafka serve`: the embedded default — N shards and a gateway on one machine.

How this works: the supervisor starts every shard and then the gateway as child
processes (`python -m rafka shard --id K`, `python -m rafka gateway`) with the same
configuration, each in its own process group member with a readable name. A child
that exits unexpectedly is restarted after a short back-off, with a log line. All
children share one prometheus multiprocess directory, and the supervisor serves
the merged metrics on ``--metrics-port``. SIGTERM/SIGINT stops the gateway first
(so it drains in-flight requests), then the shards; anything still alive after
10 s is killed.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rafka import datadir
from rafka.config import Config, to_argv

log = logging.getLogger("rafka.supervisor")

STOP_TIMEOUT = 10.0


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_start: float = 0.0
    started_at: float = field(default=0.0)

    def start(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(self.argv, env=env)
        self.started_at = time.monotonic()
        log.info("started %s (pid %d)", self.name, self.proc.pid)


class Supervisor:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.stopping = False
        base = [sys.executable, "-m", "rafka"]
        common = to_argv(cfg)
        self.shards = [Child(f"rafka-shard-{k}", [*base, "shard", "--id", str(k), "--supervised", *common])
                       for k in range(len(cfg.endpoints()))] if cfg.shard_endpoints is None else []
        self.gateway = Child("rafka-gateway", [*base, "gateway", "--supervised", *common])
        self.env = dict(os.environ)

    def _prepare_dirs(self) -> None:
        Path(self.cfg.data_dir).mkdir(parents=True, exist_ok=True)
        run = self.cfg.run_dir()
        run.mkdir(parents=True, exist_ok=True)
        metrics_dir = run / "metrics"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir()
        self.env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)

    def run(self) -> int:
        try:  # before anything is written: a second broker on this directory stops here
            self._lock = datadir.lock(Path(self.cfg.data_dir) / "serve.lock", "rafka serve")
            if not self.cfg.in_memory:
                datadir.check_layout(self.cfg.data_dir, self.cfg.coordinator_partitions)
            # the gateway names the data directory's cluster (one --cluster-id gives must match it)
            self.env["RAFKA_CLUSTER_ID"] = datadir.cluster_id(self.cfg.data_dir, self.cfg.cluster_id)
        except datadir.DataDirError as exc:
            log.error("%s", exc)
            return 2
        self._prepare_dirs()
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_hup)
        if self.cfg.metrics_port:
            from rafka.metrics_http import serve_metrics

            serve_metrics(self.cfg.metrics_port, self.cfg.host, ready=self._ready)
        for child in [*self.shards, self.gateway]:
            child.start(self.env)
        log.info("rafka serving Kafka on %s:%d with %d shards (data under %s)", self.cfg.host, self.cfg.port,
                 len(self.shards), self.cfg.data_dir)
        while not self.stopping:
            self._reap()
            time.sleep(0.1)
        self._stop_all()
        return 0

    def _ready(self) -> bool:
        return all(c.proc is not None and c.proc.poll() is None for c in [*self.shards, self.gateway])

    def _reap(self) -> None:
        now = time.monotonic()
        for child in [*self.shards, self.gateway]:
            if child.proc is None:
                if now >= child.next_start and not self.stopping:
                    child.start(self.env)
                continue
            code = child.proc.poll()
            if code is None:
                continue
            uptime = now - child.started_at
            child.restarts = 0 if uptime > 30 else child.restarts + 1
            delay = min(0.2 * (2 ** child.restarts), 5.0)
            log.error("%s (pid %d) exited with code %s after %.1fs; restarting in %.1fs",
                      child.name, child.proc.pid, code, uptime, delay)
            try:
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(child.proc.pid)
            except (OSError, TypeError):  # its gauge files are gone, or metrics are not multiprocess
                pass
            child.proc = None
            child.next_start = now + delay

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        self.stopping = True

    def _on_hup(self, _signum: int, _frame: object) -> None:
        """SIGHUP (``systemctl reload``): the gateway re-reads the users file."""
        proc = self.gateway.proc
        if proc is not None and proc.poll() is None:
            log.info("received SIGHUP: passing it to %s (pid %d)", self.gateway.name, proc.pid)
            proc.send_signal(signal.SIGHUP)

    def _stop_all(self) -> None:
        deadline = time.monotonic() + STOP_TIMEOUT
        for group in ([self.gateway], self.shards):
            for child in group:
                if child.proc and child.proc.poll() is None:
                    child.proc.send_signal(signal.SIGTERM)
            for child in group:
                if child.proc is None:
                    continue
                try:
                    child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.error("%s did not stop in time; killing it", child.name)
                    child.proc.kill()
                    child.proc.wait()
        log.info("rafka stopped")


def main(cfg: Config) -> int:
    from rafka.loops import set_process_name

    set_process_name("rafka-serve")
    return Supervisor(cfg).run()
