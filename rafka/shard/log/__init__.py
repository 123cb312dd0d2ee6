"""Topic catalogue and partition logs: pure handlers plus ``replay``.

``TopicCatalog`` (topics.py) owns an org's topics; ``LogManager`` (manager.py)
owns a shard's partition logs (partition.py) and idempotent-producer state
(producers.py). Neither imports asyncio, zmq or telemetry; time comes in as
``now_ms``.
"""

from rafka.shard.log.config import LogConfig
from rafka.shard.log.errors import Errors
from rafka.shard.log.manager import LogManager, appended_partitions
from rafka.shard.log.partition import PartitionLog
from rafka.shard.log.topics import TopicCatalog, TopicInfo

__all__ = ["Errors", "LogConfig", "LogManager", "PartitionLog", "TopicCatalog", "TopicInfo", "appended_partitions"]
