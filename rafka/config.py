"""Configuration: one dataclass, filled from flags, ``RAFKA_<NAME>`` variables and defaults.

Precedence is flag > environment > default. Every option of every process lives
here so `rafka serve`, `rafka gateway` and `rafka shard` agree on names.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

from rafka import ids


@dataclasses.dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    cluster_id: str | None = None  # Kafka's 22-character id; default: the data directory's, made on first start
    shards: int = os.cpu_count() or 1
    data_dir: str = "./rafka-data"
    in_memory: bool = False
    fsync: str = "batch"
    metrics_port: int = 9464
    coordinator_partitions: int = 64
    shard_endpoints: str | None = None  # comma-separated; default ipc:// under the run dir
    max_request_bytes: int = 100 * 1024 * 1024
    max_inflight_per_connection: int = 1024
    reuse_port: bool = False
    idle_poll_us: int = 500  # how long a process polls after a message before it sleeps (0: never)
    log_level: str = "INFO"
    config: str | None = None  # a TOML file with any of these options (flags and env override it)
    # security and limits
    auth_users: str | None = None  # TOML users file: [[users]] name, password | scram, org
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    max_connections: int = 10_000
    idle_timeout_ms: int = 600_000
    connections_max_reauth_ms: int = 0  # Kafka's connections.max.reauth.ms (KIP-368); 0: sessions never expire
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"  # Kafka's sasl.enabled.mechanisms
    # groups
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 0
    group_max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    consumer_group_session_timeout_ms: int = 45_000  # KIP-848 groups (group.consumer.session.timeout.ms)
    consumer_group_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    consumer_group_min_session_timeout_ms: int = 45_000  # bounds of a group's own configs (GROUP resource)
    consumer_group_max_session_timeout_ms: int = 60_000
    consumer_group_min_heartbeat_interval_ms: int = 5_000
    consumer_group_max_heartbeat_interval_ms: int = 15_000
    # transactions
    transactional_id_expiration_ms: int = 604_800_000  # Kafka's transactional.id.expiration.ms (7 days)
    # topics
    auto_create_topics: bool = True
    default_partitions: int = 1
    topic_metadata_ttl_ms: int = 1000  # how long a gateway trusts its cached copy of a topic's metadata
    log_retention_check_interval_ms: int = 30_000  # how often a shard applies retention (Kafka's 300000)
    log_cleaner_backoff_ms: int = 15_000  # how often a shard compacts logs due a clean (Kafka's default)

    def endpoints(self) -> list[str]:
        """The ZeroMQ endpoint of every shard, in shard order."""
        if self.shard_endpoints:
            return [e.strip() for e in self.shard_endpoints.split(",") if e.strip()]
        run = self.run_dir()
        return [f"ipc://{run}/shard-{k}.sock" for k in range(self.shards)]

    def run_dir(self) -> Path:
        """Where ipc sockets live (a short path: ipc paths are limited to ~100 bytes)."""
        path = Path(self.data_dir).resolve() / "run"
        if len(str(path)) > 80:
            import hashlib
            import tempfile

            digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
            path = Path(tempfile.gettempdir()) / f"rafka-{digest}"
        return path


_BOOL = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _env(name: str, default: Any, kind: Any) -> Any:
    raw = os.environ.get(f"RAFKA_{name.upper()}")
    if raw is None:
        return default
    if kind is bool:
        return _BOOL.get(raw.strip().lower(), bool(raw))
    if kind is int:
        return int(raw)
    return raw


def load_file(path: str | None) -> dict[str, Any]:
    """Options from a TOML config file (keys as flag names, with - or _), or {}."""
    if not path:
        return {}
    import tomllib

    with open(path, "rb") as f:
        raw = tomllib.load(f)
    names = {f.name for f in dataclasses.fields(Config)}
    out = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in names:
            raise ValueError(f"{path}: unknown option {key!r}")
        out[name] = ",".join(value) if isinstance(value, list) else value
    return out


def config_path(argv: list[str] | None) -> str | None:
    """The ``--config`` file named in ``argv`` or ``RAFKA_CONFIG``."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=os.environ.get("RAFKA_CONFIG"))
    ns, _ = pre.parse_known_args(argv)
    return ns.config  # type: ignore[no-any-return]


