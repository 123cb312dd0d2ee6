"""rafka — a Kafka-compatible consumer-group broker: gateway + shared-nothing shards."""

__version__ = "0.1.0"
