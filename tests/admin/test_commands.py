"""The admin commands' arguments, output and exit codes, against a fake cluster."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import pytest

from rafka.admin import commands
from rafka.admin.commands import Context, parse_configs, parse_datetime_ms, parse_topic_spec, plan_offsets, run
from rafka.admin.errors import EXIT_KAFKA, EXIT_NOT_FOUND, EXIT_USAGE, AdminError, KafkaFailure, NotFound, UsageError
from rafka.admin.kafka import EARLIEST, LATEST, _error, client_config, parse_state
from rafka.cli import build_parser


class FakeCluster:
    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {
            "orders": {"group_id": "orders", "state": "Stable", "protocol_type": "consumer", "protocol": "range",
                       "coordinator": {"id": 0, "host": "127.0.0.1", "port": 9092},
                       "members": [{"member_id": "m1", "group_instance_id": None, "client_id": "svc",
                                    "host": "/10.0.0.1", "assignment": {"t": [0, 1]}}]},
            "idle": {"group_id": "idle", "state": "Empty", "protocol_type": "consumer", "protocol": None,
                     "coordinator": None, "members": []},
        }
        self.committed: dict[str, dict[tuple[str, int], int]] = {"orders": {("t", 0): 5}, "idle": {("t", 0): 4,
                                                                                                   ("t", 2): 9}}
        self.logs = {("t", 0): (2, 10), ("t", 1): (0, 3), ("t", 2): (0, 20)}
        self.altered: list[dict[tuple[str, int], int]] = []
        self.deleted: list[str] = []

    def list_groups(self, states: list[str]) -> list[dict[str, Any]]:
        names = {"STABLE": "Stable", "EMPTY": "Empty"}
        return [{"group_id": g, "state": d["state"], "type": "classic", "is_simple": False}
                for g, d in sorted(self.groups.items()) if not states or d["state"] in {names[s] for s in states}]

    def describe_group(self, group_id: str) -> dict[str, Any]:
        return json.loads(json.dumps(self.groups.get(group_id) or {
            "group_id": group_id, "state": "Dead", "protocol_type": "", "protocol": None, "coordinator": None,
            "members": []}))

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return dict(self.committed.get(group_id, {}))

    def list_offsets(self, specs: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        out = {}
        for k, v in specs.items():
            lo, hi = self.logs[k]
            out[k] = lo if v == EARLIEST else hi if v == LATEST else (-1 if v > 1_000 else lo + 1)
        return out

    def alter_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        self.altered.append(offsets)

    def delete_group(self, group_id: str) -> None:
        if group_id not in self.groups:
            raise NotFound(f"delete group {group_id}: Broker: The group id does not exist")
        self.deleted.append(group_id)

    def partition_count(self, topic: str) -> int:
        if topic != "t":
            raise NotFound(f"topic {topic}: Broker: Unknown topic or partition")
        return 3


def invoke(argv: list[str], cluster: FakeCluster | None = None, rest: dict[str, Any] | None = None,
           tty: bool = False) -> tuple[int, str, str]:
    ns = build_parser().parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    if tty:
        err.isatty = lambda: True  # type: ignore[method-assign]
    ctx = Context(ns, out, err, cluster=cluster or FakeCluster(), fetch_rest=lambda _ns, _g: rest,
                  sleep=lambda _s: None)
    return run(ns, ctx), out.getvalue(), err.getvalue()


# -- arguments --------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["group"], ["group", "describe"], ["group", "reset-offsets", "g", "--topic", "t"],
    ["group", "reset-offsets", "g", "--to-earliest"],
    ["group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
    ["group", "reset-offsets", "g", "--topic", "t", "--all-topics", "--to-earliest"],
    ["group", "reset-offsets", "g", "--topic", "t", "--to-offset", "x"],
    ["group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--dry-run", "--execute"],
    ["topic", "create", "t"], ["topic", "frobnicate"],
])
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == EXIT_USAGE


def test_defaults_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFKA_BOOTSTRAP", "gw:19092")
    monkeypatch.setenv("RAFKA_ADMIN_URL", "http://gw:1")
    monkeypatch.setenv("RAFKA_SASL_PASSWORD", "pw")
    ns = build_parser().parse_args(["group", "describe", "g"])
    assert (ns.bootstrap_server, ns.admin_url, ns.sasl_password, ns.org) == ("gw:19092", "http://gw:1", "pw",
                                                                             "default")
    ns = build_parser().parse_args(["topic", "list", "--bootstrap-server", "x:1"])
    assert ns.bootstrap_server == "x:1"


def test_topic_create_config_is_a_topic_config_not_a_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Fake(FakeCluster):
        def __init__(self, conf: dict[str, Any], timeout: float) -> None:
            super().__init__()
            seen["conf"] = conf

        def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
            seen["create"] = (name, partitions, configs)

    monkeypatch.setattr(commands, "Cluster", Fake)
    monkeypatch.setenv("RAFKA_CONFIG", "/nonexistent.toml")  # the broker's config file is not read
    from rafka.cli import main

    code = main(["topic", "create", "t", "--partitions", "3", "--config", "retention.ms=1000", "--config",
                 "cleanup.policy=compact", "--bootstrap-server", "h:1", "--json"])
    assert code == 0
    assert seen["create"] == ("t", 3, {"retention.ms": "1000", "cleanup.policy": "compact"})
    assert seen["conf"]["bootstrap.servers"] == "h:1"


def test_client_config_passes_security_through() -> None:
    assert client_config("h:1") == {"bootstrap.servers": "h:1", "client.id": "rafka-cli"}
    conf = client_config("h:1", sasl_mechanism="SCRAM-SHA-256", sasl_username="u", sasl_password="p", ssl_ca="ca.pem")
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-256"
    assert (conf["sasl.username"], conf["sasl.password"], conf["ssl.ca.location"]) == ("u", "p", "ca.pem")
    assert client_config("h:1", sasl_username="u", sasl_password="p")["security.protocol"] == "SASL_PLAINTEXT"
    assert client_config("h:1", sasl_username="u")["sasl.mechanism"] == "PLAIN"
    assert client_config("h:1", ssl_ca="ca.pem")["security.protocol"] == "SSL"
    assert client_config("h:1", security_protocol="SSL", sasl_username="u")["security.protocol"] == "SSL"


def test_parsers() -> None:
    assert parse_topic_spec("t") == ("t", None)
    assert parse_topic_spec("t:2,0,2") == ("t", [0, 2])
    for bad in (":1", "t:", "t:x", "t:-1"):
        with pytest.raises(UsageError):
            parse_topic_spec(bad)
    assert parse_configs(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(UsageError):
        parse_configs(["nokey"])
    assert parse_datetime_ms("2026-01-31T12:00:00Z") == 1769860800000
    assert parse_datetime_ms("2026-01-31T14:00:00.5+02:00") == 1769860800500
    naive = dt.datetime(2026, 1, 31, 12).astimezone()
    assert parse_datetime_ms("2026-01-31T12:00:00") == int(naive.timestamp() * 1000)
    with pytest.raises(UsageError):
        parse_datetime_ms("yesterday")
    assert [parse_state(s) for s in ("stable", "PreparingRebalance", "completing_rebalancing", "EMPTY")] == [
        "STABLE", "PREPARING_REBALANCING", "COMPLETING_REBALANCING", "EMPTY"]
    with pytest.raises(ValueError):
        parse_state("sleepy")


def test_client_errors_map_to_exit_codes() -> None:
    import concurrent.futures

    from confluent_kafka import KafkaError, KafkaException

    assert isinstance(_error(KafkaException(KafkaError(KafkaError.GROUP_ID_NOT_FOUND)), "x"), NotFound)
    assert isinstance(_error(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)), "x"), NotFound)
    err = _error(KafkaException(KafkaError(KafkaError.NON_EMPTY_GROUP)), "delete group g")
    assert isinstance(err, KafkaFailure) and str(err).startswith("delete group g: ")
    assert "timed out" in str(_error(concurrent.futures.TimeoutError(), "x"))
    assert (NotFound.exit_code, KafkaFailure.exit_code, UsageError.exit_code) == (3, 1, 2)


# -- groups -----------------------------------------------------------------

def test_group_list_table_and_json() -> None:
    code, out, _ = invoke(["group", "list"])
    assert code == 0
    assert out.splitlines() == ["GROUP   STATE   TYPE     SIMPLE", "idle    Empty   classic  no",
                                "orders  Stable  classic  no"]
    code, out, _ = invoke(["group", "list", "--state", "stable", "--json"])
    assert json.loads(out) == [{"group_id": "orders", "state": "Stable", "type": "classic", "is_simple": False}]
    code, _, err = invoke(["group", "list", "--state", "sleepy"])
    assert code == EXIT_USAGE and "unknown group state" in err


def test_group_describe_with_and_without_the_rest_api() -> None:
    rest = {"group_id": "orders", "group_uid": "cgp_01ktb7wm5jvkbfgpzvfnk3kqqb",
            "rrl": "default/consumer-groups/orders", "protocol_type": "consumer"}
    code, out, _ = invoke(["group", "describe", "orders"], rest=rest)
    assert code == 0
    lines = out.splitlines()
    assert lines[:7] == ["GROUP        orders", "STATE        Stable", "PROTOCOL     consumer/range",
                         "COORDINATOR  127.0.0.1:9092 (node 0)", "MEMBERS      1",
                         "GROUP UID    cgp_01ktb7wm5jvkbfgpzvfnk3kqqb", "RRL          default/consumer-groups/orders"]
    assert lines[8].split() == ["MEMBER", "ID", "INSTANCE", "ID", "CLIENT", "ID", "HOST", "ASSIGNMENT"]
    assert lines[9].split() == ["m1", "-", "svc", "/10.0.0.1", "t:0,1"]
    code, out, _ = invoke(["group", "describe", "orders", "--json"])
    d = json.loads(out)
    assert "group_uid" not in d and "rrl" not in d and "GROUP UID" not in out
    assert d["members"][0]["assignment"] == {"t": [0, 1]}
    code, out, _ = invoke(["group", "describe", "orders", "--json"], rest=rest)
    assert json.loads(out)["group_uid"] == rest["group_uid"]


def test_describing_a_missing_group_exits_3() -> None:
    code, out, err = invoke(["group", "describe", "nope"])
    assert (code, out) == (EXIT_NOT_FOUND, "") and "nope does not exist" in err


def test_group_lag_lists_committed_and_assigned_partitions() -> None:
    _, out, _ = invoke(["group", "lag", "orders", "--json"])
    data = json.loads(out)
    assert data["total_lag"] == 5
    assert [(r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"], r["member_id"])
            for r in data["partitions"]] == [("t", 0, 5, 10, 5, "m1"), ("t", 1, None, 3, None, "m1")]
    _code, out, _ = invoke(["group", "lag", "orders"])
    lines = out.splitlines()
    assert lines[2] == "TOTAL LAG  5"
    assert lines[4].split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                                "HOST", "CLIENT-ID"]
    assert lines[5].split() == ["t", "0", "5", "10", "5", "m1", "/10.0.0.1", "svc"]
    assert lines[6].split() == ["t", "1", "-", "3", "-", "m1", "/10.0.0.1", "svc"]
    assert invoke(["group", "lag", "nope"])[0] == EXIT_NOT_FOUND


def test_group_lag_watch_prints_one_document_per_refresh() -> None:
    code, out, _ = invoke(["group", "lag", "idle", "--watch", "--interval", "0.01", "--count", "3", "--json"])
    docs = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(docs) == 3 and docs[0]["total_lag"] == 6 + 11
    code, out, _ = invoke(["group", "lag", "idle", "--watch", "--interval", "0.01", "--count", "2"])
    assert out.count("TOTAL LAG") == 2 and out.count("# ") == 2


# -- reset offsets ----------------------------------------------------------

def test_plan_offsets_keeps_offsets_within_the_log() -> None:
    keys = [("t", 0), ("t", 1)]
    earliest, latest = {("t", 0): 2, ("t", 1): 0}, {("t", 0): 10, ("t", 1): 3}
    committed = {("t", 0): 5, ("t", 1): 1}
    assert plan_offsets("earliest", None, keys, committed, earliest, latest) == {("t", 0): 2, ("t", 1): 0}
    assert plan_offsets("latest", None, keys, committed, earliest, latest) == {("t", 0): 10, ("t", 1): 3}
    assert plan_offsets("offset", 4, keys, committed, earliest, latest) == {("t", 0): 4, ("t", 1): 3}
    assert plan_offsets("offset", 0, keys, committed, earliest, latest) == {("t", 0): 2, ("t", 1): 0}
    assert plan_offsets("shift", -4, keys, committed, earliest, latest) == {("t", 0): 2, ("t", 1): 0}
    assert plan_offsets("shift", 2, keys, committed, earliest, latest) == {("t", 0): 7, ("t", 1): 3}
    by_time = {("t", 0): 6, ("t", 1): -1}  # no record at or after the time: the log end
    assert plan_offsets("datetime", 0, keys, committed, earliest, latest, by_time) == {("t", 0): 6, ("t", 1): 3}
    with pytest.raises(AdminError, match="no committed offset"):
        plan_offsets("shift", 1, keys, {}, earliest, latest)


def test_reset_is_refused_while_the_group_has_members() -> None:
    cluster = FakeCluster()
    code, out, err = invoke(["group", "reset-offsets", "orders", "--topic", "t", "--to-earliest", "--execute"], cluster)
    assert code == EXIT_KAFKA and out == "" and "stop its consumers first" in err
    assert cluster.altered == []


def test_reset_dry_run_changes_nothing() -> None:
    cluster = FakeCluster()
    code, out, err = invoke(["group", "reset-offsets", "idle", "--topic", "t:0,2", "--to-latest", "--dry-run",
                             "--json"], cluster)
    assert code == 0 and cluster.altered == [] and "dry run" in err
    assert json.loads(out) == {"group_id": "idle", "dry_run": True, "partitions": [
        {"topic": "t", "partition": 0, "previous_offset": 4, "new_offset": 10},
        {"topic": "t", "partition": 2, "previous_offset": 9, "new_offset": 20}]}


def test_reset_without_execute_only_shows_the_plan() -> None:
    """As Kafka's kafka-consumer-groups: a reset without --execute changes nothing and says so."""
    cluster = FakeCluster()
    code, out, err = invoke(["group", "reset-offsets", "idle", "--topic", "t:0", "--to-latest", "--json"], cluster)
    assert code == 0 and cluster.altered == [] and "add --execute to commit them" in err
    assert json.loads(out)["dry_run"] is True


