"""Topic configuration: the supported keys, their defaults and validation.

How this works: a topic stores only its *overrides* (``{name: str}`` as the
client sent them, like Kafka's dynamic topic configs). ``LogConfig.from_overrides``
validates them and fills in defaults, giving typed values the partition log uses
(segment rolling, retention, the message size limit). ``describe`` lists every
supported key with its value and ``config_source`` the way DescribeConfigs does.
Only ``cleanup.policy=delete`` is supported: the log does not compact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# DescribeConfigs config_source values (DescribeConfigsResponse.ConfigSource)
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5

SEGMENT_BYTES_MIN = 1024 * 1024  # Kafka 4 (KIP-1030) refuses smaller segments


class InvalidConfigError(ValueError):
    """An unknown key or an invalid value (INVALID_CONFIG)."""


def _long(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        return _bounded(text, minimum, INT64_MAX)

    return parse


def _int(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        return _bounded(text, minimum, INT32_MAX)

    return parse


def _bounded(text: str, minimum: int, maximum: int) -> int:
    try:
        value = int(text.strip())
    except (ValueError, AttributeError):
        raise InvalidConfigError(f"{text!r} is not a number") from None
    if not minimum <= value <= maximum:
        raise InvalidConfigError(f"value {value} must be in [{minimum}, {maximum}]")
    return value


def _cleanup_policy(text: str) -> str:
    policies = [p.strip() for p in text.split(",") if p.strip()]
    if policies != ["delete"]:
        raise InvalidConfigError(f"cleanup.policy {text!r} is not supported; only 'delete' is")
    return "delete"


# name -> (default as Kafka reports it, parser, attribute)
CONFIG_DEFS: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "cleanup.policy": ("delete", _cleanup_policy, "cleanup_policy"),
    "max.message.bytes": ("1048588", _int(0), "max_message_bytes"),
    "retention.bytes": ("-1", _long(-(2**63)), "retention_bytes"),
    "retention.ms": ("604800000", _long(-1), "retention_ms"),
    "segment.bytes": ("1073741824", _int(SEGMENT_BYTES_MIN), "segment_bytes"),
    "segment.ms": ("604800000", _long(1), "segment_ms"),
}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
INT, LONG, LIST = 3, 5, 7  # DescribeConfigs v3+ config_type, as Kafka's ConfigDef types these
CONFIG_TYPES = {"cleanup.policy": LIST, "max.message.bytes": INT, "retention.bytes": LONG, "retention.ms": LONG,
                "segment.bytes": INT, "segment.ms": LONG}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Typed, defaulted topic configuration (Kafka's LogConfig)."""

    cleanup_policy: str = "delete"
    max_message_bytes: int = 1048588
    retention_bytes: int = -1  # negative: unlimited
    retention_ms: int = 604800000  # -1: unlimited
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, str] | None, *, validate: bool = True) -> LogConfig:
        """Typed config from ``overrides``; raises ``InvalidConfigError`` if ``validate``.

        With ``validate=False`` (configs that already passed the catalog) bounds
        are not enforced, so tests may use tiny segments; unknown keys are ignored.
        """
        values: dict[str, Any] = {}
        for name, text in (overrides or {}).items():
            spec = CONFIG_DEFS.get(name)
            if spec is None:
                if validate:
                    raise InvalidConfigError(f"Unknown topic config name: {name}")
                continue
            if text is None:
                raise InvalidConfigError(f"Null value not supported for topic config {name}")
            if validate:
                try:
                    values[spec[2]] = spec[1](text)
                except InvalidConfigError as exc:
                    raise InvalidConfigError(f"Invalid value {text} for configuration {name}: {exc}") from None
            else:
                values[spec[2]] = text.strip() if name == "cleanup.policy" else int(text)
        return cls(**values)


def normalize_overrides(overrides: Mapping[str, str | None] | None) -> dict[str, str]:
    """Validate ``overrides`` and return them as a plain ``{name: value}`` dict."""
    clean = {str(k): v for k, v in (overrides or {}).items()}
    LogConfig.from_overrides(clean)  # type: ignore[arg-type]
    return {k: str(v) for k, v in clean.items()}


def describe(overrides: Mapping[str, str], names: list[str] | None = None) -> list[dict[str, Any]]:
    """Every supported config (or just ``names``) as DescribeConfigs entries.

    Each entry: ``{name, value, read_only, config_source, is_default, is_sensitive, config_type}``.
    Unknown ``names`` are skipped, as Kafka does.
    """
    out = []
    for name in sorted(CONFIG_DEFS) if names is None else names:
        if name not in CONFIG_DEFS:
            continue
        overridden = name in overrides
        out.append(
            {
                "name": name,
                "value": overrides[name] if overridden else CONFIG_DEFS[name][0],
                "read_only": False,
                "config_source": DYNAMIC_TOPIC_CONFIG if overridden else DEFAULT_CONFIG,
                "is_default": not overridden,
                "is_sensitive": False,
                "config_type": CONFIG_TYPES[name],
            }
        )
    return out
