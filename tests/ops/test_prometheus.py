"""A real Prometheus, running the shipped config and alert rules, scrapes a real `rafka serve`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Rafka, free_port
from tests.ops.opsutil import (
    OPS,
    PROMETHEUS_DIR,
    alert_rules,
    dashboard_exprs,
    dashboard_variable_queries,
    grafana_to_promql,
    need_binary,
    sample_value,
    scrape,
    wait_for,
)

pytestmark = pytest.mark.integration

COMMITS = 7
LAG = 5  # records produced beyond the last committed offset
TOPIC = "ops-prom"
GROUP = "ops-prom-group"


class Prometheus:
    def __init__(self, binary: str, workdir: Path, target_port: int) -> None:
        self.port = free_port()
        self.workdir = workdir
        shipped = (PROMETHEUS_DIR / "prometheus.yml").read_text()
        config = shipped
        # the shipped file, pointed at the test broker and made fast; every edit must hit
        for old, new in (('- targets: ["localhost:9464"]\n', f'- targets: ["127.0.0.1:{target_port}"]\n'),
                         ("scrape_interval: 15s", "scrape_interval: 1s"),
                         ("evaluation_interval: 15s", "evaluation_interval: 1s")):
            assert config.count(old) == 1, f"{old!r} not found once in ops/prometheus/prometheus.yml"
            config = config.replace(old, new)
        (workdir / "prometheus.yml").write_text(config)
        shutil.copy(PROMETHEUS_DIR / "alerts.yml", workdir / "alerts.yml")
        self.log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def get(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())

    def query(self, promql: str) -> list[dict[str, Any]]:
        body = self.get("/api/v1/query", query=promql)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.logs()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def logs(self) -> str:
        return (self.workdir / "prometheus.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _commit_offsets(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(COMMITS + LAG):
        producer.produce(TOPIC, value=b"v%d" % i)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        for offset in range(1, COMMITS + 1):  # each a synchronous OffsetCommit request
            result = consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
            assert result[0].error is None, result
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Rafka, Prometheus]]:
    binary = need_binary("prometheus")
    base = tmp_path_factory.mktemp("ops-prom")
    broker = Rafka(base / "data", shards=2).start()
    prom = None
    try:
        _commit_offsets(broker.bootstrap)
        # the broker itself counted exactly the commits (so a mismatch below is Prometheus' side);
        # a count reaches /metrics up to telemetry.FLUSH_EVERY after its reply
        wait_for(lambda: sample_value(scrape(broker.metrics_port), "rafka_gateway_requests_total",
                                      'api="group.offset-commit"') == COMMITS, 5, "the broker's commit count",
                 interval=0.02)
        prom = Prometheus(binary, base, broker.metrics_port)
        wait_for(prom.ready, 15, "prometheus /-/ready")
        yield broker, prom
    finally:
        if prom is not None:
            prom.stop()
        broker.stop()


def test_prometheus_scrapes_commit_count(stack: tuple[Rafka, Prometheus]) -> None:
    _broker, prom = stack
    query = 'sum(rafka_gateway_requests_total{api="group.offset-commit"})'

    def value() -> str | None:
        result = prom.query(query)
        return result[0]["value"][1] if result else None

    wait_for(lambda: value() == str(COMMITS), 15, f"{query} == {COMMITS}")
    targets = prom.get("/api/v1/targets")["data"]["activeTargets"]
    assert [(t["labels"]["job"], t["health"]) for t in targets] == [("rafka", "up")]


def test_alert_rules_load_and_evaluate(stack: tuple[Rafka, Prometheus]) -> None:
    _broker, prom = stack
    expected = {name for name, _expr in alert_rules()}

    def rules() -> dict[str, str] | None:
        got = {r["name"]: r["health"] for g in prom.get("/api/v1/rules")["data"]["groups"] for r in g["rules"]}
        return got if got.keys() == expected and all(h == "ok" for h in got.values()) else None

    wait_for(rules, 15, "every alert rule loaded and evaluated with health ok")
    # a healthy broker fires nothing (pending/firing alerts would show here)
    assert prom.get("/api/v1/alerts")["data"]["alerts"] == []


def test_every_api_exports_its_exception_count_from_the_start(stack: tuple[Rafka, Prometheus]) -> None:
    """RafkaHandlerExceptions alerts on an increase: a series born at 1 by the first exception would
    show none, so each API's series is there at 0 before any exception."""
    from rafka.gateway import handlers  # noqa: F401  (registers every API)
    from rafka.gateway.api import REGISTRY

    _broker, prom = stack
    apis = {spec.name for spec in REGISTRY.values()}

    def exported() -> dict[str, str] | None:
        got = {r["metric"]["api"]: r["value"][1]
               for r in prom.query('rafka_gateway_errors_total{error_code="exception"}')}
        return got if got.keys() == apis else None

    assert set(wait_for(exported, 20, "an exception series for every API").values()) == {"0"}


# Panels whose series only exist after errors or bad input, which this broker has not seen.
NEEDS_ERRORS = ("rafka_gateway_errors_total", "rafka_shard_errors_total", "rafka_gateway_bad_input_total")


def test_every_dashboard_query_runs_and_has_data(stack: tuple[Rafka, Prometheus]) -> None:
    _broker, prom = stack
    queries = [(title, grafana_to_promql(expr)) for title, expr in dashboard_exprs()]
    # Grafana's label_values(metric{…}, label) variables: their selector must match series
    queries += [(var, grafana_to_promql(q[len("label_values("):q.rindex(",")]))
                for var, q in dashboard_variable_queries()]
    assert len(queries) > 20

    def empty() -> list[str]:
        return [f"{title}: {expr}" for title, expr in queries
                if not any(name in expr for name in NEEDS_ERRORS) and not prom.query(expr)]

    try:
        wait_for(lambda: not empty(), 20, "data for every dashboard query")
    except AssertionError:
        pytest.fail("dashboard queries without data:\n" + "\n".join(empty()))
    for _title, expr in queries:  # the error panels at least parse and evaluate
        prom.query(expr)


def test_split_deployment_lag_rule_matches_exported_lag(stack: tuple[Rafka, Prometheus]) -> None:
    """ops/README.md's recording rule for split processes computes what `rafka serve` exports."""
    [expr] = re.findall(r"^\s*expr: (clamp_min\(.+\))$", (OPS / "README.md").read_text(), re.MULTILINE)
    keys = ("org", "consumergroup", "topic", "partition")

    def by_key(result: list[dict[str, Any]]) -> dict[tuple[str, ...], str]:
        return {tuple(r["metric"][k] for k in keys): r["value"][1] for r in result}

    def both() -> tuple[dict[tuple[str, ...], str], dict[tuple[str, ...], str]] | None:
        exported, computed = by_key(stack[1].query("kafka_consumergroup_lag")), by_key(stack[1].query(expr))
        # the state gauges refresh every 5 s: wait for the one after the last commit
        return (exported, computed) if exported.get(("default", GROUP, TOPIC, "0")) == str(LAG) else None

    exported, computed = wait_for(both, 20, f"kafka_consumergroup_lag == {LAG} in Prometheus")
    assert computed == exported