def test_reset_commits_in_chunks_with_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "RESET_CHUNK", 2)
    cluster = FakeCluster()
    code, out, err = invoke(["group", "reset-offsets", "idle", "--topic", "t", "--to-offset", "3", "--execute"], cluster,
                             tty=True)
    assert code == 0
    assert cluster.altered == [{("t", 0): 3, ("t", 1): 3}, {("t", 2): 3}]
    assert [line.split() for line in out.splitlines()] == [["TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"],
                                                          ["t", "0", "4", "3"], ["t", "1", "-", "3"],
                                                          ["t", "2", "9", "3"]]
    assert err.endswith("resetting offsets of idle: 3/3 (100%)\n")


def test_reset_all_topics_and_shift() -> None:
    cluster = FakeCluster()
    code, _out, _ = invoke(["group", "reset-offsets", "idle", "--all-topics", "--shift-by", "-1", "--json", "--execute"],
                           cluster)
    assert code == 0 and cluster.altered == [{("t", 0): 3, ("t", 2): 8}]
    code, _, err = invoke(["group", "reset-offsets", "idle", "--topic", "t", "--shift-by", "1"], cluster)
    assert code == EXIT_KAFKA and "no committed offset" in err  # t[1] was never committed


def test_reset_of_unknown_topic_or_partition() -> None:
    assert invoke(["group", "reset-offsets", "idle", "--topic", "x", "--to-earliest"])[0] == EXIT_NOT_FOUND
    code, _, err = invoke(["group", "reset-offsets", "idle", "--topic", "t:7", "--to-earliest"])
    assert code == EXIT_USAGE and "no partition 7" in err


