"""The topic catalogue of an organisation: names, ids, partition counts, configs.

How this works: one shard owns an org's catalogue; gateways ask it to create,
delete, grow, describe and reconfigure topics. The handlers are pure: they validate in the
order Kafka's controller does (name, duplicate in request, existence, '.'/'_'
collision, replication factor, partition count, configs) and return ``TOPIC``
records (key ``(org, name)``, value ``{id, partitions, configs, created_ms,
config_version, incarnation}``, or ``{deleted: version}`` for a deleted topic) with the
response. ``replay`` is the only code that changes the catalogue. Topic ids are random
UUIDs, kept as strings in records and exposed as ``uuid.UUID``; a failed or
validate-only create answers the zero UUID.

Versions: every create and every config change takes the org's next catalogue version.
A topic's ``incarnation`` is the version that created it and its ``config_version`` the
version of its current configs, so both grow across a delete and re-create of the same
name. Partition logs, which live on other shards and hear of topics only through ops,
use them to refuse an op that still names an older incarnation (a gateway's stale
cache) and to keep the newest configs. A deleted topic leaves ``{deleted: version}``
behind (compaction keeps it) so the org's version never goes back after a restart.

The catalogue knows nothing of partition data: after a DeleteTopics the gateway
tells the shards that own the partitions to drop them (``LogManager.delete_partitions``).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from rafka.shard.log.config import (
    APPEND,
    CONFIGS,
    DELETE,
    LIST,
    SET,
    SUBTRACT,
    InvalidConfigError,
    describe,
    normalize_overrides,
)
from rafka.shard.log.errors import Errors
from rafka.shard.records import Record, RecordType

TOPIC_NAME_MAX = 249
ZERO_UUID = uuid.UUID(int=0)
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")

Result = tuple[list[Record], dict[str, Any]]


def validate_topic_name(name: str) -> str | None:
    """Kafka's topic-name rule (Topic.validate); returns an error message or ``None``."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > TOPIC_NAME_MAX:
        return f"Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX} characters, topic name: {name}"
    if not _LEGAL_NAME.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def _as_uuid(value: Any) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return None if value == ZERO_UUID else value
    if isinstance(value, bytes):
        return uuid.UUID(bytes=value) if value != bytes(16) else None
    return _as_uuid(uuid.UUID(str(value)))


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic as the catalogue knows it."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    created_ms: int = 0
    config_version: int = 0  # the catalogue version of ``configs``: partition logs keep the newest
    incarnation: int = 0  # the catalogue version that created the topic (0: created before versions)

    def record(self, org_id: str) -> Record:
        """The ``TOPIC`` record that (re)creates this topic on replay."""
        value = {
            "id": str(self.topic_id),
            "partitions": self.partitions,
            "configs": dict(self.configs),
            "created_ms": self.created_ms,
            "config_version": self.config_version,
            "incarnation": self.incarnation,
        }
        return Record(RecordType.TOPIC, (org_id, self.name), value)


def _error(name: str | None, code: Errors, message: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "topic_id": ZERO_UUID, "error_code": code, "error_message": message, **extra}


def _create_error(name: str | None, code: Errors, message: str | None = None) -> dict[str, Any]:
    """A failed CreateTopics entry, shaped like a successful one (Kafka answers -1s)."""
    return _error(name, code, message, num_partitions=-1, replication_factor=-1, configs=[])


