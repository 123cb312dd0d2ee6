"""The REST admin API over fake shards: routes, views, cgp_ lookups, errors and auth."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rafka.admin.rest import AdminApi
from rafka.admin.shards import Call, ShardClient, ShardError
from rafka.metrics_http import serve_metrics
from rafka.protocol.consumer_protocol import encode_assignment
from rafka.rail import Op

UID = "cgp_01ktb7wm5jvkbfgpzvfnk3kqqb"


class FakeShards(ShardClient):
    """Shards as dicts, routed exactly as the real client routes."""

    def __init__(self, shards: int = 3) -> None:
        super().__init__([f"inproc://fake-{k}" for k in range(shards)])
        self.groups: dict[tuple[str, str], dict[str, Any]] = {}
        self.offsets: dict[tuple[str, str], dict[str, dict[int, int]]] = {}
        self.leo: dict[tuple[str, str, int], int] = {}
        self.down: set[int] = set()
        self.seen: list[tuple[int, Op, Any]] = []

    def add_group(self, org: str, group_id: str, uid: str, state: str = "Stable",
                  members: list[dict[str, Any]] | None = None, protocol: str = "range") -> None:
        self.groups[(org, group_id)] = {
            "error_code": 0, "group_id": group_id, "group_state": state, "protocol_type": "consumer",
            "protocol_data": protocol if state == "Stable" else "", "members": members or [],
            "group_uid": uid, "rrl": f"{org}/consumer-groups/{group_id}"}

    def call(self, org_id: str, calls: list[Call], timeout: float | None = None) -> list[Call]:
        for c in calls:
            self.seen.append((c.shard, c.op, c.payload))
            if c.shard in self.down:
                c.error = ShardError(f"shard {c.shard} is loading")
                continue
            c.result = self._answer(org_id, c)
        return calls

    def _answer(self, org: str, c: Call) -> dict[str, Any]:
        p = c.payload
        if c.op == Op.LIST_GROUPS:
            states = {s.lower() for s in p["states_filter"]}
            return {"error_code": 0, "groups": [
                {"group_id": g, "group_state": d["group_state"]} for (o, g), d in self.groups.items()
                if o == org and self.shard_for_group(o, g) == c.shard and (not states or d["group_state"].lower()
                                                                           in states)]}
        if c.op == Op.DESCRIBE_GROUP:
            assert self.shard_for_group(org, p["group_id"]) == c.shard, "describe sent to the wrong shard"
            return self.groups.get((org, p["group_id"]), {"error_code": 0, "group_id": p["group_id"],
                                                          "group_state": "Dead", "members": [], "group_uid": None})
        if c.op == Op.OFFSET_FETCH:
            assert self.shard_for_group(org, p["group_id"]) == c.shard
            topics = self.offsets.get((org, p["group_id"]), {})
            return {"group_id": p["group_id"], "error_code": 0, "topics": [
                {"name": t, "partitions": [{"partition_index": i, "committed_offset": o, "metadata": "m"}
                                           for i, o in ps.items()]} for t, ps in topics.items()]}
        if c.op == Op.LIST_OFFSETS:
            out = []
            for q in p["partitions"]:
                assert self.shard_for_partition(org, q["topic"], q["partition"]) == c.shard
                out.append({"topic": q["topic"], "partition": q["partition"], "error_code": 0,
                            "offset": self.leo.get((org, q["topic"], q["partition"]), 0)})
            return {"partitions": out}
        raise AssertionError(c.op)


def member(mid: str, assignment: dict[str, list[int]]) -> dict[str, Any]:
    return {"member_id": mid, "group_instance_id": None, "client_id": f"client-{mid}", "client_host": "/10.0.0.1",
            "member_metadata": b"", "member_assignment": encode_assignment(assignment)}


@pytest.fixture
def shards() -> FakeShards:
    s = FakeShards()
    s.add_group("acme", "orders", UID, members=[member("m1", {"orders": [0, 1]}), member("m2", {"orders": [2]})])
    s.add_group("acme", "audit", "cgp_01ktb7wm5jvkbfgpzvfnk3kqqc", state="Empty")
    s.add_group("other", "orders", "cgp_01ktb7wm5jvkbfgpzvfnk3kqqd")
    s.offsets[("acme", "orders")] = {"orders": {0: 7, 2: 10}}
    s.leo.update({("acme", "orders", 0): 12, ("acme", "orders", 2): 10})
    return s


def get(api: AdminApi, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, Any]:
    resp = api.handle(method, path, headers or {})
    assert resp is not None
    return resp.status, json.loads(resp.encode())


def test_other_paths_are_not_the_apis(shards: FakeShards) -> None:
    api = AdminApi(shards)
    assert api.handle("GET", "/metrics", {}) is None
    assert api.handle("GET", "/v10/x", {}) is None
    for path in ("/v1", "/v1/orgs", "/v1/orgs/acme", "/v1/orgs/acme/topics", "/v1/orgs//consumer-groups",
                 "/v1/orgs/acme/consumer-groups/a/b"):
        assert get(api, path)[0] == 404, path
    status, body = get(api, "/v1/orgs/acme/consumer-groups", method="POST")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"


def test_list_shows_each_groups_uid_rrl_and_state(shards: FakeShards) -> None:
    status, body = get(AdminApi(shards), "/v1/orgs/acme/consumer-groups")
    assert status == 200
    assert body == {"org": "acme", "consumer_groups": [
        {"group_id": "audit", "group_uid": "cgp_01ktb7wm5jvkbfgpzvfnk3kqqc", "rrl": "acme/consumer-groups/audit",
         "state": "Empty", "protocol_type": "consumer", "protocol": None, "member_count": 0},
        {"group_id": "orders", "group_uid": UID, "rrl": "acme/consumer-groups/orders", "state": "Stable",
         "protocol_type": "consumer", "protocol": "range", "member_count": 2}]}


def test_list_filters_by_state(shards: FakeShards) -> None:
    api = AdminApi(shards)
    assert [g["group_id"] for g in get(api, "/v1/orgs/acme/consumer-groups?state=empty")[1]["consumer_groups"]] == [
        "audit"]
    both = get(api, "/v1/orgs/acme/consumer-groups?state=Empty,Stable")[1]["consumer_groups"]
    assert len(both) == 2


def test_describe_decodes_assignments_and_joins_lag(shards: FakeShards) -> None:
    status, body = get(AdminApi(shards), "/v1/orgs/acme/consumer-groups/orders")
    assert status == 200
    assert body["group_uid"] == UID and body["rrl"] == "acme/consumer-groups/orders"
    assert (body["state"], body["protocol_type"], body["protocol"]) == ("Stable", "consumer", "range")
    assert body["coordinator"]["shard"] == shards.shard_for_group("acme", "orders")
    assert body["members"] == [
        {"member_id": "m1", "group_instance_id": None, "client_id": "client-m1", "host": "/10.0.0.1",
         "assignment": {"orders": [0, 1]}},
        {"member_id": "m2", "group_instance_id": None, "client_id": "client-m2", "host": "/10.0.0.1",
         "assignment": {"orders": [2]}}]
    assert body["offsets"] == [
        {"topic": "orders", "partition": 0, "committed_offset": 7, "metadata": "m", "log_end_offset": 12, "lag": 5},
        {"topic": "orders", "partition": 2, "committed_offset": 10, "metadata": "m", "log_end_offset": 10, "lag": 0}]
    assert body["total_lag"] == 5


def test_describe_by_cgp_id_and_by_escaped_id(shards: FakeShards) -> None:
    api = AdminApi(shards)
    assert get(api, f"/v1/orgs/acme/consumer-groups/{UID}")[1]["group_id"] == "orders"
    shards.add_group("acme", "a/b c", "cgp_01ktb7wm5jvkbfgpzvfnk3kqqe")
    assert get(api, "/v1/orgs/acme/consumer-groups/a%2Fb%20c")[1]["group_id"] == "a/b c"


def test_a_group_of_another_org_is_not_found(shards: FakeShards) -> None:
    api = AdminApi(shards)
    assert get(api, "/v1/orgs/acme/consumer-groups/cgp_01ktb7wm5jvkbfgpzvfnk3kqqd")[0] == 404
    status, body = get(api, "/v1/orgs/acme/consumer-groups/nope")
    assert status == 404 and body == {"error": {"code": "not_found",
                                                "message": "consumer group nope not found in organisation acme"}}
    assert get(api, "/v1/orgs/other/consumer-groups/orders")[1]["group_uid"] == "cgp_01ktb7wm5jvkbfgpzvfnk3kqqd"


def test_a_loading_shard_answers_503(shards: FakeShards) -> None:
    shards.down.add(shards.shard_for_group("acme", "orders"))
    resp = AdminApi(shards).handle("GET", "/v1/orgs/acme/consumer-groups/orders", {})
    assert resp is not None and resp.status == 503 and resp.headers["Retry-After"] == "1"


def test_missing_log_end_offsets_leave_lag_null(shards: FakeShards) -> None:
    shards.down.add(shards.shard_for_partition("acme", "orders", 0))
    if shards.shard_for_group("acme", "orders") in shards.down:
        pytest.skip("the log and the group share a shard with this routing")
    body = get(AdminApi(shards), "/v1/orgs/acme/consumer-groups/orders")[1]
    row = next(o for o in body["offsets"] if o["partition"] == 0)
    assert row["log_end_offset"] is None and row["lag"] is None


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_auth_requires_a_user_of_that_org(shards: FakeShards, tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    users.write_text('[[users]]\nname = "alice"\npassword = "pw"\norg = "acme"\n'
                     '[[users]]\nname = "olga"\npassword = "pw2"\norg = "other"\n')
    api = AdminApi(shards, str(users))
    resp = api.handle("GET", "/v1/orgs/acme/consumer-groups", {})
    assert resp is not None and resp.status == 401 and resp.headers["WWW-Authenticate"].startswith("Basic")
    assert get(api, "/v1/orgs/acme/consumer-groups", basic("alice", "bad"))[0] == 401
    assert get(api, "/v1/orgs/acme/consumer-groups", basic("alice", "pw"))[0] == 200
    assert get(api, "/v1/orgs/acme/consumer-groups/orders", basic("alice", "pw"))[0] == 200
    status, body = get(api, "/v1/orgs/acme/consumer-groups/orders", basic("olga", "pw2"))
    assert status == 403 and body["error"]["code"] == "forbidden"
    assert get(api, "/v1/orgs/other/consumer-groups/orders", basic("olga", "pw2"))[0] == 200


def test_served_beside_metrics_and_health(shards: FakeShards) -> None:
    server = serve_metrics(0, admin=AdminApi(shards))
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(base + "/v1/orgs/acme/consumer-groups/orders") as resp:
            assert resp.headers["Content-Type"] == "application/json"
            assert json.load(resp)["group_uid"] == UID
        with urllib.request.urlopen(base + "/healthz") as resp:
            assert resp.read() == b"ok\n"
        with urllib.request.urlopen(base + "/metrics") as resp:
            assert resp.status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(base + "/v1/orgs/acme/consumer-groups", method="DELETE"))
        assert err.value.code == 405
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/nope")
        assert err.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