def test_reset_to_datetime() -> None:
    cluster = FakeCluster()
    code, _out, _ = invoke(["group", "reset-offsets", "new-group", "--topic", "t:0", "--to-datetime",
                           "1970-01-01T00:00:00.001Z", "--json", "--execute"], cluster)
    assert code == 0 and cluster.altered == [{("t", 0): 3}]  # the fake finds log start + 1 for small timestamps


def test_group_delete() -> None:
    cluster = FakeCluster()
    code, out, _ = invoke(["group", "delete", "idle"], cluster)
    assert (code, out, cluster.deleted) == (0, "deleted consumer group idle\n", ["idle"])
    code, out, _ = invoke(["group", "delete", "idle", "--json"], cluster)
    assert json.loads(out) == {"group_id": "idle", "deleted": True}
    assert invoke(["group", "delete", "nope"], cluster)[0] == EXIT_NOT_FOUND


# -- topics -----------------------------------------------------------------

class TopicCluster(FakeCluster):
    def list_topics(self, exclude_internal: bool = False) -> dict[str, int]:
        return {"a": 1, "events": 12}

    def describe_topic(self, name: str) -> dict[str, Any]:
        if name != "t":
            raise NotFound(f"topic {name}: Broker: Unknown topic or partition")
        return {"topic": "t", "topic_id": "03f74b9b-ce7c-4fc8-a526-91b71cdcfa68",
                "partitions": [{"partition": p, "leader": 0, "replicas": [0]} for p in range(3)],
                "configs": [{"name": "retention.ms", "value": "1000", "is_default": False, "read_only": False},
                            {"name": "segment.ms", "value": "604800000", "is_default": True, "read_only": False}]}


