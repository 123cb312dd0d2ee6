"""Group configs (Kafka's GroupConfigManager): per-group overrides of the consumer group timings.

How this works: a GROUP config resource (DescribeConfigs, IncrementalAlterConfigs) names
a group, and its configs live on that group's coordinator shard, whether or not the group
exists: as in Kafka, a group can be configured before its first member joins, and its
configs outlive it. ``alter`` (IncrementalAlterConfigs, or AlterConfigs replacing every
override) validates like Kafka's ``GroupConfig.validate`` (known names, integers of at
least 1, within the coordinator's ``group.consumer.*`` bounds, a session timeout above
the heartbeat interval, unset names at Kafka's built-in defaults) and stores each value
as the integer it parsed to. It returns one GROUP_CONFIG record, key ``(org, group)``, value
``{name: value}`` or ``None`` once no override is left. ``replay`` is the only code that
changes them. KIP-848 groups read the session timeout and heartbeat interval from here
at every heartbeat, so a change applies from each member's next heartbeat. Kafka's
share-group configs (KIP-932) are unknown names here: rafka has no share groups.
"""

from __future__ import annotations

from typing import Any

from rafka import javanum
from rafka.shard.groups.core import GroupConfig, Respond
from rafka.shard.log.config import APPEND, DELETE, SET, SUBTRACT
from rafka.shard.records import Record, RecordType

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
NAMES = (HEARTBEAT_INTERVAL, SESSION_TIMEOUT)
DEFAULT_CONFIG, GROUP_CONFIG = 5, 8  # DescribeConfigs config_source
INT = 3  # DescribeConfigs config_type
KAFKA_DEFAULTS = {SESSION_TIMEOUT: "45000", HEARTBEAT_INTERVAL: "5000"}  # GroupConfig's own, used to validate
NONE, INVALID_CONFIG, INVALID_REQUEST = 0, 40, 42


class InvalidGroupConfig(ValueError):
    """A change Kafka refuses: INVALID_CONFIG (a value or combination GroupConfig refuses) or
    INVALID_REQUEST (a malformed change)."""

    def __init__(self, message: str, code: int = INVALID_CONFIG) -> None:
        super().__init__(message)
        self.code = code