def add_arguments(parser: argparse.ArgumentParser, only: set[str] | None = None,
                  file_values: dict[str, Any] | None = None) -> None:
    """Add a ``--flag`` for every config field (or those in ``only``).

    Precedence: flag > ``RAFKA_<NAME>`` > config file > built-in default.
    """
    file_values = file_values or {}
    hints = {f.name: f for f in dataclasses.fields(Config)}
    for name, f in hints.items():
        if only is not None and name not in only:
            continue
        default = f.default
        kind = type(default) if default is not None else str
        if name in ("advertised_port",):
            kind = int
        flag = "--" + name.replace("_", "-")
        env_default = _env(name, file_values.get(name, default), kind)
        if kind is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=env_default,
                                help=f"(env RAFKA_{name.upper()}, default {default})")
        else:
            parser.add_argument(flag, dest=name, type=kind, default=env_default,
                                help=f"(env RAFKA_{name.upper()}, default {default})")


POSITIVE = ("shards", "coordinator_partitions", "default_partitions", "log_retention_check_interval_ms",
            "log_cleaner_backoff_ms",
            "offsets_retention_check_interval_ms", "max_request_bytes", "max_inflight_per_connection",
            "transactional_id_expiration_ms")


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # what the gateway can serve


def sasl_mechanisms(cfg: Config) -> list[str]:
    """The SASL mechanisms ``--sasl-enabled-mechanisms`` names, in its order."""
    return [m.strip() for m in cfg.sasl_enabled_mechanisms.split(",") if m.strip()]


def problems(cfg: Config) -> list[str]:
    """What makes ``cfg`` unusable, as flag-named messages (empty when it is fine)."""
    found = [f"--{name.replace('_', '-')} must be positive, not {getattr(cfg, name)}"
             for name in POSITIVE if getattr(cfg, name) <= 0]
    if cfg.coordinator_partitions > 1024:  # producer ids carry the partition in 10 bits
        found.append(f"--coordinator-partitions must be at most 1024, not {cfg.coordinator_partitions}")
    if cfg.idle_poll_us < 0:
        found.append(f"--idle-poll-us must be 0 or more, not {cfg.idle_poll_us}")
    if cfg.fsync not in ("always", "batch", "never"):
        found.append(f"--fsync must be always, batch or never, not {cfg.fsync!r}")
    mechanisms = sasl_mechanisms(cfg)
    if not mechanisms or set(mechanisms) - set(SASL_MECHANISMS):
        found.append(f"--sasl-enabled-mechanisms must list some of {','.join(SASL_MECHANISMS)}, not "
                     f"{cfg.sasl_enabled_mechanisms!r}")
    if cfg.cluster_id is not None and not ids.is_cluster_id(cfg.cluster_id):
        found.append(f"--cluster-id must be a Kafka Uuid, 22 characters of URL-safe base64 (as kafka-storage "
                     f"random-uuid prints), not {cfg.cluster_id!r}")
    return found


def from_args(ns: argparse.Namespace) -> Config:
    """A Config from parsed arguments (unknown attributes ignored)."""
    names = {f.name for f in dataclasses.fields(Config)}
    return Config(**{k: v for k, v in vars(ns).items() if k in names})


def to_argv(cfg: Config) -> list[str]:
    """Flags that reproduce ``cfg`` for a child process."""
    argv: list[str] = []
    for f in dataclasses.fields(Config):
        value = getattr(cfg, f.name)
        if value is None:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + f.name.replace("_", "-"))
        else:
            argv += [flag, str(value)]
    return argv
