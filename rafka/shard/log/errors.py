"""Kafka error codes used by the topic catalogue and the partition logs.

Values are Kafka's (clients/.../protocol/Errors.java); an ``IntEnum`` packs as a
plain int through msgpack.
"""

from __future__ import annotations

from enum import IntEnum


class Errors(IntEnum):
    """The subset of Kafka error codes the log layer answers with."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    MESSAGE_TOO_LARGE = 10
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUIRED_ACKS = 21
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_RECORD = 87
    UNKNOWN_TOPIC_ID = 100
