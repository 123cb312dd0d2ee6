"""Classic consumer-group coordinator logic (pure: no I/O, no clock, no threads)."""

from rafka.shard.groups.coordinator import GroupCoordinator
from rafka.shard.groups.core import GroupConfig, Timer
from rafka.shard.groups.errors import Errors
from rafka.shard.groups.state import ClassicGroupState

__all__ = ["ClassicGroupState", "Errors", "GroupConfig", "GroupCoordinator", "Timer"]
