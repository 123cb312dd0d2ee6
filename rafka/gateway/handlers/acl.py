"""The ``authorized_operations`` bit fields of Metadata, DescribeCluster, DescribeGroups and
ConsumerGroupDescribe.

How this works: rafka has no ACLs; a client may do everything within its organisation.
Kafka without an authorizer answers, when the request asks for them, every operation
its ACLs support on that resource type (AclEntry.supportedOperations) as a bit field,
bit ``code`` set for each AclOperation code; when not asked it answers INT32_MIN.
"""

from __future__ import annotations

OMITTED = -(2**31)

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8  # AclOperation codes
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12


def _bits(*codes: int) -> int:
    return sum(1 << code for code in codes)


TOPIC = _bits(READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS)
GROUP = _bits(READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER = _bits(CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE)


def authorized(requested: object, operations: int) -> int:
    """``operations`` if the request asked for them, else Kafka's "not provided" value."""
    return operations if requested else OMITTED
