"""Topic configuration: every topic config Kafka 4 knows, its default and validation.

How this works: a topic stores only its *overrides* (``{name: str}`` as the
client sent them, like Kafka's dynamic topic configs). ``CONFIGS`` defines each
key Kafka's ``LogConfig`` defines, with its DescribeConfigs type, its default as
Kafka reports it and a parser that checks Kafka's validator. ``LogConfig.from_overrides``
validates overrides and fills in defaults, giving the typed values the partition log
uses; a key whose ``attribute`` is ``None`` changes nothing a client can see on a
single-replica broker (flushing, index sizes, replication throttles, ...) and is
only stored and described. ``describe`` lists every key the way DescribeConfigs does,
with the synonyms Kafka's ConfigHelper lists when asked: the topic's override, then the
broker config whose default the topic inherits (``BROKER_SYNONYMS``).

``cleanup.policy=compact`` is accepted with Kafka's rules for what a client can see
(records need keys; time and size retention do not delete; DeleteRecords is refused);
``rafka.shard.log.cleaner`` compacts such logs.
``compression.type`` other than ``producer`` makes the log recompress batches in
another codec (``codec_for``, with the ``compression.*.level`` configs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rafka import javanum

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# DescribeConfigs config_source values (DescribeConfigsResponse.ConfigSource)
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5

SEGMENT_BYTES_MIN = 1024 * 1024  # Kafka 4 (KIP-1030) refuses smaller segments

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7  # DescribeConfigs v3+ config_type (ConfigDef.Type)


class InvalidConfigError(ValueError):
    """An unknown key or an invalid value (INVALID_CONFIG); ``value``, the part of a list
    that is invalid (Kafka names the element, not the whole list)."""

    def __init__(self, message: str, value: str | None = None) -> None:
        super().__init__(message)
        self.value = value


def _number(kind: str, minimum: float, maximum: float | None) -> Callable[[str], Any]:
    """A parser with the messages of Kafka's ConfigDef.parseType (``kind`` INT, LONG or DOUBLE:
    what Java cannot parse into it is "Not a number") and ConfigDef.Range (NaN passes it)."""

    def parse(text: str) -> Any:
        value = javanum.parse_double(text) if kind == "DOUBLE" else javanum.parse_integer(text, kind)
        if value is None:
            raise InvalidConfigError(f"Not a number of type {kind}")
        if value < minimum:
            raise InvalidConfigError(f"Value must be at least {minimum}", javanum.java_str(value))
        if maximum is not None and value > maximum:
            raise InvalidConfigError(f"Value must be no more than {maximum}", javanum.java_str(value))
        return value

    return parse


def _int(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    return _number("INT", minimum, maximum)


def _long(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    return _number("LONG", minimum, maximum)


def _double(minimum: float, maximum: float) -> Callable[[str], float]:
    return _number("DOUBLE", minimum, maximum)


def _boolean(text: str) -> bool:
    value = javanum.java_trim(text).lower()
    if value not in ("true", "false"):
        raise InvalidConfigError("Expected value to be either true or false")
    return value == "true"


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = javanum.java_trim(text)
        if value not in choices:
            raise InvalidConfigError(f"String must be one of: {', '.join(choices)}")
        return value

    return parse


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _cleanup_policy(text: str) -> frozenset[str]:
    policies = _items(text)  # empty: the log neither deletes nor compacts, as Kafka allows
    for policy in policies:
        if policy not in ("compact", "delete"):
            raise InvalidConfigError("String must be one of: compact, delete", policy)
    return frozenset(policies)


def _throttled_replicas(text: str) -> str:
    """``*`` or ``partition:broker,...`` (ThrottledReplicaListValidator)."""
    items = _items(text)
    if items == ["*"]:
        return text
    for item in items:
        partition, _, broker = item.partition(":")
        if not (partition.strip().isdigit() and broker.strip().isdigit()):
            raise InvalidConfigError("must be the literal '*' or a list of replicas in the following format: "
                                     "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    return text


def _remote_storage(text: str) -> bool:
    if _boolean(text):
        raise InvalidConfigError("Tiered Storage functionality is disabled in the broker. "
                                 "Topic cannot be configured with remote log storage.")
    return False


def _gzip_level(text: str) -> int:
    """GzipCompression.LevelValidator."""
    level = _int(-(2**31))(text)
    if level > 9 or (level < 1 and level != -1):
        raise InvalidConfigError("Value must be between 1 and 9 or equal to -1", str(level))
    return level


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic config: DescribeConfigs type, default (as Kafka reports it), parser, and
    the ``LogConfig`` field it sets (``None``: stored and described only)."""

    type: int
    default: str
    parse: Callable[[str], Any]
    attribute: str | None = None


