"""Gateway handlers, one module per area; importing this package registers them all."""

from rafka.gateway.handlers import (  # noqa: F401
    configs,
    consumer_groups,
    data,
    groups,
    kafka,
    replicas,
    sasl,
    topics,
    txn,
)
