"""Run every benchmark and print their tables: ``python bench/run.py [--quick]``.

Each benchmark starts its own rafka (and librdkafka mock cluster, where the mock
serves the APIs) and prints rafka's figures next to its baseline measured in the
same run, with ratios and the targets of the performance issue. ``--quick`` runs
smaller sizes (a smoke run, not figures to quote).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

FULL = [
    ["commits.py", "--seconds", "4", "--clients", "1,4,16", "--rounds", "3"],
    ["commits.py", "--seconds", "4", "--clients", "4", "--shards", "2", "--rounds", "3"],
    ["groups.py"],
    ["offsets.py"],
    ["produce_consume.py"],
    ["retained.py"],
    ["cleaner.py"],
    ["settle.py"],
    ["tracing.py"],
]
QUICK = [
    ["commits.py", "--seconds", "2"],
    ["groups.py", "--members", "1000", "--groups", "100", "--seconds", "2"],
    ["offsets.py", "--offsets", "100000"],
    ["produce_consume.py", "--records", "50000"],
    ["retained.py", "--mb", "50"],
    ["cleaner.py", "--records", "20000", "--keys", "1000"],
    ["tracing.py", "--n", "50000"],
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(f"rafka benchmarks — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}", flush=True)
    failed = 0
    # the benchmarks import this checkout's rafka, whatever is installed (the brokers they start do too)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    for cmd in QUICK if args.quick else FULL:
        print(f"\n$ python bench/{' '.join(cmd)}", flush=True)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, str(HERE / cmd[0]), *cmd[1:]], cwd=HERE, env=env,
                              check=False, stderr=subprocess.PIPE, text=True)  # librdkafka's connection noise goes here
        rc = proc.returncode
        if rc != 0:
            print("\n".join(proc.stderr.splitlines()[-15:]))
        print(f"({time.perf_counter() - start:.0f} s{'' if rc == 0 else f', exit code {rc}'})", flush=True)
        failed += rc != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