CONFIGS: dict[str, ConfigDef] = {
    "cleanup.policy": ConfigDef(LIST, "delete", _cleanup_policy, "cleanup_policy"),
    "compression.gzip.level": ConfigDef(INT, "-1", _gzip_level, "compression_gzip_level"),
    "compression.lz4.level": ConfigDef(INT, "9", _int(1, 17), "compression_lz4_level"),
    "compression.type": ConfigDef(STRING, "producer",
                                  _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
                                  "compression_type"),
    "compression.zstd.level": ConfigDef(INT, "3", _int(-131072, 22), "compression_zstd_level"),
    "delete.retention.ms": ConfigDef(LONG, "86400000", _long(0), "delete_retention_ms"),
    "file.delete.delay.ms": ConfigDef(LONG, "60000", _long(0)),
    "flush.messages": ConfigDef(LONG, str(INT64_MAX), _long(1)),
    "flush.ms": ConfigDef(LONG, str(INT64_MAX), _long(0)),
    "follower.replication.throttled.replicas": ConfigDef(LIST, "", _throttled_replicas),
    "index.interval.bytes": ConfigDef(INT, "4096", _int(0)),
    "leader.replication.throttled.replicas": ConfigDef(LIST, "", _throttled_replicas),
    "local.retention.bytes": ConfigDef(LONG, "-2", _long(-2)),
    "local.retention.ms": ConfigDef(LONG, "-2", _long(-2)),
    "max.compaction.lag.ms": ConfigDef(LONG, str(INT64_MAX), _long(1), "max_compaction_lag_ms"),
    "max.message.bytes": ConfigDef(INT, "1048588", _int(0), "max_message_bytes"),
    "message.timestamp.after.max.ms": ConfigDef(LONG, "3600000", _long(0), "message_timestamp_after_max_ms"),
    "message.timestamp.before.max.ms": ConfigDef(LONG, str(INT64_MAX), _long(0), "message_timestamp_before_max_ms"),
    "message.timestamp.type": ConfigDef(STRING, "CreateTime", _one_of("CreateTime", "LogAppendTime"),
                                        "message_timestamp_type"),
    "min.cleanable.dirty.ratio": ConfigDef(DOUBLE, "0.5", _double(0, 1), "min_cleanable_dirty_ratio"),
    "min.compaction.lag.ms": ConfigDef(LONG, "0", _long(0), "min_compaction_lag_ms"),
    "min.insync.replicas": ConfigDef(INT, "1", _int(1)),  # Kafka caps it at the replication factor: 1
    "preallocate": ConfigDef(BOOLEAN, "false", _boolean),
    "remote.log.copy.disable": ConfigDef(BOOLEAN, "false", _boolean),
    "remote.log.delete.on.disable": ConfigDef(BOOLEAN, "false", _boolean),
    "remote.storage.enable": ConfigDef(BOOLEAN, "false", _remote_storage),
    "retention.bytes": ConfigDef(LONG, "-1", _long(INT64_MIN), "retention_bytes"),
    "retention.ms": ConfigDef(LONG, "604800000", _long(-1), "retention_ms"),
    "segment.bytes": ConfigDef(INT, "1073741824", _int(SEGMENT_BYTES_MIN), "segment_bytes"),
    "segment.index.bytes": ConfigDef(INT, "10485760", _int(4)),
    "segment.jitter.ms": ConfigDef(LONG, "0", _long(0)),
    "segment.ms": ConfigDef(LONG, "604800000", _long(1), "segment_ms"),
    "unclean.leader.election.enable": ConfigDef(BOOLEAN, "false", _boolean),
}

_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # attribute bits 0-2

