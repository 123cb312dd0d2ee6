"""Helpers for the operations-artifact tests: file locations, PromQL extraction, live scrapes."""

from __future__ import annotations

import json
import re
import shutil
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops"
PROMETHEUS_DIR = OPS / "prometheus"
SYSTEMD_DIR = OPS / "systemd"
DOCKER_DIR = OPS / "docker"
GRAFANA_DIR = ROOT / "grafana"
DASHBOARD = GRAFANA_DIR / "dashboards" / "rafka.json"

METRIC_RE = re.compile(r"\b(?:rafka|kafka)_[A-Za-z0-9_]*[A-Za-z0-9]\b")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

# Grafana's macros and this dashboard's variables, as Prometheus should see them.
GRAFANA_SUBSTITUTIONS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h",
                         "${instance}": ".*", "$instance": ".*", "${consumergroup}": ".*", "$consumergroup": ".*",
                         "${org}": ".*", "$org": ".*"}


def need_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (scripts/test.sh installs it)")
    return path


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))  # collapsed rows hold their panels


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target."""
    return [(p["title"], t["expr"]) for p in iter_panels(load_dashboard()["panels"]) for t in p.get("targets", [])
            if t.get("expr")]


def dashboard_variable_queries() -> list[tuple[str, str]]:
    out = []
    for var in load_dashboard()["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            out.append((f"${var['name']}", q))
    return out


def grafana_to_promql(expr: str) -> str:
    for macro, value in GRAFANA_SUBSTITUTIONS.items():
        expr = expr.replace(macro, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def alert_rules(text: str | None = None) -> list[tuple[str, str]]:
    """(alert name, expr) of every rule in alerts.yml.

    A small reader for the subset of YAML the file uses (``expr:`` inline or as a ``|``
    block), so the tests need no YAML library; test_ops_files cross-checks the rule
    count with promtool.
    """
    lines = (text if text is not None else (PROMETHEUS_DIR / "alerts.yml").read_text()).splitlines()
    rules: list[tuple[str, str]] = []
    name = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*-\s*(?:alert|record):\s*(\S+)", line)
        if m:
            name = m.group(1)
        m = re.match(r"(\s*)expr:\s*(.*)$", line)
        if m:
            indent, value = len(m.group(1)), m.group(2).strip()
            if value in ("|", "|-", ">", ">-"):
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i].strip())
                    i += 1
                value = " ".join(b for b in block if b)
                assert name is not None
                rules.append((name, value))
                continue
            assert name is not None
            rules.append((name, value.strip("'\"")))
        i += 1
    return rules


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression (or Grafana variable query) refers to."""
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values are not metric names
    return set(METRIC_RE.findall(without_strings))


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def sample_value(text: str, name: str, labels: str) -> float | None:
    """The value of the sample ``name{labels}`` in a Prometheus text exposition, if present."""
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.rsplit(" ", 1)[1])
    return None


def families(text: str) -> tuple[dict[str, str], set[str]]:
    """(family name → type, names of samples present) of a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    types: dict[str, str] = {}
    samples: set[str] = set()
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples.add(s.name)
    return types, samples


def missing_metrics(referenced: set[str], text: str) -> set[str]:
    """Referenced names with no sample in the scrape (histogram suffixes need a histogram family)."""
    types, samples = families(text)
    missing = set()
    for name in referenced:
        if name not in samples:
            missing.add(name)
            continue
        for suffix in HISTOGRAM_SUFFIXES:
            base = name[: -len(suffix)]
            if name.endswith(suffix) and base in types and types[base] != "histogram":
                missing.add(name)  # e.g. foo_count of a gauge named foo: not the histogram meant
    return missing


def send_bad_frame(port: int) -> None:
    """A 2 GiB size prefix: the gateway closes the connection (rafka_gateway_bad_input_total)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", 2**31 - 1) + b"junk")
        sock.settimeout(5)
        try:
            sock.recv(1)
        except (ConnectionResetError, TimeoutError):
            pass


def wait_for(pred, timeout: float, what: str, interval: float = 0.25):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
