"""Start real `rafka serve` processes for integration tests."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rawclient import RawClient

ROOT = Path(__file__).resolve().parents[2]


# How ports are picked: a port the kernel hands out for bind(0) comes from the ephemeral
# range, which outgoing connections (clients, ZeroMQ, a shard's --metrics-port 0) draw from
# too, so it can be taken before the process we pass it to binds it. Ports are therefore
# drawn below the ephemeral range, checked bindable, and never handed out twice in a run.
_PORT_RANGE = (20000, 32000)
_handed_out: set[int] = set()
_rng = random.Random(os.getpid() ^ time.time_ns())


def free_port() -> int:
    """A listening port no test of this run was given before and nothing holds now."""
    lo, hi = _PORT_RANGE
    for _ in range(1000):
        port = _rng.randrange(lo, hi)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {lo}..{hi}")


class Rafka:
    """A `rafka serve` subprocess with its own ports and data directory."""

    def __init__(self, data_dir: Path, shards: int = 2, extra: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.shards = shards
        self.port = free_port()
        self.metrics_port = free_port()
        self.extra = extra or []
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-rafka.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Rafka:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "rafka", "serve", "--port", str(self.port), "--metrics-port",
                str(self.metrics_port), "--shards", str(self.shards), "--data-dir", str(self.data_dir), *self.extra]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (the process writes to it until stop())
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"rafka exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                with RawClient("127.0.0.1", self.port, timeout=2) as c:
                    c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
                    md = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
                    if all(self._shard_ok(c, k) for k in range(self.shards)) and md["brokers"]:
                        return
            except (OSError, ConnectionError) as exc:
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"rafka not ready after {timeout}s ({last}):\n{self.logs()}")

    def _shard_ok(self, c: RawClient, _k: int) -> bool:
        resp = c.request(16, 4, {"states_filter": []})
        return resp["error_code"] == 0

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        self._log.close()
        return code

    def kill_all(self) -> None:
        """kill -9 the whole process group (supervisor, gateway, shards)."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None
            self._log.close()
        time.sleep(0.2)

    def children(self) -> dict[str, int]:
        """Process name → pid of the supervisor's children."""
        out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(self.proc.pid)], check=False,
                             capture_output=True, text=True)
        result = {}
        for line in out.stdout.splitlines():
            pid, _, args = line.strip().partition(" ")
            result[args.split()[0]] = int(pid)
        return result


@pytest.fixture(scope="module")
def rafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rafka]:
    broker = Rafka(tmp_path_factory.mktemp("rafka") / "data").start()
    yield broker
    broker.stop()


@pytest.fixture
def fresh_rafka(tmp_path: Path) -> Iterator[Rafka]:
    broker = Rafka(tmp_path / "data").start()
    yield broker
    broker.stop()