_UNCHECKED: dict[int, Callable[[str], Any]] = {INT: int, LONG: int}  # validate=False: the type, not the bounds


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Typed, defaulted topic configuration (Kafka's LogConfig): the keys that change
    what a client sees."""

    cleanup_policy: frozenset[str] = frozenset({"delete"})
    max_message_bytes: int = 1048588
    retention_bytes: int = -1  # negative: unlimited
    retention_ms: int = 604800000  # -1: unlimited
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = INT64_MAX
    message_timestamp_after_max_ms: int = 3600000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` includes compact: records need keys."""
        return "compact" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """How old the active segment may grow before an append rolls it: ``segment.ms``, and for
        a compacted topic at most ``max.compaction.lag.ms`` (Kafka's ``maxSegmentMs``), since
        the cleaner never cleans the active segment."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    @property
    def delete(self) -> bool:
        """``cleanup.policy`` includes delete: retention and DeleteRecords apply."""
        return "delete" in self.cleanup_policy

    def codec_for(self, source: int) -> tuple[int, int | None]:
        """The codec and level a batch in codec ``source`` is stored in (Kafka's
        ``BrokerCompressionType.targetCompression``): the producer's unless ``compression.type``
        names another, at its ``compression.*.level`` (None for codecs without one)."""
        if self.compression_type == "producer":
            return source, None
        codec = _CODECS[self.compression_type]
        level = {1: self.compression_gzip_level, 3: self.compression_lz4_level, 4: self.compression_zstd_level}.get(codec)
        return codec, level

    @property
    def log_append_time(self) -> bool:
        """``message.timestamp.type=LogAppendTime``: the broker stamps each batch."""
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, str] | None, *, validate: bool = True) -> LogConfig:
        """Typed config from ``overrides``; raises ``InvalidConfigError`` if ``validate``.

        With ``validate=False`` (configs that already passed the catalog) bounds
        are not enforced, so tests may use tiny segments; unknown keys are ignored, and a
        value an older rafka accepted but this one cannot read takes the default: a log
        being replayed must never fail on its configs.
        """
        values: dict[str, Any] = {}
        nulls = [name for name, text in (overrides or {}).items() if text is None]
        if nulls:  # before any other check, with every such name, as Kafka's CreateTopics
            raise InvalidConfigError(f"Null value not supported for topic configs: {','.join(nulls)}")
        for name, text in (overrides or {}).items():
            spec = CONFIGS.get(name)
            if spec is None:
                if validate:
                    raise InvalidConfigError(f"Unknown topic config name: {name}")
                continue
            try:
                value = spec.parse(text)
            except InvalidConfigError as exc:
                if validate:
                    raise InvalidConfigError(f"Invalid value {exc.value or text} for configuration {name}: {exc}") from None
                try:
                    value = _UNCHECKED[spec.type](text)
                except (KeyError, ValueError):
                    continue
            if spec.attribute is not None:
                values[spec.attribute] = value
        config = cls(**values)
        if validate and config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"conflict topic config setting min.compaction.lag.ms ({config.min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({config.max_compaction_lag_ms})")
        return config


def normalize_overrides(overrides: Mapping[str, str | None] | None) -> dict[str, str]:
    """Validate ``overrides`` and return them as a plain ``{name: value}`` dict."""
    clean = {str(k): v for k, v in (overrides or {}).items()}
    LogConfig.from_overrides(clean)  # type: ignore[arg-type]
    return {k: str(v) for k, v in clean.items()}


# ServerTopicConfigSynonyms: the broker config each topic config takes its default from,
# where Kafka lists it as a DEFAULT_CONFIG synonym. Kafka drops the synonyms of configs whose
# first broker synonym has no default (retention.ms's log.retention.ms, segment.ms's
# log.roll.ms, segment.jitter.ms's log.roll.jitter.ms, flush.ms's log.flush.interval.ms), and
# the remote-storage and throttle configs have none.
BROKER_SYNONYMS = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.type": "compression.type",
    "compression.zstd.level": "compression.zstd.level",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "index.interval.bytes": "log.index.interval.bytes",
    "local.retention.bytes": "log.local.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


def synonyms(name: str, overrides: Mapping[str, str]) -> list[dict[str, Any]]:
    """The DescribeConfigs synonyms of one topic config, highest precedence first."""
    out = []
    if name in overrides:
        out.append({"name": name, "value": overrides[name], "source": DYNAMIC_TOPIC_CONFIG})
    broker = BROKER_SYNONYMS.get(name)
    if broker is not None:
        out.append({"name": broker, "value": CONFIGS[name].default, "source": DEFAULT_CONFIG})
    return out


def describe(overrides: Mapping[str, str], names: list[str] | None = None,
             include_synonyms: bool = False) -> list[dict[str, Any]]:
    """Every topic config (or just ``names``) as DescribeConfigs entries.

    Each entry: ``{name, value, read_only, config_source, is_default, is_sensitive, config_type,
    synonyms}``. Unknown ``names`` are skipped, as Kafka does.
    """
    out = []
    for name in sorted(CONFIGS) if names is None else names:
        spec = CONFIGS.get(name)
        if spec is None:
            continue
        overridden = name in overrides
        out.append(
            {
                "name": name,
                "value": overrides[name] if overridden else spec.default,
                "read_only": False,
                "config_source": DYNAMIC_TOPIC_CONFIG if overridden else DEFAULT_CONFIG,
                "is_default": not overridden,
                "is_sensitive": False,
                "config_type": spec.type,
                "synonyms": synonyms(name, overrides) if include_synonyms else [],
            }
        )
    return out
