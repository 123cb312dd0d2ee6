"""Stable identifiers and routing hashes.

How this works: routing must give the same answer in every process and across
restarts, so it never uses Python's salted ``hash()``. ``stable_hash`` is the first
8 bytes of BLAKE2b over the length-prefixed UTF-8 parts, read big-endian. A group
maps to ``stable_hash(org_id, group_id) % partitions`` (a coordinator partition) and a
coordinator partition to a shard by ``partition % shards``; a topic partition's log
is owned the same way through ``stable_hash(org_id, topic, str(partition))``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import urllib.parse
import uuid

DEFAULT_ORG = "default"
DEFAULT_COORDINATOR_PARTITIONS = 64
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})  # Kafka's Topic
PRODUCER_IDS_KEY = "\0producer-ids"  # the coordinator key an org's idempotent producer ids are allocated under


@functools.lru_cache(maxsize=16384)  # every op routes by one: a hit costs a tenth of the hash
def stable_hash(*parts: str) -> int:
    """A 64-bit hash of ``parts`` that never changes between processes or versions."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(4, "big"))
        h.update(data)
    return int.from_bytes(h.digest(), "big")


def coordinator_partition(org_id: str, key: str, partitions: int = DEFAULT_COORDINATOR_PARTITIONS) -> int:
    """The coordinator partition that owns group (or transactional id) ``key`` of ``org_id``."""
    return stable_hash(org_id, key) % partitions


def log_partition(org_id: str, topic: str, partition: int, partitions: int = DEFAULT_COORDINATOR_PARTITIONS) -> int:
    """The coordinator partition whose shard owns the log of ``topic``/``partition``."""
    return stable_hash(org_id, topic, str(partition)) % partitions


def shard_for_partition(partition: int, shards: int) -> int:
    """The static map from coordinator partition to shard."""
    return partition % shards


_RESERVED_UUIDS = frozenset({"AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ"})  # Kafka's ZERO_UUID, ONE_UUID
_PRINTED_UUID = re.compile(r"[A-Za-z0-9_-]{21}[AQgw]")  # 16 bytes: the last character carries two bits


def new_cluster_id() -> str:
    """A random cluster id as Kafka makes one (``Uuid.randomUuid().toString()``: 16 random bytes in
    22 characters of URL-safe base64, no padding, never a reserved id nor one starting with ``-``,
    which a command line would take for a flag)."""
    while not is_cluster_id(text := uuid_string(uuid.uuid4().bytes)):
        pass
    return text


def derived_cluster_id(*parts: str) -> str:
    """A cluster id that follows from ``parts`` (a gateway's shard endpoints): every gateway of a
    deployment that has no ``--cluster-id`` and no data directory of its own names the same one."""
    salt = 0
    while not is_cluster_id(text := uuid_string(hashlib.sha256("\0".join((*parts, str(salt))).encode()).digest()[:16])):
        salt += 1
    return text


def is_cluster_id(text: str) -> bool:
    """Whether ``text`` is a Kafka Uuid in its printed form, and one Kafka would make."""
    return bool(_PRINTED_UUID.fullmatch(text)) and not text.startswith("-") and text not in _RESERVED_UUIDS


def uuid_string(raw: bytes) -> str:
    """16 bytes as Kafka prints a Uuid (``Uuid.toString``: URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


MAX_DIR_NAME = 255  # bytes in one file name on Linux filesystems


def dir_name(name: str) -> str:
    """``name`` (an organisation or a topic) as one directory name: percent-encoded, so no ``/``
    or byte a filesystem refuses, and ``.`` and ``..`` encoded too, so neither names the directory
    itself or its parent (``urllib.parse.unquote`` gives the name back)."""
    quoted = urllib.parse.quote(name, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted

