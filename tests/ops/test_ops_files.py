"""The operations artifacts are valid for the tools that read them, and match what rafka exports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Rafka
from tests.ops.opsutil import (
    DASHBOARD,
    DOCKER_DIR,
    GRAFANA_DIR,
    PROMETHEUS_DIR,
    ROOT,
    SYSTEMD_DIR,
    alert_rules,
    dashboard_exprs,
    dashboard_variable_queries,
    iter_panels,
    load_dashboard,
    metric_names,
    missing_metrics,
    need_binary,
    scrape,
    send_bad_frame,
)

UNITS = ["rafka.service", "rafka-gateway.service", "rafka-shard@.service"]


def run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60, **kw)


# -- Prometheus -------------------------------------------------------------------

def test_promtool_check_config() -> None:
    promtool = need_binary("promtool")
    out = run([promtool, "check", "config", str(PROMETHEUS_DIR / "prometheus.yml")])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 1 rule files found" in out.stdout  # alerts.yml, resolved next to the config


def test_promtool_check_compose_config(tmp_path: Path) -> None:
    """ops/docker/prometheus.yml as compose mounts it: alerts.yml beside it in /etc/prometheus."""
    promtool = need_binary("promtool")
    shutil.copy(DOCKER_DIR / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copy(PROMETHEUS_DIR / "alerts.yml", tmp_path / "alerts.yml")
    out = run([promtool, "check", "config", str(tmp_path / "prometheus.yml")])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 1 rule files found" in out.stdout
    assert '- targets: ["rafka:9464"]' in (DOCKER_DIR / "prometheus.yml").read_text()


def test_promtool_check_rules() -> None:
    promtool = need_binary("promtool")
    out = run([promtool, "check", "rules", str(PROMETHEUS_DIR / "alerts.yml")])
    assert out.returncode == 0, out.stdout + out.stderr
    found = int(re.search(r"SUCCESS: (\d+) rules found", out.stdout).group(1))  # type: ignore[union-attr]
    rules = alert_rules()
    assert len(rules) == found  # the tests' own reader of alerts.yml sees every rule
    names = {name for name, _ in rules}
    for wanted in ("RafkaConsumerLagHigh", "RafkaRebalanceStorm", "RafkaShardDown", "RafkaHighErrorRate",
                   "RafkaWalFsyncSlow", "RafkaShardLoopLag"):
        assert wanted in names


def test_alert_unit_tests_pass_and_cover_every_alert() -> None:
    promtool = need_binary("promtool")
    out = run([promtool, "test", "rules", "alerts.test.yml"], cwd=PROMETHEUS_DIR)
    assert out.returncode == 0, out.stdout + out.stderr
    tested = set(re.findall(r"alertname:\s*(\S+)", (PROMETHEUS_DIR / "alerts.test.yml").read_text()))
    assert {name for name, _ in alert_rules()} <= tested


# -- systemd ----------------------------------------------------------------------

def _unit_lines(unit: str) -> list[str]:
    return [ln.strip() for ln in (SYSTEMD_DIR / unit).read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def _exec_start(unit: str) -> list[str]:
    [line] = [ln for ln in _unit_lines(unit) if ln.startswith("ExecStart=")]
    return line.split("=", 1)[1].split()


@pytest.fixture(scope="module")
def systemd_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root for `systemd-analyze --root`: the system's stock units, ours, and the rafka binary.

    verify checks that each Exec line's binary exists; the test machine has no rafka installed
    at /usr/local/bin, so a stub stands in there, and for ExecReload's kill (inside the
    throwaway root only).
    """
    need_binary("systemd-analyze")
    root = tmp_path_factory.mktemp("sysroot")
    stock = Path("/usr/lib/systemd/system")
    if not stock.is_dir():
        pytest.skip("no stock systemd units in /usr/lib/systemd/system")
    shutil.copytree(stock, root / "usr/lib/systemd/system", symlinks=True)
    (root / "lib").symlink_to("usr/lib")  # absolute /lib/systemd/... links in stock units
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in UNITS:
        shutil.copy(SYSTEMD_DIR / unit, root / "etc/systemd/system" / unit)
        for line in _unit_lines(unit):
            if line.startswith(("ExecStart=", "ExecReload=")):
                binary = root / line.split("=", 1)[1].split()[0].lstrip("/")
                binary.parent.mkdir(parents=True, exist_ok=True)
                binary.write_text("#!/bin/sh\nexit 0\n")
                binary.chmod(0o755)
    return root


@pytest.mark.parametrize("unit", ["rafka.service", "rafka-gateway.service", "rafka-shard@0.service"])
def test_systemd_analyze_verify(systemd_root: Path, unit: str) -> None:
    out = run(["systemd-analyze", "verify", f"--root={systemd_root}", "--man=no", unit])
    # verify exits 0 on unknown keys and bad values, only warning: any output is a failure
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out.stdout + out.stderr


def test_systemd_verify_catches_mistakes(systemd_root: Path, tmp_path: Path) -> None:
    """The checks above are not vacuous: a typo in a unit shows up on stderr."""
    broken = systemd_root / "etc/systemd/system/rafka-broken.service"
    broken.write_text((SYSTEMD_DIR / "rafka.service").read_text().replace("KillMode=mixed", "KillMode=mixd"))
    try:
        out = run(["systemd-analyze", "verify", f"--root={systemd_root}", "--man=no", "rafka-broken.service"])
    finally:
        broken.unlink()
    assert "kill mode" in out.stderr.lower()


@pytest.mark.parametrize("unit", ["rafka.service", "rafka-gateway.service", "rafka-shard@0.service"])
def test_systemd_hardening_exposure(systemd_root: Path, unit: str) -> None:
    # --threshold is the exposure level ×10: fail above 2.0 ("OK" is < 4.0)
    out = run(["systemd-analyze", "security", "--offline=true", f"--root={systemd_root}", "--threshold=20",
               "--no-pager", unit])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr


@pytest.mark.parametrize("unit", UNITS)
def test_unit_settings(unit: str) -> None:
    lines = _unit_lines(unit)
    for wanted in ("EnvironmentFile=-/etc/rafka/rafka.env", "Restart=on-failure", "KillMode=mixed",
                   "KillSignal=SIGTERM", "TimeoutStopSec=15s", "NoNewPrivileges=yes", "ProtectSystem=strict",
                   "StateDirectory=rafka", "User=rafka"):
        assert wanted in lines, f"{unit} lacks {wanted}"
    # the command line is one rafka's own parser accepts
    from rafka.cli import build_parser

    argv = [a.replace("%i", "3") for a in _exec_start(unit)[1:]]
    ns = build_parser().parse_args(argv)
    assert ns.command == {"rafka.service": "serve", "rafka-gateway.service": "gateway",
                          "rafka-shard@.service": "shard"}[unit]
    if unit == "rafka-shard@.service":
        assert ns.id == 3


