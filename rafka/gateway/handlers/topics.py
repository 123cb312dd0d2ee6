"""Metadata and topic administration: the catalogue lives on one shard per organisation.

Version notes:
- Metadata 0–12: v0 an empty topic list means all topics, v1+ null means all;
  v4+ ``allow_auto_topic_creation``; v10+ topic ids. The gateway is the only broker,
  the controller and every partition's leader.
- Config requests (AlterConfigs, DescribeConfigs) are in ``rafka.gateway.handlers.configs``.
- DescribeLogDirs 1–4: each shard's WAL directory is a log dir.
The catalogue of an organisation is owned by the shard of ``stable_hash(org_id,
"\\0topics")``, so every gateway sees the same topics.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from typing import Any

from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers import acl
from rafka.gateway.handlers.errors import Err, shard_down_error
from rafka.gateway.handlers.kafka import broker
from rafka.gateway.router import ShardUnavailable
from rafka.ids import INTERNAL_TOPICS
from rafka.logs import Throttled
from rafka.protocol.records import LEADER_EPOCH
from rafka.rail import Op

log = logging.getLogger("rafka.gateway")
_LINES = Throttled(log)


def group_call(ctx: RequestContext, op: Op, group_id: str, payload: dict[str, Any]) -> asyncio.Future[Any]:
    """Call the shard that coordinates ``group_id`` (the router's future itself: no extra
    coroutine on the OffsetCommit path)."""
    router = ctx.gateway.router
    return router.call(router.shard_for_group(ctx.org_id, group_id), op, ctx.org_id, payload, ctx.trace)


def catalog_call(ctx: RequestContext, op: Op, payload: dict[str, Any]) -> asyncio.Future[Any]:
    """Call the shard that owns this organisation's topic catalogue."""
    router = ctx.gateway.router
    return router.call(router.shard_for_catalog(ctx.org_id), op, ctx.org_id, payload, ctx.trace)


def _topic_entry(ctx: RequestContext, t: dict[str, Any], operations: int = acl.OMITTED) -> dict[str, Any]:
    node = ctx.gateway.node_id
    topic_id = t.get("topic_id")
    router = ctx.gateway.router
    name = t["name"]
    return {
        "error_code": t.get("error_code", 0),
        "name": name,
        "topic_id": uuid.UUID(topic_id) if topic_id else uuid.UUID(int=0),
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": [_partition_entry(p, node, router.is_alive(router.shard_for_partition(ctx.org_id, name, p)))
                       for p in range(t.get("partitions", 0))],
        "topic_authorized_operations": operations,  # Kafka sets it on topics answered with an error too
    }


