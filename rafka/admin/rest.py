"""The REST admin API: an organisation's consumer groups, as its shards see them.

Routes (JSON, GET only; see ``docs/openapi.yaml``):

* ``/v1/orgs/{org}/consumer-groups[?state=S]`` — every group of ``org``.
* ``/v1/orgs/{org}/consumer-groups/{group}`` — one group by its group id or its
  ``cgp_`` id: state, protocol, members with decoded assignments, committed
  offsets with log end offsets and lag, ``group_uid`` and ``rrl``.

How this works: ``AdminApi.handle`` runs in a thread of the metrics HTTP server
(the supervisor's, or a standalone gateway's). It asks the shards directly with
a blocking ``ShardClient``, routed exactly as a gateway routes: the group's
DESCRIBE_GROUP and OFFSET_FETCH go to its coordinator shard in one batch, then
one LIST_OFFSETS per shard that owns a committed partition's log. The shards'
describe answer carries ``group_uid`` and ``rrl``, which DescribeGroups over the
Kafka protocol cannot. A ``cgp_`` id is found by listing and describing every
group of the org (an admin API can afford that). When ``auth_users`` is set every
request needs HTTP Basic credentials of a user in that file, and may only name
that user's organisation (else 401 / 403).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

from rafka.admin.shards import Call, ShardClient, ShardError
from rafka.admin.users import UsersFile, basic_credentials
from rafka.protocol.consumer_protocol import decode_assignment
from rafka.rail import Op

log = logging.getLogger("rafka.admin")

GROUP_UID_RE = re.compile(r"cgp_[0-9a-z]{26}")
DEAD = "Dead"
DESCRIBE_VERSION = 5  # < 6: an unknown group answers Dead rather than an error


@dataclass
class Response:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return (json.dumps(self.body, indent=2, sort_keys=False) + "\n").encode("utf-8")


class ApiError(Exception):
    """An HTTP error answer: ``status`` with ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}

    def response(self) -> Response:
        return Response(self.status, {"error": {"code": self.code, "message": str(self)}}, self.headers)