class GroupConfigManager:
    """The config overrides of every group this shard coordinates."""

    def __init__(self, config: GroupConfig) -> None:
        self.config = config  # the coordinator's defaults and bounds
        self.overrides: dict[tuple[str, str], dict[str, str]] = {}

    # ------------------------------------------------------------------ reads

    def session_timeout_ms(self, org_id: str, group_id: str) -> int:
        return self._value(org_id, group_id, SESSION_TIMEOUT, self.config.consumer_session_timeout_ms)

    def heartbeat_interval_ms(self, org_id: str, group_id: str) -> int:
        return self._value(org_id, group_id, HEARTBEAT_INTERVAL, self.config.consumer_heartbeat_interval_ms)

    def _value(self, org_id: str, group_id: str, name: str, default: int) -> int:
        """Read at every heartbeat: a dict lookup unless the group has its own value."""
        override = self.overrides.get((org_id, group_id))
        return int(override[name]) if override and name in override else default

    def _defaults(self) -> dict[str, str]:
        return {SESSION_TIMEOUT: str(self.config.consumer_session_timeout_ms),
                HEARTBEAT_INTERVAL: str(self.config.consumer_heartbeat_interval_ms)}

    # --------------------------------------------------------------- handlers

    def describe(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """DescribeConfigs for one group. ``op = {group, configuration_keys}``; answers
        ``{error_code, error_message, configs: [{name, value, read_only, config_source, is_default,
        is_sensitive, config_type, synonyms}]}``. Unknown names are skipped, as Kafka does; the
        synonyms, when asked for, are the group's override only (Kafka 4's ConfigHelper)."""
        del now_ms
        overrides = self.overrides.get((org_id, op["group"]), {})
        defaults = self._defaults()
        keys = op.get("configuration_keys")
        with_synonyms = op.get("include_synonyms", False)
        respond({"error_code": NONE, "error_message": None, "configs": [
            {"name": n, "value": overrides.get(n, defaults[n]), "read_only": False,
             "config_source": GROUP_CONFIG if n in overrides else DEFAULT_CONFIG,
             "is_default": n not in overrides, "is_sensitive": False, "config_type": INT,
             "synonyms": [{"name": n, "value": overrides[n], "source": GROUP_CONFIG}]
             if with_synonyms and n in overrides else []}
            for n in NAMES if keys is None or n in keys]})
        return []

    def alter(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Alter one group's configs. ``op = {group, configs: [[name, operation, value]],
        incremental, validate_only}`` (AlterConfigs, not incremental, replaces every override);
        answers ``{error_code, error_message}``."""
        del now_ms
        key = (org_id, op["group"])
        current = self.overrides.get(key, {})
        try:
            configs = _altered(current if op.get("incremental", True) else {}, op["configs"])
            self._validate({**KAFKA_DEFAULTS, **configs})
        except InvalidGroupConfig as exc:
            respond({"error_code": exc.code, "error_message": str(exc)})
            return []
        respond({"error_code": NONE, "error_message": None})
        if op.get("validate_only") or configs == current:
            return []
        return [Record(RecordType.GROUP_CONFIG, key, configs or None)]

    def _validate(self, values: dict[str, str]) -> None:
        """Kafka's GroupConfig.validate, for the configs rafka knows."""
        ints = {name: _parse_int(name, raw) for name, raw in values.items()}
        for name, raw in values.items():
            if ints[name] < 1:
                raise InvalidGroupConfig(f"Invalid value {raw} for configuration {name}: Value must be at least 1")
        c = self.config
        bounds = [(HEARTBEAT_INTERVAL, "heartbeat.interval.ms", c.consumer_min_heartbeat_interval_ms,
                   c.consumer_max_heartbeat_interval_ms),
                  (SESSION_TIMEOUT, "session.timeout.ms", c.consumer_min_session_timeout_ms,
                   c.consumer_max_session_timeout_ms)]
        for name, broker_suffix, low, high in bounds:
            if ints[name] < low:
                raise InvalidGroupConfig(f"{name} must be greater than or equal to group.consumer.min.{broker_suffix}")
            if ints[name] > high:
                raise InvalidGroupConfig(f"{name} must be less than or equal to group.consumer.max.{broker_suffix}")
        if ints[SESSION_TIMEOUT] <= ints[HEARTBEAT_INTERVAL]:
            raise InvalidGroupConfig(f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}")

    # ----------------------------------------------------------------- replay

    def replay(self, record: Record) -> None:
        """Apply one GROUP_CONFIG record (live path and recovery alike)."""
        key = (record.key[0], record.key[1])
        if record.value:
            self.overrides[key] = dict(record.value)
        else:
            self.overrides.pop(key, None)


def _parse_int(name: str, raw: str) -> int:
    """A config value as Kafka's ConfigDef reads an INT (Java's parseInt of the trimmed text)."""
    value = javanum.parse_integer(raw, "INT")
    if value is None:
        raise InvalidGroupConfig(f"Invalid value {raw} for configuration {name}: Not a number of type INT")
    return value


def _altered(current: dict[str, str], changes: list[list[Any]]) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs ``changes`` ([name, operation, value])."""
    configs = dict(current)
    names = [c[0] for c in changes]
    if len(set(names)) != len(names):
        raise InvalidGroupConfig("Error due to duplicate config keys", INVALID_REQUEST)
    for name, operation, value in changes:
        if operation not in (SET, DELETE, APPEND, SUBTRACT):
            raise InvalidGroupConfig(f"Unknown alter configs operation {operation}", INVALID_REQUEST)
        if name not in NAMES:
            raise InvalidGroupConfig(f"Unknown group config name: {name}")
        if operation == SET:
            configs[name] = str(_parse_int(name, str(value)))
        elif operation == DELETE:
            configs.pop(name, None)
        else:
            verb = "APPEND" if operation == APPEND else "SUBTRACT"  # Kafka 4's ConfigurationControlManager
            raise InvalidGroupConfig(f"Can't {verb} to key {name} because its type is not LIST.")
    return configs
