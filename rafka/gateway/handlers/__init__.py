"""Gateway handlers, one module per area; importing this package registers them all."""

from rafka.gateway.handlers import configs, consumer_groups, data, groups, kafka, sasl, topics, txn  # noqa: F401