class AdminApi:
    """Answers ``/v1/...`` requests; ``handle`` returns None for any other path."""

    def __init__(self, client: ShardClient, users_path: str | None = None) -> None:
        self.client = client
        self.users = UsersFile(users_path) if users_path else None

    @classmethod
    def from_config(cls, cfg: Any) -> AdminApi:
        """An API over the shards of a ``rafka.config.Config``."""
        return cls(ShardClient(cfg.endpoints(), cfg.coordinator_partitions), cfg.auth_users)

    # -- HTTP ---------------------------------------------------------------
    def handle(self, method: str, target: str, headers: Mapping[str, str]) -> Response | None:
        """The answer to ``method target`` (None if ``target`` is not an admin path)."""
        raw_path, _, query = target.partition("?")
        if raw_path != "/v1" and not raw_path.startswith("/v1/"):
            return None
        try:
            return self._route(method, raw_path, parse_qs(query), headers)
        except ApiError as err:
            return err.response()
        except ShardError as exc:
            return ApiError(503, "unavailable", str(exc), {"Retry-After": "1"}).response()
        except Exception as exc:  # a bug: answer, log, keep serving
            log.exception("admin API request %s %s failed", method, target)
            return ApiError(500, "internal", f"{type(exc).__name__}: {exc}").response()

    def _route(self, method: str, raw_path: str, query: dict[str, list[str]], headers: Mapping[str, str]) -> Response:
        parts = [unquote(p) for p in raw_path.rstrip("/").split("/")[1:]]
        if len(parts) not in (4, 5) or parts[:2] != ["v1", "orgs"] or parts[3] != "consumer-groups" or not parts[2]:
            raise ApiError(404, "not_found", f"no such resource: {raw_path}")
        if method != "GET":
            raise ApiError(405, "method_not_allowed", f"{method} is not allowed here", {"Allow": "GET"})
        org = parts[2]
        self._authorize(org, headers)
        if len(parts) == 4:
            states = [s for v in query.get("state", []) for s in v.split(",") if s]
            return Response(200, self.list_groups(org, states))
        if not parts[4]:
            raise ApiError(404, "not_found", "empty group id")
        return Response(200, self.describe_group(org, parts[4]))

    def _authorize(self, org: str, headers: Mapping[str, str]) -> None:
        if self.users is None:
            return
        challenge = {"WWW-Authenticate": 'Basic realm="rafka", charset="UTF-8"'}
        creds = basic_credentials(headers.get("Authorization"))
        if creds is None:
            raise ApiError(401, "unauthorized", "HTTP Basic credentials required", challenge)
        try:
            user = self.users.authenticate(*creds)
        except (OSError, ValueError, KeyError) as exc:
            log.error("cannot read the users file %s: %s", self.users.path, exc)
            raise ApiError(503, "unavailable", "users file unavailable") from exc
        if user is None:
            raise ApiError(401, "unauthorized", "bad user name or password", challenge)
        if user.org != org:
            raise ApiError(403, "forbidden", f"user {user.name} may not read organisation {org}")

    # -- views --------------------------------------------------------------
    def list_groups(self, org: str, states: list[str] | None = None) -> dict[str, Any]:
        """``{"org", "consumer_groups": [summary...]}`` for every group of ``org``."""
        described = self._describe_all(org, states or [])
        summaries = [summary(d, shard) for shard, d in described]
        summaries.sort(key=lambda s: s["group_id"])
        return {"org": org, "consumer_groups": summaries}

    def describe_group(self, org: str, key: str) -> dict[str, Any]:
        """One group of ``org`` by group id or ``cgp_`` id (ApiError 404 if there is none)."""
        group_id = key
        if GROUP_UID_RE.fullmatch(key):
            found = self.find_by_uid(org, key)
            if found is not None:
                group_id = found
        c = self.client
        shard = c.shard_for_group(org, group_id)
        desc, fetched = c.call(org, [
            Call(shard, Op.DESCRIBE_GROUP, {"group_id": group_id, "api_version": DESCRIBE_VERSION}),
            Call(shard, Op.OFFSET_FETCH, {"group_id": group_id, "topics": None, "require_stable": False,
                                          "member_id": None, "member_epoch": -1, "api_version": 8}),
        ])
        d = desc.value()
        if d.get("error_code") or d.get("group_state") in (DEAD, "", None):
            raise ApiError(404, "not_found", f"consumer group {key} not found in organisation {org}")
        offsets = self._offsets(org, fetched.value())
        view = summary(d, shard)
        view.pop("member_count")
        view["coordinator"] = {"shard": shard, "partition": c.coordinator_partition(org, group_id)}
        view["members"] = [member_view(m, d.get("protocol_type") or "") for m in d.get("members", [])]
        view["offsets"] = offsets
        view["total_lag"] = sum(o["lag"] or 0 for o in offsets)
        return {"org": org, **view}

    def find_by_uid(self, org: str, uid: str) -> str | None:
        """The group id whose ``group_uid`` is ``uid``, or None."""
        for _shard, d in self._describe_all(org, []):
            if d.get("group_uid") == uid:
                return str(d["group_id"])
        return None

    # -- helpers ------------------------------------------------------------
    def _describe_all(self, org: str, states: list[str]) -> list[tuple[int, dict[str, Any]]]:
        c = self.client
        payload = {"states_filter": states, "types_filter": [], "api_version": 5}
        listed = c.call(org, [Call(s, Op.LIST_GROUPS, payload) for s in range(c.shard_count)])
        calls = [Call(lc.shard, Op.DESCRIBE_GROUP, {"group_id": g["group_id"], "api_version": DESCRIBE_VERSION})
                 for lc in listed for g in lc.value().get("groups", [])]
        out = []
        for call in c.call(org, calls) if calls else []:
            d = call.value()
            if d.get("group_state") != DEAD:  # deleted between the list and the describe
                out.append((call.shard, d))
        return out

    def _offsets(self, org: str, fetched: dict[str, Any]) -> list[dict[str, Any]]:
        committed = [(t["name"], p["partition_index"], p) for t in fetched.get("topics", [])
                     for p in t.get("partitions", []) if p.get("committed_offset", -1) >= 0]
        c = self.client
        by_shard: dict[int, list[dict[str, Any]]] = {}
        for topic, partition, _p in committed:
            by_shard.setdefault(c.shard_for_partition(org, topic, partition), []).append(
                {"topic": topic, "partition": partition, "timestamp": -1})
        leo: dict[tuple[str, int], int] = {}
        if by_shard:
            calls = c.call(org, [Call(s, Op.LIST_OFFSETS, {"isolation_level": 0, "partitions": ps})
                                 for s, ps in by_shard.items()])
            for call in calls:
                if call.error is not None:
                    log.warning("admin API: log end offsets unavailable: %s", call.error)
                    continue
                for r in call.result.get("partitions", []):
                    if not r.get("error_code") and r.get("offset", -1) >= 0:
                        leo[(r["topic"], r["partition"])] = r["offset"]
        out = []
        for topic, partition, p in sorted(committed, key=lambda x: (x[0], x[1])):
            end = leo.get((topic, partition))
            offset = p["committed_offset"]
            out.append({"topic": topic, "partition": partition, "committed_offset": offset,
                        "metadata": p.get("metadata") or "", "log_end_offset": end,
                        "lag": None if end is None else max(0, end - offset)})
        return out


def summary(d: dict[str, Any], shard: int) -> dict[str, Any]:
    """A group's list entry from a shard's describe answer."""
    return {"group_id": d["group_id"], "group_uid": d.get("group_uid"), "rrl": d.get("rrl"),
            "state": d.get("group_state"), "protocol_type": d.get("protocol_type") or "",
            "protocol": d.get("protocol_data") or None, "member_count": len(d.get("members", []))}


def member_view(m: dict[str, Any], protocol_type: str) -> dict[str, Any]:
    """A member with its assignment decoded (None when it is not a consumer-protocol one)."""
    assignment: dict[str, list[int]] | None = None
    if protocol_type == "consumer":
        try:
            assignment = decode_assignment(m.get("member_assignment"))
        except ValueError:
            assignment = None
    return {"member_id": m.get("member_id"), "group_instance_id": m.get("group_instance_id"),
            "client_id": m.get("client_id"), "host": m.get("client_host"), "assignment": assignment}
