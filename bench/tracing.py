"""Cost of the span wrapper with and without an OTLP exporter configured.

Times the gateway's ``telemetry.gateway_span`` around an empty body, against the
same loop without it (the baseline, same run): with no ``OTEL_EXPORTER_OTLP_*``
variable the tracer is off and the wrapper should cost well under a microsecond;
with the SDK on (spans batched to an unreachable endpoint, dropped) it shows what
tracing costs per request.
Usage: python bench/tracing.py [--n 200000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from common import table

ROOT = Path(__file__).resolve().parents[1]

CODE = """
import time, sys
sys.path.insert(0, {root!r})
from rafka import telemetry
class Ctx: org_id = "default"; api_version = 9; requests = 1
ctx = Ctx(); n = {n}
t = time.perf_counter()
for _ in range(n):
    pass
base = time.perf_counter() - t
t = time.perf_counter()
for _ in range(n):
    with telemetry.gateway_span("group.heartbeat", ctx):
        pass
print((time.perf_counter() - t - base) / n * 1e9)
"""


def run(n: int, otel: bool) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if otel:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens: spans are dropped
        env["OTEL_BSP_MAX_QUEUE_SIZE"] = "2048"
    out = subprocess.run([sys.executable, "-c", CODE.format(root=str(ROOT), n=n)], env=env, capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    args = ap.parse_args()
    off = run(args.n, otel=False)
    on = run(args.n // 10, otel=True)
    print(table([["no exporter configured", f"{off:.0f} ns"], ["OTLP exporter configured", f"{on:,.0f} ns"]],
                ["span wrapper per request", "cost over an empty loop (same run)"]))


if __name__ == "__main__":
    main()
