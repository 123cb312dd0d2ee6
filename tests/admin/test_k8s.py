"""ops/k8s: the manifests agree with each other and with rafka's configuration."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from rafka.config import load_file

K8S = Path(__file__).resolve().parents[2] / "ops" / "k8s"


def objects() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def test_kustomization_lists_every_manifest() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def test_config_is_a_valid_rafka_config_naming_every_shard(tmp_path: Path) -> None:
    objs = objects()
    text = objs[("ConfigMap", "rafka-config")]["data"]["rafka.toml"]
    (tmp_path / "rafka.toml").write_text(text)
    values = load_file(str(tmp_path / "rafka.toml"))  # rejects unknown keys
    endpoints = values["shard_endpoints"].split(",")
    sts = objs[("StatefulSet", "rafka-shard")]
    headless = objs[("Service", sts["spec"]["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    rail = next(p for p in headless["spec"]["ports"] if p["name"] == "rail")["port"]
    assert endpoints == [f"tcp://{sts['metadata']['name']}-{k}.{headless['metadata']['name']}:{rail}"
                         for k in range(sts["spec"]["replicas"])]
    assert tomllib.loads(text)["metrics_port"] == 9464


def test_shards_have_stable_names_volumes_and_matching_selectors() -> None:
    objs = objects()
    sts = objs[("StatefulSet", "rafka-shard")]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert objs[("Service", "rafka-shard")]["spec"]["selector"].items() <= labels.items()
    [claim] = sts["spec"]["volumeClaimTemplates"]
    [container] = sts["spec"]["template"]["spec"]["containers"]
    assert any(m["name"] == claim["metadata"]["name"] and m["mountPath"] == "/var/lib/rafka"
               for m in container["volumeMounts"])
    script = container["args"][0]
    assert 'K="${HOSTNAME##*-}"' in script and "rafka shard" in script and '--id "$K"' in script
    assert "$((9463 - K))" in script  # shard K then serves metrics on 9464, like every pod


def test_gateways_are_reached_through_their_service() -> None:
    objs = objects()
    dep = objs[("Deployment", "rafka-gateway")]
    svc = objs[("Service", "rafka")]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    [container] = dep["spec"]["template"]["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named == {"kafka": 9092, "metrics": 9464}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(named)
    script = container["args"][0]
    assert re.search(r"rafka gateway .*--node-id", script) and '--advertised-host "$POD_IP"' in script
    # shards and gateways are told apart by their component label
    shard_labels = objs[("StatefulSet", "rafka-shard")]["spec"]["template"]["metadata"]["labels"]
    assert not svc["spec"]["selector"].items() <= shard_labels.items()


def test_node_id_derivation_gives_distinct_int32_ids() -> None:
    import ipaddress

    ids = {int(ipaddress.ip_address(ip)) & 0x7FFFFFFF for ip in ("10.0.3.7", "10.0.3.8", "192.168.1.20", "fd00::1")}
    assert len(ids) == 4 and all(0 <= i < 2**31 for i in ids)


def test_kustomize_builds() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    out = subprocess.run([kubectl, "kustomize", str(K8S)], check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out.stdout))
    assert kinds == ["ConfigMap", "Deployment", "Service", "Service", "StatefulSet"]


def _run_start_script(kind: str, name: str, env: dict[str, str], tmp_path: Path) -> list[str]:
    """The argv a pod's start script would exec (with `rafka` swapped for `echo`)."""
    import os
    import shlex

    objs = objects()
    (tmp_path / "rafka.toml").write_text(objs[("ConfigMap", "rafka-config")]["data"]["rafka.toml"])
    script = objs[(kind, name)]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    script = script.replace("/etc/rafka/rafka.toml", str(tmp_path / "rafka.toml")).replace("exec rafka ", "exec echo ")
    out = subprocess.run(["/bin/sh", "-c", script], env={**os.environ, **env}, check=False,
                         capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return shlex.split(out.stdout)


def test_shard_start_script_binds_its_own_endpoint_and_serves_metrics_on_9464(tmp_path: Path) -> None:
    from rafka.cli import build_parser
    from rafka.config import from_args

    argv = _run_start_script("StatefulSet", "rafka-shard", {"HOSTNAME": "rafka-shard-2"}, tmp_path)
    cfg_file = argv[argv.index("--config") + 1]
    ns = build_parser(load_file(cfg_file)).parse_args(argv)
    cfg = from_args(ns)
    assert ns.command == "shard" and ns.id == 2
    assert len(cfg.endpoints()) == 3 and cfg.endpoints()[2] == "tcp://0.0.0.0:5555"
    assert cfg.metrics_port + 1 + ns.id == 9464
    assert cfg.data_dir == "/var/lib/rafka"


def test_gateway_start_script_advertises_its_pod(tmp_path: Path) -> None:
    from rafka.cli import build_parser
    from rafka.config import from_args

    argv = _run_start_script("Deployment", "rafka-gateway", {"POD_IP": "10.1.2.3"}, tmp_path)
    cfg = from_args(build_parser(load_file(argv[argv.index("--config") + 1])).parse_args(argv))
    assert (cfg.advertised_host, cfg.advertised_port, cfg.node_id) == ("10.1.2.3", 9092, 167838211)
    assert cfg.endpoints()[0] == "tcp://rafka-shard-0.rafka-shard:5555"
