"""Kafka error codes the gateway uses, and the mapping of rail failures to them."""

from __future__ import annotations

from enum import IntEnum

from rafka.gateway.router import ShardLoading, ShardUnavailable


class Err(IntEnum):
    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    NOT_ENOUGH_REPLICAS = 19
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_REQUEST = 42
    INVALID_PRODUCER_EPOCH = 47
    PRODUCER_FENCED = 90
    UNSUPPORTED_VERSION = 35
    INVALID_GROUP_ID = 24
    KAFKA_STORAGE_ERROR = 56
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    UNKNOWN_TOPIC_ID = 100
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def coordinator_error(exc: BaseException) -> int:
    """The retriable coordinator error for a failed call to a shard."""
    if isinstance(exc, ShardLoading):
        return Err.COORDINATOR_LOAD_IN_PROGRESS
    if isinstance(exc, ShardUnavailable):
        return Err.NOT_COORDINATOR
    return Err.UNKNOWN_SERVER_ERROR


def shard_down_error(exc: BaseException, retriable: int = Err.LEADER_NOT_AVAILABLE) -> int:
    """The error for a failed call to a shard: ``retriable`` when the shard is down or loading,
    UNKNOWN_SERVER_ERROR for anything else."""
    if isinstance(exc, ShardUnavailable):  # ShardLoading too
        return retriable
    return Err.UNKNOWN_SERVER_ERROR


def partition_error(exc: BaseException) -> int:
    """The retriable data-plane error for a failed call to a shard."""
    if isinstance(exc, ShardUnavailable):
        return Err.NOT_LEADER_OR_FOLLOWER
    return Err.UNKNOWN_SERVER_ERROR