class TopicCatalog:
    """Topics of every org this shard owns the catalogue for."""

    def __init__(
        self,
        *,
        default_partitions: int = 1,
        max_partitions: int = 10_000,
        new_topic_id: Callable[[], uuid.UUID] = uuid.uuid4,
    ) -> None:
        self.default_partitions = default_partitions
        self.max_partitions = max_partitions
        self._new_topic_id = new_topic_id
        self._topics: dict[str, dict[str, TopicInfo]] = {}
        self._by_id: dict[tuple[str, uuid.UUID], str] = {}
        self._collisions: dict[tuple[str, str], str] = {}
        self._versions: dict[str, int] = {}  # org → the highest catalogue version any record holds

    # ------------------------------------------------------------------ reads

    def topic(self, org_id: str, name: str) -> TopicInfo | None:
        """The topic ``name`` of ``org_id``, or ``None``."""
        return self._topics.get(org_id, {}).get(name)

    def version(self, org_id: str) -> int:
        """The newest catalogue version of ``org_id`` (0 before its first topic)."""
        return self._versions.get(org_id, 0)

    def next_version(self, org_id: str) -> int:
        """The catalogue version the next create or config change of ``org_id`` takes."""
        return self.version(org_id) + 1

    def topic_by_id(self, org_id: str, topic_id: uuid.UUID | str) -> TopicInfo | None:
        """The topic with ``topic_id`` in ``org_id``, or ``None``."""
        tid = _as_uuid(topic_id)
        name = self._by_id.get((org_id, tid)) if tid else None
        return self.topic(org_id, name) if name else None

    def list_topics(self, org_id: str) -> list[TopicInfo]:
        """All topics of ``org_id``, sorted by name."""
        return sorted(self._topics.get(org_id, {}).values(), key=lambda t: t.name)

    def describe_topics(self, org_id: str, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Metadata view: ``[{name, topic_id, error_code, num_partitions, is_internal}]``.

        ``names=None`` lists every topic; an unknown name answers
        UNKNOWN_TOPIC_OR_PARTITION, an illegal one INVALID_TOPIC_EXCEPTION.
        """
        if names is None:
            names = [t.name for t in self.list_topics(org_id)]
        out = []
        for name in names:
            info = self.topic(org_id, name)
            if info is None:
                code = (
                    Errors.INVALID_TOPIC_EXCEPTION if validate_topic_name(name) else Errors.UNKNOWN_TOPIC_OR_PARTITION
                )
                out.append(
                    {"name": name, "topic_id": ZERO_UUID, "error_code": code, "num_partitions": 0, "is_internal": False}
                )
            else:
                out.append(
                    {
                        "name": name,
                        "topic_id": info.topic_id,
                        "error_code": Errors.NONE,
                        "num_partitions": info.partitions,
                        "is_internal": False,
                    }
                )
        return out

    def describe_configs(self, org_id: str, name: str, config_names: list[str] | None = None,
                         include_synonyms: bool = False) -> dict[str, Any]:
        """DescribeConfigs for one topic: ``{error_code, error_message, configs: [...]}``."""
        info = self.topic(org_id, name)
        if info is None:  # Kafka's ConfigHelper checks the name first, and says nothing of a missing topic
            illegal = validate_topic_name(name)
            return {"error_code": Errors.INVALID_TOPIC_EXCEPTION if illegal else Errors.UNKNOWN_TOPIC_OR_PARTITION,
                    "error_message": illegal, "configs": []}
        return {"error_code": Errors.NONE, "error_message": None, "configs": describe(info.configs, config_names, include_synonyms)}

    # --------------------------------------------------------------- handlers

    def create_topics(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """CreateTopics. ``op = {topics: [create op...], validate_only}``; response ``{topics: [...]}``.

        A name given twice in one request fails every copy with INVALID_REQUEST; more than
        ``max_partitions`` partitions in all fail the whole request (POLICY_VIOLATION), as in Kafka.
        """
        topics = op.get("topics", [])
        if refused := self._over_partition_cap(topics):
            return [], {"topics": refused}
        counts: dict[str, int] = {}
        for t in topics:
            counts[t.get("name")] = counts.get(t.get("name"), 0) + 1
        records: list[Record] = []
        results = []
        pending: dict[str, str] = {}  # collision key -> name, for topics created earlier in this request
        for t in topics:
            name = t.get("name")
            if counts[name] > 1 and not validate_topic_name(name or ""):
                results.append(_create_error(name, Errors.INVALID_REQUEST, f"Duplicate topic name {name} in request"))
                continue
            recs, result = self._create(org_id, {**t, "validate_only": op.get("validate_only", False)}, now_ms, pending)
            records += recs
            results.append(result)
        return records, {"topics": results}

    def create_topic(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """Create one topic. ``op = {name, num_partitions, replication_factor, configs, validate_only}``.

        Response: ``{name, topic_id, error_code, error_message, num_partitions,
        replication_factor, configs: [DescribeConfigs entries]}``; ``num_partitions``
        -1 takes the default, ``replication_factor`` must be 1 or -1.
        """
        if refused := self._over_partition_cap([op]):
            return [], refused[0]
        return self._create(org_id, op, now_ms, {})

    def _over_partition_cap(self, topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Kafka's validateTotalNumberOfPartitions: more than ``max_partitions`` partitions asked
        for in all fail every topic of the request (POLICY_VIOLATION); else nothing."""
        total = sum(self.default_partitions if t.get("num_partitions", -1) == -1 else max(t["num_partitions"], 0)
                    for t in topics)
        if total <= self.max_partitions:
            return []
        return [_create_error(t.get("name"), Errors.POLICY_VIOLATION, "Excessively large number of partitions "
                                                                      "per request.") for t in topics]

    def _create(self, org_id: str, op: dict[str, Any], now_ms: int, pending: dict[str, str]) -> Result:
        name = op.get("name") or ""
        if msg := validate_topic_name(name):
            return [], _create_error(name, Errors.INVALID_TOPIC_EXCEPTION, msg)
        if self.topic(org_id, name) is not None or pending.get(_collision_key(name)) == name:
            return [], _create_error(name, Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        key = _collision_key(name)
        clash = self._collisions.get((org_id, key)) or pending.get(key)
        if clash:
            return [], _create_error(
                name, Errors.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {clash}"
            )
        try:  # in Kafka's order: configs, then the replication factor and partition count
            overrides = normalize_overrides(_config_map(op.get("configs")))
        except InvalidConfigError as exc:
            return [], _create_error(name, Errors.INVALID_CONFIG, str(exc))
        rf = op.get("replication_factor", -1)
        partitions = op.get("num_partitions", -1)
        if rf < -1 or rf == 0:
            return [], _create_error(name, Errors.INVALID_REPLICATION_FACTOR,
                                     "Replication factor must be larger than 0, or -1 to use the default value.")
        if partitions < -1 or partitions == 0:
            return [], _create_error(name, Errors.INVALID_PARTITIONS,
                                     "Number of partitions was set to an invalid non-positive value.")
        if rf > 1:
            return [], _create_error(name, Errors.INVALID_REPLICATION_FACTOR,
                                     f"Unable to replicate the partition {rf} time(s): The target replication factor "
                                     f"of {rf} cannot be reached because only 1 broker(s) are registered.")
        partitions = self.default_partitions if partitions == -1 else partitions
        ok = {
            "error_code": Errors.NONE,
            "error_message": None,
            "num_partitions": partitions,
            "replication_factor": 1,
            "configs": describe(overrides),
        }
        if op.get("validate_only"):
            return [], {"name": name, "topic_id": ZERO_UUID, **ok}
        version = self.next_version(org_id)  # topics created by one request share it: their names differ
        info = TopicInfo(name, self._new_topic_id(), partitions, overrides, now_ms, version, version)
        pending[key] = name
        return [info.record(org_id)], {"name": name, "topic_id": info.topic_id, **ok}

    def delete_topics(self, org_id: str, op: dict[str, Any]) -> Result:
        """DeleteTopics. ``op = {topics: [{name, topic_id}]}`` (either may be None).

        Response ``{topics: [{name, topic_id, error_code, error_message, num_partitions}]}``;
        an unknown name answers UNKNOWN_TOPIC_OR_PARTITION, an unknown id UNKNOWN_TOPIC_ID.
        The request is checked as Kafka's ``ControllerApis.deleteTopics``: an entry with
        both a name and an id, or neither, is INVALID_REQUEST; a name or id given twice is
        answered once, INVALID_REQUEST, and not deleted; so is a name whose topic was also
        named by id. ``num_partitions`` tells the gateway which partition logs to drop.
        """
        results: list[dict[str, Any]] = []

        def refuse(name: str | None, tid: uuid.UUID | None, code: Errors, message: str) -> None:
            results.append({**_error(name, code, message), "topic_id": tid or ZERO_UUID, "num_partitions": 0})

        entries = [(t.get("name"), _as_uuid(t.get("topic_id"))) for t in op.get("topics", [])]
        names = Counter(name for name, tid in entries if tid is None)
        ids = Counter(tid for name, tid in entries if name is None)
        by_id = {tid: self.topic_by_id(org_id, tid) for tid, k in ids.items() if tid is not None and k == 1}
        named_by_id = {info.name for info in by_id.values() if info is not None}
        records = []
        answered: set[Any] = set()  # duplicates are answered once
        for name, tid in entries:
            if name is None and tid is None:
                refuse(None, None, Errors.INVALID_REQUEST, "Neither topic name nor id were specified.")
                continue
            if name is not None and tid is not None:
                refuse(name, tid, Errors.INVALID_REQUEST, "You may not specify both topic name and topic id.")
                continue
            if (names[name] if tid is None else ids[tid]) > 1:
                if (name, tid) not in answered:
                    answered.add((name, tid))
                    refuse(name, tid, Errors.INVALID_REQUEST,
                           "Duplicate topic name." if tid is None else "Duplicate topic id.")
                continue
            if tid is not None:
                info = by_id[tid]
                if info is None:
                    refuse(None, tid, Errors.UNKNOWN_TOPIC_ID, f"Topic id {tid} not found")
                    continue
                if names[info.name] == 1:
                    continue  # named twice, by id and by name: the name's entry answers
            else:
                info = self.topic(org_id, name)
                if info is None:
                    refuse(name, None, Errors.UNKNOWN_TOPIC_OR_PARTITION,
                           "This server does not host this topic-partition.")
                    continue
                if name in named_by_id:
                    refuse(name, info.topic_id, Errors.INVALID_REQUEST,
                           "The provided topic name maps to an ID that was already supplied.")
                    continue
            records.append(Record(RecordType.TOPIC, (org_id, info.name), {"deleted": self.version(org_id)}))
            results.append({"name": info.name, "topic_id": info.topic_id, "incarnation": info.incarnation,
                            "error_code": Errors.NONE, "error_message": None, "num_partitions": info.partitions})
        return records, {"topics": results}

    def create_partitions(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """CreatePartitions. ``op = {topics: [{name, count[, assignments, assignment_refusal]}],
        validate_only}``; increase only. ``assignments`` is how many manual assignments the
        request gave (None: none), ``assignment_refusal`` the gateway's ``[code, message]``
        for their contents, checked after their number as Kafka's controller does.

        Response ``{topics: [{name, error_code, error_message}]}``.
        """
        del now_ms  # the partition count has no timestamp of its own
        names = Counter(t.get("name") for t in op.get("topics", []))
        records: list[Record] = []
        results = [{"name": name, "error_code": Errors.INVALID_REQUEST, "error_message": "Duplicate topic name."}
                   for name, k in names.items() if k > 1]  # answered once, grown never, as Kafka's controller
        for t in op.get("topics", []):
            name, count, assigned = t.get("name"), t.get("count", 0), t.get("assignments")
            info = self.topic(org_id, name or "")
            if names[name] > 1:
                continue
            if info is None:
                code, msg = Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            elif count == info.partitions:
                code, msg = Errors.INVALID_PARTITIONS, f"Topic already has {info.partitions} partition(s)."
            elif count < info.partitions:
                code, msg = (Errors.INVALID_PARTITIONS,
                             (f"The topic {name} currently has {info.partitions} partition(s); {count} would not be "
                             f"an increase."))
            elif count > self.max_partitions:
                code, msg = Errors.INVALID_PARTITIONS, f"Number of partitions must be at most {self.max_partitions}."
            elif assigned is not None and assigned != count - info.partitions:
                code, msg = (Errors.INVALID_REPLICA_ASSIGNMENT,
                             (f"Attempted to add {count - info.partitions} additional partition(s), but only "
                             f"{assigned} assignment(s) were specified."))
            elif t.get("assignment_refusal"):
                code, msg = t["assignment_refusal"]
            else:
                code, msg = Errors.NONE, None
                if not op.get("validate_only"):
                    records.append(replace(info, partitions=count).record(org_id))
            results.append({"name": name, "error_code": code, "error_message": msg})
        return records, {"topics": results}

    def alter_configs(self, org_id: str, op: dict[str, Any]) -> Result:
        """IncrementalAlterConfigs (``incremental``) or AlterConfigs for one topic.

        ``op = {name, configs: [[key, operation, value]], incremental, validate_only}``;
        operations SET 0, DELETE 1, APPEND 2, SUBTRACT 3 (APPEND/SUBTRACT only for list
        configs, e.g. cleanup.policy). AlterConfigs replaces every override with the given set.
        Response ``{error_code, error_message, configs, config_version, partitions}`` (the
        topic's overrides after, and their version). Null values are the gateway's to refuse.
        """
        name = op["name"]
        info = self.topic(org_id, name)
        if info is None:  # Kafka's controller validates the name before it looks the topic up
            if illegal := validate_topic_name(name):
                return [], _alter_error(Errors.INVALID_TOPIC_EXCEPTION, illegal)
            return [], _alter_error(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        keys = [c[0] for c in op["configs"]]
        if len(set(keys)) != len(keys):
            return [], _alter_error(Errors.INVALID_REQUEST, "Error due to duplicate config keys")
        configs = dict(info.configs) if op.get("incremental") else {}
        for key, operation, value in op["configs"]:
            if key not in CONFIGS:
                if operation == DELETE:
                    continue  # Kafka: deleting a config the topic cannot have changes nothing
                return [], _alter_error(Errors.INVALID_CONFIG, f"Unknown topic config name: {key}")
            if operation == SET:
                configs[key] = value
            elif operation == DELETE:
                configs.pop(key, None)
            elif operation in (APPEND, SUBTRACT):
                if CONFIGS[key].type != LIST:
                    verb = "APPEND" if operation == APPEND else "SUBTRACT"  # Kafka 4's ConfigurationControlManager
                    return [], _alter_error(Errors.INVALID_CONFIG, f"Can't {verb} to key {key} because its type is not LIST.")
                current = [v for v in configs.get(key, CONFIGS[key].default).split(",") if v]
                given = [v.strip() for v in (value or "").split(",") if v.strip()]
                kept = current + [v for v in given if v not in current] if operation == APPEND else \
                    [v for v in current if v not in given]
                configs[key] = ",".join(kept)
            else:
                return [], _alter_error(Errors.INVALID_REQUEST, f"Unknown alter configs operation {operation}")
        try:
            configs = normalize_overrides(configs)
        except InvalidConfigError as exc:
            return [], _alter_error(Errors.INVALID_CONFIG, str(exc))
        records = []
        if not op.get("validate_only") and configs != info.configs:
            info = replace(info, configs=configs, config_version=self.next_version(org_id))
            records.append(info.record(org_id))
        return records, {"error_code": Errors.NONE, "error_message": None, "configs": configs,
                         "config_version": info.config_version, "partitions": info.partitions,
                         "topic_id": str(info.topic_id)}

    # ----------------------------------------------------------------- replay

    def replay(self, record: Record) -> None:
        """Apply one ``TOPIC`` record (create/update, or ``{deleted}``/tombstone = delete)."""
        if record.type != RecordType.TOPIC:
            raise ValueError(f"TopicCatalog cannot replay record type {record.type}")
        org_id, name = record.key[0], record.key[1]
        topics = self._topics.setdefault(org_id, {})
        old = topics.pop(name, None)
        if old is not None:
            self._by_id.pop((org_id, old.topic_id), None)
            self._collisions.pop((org_id, _collision_key(name)), None)
        v = record.value
        if v is not None:
            seen = max(v.get("deleted", 0), v.get("config_version", 0), v.get("incarnation", 0))
            self._versions[org_id] = max(self._versions.get(org_id, 0), seen)
        if v is not None and "deleted" not in v:
            info = TopicInfo(
                name, uuid.UUID(v["id"]), v["partitions"], dict(v.get("configs") or {}), v.get("created_ms", 0),
                v.get("config_version", 0), v.get("incarnation", 0),
            )
            topics[name] = info
            self._by_id[(org_id, info.topic_id)] = name
            self._collisions[(org_id, _collision_key(name))] = name
        elif not topics:
            del self._topics[org_id]


def _alter_error(code: Errors, message: str) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "configs": None, "config_version": 0, "partitions": 0}


def _config_map(configs: Any) -> dict[str, Any]:
    """Accept configs as ``{name: value}`` or Kafka's ``[{name, value}]`` list."""
    if configs is None:
        return {}
    if isinstance(configs, dict):
        return configs
    return {c["name"]: c.get("value") for c in configs}
