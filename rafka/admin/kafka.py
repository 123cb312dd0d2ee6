"""The admin commands' view of a cluster through confluent-kafka's AdminClient.

Every method returns plain data (dicts, lists, ints) so the commands and their
tests never touch client objects, and turns client failures into ``AdminError``:
``NotFound`` for an unknown group or topic, ``KafkaFailure`` for anything else
(including a broker that cannot be reached within ``timeout`` seconds).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterable
from typing import Any

from rafka.admin.errors import KafkaFailure, NotFound
from rafka.ids import INTERNAL_TOPICS, uuid_string

STATE_NAMES = {"UNKNOWN": "Unknown", "PREPARING_REBALANCING": "PreparingRebalance",
               "COMPLETING_REBALANCING": "CompletingRebalance", "STABLE": "Stable", "DEAD": "Dead",
               "EMPTY": "Empty"}
"""confluent-kafka's ConsumerGroupState names → Kafka's group state names."""

_NOT_FOUND_CODES = {"GROUP_ID_NOT_FOUND", "UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"}
_TIMEOUT_CODES = {"_TIMED_OUT", "REQUEST_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN"}

EARLIEST, LATEST = -2, -1


def state_name(state: Any) -> str:
    """Kafka's name (``Stable``, ``PreparingRebalance``…) of a ConsumerGroupState."""
    return STATE_NAMES.get(getattr(state, "name", str(state)), str(state))


def parse_state(text: str) -> str:
    """A ConsumerGroupState member name from Kafka's name or the enum's, any case."""
    key = text.strip().replace("-", "").replace("_", "").lower()
    for enum_name, kafka_name in STATE_NAMES.items():
        if key in (enum_name.replace("_", "").lower(), kafka_name.lower()):
            return enum_name
    raise ValueError(f"unknown group state {text!r} (one of {', '.join(STATE_NAMES.values())})")


def client_config(bootstrap: str, *, security_protocol: str | None = None, sasl_mechanism: str | None = None,
                  sasl_username: str | None = None, sasl_password: str | None = None,
                  ssl_ca: str | None = None) -> dict[str, Any]:
    """librdkafka settings for the admin client (security options passed through)."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": "rafka-cli"}
    if security_protocol:
        conf["security.protocol"] = security_protocol
    elif sasl_mechanism or sasl_username:
        conf["security.protocol"] = "SASL_SSL" if ssl_ca else "SASL_PLAINTEXT"
    elif ssl_ca:
        conf["security.protocol"] = "SSL"
    if sasl_mechanism or sasl_username:
        conf["sasl.mechanism"] = sasl_mechanism or "PLAIN"
    if sasl_username is not None:
        conf["sasl.username"] = sasl_username
    if sasl_password is not None:
        conf["sasl.password"] = sasl_password
    if ssl_ca:
        conf["ssl.ca.location"] = ssl_ca
    return conf


def _error(exc: BaseException, what: str) -> Exception:
    """An AdminError for a failed client future."""
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", lambda: "")() if err is not None and hasattr(err, "name") else ""
    if isinstance(exc, concurrent.futures.TimeoutError) or name in _TIMEOUT_CODES:
        return KafkaFailure(f"{what}: timed out (is the broker reachable?)")
    text = err.str() if err is not None and hasattr(err, "str") else str(exc)
    if name in _NOT_FOUND_CODES:
        return NotFound(f"{what}: {text}")
    return KafkaFailure(f"{what}: {text}")


def _uuid(value: Any) -> str | None:
    """A client Uuid as Kafka's tools print it (``Uuid.toString``: 22 characters of URL-safe
    base64, no padding), or None for none or the zero id."""
    if value is None:
        return None
    try:
        bits = ((value.get_most_significant_bits() % 2**64) << 64) | (value.get_least_significant_bits() % 2**64)
    except AttributeError:
        return str(value)
    return uuid_string(bits.to_bytes(16, "big")) if bits else None


class _LastProblem(logging.Handler):
    """Keeps librdkafka's last warning or error (instead of printing every retry)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage()