def _partition_entry(p: int, node: int, up: bool) -> dict[str, Any]:
    """A partition led by this broker; one whose shard is down is offline, as Kafka answers for a
    partition with no live leader: LEADER_NOT_AVAILABLE, leader -1. A client then waits for
    the leader with its metadata back-off, where "leader 0" had it fetch, fail and ask again
    in a loop (librdkafka's leader query, ~2,000 a second)."""
    if up:
        return {"error_code": 0, "partition_index": p, "leader_id": node, "leader_epoch": LEADER_EPOCH,
                "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
    return {"error_code": Err.LEADER_NOT_AVAILABLE, "partition_index": p, "leader_id": -1,
            "leader_epoch": LEADER_EPOCH, "replica_nodes": [node], "isr_nodes": [], "offline_replicas": [node]}


@api(3, 0, 12, "kafka.metadata")
async def metadata(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    requested = req.get("topics")
    names: list[str] | None
    by_id: list[uuid.UUID] = []
    if requested and ctx.api_version < 12 and any(t.get("name") is None or _nonzero(t.get("topic_id"))
                                                  for t in requested):
        return _invalid_metadata_request(requested)  # Kafka: "Topic IDs are not supported" before v12
    if requested is None or (ctx.api_version == 0 and not requested):
        names = None
    else:
        # v12: topics may be asked for by id (KIP-848 consumers resolve assigned topic ids so);
        # as in Kafka, a request naming any id is answered for its ids alone
        by_id = [t["topic_id"] for t in requested if _nonzero(t.get("topic_id"))]
        # a name asked for twice is answered once; "" is an invalid name (INVALID_TOPIC_EXCEPTION)
        names = [] if by_id else list(dict.fromkeys(t["name"] for t in requested if t.get("name") is not None))
    auto_create = bool(req.get("allow_auto_topic_creation", True)) and ctx.gateway.config.auto_create_topics
    payload = {"names": names, "auto_create": auto_create and names is not None,
               "default_partitions": ctx.gateway.config.default_partitions}
    operations = acl.authorized(req.get("include_topic_authorized_operations"), acl.TOPIC)
    try:
        topics = []
        if names is None or names:
            try:
                resp = await catalog_call(ctx, Op.LIST_TOPICS, payload)
            except ShardUnavailable:
                known = topic_cache(ctx).last_known(ctx.org_id, names)
                if known is None:
                    raise
                # a client that re-asks at once (librdkafka's leader query) would repeat it thousands of times a second
                _LINES.warning("metadata answers from the cache",
                               "metadata: topic catalogue unavailable, answering from the gateway's cache")
                resp = {"topics": known}
            else:
                if names is None:
                    topic_cache(ctx).listed(ctx.org_id, resp["topics"])
            topics = [_topic_entry(ctx, t, operations) for t in resp["topics"]]
        found_by_id = await topic_cache(ctx).by_ids(ctx, [str(i) for i in by_id]) if by_id else {}
        for topic_id in by_id:
            found = found_by_id[str(topic_id)]
            if found is None:
                topics.append({"error_code": Err.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id,
                               "partitions": [], "is_internal": False,
                               "topic_authorized_operations": acl.OMITTED})
            else:
                topics.append(_topic_entry(ctx, found, operations))
    except Exception as exc:
        log.warning("metadata: topic catalogue unavailable: %r", exc)
        code = shard_down_error(exc)
        topics = [{"error_code": code, "name": n, "topic_id": uuid.UUID(int=0), "partitions": []}
                  for n in (names or [])]
    return {"throttle_time": 0, "brokers": [broker(ctx)], "cluster_id": ctx.gateway.cluster_id,
            "controller_id": ctx.gateway.node_id, "topics": topics,
            "cluster_authorized_operations": acl.authorized(req.get("include_cluster_authorized_operations"),
                                                            acl.CLUSTER)}


def _nonzero(topic_id: uuid.UUID | None) -> bool:
    return topic_id is not None and topic_id.int != 0


def _invalid_metadata_request(requested: list[dict[str, Any]]) -> dict[str, Any]:
    """Kafka's answer to a Metadata it refuses whole (MetadataRequest.getErrorResponse): every
    topic asked for, with INVALID_REQUEST, and no brokers."""
    return {"throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": -1,
            "topics": [{"error_code": Err.INVALID_REQUEST, "name": t.get("name") or "",
                        "topic_id": t.get("topic_id") or uuid.UUID(int=0), "is_internal": False, "partitions": [],
                        "topic_authorized_operations": acl.OMITTED} for t in requested],
            "cluster_authorized_operations": acl.OMITTED}


class TopicCache:
    """A gateway's short-lived copy of topic metadata (the catalogue shard is the truth).

    Entries live ``ttl`` seconds, so a topic created or deleted through any gateway
    is seen by every other within that time; a miss asks the catalogue at once.
    Expired entries are dropped whenever the cache has doubled since the last purge,
    so topics deleted (or created again under new ids) do not pile up.

    While the catalogue's shard is down, the last known entries are served instead, as a
    Kafka broker keeps serving its metadata cache: producers and consumers of partitions
    on the other shards carry on, and a listing of every topic (``listing``) does not come
    back empty, which would make pattern subscribers drop their partitions. A partition
    refuses an op from a stale entry of a deleted topic (its incarnation) once it has heard of
    the deletion; one that may have missed it, because its shard came up after the catalogue
    last confirmed the entry, is not sent ops from that entry (``confirmed_at``, checked in
    the data plane against the router's ``up_since``).
    """

    def __init__(self, ttl: float = 1.0) -> None:
        self.ttl = ttl
        self._by_name: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._by_id: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._unknown_ids: dict[tuple[str, str], float] = {}  # ids a fresh listing lacked, until when
        # org -> {name: (when the catalogue last confirmed it, topic)}: its last full listing, kept current
        self._listings: dict[str, dict[str, tuple[float, dict[str, Any]]]] = {}
        self._purge_at = 1024

    def invalidate(self, org_id: str, names: set[str] | None = None) -> None:
        """Forget the org's entries (only those of ``names`` when given)."""
        for cache in (self._by_name, self._by_id):
            for key in [k for k, (_, t) in cache.items() if k[0] == org_id and (names is None or t["name"] in names)]:
                del cache[key]

    def _cached(self, cache: dict[tuple[str, str], tuple[float, dict[str, Any]]], org_id: str, keys: list[str],
                now: float) -> tuple[dict[str, dict[str, Any] | None], list[str]]:
        """The fresh entries of ``keys`` in ``cache`` (``_by_name`` or ``_by_id``), and the keys
        that have none."""
        out: dict[str, dict[str, Any] | None] = {}
        missing = []
        for k in dict.fromkeys(keys):
            hit = cache.get((org_id, k))
            if hit and hit[0] > now:
                out[k] = hit[1]
            else:
                missing.append(k)
        return out, missing

    def fresh(self, org_id: str, names: list[str]) -> dict[str, dict[str, Any] | None] | None:
        """``lookup``'s answer when every name has a fresh entry (no coroutine), else None."""
        out, missing = self._cached(self._by_name, org_id, names, time.monotonic())
        return None if missing else out

    async def lookup(self, ctx: RequestContext, names: list[str], auto_create: bool) -> dict[str, dict[str, Any] | None]:
        """Topic info by name (None for a topic that does not exist)."""
        now = time.monotonic()
        out, missing = self._cached(self._by_name, ctx.org_id, names, now)
        if missing:
            payload = {"names": missing, "auto_create": auto_create, "default_partitions": ctx.gateway.config.default_partitions}
            try:
                resp = await ctx.before_op(catalog_call(ctx, Op.LIST_TOPICS, payload))
            except ShardUnavailable:
                stale = self.last_known(ctx.org_id, missing)
                if stale is None:
                    raise
                return {**out, **{t["name"]: t for t in stale}}
            for t in resp["topics"]:
                self._store(ctx.org_id, t, now)
                out[t["name"]] = t if not t.get("error_code") else None
        return out

    def listed(self, org_id: str, topics: list[dict[str, Any]]) -> None:
        """Remember a full listing of the organisation's topics (Metadata for every topic); the
        topics the last one had and this one lacks were deleted, by whichever gateway."""
        now = time.monotonic()
        previous = self._listings.get(org_id, {})
        listing = self._listings[org_id] = {}
        for t in topics:
            self._store(org_id, t, now)  # fills ``listing``
        for name in previous.keys() - listing.keys():
            hit = self._by_name.pop((org_id, name), None)
            if hit is not None and hit[1].get("topic_id"):
                self._by_id.pop((org_id, hit[1]["topic_id"]), None)

    def last_known(self, org_id: str, names: list[str] | None) -> list[dict[str, Any]] | None:
        """The last known entries of ``names`` (None: the last full listing), for when the
        catalogue cannot answer, each with ``confirmed_at``; None if one of them, or the
        listing, is unknown."""
        listing = self._listings.get(org_id)
        if names is None:
            return None if listing is None else [{**t, "confirmed_at": at} for at, t in listing.values()]
        known = []
        for n in names:
            hit = self._by_name.get((org_id, n))
            entry = (hit[0] - self.ttl, hit[1]) if hit is not None else (listing or {}).get(n)
            if entry is None:
                return None
            known.append({**entry[1], "confirmed_at": entry[0]})
        return known

    async def by_ids(self, ctx: RequestContext, topic_ids: list[str]) -> dict[str, dict[str, Any] | None]:
        """Topic info by id (None: no such topic). The ids without a fresh entry cost one listing
        of the organisation's topics together, and an id that listing lacks is remembered as
        unknown for ``ttl``: a client naming a deleted topic's ids in every request does not
        make a listing each time. While the catalogue cannot answer, the last known entries
        and listing answer (ShardUnavailable if the organisation was never listed)."""
        org, now = ctx.org_id, time.monotonic()
        out, uncached = self._cached(self._by_id, org, topic_ids, now)
        missing = []
        for topic_id in uncached:
            if self._unknown_ids.get((org, topic_id), 0.0) > now:
                out[topic_id] = None
            else:
                missing.append(topic_id)
        if not missing:
            return out
        try:
            resp = await ctx.before_op(catalog_call(ctx, Op.LIST_TOPICS, {"names": None, "auto_create": False}))
        except ShardUnavailable:
            listing = self._listings.get(org)
            for topic_id in missing:
                hit = self._by_id.get((org, topic_id))
                if hit is not None:
                    out[topic_id] = {**hit[1], "confirmed_at": hit[0] - self.ttl}
                elif listing is None:
                    raise
                else:
                    out[topic_id] = next(({**t, "confirmed_at": at} for at, t in listing.values()
                                          if t.get("topic_id") == topic_id), None)
            return out
        self.listed(org, resp["topics"])
        self._purge(now)
        for topic_id in missing:
            hit = self._by_id.get((org, topic_id))
            out[topic_id] = hit[1] if hit else None
            if hit is None:
                self._unknown_ids[(org, topic_id)] = now + self.ttl
        return out

    def _purge(self, now: float) -> None:
        """Drop the expired entries (known topics and unknown ids) once the cache has doubled
        since the last purge."""
        if len(self._by_name) + len(self._by_id) + len(self._unknown_ids) < self._purge_at:
            return
        for cache in (self._by_name, self._by_id):
            for key in [k for k, (expires, _) in cache.items() if expires < now]:  # ttl 0: keep this answer
                del cache[key]
        self._unknown_ids = {k: until for k, until in self._unknown_ids.items() if until >= now}
        self._purge_at = max(1024, 2 * (len(self._by_name) + len(self._by_id) + len(self._unknown_ids)))

    def _store(self, org_id: str, t: dict[str, Any], now: float) -> None:
        self._purge(now)
        listing = self._listings.get(org_id)
        if t.get("error_code"):
            self._by_name.pop((org_id, t["name"]), None)
            if listing is not None:
                listing.pop(t["name"], None)
            return
        if listing is not None:
            listing[t["name"]] = (now, t)
        entry = (now + self.ttl, t)
        self._by_name[(org_id, t["name"])] = entry
        if t.get("topic_id"):
            self._by_id[(org_id, t["topic_id"])] = entry


async def known_partitions(ctx: RequestContext, topics: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split an (Txn)OffsetCommit's or OffsetDelete's ``topics`` into the partitions that exist and, in response
    form, UNKNOWN_TOPIC_OR_PARTITION for the rest, as Kafka checks commits against its metadata.
    While the catalogue cannot answer, every partition goes ahead unchecked."""
    try:
        infos = await topic_cache(ctx).lookup(ctx, [t["name"] for t in topics], False)
    except Exception:
        return topics, []
    return _split(topics, infos)


def known_now(ctx: RequestContext, topics: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """``known_partitions``' answer when the cache holds every topic fresh (no coroutine), else None."""
    infos = topic_cache(ctx).fresh(ctx.org_id, [t["name"] for t in topics])
    return None if infos is None else _split(topics, infos)


def _split(topics: list[dict[str, Any]], infos: dict[str, dict[str, Any] | None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    known: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    for t in topics:
        info = infos.get(t["name"])
        count = info["partitions"] if info is not None else 0
        if all(0 <= p["partition_index"] < count for p in t["partitions"]):
            known.append(t)
            continue
        exists = [0 <= p["partition_index"] < count for p in t["partitions"]]
        if any(exists):
            known.append({**t, "partitions": [p for p, ok in zip(t["partitions"], exists) if ok]})
        unknown.append({"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": Err.UNKNOWN_TOPIC_OR_PARTITION}
            for p, ok in zip(t["partitions"], exists) if not ok]})
    return known, unknown


def with_refused(refused: list[dict[str, Any]], answered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A commit response's topics with ``known_partitions``' refusals folded in: one entry
    per topic, as Kafka's response builder merges them."""
    if not refused:
        return answered
    by_name = {t["name"]: t for t in answered}
    out = list(answered)
    for t in refused:
        entry = by_name.get(t["name"])
        if entry is None:
            out.append(t)
        else:
            entry["partitions"] = t["partitions"] + entry["partitions"]
    return out


def topic_cache(ctx: RequestContext) -> TopicCache:
    gw = ctx.gateway
    cache = getattr(gw, "topic_cache", None)
    if cache is None:
        cache = gw.topic_cache = TopicCache(gw.config.topic_metadata_ttl_ms / 1000)
    return cache


def _assignment_refusal(t: dict[str, Any], node_id: int) -> tuple[int, str] | None:
    """Why Kafka's controller refuses topic ``t``'s manual partition assignment, or None. A valid
    one sets the partition count; this gateway is the only broker a replica can name."""
    assignments = t.get("assignments") or []
    if not assignments:
        return None
    if t["replication_factor"] != -1:
        return Err.INVALID_REQUEST, "A manual partition assignment was specified, but replication factor was not set to -1."
    if t["num_partitions"] != -1:
        return Err.INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions was not set to -1."
    seen: set[int] = set()
    for a in assignments:
        index, brokers = a["partition_index"], list(a.get("broker_ids") or [])
        if index in seen:
            return Err.INVALID_REPLICA_ASSIGNMENT, f"Found multiple manual partition assignments for partition {index}"
        seen.add(index)
        if not brokers:
            return Err.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
        for b in brokers:
            if b != node_id:
                return Err.INVALID_REPLICA_ASSIGNMENT, (f"The manual partition assignment includes broker {b}, "
                                                        "but no such broker is registered.")
        if len(brokers) > 1:
            return Err.INVALID_REPLICA_ASSIGNMENT, (f"The manual partition assignment includes the broker {node_id} "
                                                    "more than once.")
    if seen != set(range(len(seen))):
        return Err.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"
    return None


def _creation_refusal(topic: dict[str, Any], copies: int, node_id: int) -> tuple[int, str] | None:
    """Why Kafka's controller refuses to create ``topic`` before looking at it, if it does."""
    if copies > 1:
        return Err.INVALID_REQUEST, "Duplicate topic name."
    if topic["name"] == "__cluster_metadata":
        return Err.INVALID_REQUEST, "Creation of internal topic __cluster_metadata is prohibited."
    return _assignment_refusal(topic, node_id)


@api(19, 2, 7, "kafka.create-topics")
async def create_topics(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    counts = collections.Counter(t["name"] for t in req["topics"])
    refused = {t["name"]: why for t in req["topics"]
               if (why := _creation_refusal(t, counts[t["name"]], ctx.gateway.node_id)) is not None}
    wanted = [t for t in req["topics"] if t["name"] not in refused]
    payload = {"topics": [{"name": t["name"],
                           "num_partitions": len(t["assignments"]) if t.get("assignments") else t["num_partitions"],
                           "replication_factor": t["replication_factor"],
                           "configs": {c["name"]: c["value"] for c in t.get("configs") or []}}
                          for t in wanted],
               "validate_only": req.get("validate_only", False)}
    try:
        resp = await catalog_call(ctx, Op.CREATE_TOPIC, payload) if wanted else {"topics": []}
    except Exception as exc:
        code = shard_down_error(exc, Err.REQUEST_TIMED_OUT)
        return {"topics": [{"name": t["name"], "error_code": code, "error_message": str(exc)} for t in req["topics"]]}
    answers = {t["name"]: t for t in resp["topics"]}
    resp["topics"] = [answers.get(name) or {"name": name, "error_code": refused[name][0], "error_message": refused[name][1]}
                      for name in counts]  # a duplicated name is answered once, as Kafka's controller does
    topic_cache(ctx).invalidate(ctx.org_id)
    for t in resp["topics"]:
        t["topic_id"] = uuid.UUID(t["topic_id"]) if t.get("topic_id") else uuid.UUID(int=0)
        t.setdefault("topic_config_error_code", 0)
        if t.get("error_code"):
            t["num_partitions"], t["replication_factor"], t["configs"] = -1, -1, None
        else:
            t["configs"] = [{"name": c["name"], "value": c.get("value"), "read_only": c.get("read_only", False),
                             "config_source": c.get("config_source", 5), "is_sensitive": False}
                            for c in t.get("configs") or []]
    return {"throttle_time": 0, "topics": resp["topics"]}


async def to_log_shards(ctx: RequestContext, op: Op, calls: list[tuple[int, dict[str, Any]]]) -> None:
    """Send ``op`` to the shards holding a topic's logs; a shard that does not answer is left to
    the reconciler, which brings its logs in line with the catalogue once it is back."""
    router = ctx.gateway.router
    results = await asyncio.gather(*(router.call(s, op, ctx.org_id, payload, ctx.trace) for s, payload in calls),
                                   return_exceptions=True)
    for (s, _payload), res in zip(calls, results):
        if isinstance(res, BaseException):
            ctx.gateway.reconciler.mark(s)


def partitions_by_shard(ctx: RequestContext, topic: str, count: int) -> dict[int, list[int]]:
    """Partitions ``0..count-1`` of ``topic`` grouped by the shard that owns their logs."""
    by_shard: dict[int, list[int]] = {}
    for p in range(count):
        by_shard.setdefault(ctx.gateway.router.shard_for_partition(ctx.org_id, topic, p), []).append(p)
    return by_shard


@api(20, 1, 6, "kafka.delete-topics")
async def delete_topics(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    if ctx.api_version < 6:
        wanted = [{"name": n, "topic_id": None} for n in req.get("topic_names", [])]
    else:
        wanted = [{"name": t.get("name"), "topic_id": str(t["topic_id"]) if t.get("topic_id") and t["topic_id"].int else None}
                  for t in req.get("topics", [])]
    try:
        resp = await catalog_call(ctx, Op.DELETE_TOPIC, {"topics": wanted})
    except Exception as exc:
        code = shard_down_error(exc, Err.REQUEST_TIMED_OUT)
        return {"responses": [{"name": t["name"], "error_code": code} for t in wanted]}
    topic_cache(ctx).invalidate(ctx.org_id)
    router = ctx.gateway.router
    deleted = [t["name"] for t in resp["topics"] if t.get("error_code") == 0]
    offsets = [router.call(s, Op.DELETE_TOPIC_OFFSETS, ctx.org_id, {"topics": deleted}, ctx.trace)
               for s in range(router.shard_count)] if deleted else []  # every group's, as Kafka does
    drops: list[tuple[int, dict[str, Any]]] = []
    for t in resp["topics"]:
        incarnation = t.pop("incarnation", 0)
        if t.get("error_code") == 0:
            drops += [(s, {"topic": t["name"], "partitions": ps, "topic_id": t.get("topic_id"),
                           "incarnation": incarnation})
                      for s, ps in partitions_by_shard(ctx, t["name"], t.get("num_partitions", 0)).items()]
        t["topic_id"] = uuid.UUID(t["topic_id"]) if t.get("topic_id") else uuid.UUID(int=0)
    await to_log_shards(ctx, Op.DELETE_PARTITIONS, drops)
    for s, res in enumerate(await asyncio.gather(*offsets, return_exceptions=True)):
        if isinstance(res, BaseException):
            log.warning("shard %d did not drop the committed offsets of deleted topics %s: %s", s, deleted, res)
    return {"throttle_time": 0, "responses": resp["topics"]}


def _new_partition_refusal(assignments: list[dict[str, Any]], node_id: int) -> list[Any] | None:
    """Why Kafka's controller refuses the contents of CreatePartitions' manual assignments
    (validateManualPartitionAssignment, replication factor 1), or None."""
    for a in assignments:
        brokers = sorted(a.get("broker_ids") or [])
        if not brokers:
            return [Err.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."]
        previous = None
        for b in brokers:
            if b != node_id:
                return [Err.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes broker {b}, but no such broker is registered."]
            if b == previous:
                return [Err.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes the broker {b} more than once."]
            previous = b
        if len(brokers) != 1:
            return [Err.INVALID_REPLICA_ASSIGNMENT,
                    (f"The manual partition assignment includes a partition with {len(brokers)} replica(s), but "
                    "this is not consistent with previous partitions, which have 1 replica(s).")]
    return None


@api(37, 0, 3, "kafka.create-partitions")
async def create_partitions(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    def topic(t: dict[str, Any]) -> dict[str, Any]:
        assignments = t.get("assignments")
        if assignments is None:
            return {"name": t["name"], "count": t["count"]}
        return {"name": t["name"], "count": t["count"], "assignments": len(assignments),
                "assignment_refusal": _new_partition_refusal(assignments, ctx.gateway.node_id)}

    payload = {"topics": [topic(t) for t in req["topics"]], "validate_only": req.get("validate_only", False)}
    try:
        resp = await catalog_call(ctx, Op.CREATE_PARTITIONS, payload)
    except Exception as exc:
        code = shard_down_error(exc, Err.REQUEST_TIMED_OUT)
        return {"results": [{"name": t["name"], "error_code": code} for t in req["topics"]]}
    topic_cache(ctx).invalidate(ctx.org_id)
    return {"throttle_time": 0, "results": resp["topics"]}


@api(35, 1, 4, "kafka.describe-log-dirs")
async def describe_log_dirs(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    """Each shard's WAL directory is a log dir (shards on one host share one): the organisation's
    partitions it owns, their sizes (0 for a partition nobody produced to) and its disk."""
    wanted = None if req.get("topics") is None else {t["topic"]: set(t["partitions"]) for t in req["topics"]}
    names = None if wanted is None else list(wanted)
    router = ctx.gateway.router
    shards = range(router.shard_count)
    catalogue, *answers = await asyncio.gather(
        catalog_call(ctx, Op.LIST_TOPICS, {"names": names, "auto_create": False}),
        *(router.call(s, Op.LOG_DIRS, ctx.org_id, {"topics": names}, ctx.trace) for s in shards),
        return_exceptions=True)
    if isinstance(catalogue, BaseException):  # which partitions exist is unknown: every dir reads as offline
        answers, counts = [catalogue] * len(shards), {}
    else:
        counts = {t["name"]: t["partitions"] for t in catalogue["topics"] if not t.get("error_code")}
    owned = {name: partitions_by_shard(ctx, name, n) for name, n in sorted(counts.items())}
    dirs: dict[str, dict[str, Any]] = {}
    for s, answer in zip(shards, answers):
        if isinstance(answer, BaseException):  # Kafka's offline log dir
            dirs[f"shard-{s}"] = {"error_code": Err.KAFKA_STORAGE_ERROR, "log_dir": f"shard-{s}", "topics": {},
                                  "total_bytes": -1, "usable_bytes": -1}
            continue
        found = dirs.setdefault(answer["log_dir"], {"error_code": Err.NONE, "log_dir": answer["log_dir"], "topics": {},
                                                    "total_bytes": answer["total_bytes"],
                                                    "usable_bytes": answer["usable_bytes"]})
        sizes = {(t, p): size for t, p, size in answer["partitions"]}
        for name, by_shard in owned.items():
            for p in by_shard.get(s, []):
                if wanted is None or p in wanted[name]:
                    found["topics"].setdefault(name, []).append(
                        {"partition_index": p, "partition_size": sizes.get((name, p), 0), "offset_lag": 0,
                         "is_future_key": False})
    results = [{**d, "topics": [{"name": n, "partitions": sorted(ps, key=lambda x: x["partition_index"])}
                                for n, ps in sorted(d["topics"].items())]} for d in dirs.values()]
    return {"throttle_time": 0, "error_code": Err.NONE, "results": results}
