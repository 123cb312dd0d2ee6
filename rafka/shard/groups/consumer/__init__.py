"""KIP-848 consumer groups (the "consumer" group protocol): pure coordinator logic."""

from rafka.shard.groups.consumer.coordinator import ConsumerGroupCoordinator

__all__ = ["ConsumerGroupCoordinator"]