class Cluster:
    """A connection to a Kafka-compatible cluster for admin work."""

    def __init__(self, conf: dict[str, Any], timeout: float = 15.0) -> None:
        from confluent_kafka.admin import AdminClient

        self.conf = conf
        self.timeout = timeout
        self._problems = _LastProblem()
        logger = logging.getLogger(f"rafka.admin.librdkafka.{id(self)}")
        logger.propagate = False
        logger.addHandler(self._problems)
        self.admin = AdminClient({**conf, "logger": logger})

    def _wait(self, fut: Any, what: str) -> Any:
        try:
            return fut.result(timeout=self.timeout)
        except Exception as exc:
            err = _error(exc, what)
            if str(err).endswith("(is the broker reachable?)"):
                self.admin.poll(0)  # deliver librdkafka's queued log lines
                if self._problems.last:
                    err = KafkaFailure(f"{err} (last client error: {self._problems.last})")
            raise err from None

    # -- groups -----------------------------------------------------------
    def list_groups(self, states: Iterable[str] = ()) -> list[dict[str, Any]]:
        """``[{group_id, state, type, is_simple}]`` sorted by group id."""
        from confluent_kafka import ConsumerGroupState

        kw: dict[str, Any] = {"request_timeout": self.timeout}
        wanted = {ConsumerGroupState[s] for s in states}
        if wanted:
            kw["states"] = wanted
        result = self._wait(self.admin.list_consumer_groups(**kw), "list groups")
        if result.errors and not result.valid:
            from confluent_kafka import KafkaException

            err = result.errors[0]  # librdkafka may answer a timeout here rather than through the future
            raise _error(err if isinstance(err, BaseException) else KafkaException(err), "list groups")
        groups = [{"group_id": g.group_id, "state": state_name(g.state),
                   "type": getattr(getattr(g, "type", None), "name", "CLASSIC").lower(),
                   "is_simple": bool(g.is_simple_consumer_group)} for g in result.valid]
        return sorted(groups, key=lambda g: g["group_id"])

    def describe_group(self, group_id: str) -> dict[str, Any]:
        """A group's state, protocol, coordinator and members (state ``Dead`` if it does not exist)."""
        fut = self.admin.describe_consumer_groups([group_id], request_timeout=self.timeout)[group_id]
        d = self._wait(fut, f"describe group {group_id}")
        coord = d.coordinator
        members = []
        for m in d.members:
            parts: dict[str, list[int]] = {}
            for tp in (m.assignment.topic_partitions if m.assignment else []):
                parts.setdefault(tp.topic, []).append(tp.partition)
            members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id, "host": m.host,
                            "assignment": {t: sorted(ps) for t, ps in sorted(parts.items())}})
        state = state_name(d.state)
        return {
            "group_id": d.group_id, "state": state,
            "protocol_type": "" if d.is_simple_consumer_group else "consumer",
            "protocol": d.partition_assignor or None,
            "coordinator": {"id": coord.id, "host": coord.host, "port": coord.port} if coord else None,
            "members": sorted(members, key=lambda m: m["member_id"]),
        }

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """Every committed offset of ``group_id``: ``{(topic, partition): offset}``."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        futs = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)],
                                                       request_timeout=self.timeout)
        res = self._wait(futs[group_id], f"fetch offsets of group {group_id}")
        return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0}

    def list_offsets(self, specs: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Offsets by partition for ``specs`` values EARLIEST, LATEST or a timestamp in ms (-1 if none)."""
        if not specs:
            return {}
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        def spec(value: int) -> Any:
            if value == EARLIEST:
                return OffsetSpec.earliest()
            if value == LATEST:
                return OffsetSpec.latest()
            return OffsetSpec.for_timestamp(value)

        futs = self.admin.list_offsets({TopicPartition(t, p): spec(v) for (t, p), v in specs.items()},
                                       request_timeout=self.timeout)
        return {(tp.topic, tp.partition): self._wait(f, f"list offsets of {tp.topic}[{tp.partition}]").offset
                for tp, f in futs.items()}

    def alter_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit ``offsets`` for ``group_id`` (the group must have no members)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        req = ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
        res = self._wait(self.admin.alter_consumer_group_offsets([req], request_timeout=self.timeout)[group_id],
                         f"reset offsets of group {group_id}")
        failed = [tp for tp in res.topic_partitions or [] if tp.error]
        if failed:
            tp = failed[0]
            raise KafkaFailure(f"reset offsets of group {group_id}: {tp.topic}[{tp.partition}]: {tp.error.str()}")

    def delete_group(self, group_id: str) -> None:
        fut = self.admin.delete_consumer_groups([group_id], request_timeout=self.timeout)[group_id]
        self._wait(fut, f"delete group {group_id}")

    # -- topics -----------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: dict[str, str], replication_factor: int = 1) -> None:
        from confluent_kafka.admin import NewTopic

        new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=configs)
        fut = self.admin.create_topics([new], request_timeout=self.timeout, operation_timeout=self.timeout)[name]
        self._wait(fut, f"create topic {name}")

    def delete_topic(self, name: str) -> None:
        fut = self.admin.delete_topics([name], request_timeout=self.timeout, operation_timeout=self.timeout)[name]
        self._wait(fut, f"delete topic {name}")

    def list_topics(self, exclude_internal: bool = False) -> dict[str, int]:
        """Partition count by topic name; Kafka's internal topics too unless ``exclude_internal``
        (as ``kafka-topics --list --exclude-internal``)."""
        try:
            md = self.admin.list_topics(timeout=self.timeout)
        except Exception as exc:
            raise _error(exc, "list topics") from None
        return {name: len(t.partitions) for name, t in sorted(md.topics.items())
                if t.error is None and not (exclude_internal and name in INTERNAL_TOPICS)}

    def describe_topic(self, name: str) -> dict[str, Any]:
        """``{topic, topic_id, partitions: [{partition, leader, replicas}], configs: [...]}``."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        t = self._topic(name)
        res = ConfigResource(ResourceType.TOPIC, name)
        entries = self._wait(self.admin.describe_configs([res], request_timeout=self.timeout)[res],
                             f"describe configs of topic {name}")
        configs = [{"name": k, "value": e.value, "is_default": bool(e.is_default), "read_only": bool(e.is_read_only)}
                   for k, e in sorted(entries.items())]
        partitions = [{"partition": p.id, "leader": p.leader.id if p.leader else None,
                       "replicas": [r.id for r in p.replicas]} for p in sorted(t.partitions, key=lambda p: p.id)]
        return {"topic": t.name, "topic_id": _uuid(t.topic_id),
                "partitions": partitions, "configs": configs}

    def partition_count(self, topic: str) -> int:
        """The topic's partition count (NotFound if it does not exist)."""
        return len(self._topic(topic).partitions)

    def _topic(self, name: str) -> Any:
        from confluent_kafka import TopicCollection

        fut = self.admin.describe_topics(TopicCollection([name]), request_timeout=self.timeout)[name]
        return self._wait(fut, f"topic {name}")