def test_topic_list_and_describe() -> None:
    _, out, _ = invoke(["topic", "list"], TopicCluster())
    assert out.splitlines() == ["TOPIC   PARTITIONS", "a                1", "events          12"]
    _, out, _ = invoke(["topic", "describe", "t"], TopicCluster())
    lines = out.splitlines()
    assert lines[:3] == ["TOPIC       t", "TOPIC ID    03f74b9b-ce7c-4fc8-a526-91b71cdcfa68", "PARTITIONS  3"]
    assert lines[5].split() == ["0", "0", "2", "10", "8"]
    assert ["retention.ms", "1000", "topic"] in [line.split() for line in lines]
    assert ["segment.ms", "604800000", "default"] in [line.split() for line in lines]
    _code, out, _ = invoke(["topic", "describe", "t", "--json"], TopicCluster())
    d = json.loads(out)
    assert d["partitions"][1] == {"partition": 1, "leader": 0, "replicas": [0], "earliest_offset": 0,
                                  "latest_offset": 3}
    assert invoke(["topic", "describe", "x"], TopicCluster())[0] == EXIT_NOT_FOUND


def test_topic_create_validates_before_asking() -> None:
    assert invoke(["topic", "create", "t", "--partitions", "0"])[0] == EXIT_USAGE
    assert invoke(["topic", "create", "t", "--partitions", "1", "--config", "oops"])[0] == EXIT_USAGE