def test_env_example_names_real_options(tmp_path: Path) -> None:
    import dataclasses

    from rafka.config import Config

    text = (SYSTEMD_DIR / "rafka.env.example").read_text()
    fields = {f.name for f in dataclasses.fields(Config)}
    named = re.findall(r"^#?RAFKA_([A-Z_]+)=", text, re.MULTILINE)
    assert named and {n.lower() for n in named} <= fields
    # the active lines parse into a Config (same parsing as systemd: KEY=VALUE per line)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFKA_")}
    env.update(re.findall(r"^(RAFKA_[A-Z_]+)=(.*)$", text, re.MULTILINE))
    code = ("from rafka.cli import build_parser; from rafka.config import from_args; "
            "c = from_args(build_parser().parse_args(['serve'])); print(c.host, c.shards, c.data_dir)")
    out = run([sys.executable, "-c", code], env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.0.0.0", "4", "/var/lib/rafka"]


# -- Docker -----------------------------------------------------------------------

def test_dockerfile() -> None:
    text = (DOCKER_DIR / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.MULTILINE)
    assert re.search(r"^RUN pip install \.", text, re.MULTILINE)
    assert re.search(r"^EXPOSE 9092 9464$", text, re.MULTILINE)
    assert re.search(r'^VOLUME \["/var/lib/rafka"\]$', text, re.MULTILINE)
    assert "RAFKA_HOST=0.0.0.0" in text and "RAFKA_ADVERTISED_HOST=" in text and "RAFKA_DATA_DIR=/var/lib/rafka" in text
    assert re.search(r'^ENTRYPOINT \["rafka"\]$', text, re.MULTILINE) and re.search(r'^CMD \["serve"\]$', text, re.MULTILINE)
    # COPY sources exist in the build context (the repository root, see compose.yml)
    for line in re.findall(r"^COPY (.+)$", text, re.MULTILINE):
        *sources, _dest = line.split()
        for src in sources:
            assert (ROOT / src).exists(), src


def test_compose_file() -> None:
    yaml = pytest.importorskip("yaml")
    compose = yaml.safe_load((DOCKER_DIR / "compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"rafka", "prometheus", "grafana"}
    build = services["rafka"]["build"]
    context = (DOCKER_DIR / build["context"]).resolve()
    assert context == ROOT and (context / build["dockerfile"]).is_file()
    assert {"9092:9092", "9464:9464"} <= set(services["rafka"]["ports"])
    assert services["rafka"]["stop_grace_period"] == "15s"
    mounts = {}
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            src, dst = vol.split(":")[:2]
            if src.startswith("."):
                assert (DOCKER_DIR / src).exists(), f"{name}: {src}"
                mounts[dst] = (DOCKER_DIR / src).resolve()
            else:
                assert src in compose["volumes"], f"{name}: undeclared volume {src}"
    assert mounts["/etc/prometheus/prometheus.yml"] == DOCKER_DIR / "prometheus.yml"
    assert mounts["/etc/prometheus/alerts.yml"] == PROMETHEUS_DIR / "alerts.yml"
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    assert mounts["/etc/grafana/provisioning"] == GRAFANA_DIR / "provisioning"
    provider = yaml.safe_load((GRAFANA_DIR / "provisioning/dashboards/rafka.yml").read_text())["providers"][0]
    assert mounts[provider["options"]["path"]] == DASHBOARD.parent
    datasource = yaml.safe_load((GRAFANA_DIR / "provisioning/datasources/prometheus.yml").read_text())
    [ds] = datasource["datasources"]
    assert ds["type"] == "prometheus" and ds["uid"] == "prometheus" and ds["url"] == "http://prometheus:9090"


# -- Grafana ----------------------------------------------------------------------

def test_dashboard_structure() -> None:
    dash = load_dashboard()
    assert dash["uid"] == "rafka" and dash["id"] is None
    [ds_var] = [v for v in dash["templating"]["list"] if v["name"] == "DS_PROMETHEUS"]
    assert ds_var["type"] == "datasource" and ds_var["query"] == "prometheus"
    assert ds_var["current"]["value"] == "prometheus"  # the provisioned data source's uid
    panels = list(iter_panels(dash["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"], p["title"]
    titles = {p["title"] for p in panels}
    for wanted in ("Requests/s by API", "p99 latency by API", "Errors/s by code", "Groups by state", "Members",
                   "Committed offsets", "Rebalances/s", "Consumer lag by group / topic", "Shard up",
                   "Shard in-flight ops", "Event loop lag", "WAL fsync p99"):
        assert wanted in titles
    exprs = dict(dashboard_exprs())
    assert "histogram_quantile(0.99" in exprs["p99 latency by API"]
    assert "rafka_gateway_request_latency_seconds_bucket" in exprs["p99 latency by API"]


# -- every metric the dashboard and the alerts use exists ----------------------------

def _referenced_metrics() -> dict[str, set[str]]:
    """metric name → where it is used."""
    used: dict[str, set[str]] = {}
    sources = [(f"panel {t}", e) for t, e in dashboard_exprs()]
    sources += [(f"variable {v}", q) for v, q in dashboard_variable_queries()]
    sources += [(f"alert {a}", e) for a, e in alert_rules()]
    for where, expr in sources:
        for name in metric_names(expr):
            used.setdefault(name, set()).add(where)
    return used


def _traffic(bootstrap: str, metrics_port: int, port: int) -> None:
    """Produce, a consumer group that joins, syncs, fetches and commits, and one bad frame."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce("ops-files", value=b"r%d" % i)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ops-files-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    try:
        consumer.subscribe(["ops-files"])
        got = 0
        deadline = time.monotonic() + 20
        while got < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got += 1
                consumer.commit(message=msg, asynchronous=False)
        assert got == 5
    finally:
        consumer.close()
    send_bad_frame(port)


@pytest.fixture(scope="module")
def live_scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Rafka, set[str]]]:
    referenced = set(_referenced_metrics())
    broker = Rafka(tmp_path_factory.mktemp("ops-files") / "data", shards=2).start()
    try:
        _traffic(broker.bootstrap, broker.metrics_port, broker.port)
        # state gauges are refreshed every 5 s: wait for them to cover the traffic
        deadline = time.monotonic() + 15
        while True:
            text = scrape(broker.metrics_port)
            missing = missing_metrics(referenced, text)
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        yield broker, missing
    finally:
        broker.stop()


@pytest.mark.integration
def test_every_referenced_metric_is_exported(live_scrape: tuple[Rafka, set[str]]) -> None:
    _broker, missing = live_scrape
    used = _referenced_metrics()
    assert len(used) >= 20
    assert not missing, "\n".join(f"{name} (used by {', '.join(sorted(used[name]))})" for name in sorted(missing))


def test_metric_name_checks_are_not_vacuous() -> None:
    text = ("# TYPE rafka_x_seconds histogram\n"
            'rafka_x_seconds_bucket{le="+Inf"} 1.0\nrafka_x_seconds_sum 0.1\nrafka_x_seconds_count 1.0\n'
            "# TYPE rafka_y gauge\nrafka_y 1.0\n"
            "# TYPE kafka_z gauge\n")  # a family without samples does not count
    assert metric_names('histogram_quantile(0.9, sum by (le) (rate(rafka_x_seconds_bucket{a="kafka_q"}[1m])))'
                        ' / on() kafka_z') == {"rafka_x_seconds_bucket", "kafka_z"}
    assert missing_metrics({"rafka_x_seconds_bucket", "rafka_x_seconds_count", "rafka_y"}, text) == set()
    assert missing_metrics({"kafka_z", "rafka_y_total", "rafka_nope"}, text) == {"kafka_z", "rafka_y_total",
                                                                                 "rafka_nope"}
